"""Keyed green lists over bytes: the exact uint32 hash shared by generation and detection.

All arithmetic is on uint32, i.e. modulo ``2**32``:

* ``fmix32(x)``: ``x ^= x >> 16; x *= 0x85EBCA6B; x ^= x >> 13; x *= 0xC2B2AE35; x ^= x >> 16``
  (MurmurHash3's finaliser, a bijection of uint32);
* the context of byte ``t`` with width ``h`` in 1..4 is ``c_t = sum_{i=1..h} x_{t-i} 256^(i-1)``
  (the previous byte is the lowest digit);
* ``score(c, v) = fmix32(fmix32(key ^ (c * 0x9E3779B1)) ^ (v * 0x85EBCA77))``;
* the green list of ``c`` holds the ``floor(V gamma)`` tokens ``v`` with the smallest score, ties
  broken by the smaller token (for ``V <= 2**32`` ties cannot happen: ``v -> score(c, v)`` is a
  composition of bijections of uint32, but the rule is implemented anyway);
* the effective green fraction is ``gamma_e = floor(V gamma) / V`` (``V = 256`` for bytes).

Keys are watermark keys (uint32 integers, MarkLLM's default ``15485863``), not PRNG keys.

>>> import jax.numpy as jnp
>>> int(fmix32(1)), int(fmix32(0))
(1364076727, 0)
>>> mask = green_mask(ord("a"), key=DEFAULT_KEY, gamma=0.5)
>>> mask.shape, int(mask.sum())
((256,), 128)
"""

from __future__ import annotations

import functools
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxpapers.core import checks

__all__ = ["VOCAB", "DEFAULT_KEY", "DEFAULT_GAMMA", "DEFAULT_DELTA", "DEFAULT_Z_THRESHOLD",
           "fmix32", "context_ids", "green_mask", "green_table"]

#: bytes
VOCAB = 256
#: MarkLLM defaults (KGW / SWEET / EWD configs): hash key, green fraction, bias, z threshold
DEFAULT_KEY = 15485863
DEFAULT_GAMMA = 0.5
DEFAULT_DELTA = 2.0
DEFAULT_Z_THRESHOLD = 4.0

_U32_MAX = 2 ** 32 - 1
_MIX_1 = np.uint32(0x85EBCA6B)
_MIX_2 = np.uint32(0xC2B2AE35)
_CONTEXT_MUL = np.uint32(0x9E3779B1)
_TOKEN_MUL = np.uint32(0x85EBCA77)
_MAX_TABLE_WIDTH = 2  # 256**2 contexts x 256 bytes = 16 MiB of bools; wider tables are too big


# ----------------------------------------------------------------------------- validation

def check_width(context_width: Any) -> int:
    """``context_width`` is a static int in 1..4 (a wider context does not fit a uint32)."""
    if not checks.is_int(context_width) or not 1 <= int(context_width) <= 4:
        raise ValueError(f"context_width must be an int in 1..4, got {context_width!r}")
    return int(context_width)


def as_key(key: Any) -> jax.Array:
    """A watermark key as a uint32 scalar array (Python / NumPy int in [0, 2^32), or uint32 array).

    A traced key must already be a uint32 scalar (its value cannot be checked).

    Raises:
      ValueError: ``key`` is not an integer in ``[0, 2**32)`` (bools, floats, PRNG keys and
        negative or too large ints are rejected, all as ValueError naming ``key``).
    """
    if checks.is_tracer(key):
        if getattr(key, "dtype", None) != jnp.uint32 or jnp.ndim(key) != 0:
            raise ValueError(f"a traced key must be a uint32 scalar, got "
                             f"{getattr(key, 'dtype', type(key).__name__)} of shape "
                             f"{jnp.shape(key)}")
        return key
    if checks.is_int(key):
        value = int(key)
    else:
        dtype = getattr(key, "dtype", None)
        try:
            ok = (dtype is not None and np.dtype(dtype).kind in "iu"
                  and np.ndim(key) == 0)
        except TypeError:  # extended dtypes (PRNG keys) are no NumPy dtype
            ok = False
        if not ok:
            raise ValueError(f"key must be an integer in [0, 2**32) (a watermark key, not a PRNG "
                             f"key), got {type(key).__name__} {key!r}")
        value = int(np.asarray(key))
    if not 0 <= value <= _U32_MAX:
        raise ValueError(f"key must be an integer in [0, 2**32), got {value}")
    return jnp.asarray(np.uint32(value))


