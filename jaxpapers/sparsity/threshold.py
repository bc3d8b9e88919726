"""Magnitude thresholds: the ``s``-quantile of ``|x|``, exactly as ``numpy.quantile`` computes it.

TEAL (and SPON after it) zeroes the entries of a linear layer's input whose magnitude is at or
below a threshold ``tau`` chosen so that a fraction ``s`` of the calibration activations is zero:
``tau = quantile(|x|, s)``. numpy's default ("linear") quantile of ``n`` sorted values ``v`` is
``v[i] + g (v[i+1] - v[i])`` with ``h = s (n - 1)``, ``i = floor(h)``, ``g = h - i`` (evaluated as
``v[i+1] - (v[i+1] - v[i]) (1 - g)`` when ``g >= 0.5``); :func:`magnitude_threshold` evaluates the
same expression on device, finding the two order statistics by a bisection over the floats' bit
patterns (one counting pass per bit, no sort: several times faster than ``jnp.sort`` on millions
of activations, and exact).

>>> import jax.numpy as jnp, numpy as np
>>> x = jnp.array([[-3.0, 0.5], [2.0, -1.0]])
>>> float(magnitude_threshold(x, 0.5)), float(np.quantile(np.abs(np.asarray(x)), 0.5))
(1.5, 1.5)
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxpapers.core import checks

__all__ = ["magnitude_threshold", "quantile_index"]


def _check_level(value: Any, name: str = "sparsity") -> None:
    if isinstance(value, bool):
        raise TypeError(f"{name} must be a float in [0, 1), got bool {value!r}")
    host = checks.concrete(value)
    if host is None:
        return
    if not np.issubdtype(np.asarray(host).dtype, np.number):
        raise TypeError(f"{name} must be a float in [0, 1), got {value!r}")
    host = np.asarray(host, np.float64)
    if np.isnan(host).any() or (host < 0).any() or (host >= 1).any():
        raise ValueError(f"{name} must be in [0, 1), got {value!r}")


def quantile_index(n: int, level: float) -> tuple[int, float]:
    """numpy's "linear" virtual index of the ``level``-quantile of ``n`` sorted values, in float64.

    Returns:
      ``(i, g)``: the quantile is ``v[i] + g (v[min(i + 1, n - 1)] - v[i])``.

    >>> quantile_index(5, 0.5), quantile_index(4, 0.5)
    ((2, 0.0), (1, 0.5))
    """
    n = checks.check_int("n", n, minimum=1)
    _check_level(level, "level")
    h = float(level) * (n - 1)
    i = min(int(math.floor(h)), n - 1)
    return i, h - i


def _lerp(a: jax.Array, b: jax.Array, g: jax.Array) -> jax.Array:
    """numpy's ``_lerp(a, b, g)``: ``a + (b - a) g``, or ``b - (b - a)(1 - g)`` when g >= 0.5."""
    g = jnp.asarray(g).astype(a.dtype)
    diff = b - a
    return jnp.where(g >= 0.5, b - diff * (1 - g), a + diff * g)


def _uint(dtype) -> Any:
    return {2: jnp.uint16, 4: jnp.uint32, 8: jnp.uint64}[jnp.dtype(dtype).itemsize]


def _order_statistic(a: jax.Array, k: jax.Array) -> jax.Array:
    """The ``k``-th smallest (0-based) of the non-negative, non-NaN values ``a`` [n].

    Non-negative IEEE floats order like their bit patterns read as unsigned integers, so a
    bisection over the bit pattern (one counting pass per bit) finds the exact value without
    sorting: the smallest pattern ``v`` with ``#{a <= v} >= k + 1``.
    """
    ut = _uint(a.dtype)
    bits = lax.bitcast_convert_type(a, ut)
    nbits = 8 * jnp.dtype(a.dtype).itemsize

    def body(_, lo_hi):
        lo, hi = lo_hi  # invariant: #{bits <= hi} >= k + 1, #{bits <= lo - 1} < k + 1
        mid = lo + (hi - lo) // 2
        ok = jnp.sum(bits <= mid) >= k + 1
        return jnp.where(ok, lo, mid + 1), jnp.where(ok, mid, hi)

    lo, hi = jnp.zeros((), ut), jnp.max(bits)
    _, hi = lax.fori_loop(0, nbits, body, (lo, hi))
    return lax.bitcast_convert_type(hi, a.dtype)


def _threshold_at(x: jax.Array, i: jax.Array, g: jax.Array) -> jax.Array:
    """numpy's linear quantile of ``|x|`` (all entries) at the virtual index ``(i, g)``.

    ``v[i]`` by bisection (:func:`_order_statistic`); ``v[i + 1]`` is ``v[i]`` again when it is
    repeated, else the smallest entry above it. Traced ``i``/``g`` are fine.
    """
    a = jnp.abs(x).reshape(-1)
    n = a.shape[0]
    i = jnp.asarray(i, jnp.int32)
    lo = _order_statistic(a, i)
    above = jnp.min(jnp.where(a > lo, a, jnp.asarray(jnp.inf, a.dtype)))
    repeated = jnp.sum(a <= lo) >= i + 2
    hi = jnp.where(repeated | (i + 1 >= n), lo, above)
    return _lerp(lo, hi, g)


def magnitude_threshold(x: jax.Array, sparsity: Any) -> jax.Array:
    """The ``sparsity``-quantile of ``|x|`` over all entries (numpy's default linear method).

    ``where(|x| > tau, x, 0)`` then zeroes a fraction ``sparsity`` of ``x`` (ties aside): TEAL's
    per-site threshold, the calibration step of SPON.

    Args:
      x: [...] floating activations (any shape, at least one entry).
      sparsity: the target fraction of zeros in [0, 1). A Python float (or any concrete value)
        gives numpy's result exactly in float64 arithmetic (the virtual index is computed on
        the host in float64, the interpolation in ``x``'s dtype); a traced ``sparsity`` computes
        the index on device in ``x``'s dtype (approximate for float32 ``x`` with millions of
        entries).

    Returns:
      [] in ``x``'s dtype.

    Raises:
      ValueError: ``sparsity`` outside [0, 1) or NaN, ``x`` empty or (when concrete) not finite.
      TypeError: ``x`` not floating point.
    """
    _check_level(sparsity)
    x = jnp.asarray(x)
    if not jnp.issubdtype(x.dtype, jnp.floating):
        raise TypeError(f"x must be floating point, got dtype {x.dtype}")
    if x.size == 0:
        raise ValueError("x must hold at least one entry")
    checks.check_finite("x", x)
    host = checks.concrete(sparsity)
    if host is not None:
        i, g = quantile_index(x.size, float(host))
        return _threshold_at(x, jnp.int32(i), g)
    h = jnp.asarray(sparsity).astype(x.dtype) * (x.size - 1)
    i = jnp.clip(jnp.floor(h).astype(jnp.int32), 0, x.size - 1)
    return _threshold_at(x, i, h - i.astype(x.dtype))
