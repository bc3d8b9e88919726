"""Single-action GLM bandits on flattened slates (RS-GLinCB / B-GLinCB baselines).

A slate of N slots with K items each is one arm among K^N, whose feature is the concatenation of
its items' features (dimension N d). :func:`flatten_slates` wraps any :class:`SlateAlgo` built for
one slot with K^N items of dimension N d so that it runs on slate contexts [N, K, d]: ``select``
enumerates the K^N slates, asks the inner algorithm for one, and returns its items; ``update``
hands the inner algorithm the chosen slate. This is how RS-GLinCB and B-GLinCB (Sawarni et al.
2024) apply to slates without a slot decomposition, at O(K^N N d) memory and O(K^N (N d)^2) time
per round: only usable where K^N is enumerable, which the experiment's time-per-round figure
contrasts with the slot-wise algorithms.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxpapers.bandits._types import SlateAlgo, make_update
from jaxpapers.core import checks

__all__ = ["flatten_slates", "slate_index_table", "MAX_FLAT_ARMS"]

MAX_FLAT_ARMS = 1 << 16  # K^N above this is refused (memory of the [K^N, N d] context table)


def slate_index_table(num_slots: int, num_items: int) -> np.ndarray:
    """[K^N, N] int32: row r lists the item of each slot of slate r (slot 0 most significant)."""
    grid = np.indices((num_items,) * num_slots).reshape(num_slots, -1).T
    return grid.astype(np.int32)


def flatten_slates(inner: SlateAlgo, *, num_slots: int, num_items: int) -> SlateAlgo:
    """Run a one-slot algorithm over the K^N flattened slates.

    Args:
      inner: a :class:`SlateAlgo` made with ``num_slots=1``, ``num_items=K**N`` and
        ``dim=N * d`` (its contexts are [1, K^N, N d]).
      num_slots: N.  num_items: K.

    Returns:
      A :class:`SlateAlgo` on slate contexts [N, K, d] with the inner algorithm's state, refits
      and switch counter; its name is ``"flat_" + inner.name``.

    >>> from jaxpapers.bandits import make_rs_slateglincb
    >>> inner = make_rs_slateglincb(num_slots=1, num_items=9, dim=4, num_rounds=10,
    ...                             param_norm_ub=2.0, kappa=10.0)
    >>> algo = flatten_slates(inner, num_slots=2, num_items=3)
    >>> ctx = jnp.ones((2, 3, 2)) / 2
    >>> items, _ = algo.select(algo.init(jax.random.key(0)), jax.random.key(1), ctx)
    >>> items.shape
    (2,)
    """
    for name, v in (("num_slots", num_slots), ("num_items", num_items)):
        checks.check_int(name, v, minimum=1)
    n_arms = num_items ** num_slots
    if n_arms > MAX_FLAT_ARMS:
        raise ValueError(f"num_items ** num_slots = {n_arms} slates is too many to enumerate "
                         f"(limit {MAX_FLAT_ARMS})")
    table = slate_index_table(num_slots, num_items)  # [K^N, N]
    weights = num_items ** np.arange(num_slots - 1, -1, -1, dtype=np.int64)  # slot 0 first

    def flat_contexts(contexts):
        if contexts.shape[:2] != (num_slots, num_items):
            raise ValueError(f"contexts must have shape [{num_slots}, {num_items}, d], got "
                             f"{contexts.shape}")
        feats = contexts[jnp.arange(num_slots)[None, :], jnp.asarray(table)]  # [K^N, N, d]
        return feats.reshape(1, n_arms, -1)

    def select(state, key, contexts):
        idx, state = inner.select(state, key, flat_contexts(contexts))
        return jnp.asarray(table)[idx[0]], state

    def observe(state, contexts, items, reward):
        flat_idx = jnp.sum(items.astype(jnp.int32) * jnp.asarray(weights, jnp.int32))
        return inner.observe(state, flat_contexts(contexts), flat_idx[None], reward)

    fields = dict(refit=inner.refit, get_fit=inner.get_fit, set_fit=inner.set_fit,
                  needs_refit=inner.needs_refit)
    return SlateAlgo(init=inner.init, select=select,
                     update=make_update(observe, **fields), observe=observe,
                     num_switches=inner.num_switches, name="flat_" + inner.name, **fields)