def num_green(gamma: Any, vocab: int = VOCAB) -> Any:
    """``floor(vocab * gamma)``: a Python int for a concrete ``gamma`` (checked), else traced int32.

    A concrete ``gamma`` is floored in float64 (exact for ``vocab = 256``); a traced one in its own
    dtype.

    Raises:
      ValueError: ``gamma`` is not a real scalar in (0, 1), or ``floor(vocab * gamma)`` is not in
        ``1..vocab-1`` (an empty or full green list).
    """
    if checks.is_tracer(gamma):
        g = jnp.asarray(gamma)
        if g.ndim != 0:
            raise ValueError(f"gamma must be a scalar, got shape {g.shape}")
        return jnp.floor(g * vocab).astype(jnp.int32)
    g = np.asarray(gamma)
    if g.ndim != 0 or g.dtype.kind not in "iuf" or g.dtype == np.bool_:
        raise ValueError(f"gamma must be a real scalar in (0, 1), got {gamma!r}")
    g = float(g)
    if not 0.0 < g < 1.0:  # also rejects NaN
        raise ValueError(f"gamma must lie in (0, 1), got {g}")
    n = math.floor(g * vocab)
    if not 1 <= n <= vocab - 1:
        raise ValueError(f"gamma must give floor({vocab} gamma) in 1..{vocab - 1} green tokens, "
                         f"got gamma={g} (floor = {n})")
    return n


def _as_context(context: Any) -> jax.Array:
    """A context id as a uint32 scalar (concrete values checked in [0, 2^32))."""
    if checks.is_tracer(context):
        c = jnp.asarray(context)
        if c.ndim != 0 or not jnp.issubdtype(c.dtype, jnp.integer):
            raise ValueError(f"context must be an integer scalar, got {c.dtype} of shape "
                             f"{c.shape}")
        return c.astype(jnp.uint32)
    c = np.asarray(context)
    if c.ndim != 0 or c.dtype.kind not in "iu":
        raise ValueError(f"context must be an integer scalar, got {context!r}")
    value = int(c)
    if not 0 <= value <= _U32_MAX:
        raise ValueError(f"context must lie in [0, 2**32), got {value}")
    return jnp.asarray(np.uint32(value))


# ----------------------------------------------------------------------------- hash

def _fmix(x: jax.Array) -> jax.Array:
    """MurmurHash3 fmix32 on a uint32 array (wrapping multiplication)."""
    x = x ^ (x >> 16)
    x = x * _MIX_1
    x = x ^ (x >> 13)
    x = x * _MIX_2
    return x ^ (x >> 16)


def fmix32(x: Any) -> jax.Array:
    """MurmurHash3's 32-bit finaliser, elementwise, modulo ``2**32``.

    ``x ^= x >> 16; x *= 0x85EBCA6B; x ^= x >> 13; x *= 0xC2B2AE35; x ^= x >> 16``.

    Args:
      x: integer array-like of any shape; concrete values must lie in ``[0, 2**32)``, traced
        integer arrays are reinterpreted as uint32.

    Returns:
      uint32 array of ``x``'s shape.

    >>> fmix32(jnp.arange(3, dtype=jnp.uint32)).tolist()
    [0, 1364076727, 821347078]
    """
    if checks.is_tracer(x):
        x = jnp.asarray(x)
        if not jnp.issubdtype(x.dtype, jnp.integer):
            raise ValueError(f"x must be an integer array, got dtype {x.dtype}")
        return _fmix(x.astype(jnp.uint32))
    a = np.asarray(x)
    if a.dtype.kind not in "iu" and a.dtype != object:
        raise ValueError(f"x must be an integer array, got dtype {a.dtype}")
    if a.size and (int(a.min()) < 0 or int(a.max()) > _U32_MAX):
        raise ValueError("x must lie in [0, 2**32)")
    return _fmix(jnp.asarray(a.astype(np.uint32)))


def scores(key: jax.Array, context: jax.Array, tokens: jax.Array) -> jax.Array:
    """``fmix32(fmix32(key ^ (c * 0x9E3779B1)) ^ (v * 0x85EBCA77))`` on uint32 arrays (broadcast).

    Internal: no checks. ``key``, ``context`` and ``tokens`` must already be uint32.
    """
    return _fmix(_fmix(key ^ (context * _CONTEXT_MUL)) ^ (tokens * _TOKEN_MUL))


def smallest(score: jax.Array, n: Any) -> jax.Array:
    """[..., V] bool: the ``n`` entries of ``score`` [..., V] with the smallest values (per row),
    ties -> smaller index. ``n`` may be traced. Internal: the green-list rule on given scores.

    No sort (slow on CPU and TPU): the n-th smallest value ``theta = max{t : #{s < t} <= n - 1}``
    is found bit by bit from the top (32 counting passes), then the entries below ``theta`` and
    the first ``n - #{s < theta}`` entries equal to ``theta`` (in index order) are selected.
    """
    n = jnp.asarray(n, jnp.int32)

    def count_below(t):
        return jnp.sum(score < t[..., None], axis=-1, dtype=jnp.int32)

    def set_bit(i, theta):
        candidate = theta | (jnp.uint32(1) << (31 - i).astype(jnp.uint32))
        return jnp.where(count_below(candidate) <= n - 1, candidate, theta)

    theta = lax.fori_loop(0, 32, set_bit, jnp.zeros(score.shape[:-1], jnp.uint32))
    tied = score == theta[..., None]
    tie_rank = jnp.cumsum(tied, axis=-1, dtype=jnp.int32) - 1
    room = n - count_below(theta)
    return (score < theta[..., None]) | (tied & (tie_rank < room[..., None]))


