"""The definition of correct for the BinaryPC kernels (pure jnp, exact integers, fp32 softmax).

Data formats (defined here once; ``jaxpapers.attention`` imports them):

* ``codes``: uint32 ``[B, Hk, L, W]``, ``W = num_bits // 32``; bit ``j`` of word ``w`` (LSB is
  ``j = 0``) is 1 iff the key's code ``u[w * 32 + j]`` is +1 (0 means -1).
* ``probe``: int8 ``[B, Hq, num_bits]`` in ``[-127, 127]`` with ``probe_scale`` float32
  ``[B, Hq]``; a key's score for query head ``g`` is ``probe_scale[g] * sum_b u_b * probe[g, b]``.
* Grouped-query attention: query head ``g`` reads kv head ``g // (Hq // Hk)``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

__all__ = ["hash_scores_reference", "sparse_decode_attention_reference", "pack_codes",
           "unpack_codes", "quantize_probe", "entry_limits"]

_HIGHEST = jax.lax.Precision.HIGHEST


def pack_codes(u: jax.Array) -> jax.Array:
    """Pack signs ``u [..., num_bits]`` (+1 / -1, or bool with True = +1) into uint32 words.

    Returns uint32 ``[..., num_bits // 32]``: bit ``j`` (LSB first) of word ``w`` is 1 iff
    ``u[..., 32 w + j] > 0``. Raises if ``num_bits`` is not a positive multiple of 32.

    >>> import jax.numpy as jnp
    >>> u = jnp.full((64,), -1).at[0].set(1).at[33].set(1)   # bit 0 of word 0, bit 1 of word 1
    >>> pack_codes(u).tolist()
    [1, 2]
    >>> bool((unpack_codes(pack_codes(u)) == u).all())
    True
    """
    u = jnp.asarray(u)
    nb = u.shape[-1] if u.ndim else 0
    if nb < 32 or nb % 32:
        raise ValueError(f"num_bits (the last axis of the signs) must be a positive multiple of "
                         f"32, got num_bits={nb}")
    bits = (u > 0) if u.dtype != jnp.bool_ else u
    bits = bits.reshape(*u.shape[:-1], nb // 32, 32).astype(jnp.uint32)
    shifts = jnp.arange(32, dtype=jnp.uint32)
    return jnp.sum(bits << shifts, axis=-1, dtype=jnp.uint32)


def unpack_codes(codes: jax.Array, dtype=jnp.int8) -> jax.Array:
    """Inverse of :func:`pack_codes`: uint32 ``[..., W]`` -> signs ``[..., W * 32]`` in {-1, +1}
    (as ``dtype``, default int8)."""
    codes = jnp.asarray(codes)
    shifts = jnp.arange(32, dtype=jnp.uint32)
    bits = (codes[..., None] >> shifts) & jnp.uint32(1)
    signs = 2 * bits.astype(jnp.int32) - 1
    return signs.reshape(*codes.shape[:-1], codes.shape[-1] * 32).astype(dtype)


def quantize_probe(p: jax.Array, probe_bits: int = 7) -> tuple[jax.Array, jax.Array]:
    """Symmetric max-abs quantisation of a float probe ``[..., num_bits]``, one scale per row.

    Returns ``(probe int8 [..., num_bits] in [-L, L], scale [...])`` with ``L = 2^probe_bits - 1``
    (127 by default) and ``p ~= scale[..., None] * probe``, error at most ``scale / 2`` per entry.
    ``scale = max |p| / L`` (1 for an all-zero row) is float32, or float64 for a float64 probe.
    """
    if isinstance(probe_bits, bool) or not isinstance(probe_bits, int) \
            or not 1 <= probe_bits <= 7:
        raise ValueError(f"probe_bits must be an int in [1, 7] (int8 levels), got {probe_bits!r}")
    p = jnp.asarray(p)
    p = p.astype(jnp.result_type(p.dtype, jnp.float32))
    levels = 2 ** probe_bits - 1
    amax = jnp.max(jnp.abs(p), axis=-1)
    scale = jnp.where(amax > 0, amax / levels, 1.0).astype(p.dtype)
    q = jnp.clip(jnp.round(p / scale[..., None]), -levels, levels).astype(jnp.int8)
    return q, scale


def hash_scores_reference(codes: jax.Array, probe: jax.Array, probe_scale: jax.Array,
                          length: jax.Array, *, group_reduce: str | None = "max") -> jax.Array:
    """Asymmetric binary-code scores of every key: ``scale * sum_b u_b * probe_b``.

    The integer sum is exact (int32); it is then multiplied by the float32 scale once.

    Args:
      codes: uint32 [B, Hk, L, W]. probe: int8 [B, Hq, W * 32]. probe_scale: float32 [B, Hq].
      length: int [B]; key positions >= length[b] score -inf.
      group_reduce: "max" (max over the query heads of each kv group -> [B, Hk, L]) or None
        (per query head -> [B, Hq, L]).
    """
    b, hk, l, w = codes.shape
    hq = probe.shape[1]
    g = hq // hk
    u = unpack_codes(codes, jnp.int32)                                # [B, Hk, L, nb]
    p = probe.astype(jnp.int32).reshape(b, hk, g, w * 32)            # [B, Hk, G, nb]
    s_int = jnp.einsum("bhln,bhgn->bhgl", u, p)                       # exact in int32
    s = s_int.astype(jnp.float32) * probe_scale.reshape(b, hk, g, 1).astype(jnp.float32)
    live = jnp.arange(l)[None, None, None, :] < jnp.asarray(length).reshape(b, 1, 1, 1)
    s = jnp.where(live, s, -jnp.inf)
    if group_reduce == "max":
        return jnp.max(s, axis=2)
    return s.reshape(b, hq, l)


def entry_limits(indices: jax.Array, valid: jax.Array, num_tokens: int, page_size: int,
                 length: jax.Array | None) -> jax.Array:
    """Number of live tokens in each selected entry (a token or a page), int32 ``[B, Hk, K]``.

    An entry contributes its tokens ``[p * page_size, p * page_size + limit)``: 0 if it is not
    ``valid`` or out of range, otherwise the tokens below ``length[b]`` (``num_tokens`` when
    ``length`` is None), at most ``page_size``.
    """
    idx = jnp.asarray(indices).astype(jnp.int32)
    num_pages = -(-num_tokens // page_size)
    n_live = num_tokens if length is None else jnp.minimum(jnp.asarray(length).astype(jnp.int32),
                                                            num_tokens)[:, None, None]
    lim = jnp.clip(n_live - idx * page_size, 0, page_size)
    ok = jnp.asarray(valid) & (idx >= 0) & (idx < num_pages)
    return jnp.where(ok, lim, 0).astype(jnp.int32)


def sparse_decode_attention_reference(q: jax.Array, k: jax.Array, v: jax.Array,
                                      indices: jax.Array, valid: jax.Array, *,
                                      length: jax.Array | None = None, page_size: int = 1,
                                      sm_scale: float | None = None) -> jax.Array:
    """Softmax attention of each query head over the selected rows of its kv head.

    Gathers, for each (batch, kv head), the tokens (``page_size == 1``) or pages of
    ``page_size`` tokens named by ``indices``, drops entries with ``valid == False``, out-of-range
    indices and tokens at positions >= ``length[b]``, and computes ``softmax(q k^T * sm_scale) v``
    in float32 over what is left. A duplicated index counts twice (gather semantics). A head
    with nothing selected gets a zero output.

    Args:
      q: [B, Hq, D]. k, v: [B, Hk, L, D]. indices: int [B, Hk, K]. valid: bool [B, Hk, K].
      length: optional int [B]. page_size: tokens per selected entry. sm_scale: default
        ``1 / sqrt(D)``.
    Returns:
      [B, Hq, D] in q's dtype.
    """
    b, hq, d = q.shape
    _, hk, l, _ = k.shape
    g = hq // hk
    sm_scale = d ** -0.5 if sm_scale is None else sm_scale
    lim = entry_limits(indices, valid, l, page_size, length)         # [B, Hk, K]
    idx = jnp.clip(jnp.asarray(indices).astype(jnp.int32), 0, -(-l // page_size) - 1)
    tok = idx[..., None] * page_size + jnp.arange(page_size)          # [B, Hk, K, P]
    live = jnp.arange(page_size) < lim[..., None]
    tok = jnp.minimum(tok, l - 1).reshape(b, hk, -1)                  # [B, Hk, K*P]
    live = live.reshape(b, hk, -1)
    kg = jnp.take_along_axis(k, tok[..., None], axis=2).astype(jnp.float32)
    vg = jnp.take_along_axis(v, tok[..., None], axis=2).astype(jnp.float32)
    qg = q.reshape(b, hk, g, d).astype(jnp.float32)
    s = jnp.einsum("bhgd,bhnd->bhgn", qg, kg, precision=_HIGHEST) * sm_scale
    s = jnp.where(live[:, :, None, :], s, -jnp.inf)
    m = jnp.max(s, axis=-1, keepdims=True)
    m = jnp.where(jnp.isfinite(m), m, 0.0)
    p = jnp.where(live[:, :, None, :], jnp.exp(s - m), 0.0)
    den = jnp.sum(p, axis=-1, keepdims=True)
    o = jnp.einsum("bhgn,bhnd->bhgd", p, vg, precision=_HIGHEST)
    o = jnp.where(den > 0, o / jnp.where(den > 0, den, 1.0), 0.0)
    return o.reshape(b, hq, d).astype(q.dtype)
