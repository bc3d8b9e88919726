"""Quantized matmuls, dynamic int8 activations, and a dense layer.

One op, :func:`pallas_kernels.quantized_matmul.quantized_matmul`, defines the numerics; these
functions adapt a :class:`QuantizedArray` to its plain-array interface. :func:`qdot` is its
``implementation="xla"`` path.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from jaxpapers.quant._types import QuantizedArray
from jaxpapers.quant.quantize import _check_q, _layout_kwargs
from pallas_kernels._common import Implementation, check_implementation
from pallas_kernels.quantized_matmul import quantize_activations, quantized_matmul

__all__ = ["quantize_activations", "qdot", "matmul", "dense"]


def _quantized(x: ArrayLike, q: QuantizedArray, implementation: Implementation, **kw) -> jax.Array:
    _check_q(q)
    return quantized_matmul(x, q.data, q.scales, q.zeros, **_layout_kwargs(q),
                            implementation=implementation, **kw)


def qdot(x: ArrayLike, q: QuantizedArray, *, activation_bits: int | None = None,
         out_dtype=None) -> jax.Array:
    """``x @ dequantize(q)`` on the XLA path (``quantized_matmul(..., implementation="xla")``).

    Args:
      x: [..., K] floating activations.
      q: a [K, N] :class:`QuantizedArray`.
      activation_bits: None (weight-only, fp32 accumulation) or 8 (dynamic per-token int8
        activations; per group, ``sum_k xq[m, k] * level[k, n]`` accumulated exactly in int32,
        then scaled by ``xs[m] * scale[g, n]``: W8A8 / W4A8; gradients to ``x`` by the
        straight-through estimator).
      out_dtype: result dtype (default ``x.dtype``).

    Returns:
      [..., N] in ``out_dtype``.
    """
    return _quantized(x, q, "xla", activation_bits=activation_bits, out_dtype=out_dtype)


def matmul(x: ArrayLike, w: ArrayLike | QuantizedArray, *,
           implementation: Implementation = "xla", **kw) -> jax.Array:
    """``x @ w`` for a float ``w`` or a :class:`QuantizedArray` (so model code runs either way).

    Args:
      x: [..., K] activations. w: [K, N] float array or quantized weight.
      implementation: for quantized ``w``: ``"xla"`` (:func:`qdot`), ``"pallas"`` (the kernel in
        ``pallas_kernels.quantized_matmul``; raises if it cannot run here) or ``"auto"`` (the
        compiled kernel where it can run, else XLA with a warning). Ignored for a float ``w``
        (but still checked).
      **kw: passed on for quantized ``w`` (e.g. ``activation_bits=8``, ``block_sizes``).
    """
    check_implementation(implementation)
    if isinstance(w, QuantizedArray):
        return _quantized(x, w, implementation, **kw)
    return jnp.matmul(x, w)


def dense(x: ArrayLike, kernel: ArrayLike | QuantizedArray, bias: ArrayLike | None = None,
          **kw) -> jax.Array:
    """A dense layer ``x @ kernel + bias`` with a float or quantized [K, N] kernel."""
    y = matmul(x, kernel, **kw)
    return y if bias is None else y + jnp.asarray(bias, y.dtype)
