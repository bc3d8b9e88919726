"""BinaryPC: binary principal components of the keys as a data-aware hash (unbatched).

The keys of one kv head, A (S x D, post-RoPE, not centred), are factorised greedily as
A ~ U V with U in {+-1}^{S x NB} and V in R^{NB x D}: for each bit, alternate u = sign(A v) and
v = A^T u / n a few times from a random v, then deflate A <- A - u v^T (official code,
``find_binary_projection``). A new key is encoded by the same sign-and-deflate on its residual.
The score of a query is the asymmetric inner product q . (U V)^T = U (V q): ``probe = V q``
(one value per bit), quantised to 7 bits plus sign with one scale per query head, and for
grouped-query attention the max over the group's query heads. It is not a Hamming distance.

Deviation (documented): our fit ends each bit with the encode step, u = sign(A v) with the v
that is kept, so the fit's codes and residuals are exactly what :func:`binarypc_encode`
produces. The official code deflates with the alternation's last u and re-encodes the keys
afterwards; the two agree wherever the alternation has converged.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxpapers.attention import _checks
from jaxpapers.attention._types import BinaryPCState
# The code format (packed sign bits, int8 probes) is defined once, beside the kernels that read it.
from pallas_kernels.binary_hash_attention.reference import (pack_codes, quantize_probe,
                                                            unpack_codes)

__all__ = ["binarypc_fit", "binarypc_scores", "fit_codes", "binarypc_encode", "pack_codes",
           "unpack_codes", "quantize_probe", "code_scores", "binarypc_build",
           "binarypc_token_scores", "reconstruction_error"]


def _sign(x: jax.Array) -> jax.Array:
    """+1 where x >= 0, else -1 (so that every code is +-1; torch's sign gives 0 at 0)."""
    return jnp.where(x >= 0, 1.0, -1.0).astype(x.dtype)


def _encode_bit(resid: jax.Array, v: jax.Array, mask: jax.Array):
    """One sign-and-deflate step on rows [S, D] with the bit's row v [D]."""
    u = _sign(resid @ v)
    return resid - (u * mask)[:, None] * v[None, :], u


def fit_codes(keys: jax.Array, key: jax.Array, *, num_bits: int = 64, num_iters: int = 4,
              length: jax.Array | int | None = None) -> tuple[jax.Array, jax.Array]:
    """Greedy residual binary rank-1 factorisation of one head's keys (unbatched).

    Args:
      keys: [S, D] float, post-RoPE keys; rows at or past ``length`` are ignored.
      key: ``jax.random.key``; consumed (one normal start vector per bit).
      num_bits: NB, a multiple of 32 (static).
      num_iters: alternations u = sign(A v), v = A^T u / n per bit (static; official 4).
      length: number of valid rows (default S); may be traced.

    Returns:
      ``(proj [NB, D], signs [S, NB])`` with signs in {-1, +1} (rows past ``length``: the
      encoding of those rows, which did not influence the fit).
    """
    keys = jnp.asarray(keys)
    _checks.check_ndim("keys", keys, 2, "[S, D]")
    _checks.check_num_bits(num_bits)
    _checks.check_finite("keys", keys)
    s, d = keys.shape
    length = s if length is None else length
    mask = (jnp.arange(s) < length).astype(keys.dtype)
    n = jnp.maximum(jnp.sum(mask), 1.0)

    def one_bit(resid, kb):
        v = jax.random.normal(kb, (d,), keys.dtype)
        for _ in range(num_iters):  # Alg.: u = sign(A v); v = A^T u (/ n, which keeps the sign)
            u = _sign(resid @ v) * mask
            v = (resid.T @ u) / n
        resid, u = _encode_bit(resid, v, mask)
        return resid, (v, u)

    resid0 = keys * mask[:, None]
    _, (proj, signs) = jax.lax.scan(one_bit, resid0, jax.random.split(key, num_bits))
    return proj, signs.T


def binarypc_encode(keys: jax.Array, proj: jax.Array) -> jax.Array:
    """Codes of keys under a fitted projection: sign-and-deflate per bit (unbatched).

    Args:
      keys: [S, D]. proj: [NB, D] (from :func:`fit_codes` / :func:`binarypc_fit`).

    Returns:
      [S, NB] signs in {-1, +1}; ``binarypc_encode(K, fit(K)) == fit codes`` exactly.
    """
    keys, proj = jnp.asarray(keys), jnp.asarray(proj)
    _checks.check_ndim("keys", keys, 2, "[S, D]")
    _checks.check_ndim("proj", proj, 2, "[NB, D]")
    _checks.check_head_dims("proj", proj.shape[1], "keys", keys.shape[1])
    ones = jnp.ones(keys.shape[0], keys.dtype)
    _, signs = jax.lax.scan(lambda r, v: _encode_bit(r, v, ones), keys, proj.astype(keys.dtype))
    return signs.T


def code_scores(signs: jax.Array, probe: jax.Array, *, probe_bits: int = 7) -> jax.Array:
    """Asymmetric scores sum_b u_jb probe_b, optionally with a quantised probe.

    Args:
      signs: [S, NB] in {-1, +1}. probe: [G, NB] (G query heads of one kv head).
      probe_bits: 0 for the exact probe; else quantise (one scale per query head).

    Returns:
      [G, S] scores (dequantised when quantised).
    """
    if probe_bits:
        q, scale = quantize_probe(probe, probe_bits)
        return (q.astype(signs.dtype) @ signs.T) * scale[:, None]
    return probe @ signs.T


def binarypc_fit(keys: jax.Array, *, num_bits: int = 64, key: jax.Array,
                 num_iters: int = 4) -> jax.Array:
    """Contract: fit the BinaryPC projection of one head's keys.

    Args:
      keys: [L, D] post-RoPE keys of one head.
      num_bits: NB, a multiple of 32.
      key: ``jax.random.key``; consumed.
      num_iters: alternations per bit.

    Returns:
      proj [NB, D] (V of K ~ U V).

    >>> import jax
    >>> k = jax.random.normal(jax.random.key(0), (256, 64))
    >>> binarypc_fit(k, num_bits=64, key=jax.random.key(1)).shape
    (64, 64)
    """
    return fit_codes(keys, key, num_bits=num_bits, num_iters=num_iters)[0]


def binarypc_scores(q: jax.Array, keys: jax.Array, proj: jax.Array) -> jax.Array:
    """Contract: unquantised hash scores q . (U V)^T with U the codes of ``keys``.

    Args:
      q: [D] query (post-RoPE). keys: [L, D]. proj: [NB, D] from :func:`binarypc_fit`.

    Returns:
      [L] scores.

    >>> import jax, jax.numpy as jnp
    >>> k = jax.random.normal(jax.random.key(0), (128, 32))
    >>> p = binarypc_fit(k, num_bits=32, key=jax.random.key(1))
    >>> binarypc_scores(k[3], k, p).shape
    (128,)
    """
    q = jnp.asarray(q)
    _checks.check_ndim("q", q, 1, "[D]")
    _checks.check_head_dims("q", q.shape[0], "keys", jnp.shape(keys)[-1])
    signs = binarypc_encode(keys, proj)
    return signs @ (jnp.asarray(proj, signs.dtype) @ q.astype(signs.dtype))


def reconstruction_error(keys: jax.Array, signs: jax.Array, proj: jax.Array) -> jax.Array:
    """||k_j - (U V)_j|| per row: [S, D], [S, NB], [NB, D] -> [S]."""
    return jnp.linalg.norm(keys - signs @ proj, axis=-1)


def binarypc_build(keys: jax.Array, hash_length: jax.Array | int, key: jax.Array, *,
                   num_bits: int = 64, num_iters: int = 4, num_forced: int = 0,
                   probe_bits: int = 7) -> BinaryPCState:
    """Fit and encode every kv head of one layer (unbatched).

    Args:
      keys: [Hk, S, D] post-RoPE keys; slots at or past ``hash_length`` are not hashed.
      hash_length: [] int, the number of slots to fit on (may be traced).
      key: ``jax.random.key``; consumed (split over heads).
      num_bits: NB. num_iters: alternations per bit.
      num_forced: E, tokens with the largest reconstruction error to force-select (official:
        10% of the budget).
      probe_bits: probe quantisation (7 official; 0 exact).

    Returns:
      :class:`BinaryPCState`.
    """
    keys = jnp.asarray(keys)
    keys = keys.astype(jnp.result_type(keys.dtype, jnp.float32))
    _checks.check_ndim("keys", keys, 3, "[Hk, S, D]")
    _checks.check_num_bits(num_bits)
    _checks.check_finite("keys", keys)
    _checks.check_length("hash_length", hash_length, keys.shape[1])
    hk, s, _ = keys.shape
    if not 0 <= num_forced <= s:
        raise ValueError(f"num_forced must lie in [0, {s}], got {num_forced}")
    hash_length = jnp.asarray(hash_length, jnp.int32)

    def one(kh, kk):
        proj, signs = fit_codes(kh, kk, num_bits=num_bits, num_iters=num_iters,
                                length=hash_length)
        err = reconstruction_error(kh, signs, proj)
        err = jnp.where(jnp.arange(s) < hash_length, err, -jnp.inf)
        top_err, forced = jax.lax.top_k(err, num_forced)
        forced = jnp.where(jnp.isfinite(top_err), forced, -1).astype(jnp.int32)
        return proj, pack_codes(signs), forced

    proj, codes, forced = jax.vmap(one)(keys, jax.random.split(key, hk))
    return BinaryPCState(proj=proj, codes=codes, forced=forced, hash_length=hash_length,
                         probe_bits=probe_bits)


def binarypc_token_scores(state: BinaryPCState, q: jax.Array, keys: jax.Array) -> jax.Array:
    """Per-kv-head token scores, max over the group's query heads (unbatched).

    Args:
      state: one layer's :class:`BinaryPCState`.
      q: [Hq, D] post-RoPE queries. keys: [Hk, S, D] (unused; uniform scorer signature).

    Returns:
      [Hk, S] scores; -inf at slots past ``hash_length``.
    """
    hk, s, _ = state.codes.shape
    g = _checks.check_groups(q.shape[0], hk)
    _checks.check_head_dims("q", q.shape[-1], "state.proj", state.proj.shape[-1])
    qg = q.reshape(hk, g, -1).astype(state.proj.dtype)
    probe = jnp.einsum("hgd,hbd->hgb", qg, state.proj)
    signs = unpack_codes(state.codes, state.proj.dtype)
    sc = jax.vmap(lambda u, p: code_scores(u, p, probe_bits=state.probe_bits))(signs, probe)
    sc = jnp.max(sc, axis=1)
    return jnp.where(jnp.arange(s) < state.hash_length, sc, -jnp.inf)
