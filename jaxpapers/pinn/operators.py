"""Differential operators of a scalar function by batched forward mode (``jvp``, jvp-of-jvp).

Every operator takes ``fn: [d] -> []`` (unbatched, e.g. a network closed over its parameters)
and points ``x`` of shape [B, d], and returns one value per point. The derivatives are
forward-mode: a gradient is d jvps along the basis vectors (one ``linearize`` per point), a second
derivative d^2 f / dx_i dx_j is a jvp (along e_j) of a jvp (along e_i). For the small input
dimensions of PINNs this is cheaper than reverse mode and much cheaper than ``vmap(hessian)``
(which builds the full d x d Hessian by forward-over-reverse).

>>> import jax.numpy as jnp
>>> f = lambda z: z[0] ** 2 * z[1]
>>> x = jnp.array([[1.0, 2.0], [3.0, -1.0]])
>>> laplacian(f, x)  # 2 z1
Array([ 4., -2.], dtype=float32)
>>> gradient(f, x)  # [2 z0 z1, z0^2]
Array([[ 4.,  1.],
       [-6.,  9.]], dtype=float32)
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp

from jaxpapers.core import checks
from jaxpapers.pinn._types import ScalarFn

__all__ = ["check_points", "gradient", "laplacian", "partial_derivative", "time_derivative",
           "directional_derivative"]


def check_points(x: jax.typing.ArrayLike, name: str = "x", dim: int | None = None) -> jax.Array:
    """Validate collocation points: shape [B, d] (d == ``dim`` if given), floating, no NaN.

    The NaN check runs only on concrete arrays (it is skipped under ``jit``, where values are
    unknown); shapes are always checked.

    Raises:
      ValueError: naming ``name`` when the shape, dtype or values are wrong.
    """
    arr = x if checks.is_tracer(x) else jnp.asarray(x)
    if arr.ndim != 2:
        raise ValueError(f"{name} must have shape [B, d], got shape {tuple(arr.shape)}")
    if dim is not None and arr.shape[1] != dim:
        raise ValueError(f"{name} must have {dim} columns (the problem dimension), "
                         f"got shape {tuple(arr.shape)}")
    if not jnp.issubdtype(arr.dtype, jnp.floating):
        raise ValueError(f"{name} must be floating point, got dtype {arr.dtype}")
    checks.check_finite(name, arr)
    return arr


def _basis(d: int, dtype) -> jax.Array:
    return jnp.eye(d, dtype=dtype)


def gradient(fn: ScalarFn, x: jax.typing.ArrayLike) -> jax.Array:
    """Gradient of ``fn`` at each point, by d forward-mode jvps.

    Args:
      fn: scalar function of one point, [d] -> [].
      x: [B, d] points.

    Returns:
      [B, d] with ``out[b, i] = d fn / d x_i (x[b])``.
    """
    x = check_points(x)
    eye = _basis(x.shape[1], x.dtype)
    # One batched jvp per input coordinate (a Python loop over the small, static d): measured
    # faster to run and to compile on CPU than vmapping over the basis or ``linearize``.
    cols = [jax.vmap(lambda xi, e=e: jax.jvp(fn, (xi,), (e,))[1])(x) for e in eye]
    return jnp.stack(cols, axis=-1)


def directional_derivative(fn: ScalarFn, x: jax.typing.ArrayLike,
                           v: jax.typing.ArrayLike) -> jax.Array:
    """``<grad fn(x_b), v_b>`` per point by one jvp; x and v are [B, d]; returns [B]."""
    x = check_points(x)
    v = jnp.broadcast_to(jnp.asarray(v, x.dtype), x.shape)
    return jax.vmap(lambda xi, vi: jax.jvp(fn, (xi,), (vi,))[1])(x, v)


def _second_along(fn: ScalarFn, xi: jax.Array, e1: jax.Array, e2: jax.Array) -> jax.Array:
    """d^2 fn / (de1 de2) at one point: a jvp along e2 of the jvp along e1."""
    first = lambda z: jax.jvp(fn, (z,), (e1,))[1]
    return jax.jvp(first, (xi,), (e2,))[1]


def laplacian(fn: ScalarFn, x: jax.typing.ArrayLike) -> jax.Array:
    """Laplacian ``sum_i d^2 fn / d x_i^2`` at each point, by jvp-of-jvp along each basis vector.

    Args:
      fn: scalar function of one point, [d] -> [].
      x: [B, d] points.

    Returns:
      [B] Laplacians.

    >>> import jax.numpy as jnp
    >>> laplacian(lambda z: jnp.sum(z ** 3), jnp.array([[1.0, 2.0, 0.5]]))  # 6 * sum(z)
    Array([21.], dtype=float32)
    """
    x = check_points(x)
    eye = _basis(x.shape[1], x.dtype)
    terms = [jax.vmap(lambda xi, e=e: _second_along(fn, xi, e, e))(x) for e in eye]
    return sum(terms[1:], terms[0])


def partial_derivative(fn: ScalarFn, x: jax.typing.ArrayLike, axes: Sequence[int]) -> jax.Array:
    """Mixed partial ``d^k fn / (d x_{a1} ... d x_{ak})`` at each point by k nested jvps.

    Args:
      fn: scalar function of one point, [d] -> [].
      x: [B, d] points.
      axes: the k input coordinates to differentiate along, in any order (k >= 1);
        e.g. ``(0, 0, 1)`` is u_xxy.

    Returns:
      [B] values.

    Raises:
      ValueError: ``axes`` empty or out of range.
    """
    x = check_points(x)
    d = x.shape[1]
    axes = tuple(int(a) for a in axes)
    if not axes or any(not -d <= a < d for a in axes):
        raise ValueError(f"axes must be a non-empty sequence of indices in [-{d}, {d}), got {axes}")
    eye = _basis(d, x.dtype)
    g = fn
    for a in axes:
        g = (lambda h, e: (lambda z: jax.jvp(h, (z,), (e,))[1]))(g, eye[a])
    return jax.vmap(g)(x)


def time_derivative(fn: ScalarFn, x: jax.typing.ArrayLike, *, order: int = 1,
                    time_axis: int = -1) -> jax.Array:
    """``d^order fn / dt^order`` at each point, time being coordinate ``time_axis`` (last)."""
    order = checks.check_int("order", order, minimum=1)
    return partial_derivative(fn, x, (time_axis,) * order)
