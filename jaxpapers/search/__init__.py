"""MuZero-style tree search in pure JAX (mctx calling convention) and RiskZero.

Policies take ``(params, key, root, recurrent_fn, num_simulations, ...)`` in mctx's positional
order (mctx names the key ``rng_key``; here it is ``key``). Submodules: :mod:`.envs` (risk test
environments and their exact solutions), :mod:`.planning` (known-model planning), :mod:`.risk`
(utilities and quantile tools), :mod:`.riskzero` (RiskZero learning).
"""

from jaxpapers.search import envs, planning, risk, riskzero
from jaxpapers.search._search import (gumbel_muzero_interior_action_selection,
                                      gumbel_muzero_root_action_selection,
                                      muzero_action_selection, search)
from jaxpapers.search._types import (ChanceRecurrentFn, ChanceRecurrentFnOutput,
                                     DecisionRecurrentFn, DecisionRecurrentFnOutput,
                                     InteriorActionSelectionFn, LoopFn, PolicyOutput, RecurrentFn,
                                     RecurrentFnOutput, RecurrentState, RiskRecurrentFnOutput,
                                     RiskRootFnOutput, RootActionSelectionFn, RootFnOutput,
                                     StochasticRecurrentState)
from jaxpapers.search.distributional import (RiskExtraData, risk_gumbel_muzero_policy,
                                             risk_muzero_policy, risk_search)
from jaxpapers.search.envs import path_distribution
from jaxpapers.search.muzero import GumbelMuZeroExtraData, gumbel_muzero_policy, muzero_policy
from jaxpapers.search.stochastic import stochastic_muzero_policy
from jaxpapers.search.tree import (SearchSummary, Tree, qtransform_by_min_max,
                                   qtransform_by_parent_and_siblings,
                                   qtransform_completed_by_mix_value)

__all__ = [
    # policies and the generic search
    "muzero_policy", "gumbel_muzero_policy", "stochastic_muzero_policy", "search",
    "risk_muzero_policy", "risk_gumbel_muzero_policy", "risk_search",
    # action selection and Q-transforms (mctx names)
    "muzero_action_selection", "gumbel_muzero_root_action_selection",
    "gumbel_muzero_interior_action_selection", "qtransform_by_min_max",
    "qtransform_by_parent_and_siblings", "qtransform_completed_by_mix_value",
    # containers
    "RootFnOutput", "RecurrentFnOutput", "DecisionRecurrentFnOutput", "ChanceRecurrentFnOutput",
    "StochasticRecurrentState", "PolicyOutput", "Tree", "SearchSummary", "GumbelMuZeroExtraData",
    "RiskRootFnOutput", "RiskRecurrentFnOutput", "RiskExtraData",
    # callable types (mctx names)
    "RecurrentFn", "DecisionRecurrentFn", "ChanceRecurrentFn", "RecurrentState", "LoopFn",
    "RootActionSelectionFn", "InteriorActionSelectionFn",
    # RiskZero pieces used by experiments
    "envs", "planning", "risk", "riskzero", "path_distribution",
]
