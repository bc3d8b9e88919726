"""Baseline selectors at equal bit counts (unbatched, one layer, all kv heads).

* SimHash (random-projection LSH): u_b = sign(k . r_b), r_b ~ N(0, I); scored by Hamming
  agreement with sign(q . r_b) or asymmetrically by sum_b u_b (q . r_b).
* PCA-sign: u_b = sign((k - mean) . w_b) on the top principal directions w_b of the keys (the
  classic data-aware baseline); scored asymmetrically with rows c_b w_b, c_b = mean |(k - mean)
  . w_b| (the least-squares scale of a sign code), so q . k^ up to a constant.
* MagicPIG-style LSH tables: ``NB / table_bits`` tables of ``table_bits`` SimHash bits; a token
  collides with the query in a table when all its bits agree. MagicPIG samples colliding tokens;
  at a fixed token budget we rank by the number of colliding tables (ties broken by Hamming
  agreement), which is the top-k reading of the same hash.
* Quest: pages of ``page_size`` tokens with per-channel key min / max; page bound
  sum_d max(q_d min_d, q_d max_d); every token inherits its page's bound, so a token top-k picks
  whole pages in bound order.
* Oracle: exact q . k. Random: fixed random priorities.
For grouped-query attention every scorer takes the max over the group's query heads.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxpapers.attention import _checks
from jaxpapers.attention._types import (SIGN_CODE_MODES, OracleState, QuestState, RandomState,
                                        SignCodeState)
from pallas_kernels.binary_hash_attention.reference import pack_codes, unpack_codes

__all__ = ["simhash_build", "pcasign_build", "magicpig_build", "quest_build", "oracle_build",
           "random_build", "sign_code_token_scores", "quest_token_scores",
           "oracle_token_scores", "random_token_scores"]


def _float(x):
    """f32, or f64 when given f64 (tests in float64)."""
    x = jnp.asarray(x)
    return x.astype(jnp.result_type(x.dtype, jnp.float32))


def _prep(keys, hash_length):
    keys = _float(keys)
    _checks.check_ndim("keys", keys, 3, "[Hk, S, D]")
    _checks.check_finite("keys", keys)
    _checks.check_length("hash_length", hash_length, keys.shape[1])
    return keys, jnp.asarray(hash_length, jnp.int32)


def _sign_codes(keys, proj, offset):
    """[Hk, S, D], [Hk, NB, D], [Hk, D] -> packed [Hk, S, W]."""
    proj_vals = jnp.einsum("hsd,hbd->hsb", keys - offset[:, None, :], proj)
    return pack_codes(jnp.where(proj_vals >= 0, 1.0, -1.0))


def simhash_build(keys, hash_length, key, *, num_bits: int = 64,
                  hamming: bool = False) -> SignCodeState:
    """SimHash codes of one layer's keys [Hk, S, D] with fresh Gaussian hyperplanes per head.

    >>> import jax
    >>> k = jax.random.normal(jax.random.key(0), (2, 64, 16))
    >>> st = simhash_build(k, 60, jax.random.key(1), num_bits=32, hamming=True)
    >>> st.codes.shape, st.mode
    ((2, 64, 1), 'hamming')
    """
    keys, hash_length = _prep(keys, hash_length)
    _checks.check_num_bits(num_bits)
    hk, _, d = keys.shape
    proj = jax.random.normal(key, (hk, num_bits, d), keys.dtype)
    offset = jnp.zeros((hk, d), keys.dtype)
    return SignCodeState(proj=proj, offset=offset, codes=_sign_codes(keys, proj, offset),
                         hash_length=hash_length, mode="hamming" if hamming else "asymmetric")


def magicpig_build(keys, hash_length, key, *, table_bits: int = 10,
                   num_tables: int = 150) -> SignCodeState:
    """MagicPIG-style tables: ``num_tables`` SimHash tables of ``table_bits`` bits (K=10, L=150
    in MagicPIG). The bits are padded with unused random rows to a multiple of 32."""
    keys, hash_length = _prep(keys, hash_length)
    if not 1 <= table_bits <= 32 or num_tables < 1:
        raise ValueError(f"table_bits must lie in [1, 32] and num_tables >= 1, got "
                         f"{table_bits}, {num_tables}")
    hk, _, d = keys.shape
    used = table_bits * num_tables
    nb = -(-used // 32) * 32
    proj = jax.random.normal(key, (hk, nb, d), keys.dtype)
    offset = jnp.zeros((hk, d), keys.dtype)
    return SignCodeState(proj=proj, offset=offset, codes=_sign_codes(keys, proj, offset),
                         hash_length=hash_length, mode="tables", table_bits=table_bits)


def pcasign_build(keys, hash_length, key=None, *, num_bits: int = 64) -> SignCodeState:
    """PCA-sign codes: top principal directions of the valid keys of each head.

    With D < ``num_bits`` only D directions exist; the remaining rows are zero (their bits are
    constant and add nothing to a score), so "pcasign64" on D = 16 is 16 useful bits.
    ``key`` is unused (PCA is deterministic) and accepted for a uniform builder signature.
    """
    del key
    keys, hash_length = _prep(keys, hash_length)
    _checks.check_num_bits(num_bits)
    hk, s, d = keys.shape
    used = min(num_bits, d)
    mask = (jnp.arange(s) < hash_length).astype(keys.dtype)
    n = jnp.maximum(jnp.sum(mask), 1.0)

    def one(kh):
        mu = jnp.sum(kh * mask[:, None], 0) / n
        c = (kh - mu) * mask[:, None]
        _, vecs = jnp.linalg.eigh(c.T @ c / n)
        w = vecs[:, ::-1][:, :used].T  # [used, D], largest variance first
        scale = jnp.sum(jnp.abs(c @ w.T), 0) / n
        proj = jnp.zeros((num_bits, d), keys.dtype).at[:used].set(w * scale[:, None])
        return proj, mu

    proj, offset = jax.vmap(one)(keys)
    return SignCodeState(proj=proj, offset=offset, codes=_sign_codes(keys, proj, offset),
                         hash_length=hash_length, mode="asymmetric")


def quest_build(keys, hash_length, key=None, *, page_size: int = 16) -> QuestState:
    """Per-page channel min / max of the valid keys (the last page may be partial)."""
    del key
    keys, hash_length = _prep(keys, hash_length)
    hk, s, d = keys.shape
    if isinstance(page_size, bool) or not isinstance(page_size, int) or page_size < 1:
        raise ValueError(f"page_size must be a positive int, got {page_size!r}")
    npages = -(-s // page_size)
    pad = npages * page_size - s
    valid = (jnp.arange(s + pad) < jnp.minimum(hash_length, s))[None, :, None]
    padded = jnp.pad(keys, ((0, 0), (0, pad), (0, 0)))
    pages = lambda x: x.reshape(hk, npages, page_size, d)  # noqa: E731
    kmin = jnp.min(pages(jnp.where(valid, padded, jnp.inf)), axis=2)
    kmax = jnp.max(pages(jnp.where(valid, padded, -jnp.inf)), axis=2)
    return QuestState(kmin=kmin, kmax=kmax, hash_length=hash_length, page_size=page_size)


def oracle_build(keys, hash_length, key=None) -> OracleState:
    del key
    _, hash_length = _prep(keys, hash_length)
    return OracleState(hash_length=hash_length)


def random_build(keys, hash_length, key) -> RandomState:
    keys, hash_length = _prep(keys, hash_length)
    hk, s, _ = keys.shape
    return RandomState(noise=jax.random.uniform(key, (hk, s)), hash_length=hash_length)


def _grouped(q, hk):
    g = _checks.check_groups(q.shape[0], hk)
    return _float(q).reshape(hk, g, -1)


def _mask(scores, hash_length):
    return jnp.where(jnp.arange(scores.shape[-1]) < hash_length, scores, -jnp.inf)


def _table_buckets(codes, table_bits: int, num_tables: int):
    """Bucket id of each table: bits [t K, (t + 1) K) of the packed codes, [..., W] -> [..., T].

    A table's bits may straddle two uint32 words; they are joined with shifts.
    """
    start = np.arange(num_tables) * table_bits
    w0, off = start // 32, start % 32
    w1 = np.minimum(w0 + 1, codes.shape[-1] - 1)
    lo = codes[..., w0] >> off.astype(np.uint32)
    hi = jnp.where(off > 0, codes[..., w1] << ((32 - off) % 32).astype(np.uint32), 0)
    return (lo | hi.astype(jnp.uint32)) & np.uint32((1 << table_bits) - 1)


def sign_code_token_scores(state: SignCodeState, q, keys=None):
    """[Hq, D] queries -> [Hk, S] scores of a :class:`SignCodeState` (max over the group)."""
    if state.mode not in SIGN_CODE_MODES:
        raise ValueError(f"state.mode must be one of {SIGN_CODE_MODES}, got {state.mode!r}")
    hk = state.codes.shape[0]
    _checks.check_head_dims("q", q.shape[-1], "state.proj", state.proj.shape[-1])
    qp = jnp.einsum("hgd,hbd->hgb", _grouped(q, hk), state.proj)  # [Hk, G, NB]
    u = unpack_codes(state.codes, qp.dtype)  # [Hk, S, NB]
    if state.mode == "asymmetric":
        sc = jnp.einsum("hgb,hsb->hgs", qp, u)
    elif state.mode == "hamming":
        sc = jnp.einsum("hgb,hsb->hgs", jnp.where(qp >= 0, 1.0, -1.0), u)
    else:
        tb = state.table_bits
        nt = state.proj.shape[1] // tb
        keys_b = _table_buckets(state.codes, tb, nt)  # [Hk, S, T]
        q_b = _table_buckets(pack_codes(jnp.where(qp >= 0, 1.0, -1.0)), tb, nt)  # [Hk, G, T]
        diff = keys_b[:, None, :, :] ^ q_b[:, :, None, :]  # [Hk, G, S, T]
        collide = jnp.sum(diff == 0, axis=-1).astype(qp.dtype)
        agree = jnp.sum(tb - jax.lax.population_count(diff).astype(jnp.int32), axis=-1)
        sc = collide + agree.astype(qp.dtype) / (nt * tb + 1.0)  # ties: Hamming agreement
    return _mask(jnp.max(sc, axis=1), state.hash_length)


def quest_token_scores(state: QuestState, q, keys=None):
    """Quest's page upper bound, repeated over each page's tokens: [Hk, S]."""
    hk = state.kmin.shape[0]
    qg = _grouped(q, hk)[:, :, None, :]  # [Hk, G, 1, D]
    kmin = jnp.where(jnp.isfinite(state.kmin), state.kmin, 0.0)[:, None]
    kmax = jnp.where(jnp.isfinite(state.kmax), state.kmax, 0.0)[:, None]
    bound = jnp.sum(jnp.maximum(qg * kmin, qg * kmax), axis=-1)  # [Hk, G, P]
    bound = jnp.repeat(jnp.max(bound, axis=1), state.page_size, axis=-1)
    s = keys.shape[1] if keys is not None else bound.shape[-1]
    return _mask(bound[:, :s], state.hash_length)


def oracle_token_scores(state: OracleState, q, keys):
    """Exact max-over-group q . k: [Hk, S]."""
    keys = _float(keys)
    sc = jnp.einsum("hgd,hsd->hgs", _grouped(q, keys.shape[0]), keys)
    return _mask(jnp.max(sc, axis=1), state.hash_length)


def random_token_scores(state: RandomState, q, keys=None):
    del q
    return _mask(state.noise, state.hash_length)
