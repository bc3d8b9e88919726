"""Dense reference, token selection, sparse attention and the decode step (unbatched).

One decode step of a selector (Alg. "select and attend" of BinaryPC): score every hashed slot,
force-select the state's forced slots (BinaryPC: the 10% of the budget with the largest
reconstruction error), take the per-kv-head top-``budget`` (a static size), add the tokens
decoded after the hash was built (the last ``new_window`` slots past ``hash_length``; static
size), then attend over the gathered rows. Lengths are masks, so shapes never depend on data and
one compilation serves every step of a budget.

Letters: ``Hq`` query heads, ``Hk`` kv heads (GQA groups of ``G = Hq / Hk``), ``S`` slots,
``D`` head dimension, ``K = budget + new_window`` selected slots, ``B`` batch, ``N`` layers.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxpapers.attention import _checks
from jaxpapers.attention._types import (BinaryPCState, OracleState, QuestState, RandomState,
                                        SignCodeState)
from jaxpapers.attention.baselines import (magicpig_build, oracle_build, oracle_token_scores,
                                           pcasign_build, quest_build, quest_token_scores,
                                           random_build, random_token_scores, simhash_build,
                                           sign_code_token_scores)
from jaxpapers.attention.binarypc import binarypc_build, binarypc_token_scores
from pallas_kernels import binary_hash_attention as bha
from pallas_kernels._common import Implementation, resolve

__all__ = ["dense_attention", "token_scores", "forced_slots", "select", "attend", "decode_step",
           "selection_quality", "build_state", "METHOD_NAMES", "num_forced_for",
           "make_attn_fn", "make_attn_state_fn"]

_SCORERS: dict[type, Callable] = {
    BinaryPCState: binarypc_token_scores,
    SignCodeState: sign_code_token_scores,
    QuestState: quest_token_scores,
    OracleState: oracle_token_scores,
    RandomState: random_token_scores,
}


def _scale(sm_scale, d):
    return 1.0 / math.sqrt(d) if sm_scale is None else sm_scale


def _acc_dtype(q, keys):
    """f32 accumulation, or f64 when the inputs are f64."""
    return jnp.result_type(q.dtype, keys.dtype, jnp.float32)


def _check_qkv(q, keys, values):
    _checks.check_ndim("q", q, 2, "[Hq, D]")
    _checks.check_ndim("keys", keys, 3, "[Hk, S, D]")
    _checks.check_head_dims("q", q.shape[-1], "keys", keys.shape[-1])
    if values is not None and values.shape[:2] != keys.shape[:2]:
        raise ValueError(f"values must have shape [Hk, S, Dv] matching keys {keys.shape[:2]}, "
                         f"got {values.shape}")
    return _checks.check_groups(q.shape[0], keys.shape[0])


def dense_attention(q: jax.Array, keys: jax.Array, values: jax.Array, length: jax.Array | int,
                    *, sm_scale: float | None = None) -> jax.Array:
    """Exact decode attention over slots [0, length) (unbatched; GQA).

    Args:
      q: [Hq, D] post-RoPE queries (not pre-scaled). keys: [Hk, S, D]. values: [Hk, S, Dv].
      length: [] int, valid slots. sm_scale: logit scale (default 1 / sqrt(D)).

    Returns:
      [Hq, Dv] attention outputs.

    >>> import jax, jax.numpy as jnp
    >>> q, k, v = (jax.random.normal(jax.random.key(i), s) for i, s in
    ...            enumerate([(4, 8), (2, 16, 8), (2, 16, 8)]))
    >>> dense_attention(q, k, v, 10).shape
    (4, 8)
    """
    g = _check_qkv(q, keys, values)
    hk, s, d = keys.shape
    acc = _acc_dtype(q, keys)
    qg = q.reshape(hk, g, d).astype(acc)
    logits = jnp.einsum("hgd,hsd->hgs", qg, keys.astype(acc)) * _scale(sm_scale, d)
    logits = jnp.where(jnp.arange(s) < length, logits, -jnp.inf)
    p = jax.nn.softmax(logits, axis=-1)
    return jnp.einsum("hgs,hsd->hgd", p, values.astype(acc)).reshape(q.shape[0], -1)


def token_scores(state: Any, q: jax.Array, keys: jax.Array) -> jax.Array:
    """Selection scores [Hk, S] of any state type (-inf past its ``hash_length``)."""
    scorer = _SCORERS.get(type(state))
    if scorer is None:
        raise ValueError(f"state must be one of {[t.__name__ for t in _SCORERS]}, "
                         f"got {type(state).__name__}")
    return scorer(state, q, keys)


def forced_slots(state: Any, num_kv_heads: int) -> jax.Array:
    """[Hk, E] slots always selected (BinaryPC's high-error tokens; E = 0 otherwise)."""
    if isinstance(state, BinaryPCState):
        return state.forced
    return jnp.zeros((num_kv_heads, 0), jnp.int32)


def select(scores: jax.Array, forced: jax.Array, hash_length: jax.Array | int,
           length: jax.Array | int, *, budget: int, new_window: int = 0
           ) -> tuple[jax.Array, jax.Array]:
    """Per-kv-head top-``budget`` over the hashed slots, plus forced and newly decoded slots.

    Args:
      scores: [Hk, S] (values past ``hash_length`` are ignored).
      forced: [Hk, E] int32 slots given priority over any score (-1 = unused).
      hash_length: [] int, hashed slots. length: [] int, valid slots (>= hash_length).
      budget: static top-k size (<= S).
      new_window: static number of slots reserved for tokens decoded after the hash; the most
        recent ``min(length - hash_length, new_window)`` of them are selected.

    Returns:
      ``(indices [Hk, budget + new_window] int32, valid [Hk, budget + new_window] bool)``.
    """
    hk, s = scores.shape
    _checks.check_budget(budget, s)
    if new_window < 0:
        raise ValueError(f"new_window must be >= 0, got {new_window}")
    pos = jnp.arange(s)
    sc = jnp.where(pos < hash_length, scores.astype(jnp.float32), -jnp.inf)
    if forced.shape[-1]:
        tgt = jnp.where(forced >= 0, forced, s)
        sc = jax.vmap(lambda r, t: r.at[t].set(jnp.inf, mode="drop"))(sc, tgt)
        sc = jnp.where(pos < hash_length, sc, -jnp.inf)
    vals, idx = jax.lax.top_k(sc, budget)
    valid = vals > -jnp.inf
    idx = idx.astype(jnp.int32)
    if new_window:
        start = jnp.maximum(hash_length, length - new_window)
        w = start + jnp.arange(new_window, dtype=jnp.int32)
        wv = w < length
        w = jnp.minimum(w, s - 1)
        idx = jnp.concatenate([idx, jnp.broadcast_to(w, (hk, new_window))], axis=1)
        valid = jnp.concatenate([valid, jnp.broadcast_to(wv, (hk, new_window))], axis=1)
    return idx, valid


def attend(q: jax.Array, keys: jax.Array, values: jax.Array, indices: jax.Array,
           valid: jax.Array, *, sm_scale: float | None = None) -> jax.Array:
    """Attention over the gathered rows (unbatched): [Hq, D] x [Hk, K] indices -> [Hq, Dv]."""
    g = _check_qkv(q, keys, values)
    hk, _, d = keys.shape
    acc = _acc_dtype(q, keys)
    ks = jnp.take_along_axis(keys, indices[..., None], axis=1).astype(acc)
    vs = jnp.take_along_axis(values, indices[..., None], axis=1).astype(acc)
    qg = q.reshape(hk, g, d).astype(acc)
    logits = jnp.einsum("hgd,hkd->hgk", qg, ks) * _scale(sm_scale, d)
    logits = jnp.where(valid[:, None, :], logits, -jnp.inf)
    p = jax.nn.softmax(logits, axis=-1)
    return jnp.einsum("hgk,hkd->hgd", p, vs).reshape(q.shape[0], -1)


def decode_step(state: Any, q: jax.Array, keys: jax.Array, values: jax.Array,
                length: jax.Array | int, *, budget: int, new_window: int = 0,
                sm_scale: float | None = None, implementation: Implementation = "xla") -> jax.Array:
    """One sparse decode-attention step of one layer (unbatched; vmap over batch).

    Args:
      state: the layer's selection state (:class:`BinaryPCState`, :class:`SignCodeState`,
        :class:`QuestState`, :class:`OracleState` or :class:`RandomState`).
      q: [Hq, D] post-RoPE query of the new token (not pre-scaled).
      keys: [Hk, S, D], values: [Hk, S, Dv]: the cache, the new token written at length - 1.
      length: [] int valid slots (counts the new token).
      budget: static top-k size per kv head. new_window: static slots for decoded tokens.
      sm_scale: logit scale (default 1 / sqrt(D)).
      implementation: "xla" (default: the jnp scorers and :func:`attend`), "pallas" (BinaryPC
        scoring with a 7-bit probe and the sparse attention run the kernels of
        ``pallas_kernels.binary_hash_attention``, interpreted on CPU; raises if they cannot run),
        or "auto" (the compiled kernels where they can run, else "xla" with a warning).

    Returns:
      [Hq, Dv] attention output.

    >>> import jax
    >>> k = jax.random.normal(jax.random.key(0), (2, 64, 16))
    >>> st = build_state("binarypc64", k, 60, jax.random.key(1), budget=8, num_bits=32)
    >>> decode_step(st, k[:, 61], k, k, 62, budget=8, new_window=4).shape
    (2, 16)
    """
    kernels = resolve("decode_step", implementation).implementation == "pallas"
    _check_qkv(q, keys, values)
    hk, s, _ = keys.shape
    _checks.check_budget(budget, s)
    _checks.check_length("length", length, s)
    if kernels and isinstance(state, BinaryPCState) and state.probe_bits == 7:
        g = q.shape[0] // hk
        probe = jnp.einsum("hgd,hbd->hgb", q.reshape(hk, g, -1).astype(jnp.float32),
                           state.proj).reshape(q.shape[0], -1)
        pq, pscale = bha.quantize_probe(probe, 7)
        scores = bha.hash_scores(state.codes[None], pq[None], pscale[None],
                                 jnp.reshape(state.hash_length, (1,)), group_reduce="max",
                                 implementation=implementation)[0]
    else:
        scores = token_scores(state, q, keys)
    idx, valid = select(scores, forced_slots(state, hk), state.hash_length, length,
                        budget=budget, new_window=new_window)
    if kernels:
        return bha.sparse_decode_attention(q[None], keys[None], values[None], idx[None],
                                           valid[None], page_size=1,
                                           length=jnp.reshape(length, (1,)),
                                           sm_scale=_scale(sm_scale, keys.shape[-1]),
                                           implementation=implementation)[0]
    return attend(q, keys, values, idx, valid, sm_scale=sm_scale)


def selection_quality(q: jax.Array, keys: jax.Array, values: jax.Array, length: jax.Array | int,
                      indices: jax.Array, valid: jax.Array, *, k_ref: int,
                      sm_scale: float | None = None) -> dict[str, jax.Array]:
    """How good a selection is for one query (unbatched; means over query heads).

    Args:
      q: [Hq, D]. keys, values: [Hk, S, D]. length: [] valid slots.
      indices, valid: [Hk, K] a selection (from :func:`select`).
      k_ref: size of the exact top-k (per query head) whose recall is measured.

    Returns:
      ``{"recall": |selected ∩ exact top-k_ref| / k_ref, "mass": softmax mass on the selected
      slots, "out_err": ||o_sparse - o_dense|| / ||o_dense||}``, each a scalar.
    """
    g = _check_qkv(q, keys, values)
    hk, s, d = keys.shape
    sel = jnp.zeros((hk, s + 1), bool)
    sel = jax.vmap(lambda r, i, v: r.at[jnp.where(v, i, s)].set(True))(sel, indices, valid)
    sel = jnp.repeat(sel[:, :s], g, axis=0)  # [Hq, S]
    logits = jnp.einsum("hd,hsd->hs", q.astype(jnp.float32),
                        jnp.repeat(keys, g, axis=0).astype(jnp.float32)) * _scale(sm_scale, d)
    inside = jnp.arange(s) < length
    logits = jnp.where(inside, logits, -jnp.inf)
    _, top = jax.lax.top_k(logits, k_ref)
    recall = jnp.mean(jnp.take_along_axis(sel, top, axis=1), axis=1)
    mass = jnp.sum(jnp.where(sel & inside, jax.nn.softmax(logits, axis=-1), 0.0), axis=1)
    dense = dense_attention(q, keys, values, length, sm_scale=sm_scale)
    sparse = attend(q, keys, values, indices, valid, sm_scale=sm_scale)
    err = jnp.linalg.norm(sparse - dense, axis=-1) / jnp.maximum(
        jnp.linalg.norm(dense, axis=-1), 1e-30)
    return {"recall": jnp.mean(recall), "mass": jnp.mean(mass), "out_err": jnp.mean(err)}


METHOD_NAMES = ("binarypc64", "binarypc32", "simhash64", "simhash32", "simhash64_hamming",
                "simhash32_hamming", "magicpig", "pcasign64", "pcasign32", "quest", "oracle",
                "random")


def num_forced_for(budget: int, err_fraction: float = 0.1) -> int:
    """BinaryPC's forced high-error tokens: max(int(err_fraction * budget), 1) (official)."""
    return max(int(budget * err_fraction), 1) if err_fraction > 0 else 0


def build_state(method: str, keys: jax.Array, hash_length: jax.Array | int, key: jax.Array, *,
                budget: int, num_bits: int | None = None, err_fraction: float = 0.1,
                probe_bits: int = 7, page_size: int = 16, table_bits: int = 10,
                num_tables: int = 150) -> Any:
    """Build one layer's state for a named method (unbatched; Python-level dispatch).

    Args:
      method: one of :data:`METHOD_NAMES` (a trailing bit count sets ``num_bits``).
      keys: [Hk, S, D] post-RoPE keys; the first ``hash_length`` slots are hashed.
      hash_length: [] int. key: ``jax.random.key``; consumed.
      budget: the top-k size the state is built for (sets BinaryPC's forced count).
      num_bits: overrides the bit count in the name.
      err_fraction: BinaryPC's forced fraction of the budget (official 0.1).
      probe_bits, page_size, table_bits, num_tables: per-method options.

    Returns:
      the state (a registered pytree dataclass).
    """
    keys = jnp.asarray(keys)
    _checks.check_ndim("keys", keys, 3, "[Hk, S, D]")
    _checks.check_budget(budget, keys.shape[1])
    if _checks.is_concrete(hash_length):
        _checks.check_budget(budget, int(np.max(np.asarray(hash_length))))
    base = method.removesuffix("_hamming")
    digits = "".join(c for c in base if c.isdigit())
    bits = num_bits if num_bits is not None else (int(digits) if digits else 64)
    if base.startswith("binarypc"):
        return binarypc_build(keys, hash_length, key, num_bits=bits,
                              num_forced=num_forced_for(budget, err_fraction),
                              probe_bits=probe_bits)
    if base.startswith("simhash"):
        return simhash_build(keys, hash_length, key, num_bits=bits,
                             hamming=method.endswith("_hamming"))
    if base.startswith("pcasign"):
        return pcasign_build(keys, hash_length, key, num_bits=bits)
    if method == "magicpig":
        return magicpig_build(keys, hash_length, key, table_bits=table_bits,
                              num_tables=num_tables)
    if method == "quest":
        return quest_build(keys, hash_length, key, page_size=page_size)
    if method == "oracle":
        return oracle_build(keys, hash_length, key)
    if method == "random":
        return random_build(keys, hash_length, key)
    raise ValueError(f"method must be one of {METHOD_NAMES}, got {method!r}")


def make_attn_state_fn(method: str, key: jax.Array, *, budget: int, dense_layers: int = 0,
                       **options) -> Callable:
    """An LM ``attn_state_fn(cache) -> state`` building every layer's state after a prefill.

    The state's leaves get leading [N, B] axes (layers, batch); ``hash_length`` is the cache
    length at build time. Keys for the layers and sequences are split from ``key``. States of
    the first ``dense_layers`` layers (never read by :func:`make_attn_fn` with the same
    ``dense_layers``) are copies of the first sparse layer's, which saves building them.
    """

    def state_fn(cache):
        n, b = cache.k.shape[:2]
        first = min(dense_layers, n - 1)
        keys = jax.random.split(key, (n - first, b))
        one = lambda k, kk, ln: build_state(method, k, ln, kk, budget=budget,  # noqa: E731
                                            **options)
        per_layer = jax.vmap(one, in_axes=(0, 0, 0))  # over batch
        st = jax.vmap(per_layer, in_axes=(0, 0, None))(cache.k[first:], keys, cache.length)
        return jax.tree.map(lambda x: jnp.concatenate([jnp.repeat(x[:1], first, 0), x]), st)

    return state_fn


def make_attn_fn(*, budget: int, new_window: int = 0, dense_layers: int = 2,
                 sm_scale: float | None = None, implementation: Implementation = "xla"
                 ) -> Callable:
    """An LM ``attn_fn(q [B,Hq,D], k [B,Hk,S,D], v, length [B], layer_state, layer)``.

    Layers ``< dense_layers`` attend densely (official: layers 0 and 1); the others run
    :func:`decode_step` vmapped over the batch. ``layer`` may be traced (inside a scan).
    """

    def attn_fn(q, k, v, length, layer_state, layer):
        def dense(_):
            return jax.vmap(lambda a, b_, c, d: dense_attention(a, b_, c, d, sm_scale=sm_scale))(
                q, k, v, length).astype(q.dtype)

        def sparse(st):
            return jax.vmap(lambda s_, a, b_, c, d: decode_step(
                s_, a, b_, c, d, budget=budget, new_window=new_window, sm_scale=sm_scale,
                implementation=implementation))(st, q, k, v, length).astype(q.dtype)

        # one branch runs (a select when ``layer`` is batched by an outer vmap)
        return jax.lax.cond(layer < dense_layers, dense, sparse, layer_state)

    return attn_fn
