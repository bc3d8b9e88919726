"""Monte Carlo estimates of the test loss over Haar draws (surrogate and full GD).

One draw (d = n = h, so ``X^T X = n I`` and the training problem equals its population form):
``W1, W2`` Haar on O(h); 2 layers: ``beta = Q_b / sqrt(h)`` with ``Q_b`` Haar; 3 layers:
``a, beta ~ N(0, I_h / h)``. Each draw is run for every rate pair (vmapped), draws are looped
with ``lax.map`` (optionally in batches): a fully vmapped float64 QR over hundreds of matrices is
slow on CPU, and sequential draws keep memory flat. All rate pairs share the same draws (common
random numbers), so differences along a curve are much more precise than the pointwise SE.
"""

from __future__ import annotations

import functools
import math
from typing import Literal

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from jaxpapers.core import checks, pytree
from jaxpapers.linear_nets import _checks
from jaxpapers.linear_nets import model

__all__ = ["MCEstimate", "draw_setting", "simulate", "mc_test_loss"]

Method = Literal["surrogate", "gd", "gap"]
_METHODS = ("surrogate", "gd", "gap")


@pytree.dataclass
class MCEstimate:
    """Monte Carlo mean and standard error.

    Letters: G the broadcast shape of the rates, S the number of steps.
    """

    mean: jax.Array  # [*G, S] mean test loss after steps 1..S
    se: jax.Array  # [*G, S] standard error of the mean (sample std / sqrt(num_draws))


def draw_setting(key: jax.Array, h: int, *, layers: int = 2) -> tuple[model.Params, jax.Array]:
    """One random setting with d = n = h: ``(params, beta)``; beta is [h, h] or [h, 1]."""
    k_w, k_b = jax.random.split(key)
    params = model.init_params(k_w, h, h, layers=layers)
    if layers == 2:
        beta = model.haar(k_b, h, h) / math.sqrt(h)
    else:
        beta = jax.random.normal(k_b, (h, 1), jnp.result_type(float)) / math.sqrt(h)
    return params, beta


def simulate(params: model.Params, beta: ArrayLike, eta1: ArrayLike, eta2: ArrayLike, *,
             steps: int, method: Literal["surrogate", "gd"] = "surrogate") -> jax.Array:
    """Test losses after steps 1..``steps`` of surrogate or full GD (unbatched).

    Args:
      params: initial weights (d = h, orthonormal data assumed, see module docstring).
      beta: target [h, k]. eta1, eta2: scalar rates.
      steps: number of steps (static). method: "surrogate" or "gd" (static).

    Returns:
      [steps] test losses.
    """
    step_fn = {"surrogate": model.surrogate_step, "gd": model.population_gd_step}[method]

    def body(p, _):
        p = step_fn(p, beta, eta1, eta2)
        return p, model.test_loss(p, beta)

    _, losses = jax.lax.scan(body, params, None, length=steps)
    return losses


@functools.partial(jax.jit, static_argnames=("h", "layers", "steps", "method", "num_draws",
                                             "batch_size"))
def _mc(key, eta1, eta2, *, h, layers, steps, method, num_draws, batch_size):
    e1, e2 = jnp.broadcast_arrays(eta1, eta2)
    shape = e1.shape
    e1, e2 = e1.ravel(), e2.ravel()

    def one_draw(k):
        params, beta = draw_setting(k, h, layers=layers)

        def run(m):
            return jax.vmap(lambda a, b: simulate(params, beta, a, b, steps=steps, method=m))(
                e1, e2)

        if method == "gap":
            return run("gd") - run("surrogate")
        return run(method)

    samples = jax.lax.map(one_draw, jax.random.split(key, num_draws), batch_size=batch_size)
    mean = jnp.mean(samples, axis=0)
    se = jnp.std(samples, axis=0, ddof=1) / math.sqrt(num_draws)
    return MCEstimate(mean.reshape(shape + (steps,)), se.reshape(shape + (steps,)))


def mc_test_loss(key: jax.Array, eta1: ArrayLike, eta2: ArrayLike, h: int, *, layers: int = 2,
                 steps: int = 1, method: Method = "surrogate", num_draws: int = 256,
                 batch_size: int | None = None) -> MCEstimate:
    """Monte Carlo mean and SE of the test loss after 1..``steps`` steps.

    Args:
      key: PRNG key, consumed (split into ``num_draws`` draws).
      eta1, eta2: rates, broadcastable arrays of shape G (scalars allowed).
      h: width = d = n (static int).
      layers: 2 or 3. steps: positive int.
      method: "surrogate" (signal-only updates), "gd" (exact full GD), or "gap" (full GD minus
        surrogate on the same draws).
      num_draws: number of independent settings (>= 2).
      batch_size: draws vmapped together inside ``lax.map`` (None: one at a time).

    Returns:
      :class:`MCEstimate` with ``mean``/``se`` of shape ``G + (steps,)``.
    """
    _checks.check_layers_steps(layers, steps, max_steps=None)
    h = _checks.check_int_width(h)
    _checks.check_rates(eta1=eta1, eta2=eta2)
    checks.check_choice("method", method, _METHODS)
    num_draws = checks.check_int("num_draws", num_draws, minimum=2)
    if batch_size is not None:
        batch_size = checks.check_int("batch_size", batch_size, minimum=1)
    dt = jnp.result_type(float)
    return _mc(key, jnp.asarray(eta1, dt), jnp.asarray(eta2, dt), h=h, layers=layers,
               steps=steps, method=method, num_draws=num_draws, batch_size=batch_size)
