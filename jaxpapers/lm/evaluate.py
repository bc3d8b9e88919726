"""Bits per byte of the language model: dense teacher forcing, and prefill + decode with a
pluggable attention.

The loss of predicting byte ``x_t`` is ``-log2 p(x_t | x_<t)``; bits/byte is its mean over the
predicted bytes. With a byte vocabulary this is the code length per byte of source text.

>>> import jax, jax.numpy as jnp
>>> from jaxpapers.lm import LMConfig, init
>>> cfg = LMConfig(d_model=16, n_layers=2, n_q_heads=2, n_kv_heads=1, head_dim=8, d_ff=32,
...                max_len=32)
>>> params = init(cfg, jax.random.key(0))
>>> tokens = jax.random.randint(jax.random.key(1), (2, 12), 0, 256)
>>> dense = bits_per_byte(params, tokens, config=cfg, start=4)
>>> cached = bits_per_byte_decode(params, tokens, config=cfg, prefix_len=5)
>>> bool(jnp.allclose(dense, cached, atol=1e-5))
True
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
from jaxpapers.lm import model
from jaxpapers.lm._types import AttnFn, AttnStateFn, LMConfig

__all__ = ["token_bits", "bits_per_byte", "bits_per_byte_decode", "unigram_bits_per_byte"]

_LN2 = math.log(2.0)


def _bits(logits: jax.Array, targets: jax.Array) -> jax.Array:
    """-log2 softmax(logits)[target]: logits [..., V], targets [...] -> [...] float32 (float64
    for float64 logits)."""
    logp = jax.nn.log_softmax(logits.astype(jnp.promote_types(logits.dtype, jnp.float32)),
                              axis=-1)
    return -jnp.take_along_axis(logp, targets[..., None], axis=-1)[..., 0] / _LN2


@functools.partial(jax.jit, static_argnames=("config",))
def _token_bits(params, tokens, config, sparsity=None):
    logits = model._forward_impl(params, tokens[:, :-1], config, sparsity)
    return _bits(logits, tokens[:, 1:])


def token_bits(params: dict, tokens: jax.Array, *, config: LMConfig,
               sparsity: dict | None = None) -> jax.Array:
    """Per-byte code lengths under teacher forcing.

    Args:
      params: from :func:`jaxpapers.lm.init`.
      tokens: [B, T] integer byte ids, 2 <= T <= ``config.max_len + 1``.
      config: the model shape (static).
      sparsity: None (dense) or the activation-sparsity dict of :func:`jaxpapers.lm.forward`
        (every position sparse, which equals decoding every byte sparsely).

    Returns:
      [B, T - 1] float32 (float64 for float64 parameters); entry ``t`` is
      ``-log2 p(tokens[:, t + 1] | tokens[:, :t + 1])``.
    """
    model._check_config(config)
    tokens = model._check_tokens(tokens, "tokens", config, 2)
    if tokens.shape[1] < 2:
        raise ValueError(f"tokens needs T >= 2 (one prediction), got T={tokens.shape[1]}")
    model._check_length(tokens.shape[1] - 1, config)
    model._check_params(params, config)
    sparsity = model.check_sparsity(sparsity, config)
    return _token_bits(params, tokens, config, sparsity)


def bits_per_byte(params: dict, tokens: jax.Array, *, config: LMConfig,
                  start: int = 0, sparsity: dict | None = None) -> jax.Array:
    """Mean bits/byte of ``tokens[:, start + 1:]`` under dense teacher forcing.

    Args:
      params: from :func:`jaxpapers.lm.init`.
      tokens: [B, T] integer byte ids, T <= ``config.max_len + 1``.
      config: the model shape (static).
      start: skip the predictions of the first ``start`` targets (their context is short);
        ``bits_per_byte(..., start=p - 1)`` scores the same bytes as
        ``bits_per_byte_decode(..., prefix_len=p)``.
      sparsity: as in :func:`token_bits`.

    Returns:
      [] float32 (float64 for float64 parameters).
    """
    start = checks.check_int("start", start)
    bits = token_bits(params, tokens, config=config, sparsity=sparsity)
    if not 0 <= start < bits.shape[1]:
        raise ValueError(f"start must be an int in [0, T - 1 = {bits.shape[1]}), got {start!r}")
    return jnp.mean(bits[:, start:])


@functools.partial(jax.jit, static_argnames=("config", "prefix_len", "attn_fn", "attn_state_fn"))
def _decode_bits(params, tokens, config, prefix_len, attn_fn, attn_state_fn, sparsity=None):
    b, t = tokens.shape
    logits, cache = model._prefill_impl(params, tokens[:, :prefix_len], config, t - 1, sparsity)
    first = _bits(logits[:, -1], tokens[:, prefix_len])  # [B]
    attn_state = None if attn_state_fn is None else attn_state_fn(cache)

    def step(cache, xs):
        tok, target = xs
        step_logits, cache = model._decode(params, cache, tok, attn_state, config, attn_fn,
                                           sparsity)
        return cache, _bits(step_logits, target)

    xs = (tokens[:, prefix_len:t - 1].T, tokens[:, prefix_len + 1:].T)  # [T - p - 1, B] each
    _, rest = lax.scan(step, cache, xs)
    return jnp.concatenate([first[:, None], rest.T], axis=1)  # [B, T - p]


def bits_per_byte_decode(params: dict, tokens: jax.Array, *, config: LMConfig, prefix_len: int,
                         attn_fn: AttnFn | None = None, attn_state_fn: AttnStateFn | None = None,
                         reduce: bool = True, sparsity: dict | None = None) -> jax.Array:
    """Bits/byte of the bytes after a prefix, predicted by cached decoding with ``attn_fn``.

    ``tokens[:, :prefix_len]`` is prefilled densely into a cache of ``T - 1`` slots; then
    ``attn_state = attn_state_fn(cache)`` (e.g. a hash fitted on the prefilled keys) and a
    teacher-forced ``lax.scan`` of :func:`jaxpapers.lm.decode_step` feeds ``tokens[:, p:T-1]``.
    The predicted bytes are ``tokens[:, prefix_len:]`` (the first from the prefill's last logit).
    With ``attn_fn=None`` the result equals ``bits_per_byte(..., start=prefix_len - 1)``.

    Args:
      params: from :func:`jaxpapers.lm.init`.
      tokens: [B, T] integer byte ids, ``prefix_len < T <= config.max_len + 1``.
      config: the model shape (static).
      prefix_len: p, tokens prefilled densely, >= 1 (static).
      attn_fn: the decode attention (see :func:`jaxpapers.lm.decode_step`), None for dense.
      attn_state_fn: ``cache -> attn_state`` built once after the prefill, or None (static).
      reduce: return the mean (True) or the per-byte bits [B, T - p] (False).
      sparsity: the activation-sparsity dict of :func:`jaxpapers.lm.forward`, applied in the
        prefill and in every decode step (None: dense).

    Returns:
      [] float32 mean bits/byte, or [B, T - prefix_len] float32.
    """
    model._check_config(config)
    tokens = model._check_tokens(tokens, "tokens", config, 2)
    model._check_params(params, config)
    t = tokens.shape[1]
    prefix_len = checks.check_int("prefix_len", prefix_len)
    if not 1 <= prefix_len < t:
        raise ValueError(f"prefix_len must be an int in [1, T={t}), got {prefix_len!r}")
    if t - 1 > config.max_len:
        raise ValueError(f"tokens has T={t}; decoding it needs T - 1 = {t - 1} cache slots, more "
                         f"than config.max_len={config.max_len}")
    for name, fn in (("attn_fn", attn_fn), ("attn_state_fn", attn_state_fn)):
        if fn is not None and not callable(fn):
            raise TypeError(f"{name} must be callable or None, got {type(fn).__name__}")
    sparsity = model.check_sparsity(sparsity, config)
    bits = _decode_bits(params, tokens, config, prefix_len, attn_fn, attn_state_fn, sparsity)
    return jnp.mean(bits) if reduce else bits


def unigram_bits_per_byte(train_tokens: Any, eval_tokens: Any, *, smoothing: float = 1.0,
                          vocab: int = 256) -> float:
    """Bits/byte of ``eval_tokens`` under the add-``smoothing`` byte frequencies of
    ``train_tokens`` (the baseline a language model must beat).

    Args:
      train_tokens: integer byte ids (any shape). eval_tokens: integer byte ids (any shape).
      smoothing: pseudo-count added to every byte, > 0.
      vocab: vocabulary size.

    Returns:
      a Python float.

    >>> round(unigram_bits_per_byte([0, 1, 0, 1], [0, 1], smoothing=1e-9, vocab=2), 6)
    1.0
    """
    if not smoothing > 0:
        raise ValueError(f"smoothing must be > 0, got {smoothing!r}")
    train = np.asarray(train_tokens).ravel()
    ev = np.asarray(eval_tokens).ravel()
    for name, arr in (("train_tokens", train), ("eval_tokens", ev)):
        if not np.issubdtype(arr.dtype, np.integer):
            raise TypeError(f"{name} must hold integer ids, got dtype {arr.dtype}")
        if arr.size and (arr.min() < 0 or arr.max() >= vocab):
            raise ValueError(f"{name} must be ids in [0, {vocab})")
    if not ev.size:
        raise ValueError("eval_tokens is empty")
    counts = np.bincount(train, minlength=vocab).astype(np.float64) + smoothing
    logp = np.log2(counts / counts.sum())
    return float(-logp[ev].mean())
