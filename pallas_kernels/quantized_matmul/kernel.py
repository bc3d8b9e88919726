"""Pallas kernel: [M, K] activations x a group-quantized [K, N] weight (int8 or packed int4).

Grid ``(S, M/bm, N/bn)``: ``S`` split-K slices, output tiles ``bm x bn``. Each program keeps an
fp32 (or int32-per-group) accumulator in registers and walks its K slice in ``bk``-row blocks with
``lax.fori_loop`` (no cross-program accumulation, so the same source is valid for Triton, where
programs run concurrently, and for Mosaic TPU). Inside a block:

* int4: each packing tile of P rows is one ``uint8 [P/2, bn]`` load, unpacked with ``& 0xF`` (rows
  ``[0, P/2)``) and ``>> 4`` (rows ``[P/2, P)``), so every dot is 2-D and nothing is concatenated;
* every group's integer dots (levels minus zero points, exact in the activation dtype or int8) are
  summed and then multiplied by that group's scale row ``[1, bn]``;
* with int8 activations (W8A8 / W4A8) the group dots are int8 x int8 -> int32, exact.

Operands are padded by the wrapper in ``ops``; this module assumes M % bm == N % bn == 0.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

from pallas_kernels._common import compiler_params_kwargs

__all__ = ["BlockSizes", "quantized_matmul_kernel_call"]


@dataclasses.dataclass(frozen=True)
class BlockSizes:
    """Tile sizes (static). ``block_k`` is a preference: the wrapper picks the largest valid
    value <= it (a multiple of the packing tile that is compatible with the group size)."""

    block_m: int = 16
    block_n: int = 128
    block_k: int = 512
    split_k: int = 1


def _kernel(*refs, bits, group_size, tile, bk, k_per_split, has_zeros, int8_act):
    it = iter(refs)
    x_ref, data_ref, scale_ref = next(it), next(it), next(it)
    zero_ref = next(it) if has_zeros else None
    xs_ref = next(it) if int8_act else None
    o_ref = next(it)
    bm, bn = o_ref.shape[1], o_ref.shape[2]
    g_eff = min(group_size, bk)
    n_groups_blk = bk // g_eff
    tiles_per_group = g_eff // tile
    split = pl.program_id(0)
    dot_dtype = jnp.int8 if int8_act else x_ref.dtype
    acc_dtype = jnp.int32 if int8_act else jnp.float32

    def weights(levels_u8, zero_row):
        lv = levels_u8.astype(jnp.int32)
        if zero_row is not None:
            lv = lv - zero_row
        elif bits == 4:
            lv = lv - 8
        return lv.astype(dot_dtype)

    def dot(a, b):
        return jax.lax.dot(a, b, preferred_element_type=acc_dtype)

    def block(kb, acc):
        k0 = split * k_per_split + kb * bk
        for j in range(n_groups_blk):
            g0 = k0 + j * g_eff
            grow = g0 // group_size
            zero_row = zero_ref[pl.ds(grow, 1), :].astype(jnp.int32) if has_zeros else None
            part = jnp.zeros((bm, bn), acc_dtype)
            for t in range(tiles_per_group):
                r0 = g0 + t * tile
                if bits == 4:
                    packed = data_ref[pl.ds(r0 // 2, tile // 2), :]
                    lo = weights(packed & 0xF, zero_row)
                    hi = weights(packed >> 4, zero_row)
                    part = part + dot(x_ref[:, pl.ds(r0, tile // 2)], lo)
                    part = part + dot(x_ref[:, pl.ds(r0 + tile // 2, tile // 2)], hi)
                else:
                    w = weights(data_ref[pl.ds(r0, tile), :], zero_row) if has_zeros else \
                        data_ref[pl.ds(r0, tile), :].astype(dot_dtype)
                    part = part + dot(x_ref[:, pl.ds(r0, tile)], w)
            scale = scale_ref[pl.ds(grow, 1), :].astype(jnp.float32)
            acc = acc + part.astype(jnp.float32) * scale
        return acc

    acc = jax.lax.fori_loop(0, k_per_split // bk, block, jnp.zeros((bm, bn), jnp.float32))
    if int8_act:
        acc = acc * xs_ref[...].astype(jnp.float32)
    o_ref[...] = acc[None].astype(o_ref.dtype)


@functools.partial(jax.jit, static_argnames=("bits", "group_size", "tile", "block_sizes", "bk",
                                             "int8_act", "out_dtype", "interpret", "platform"))
def quantized_matmul_kernel_call(x, data, scales, zeros, x_scales, *, bits, group_size, tile,
                                 block_sizes: BlockSizes, bk, int8_act, out_dtype, interpret,
                                 platform):
    """Run the kernel on padded operands.

    Args:
      x: [M, K] activations (float, or int8 when ``int8_act``); M % block_m == 0.
      data: [K, N] int8/uint8 (8-bit) or [K/2, N] uint8 (4-bit); N % block_n == 0.
      scales: [G, N] float. zeros: [G, N] uint8 or None. x_scales: [M, 1] float32 or None.
      bits, group_size, tile: the quantization layout (tile = packing rows for 4-bit, or the
        group slice for 8-bit). bk: validated K block. int8_act: int8 activations.
      out_dtype: output dtype (must be float32 when split_k > 1; summed by the caller).
      interpret: run the Pallas interpreter (CPU). platform: compiler-param target.

    Returns:
      [S, M, N] partial products (S = split_k).
    """
    m, k = x.shape
    n = data.shape[1]
    bm, bn, s = block_sizes.block_m, block_sizes.block_n, block_sizes.split_k
    k_per_split = k // s
    has_zeros = zeros is not None
    kern = functools.partial(_kernel, bits=bits, group_size=group_size, tile=tile, bk=bk,
                             k_per_split=k_per_split, has_zeros=has_zeros, int8_act=int8_act)
    g = scales.shape[0]
    in_specs = [pl.BlockSpec((bm, k), lambda si, i, j: (i, 0)),
                pl.BlockSpec((data.shape[0], bn), lambda si, i, j: (0, j)),
                pl.BlockSpec((g, bn), lambda si, i, j: (0, j))]
    operands = [x, data, scales]
    if has_zeros:
        in_specs.append(pl.BlockSpec((g, bn), lambda si, i, j: (0, j)))
        operands.append(zeros)
    if int8_act:
        in_specs.append(pl.BlockSpec((bm, 1), lambda si, i, j: (i, 0)))
        operands.append(x_scales)
    return pl.pallas_call(
        kern,
        out_shape=jax.ShapeDtypeStruct((s, m, n), out_dtype),
        grid=(s, m // bm, n // bn),
        in_specs=in_specs,
        out_specs=pl.BlockSpec((1, bm, bn), lambda si, i, j: (si, i, j)),
        interpret=interpret,
        name="quantized_matmul",
        **compiler_params_kwargs(interpret, platform, ("parallel",) * 3),
    )(*operands)
