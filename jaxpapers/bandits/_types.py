"""Types shared by the slate-bandit algorithms, environments and the runner.

Letters: N slots, K items per slot, d item dimension, P context pool size, T rounds.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax

__all__ = ["SlateAlgo", "RunResult"]

State = Any


class SlateAlgo(NamedTuple):
    """An optax-style slate bandit: pure functions over a state pytree.

    Attributes:
      init: ``init(key) -> state``.
      select: ``select(state, key, contexts [N, K, d]) -> (items [N] int32, state)``.
      update: ``update(state, contexts [N, K, d], items [N], reward []) -> state``; equal to
        ``set_fit(s, lax.cond(needs_refit(s), refit, get_fit, s))`` with ``s = observe(...)``.
      observe: the cheap part of ``update`` (buffers, matrices, counters); it only marks a pending
        parameter refit.
      refit: ``state -> fit``: the small refitted part of the state (estimates, their matrices,
        counters) after the pending refit (MLE); unchanged values when none is pending.
      get_fit: ``state -> fit`` (no computation).  set_fit: ``(state, fit) -> state``.
      needs_refit: ``state -> bool []``. The batched runner refits only the seeds that need it and
        moves only the small ``fit`` through ``lax.cond`` (not the T-row data buffers).
      num_switches: ``state -> int32 []`` parameter updates (or batches) so far.
      name: a short identifier.
    """

    init: Callable[[jax.Array], State]
    select: Callable[..., tuple[jax.Array, State]]
    update: Callable[..., State]
    observe: Callable[..., State]
    refit: Callable[[State], Any]
    get_fit: Callable[[State], Any]
    set_fit: Callable[[State, Any], State]
    needs_refit: Callable[[State], jax.Array]
    num_switches: Callable[[State], jax.Array]
    name: str


class RunResult(NamedTuple):
    """Per-round trace of one run (leading seed axis S when batched).

    Attributes:
      regret: [T] (or [S, T]) expected regret mu(best slate) - mu(played slate).
      reward: [T] sampled rewards.
      switches: [T] int32 cumulative parameter updates / batches after each round.
      trace: what ``trace_fn(state)`` returned after each round, leaves with a leading [T] (or
        [S, T]) axis; None without a ``trace_fn``.
    """

    regret: jax.Array
    reward: jax.Array
    switches: jax.Array
    trace: Any = None


def make_update(observe, refit, get_fit, set_fit, needs_refit):
    """``update = set_fit(s, lax.cond(needs_refit(s), refit, get_fit, s))``, s = observe(...)."""

    def update(state, contexts, items, reward):
        state = observe(state, contexts, items, reward)
        return set_fit(state, jax.lax.cond(needs_refit(state), refit, get_fit, state))

    return update


def no_refit(observe, **kw):
    """SlateAlgo keyword arguments for an algorithm that never refits (fit = ())."""
    return dict(update=observe, observe=observe, refit=lambda s: (), get_fit=lambda s: (),
                set_fit=lambda s, f: s, needs_refit=lambda s: jax.numpy.zeros((), bool), **kw)
