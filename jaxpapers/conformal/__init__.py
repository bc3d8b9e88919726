"""Conformal prediction: split CP and RSA-CP (Random Score Alignment, ICML 2026)."""

from jaxpapers.conformal._types import RSACPState
from jaxpapers.conformal.references import gamma_reference, generator_reference, normal_reference
from jaxpapers.conformal.rsacp import (
    barycentric_ot_nodes,
    betabinomial_quantiles,
    rsacp_calibrate,
    rsacp_coverage_lower_bound,
    rsacp_half_width,
    rsacp_half_width_grid,
    rsacp_include,
    rsacp_map,
    rsacp_prediction_set,
)
from jaxpapers.conformal.scores import (
    abs_residual_score,
    aps_all_scores,
    aps_score,
    cqr_score,
    lac_all_scores,
    lac_score,
)
from jaxpapers.conformal.split import (
    conformal_rank,
    split_conformal_interval,
    split_conformal_quantile,
)

__all__ = [
    "RSACPState",
    "abs_residual_score",
    "aps_all_scores",
    "aps_score",
    "barycentric_ot_nodes",
    "betabinomial_quantiles",
    "conformal_rank",
    "cqr_score",
    "gamma_reference",
    "generator_reference",
    "lac_all_scores",
    "lac_score",
    "normal_reference",
    "rsacp_calibrate",
    "rsacp_coverage_lower_bound",
    "rsacp_half_width",
    "rsacp_half_width_grid",
    "rsacp_include",
    "rsacp_map",
    "rsacp_prediction_set",
    "split_conformal_interval",
    "split_conformal_quantile",
]
