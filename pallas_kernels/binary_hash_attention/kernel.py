"""Pallas kernels of BinaryPC: binary-code scores, and decode attention over selected rows.

Score kernel (grid ``(B, Hk, L / block_l)``): each program loads a ``[block_l, W]`` block of packed
codes and the ``[Gp, num_bits]`` int8 probe of the kv group, unpacks each 32-bit word with
``>> iota`` and ``& 1`` into a 0/1 int8 ``[block_l, 32]`` bit plane, and accumulates
``probe_w @ bits^T`` (int8 x int8 -> int32, exact) into ``[Gp, block_l]``. With ``c = sum_b
bit_b p_b`` the signed score is ``2 c - sum_b p_b``; it is scaled once in float32 and (by default)
reduced by a max over the group's heads. Scores are lane-dense ``[.., block_l]`` rows.

Attention kernels: one online-softmax step (:func:`_softmax_step`) shared by two ways of
fetching the selected rows.

* ``gather="vector"`` (GPU / Triton pattern of jax's paged attention): grid ``(B, Hk, S)``; each
  program sees the whole ``[num_pages, P, D]`` K/V of its head (a pointer on GPU, nothing is
  copied) and walks its share of the selected entries in blocks of ``block_k``, gathering
  ``k_ref[ids]`` with a vector of page ids inside the kernel. ``S`` splits of the selection
  (flash-decoding) give the GPU enough programs; partial ``(o, m, l)`` are merged by the caller.
* ``gather="prefetch"`` (TPU pattern): page ids and live-token counts are scalar-prefetched into
  SMEM and used by data-dependent ``BlockSpec`` index maps: grid ``(B, Hk, K / block_k)``, each
  step receives ``block_k`` pages through ``block_k`` K and ``block_k`` V operands (the same
  array passed several times), and the accumulator lives in VMEM scratch across the last
  ("arbitrary") grid axis.

Both paths mask a selected entry's tokens with its live-token count ``lim`` (computed by the
caller from ``valid``, the index range and ``length``), so out-of-range pages never contribute.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

from pallas_kernels._common import compiler_params_kwargs

__all__ = ["ScoreBlockSizes", "AttentionBlockSizes", "hash_scores_call",
           "attend_vector_call", "attend_prefetch_call", "MASK_VALUE"]

# A finite "minus infinity" for running maxima: exp(MASK - MASK) = 1 keeps empty blocks NaN-free,
# and masked probabilities are zeroed explicitly, so its size never reaches the output.
MASK_VALUE = -0.7 * float(jnp.finfo(jnp.float32).max)


@dataclasses.dataclass(frozen=True)
class ScoreBlockSizes:
    """``block_l``: key positions per program (a power of two, a multiple of 128 on TPU)."""

    block_l: int = 512


@dataclasses.dataclass(frozen=True)
class AttentionBlockSizes:
    """``block_k``: selected entries (tokens or pages) per online-softmax step;
    ``num_splits``: programs per (batch, kv head) sharing the selection (vector gather only;
    the prefetch path always uses 1)."""

    block_k: int = 16
    num_splits: int = 1


# ----------------------------------------------------------------------------- scores


def _score_kernel(codes_ref, probe_ref, scale_ref, o_ref, *, num_words, group, reduce):
    gp = probe_ref.shape[0]
    bl = codes_ref.shape[0]
    shifts = jax.lax.broadcasted_iota(jnp.uint32, (1, 32), 1)
    acc = jnp.zeros((gp, bl), jnp.int32)
    psum = jnp.zeros((gp, 1), jnp.int32)
    for w in range(num_words):
        word = codes_ref[:, pl.ds(w, 1)]                               # [bl, 1] uint32
        bits = ((word >> shifts) & jnp.uint32(1)).astype(jnp.int8)      # [bl, 32] in {0, 1}
        pw = probe_ref[:, pl.ds(w * 32, 32)]                            # [Gp, 32] int8
        acc = acc + jax.lax.dot_general(pw, bits, (((1,), (1,)), ((), ())),
                                        preferred_element_type=jnp.int32)
        psum = psum + jnp.sum(pw.astype(jnp.int32), axis=1, keepdims=True)
    s = (2 * acc - psum).astype(jnp.float32) * scale_ref[...]          # exact int, one f32 mul
    if reduce:
        row = jax.lax.broadcasted_iota(jnp.int32, (gp, bl), 0)
        s = jnp.max(jnp.where(row < group, s, -jnp.inf), axis=0, keepdims=True)
    o_ref[...] = s


@functools.partial(jax.jit, static_argnames=("group", "reduce", "block_l", "interpret",
                                             "platform"))
def hash_scores_call(codes, probe, scale, *, group, reduce, block_l, interpret, platform):
    """Run the score kernel.

    Args:
      codes: uint32 [B, Hk, L, W]. probe: int8 [B, Hk, Gp, W * 32] (rows >= ``group`` are
        padding). scale: float32 [B, Hk, Gp, 1].
      group: real query heads per kv head. reduce: max over the group. block_l: positions per
        program. interpret / platform: interpreter flag and compiler-param target.

    Returns:
      float32 [B, Hk, 1, L] (reduce) or [B, Hk, Gp, L]; no length mask (the caller applies it).
    """
    b, hk, l, w = codes.shape
    gp = probe.shape[2]
    rows = 1 if reduce else gp
    kern = functools.partial(_score_kernel, num_words=w, group=group, reduce=reduce)
    return pl.pallas_call(
        kern,
        out_shape=jax.ShapeDtypeStruct((b, hk, rows, l), jnp.float32),
        grid=(b, hk, pl.cdiv(l, block_l)),
        in_specs=[pl.BlockSpec((None, None, block_l, w), lambda i, h, j: (i, h, j, 0)),
                  pl.BlockSpec((None, None, gp, w * 32), lambda i, h, j: (i, h, 0, 0)),
                  pl.BlockSpec((None, None, gp, 1), lambda i, h, j: (i, h, 0, 0))],
        out_specs=pl.BlockSpec((None, None, rows, block_l), lambda i, h, j: (i, h, 0, j)),
        interpret=interpret,
        name="binary_hash_scores",
        **compiler_params_kwargs(interpret, platform, ("parallel", "parallel", "parallel")),
    )(codes, probe, scale)


# ----------------------------------------------------------------------------- attention


def _softmax_step(q, kb, vb, live, carry, sm_scale):
    """One online-softmax update of ``(o, m, l)`` with rows ``kb, vb [n, D]``; ``live [1, n]``."""
    o, m, l = carry
    s = jax.lax.dot_general(q, kb, (((1,), (1,)), ((), ())),
                            preferred_element_type=jnp.float32) * sm_scale      # [Gp, n]
    s = jnp.where(live, s, MASK_VALUE)
    m_new = jnp.maximum(m, jnp.max(s, axis=1, keepdims=True))                   # [Gp, 1]
    corr = jnp.exp(m - m_new)
    p = jnp.where(live, jnp.exp(s - m_new), 0.0)
    l_new = corr * l + jnp.sum(p, axis=1, keepdims=True)
    o_new = corr * o + jax.lax.dot_general(p.astype(vb.dtype), vb, (((1,), (0,)), ((), ())),
                                           preferred_element_type=jnp.float32)
    return o_new, m_new, l_new


def _attend_vector_kernel(q_ref, k_ref, v_ref, idx_ref, lim_ref, o_ref, m_ref, l_ref, *,
                          block_k, sm_scale):
    gp, d = q_ref.shape
    page = k_ref.shape[1]
    n = block_k * page
    q = q_ref[...]
    steps = idx_ref.shape[0] // block_k
    within = jax.lax.broadcasted_iota(jnp.int32, (block_k, page), 1)

    def body(j, carry):
        ids = idx_ref[pl.ds(j * block_k, block_k)]                      # [block_k] page ids
        lim = lim_ref[pl.ds(j * block_k, block_k)]                      # live tokens per page
        kb = k_ref[ids].reshape(n, d)                                   # in-kernel gather
        vb = v_ref[ids].reshape(n, d)
        live = (within < lim[:, None]).reshape(1, n)
        return _softmax_step(q, kb, vb, live, carry, sm_scale)

    init = (jnp.zeros((gp, d), jnp.float32), jnp.full((gp, 1), MASK_VALUE, jnp.float32),
            jnp.zeros((gp, 1), jnp.float32))
    o, m, l = jax.lax.fori_loop(0, steps, body, init)
    o_ref[...] = o
    m_ref[...] = m
    l_ref[...] = l


@functools.partial(jax.jit, static_argnames=("block_k", "num_splits", "sm_scale", "interpret",
                                             "platform"))
def attend_vector_call(q, k, v, idx, lim, *, block_k, num_splits, sm_scale, interpret, platform):
    """Sparse decode attention with in-kernel vector gathers (GPU pattern).

    Args:
      q: [B, Hk, Gp, D]. k, v: [B, Hk, NP, P, D] (pages of P tokens). idx, lim: int32
        [B, Hk, Kp] page ids (in range) and live-token counts, Kp = num_splits * m * block_k.

    Returns:
      Unnormalised partials ``o`` float32 [S, B, Hk, Gp, D] and ``m, l`` [S, B, Hk, Gp, 1]
      (running max and denominator per split), merged by the caller.
    """
    b, hk, gp, d = q.shape
    _, _, np_, page, _ = k.shape
    kp = idx.shape[-1]
    per = kp // num_splits
    kern = functools.partial(_attend_vector_kernel, block_k=block_k, sm_scale=sm_scale)
    kv_spec = pl.BlockSpec((None, None, np_, page, d), lambda i, h, s: (i, h, 0, 0, 0))
    sel_spec = pl.BlockSpec((None, None, per), lambda i, h, s: (i, h, s))
    stat = jax.ShapeDtypeStruct((num_splits, b, hk, gp, 1), jnp.float32)
    stat_spec = pl.BlockSpec((None, None, None, gp, 1), lambda i, h, s: (s, i, h, 0, 0))
    return pl.pallas_call(
        kern,
        out_shape=(jax.ShapeDtypeStruct((num_splits, b, hk, gp, d), jnp.float32), stat, stat),
        grid=(b, hk, num_splits),
        in_specs=[pl.BlockSpec((None, None, gp, d), lambda i, h, s: (i, h, 0, 0)),
                  kv_spec, kv_spec, sel_spec, sel_spec],
        out_specs=(pl.BlockSpec((None, None, None, gp, d), lambda i, h, s: (s, i, h, 0, 0)),
                   stat_spec, stat_spec),
        interpret=interpret,
        name="binary_hash_sparse_attention",
        **compiler_params_kwargs(interpret, platform, ("parallel", "parallel", "parallel")),
    )(q, k, v, idx, lim)


def _attend_prefetch_kernel(idx_ref, lim_ref, q_ref, *refs, block_k, num_kv_heads, kp, sm_scale):
    del idx_ref  # consumed by the index maps
    k_refs, v_refs = refs[:block_k], refs[block_k:2 * block_k]
    o_ref, acc_ref, m_ref, l_ref = refs[2 * block_k:]
    i, h, j = pl.program_id(0), pl.program_id(1), pl.program_id(2)
    page = k_refs[0].shape[0]
    n = block_k * page

    @pl.when(j == 0)
    def _init():
        acc_ref[...] = jnp.zeros_like(acc_ref)
        m_ref[...] = jnp.full_like(m_ref, MASK_VALUE)
        l_ref[...] = jnp.zeros_like(l_ref)

    base = (i * num_kv_heads + h) * kp + j * block_k
    pos = jax.lax.broadcasted_iota(jnp.int32, (1, n), 1)
    entry, within = pos // page, pos % page
    lim = jnp.zeros((1, n), jnp.int32)
    for t in range(block_k):
        lim = jnp.where(entry == t, lim_ref[base + t], lim)
    live = within < lim
    kb = k_refs[0][...] if block_k == 1 else jnp.concatenate([r[...] for r in k_refs], axis=0)
    vb = v_refs[0][...] if block_k == 1 else jnp.concatenate([r[...] for r in v_refs], axis=0)
    carry = (acc_ref[...], m_ref[...], l_ref[...])
    acc, m, l = _softmax_step(q_ref[...], kb, vb, live, carry, sm_scale)
    acc_ref[...] = acc
    m_ref[...] = m
    l_ref[...] = l

    @pl.when(j == pl.num_programs(2) - 1)
    def _finish():
        den = l_ref[...]
        o_ref[...] = jnp.where(den > 0, acc_ref[...] / jnp.where(den > 0, den, 1.0),
                               0.0).astype(o_ref.dtype)


@functools.partial(jax.jit, static_argnames=("block_k", "sm_scale", "interpret", "platform"))
def attend_prefetch_call(q, k, v, idx, lim, *, block_k, sm_scale, interpret, platform):
    """Sparse decode attention with scalar-prefetched page ids in the index maps (TPU pattern).

    Args:
      q: [B, Hk, G, D]. k, v: [B, Hk, NP, P, D]. idx, lim: int32 [B, Hk, Kp], Kp % block_k == 0.

    Returns:
      Normalised output float32 [B, Hk, G, D].
    """
    from jax.experimental.pallas import tpu as pltpu

    b, hk, g, d = q.shape
    page = k.shape[3]
    kp = idx.shape[-1]
    flat_idx, flat_lim = idx.reshape(-1), lim.reshape(-1)   # 1-D SMEM arrays pad the least

    def kv_map(t):
        def index_map(i, h, j, idx_ref, lim_ref):
            del lim_ref
            return i, h, idx_ref[(i * hk + h) * kp + j * block_k + t], 0, 0
        return index_map

    kv_specs = [pl.BlockSpec((None, None, None, page, d), kv_map(t)) for t in range(block_k)]
    grid_spec = pltpu.PrefetchScalarGridSpec(
        num_scalar_prefetch=2,
        grid=(b, hk, kp // block_k),
        in_specs=[pl.BlockSpec((None, None, g, d), lambda i, h, j, *_: (i, h, 0, 0)),
                  *kv_specs, *kv_specs],
        out_specs=pl.BlockSpec((None, None, g, d), lambda i, h, j, *_: (i, h, 0, 0)),
        scratch_shapes=[pltpu.VMEM((g, d), jnp.float32), pltpu.VMEM((g, 1), jnp.float32),
                        pltpu.VMEM((g, 1), jnp.float32)],
    )
    kern = functools.partial(_attend_prefetch_kernel, block_k=block_k, num_kv_heads=hk, kp=kp,
                             sm_scale=sm_scale)
    return pl.pallas_call(
        kern,
        out_shape=jax.ShapeDtypeStruct((b, hk, g, d), jnp.float32),
        grid_spec=grid_spec,
        interpret=interpret,
        name="binary_hash_sparse_attention_prefetch",
        **compiler_params_kwargs(interpret, platform, ("parallel", "parallel", "arbitrary")),
    )(flat_idx, flat_lim, q, *([k] * block_k), *([v] * block_k))

