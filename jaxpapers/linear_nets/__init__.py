"""Layer-wise learning rates in deep linear networks (Layer-Balancing, ICML 2026)."""

from jaxpapers.linear_nets.model import (
    effective_matrix,
    forward,
    gd_step,
    gradients,
    haar,
    init_params,
    loss,
    population_gd_step,
    population_loss,
    sample_problem,
    surrogate_step,
    test_loss,
)
from jaxpapers.linear_nets.montecarlo import MCEstimate, draw_setting, mc_test_loss, simulate
from jaxpapers.linear_nets.optim import per_layer, per_layer_sgd
from jaxpapers.linear_nets.theory import (
    expected_test_loss,
    fullgd_expected_test_loss_onestep,
    leading_order_expected_test_loss,
    official_expected_test_loss,
    optimal_split,
    split_curvature_at_midpoint,
)

__all__ = [
    "MCEstimate",
    "draw_setting",
    "effective_matrix",
    "expected_test_loss",
    "forward",
    "fullgd_expected_test_loss_onestep",
    "gd_step",
    "gradients",
    "haar",
    "init_params",
    "leading_order_expected_test_loss",
    "loss",
    "mc_test_loss",
    "official_expected_test_loss",
    "optimal_split",
    "per_layer",
    "per_layer_sgd",
    "population_gd_step",
    "population_loss",
    "sample_problem",
    "simulate",
    "split_curvature_at_midpoint",
    "surrogate_step",
    "test_loss",
]
