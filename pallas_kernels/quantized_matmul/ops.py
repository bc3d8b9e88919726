"""Public op with ``custom_vjp``: gradients w.r.t. ``x`` (a bare ``pallas_call`` has no VJP)."""

from __future__ import annotations

import functools
import logging
import math
import warnings

import jax
import jax.numpy as jnp
import numpy as np

from jaxpapers.quant import QuantizedArray, dequantize
from jaxpapers.quant.ops import quantize_activations
from pallas_kernels.quantized_matmul.kernel import BlockSizes, quantized_matmul_kernel_call
from pallas_kernels.quantized_matmul.reference import quantized_matmul_reference

__all__ = ["quantized_matmul", "choose_block_k", "IMPLEMENTATIONS"]

IMPLEMENTATIONS = ("auto", "xla", "pallas")
_log = logging.getLogger(__name__)


def _pow2_ceil(v: int) -> int:
    return 1 << max(0, (v - 1).bit_length())


def choose_block_k(k_per_split: int, group_size: int, tile: int, preferred: int) -> int:
    """Largest bk <= max(preferred, tile) with: tile | bk, bk | k_per_split, and bk | group_size
    or group_size | bk."""
    best = None
    for bk in range(tile, max(preferred, tile) + 1, tile):
        if k_per_split % bk == 0 and (group_size % bk == 0 or bk % group_size == 0):
            best = bk
    if best is None:
        raise ValueError(f"no K block fits K/split={k_per_split}, group_size={group_size}, "
                         f"tile={tile}")
    return best


