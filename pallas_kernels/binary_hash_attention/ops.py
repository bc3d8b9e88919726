"""Public ops: argument checks, padding, block choice and ``implementation`` dispatch.

No ``custom_vjp``: both ops serve decoding (inference) and are not differentiated; the scores
are piecewise constant in the codes anyway.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from pallas_kernels import _common
from pallas_kernels._common import IMPLEMENTATIONS, Implementation, is_pow2, pow2_ceil, resolve
from pallas_kernels.binary_hash_attention.kernel import (AttentionBlockSizes, ScoreBlockSizes,
                                                         attend_prefetch_call,
                                                         attend_vector_call, hash_scores_call)
from pallas_kernels.binary_hash_attention.reference import (entry_limits, hash_scores_reference,
                                                            sparse_decode_attention_reference)

__all__ = ["hash_scores", "sparse_decode_attention", "IMPLEMENTATIONS", "GATHERS"]

GATHERS = ("auto", "vector", "prefetch")


def _concrete(x):
    """``x`` as a numpy array, or None when it is a tracer (inside jit / vmap)."""
    if isinstance(x, jax.core.Tracer):
        return None
    return np.asarray(x)


# ----------------------------------------------------------------------------- scores


def _check_scores(codes, probe, probe_scale, length, group_reduce):
    if codes.dtype != jnp.uint32:
        raise TypeError(f"codes must be uint32 [B, Hk, L, W] (packed bits), got dtype "
                        f"{codes.dtype}")
    if codes.ndim != 4:
        raise ValueError(f"codes must be [B, Hk, L, W], got shape {codes.shape}")
    if probe.dtype != jnp.int8:
        raise TypeError(f"probe must be int8 [B, Hq, num_bits], got dtype {probe.dtype}")
    if probe.ndim != 3:
        raise ValueError(f"probe must be [B, Hq, num_bits], got shape {probe.shape}")
    b, hk, _, w = codes.shape
    hq, nb = probe.shape[1], probe.shape[2]
    if nb % 32:
        raise ValueError(f"num_bits (probe.shape[-1]) must be a multiple of 32, got "
                         f"num_bits={nb}")
    if w * 32 != nb:
        raise ValueError(f"codes has W={w} words ({w * 32} bits) but the probe has "
                         f"num_bits={nb}")
    if probe.shape[0] != b:
        raise ValueError(f"probe batch {probe.shape[0]} != codes batch {b}")
    if hq % hk:
        raise ValueError(f"Hq={hq} query heads must be a multiple of Hk={hk} kv heads")
    if probe_scale.shape != (b, hq):
        raise ValueError(f"probe_scale must be [B, Hq]=({b}, {hq}), got {probe_scale.shape}")
    if length.shape != (b,):
        raise ValueError(f"length must be [B]=({b},), got shape {length.shape}")
    if not jnp.issubdtype(length.dtype, jnp.integer):
        raise TypeError(f"length must be an integer array, got dtype {length.dtype}")
    if group_reduce not in ("max", None):
        raise ValueError(f"group_reduce must be 'max' or None, got {group_reduce!r}")


def hash_scores(codes, probe, probe_scale, length, *, group_reduce: str | None = "max",
                implementation: Implementation = "auto",
                block_sizes: ScoreBlockSizes | None = None,
                interpret: bool | None = None) -> jax.Array:
    """BinaryPC scores of every cached key: ``probe_scale * sum_b u_b * probe_b``.

    The integer dot ``sum_b u_b probe_b`` is exact (int8 bit planes x int8 probe -> int32) and
    scaled once in float32, so the kernel equals :func:`hash_scores_reference` bit for bit.

    Args:
      codes: uint32 [B, Hk, L, W] packed key codes (bit j of word w is 1 iff u[32 w + j] = +1).
      probe: int8 [B, Hq, num_bits], num_bits = 32 W, values in [-127, 127].
      probe_scale: float32 [B, Hq].
      length: int [B]; positions >= length[b] score -inf.
      group_reduce: "max" -> [B, Hk, L] (max over each kv group's query heads), None ->
        [B, Hq, L].
      implementation: "pallas" (the kernel; interpret mode on CPU), "xla" (the reference), or
        "auto" (the compiled kernel on GPU/TPU, otherwise XLA with a one-time warning).
      block_sizes: :class:`ScoreBlockSizes`. interpret: default True exactly on CPU.

    Returns:
      float32 scores.

    >>> import jax, jax.numpy as jnp
    >>> from pallas_kernels.binary_hash_attention import pack_codes
    >>> u = jnp.where(jax.random.bernoulli(jax.random.key(0), 0.5, (1, 2, 40, 64)), 1, -1)
    >>> probe = jnp.full((1, 4, 64), 3, jnp.int8)
    >>> s = hash_scores(pack_codes(u), probe, jnp.full((1, 4), 0.5), jnp.array([33]),
    ...                 implementation="pallas")
    >>> s.shape, bool(s[0, 1, 5] == 1.5 * u[0, 1, 5].sum()), bool(jnp.isneginf(s[0, 0, 33]))
    ((1, 2, 40), True, True)
    """
    codes, probe = jnp.asarray(codes), jnp.asarray(probe)
    probe_scale, length = jnp.asarray(probe_scale, jnp.float32), jnp.asarray(length)
    _check_scores(codes, probe, probe_scale, length, group_reduce)
    b, hk, l, w = codes.shape
    hq = probe.shape[1]
    g = hq // hk
    bs = block_sizes or ScoreBlockSizes()
    if not isinstance(bs, ScoreBlockSizes):
        raise TypeError("block_sizes must be a ScoreBlockSizes")
    why = None
    if _common.platform() in ("cuda", "rocm") and not is_pow2(w):
        why = f"Triton blocks need a power-of-two word count, got W={w}"
    run = resolve("hash_scores", implementation, unsupported=why, interpret=interpret)
    if run.implementation == "xla":
        return hash_scores_reference(codes, probe, probe_scale, length, group_reduce=group_reduce)
    gp = max(8 if run.platform == "tpu" else 16, pow2_ceil(g))   # rows of an MXU / tl.dot tile
    p4 = jnp.pad(probe.reshape(b, hk, g, w * 32), ((0, 0), (0, 0), (0, gp - g), (0, 0)))
    s4 = jnp.pad(probe_scale.reshape(b, hk, g, 1), ((0, 0), (0, 0), (0, gp - g), (0, 0)))
    block_l = min(bs.block_l, max(128, pow2_ceil(l)))
    s = hash_scores_call(codes, p4, s4, group=g, reduce=group_reduce == "max", block_l=block_l,
                         interpret=run.interpret, platform=run.platform)
    live = jnp.arange(l)[None, None, None, :] < length.reshape(b, 1, 1, 1)
    s = jnp.where(live, s, -jnp.inf)
    if group_reduce == "max":
        return s[:, :, 0, :]
    return s[:, :, :g, :].reshape(b, hq, l)


# ----------------------------------------------------------------------------- attention


def _check_attention(q, k, v, indices, valid, length, page_size):
    if q.ndim != 3:
        raise ValueError(f"q must be [B, Hq, D], got shape {q.shape}")
    if k.ndim != 4:
        raise ValueError(f"k must be [B, Hk, L, D], got shape {k.shape}")
    if v.shape != k.shape:
        raise ValueError(f"v must have k's shape {k.shape}, got {v.shape}")
    for name, a in (("q", q), ("k", k), ("v", v)):
        if not jnp.issubdtype(a.dtype, jnp.floating):
            raise TypeError(f"{name} must be floating, got dtype {a.dtype}")
    b, hq, d = q.shape
    _, hk, l, dk = k.shape
    if dk != d:
        raise ValueError(f"head dim mismatch: q has D={d}, k and v have D={dk}")
    if k.shape[0] != b:
        raise ValueError(f"batch mismatch: q has B={b}, k has B={k.shape[0]}")
    if hq % hk:
        raise ValueError(f"Hq={hq} query heads must be a multiple of Hk={hk} kv heads")
    if not isinstance(page_size, (int, np.integer)) or page_size < 1:
        raise ValueError(f"page_size must be a positive int, got {page_size!r}")
    if indices.ndim != 3 or indices.shape[:2] != (b, hk):
        raise ValueError(f"indices must be [B, Hk, K]=({b}, {hk}, K), got {indices.shape}")
    if not jnp.issubdtype(indices.dtype, jnp.integer):
        raise TypeError(f"indices must be an integer array, got dtype {indices.dtype}")
    if valid.shape != indices.shape:
        raise ValueError(f"valid must have indices' shape {indices.shape}, got {valid.shape}")
    if valid.dtype != jnp.bool_:
        raise TypeError(f"valid must be bool, got dtype {valid.dtype}")
    if length is not None and (length.shape != (b,)
                               or not jnp.issubdtype(length.dtype, jnp.integer)):
        raise ValueError(f"length must be an int [B]=({b},) array, got {length.dtype} "
                         f"{length.shape}")
    num_pages = -(-l // page_size)
    idx_np, valid_np = _concrete(indices), _concrete(valid)
    if idx_np is not None and valid_np is not None:
        bad = valid_np & ((idx_np < 0) | (idx_np >= num_pages))
        if bad.any():
            where = tuple(int(i) for i in np.argwhere(bad)[0])
            unit = "token" if page_size == 1 else f"page (of {page_size} tokens)"
            raise ValueError(f"indices out of range: valid entry {where} = {idx_np[where]} is "
                             f"not a {unit} index in [0, {num_pages})")


def _attention_blocks(bs, page_size, gather, plat, interpret, b, hk, k_sel):
    block_k = bs.block_k
    if block_k is None:   # ~64 tokens per step (vector gather), 8 pages / 16 tokens (prefetch)
        block_k = max(1, 64 // page_size) if gather == "vector" else (16 if page_size == 1 else 8)
        block_k = max(block_k, -(-16 // page_size))             # tl.dot needs >= 16 rows
        block_k = min(block_k, pow2_ceil(k_sel))
        block_k = max(block_k, -(-16 // page_size)) if gather == "vector" else block_k
    splits = bs.num_splits if gather == "vector" else 1
    if splits is None:    # flash-decoding: enough programs to fill a GPU, none in interpret mode
        splits = 1
        if plat in ("cuda", "rocm") and not interpret:
            splits = max(1, min(-(-k_sel // block_k), 128 // (b * hk)))
    return int(block_k), int(splits)


def sparse_decode_attention(q, k, v, indices, valid, *, length=None, page_size: int = 1,
                            sm_scale: float | None = None,
                            implementation: Implementation = "auto",
                            gather: str = "auto", block_sizes: AttentionBlockSizes | None = None,
                            interpret: bool | None = None,
                            platform: str | None = None) -> jax.Array:
    """Decode attention of each query head over the selected tokens / pages of its kv head.

    Online softmax over blocks of gathered rows with float32 accumulation; GQA query head ``h``
    reads kv head ``h // (Hq // Hk)``. Entries with ``valid == False`` are ignored; so are
    out-of-range indices under jit (eagerly they raise), and tokens at positions >= ``length``.

    Args:
      q: [B, Hq, D] floating. k, v: [B, Hk, L, D].
      indices: int [B, Hk, K] token indices (``page_size == 1``) or page indices (page p covers
        tokens [p * page_size, (p + 1) * page_size)). valid: bool [B, Hk, K].
      length: optional int [B]: tokens at positions >= length[b] are masked.
      page_size: tokens per selected entry (16-64 are natural kernel granularities).
      sm_scale: logit scale, default 1 / sqrt(D).
      implementation: "pallas" | "xla" | "auto" (see :func:`hash_scores`).
      gather: "vector" (in-kernel gather: the GPU / Triton pattern), "prefetch" (scalar-prefetched
        page ids in the index maps: the TPU pattern), or "auto" (prefetch on TPU, else vector).
      block_sizes: :class:`AttentionBlockSizes`; ``None`` fields are chosen automatically.
      interpret: default True exactly on CPU.
      platform: the backend to plan for (default: this process's); ``"cuda"`` on a CPU machine
        with ``interpret=False`` builds the Triton kernel for ``lowering_platforms=("cuda",)``.

    Returns:
      [B, Hq, D] in q's dtype.

    >>> import jax, jax.numpy as jnp
    >>> ks = jax.random.split(jax.random.key(0), 3)
    >>> q = jax.random.normal(ks[0], (1, 4, 32))
    >>> k, v = (jax.random.normal(kk, (1, 2, 128, 32)) for kk in ks[1:])
    >>> idx = jnp.array([[[0, 3, 5, 7], [1, 2, 3, 3]]])
    >>> valid = jnp.array([[[True, True, True, False], [True, True, True, True]]])
    >>> o = sparse_decode_attention(q, k, v, idx, valid, page_size=16, length=jnp.array([120]),
    ...                             implementation="pallas")
    >>> ref = sparse_decode_attention_reference(q, k, v, idx, valid, page_size=16,
    ...                                         length=jnp.array([120]))
    >>> o.shape, bool(jnp.allclose(o, ref, atol=1e-5))
    ((1, 4, 32), True)
    """
    q, k, v = jnp.asarray(q), jnp.asarray(k), jnp.asarray(v)
    indices, valid = jnp.asarray(indices), jnp.asarray(valid)
    length = None if length is None else jnp.asarray(length)
    _check_attention(q, k, v, indices, valid, length, page_size)
    if gather not in GATHERS:
        raise ValueError(f"gather must be one of {GATHERS}, got {gather!r}")
    b, hq, d = q.shape
    _, hk, l, _ = k.shape
    k_sel = indices.shape[-1]
    g = hq // hk
    sm_scale = float(d ** -0.5 if sm_scale is None else sm_scale)
    bs = block_sizes or AttentionBlockSizes(block_k=None, num_splits=None)
    if not isinstance(bs, AttentionBlockSizes):
        raise TypeError("block_sizes must be an AttentionBlockSizes")
    plat = _common.check_platform(platform)
    if gather == "auto":
        gather = "prefetch" if plat == "tpu" else "vector"
    block_k, splits = _attention_blocks(bs, page_size, gather, plat, interpret, b, hk, k_sel)
    why = None
    if gather == "vector" and plat in ("cuda", "rocm"):
        if not (is_pow2(d) and is_pow2(page_size) and is_pow2(block_k)
                and block_k * page_size >= 16):
            why = ("Triton blocks need power-of-two D, page_size and block_k, and block_k * "
                   f"page_size >= 16 (D={d}, page_size={page_size}, block_k={block_k})")
    run = resolve("sparse_decode_attention", implementation, unsupported=why,
                  interpret=interpret, platform=plat)
    interpret, plat = run.interpret, run.platform
    if run.implementation == "xla":
        return sparse_decode_attention_reference(q, k, v, indices, valid, length=length,
                                                 page_size=page_size, sm_scale=sm_scale)
    num_pages = -(-l // page_size)
    if num_pages * page_size != l:   # a partial last page: pad (a copy; prefer L % page_size == 0)
        pad = ((0, 0), (0, 0), (0, num_pages * page_size - l), (0, 0))
        k, v = jnp.pad(k, pad), jnp.pad(v, pad)
    k5 = k.reshape(b, hk, num_pages, page_size, d)
    v5 = v.reshape(b, hk, num_pages, page_size, d)
    lim = entry_limits(indices, valid, l, page_size, length)
    idx = jnp.where(lim > 0, indices.astype(jnp.int32), 0)   # masked entries read page 0
    chunk = block_k * splits
    kp = -(-k_sel // chunk) * chunk
    pad_k = ((0, 0), (0, 0), (0, kp - k_sel))
    idx, lim = jnp.pad(idx, pad_k), jnp.pad(lim, pad_k)
    if gather == "prefetch":
        q4 = q.reshape(b, hk, g, d)
        o = attend_prefetch_call(q4, k5, v5, idx, lim, block_k=block_k, sm_scale=sm_scale,
                                 interpret=interpret, platform=plat)
        return o.reshape(b, hq, d).astype(q.dtype)
    gp = max(16, pow2_ceil(g))
    q4 = jnp.pad(q.reshape(b, hk, g, d), ((0, 0), (0, 0), (0, gp - g), (0, 0)))
    o, m, den = attend_vector_call(q4, k5, v5, idx, lim, block_k=block_k, num_splits=splits,
                                   sm_scale=sm_scale, interpret=interpret, platform=plat)
    # merge the splits' partial softmaxes (flash-decoding)
    m_all = jnp.max(m, axis=0)
    w = jnp.exp(m - m_all)
    den = jnp.sum(w * den, axis=0)
    o = jnp.sum(w * o, axis=0)
    o = jnp.where(den > 0, o / jnp.where(den > 0, den, 1.0), 0.0)
    return o[:, :, :g, :].reshape(b, hq, d).astype(q.dtype)
