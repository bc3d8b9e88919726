"""Run a slate bandit on an environment: one ``lax.scan`` over rounds, vmapped over seeds.

Letters: S seeds, T rounds, N slots, K items, d item dimension.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from jaxpapers.bandits._types import RunResult, SlateAlgo
from jaxpapers.bandits.env import (SlateEnv, env_contexts, env_mean_reward, env_sample_reward,
                                   oracle_slate, slate_features)
from jaxpapers.core import checks

__all__ = ["run_bandit", "run_bandit_seeds"]


def _check(algo, num_rounds):
    if not isinstance(algo, SlateAlgo):
        raise ValueError(f"algo must be a SlateAlgo, got {type(algo).__name__}")
    checks.check_int("num_rounds", num_rounds, minimum=1)


def _round_inputs(env, key, t):
    k_ctx, k_sel, k_rew = jax.random.split(jax.random.fold_in(key, t), 3)
    return env_contexts(env, k_ctx, t), k_sel, k_rew


def _play(algo, env, state, contexts, k_sel, k_rew):
    items, state = algo.select(state, k_sel, contexts)
    chosen = slate_features(contexts, items)
    reward = env_sample_reward(env, k_rew, chosen)
    best = slate_features(contexts, oracle_slate(env, contexts))
    regret = env_mean_reward(env, best) - env_mean_reward(env, chosen)
    return items, reward, regret, state


@functools.partial(jax.jit, static_argnames=("algo", "num_rounds"))
def _run_one(algo, env, key, num_rounds):
    k_init, k_run = jax.random.split(key)

    def step(state, t):
        contexts, k_sel, k_rew = _round_inputs(env, k_run, t)
        items, reward, regret, state = _play(algo, env, state, contexts, k_sel, k_rew)
        state = algo.update(state, contexts, items, reward)
        return state, (regret, reward, algo.num_switches(state).astype(jnp.int32))

    _, (regret, reward, sw) = jax.lax.scan(step, algo.init(k_init),
                                           jnp.arange(num_rounds, dtype=jnp.int32))
    return RunResult(regret=regret, reward=reward, switches=sw)


def run_bandit(algo: SlateAlgo, env: SlateEnv, key: jax.Array, *, num_rounds: int) -> RunResult:
    """Play ``algo`` on ``env`` for ``num_rounds`` rounds (one jitted ``lax.scan``; unbatched).

    Round t: contexts ~ env (key folded with t), ``select``, Bernoulli reward, ``update``.

    Args:
      algo: a :class:`SlateAlgo` (static: reuse the same object to avoid recompiling).
      env: a :class:`SlateEnv`.
      key: consumed.
      num_rounds: T >= 1 (static).

    Returns:
      :class:`RunResult` with [T] regret, reward and cumulative switches.

    >>> from jaxpapers.bandits import make_slate_env, make_random
    >>> env = make_slate_env(jax.random.key(0), num_slots=2, num_items=3, dim=2, theta_norm=1.0)
    >>> res = run_bandit(make_random(num_slots=2, num_items=3), env, jax.random.key(1),
    ...                  num_rounds=5)
    >>> res.regret.shape
    (5,)
    """
    _check(algo, num_rounds)
    return _run_one(algo, env, key, num_rounds)


def _refit_pending(algo, states):
    """Per seed s with ``needs_refit``: fit[s] <- refit(states[s]); other seeds untouched.

    A ``fori_loop`` over seeds with an unbatched ``lax.cond`` each, entered only when some seed
    needs it; only the small ``fit`` pytree is carried (the data buffers are read, not copied).
    """
    needs = jax.vmap(algo.needs_refit)(states)
    fits = jax.vmap(algo.get_fit)(states)

    def one(s, fits):
        def do(fits):
            new = algo.refit(jax.tree.map(lambda a: a[s], states))
            return jax.tree.map(lambda a, b: a.at[s].set(b), fits, new)
        return jax.lax.cond(needs[s], do, lambda f: f, fits)

    fits = jax.lax.cond(jnp.any(needs),
                        lambda f: jax.lax.fori_loop(0, needs.shape[0], one, f),
                        lambda f: f, fits)
    return jax.vmap(algo.set_fit)(states, fits)


@functools.partial(jax.jit, static_argnames=("algo", "num_rounds", "trace_fn"))
def _run_many(algo, envs, keys, num_rounds, trace_fn=None):
    k_init, k_run = jax.vmap(jax.random.split, out_axes=1)(keys)
    vplay = jax.vmap(functools.partial(_play, algo))
    vinputs = jax.vmap(_round_inputs, in_axes=(0, 0, None))

    def step(states, t):
        contexts, k_sel, k_rew = vinputs(envs, k_run, t)
        items, reward, regret, states = vplay(envs, states, contexts, k_sel, k_rew)
        states = jax.vmap(algo.observe)(states, contexts, items, reward)
        # The expensive refit (MLE) runs only for the seeds that need it: a plain vmap of
        # ``update`` would turn its lax.cond into a select and refit every seed in every round.
        states = _refit_pending(algo, states)
        sw = jax.vmap(algo.num_switches)(states).astype(jnp.int32)
        tr = None if trace_fn is None else jax.vmap(trace_fn)(states)
        return states, (regret, reward, sw, tr)

    _, (regret, reward, sw, tr) = jax.lax.scan(step, jax.vmap(algo.init)(k_init),
                                               jnp.arange(num_rounds, dtype=jnp.int32))
    tr = None if tr is None else jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1), tr)
    return RunResult(regret=regret.T, reward=reward.T, switches=sw.T, trace=tr)


def run_bandit_seeds(algo: SlateAlgo, envs: SlateEnv, keys: jax.Array, *,
                     num_rounds: int, trace_fn=None) -> RunResult:
    """Play ``algo`` on S environments with S keys in one compiled call (vmap inside a scan).

    Seed s gives the same trace as ``run_bandit(algo, envs[s], keys[s])`` (tested), but the
    refit is evaluated only in rounds where at least one seed needs it.

    Args:
      algo: a :class:`SlateAlgo`.
      envs: a :class:`SlateEnv` whose arrays have a leading seed axis S (e.g. from
        ``jax.vmap(partial(make_slate_env, ...))(keys)``).
      keys: [S] keys, consumed.
      num_rounds: T >= 1.
      trace_fn: optional ``state -> pytree`` (unbatched) recorded after every round, e.g. a
        module-level ``def warm(s): return s.warm`` for RS-SlateGLinCB's warm-up flag. It is a
        static argument: pass the same function object each time (a fresh lambda recompiles).

    Returns:
      :class:`RunResult` with [S, T] arrays (``trace`` leaves [S, T, ...]).
    """
    _check(algo, num_rounds)
    s = keys.shape[0] if keys.ndim == 1 else None
    if s is None or envs.theta_star.ndim != 3 or envs.theta_star.shape[0] != s:
        raise ValueError(f"keys must have shape [S] and envs a leading seed axis S; got keys "
                         f"{keys.shape} and theta_star {envs.theta_star.shape}")
    return _run_many(algo, envs, keys, num_rounds, trace_fn)
