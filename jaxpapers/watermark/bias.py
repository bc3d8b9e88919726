"""Watermark logits processors (KGW, SWEET) and the set of bytes a policy may promote.

* KGW: ``logits_v + delta 1[v in green(c)]``.
* SWEET: the same, only when the entropy of ``softmax(logits)`` exceeds the threshold
  (0.9 nats in MarkLLM); otherwise the logits pass unchanged.
* EWD biases like KGW (its difference is in detection).

Unbatched: one ``[V]`` row and its context; vmap over a batch.

>>> import jax.numpy as jnp
>>> out = kgw_bias(jnp.zeros(256), ord("a"), key=15485863, gamma=0.5, delta=2.0)
>>> float(out.sum())
256.0
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxpapers.core import checks
from jaxpapers.watermark import detect, hashing

__all__ = ["kgw_bias", "sweet_bias", "printable_mask"]


def _check_row(logits: Any) -> jax.Array:
    checks.check_ndim("logits", logits, 1, "[V]")
    x = jnp.asarray(logits)
    if not jnp.issubdtype(x.dtype, jnp.floating):
        raise ValueError(f"logits must be a float array [V], got dtype {x.dtype}")
    return x


def kgw_bias(logits: Any, context: Any, *, key: Any, gamma: Any, delta: Any) -> jax.Array:
    """KGW's processor: add ``delta`` to the logits of the green list of ``context``.

    ``logits'_v = logits_v + delta 1[v in green_mask(c)]``.

    Args:
      logits: [V] float next-token logits (V = 256 for bytes).
      context: integer context id ``c`` (:func:`context_ids` of the sequence so far); may be
        traced.
      key: watermark key (int in ``[0, 2**32)`` or uint32 scalar).
      gamma: green fraction in (0, 1); delta: bias >= 0 (may be traced).

    Returns:
      [V] float, logits' dtype.

    >>> out = kgw_bias(jnp.zeros(256), 7, key=3, gamma=0.25, delta=1.5)
    >>> int((out == 1.5).sum())
    64
    """
    x = _check_row(logits)
    checks.check_range("delta", delta, low=0.0, scalar=True)
    green = hashing.green_mask(context, key=key, gamma=gamma, vocab=x.shape[0])
    return x + jnp.asarray(delta, x.dtype) * green.astype(x.dtype)


def sweet_bias(logits: Any, context: Any, *, key: Any, gamma: Any, delta: Any,
               threshold: Any = detect.SWEET_THRESHOLD) -> jax.Array:
    """SWEET's processor: :func:`kgw_bias` only when ``entropy(logits) > threshold`` (nats).

    Args:
      logits: [V] float logits whose softmax is the model's distribution (its entropy decides).
      context, key, gamma, delta: as in :func:`kgw_bias`.
      threshold: entropy threshold in nats (MarkLLM: 0.9); may be traced.

    Returns:
      [V] float, logits' dtype.

    >>> peaked = jnp.zeros(256).at[65].set(30.0)  # entropy ~ 0: unchanged
    >>> bool((sweet_bias(peaked, 7, key=3, gamma=0.5, delta=2.0) == peaked).all())
    True
    """
    x = _check_row(logits)
    checks.check_range("threshold", threshold, scalar=True)
    biased = kgw_bias(x, context, key=key, gamma=gamma, delta=delta)
    return jnp.where(detect.entropy(x) > threshold, biased, x)


def printable_mask() -> jax.Array:
    """[256] bool: the bytes a policy may promote (ASCII printable 0x20..0x7E, ``\\n`` and ``\\t``).

    Control bytes and bytes ``>= 0x80`` (never valid single-byte UTF-8 characters) are False.

    >>> m = printable_mask()
    >>> int(m.sum()), bool(m[ord("\\n")]), bool(m[0x7F]), bool(m[0xC3])
    (97, True, False, False)
    """
    m = np.zeros(hashing.VOCAB, bool)
    m[0x20:0x7F] = True
    m[[ord("\t"), ord("\n")]] = True
    return jnp.asarray(m)
