"""Switch / batch counts against the stated bounds (deterministic), and batch-fixed policies."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxpapers.bandits import (LOGISTIC, PROBIT, batch_bound, batch_schedule, kappa_of,
                               make_b_slateglincb, make_rs_slateglincb, make_slate_env,
                               rs_switch_bound, rs_warmup_threshold, run_bandit_seeds)

T = 400
S = 3


def _envs(key, n, k, d, norm, link):
    keys = jax.random.split(key, S)
    return jax.vmap(functools.partial(make_slate_env, num_slots=n, num_items=k, dim=d,
                                      theta_norm=norm, link=link))(keys)


@pytest.mark.parametrize("num_rounds", [1, 2, 3, 7, 50, 999, 10_000, 123_457, 10 ** 7])
def test_batch_schedule_within_bound(num_rounds):
    ends = batch_schedule(num_rounds)
    assert ends[-1] == num_rounds and np.all(np.diff(ends) > 0)
    assert len(ends) <= batch_bound(num_rounds)


@pytest.mark.parametrize("n, d, norm, link", [
    pytest.param(3, 3, 2.0, "logistic", marks=pytest.mark.slow), (2, 4, 4.0, "probit")])
def test_rs_switches_within_bound(key, n, d, norm, link):
    envs = _envs(key, n, 4, d, norm, link)
    lk = LOGISTIC if link == "logistic" else PROBIT
    kappa = float(1 / lk.dmean(norm))
    algo = make_rs_slateglincb(num_slots=n, num_items=4, dim=d, num_rounds=T,
                               param_norm_ub=float(int(norm) + 1), kappa=kappa, link=lk)
    res = run_bandit_seeds(algo, envs, jax.random.split(jax.random.key(3), S), num_rounds=T)
    tau = rs_warmup_threshold(kappa=kappa, param_norm_ub=float(int(norm) + 1), dim=d)
    wb, db = rs_switch_bound(num_rounds=T, num_slots=n, dim=d, tau=tau, max_dmean=lk.max_dmean)
    sw = np.asarray(res.switches)
    assert np.all(np.diff(sw, axis=1) >= 0)
    assert sw[:, -1].max() <= wb + db
    assert sw[:, -1].min() >= 1  # it does refit (the test can fail if refits never happen)


def test_rs_parts_within_their_bounds(key):
    """Warm-up and determinant refits separately (single seed, via the state)."""
    env = make_slate_env(key, num_slots=3, num_items=5, dim=2, theta_norm=3.0)
    kappa = float(kappa_of(env))
    algo = make_rs_slateglincb(num_slots=3, num_items=5, dim=2, num_rounds=T, param_norm_ub=4.0,
                               kappa=kappa)
    from jaxpapers.bandits.env import env_contexts, env_sample_reward, slate_features

    def step(state, t):
        k = jax.random.fold_in(jax.random.key(9), t)
        k1, k2, k3 = jax.random.split(k, 3)
        ctx = env_contexts(env, k1, t)
        items, state = algo.select(state, k2, ctx)
        r = env_sample_reward(env, k3, slate_features(ctx, items))
        return algo.update(state, ctx, items, r), None

    state, _ = jax.jit(lambda s: jax.lax.scan(step, s, jnp.arange(T)))(algo.init(key))
    tau = rs_warmup_threshold(kappa=kappa, param_norm_ub=4.0, dim=2)
    wb, db = rs_switch_bound(num_rounds=T, num_slots=3, dim=2, tau=tau)
    assert 1 <= int(state.num_warm) <= wb and int(state.nw) == int(state.num_warm)
    assert 1 <= int(state.num_det) <= db


@pytest.mark.parametrize("plus", [False, True])
def test_b_batches_and_fixed_policy(key, plus):
    """Batches used == schedule length <= bound; theta changes only at batch ends."""
    n, k, d = 2, 4, 3
    env = make_slate_env(key, num_slots=n, num_items=k, dim=d, theta_norm=2.0)
    algo = make_b_slateglincb(num_slots=n, num_items=k, dim=d, num_rounds=T, param_norm_ub=3.0,
                              plus=plus)
    from jaxpapers.bandits.env import env_contexts, env_sample_reward, slate_features

    def step(state, t):
        k1, k2, k3 = jax.random.split(jax.random.fold_in(jax.random.key(4), t), 3)
        ctx = env_contexts(env, k1, t)
        items, state = algo.select(state, k2, ctx)
        r = env_sample_reward(env, k3, slate_features(ctx, items))
        state = algo.update(state, ctx, items, r)
        return state, (state.theta, algo.num_switches(state))

    _, (thetas, sw) = jax.jit(lambda s: jax.lax.scan(step, s, jnp.arange(T)))(algo.init(key))
    ends = batch_schedule(T)
    changed = np.nonzero(np.any(np.diff(np.asarray(thetas).reshape(T, -1), axis=0) != 0, 1))[0] + 2
    assert set(changed.tolist()) <= set(ends[:-1].tolist())   # round index (1-based) of a change
    assert len(changed) >= 1
    assert int(sw[-1]) == len(ends) <= batch_bound(T)
