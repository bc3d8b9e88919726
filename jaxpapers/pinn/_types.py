"""Types shared by the PINN modules: callable aliases and the problem container."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import jax
import numpy as np

__all__ = ["ScalarFn", "Problem"]

# u(x): one input point [d] -> a scalar [] (the unbatched network or an exact solution).
ScalarFn = Callable[[jax.Array], jax.Array]
# residuals(u, batch) -> {term: [N] or [N, m]} per-point residuals whose mean square is the loss.
ResidualsFn = Callable[[ScalarFn, Mapping[str, jax.Array]], dict[str, jax.Array]]
# sample(key, n) -> {name: [n_name, d]} collocation points.
SamplerFn = Callable[[jax.Array, int], dict[str, jax.Array]]


@dataclasses.dataclass(frozen=True, eq=False)
class Problem:
    """A PDE problem as data plus pure functions (not a pytree: it is closed over, never traced).

    Attributes:
      name: problem identifier (``"gradient_fit"``, ``"poisson"``, ...).
      dim: input dimension d (space, then time last for time-dependent problems).
      lower, upper: the box [lower, upper]^d of the domain (length-d tuples).
      residuals: ``residuals(u, batch) -> {term: r}`` with ``r`` of shape [N] or [N, m]; the loss
        of a term is the mean of ``r**2`` (summed over m).
      sample: ``sample(key, n) -> batch``, a dict of collocation arrays [n_k, d].
      eval_points: [E, d] float64 points where the reference solution is known.
      eval_values: [E] float64 reference solution at ``eval_points``.
      time_dependent: whether the last coordinate is time (enables causal weighting).
      exact: the closed-form solution ``u(x)`` ([d] -> []) when there is one, else None.
      info: free-form description (equation, parameters, reference solver).
    """

    name: str
    dim: int
    lower: tuple[float, ...]
    upper: tuple[float, ...]
    residuals: ResidualsFn
    sample: SamplerFn
    eval_points: np.ndarray  # [E, d]
    eval_values: np.ndarray  # [E]
    time_dependent: bool = False
    exact: ScalarFn | None = None
    info: Mapping[str, Any] = dataclasses.field(default_factory=dict)
