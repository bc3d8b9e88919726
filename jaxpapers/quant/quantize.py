"""Round-to-nearest group-wise weight quantization (absmax symmetric or min/max asymmetric).

Bit widths: 8 (int8 / uint8), 4 (two levels per byte, split-half packing) and 3 (stored
unpacked, one level per int8 / uint8 byte, like 8-bit; the numerics are those of 3 bits).

The storage layout and its numerics (packing, levels, dequantization) are defined once, in
:mod:`pallas_kernels.quantized_matmul.reference`; this module adapts :class:`QuantizedArray` to
those plain-array functions.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from jaxpapers.quant._types import QuantizedArray
from pallas_kernels.quantized_matmul import reference as _layout
from pallas_kernels.quantized_matmul.reference import (MAX_PACK_ROWS, SUPPORTED_BITS, pack_int4,
                                                       pack_rows_for, unpack_int4)

__all__ = ["SUPPORTED_BITS", "MAX_PACK_ROWS", "quantize", "dequantize", "levels",
           "pack_int4", "unpack_int4", "pack_rows_for"]


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


def _check_q(q) -> None:
    if not isinstance(q, QuantizedArray):
        raise TypeError(f"q must be a QuantizedArray, got {type(q).__name__}")


def _layout_kwargs(q: QuantizedArray) -> dict:
    """The static layout of ``q`` as the kernel folder's keyword arguments
    (``bits``, ``group_size``, ``pack_rows``)."""
    return dict(bits=q.bits, group_size=q.group_size, pack_rows=q.pack_rows)


def levels(q: QuantizedArray) -> jax.Array:
    """[K, N] int32 signed integer values ``level - zero`` (exact), so ``w = levels * scale``."""
    _check_q(q)
    return _layout.levels(q.data, q.zeros, **_layout_kwargs(q))


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
    _check_q(q)
    return _layout.dequantize(q.data, q.scales, q.zeros, **_layout_kwargs(q),
                              dtype=np.dtype(dtype or q.dtype))
