"""Round-to-nearest group-wise weight quantization (absmax symmetric or min/max asymmetric).

Bit widths: 8 (int8 / uint8), 4 (two levels per byte, split-half packing) and 3 (stored
unpacked, one level per int8 / uint8 byte, like 8-bit; the numerics are those of 3 bits).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from jaxpapers.quant._types import QuantizedArray

__all__ = ["SUPPORTED_BITS", "MAX_PACK_ROWS", "quantize", "dequantize", "levels",
           "pack_int4", "unpack_int4", "pack_rows_for"]

SUPPORTED_BITS = (3, 4, 8)
MAX_PACK_ROWS = 128


def pack_rows_for(group_size: int) -> int:
    """Rows per int4 packing tile: ``min(group_size, 128)``."""
    return min(group_size, MAX_PACK_ROWS)


def _check_concrete_finite(w: jax.Array) -> None:
    try:
        ok = bool(jnp.all(jnp.isfinite(w)))
    except jax.errors.ConcretizationTypeError:
        return  # traced: cannot check without breaking jit
    if not ok:
        raise ValueError("w contains NaN or inf; quantization needs finite weights")


def _validate(w: jax.Array, bits: int, group_size: int | None) -> int:
    if bits not in SUPPORTED_BITS:
        raise ValueError(f"bits must be one of {SUPPORTED_BITS}, got {bits!r}")
    if w.ndim != 2:
        raise ValueError(f"w must be 2-D [K, N], got shape {w.shape}")
    if not jnp.issubdtype(w.dtype, jnp.floating):
        raise TypeError(f"w must be a floating array, got dtype {w.dtype}")
    k = w.shape[0]
    g = k if group_size in (None, -1) else group_size
    if not isinstance(g, int) or g < 1 or k % g:
        raise ValueError(f"group_size must be a positive divisor of K={k} (or -1 for "
                         f"per-channel), got {group_size!r}")
    if bits == 4:
        if g % 2:
            raise ValueError(f"group_size must be even for 4-bit packing, got {g}")
        if g > MAX_PACK_ROWS and g % MAX_PACK_ROWS:
            raise ValueError(f"group_size > {MAX_PACK_ROWS} must be a multiple of {MAX_PACK_ROWS} "
                             f"for 4-bit packing, got {g}")
    return g


def pack_int4(levels: jax.Array, pack_rows: int) -> jax.Array:
    """Pack [K, N] 4-bit levels (0..15) into [K/2, N] uint8 with split-half tiles of P rows."""
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


def levels(q: QuantizedArray) -> jax.Array:
    """[K, N] int32 signed integer values ``level - zero`` (exact), so ``w = levels * scale``."""
    if q.bits != 4:  # 8 and 3 bits: one level per byte
        lv = q.data.astype(jnp.int32)
    else:
        lv = unpack_int4(q.data, q.pack_rows).astype(jnp.int32)
    if q.zeros is not None:
        return lv - jnp.repeat(q.zeros.astype(jnp.int32), q.group_size, axis=0)
    return lv - (8 if q.bits == 4 else 0)


def quantize(w: ArrayLike, *, bits: int, group_size: int | None, symmetric: bool = True,
             scale_dtype=None) -> QuantizedArray:
    """Quantize a [K, N] weight group-wise along K with round-to-nearest.

    Symmetric (absmax): ``s = max_g |w| / qmax`` with ``qmax = 2^(bits-1) - 1``,
    ``q = clip(round(w / s), -qmax, qmax)``. Asymmetric (min/max): ``lo = min(min_g w, 0)``,
    ``hi = max(max_g w, 0)``, ``s = (hi - lo) / (2^bits - 1)``, ``z = round(-lo / s)``,
    ``u = clip(round(w / s) + z, 0, 2^bits - 1)``. All-zero groups get ``s = 1``. Either way
    ``|w - dequantize(quantize(w))| <= s / 2`` elementwise.

    Args:
      w: [K, N] floating weight (groups run along K).
      bits: 3, 4 or 8 (3-bit levels are stored unpacked, one per byte).
      group_size: rows per group; must divide K; None or -1 for per-channel (one group of K).
      symmetric: absmax (True) or min/max with zero points (False).
      scale_dtype: dtype of the stored scales; default: ``w``'s dtype if it is a 16-bit float,
        else float32. Values are quantized with the *stored* (rounded) scale.

    Returns:
      A :class:`QuantizedArray`.

    >>> import jax.numpy as jnp
    >>> q = quantize(jnp.linspace(-1.0, 1.0, 8).reshape(4, 2), bits=8, group_size=2)
    >>> q.data.dtype, q.scales.shape
    (dtype('int8'), (2, 2))
    """
    w = jnp.asarray(w)
    g = _validate(w, bits, group_size)
    _check_concrete_finite(w)
    k, n = w.shape
    if scale_dtype is None:
        scale_dtype = w.dtype if w.dtype in (jnp.bfloat16, jnp.float16) else jnp.float32
    wf = w.astype(jnp.float32).reshape(k // g, g, n)
    tiny = math.sqrt(float(jnp.finfo(jnp.float32).tiny))
    if symmetric:
        qmax = 2 ** (bits - 1) - 1
        s = jnp.max(jnp.abs(wf), axis=1) / qmax
        s = jnp.where(s < tiny, 1.0, s).astype(scale_dtype)
        qv = jnp.clip(jnp.round(wf / s.astype(jnp.float32)[:, None]), -qmax, qmax)
        qv = qv.reshape(k, n)
        zeros = None
        lv = (qv + 8).astype(jnp.uint8) if bits == 4 else qv.astype(jnp.int8)
    else:
        top = 2 ** bits - 1
        lo = jnp.minimum(jnp.min(wf, axis=1), 0.0)
        hi = jnp.maximum(jnp.max(wf, axis=1), 0.0)
        s = (hi - lo) / top
        s = jnp.where(s < tiny, 1.0, s).astype(scale_dtype)
        sf = s.astype(jnp.float32)
        z = jnp.clip(jnp.round(-lo / sf), 0, top)
        uv = jnp.clip(jnp.round(wf / sf[:, None]) + z[:, None], 0, top).reshape(k, n)
        zeros = z.astype(jnp.uint8)
        lv = uv.astype(jnp.uint8)
    p = pack_rows_for(g) if bits == 4 else g
    data = pack_int4(lv, p) if bits == 4 else lv
    return QuantizedArray(data=data, scales=s, zeros=zeros, bits=bits, group_size=g,
                          pack_rows=p, shape=(k, n), dtype=jnp.dtype(w.dtype).name)


def dequantize(q: QuantizedArray, dtype=None) -> jax.Array:
    """[K, N] weights ``(level - zero) * scale`` in ``dtype`` (default: the original dtype).

    Computed in float32 (levels and zero points are exact small integers), then cast.
    """
    if not isinstance(q, QuantizedArray):
        raise TypeError(f"q must be a QuantizedArray, got {type(q).__name__}")
    scale = jnp.repeat(q.scales.astype(jnp.float32), q.group_size, axis=0)
    out = levels(q).astype(jnp.float32) * scale
    return out.astype(np.dtype(dtype or q.dtype))
