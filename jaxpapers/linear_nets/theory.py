"""Closed-form expected test losses for layer-wise learning rates, and the optimal split.

Setting (d = n = h, noiseless, ``X^T X = n I``; see ``docs/derivations/layer_balancing.md``):

* 2 layers: ``f(x) = x W1 W2 / h``, ``W1, W2, Q_b`` Haar on O(h), ``beta = Q_b / sqrt(h)``.
* 3 layers: ``f(x) = x W1 W2 a / sqrt(h)``, ``W1, W2`` Haar, ``a, beta ~ N(0, I_h / h)``, ``a`` fixed.

The losses are expectations of ``E_x ||x (W1 W2 / h - beta)||^2`` (resp. its 3-layer analogue)
after one or two *signal-only surrogate* steps (the gradient with the ``W1 W2`` part of the
residual dropped)::

    2 layers:  W1 <- W1 + eta1 beta W2^T / h,          W2 <- W2 + eta2 W1^T beta / h
    3 layers:  W1 <- W1 + eta1 beta a^T W2^T / sqrt(h), W2 <- W2 + eta2 W1^T beta a^T / sqrt(h)

Everything here is exact at finite ``h`` (no large-h approximation); with ``s = eta1 + eta2`` and
``p = eta1 eta2``:

* 2 layers, 1 step: ``(1 - s/h^2)^2 + 1/h + 2p/h^5 + p^2/h^7``
* 2 layers, 2 steps: ``q^4/h + (2 s q/h^2 - 1)^2 + 16 p^2/h^7 + 8 q^2 p/h^5``, ``q = 1 + p/h^3``
* 3 layers: polynomials in ``u = s/h``, ``t = p/h`` and the chi-square moments
  ``m_k = E[(chi^2_h / h)^k] = prod_{j<k} (1 + 2j/h)`` (see :func:`expected_test_loss`).

The formulas of the official theory scripts are kept in :func:`official_expected_test_loss`.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from jaxpapers.core import checks
from jaxpapers.linear_nets import _checks

__all__ = [
    "expected_test_loss",
    "official_expected_test_loss",
    "leading_order_expected_test_loss",
    "fullgd_expected_test_loss_onestep",
    "optimal_split",
    "split_curvature_at_midpoint",
]


def _float(x: ArrayLike) -> jax.Array:
    # The default float dtype: float64 when x64 is enabled, float32 otherwise.
    return jnp.asarray(x, dtype=jnp.result_type(float))


def _chi2_moment(k: int, h: jax.Array) -> jax.Array:
    """``m_k = E[(chi^2_h / h)^k] = prod_{j=0}^{k-1} (1 + 2j/h)`` (``h`` may be a traced float)."""
    out = jnp.ones_like(h)
    for j in range(1, k):
        out = out * (1.0 + 2.0 * j / h)
    return out


def _prepare(eta1, eta2, h, layers, steps):
    _checks.check_layers_steps(layers, steps)
    _checks.check_rates(eta1=eta1, eta2=eta2)
    _checks.check_width(h)
    return _float(eta1), _float(eta2), _float(h)


def _two_layer(e1, e2, h, steps, *, cross: bool):
    # Units that keep every term O(1) at h ~ 1000 even in float32: u = s/h^2, v = p/h^3.
    u = (e1 + e2) / h**2
    v = e1 * e2 / h**3
    c = 1.0 if cross else 0.0
    if steps == 1:
        # ||M/h + (s/h^2 - 1) beta + p beta M^T beta / h^3||_F^2, E tr(O^2) = 1 for Haar O.
        return (1.0 - u) ** 2 + 1.0 / h + c * 2.0 * v / h**2 + v**2 / h
    q = 1.0 + v
    return q**4 / h + (2.0 * u * q - 1.0) ** 2 + 16.0 * v**2 / h + c * 8.0 * q**2 * v / h**2


def _three_layer(e1, e2, h, steps, *, exact: bool):
    u = (e1 + e2) / h
    t = e1 * e2 / h
    if exact:
        m2, m3, m4, m5 = (_chi2_moment(k, h) for k in (2, 3, 4, 5))
    else:
        m2 = m3 = m4 = m5 = jnp.ones_like(h)
    if steps == 1:
        # r = v/sqrt(h) + (s alpha/h - 1) beta + p alpha g beta / h^1.5, v = W1 W2 a.
        return (1.0 + 1.0 / h - 2.0 * u + u**2 * m2 + 2.0 * t * m2 / h**2
                + t**2 * m2 * m3 / h**2)
    # r = A v + C beta (see the derivation note), expectation term by term.
    t_a = (1.0 + 2.0 * t * m2 + t**2 * m2 * m3) / h
    t_cross = 2.0 * (5.0 * t * m2 + 6.0 * t**2 * m2 * m3 + t**3 * m3 * m4) / h**2
    t_c0 = (1.0 - 4.0 * u + 4.0 * u**2 * m2 - 4.0 * u * t * m2**2 + 8.0 * u**2 * t * m2 * m3
            + 4.0 * u**2 * t**2 * m3 * m4)
    t_c1 = (25.0 * t**2 * m2 * m3 + 10.0 * t**3 * m3 * m4 + t**4 * m4 * m5) / h**2
    return t_a + t_cross + t_c0 + t_c1


def expected_test_loss(eta1: ArrayLike, eta2: ArrayLike, h: ArrayLike, *, layers: int = 2,
                       steps: int = 1) -> jax.Array:
    """Exact expected test loss after ``steps`` surrogate GD steps with layer rates (eta1, eta2).

    Unbatched in the sense that ``eta1``, ``eta2``, ``h`` are scalars; they broadcast
    elementwise if given as arrays, and the function is differentiable and vmappable in all three
    (``h`` may be a traced float). Computed in the default float dtype: float64 when jax x64 is
    enabled (recommended), float32 otherwise (the formula is written in the scaled variables
    ``s/h^2, p/h^3`` (2 layers) and ``s/h, p/h`` (3 layers) so float32 neither overflows nor
    cancels catastrophically at h ~ 1000).

    2 layers (d = n = h), exact at finite h (``s = eta1 + eta2``, ``p = eta1 eta2``,
    ``q = 1 + p/h^3``)::

        steps=1: (1 - s/h^2)^2 + 1/h + 2p/h^5 + p^2/h^7
        steps=2: q^4/h + (2 s q / h^2 - 1)^2 + 16 p^2/h^7 + 8 q^2 p/h^5

    3 layers, exact at finite h, with ``u = s/h``, ``t = p/h``, ``m_k = prod_{j<k}(1 + 2j/h)``::

        steps=1: 1 + 1/h - 2u + m2 u^2 + 2 m2 t/h^2 + m2 m3 t^2/h^2
        steps=2: (1 + 2 m2 t + m2 m3 t^2)/h + 2 (5 m2 t + 6 m2 m3 t^2 + m3 m4 t^3)/h^2
                 + 1 - 4u + 4 m2 u^2 - 4 m2^2 u t + 8 m2 m3 u^2 t + 4 m3 m4 u^2 t^2
                 + (25 m2 m3 t^2 + 10 m3 m4 t^3 + m4 m5 t^4)/h^2

    Args:
      eta1: learning rate of W1, scalar (float).
      eta2: learning rate of W2, scalar (float).
      h: width (= d = n), positive scalar; may be a float.
      layers: 2 or 3 (static).
      steps: 1 or 2 (static).

    Returns:
      The expected test loss, a scalar (broadcast shape of the inputs) in the default float dtype.

    >>> import jax
    >>> with jax.enable_x64(True):
    ...     print(f"{float(expected_test_loss(2000.0, 0.0, 100.0)):.4f}")
    0.6500
    """
    e1, e2, hf = _prepare(eta1, eta2, h, layers, steps)
    if layers == 2:
        return _two_layer(e1, e2, hf, steps, cross=True)
    return _three_layer(e1, e2, hf, steps, exact=True)


def official_expected_test_loss(eta1: ArrayLike, eta2: ArrayLike, h: ArrayLike, *,
                                layers: int = 2, steps: int = 1) -> jax.Array:
    """The closed forms of the official theory scripts (kept for comparison; partly wrong).

    ``2-NN-Orthogonal-theory.py`` / ``3-NN-Orthogonal-theory.py``::

        2 layers, 1 step:  (1 - s/h^2)^2 + 1/h + p^2/h^7                      [misses +2p/h^5]
        2 layers, 2 steps: (1/h)(1 + p/h^3)^4 + 16p^2/h^7 + (2s(p + h^3)/h^5 - 1)^2
                           + (1 + p/h^3)^2 8p/h^5                              [exact]
        3 layers, 1 step:  (1 - s/h)^2 + 1/h + p^2/h^4             [misses +2p/h^3, O(1/h) terms]
        3 layers, 2 steps: (2s(h + p)/h^2 - 1)^2 + 1/h + 2p/h^2 + 10p/h^3 + 37p^2/h^4
                           + 12p^3/h^5 + p^4/h^6 + p^2/h^3                     [leading order]

    Args and returns as in :func:`expected_test_loss`.
    """
    e1, e2, hf = _prepare(eta1, eta2, h, layers, steps)
    if layers == 2:
        return _two_layer(e1, e2, hf, steps, cross=(steps == 2))
    u = (e1 + e2) / hf
    t = e1 * e2 / hf
    if steps == 1:
        return (1.0 - u) ** 2 + 1.0 / hf + t**2 / hf**2
    return _three_layer(e1, e2, hf, 2, exact=False)


def leading_order_expected_test_loss(eta1: ArrayLike, eta2: ArrayLike, h: ArrayLike, *,
                                     layers: int = 3, steps: int = 1) -> jax.Array:
    """3-layer losses with the chi-square moments ``m_k`` set to 1 (the large-h form).

    For ``steps=2`` this equals the official formula; for ``steps=1`` it is the official one plus
    the cross term ``2p/h^3``. For ``layers=2`` it is :func:`expected_test_loss` (already exact
    with no moment corrections). Args and returns as in :func:`expected_test_loss`.
    """
    e1, e2, hf = _prepare(eta1, eta2, h, layers, steps)
    if layers == 2:
        return _two_layer(e1, e2, hf, steps, cross=True)
    return _three_layer(e1, e2, hf, steps, exact=False)


def fullgd_expected_test_loss_onestep(eta1: ArrayLike, eta2: ArrayLike,
                                      h: ArrayLike) -> jax.Array:
    """Exact expected test loss after one *full* GD step, 2 layers, d = n = h.

    Full GD keeps the shrinkage ``W1 (1 - eta1/h^2)``, ``W2 (1 - eta2/h^2)``; with
    ``k_i = 1 - eta_i/h^2`` and ``s' = k1 eta2 + k2 eta1``::

        k1^2 k2^2 / h + (s'/h^2 - 1)^2 + 2 k1 k2 p / h^5 + p^2 / h^7

    Args and returns as in :func:`expected_test_loss` (2 layers, 1 step).
    """
    e1, e2, hf = _prepare(eta1, eta2, h, 2, 1)
    k1 = 1.0 - e1 / hf**2
    k2 = 1.0 - e2 / hf**2
    v = e1 * e2 / hf**3
    return ((k1 * k2) ** 2 / hf + ((k1 * e2 + k2 * e1) / hf**2 - 1.0) ** 2
            + 2.0 * k1 * k2 * v / hf**2 + v**2 / hf)


def _loss_of_split(x, h, budget, layers, steps, fn):
    return fn(x * budget, (1.0 - x) * budget, h, layers=layers, steps=steps)


def split_curvature_at_midpoint(h: ArrayLike, budget: ArrayLike, *, layers: int = 2,
                                steps: int = 1, official: bool = False) -> jax.Array:
    """Second derivative of the loss along the split ``x = eta1 / s`` at ``x = 1/2``, fixed ``s``.

    Negative: equal rates are a local maximum; positive: a local minimum. Computed with
    ``jax.hessian`` of the closed form (``official=True`` uses the official formulas).

    Args:
      h: width, scalar. budget: ``s = eta1 + eta2``, scalar.
      layers, steps: as in :func:`expected_test_loss`.
      official: use :func:`official_expected_test_loss` instead.

    Returns:
      ``d^2 L / dx^2`` at ``x = 1/2`` (scalar).
    """
    _checks.check_layers_steps(layers, steps)
    _checks.check_width(h)
    _checks.check_rates(budget=budget)
    return _curvature_impl(_float(h), _float(budget), layers=layers, steps=steps,
                           official=official)


@functools.partial(jax.jit, static_argnames=("layers", "steps", "official"))
def _curvature_impl(hf, b, *, layers, steps, official):
    fn = official_expected_test_loss if official else expected_test_loss
    return jax.hessian(_loss_of_split)(jnp.asarray(0.5, hf.dtype), hf, b, layers, steps, fn)


def optimal_split(h: ArrayLike, budget: ArrayLike, *, layers: int = 2, steps: int = 1,
                  official: bool = False, grid_size: int = 1025, newton_steps: int = 8
                  ) -> jax.Array:
    """The fraction ``x = eta1 / (eta1 + eta2)`` in [0, 1] minimising the loss at fixed budget.

    A dense grid argmin (``grid_size`` points; ties go to the smallest ``x``, so a symmetric
    boundary optimum is reported as 0) followed by ``newton_steps`` safeguarded Newton steps on
    ``x -> L(x s, (1 - x) s)`` using ``jax.grad`` / ``jax.hessian``: a step is taken only where the
    curvature is positive, the iterate is clipped to [0, 1], and a step is kept only if the loss
    does not increase. Jittable in ``h`` and ``budget``.

    Args:
      h: width, scalar (float allowed).
      budget: ``s = eta1 + eta2 >= 0``, scalar.
      layers, steps: as in :func:`expected_test_loss` (static).
      official: use the official formulas.
      grid_size, newton_steps: static resolution controls.

    Returns:
      The minimising fraction, a scalar in [0, 1].

    >>> import jax
    >>> with jax.enable_x64(True):
    ...     print(round(float(optimal_split(1000.0, 2 * 1000.0**1.25, steps=2)), 6))
    0.5
    """
    _checks.check_layers_steps(layers, steps)
    _checks.check_width(h)
    _checks.check_rates(budget=budget)
    grid_size = checks.check_int("grid_size", grid_size, minimum=2)
    newton_steps = checks.check_int("newton_steps", newton_steps, minimum=0)
    return _optimal_split_impl(_float(h), _float(budget), layers=layers, steps=steps,
                               official=official, grid_size=grid_size,
                               newton_steps=newton_steps)


@functools.partial(jax.jit, static_argnames=("layers", "steps", "official", "grid_size",
                                             "newton_steps"))
def _optimal_split_impl(hf, b, *, layers, steps, official, grid_size, newton_steps):
    fn = official_expected_test_loss if official else expected_test_loss

    def f(x):
        return _loss_of_split(x, hf, b, layers, steps, fn)

    grid = jnp.linspace(0.0, 1.0, grid_size, dtype=hf.dtype)
    x0 = grid[jnp.argmin(jax.vmap(f)(grid))]
    g_fn, h_fn = jax.grad(f), jax.hessian(f)

    def newton(_, x):
        g, curv = g_fn(x), h_fn(x)
        step = jnp.where(curv > 0, -g / jnp.where(curv > 0, curv, 1.0), 0.0)
        x_new = jnp.clip(x + step, 0.0, 1.0)
        return jnp.where(f(x_new) <= f(x), x_new, x)

    return jax.lax.fori_loop(0, newton_steps, newton, x0)
