"""Pallas kernels for sparse GEMV: ``where(|x| > tau, x, 0) @ w`` for B <= 8 activation rows.

Two fetch patterns compute the same partial products (fp32, or float64 for float64 inputs):

* :func:`sparse_gemv_gpu_call` (Triton; also the default in interpret mode). Grid
  ``(N / bn, S)``: program ``(j, s)`` owns output columns ``[j bn, (j + 1) bn)`` and the ``s``-th
  of ``S`` contiguous runs of ``bk``-row K blocks, walked with ``lax.fori_loop``. Per block it loads
  the ``[bk, 1]`` activation columns of the B rows, masks them by ``|x| > tau``, and forms the
  *union* over the batch of the rows to keep (a weight row is needed when any of the B activations
  of that row survives; a per-row-0 mask, as in TEAL's kernel, is wrong for B > 1). A block whose
  union is empty is skipped (``lax.cond``: its weights are never loaded); otherwise the weight
  tile is loaded with that row mask (``pallas.triton.load(mask=...)``: dropped rows issue no
  memory reads) and each batch row accumulates ``sum_k x[k] w[k, :]`` as a broadcast product
  reduced over K (Triton's ``tl.dot`` needs >= 16 rows, a GEMV has 1-8). The program writes its
  partial sums to ``[S, B, N]``; the wrapper adds the S partials (no atomics).
* :func:`sparse_gemv_tpu_call` (Mosaic TPU). ``PrefetchScalarGridSpec`` puts the list of
  non-empty K blocks (and its length) in SMEM; grid ``(N / bn, K / bk)`` with the second axis a
  reduction ("arbitrary"); the x and w ``BlockSpec`` index maps read block ``ids[j]``, so empty K
  blocks are never fetched (steps past the list's length repeat the last id, which the pipeline
  does not re-fetch, and skip their dot with ``pl.when``). The accumulator is a VMEM scratch.

Operands are padded by the wrapper in :mod:`.ops`: this module assumes ``K % bk == N % bn == 0``.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as pl_triton

from pallas_kernels._common import compiler_params_kwargs

__all__ = ["BlockSizes", "MAX_BATCH", "sparse_gemv_gpu_call", "sparse_gemv_tpu_call",
           "nonempty_blocks"]

MAX_BATCH = 8  # activation rows per call: a GEMV (decoding) kernel, not a GEMM


@dataclasses.dataclass(frozen=True)
class BlockSizes:
    """Tile sizes (static); ``None`` fields are chosen by the op for the platform.

    Attributes:
      block_k: weight rows per K block (the skip granularity). GPU: a power of two; TPU: a
        multiple of 128.
      block_n: output columns per program. GPU: a power of two; TPU: a multiple of 128.
      num_splits: K splits S of the GPU kernel (partials summed outside); unused on TPU.
    """

    block_k: int | None = None
    block_n: int | None = None
    num_splits: int | None = None


def _gpu_kernel(tau_ref, xt_ref, w_ref, o_ref, *, block_k, blocks_per_split, num_blocks,
                acc_dtype):
    """One program: columns ``[j bn, (j + 1) bn)``, K blocks ``[s P, (s + 1) P)``, P per split.

    Refs: tau [1, 1] (acc dtype); xt [Kp, B] (x transposed: a batch row is a [bk, 1] column
    load); w [Kp, bn]; o [B, bn] (this split's partial sums).
    """
    split = pl.program_id(1)
    b_rows, bn = o_ref.shape
    tau = tau_ref[...].astype(acc_dtype)

    def block(i, acc):
        kb = split * blocks_per_split + i
        # the last split may own fewer blocks: clamp the address, gate the work with `live`
        k0 = pl.multiple_of(jnp.minimum(kb, num_blocks - 1) * block_k, block_k)
        rows = pl.ds(k0, block_k)
        xs, union = [], None
        for b in range(b_rows):
            xb = xt_ref[rows, pl.ds(b, 1)].astype(acc_dtype)          # [bk, 1]
            keep = jnp.abs(xb) > tau
            xs.append(jnp.where(keep, xb, jnp.zeros((), acc_dtype)))
            union = keep if union is None else union | keep            # any batch row keeps k
        # one axis at a time: jax 0.12's Triton lowering of a 2-D -> scalar reduce fails
        # under an abstract mesh (the cross-lowering check on CPU)
        live = (kb < num_blocks) & (jnp.max(jnp.max(union.astype(jnp.int32), axis=1)) > 0)

        def accumulate(acc):
            # masked rows issue no memory reads on the GPU (and read as 0 in interpret mode)
            row_mask = jnp.broadcast_to(union, (block_k, bn))
            w = pl_triton.load(w_ref.at[rows, :], mask=row_mask, other=0).astype(acc_dtype)
            return tuple(a + jnp.sum(x * w, axis=0, keepdims=True) for a, x in zip(acc, xs))

        return jax.lax.cond(live, accumulate, lambda acc: acc, acc)

    init = tuple(jnp.zeros((1, bn), acc_dtype) for _ in range(b_rows))
    acc = jax.lax.fori_loop(0, blocks_per_split, block, init)
    for b in range(b_rows):
        o_ref[pl.ds(b, 1), :] = acc[b].astype(o_ref.dtype)


@functools.partial(jax.jit, static_argnames=("block_k", "block_n", "num_splits", "acc_dtype",
                                             "interpret", "platform"))
def sparse_gemv_gpu_call(tau, xt, w, *, block_k: int, block_n: int, num_splits: int,
                         acc_dtype: str, interpret, platform: str | None) -> jax.Array:
    """Split-K partial sums of ``where(|x| > tau, x, 0) @ w`` (the Triton pattern).

    Args:
      tau: [1, 1] threshold in the accumulation dtype.
      xt: [Kp, B] activations, transposed; Kp % block_k == 0, 1 <= B <= 8.
      w: [Kp, Np] weight; Np % block_n == 0.
      block_k, block_n: tile sizes (powers of two for Triton). num_splits: S, 1 <= S <= Kp / bk.
      acc_dtype: "float32" or "float64". interpret: run the Pallas interpreter (CPU).
      platform: compiler-param target ("cuda", "rocm"; None in interpret mode).

    Returns:
      [S, B, Np] partial products in ``acc_dtype``; their sum over S is the product.
    """
    kp, b = xt.shape
    np_ = w.shape[1]
    num_blocks = kp // block_k
    per_split = -(-num_blocks // num_splits)
    acc = np.dtype(acc_dtype)
    kern = functools.partial(_gpu_kernel, block_k=block_k, blocks_per_split=per_split,
                             num_blocks=num_blocks, acc_dtype=acc)
    return pl.pallas_call(
        kern,
        out_shape=jax.ShapeDtypeStruct((num_splits, b, np_), acc),
        grid=(np_ // block_n, num_splits),
        in_specs=[pl.BlockSpec((1, 1), lambda j, s: (0, 0)),
                  pl.BlockSpec((kp, b), lambda j, s: (0, 0)),
                  pl.BlockSpec((kp, block_n), lambda j, s: (0, j))],
        out_specs=pl.BlockSpec((None, b, block_n), lambda j, s: (s, 0, j)),
        interpret=interpret,
        name="sparse_gemv",
        **compiler_params_kwargs(interpret, platform, ("parallel", "parallel")),
    )(tau, xt, w)


def nonempty_blocks(xm: jax.Array, block_k: int) -> tuple[jax.Array, jax.Array]:
    """The K blocks of ``xm`` holding a nonzero in any batch row, as a scalar-prefetch list.

    Args:
      xm: [B, Kp] masked activations, Kp % block_k == 0.
      block_k: rows per K block.

    Returns:
      ``(ids, count)``: int32 [Kp / block_k] block indices, the ``count`` non-empty ones first in
      increasing order, then the last of them repeated (block 0 if none), and int32 [1] ``count``.
    """
    b, kp = xm.shape
    nz = jnp.any((xm != 0).reshape(b, kp // block_k, block_k), axis=(0, 2))
    count = jnp.sum(nz, dtype=jnp.int32)
    order = jnp.argsort(jnp.logical_not(nz), stable=True).astype(jnp.int32)
    last = order[jnp.maximum(count - 1, 0)]
    ids = jnp.where(jnp.arange(nz.shape[0]) < count, order, last)
    return ids, count[None]


def _tpu_kernel(ids_ref, count_ref, x_ref, w_ref, o_ref, acc_ref, *, acc_dtype):
    """One step: acc[B, bn] += x[:, block ids[j]] @ w[block ids[j], columns] while j < count."""
    del ids_ref  # consumed by the index maps
    j = pl.program_id(1)

    @pl.when(j == 0)
    def _init():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    @pl.when(j < count_ref[0])
    def _accumulate():
        x, w = x_ref[...], w_ref[...]
        if x.dtype != w.dtype:
            x, w = x.astype(acc_dtype), w.astype(acc_dtype)
        acc_ref[...] += jax.lax.dot(x, w, precision=jax.lax.Precision.HIGHEST,
                                    preferred_element_type=acc_dtype)

    @pl.when(j == pl.num_programs(1) - 1)
    def _finish():
        o_ref[...] = acc_ref[...].astype(o_ref.dtype)


@functools.partial(jax.jit, static_argnames=("block_k", "block_n", "acc_dtype", "interpret",
                                             "platform"))
def sparse_gemv_tpu_call(ids, count, xm, w, *, block_k: int, block_n: int, acc_dtype: str,
                         interpret, platform: str | None) -> jax.Array:
    """``xm @ w`` over the listed K blocks only (the TPU scalar-prefetch pattern).

    Args:
      ids, count: from :func:`nonempty_blocks` (int32 [Kp / block_k], int32 [1]).
      xm: [Bp, Kp] already-masked activations (Bp: B padded to a sublane tile).
      w: [Kp, Np]; Kp % block_k == Np % block_n == 0 (multiples of 128 for Mosaic).
      acc_dtype: "float32" (or "float64" in interpret mode). interpret, platform: as for
        :func:`sparse_gemv_gpu_call` ("tpu" when compiled).

    Returns:
      [Bp, Np] in ``acc_dtype``.
    """
    from jax.experimental.pallas import tpu as pltpu

    bp, kp = xm.shape
    np_ = w.shape[1]
    acc = np.dtype(acc_dtype)
    grid_spec = pltpu.PrefetchScalarGridSpec(
        num_scalar_prefetch=2,
        grid=(np_ // block_n, kp // block_k),
        in_specs=[pl.BlockSpec((bp, block_k), lambda n, j, ids, cnt: (0, ids[j])),
                  pl.BlockSpec((block_k, block_n), lambda n, j, ids, cnt: (ids[j], n))],
        out_specs=pl.BlockSpec((bp, block_n), lambda n, j, ids, cnt: (0, n)),
        scratch_shapes=[pltpu.VMEM((bp, block_n), acc)],
    )
    return pl.pallas_call(
        functools.partial(_tpu_kernel, acc_dtype=acc),
        out_shape=jax.ShapeDtypeStruct((bp, np_), acc),
        grid_spec=grid_spec,
        interpret=interpret,
        name="sparse_gemv_prefetch",
        **compiler_params_kwargs(interpret, platform, ("parallel", "arbitrary")),
    )(ids, count, xm, w)
