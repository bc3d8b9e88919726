"""Uniformly random slates (the trivial baseline).

Letters: N slots, K items per slot, d item dimension.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxpapers.bandits._types import SlateAlgo, no_refit
from jaxpapers.core import checks

__all__ = ["make_random"]


def make_random(*, num_slots: int, num_items: int) -> SlateAlgo:
    """A policy choosing each slot's item uniformly at random; its state is a round counter.

    >>> algo = make_random(num_slots=2, num_items=3)
    >>> items, _ = algo.select(algo.init(jax.random.key(0)), jax.random.key(1), jnp.ones((2, 3, 1)))
    >>> items.shape
    (2,)
    """
    for name, v in (("num_slots", num_slots), ("num_items", num_items)):
        checks.check_int(name, v, minimum=1)

    def init(key):
        del key
        return jnp.zeros((), jnp.int32)

    def select(state, key, contexts):
        del contexts
        return jax.random.randint(key, (num_slots,), 0, num_items).astype(jnp.int32), state

    def observe(state, contexts, items, reward):
        return state + 1

    return SlateAlgo(init=init, select=select,
                     **no_refit(observe, num_switches=lambda s: jnp.zeros((), jnp.int32),
                                name="random"))
