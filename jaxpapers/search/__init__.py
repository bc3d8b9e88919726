"""MuZero-style tree search in pure JAX (mctx calling convention) and RiskZero."""

from jaxpapers.search._types import (PolicyOutput, RecurrentFnOutput, RiskRecurrentFnOutput,
                                     RiskRootFnOutput, RootFnOutput)
from jaxpapers.search import risk
from jaxpapers.search.distributional import (RiskExtraData, risk_gumbel_muzero_policy,
                                             risk_muzero_policy, risk_search)
from jaxpapers.search.muzero import gumbel_muzero_policy, muzero_policy
from jaxpapers.search.search import search
from jaxpapers.search.tree import (Tree, qtransform_by_parent_and_siblings,
                                   qtransform_completed_by_mix_value)

__all__ = [
    "PolicyOutput", "RiskExtraData", "risk", "risk_gumbel_muzero_policy", "risk_muzero_policy",
    "risk_search", "RecurrentFnOutput", "RiskRecurrentFnOutput", "RiskRootFnOutput",
    "RootFnOutput", "Tree", "gumbel_muzero_policy", "muzero_policy",
    "qtransform_by_parent_and_siblings", "qtransform_completed_by_mix_value", "search",
]
