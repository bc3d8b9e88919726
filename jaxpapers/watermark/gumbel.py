"""Gumbel top-k: an exact k-hot sample forward, a relaxed subset's gradient backward.

**Forward** (exact): ``s~ = scores + G`` with ``G = jax.random.gumbel(key, [V], scores.dtype)``
(the whole key is consumed by this one draw); disallowed entries (``mask`` False) get ``-inf``;
the output is the k-hot indicator of ``top_k(s~)``. The chosen set is distributed as sampling k
items without replacement from ``softmax(scores)`` restricted to the allowed entries
(Plackett-Luce; Vieira 2014, Kool et al. 2019).

**Backward** (straight-through): the tangent / cotangent is that of the *successive softmax*
relaxation of top-k of the same perturbed scores (Xie & Ermon 2019, "Reparameterizable subset
sampling via continuous relaxations"; the same recursion as Plötz & Roth 2018's relaxed k-NN)::

    a_1 = s~;  for j = 1..k:  p_j = softmax(a_j / tau + m),  a_{j+1} = a_j + log(max(1 - p_j, tiny))
    relaxed = sum_j p_j                                  (m = 0 where allowed, -inf elsewhere)

with ``tiny = finfo(dtype).tiny``. ``relaxed`` sums to k and tends to the hard k-hot as
``tau -> 0``. The forward value is exactly the hard k-hot (no ``hard + relaxed - relaxed``
rounding); gradients flow to ``scores`` and ``tau``.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxpapers.core import checks

__all__ = ["gumbel_topk"]


def _hard_topk(perturbed: jax.Array, k: int) -> jax.Array:
    """[V] k-hot of the k largest entries."""
    _, idx = lax.top_k(perturbed, k)
    return jnp.zeros_like(perturbed).at[idx].set(1)


def _relaxed_topk(perturbed: jax.Array, tau: jax.Array, neg: jax.Array, k: int) -> jax.Array:
    """Successive-softmax relaxed k-hot (see the module docstring); ``neg`` is 0 / -inf."""
    tiny = jnp.finfo(perturbed.dtype).tiny

    def step(carry, _):
        alpha, khot = carry
        p = jax.nn.softmax(alpha / tau + neg)
        return (alpha + jnp.log(jnp.maximum(1 - p, tiny)), khot + p), None

    (_, khot), _ = lax.scan(step, (perturbed, jnp.zeros_like(perturbed)), None, length=k)
    return khot


@functools.partial(jax.custom_jvp, nondiff_argnums=(3,))
def _straight_through_topk(perturbed, tau, neg, k):
    return _hard_topk(perturbed + neg, k)


@_straight_through_topk.defjvp
def _straight_through_topk_jvp(k, primals, tangents):
    perturbed, tau, neg = primals
    out = _hard_topk(perturbed + neg, k)
    _, t_out = jax.jvp(lambda a, b, c: _relaxed_topk(a, b, c, k), primals, tangents)
    return out, t_out


def gumbel_topk(key: jax.Array, scores: Any, *, k: int, tau: Any = 1.0,
                mask: Any = None) -> jax.Array:
    """An exactly k-hot Plackett-Luce sample whose gradient is a relaxed top-k's (unbatched).

    Forward: ``khot = 1[v in top_k(scores + G)]``, ``G ~ Gumbel(0, 1)^V`` from
    ``jax.random.gumbel(key, [V], scores.dtype)``, ``mask``-ed entries at ``-inf``: k items drawn
    without replacement from ``softmax(scores)`` over the allowed entries. Backward: the gradient
    of the successive-softmax relaxation ``sum_{j<=k} softmax(a_j / tau)``, ``a_1 = scores + G``,
    ``a_{j+1} = a_j + log(max(1 - p_j, tiny))`` (Xie & Ermon 2019), with the same ``G``.

    Args:
      key: a typed PRNG key (consumed).
      scores: [V] float, finite logits.
      k: static int in 1..V (and at most the number of allowed entries).
      tau: relaxation temperature > 0 (only the gradient depends on it; may be traced).
      mask: optional [V] bool of allowed entries (e.g. green printable bytes).

    Returns:
      [V] float (scores' dtype) with exactly k ones; zeros where ``mask`` is False. If ``mask``
      allows fewer than k entries under ``jit`` (not checkable there), disallowed entries fill up.

    >>> import jax
    >>> x = gumbel_topk(jax.random.key(0), jnp.zeros(8), k=3, mask=jnp.arange(8) < 5)
    >>> int(x.sum()), int(x[5:].sum())
    (3, 0)
    """
    checks.check_key("key", key)
    checks.check_ndim("scores", scores, 1, "[V]")
    s = jnp.asarray(scores)
    if not jnp.issubdtype(s.dtype, jnp.floating):
        raise ValueError(f"scores must be a float array [V], got dtype {s.dtype}")
    checks.check_finite("scores", scores)
    v = s.shape[0]
    if not checks.is_int(k) or not 1 <= int(k) <= v:
        raise ValueError(f"k must be an int in 1..V = 1..{v}, got {k!r}")
    k = int(k)
    checks.check_range("tau", tau, low=0.0, low_open=True, scalar=True)
    if mask is None:
        neg = jnp.zeros(v, s.dtype)
    else:
        if np.shape(mask) != (v,):
            raise ValueError(f"mask must have shape [V] = ({v},), got {np.shape(mask)}")
        m = jnp.asarray(mask)
        if m.dtype != jnp.bool_:
            raise ValueError(f"mask must be a bool array, got dtype {m.dtype}")
        allowed = checks.concrete(mask)
        if allowed is not None and int(allowed.sum()) < k:
            raise ValueError(f"k must be at most the number of allowed entries in mask, got "
                             f"k={k} with {int(allowed.sum())} allowed")
        neg = jnp.where(m, 0, -jnp.inf).astype(s.dtype)
    return _gumbel_topk_jit(key, s, jnp.asarray(tau, s.dtype), neg, k=k)


@functools.partial(jax.jit, static_argnames="k")
def _gumbel_topk_jit(key, scores, tau, neg, *, k):
    g = jax.random.gumbel(key, scores.shape, scores.dtype)
    return _straight_through_topk(scores + g, tau, neg, k)
