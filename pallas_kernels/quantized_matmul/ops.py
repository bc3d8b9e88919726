"""Public op: argument checks, padding, block choice, ``implementation`` dispatch, ``custom_vjp``.

The op takes plain arrays (``data``, ``scales``, ``zeros``) and static layout ints (``bits``,
``group_size``, ``pack_rows``); the layout is documented in
:mod:`pallas_kernels.quantized_matmul.reference`. A bare ``pallas_call`` has no VJP, so the kernel
path (and the int8-activation path, whose rounding has no useful derivative) carries a
``custom_vjp``; the weight-only XLA path is the plain reference, differentiable by autodiff.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

from pallas_kernels import _common
from pallas_kernels._common import (IMPLEMENTATIONS, Implementation, is_pow2, pow2_ceil,
                                    resolve)
from pallas_kernels.quantized_matmul.kernel import BlockSizes, quantized_matmul_kernel_call
from pallas_kernels.quantized_matmul.reference import (SUPPORTED_BITS, dequantize, levels,
                                                       pack_rows_for, quantize_activations,
                                                       quantized_matmul_reference)

__all__ = ["quantized_matmul", "choose_block_k", "IMPLEMENTATIONS"]

_HIGHEST = jax.lax.Precision.HIGHEST


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


@dataclasses.dataclass(frozen=True)
class _Config:
    """Everything static about one call (hashable: a ``custom_vjp`` non-differentiable arg)."""

    bits: int
    group_size: int
    pack_rows: int
    activation_bits: int | None
    out_dtype: str
    implementation: str
    block_sizes: BlockSizes
    interpret: bool
    platform: str

    @property
    def layout(self) -> dict:
        return dict(bits=self.bits, group_size=self.group_size, pack_rows=self.pack_rows)


def _tiles(k: int, bits: int, group_size: int, pack_rows: int, block_k: int,
           split_k: int) -> tuple[int, int]:
    """(tile, bk): rows per unpacked tile and the validated K block of the kernel."""
    if k % split_k or (k // split_k) % (pack_rows if bits == 4 else 1):
        raise ValueError(f"split_k={split_k} must divide K={k} into whole packing tiles")
    if bits == 4:
        if group_size % pack_rows:
            raise ValueError(f"the kernel needs pack_rows ({pack_rows}) to divide group_size "
                             f"({group_size})")
        tile = pack_rows
    else:
        tile = math.gcd(group_size, k // split_k)
        tile = min(tile, block_k) if tile % 8 == 0 else tile
        while (k // split_k) % tile or (group_size % tile and tile % group_size):
            tile = math.gcd(tile, group_size)
    bk = choose_block_k(k // split_k, group_size, tile, block_k)
    # a K slice must not straddle groups in a way the block loop cannot see
    if (k // split_k) % group_size and group_size % (k // split_k):
        raise ValueError(f"split_k={split_k} cuts groups of {group_size} rows unevenly")
    return tile, bk


def _pallas_forward(x2, data, scales, zeros, cfg: _Config):
    m, k = x2.shape
    n = data.shape[1]
    bs = cfg.block_sizes
    bm = bs.block_m if bs.block_m else min(max(16, pow2_ceil(m)), 128)
    bn = min(bs.block_n, max(128, pow2_ceil(n)))
    bs = BlockSizes(bm, bn, bs.block_k, bs.split_k)
    tile, bk = _tiles(k, cfg.bits, cfg.group_size, cfg.pack_rows, bs.block_k, bs.split_k)
    mp, np_ = -(-m // bm) * bm, -(-n // bn) * bn
    int8_act = cfg.activation_bits == 8
    if int8_act:
        xq, xs = quantize_activations(x2)
        xin, xs = jnp.pad(xq, ((0, mp - m), (0, 0))), jnp.pad(xs, ((0, mp - m), (0, 0)))
    else:
        xin, xs = jnp.pad(x2, ((0, mp - m), (0, 0))), None
    padn = ((0, 0), (0, np_ - n))
    data = jnp.pad(data, padn)
    scales = jnp.pad(scales, padn)  # zero scale: padded columns contribute exactly 0
    zeros = None if zeros is None else jnp.pad(zeros, padn)
    out_dtype = np.dtype(cfg.out_dtype)
    acc_dtype = np.dtype(jnp.float32) if bs.split_k > 1 else out_dtype
    out = quantized_matmul_kernel_call(
        xin, data, scales, zeros, xs, bits=cfg.bits, group_size=cfg.group_size, tile=tile,
        block_sizes=bs, bk=bk, int8_act=int8_act, out_dtype=acc_dtype,
        interpret=cfg.interpret, platform=cfg.platform)
    out = out[0] if bs.split_k == 1 else jnp.sum(out, axis=0)
    return out[:m, :n].astype(out_dtype)


def _forward(x2, data, scales, zeros, cfg: _Config):
    if cfg.implementation == "xla":
        return quantized_matmul_reference(x2, data, scales, zeros, **cfg.layout,
                                          activation_bits=cfg.activation_bits,
                                          out_dtype=np.dtype(cfg.out_dtype))
    return _pallas_forward(x2, data, scales, zeros, cfg)


@functools.partial(jax.custom_vjp, nondiff_argnums=(4,))
def _qmm(x2, data, scales, zeros, cfg):
    return _forward(x2, data, scales, zeros, cfg)


def _qmm_fwd(x2, data, scales, zeros, cfg):
    return _forward(x2, data, scales, zeros, cfg), (x2, data, scales, zeros)


def _zero_cotangent(a):
    if a is None:
        return None
    if jnp.issubdtype(a.dtype, jnp.floating):
        return jnp.zeros_like(a)
    return np.zeros(a.shape, dtype=jax.dtypes.float0)


def _qmm_bwd(cfg, res, dy):
    x2, data, scales, zeros = res
    dyf = dy.astype(jnp.float32)
    w = dequantize(data, scales, zeros, **cfg.layout)
    # y = x @ W: dx = dy @ W^T and dW = x^T dy, so d scales[g, n] = sum_{k in g} lv[k, n] dW[k, n].
    # With int8 activations this is the straight-through estimator (x's rounding as identity).
    # Under jit the unused parts (e.g. the scale gradient) are removed.
    dx = jnp.matmul(dyf, w.T, precision=_HIGHEST)
    dw = jnp.matmul(x2.astype(jnp.float32).T, dyf, precision=_HIGHEST)
    lv = levels(data, zeros, **cfg.layout).astype(jnp.float32)
    g, n = cfg.group_size, scales.shape[1]
    ds = jnp.sum((lv * dw).reshape(-1, g, n), axis=1)
    return dx.astype(x2.dtype), _zero_cotangent(data), ds.astype(scales.dtype), \
        _zero_cotangent(zeros)


_qmm.defvjp(_qmm_fwd, _qmm_bwd)


def _check(x, data, scales, zeros, bits, group_size, pack_rows, activation_bits):
    """Validate the plain-array operands; returns (K, N, pack_rows)."""
    if bits not in SUPPORTED_BITS:
        raise ValueError(f"bits must be one of {SUPPORTED_BITS}, got {bits!r}")
    if data.ndim != 2:
        raise ValueError(f"data must be 2-D ([K/2, N] for 4 bits, else [K, N]), got shape "
                         f"{data.shape}")
    want = jnp.uint8 if bits == 4 or zeros is not None else jnp.int8
    if data.dtype != want:
        kind = "4-bit packed" if bits == 4 else ("asymmetric" if zeros is not None
                                                 else "symmetric")
        raise TypeError(f"data must be {np.dtype(want).name} for {kind} {bits}-bit weights, got "
                        f"dtype {data.dtype}")
    k = data.shape[0] * (2 if bits == 4 else 1)
    n = data.shape[1]
    if not jnp.issubdtype(x.dtype, jnp.floating):
        raise TypeError(f"x must be floating, got dtype {x.dtype}")
    if x.ndim < 1 or x.shape[-1] != k:
        raise ValueError(f"x must be [..., K={k}] (its last axis: the K features of the "
                         f"weight's rows), got shape {x.shape}")
    if isinstance(group_size, bool) or not isinstance(group_size, (int, np.integer)) \
            or group_size < 1 or k % group_size:
        raise ValueError(f"group_size must be a positive divisor of K={k}, got {group_size!r}")
    g = k // group_size
    if scales.shape != (g, n) or not jnp.issubdtype(scales.dtype, jnp.floating):
        raise ValueError(f"scales must be floating [G, N]=({g}, {n}), got {scales.dtype} "
                         f"{scales.shape}")
    if zeros is not None and (zeros.shape != (g, n)
                              or not jnp.issubdtype(zeros.dtype, jnp.integer)):
        raise ValueError(f"zeros must be None or integer [G, N]=({g}, {n}), got {zeros.dtype} "
                         f"{zeros.shape}")
    if bits == 4:
        pack_rows = pack_rows_for(group_size) if pack_rows is None else pack_rows
        if not isinstance(pack_rows, (int, np.integer)) or pack_rows < 2 or pack_rows % 2 \
                or k % pack_rows:
            raise ValueError(f"pack_rows must be an even divisor of K={k}, got {pack_rows!r}")
    else:
        pack_rows = group_size  # unused: one level per byte
    if activation_bits not in (None, 8):
        raise ValueError(f"activation_bits must be None or 8, got {activation_bits!r}")
    if activation_bits == 8 and bits == 8 and zeros is not None:
        raise ValueError("activation_bits=8 needs symmetric 8-bit weights (asymmetric levels "
                         "minus zero points do not fit int8)")
    return k, n, int(pack_rows)


def quantized_matmul(x, data, scales, zeros=None, *, bits: int, group_size: int,
                     pack_rows: int | None = None, activation_bits: int | None = None,
                     out_dtype=None, implementation: Implementation = "auto",
                     block_sizes: BlockSizes | None = None,
                     interpret: bool | None = None,
                     platform: str | None = None) -> jax.Array:
    """``x @ W`` for a group-quantized [K, N] weight ``W``, unpacking int4/int8 in the kernel.

    Args:
      x: [..., K] floating activations (leading dims are flattened into M).
      data: the levels: [K/2, N] uint8 split-half packed (4 bits), [K, N] int8 (symmetric 8 / 3
        bits) or uint8 (asymmetric 8 / 3 bits); see :mod:`.reference`.
      scales: [K / group_size, N] float. zeros: [K / group_size, N] uint8 zero points
        (asymmetric), or None (symmetric).
      bits: 3, 4 or 8 (static). group_size: rows per scale group (static).
      pack_rows: rows per int4 packing tile (static; default ``min(group_size, 128)``).
      activation_bits: None (W4A16/W8A16: float activations, fp32 accumulation) or 8 (dynamic
        per-token int8 activations with exact int32 accumulation per group: W8A8/W4A8).
      out_dtype: result dtype (default ``x.dtype``).
      implementation: ``"pallas"`` (the kernel; on CPU it runs in interpret mode; raises if it
        cannot run), ``"xla"`` (the jnp reference), or ``"auto"`` (the compiled kernel on GPU/TPU
        when the case is supported, otherwise the XLA path, with a warning saying why).
      block_sizes: :class:`BlockSizes`; ``block_m=0`` picks a power of two from M.
      interpret: force interpret mode (default: True exactly when there is no compiled backend).
      platform: the backend to plan for (default: this process's). ``"cuda"`` on a CPU machine
        with ``interpret=False`` builds the Triton kernel so it can be lowered / exported with
        ``lowering_platforms=("cuda",)``; it cannot be run here.

    Returns:
      [..., N] ~= ``x @ dequantize(...)``. Gradients: to ``x`` (``dy @ W^T``; the
      straight-through estimator with int8 activations) and to ``scales``; ``data`` and
      ``zeros`` are integers (zero cotangents).

    >>> import jax, jax.numpy as jnp
    >>> from pallas_kernels.quantized_matmul import pack_int4, quantized_matmul_reference
    >>> lv = jax.random.randint(jax.random.key(0), (256, 128), 0, 16)   # 4-bit levels
    >>> data, scales = pack_int4(lv, 128), jnp.full((2, 128), 0.01)    # 2 groups of 128 rows
    >>> x = jax.random.normal(jax.random.key(1), (3, 256))
    >>> y = quantized_matmul(x, data, scales, bits=4, group_size=128, implementation="pallas")
    >>> ref = quantized_matmul_reference(x, data, scales, bits=4, group_size=128)
    >>> y.shape, bool(jnp.allclose(y, ref, atol=1e-5))
    ((3, 128), True)
    """
    x, data, scales = jnp.asarray(x), jnp.asarray(data), jnp.asarray(scales)
    zeros = None if zeros is None else jnp.asarray(zeros)
    k, n, pack_rows = _check(x, data, scales, zeros, bits, group_size, pack_rows,
                             activation_bits)
    block_sizes = block_sizes or BlockSizes(block_m=0)
    if not isinstance(block_sizes, BlockSizes):
        raise TypeError("block_sizes must be a BlockSizes")
    out_dtype = np.dtype(out_dtype or x.dtype)
    unsupported = None
    plat = _common.check_platform(platform)
    if plat in ("cuda", "rocm") and not (is_pow2(k) and is_pow2(group_size)):
        unsupported = f"Triton needs power-of-two K and group size (K={k}, group={group_size})"
    run = resolve("quantized_matmul", implementation, unsupported=unsupported,
                  interpret=interpret, platform=plat)
    cfg = _Config(bits=int(bits), group_size=int(group_size), pack_rows=pack_rows,
                  activation_bits=activation_bits, out_dtype=out_dtype.name,
                  implementation=run.implementation, block_sizes=block_sizes,
                  interpret=run.interpret, platform=run.platform)
    lead = x.shape[:-1]
    x2 = x.reshape(-1, k)
    if run.implementation == "xla" and activation_bits is None:
        y = _forward(x2, data, scales, zeros, cfg)  # plain jnp: autodiff and jvp work
    else:
        y = _qmm(x2, data, scales, zeros, cfg)
    return y.reshape(*lead, n)
