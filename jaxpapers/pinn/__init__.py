"""Physics-informed neural networks: forward-mode operators, deep PINN architectures (incl. the
coupling network of Meng, Shi & Pan, ICML 2026), PDE problems with reference solutions, training
and differential-propagation diagnostics."""

from jaxpapers.pinn._types import Problem, ScalarFn
from jaxpapers.pinn.diagnostics import (
    block_jacobian_singular_values,
    hidden_differential_norms,
    input_derivative_norms,
)
from jaxpapers.pinn.networks import (
    ARCHITECTURES,
    CoupledNet,
    CouplingBlock,
    Dense,
    MLP,
    ModifiedMLP,
    PirateNet,
    ResNet,
    apply_block,
    block_log_det,
    block_params,
    embed,
    hidden_states,
    make_network,
)
from jaxpapers.pinn.operators import (
    check_points,
    directional_derivative,
    gradient,
    laplacian,
    partial_derivative,
    time_derivative,
)
from jaxpapers.pinn.problems import PROBLEMS, make_problem
from jaxpapers.pinn.solvers import allen_cahn_split_step, burgers_cole_hopf
from jaxpapers.pinn.training import (
    WEIGHTINGS,
    causal_weights,
    grad_norm_weights,
    init_pinn_state,
    loss_terms,
    make_pinn_step,
    ntk_weights,
    relative_l2,
    train,
)

__all__ = [
    "ARCHITECTURES",
    "CoupledNet",
    "CouplingBlock",
    "Dense",
    "MLP",
    "ModifiedMLP",
    "PROBLEMS",
    "PirateNet",
    "Problem",
    "ResNet",
    "ScalarFn",
    "WEIGHTINGS",
    "allen_cahn_split_step",
    "apply_block",
    "block_jacobian_singular_values",
    "block_log_det",
    "block_params",
    "burgers_cole_hopf",
    "causal_weights",
    "check_points",
    "directional_derivative",
    "embed",
    "grad_norm_weights",
    "gradient",
    "hidden_differential_norms",
    "hidden_states",
    "init_pinn_state",
    "input_derivative_norms",
    "laplacian",
    "loss_terms",
    "make_network",
    "make_pinn_step",
    "make_problem",
    "ntk_weights",
    "partial_derivative",
    "relative_l2",
    "time_derivative",
    "train",
]
