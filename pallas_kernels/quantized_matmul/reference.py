"""The definition of correct: dequantize, then dot with fp32 accumulation (pure jnp)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxpapers.quant import QuantizedArray, qdot

__all__ = ["quantized_matmul_reference"]


def quantized_matmul_reference(x: jax.Array, q: QuantizedArray, *,
                               activation_bits: int | None = None, out_dtype=None) -> jax.Array:
    """``x @ dequantize(q)`` in float32 (HIGHEST precision), cast to ``out_dtype``.

    With ``activation_bits=8`` the activations are quantized per token to int8 and each group's
    products are summed exactly in int32 before scaling (see :func:`jaxpapers.quant.qdot`).

    Args:
      x: [M, K] floating. q: [K, N] quantized weight.
    Returns:
      [M, N] in ``out_dtype`` (default ``x.dtype``).
    """
    return qdot(jnp.asarray(x), q, activation_bits=activation_bits, out_dtype=out_dtype)