def context_ids(tokens: Any, width: int = 1) -> jax.Array:
    """Context ids ``c_t = sum_{i=1..h} x_{t-i} 256^(i-1)`` of every position (uint32).

    Args:
      tokens: [..., T] integer byte ids (values in [0, 256) expected; not checked here).
      width: ``h``, static int in 1..4.

    Returns:
      [..., T] uint32. Positions ``t < h`` lack a full context; the missing bytes count as 0 there
      (those positions are never scored).

    >>> context_ids(jnp.array([1, 2, 3, 4]), 2).tolist()
    [0, 1, 258, 515]
    """
    h = check_width(width)
    x = jnp.asarray(tokens)
    if not jnp.issubdtype(x.dtype, jnp.integer):
        raise ValueError(f"tokens must hold integer byte ids, got dtype {x.dtype}")
    x = x.astype(jnp.uint32)
    t = x.shape[-1]
    pad = [(0, 0)] * (x.ndim - 1) + [(h, 0)]
    padded = jnp.pad(x, pad)  # padded[..., h + s] = x[..., s]
    c = jnp.zeros(x.shape, jnp.uint32)
    for i in range(1, h + 1):  # x_{t-i} sits at padded index h + t - i
        c = c | (padded[..., h - i: h - i + t] << (8 * (i - 1)))
    return c


# ----------------------------------------------------------------------------- green lists

def green_mask(context: Any, *, key: Any, gamma: Any, vocab: int = VOCAB) -> jax.Array:
    """The green list of one context: the ``floor(vocab gamma)`` tokens with the smallest score.

    ``score(c, v) = fmix32(fmix32(key ^ (c * 0x9E3779B1)) ^ (v * 0x85EBCA77))``, ties -> smaller
    token. Unbatched (vmap over contexts); ``context``, ``key`` and ``gamma`` may be traced.

    Args:
      context: integer scalar ``c`` in ``[0, 2**32)`` (see :func:`context_ids`).
      key: watermark key, int in ``[0, 2**32)`` or a uint32 scalar array.
      gamma: green fraction in (0, 1) with ``1 <= floor(vocab gamma) <= vocab - 1``.
      vocab: ``V``, static vocabulary size (256 for bytes).

    Returns:
      [V] bool, exactly ``floor(V gamma)`` entries True.

    >>> m = green_mask(10, key=DEFAULT_KEY, gamma=0.25)
    >>> int(m.sum()), bool((m == green_mask(10, key=DEFAULT_KEY, gamma=0.25)).all())
    (64, True)
    """
    vocab = checks.check_int("vocab", vocab, minimum=2, maximum=_U32_MAX + 1)
    k = as_key(key)
    n = jnp.asarray(num_green(gamma, vocab), jnp.int32)
    return _green_mask_jit(_as_context(context), k, n, vocab=vocab)


# one compilation per vocabulary size (eager calls would re-trace the 32-step loop every time)
@functools.partial(jax.jit, static_argnames="vocab")
def _green_mask_jit(context: jax.Array, key: jax.Array, n: jax.Array, *, vocab: int) -> jax.Array:
    return smallest(scores(key, context, jnp.arange(vocab, dtype=jnp.uint32)), n)


def green_table(*, key: Any, gamma: Any, context_width: int = 1) -> jax.Array:
    """Every byte context's green list at once: ``table[c, v] = green_mask(c, ...)[v]``.

    For generation with a short context: one lookup per step instead of a hash and a sort.

    Args:
      key: watermark key (int in ``[0, 2**32)`` or uint32 scalar).
      gamma: green fraction (see :func:`green_mask`).
      context_width: 1 or 2 (``256**h`` contexts; wider tables would not fit in memory).

    Returns:
      [256**h, 256] bool.

    >>> t = green_table(key=DEFAULT_KEY, gamma=0.5)
    >>> t.shape, bool((t[97] == green_mask(97, key=DEFAULT_KEY, gamma=0.5)).all())
    ((256, 256), True)
    """
    h = check_width(context_width)
    if h > _MAX_TABLE_WIDTH:
        raise ValueError(f"context_width must be 1 or 2 for a table (256**h rows), got {h}; "
                         f"use green_mask per context")
    return _green_table_jit(as_key(key), jnp.asarray(num_green(gamma, VOCAB), jnp.int32),
                            width=h)


@functools.partial(jax.jit, static_argnames="width")
def _green_table_jit(key: jax.Array, n: jax.Array, *, width: int) -> jax.Array:
    c = jnp.arange(VOCAB ** width, dtype=jnp.uint32)
    v = jnp.arange(VOCAB, dtype=jnp.uint32)
    return smallest(scores(key, c[:, None], v[None, :]), n)
