"""Quantized matmuls on the XLA path, dynamic int8 activations, and a dense layer."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from jaxpapers.quant._types import QuantizedArray
from jaxpapers.quant.quantize import dequantize, levels

__all__ = ["quantize_activations", "qdot", "matmul", "dense"]


def quantize_activations(x: ArrayLike) -> tuple[jax.Array, jax.Array]:
    """Dynamic per-token symmetric int8 quantization of activations.

    Args:
      x: [..., K] floating activations (rows are tokens).

    Returns:
      ``(xq, xs)``: [..., K] int8 and [..., 1] float32 with ``x ~= xq * xs``,
      ``xs = max_k |x| / 127`` (1 for all-zero rows).
    """
    x = jnp.asarray(x)
    xf = x.astype(jnp.float32)
    xs = jnp.max(jnp.abs(xf), axis=-1, keepdims=True) / 127.0
    xs = jnp.where(xs > 0, xs, 1.0)
    xq = jnp.clip(jnp.round(xf / xs), -127, 127).astype(jnp.int8)
    return xq, xs


def _check(x: jax.Array, q: QuantizedArray) -> None:
    if not isinstance(q, QuantizedArray):
        raise TypeError(f"q must be a QuantizedArray, got {type(q).__name__}")
    if x.shape[-1] != q.shape[0]:
        raise ValueError(f"x has {x.shape[-1]} features but q has K={q.shape[0]} rows")
    if not jnp.issubdtype(x.dtype, jnp.floating):
        raise TypeError(f"x must be floating, got dtype {x.dtype}")


def qdot(x: ArrayLike, q: QuantizedArray, *, activation_bits: int | None = None,
         out_dtype=None) -> jax.Array:
    """``x @ dequantize(q)`` on the XLA path (the reference semantics of the kernels).

    Args:
      x: [..., K] floating activations.
      q: a [K, N] :class:`QuantizedArray`.
      activation_bits: None (weight-only, fp32 accumulation) or 8 (dynamic per-token int8
        activations; per group, ``sum_k xq[m, k] * level[k, n]`` accumulated exactly in int32,
        then scaled by ``xs[m] * scale[g, n]``: W8A8 / W4A8).
      out_dtype: result dtype (default ``x.dtype``).

    Returns:
      [..., N] in ``out_dtype``.
    """
    x = jnp.asarray(x)
    _check(x, q)
    out_dtype = out_dtype or x.dtype
    if activation_bits is None:
        w = dequantize(q, jnp.float32)
        y = jnp.matmul(x.astype(jnp.float32), w, precision=jax.lax.Precision.HIGHEST)
        return y.astype(out_dtype)
    if activation_bits != 8:
        raise ValueError(f"activation_bits must be None or 8, got {activation_bits!r}")
    if q.bits == 8 and not q.symmetric:
        raise ValueError("activation_bits=8 needs symmetric 8-bit weights (asymmetric levels "
                         "minus zero points do not fit int8)")
    xq, xs = quantize_activations(x)
    g, k, n = q.group_size, q.shape[0], q.shape[1]
    lv = levels(q).astype(jnp.int8).reshape(k // g, g, n)
    xg = xq.reshape(*xq.shape[:-1], k // g, g)
    acc = jnp.einsum("...ag,agn->...an", xg, lv, preferred_element_type=jnp.int32)
    y = jnp.sum(acc.astype(jnp.float32) * q.scales.astype(jnp.float32), axis=-2) * xs
    return y.astype(out_dtype)


def matmul(x: ArrayLike, w: ArrayLike | QuantizedArray, *, implementation: str = "xla",
           **kw) -> jax.Array:
    """``x @ w`` for a float ``w`` or a :class:`QuantizedArray` (so model code runs either way).

    Args:
      x: [..., K] activations. w: [K, N] float array or quantized weight.
      implementation: for quantized ``w``: ``"xla"`` (:func:`qdot`) or ``"pallas"`` / ``"auto"``
        (the kernel in ``pallas_kernels.quantized_matmul``).
      **kw: passed on for quantized ``w`` (e.g. ``activation_bits=8``).
    """
    if isinstance(w, QuantizedArray):
        if implementation == "xla":
            return qdot(x, w, **kw)
        from pallas_kernels.quantized_matmul import quantized_matmul  # lazy: optional hot path

        return quantized_matmul(x, w, implementation=implementation, **kw)
    return jnp.matmul(x, w)


def dense(x: ArrayLike, kernel: ArrayLike | QuantizedArray, bias: ArrayLike | None = None,
          **kw) -> jax.Array:
    """A dense layer ``x @ kernel + bias`` with a float or quantized [K, N] kernel."""
    y = matmul(x, kernel, **kw)
    return y if bias is None else y + jnp.asarray(bias, y.dtype)
