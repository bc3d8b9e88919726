"""The weight layout and the definition of correct (pure jnp, fp32 accumulation).

Plain arrays only. A [K, N] weight quantized group-wise along K (the contraction axis) is
``data`` + ``scales`` [G, N] + ``zeros`` [G, N] or None, with static ints ``bits``, ``group_size``
(``G = K / group_size``) and ``pack_rows`` (P):

* ``bits == 8``: ``data`` [K, N] int8 two's-complement values ``q`` (symmetric) or uint8 levels
  ``u`` (asymmetric).
* ``bits == 4``: ``data`` [K/2, N] uint8, two 4-bit levels per byte, **split-half packing** in
  tiles of ``P`` rows: for tile ``t`` and ``0 <= i < P/2`` the byte at row ``t*P/2 + i`` holds row
  ``t*P + i`` in its low nibble and row ``t*P + P/2 + i`` in its high nibble (unpacking a tile
  needs only ``& 0xF`` and ``>> 4`` and yields two contiguous row blocks, which is what the kernel
  needs on Triton and Mosaic). Symmetric levels are stored offset by 8 (``u = q + 8``).
* ``bits == 3``: ``data`` [K, N] unpacked like 8 bits (int8 ``q`` in [-3, 3] or uint8 ``u`` in
  [0, 7]).

Dequantized value: ``w[k, n] = (level[k, n] - zero[g, n]) * scales[g, n]``, ``g = k // group_size``;
``zero`` is ``zeros[g, n]`` when given, else 8 for 4 bits and 0 otherwise.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["SUPPORTED_BITS", "MAX_PACK_ROWS", "pack_rows_for", "pack_int4", "unpack_int4",
           "levels", "dequantize", "quantize_activations", "quantized_matmul_reference"]

SUPPORTED_BITS = (3, 4, 8)
MAX_PACK_ROWS = 128


def pack_rows_for(group_size: int) -> int:
    """Rows per int4 packing tile: ``min(group_size, 128)``."""
    return min(group_size, MAX_PACK_ROWS)


def pack_int4(levels: jax.Array, pack_rows: int) -> jax.Array:
    """Pack [K, N] 4-bit levels (0..15) into [K/2, N] uint8 with split-half tiles of P rows.

    >>> import jax.numpy as jnp
    >>> lv = jnp.arange(8, dtype=jnp.uint8).reshape(4, 2)   # rows 0..3 of a P = 4 tile
    >>> pack_int4(lv, 4).tolist()                           # row i | row i + 2 << 4
    [[64, 81], [98, 115]]
    >>> bool((unpack_int4(pack_int4(lv, 4), 4) == lv).all())
    True
    """
    k, n = levels.shape
    p = pack_rows
    t = levels.astype(jnp.uint8).reshape(k // p, 2, p // 2, n)
    return (t[:, 0] | (t[:, 1] << 4)).reshape(k // 2, n)


def unpack_int4(packed: jax.Array, pack_rows: int) -> jax.Array:
    """Inverse of :func:`pack_int4`: [K/2, N] uint8 -> [K, N] uint8 levels."""
    k2, n = packed.shape
    p = pack_rows
    t = packed.reshape(k2 * 2 // p, 1, p // 2, n)
    return jnp.concatenate([t & 0xF, t >> 4], axis=1).reshape(k2 * 2, n)


def levels(data: jax.Array, zeros: jax.Array | None, *, bits: int, group_size: int,
           pack_rows: int | None = None) -> jax.Array:
    """[K, N] int32 signed integer values ``level - zero`` (exact), so ``w = levels * scale``."""
    if bits == 4:
        lv = unpack_int4(data, pack_rows or pack_rows_for(group_size)).astype(jnp.int32)
    else:  # 8 and 3 bits: one level per byte
        lv = data.astype(jnp.int32)
    if zeros is not None:
        return lv - jnp.repeat(zeros.astype(jnp.int32), group_size, axis=0)
    return lv - (8 if bits == 4 else 0)


def dequantize(data: jax.Array, scales: jax.Array, zeros: jax.Array | None, *, bits: int,
               group_size: int, pack_rows: int | None = None, dtype=jnp.float32) -> jax.Array:
    """[K, N] weights ``(level - zero) * scale`` in ``dtype``.

    Computed in float32 (levels and zero points are exact small integers), then cast.
    """
    scale = jnp.repeat(scales.astype(jnp.float32), group_size, axis=0)
    lv = levels(data, zeros, bits=bits, group_size=group_size, pack_rows=pack_rows)
    return (lv.astype(jnp.float32) * scale).astype(np.dtype(dtype))


def quantize_activations(x) -> tuple[jax.Array, jax.Array]:
    """Dynamic per-token symmetric int8 quantization of activations.

    Args:
      x: [..., K] floating activations (rows are tokens).

    Returns:
      ``(xq, xs)``: [..., K] int8 and [..., 1] float32 with ``x ~= xq * xs``,
      ``xs = max_k |x| / 127`` (1 for all-zero rows).
    """
    xf = jnp.asarray(x).astype(jnp.float32)
    xs = jnp.max(jnp.abs(xf), axis=-1, keepdims=True) / 127.0
    xs = jnp.where(xs > 0, xs, 1.0)
    xq = jnp.clip(jnp.round(xf / xs), -127, 127).astype(jnp.int8)
    return xq, xs


def quantized_matmul_reference(x: jax.Array, data: jax.Array, scales: jax.Array,
                               zeros: jax.Array | None = None, *, bits: int, group_size: int,
                               pack_rows: int | None = None, activation_bits: int | None = None,
                               out_dtype=None) -> jax.Array:
    """``x @ dequantize(...)`` with fp32 accumulation; the definition of correct.

    Args:
      x: [..., K] floating activations.
      data, scales, zeros, bits, group_size, pack_rows: the quantized [K, N] weight (module doc).
      activation_bits: None (weight-only: fp32 matmul at HIGHEST precision) or 8 (dynamic
        per-token int8 activations, :func:`quantize_activations`; per group
        ``sum_k xq[m, k] * level[k, n]`` accumulated exactly in int32, then scaled by
        ``xs[m] * scale[g, n]``: W8A8 / W4A8; needs ``level - zero`` to fit int8).
      out_dtype: result dtype (default ``x.dtype``).

    Returns:
      [..., N] in ``out_dtype``.
    """
    x = jnp.asarray(x)
    out_dtype = out_dtype or x.dtype
    layout = dict(bits=bits, group_size=group_size, pack_rows=pack_rows)
    if activation_bits is None:
        w = dequantize(data, scales, zeros, **layout)
        y = jnp.matmul(x.astype(jnp.float32), w, precision=jax.lax.Precision.HIGHEST)
        return y.astype(out_dtype)
    if activation_bits != 8:
        raise ValueError(f"activation_bits must be None or 8, got {activation_bits!r}")
    xq, xs = quantize_activations(x)
    k, n = scales.shape[0] * group_size, scales.shape[1]
    g = group_size
    lv = levels(data, zeros, **layout).astype(jnp.int8).reshape(k // g, g, n)
    xg = xq.reshape(*xq.shape[:-1], k // g, g)
    acc = jnp.einsum("...ag,agn->...an", xg, lv, preferred_element_type=jnp.int32)
    y = jnp.sum(acc.astype(jnp.float32) * scales.astype(jnp.float32), axis=-2) * xs
    return y.astype(out_dtype)