def _layout(q: QuantizedArray, block_k: int, split_k: int) -> tuple[int, int]:
    k = q.shape[0]
    if k % split_k or (k // split_k) % (q.pack_rows if q.bits == 4 else 1):
        raise ValueError(f"split_k={split_k} must divide K={k} into whole packing tiles")
    if q.bits == 4:
        tile = q.pack_rows
    else:
        tile = math.gcd(q.group_size, k // split_k)
        tile = min(tile, block_k) if tile % 8 == 0 else tile
        while (k // split_k) % tile or (q.group_size % tile and tile % q.group_size):
            tile = math.gcd(tile, q.group_size)
    bk = choose_block_k(k // split_k, q.group_size, tile, block_k)
    # a K slice must not straddle groups in a way the block loop cannot see
    if (k // split_k) % q.group_size and q.group_size % (k // split_k):
        raise ValueError(f"split_k={split_k} cuts groups of {q.group_size} rows unevenly")
    return tile, bk


def _pallas_forward(x2, q, activation_bits, block_sizes, out_dtype, interpret, platform):
    m, k = x2.shape
    n = q.shape[1]
    bs = block_sizes
    bm = bs.block_m if bs.block_m else min(max(16, _pow2_ceil(m)), 128)
    bn = min(bs.block_n, max(128, _pow2_ceil(n)))
    bs = BlockSizes(bm, bn, bs.block_k, bs.split_k)
    tile, bk = _layout(q, bs.block_k, bs.split_k)
    mp, np_ = -(-m // bm) * bm, -(-n // bn) * bn
    int8_act = activation_bits == 8
    if int8_act:
        xq, xs = quantize_activations(x2)
        xin, xs = jnp.pad(xq, ((0, mp - m), (0, 0))), jnp.pad(xs, ((0, mp - m), (0, 0)))
    else:
        xin, xs = jnp.pad(x2, ((0, mp - m), (0, 0))), None
    padn = ((0, 0), (0, np_ - n))
    data = jnp.pad(q.data, padn)
    scales = jnp.pad(q.scales, padn)  # zero scale: padded columns contribute exactly 0
    zeros = None if q.zeros is None else jnp.pad(q.zeros, padn)
    acc_dtype = jnp.float32 if bs.split_k > 1 else out_dtype
    out = quantized_matmul_kernel_call(
        xin, data, scales, zeros, xs, bits=q.bits, group_size=q.group_size, tile=tile,
        block_sizes=bs, bk=bk, int8_act=int8_act, out_dtype=np.dtype(acc_dtype),
        interpret=interpret, platform=platform)
    out = out[0] if bs.split_k == 1 else jnp.sum(out, axis=0)
    return out[:m, :n].astype(out_dtype)


@functools.partial(jax.custom_vjp, nondiff_argnums=(2, 3, 4, 5, 6, 7))
def _qmm(x2, q, implementation, activation_bits, block_sizes, out_dtype, interpret, platform):
    # out_dtype travels as a dtype *name*: a static, hashable custom_vjp argument
    out_dtype = np.dtype(out_dtype)
    if implementation == "xla":
        return quantized_matmul_reference(x2, q, activation_bits=activation_bits,
                                          out_dtype=out_dtype)
    return _pallas_forward(x2, q, activation_bits, block_sizes, out_dtype, interpret, platform)


def _qmm_fwd(x2, q, implementation, activation_bits, block_sizes, out_dtype, interpret,
             platform):
    y = _qmm(x2, q, implementation, activation_bits, block_sizes, out_dtype, interpret, platform)
    return y, (q, jnp.zeros((0,), x2.dtype))  # residuals must be arrays: carry x's dtype


def _zero_cotangent(a):
    if a is None:
        return None
    if jnp.issubdtype(a.dtype, jnp.floating):
        return jnp.zeros_like(a)
    return np.zeros(a.shape, dtype=jax.dtypes.float0)


def _qmm_bwd(implementation, activation_bits, block_sizes, out_dtype, interpret, platform, res,
             dy):
    q, x_like = res
    x_dtype = x_like.dtype
    w = dequantize(q, jnp.float32)
    # d/dx (x @ W) = dy @ W^T; for int8 activations this is the straight-through estimator.
    dx = jnp.matmul(dy.astype(jnp.float32), w.T, precision=jax.lax.Precision.HIGHEST)
    dq = jax.tree.map(_zero_cotangent, q)
    return dx.astype(x_dtype), dq


_qmm.defvjp(_qmm_fwd, _qmm_bwd)


def _platform() -> str:
    return jax.default_backend()


def _pallas_supported(q: QuantizedArray, platform: str) -> str | None:
    """Why the compiled kernel cannot run this case on ``platform`` (None if it can)."""
    if platform not in ("gpu", "cuda", "tpu"):
        return f"no compiled Pallas kernel on backend {platform!r}"
    k, n = q.shape
    if platform in ("gpu", "cuda") and (k & (k - 1) or q.group_size & (q.group_size - 1)):
        return "Triton needs power-of-two K and group size"
    return None


_warned: set[str] = set()


def quantized_matmul(x, q: QuantizedArray, *, implementation: str = "auto",
                     activation_bits: int | None = None, block_sizes: BlockSizes | None = None,
                     interpret: bool | None = None, out_dtype=None) -> jax.Array:
    """``x @ dequantize(q)`` with a Pallas kernel that unpacks int4/int8 weights in-kernel.

    Args:
      x: [..., K] floating activations (leading dims are flattened into M).
      q: [K, N] :class:`jaxpapers.quant.QuantizedArray` (4 or 8 bits, any group size).
      implementation: ``"pallas"`` (the kernel; on CPU it runs in interpret mode; raises if it
        cannot run), ``"xla"`` (the jnp reference), or ``"auto"`` (the compiled kernel on GPU/TPU
        when the case is supported, otherwise the XLA path, with a one-time warning saying why).
      activation_bits: None (W4A16/W8A16: float activations, fp32 accumulation) or 8 (dynamic
        per-token int8 activations with exact int32 accumulation per group: W8A8/W4A8).
      block_sizes: :class:`BlockSizes`; ``block_m=0`` picks a power of two from M.
      interpret: force interpret mode (default: True exactly when the backend is CPU).
      out_dtype: result dtype (default ``x.dtype``).

    Returns:
      [..., N] ~= ``x @ dequantize(q)``; gradients flow to ``x`` (``custom_vjp``); ``q`` gets
      zero cotangents.

    >>> import jax, jax.numpy as jnp
    >>> from jaxpapers.quant import quantize
    >>> q = quantize(jax.random.normal(jax.random.key(0), (256, 128)), bits=4, group_size=128)
    >>> y = quantized_matmul(jnp.ones((3, 256)), q, implementation="pallas")
    >>> y.shape
    (3, 128)
    """
    if implementation not in IMPLEMENTATIONS:
        raise ValueError(f"implementation must be one of {IMPLEMENTATIONS}, got "
                         f"{implementation!r}")
    if not isinstance(q, QuantizedArray):
        raise TypeError(f"q must be a QuantizedArray, got {type(q).__name__}")
    x = jnp.asarray(x)
    if not jnp.issubdtype(x.dtype, jnp.floating):
        raise TypeError(f"x must be floating, got dtype {x.dtype}")
    if x.ndim < 1 or x.shape[-1] != q.shape[0]:
        raise ValueError(f"x must be [..., K={q.shape[0]}], got shape {x.shape}")
    if activation_bits not in (None, 8):
        raise ValueError(f"activation_bits must be None or 8, got {activation_bits!r}")
    if activation_bits == 8 and q.bits == 8 and not q.symmetric:
        raise ValueError("activation_bits=8 needs symmetric 8-bit weights")
    block_sizes = block_sizes or BlockSizes(block_m=0)
    if not isinstance(block_sizes, BlockSizes):
        raise TypeError("block_sizes must be a BlockSizes")
    out_dtype = np.dtype(out_dtype or x.dtype)
    platform = _platform()
    impl = implementation
    if impl == "auto":
        why = _pallas_supported(q, platform)
        impl = "xla" if why else "pallas"
        if why and why not in _warned:
            _warned.add(why)
            warnings.warn(f"quantized_matmul(implementation='auto') uses the XLA path: {why}",
                          stacklevel=2)
    if interpret is None:
        interpret = platform == "cpu"
    lead = x.shape[:-1]
    x2 = x.reshape(-1, x.shape[-1])
    y = _qmm(x2, q, impl, activation_bits, block_sizes, out_dtype.name, bool(interpret),
             "cuda" if platform == "gpu" else platform)
    return y.reshape(*lead, q.shape[1])
