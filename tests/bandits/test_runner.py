import functools

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxpapers.bandits import (make_random, make_rs_slateglincb, make_slate_env,
                               make_slate_glm_ofu, run_bandit, run_bandit_seeds)

N, K, D = 2, 4, 3


def _envs(key, s):
    return jax.vmap(functools.partial(make_slate_env, num_slots=N, num_items=K, dim=D,
                                      theta_norm=2.0))(jax.random.split(key, s))


@pytest.mark.slow  # ~40 s cold; test_no_recompilation_across_seeds_and_deterministic covers the seeds path
def test_seeds_equal_loop_and_jit_equals_eager(key):
    """vmap-over-seeds == per-seed runs (the any-seed refit gating changes nothing)."""
    algo = make_rs_slateglincb(num_slots=N, num_items=K, dim=D, num_rounds=120,
                               param_norm_ub=3.0, kappa=10.0)
    envs = _envs(key, 3)
    keys = jax.random.split(jax.random.key(1), 3)
    batched = run_bandit_seeds(algo, envs, keys, num_rounds=120)
    for s in (2,):  # one seed (a second compile per extra seed is not needed: same program)
        env_s = jax.tree.map(lambda a: a[s], envs)
        one = run_bandit(algo, env_s, keys[s], num_rounds=120)
        np.testing.assert_array_equal(one.switches, batched.switches[s])
        np.testing.assert_allclose(one.regret, batched.regret[s], atol=1e-6)
    # jit(select, update) == eager on a first round (warm-up refit included)
    ctx = jax.random.uniform(key, (N, K, D), minval=-1, maxval=1) / 2
    st = algo.init(key)
    items_j, st_j = jax.jit(algo.select)(st, jax.random.key(2), ctx)
    with jax.disable_jit():
        items_e, st_e = algo.select(st, jax.random.key(2), ctx)
        upd_e = algo.update(st_e, ctx, items_e, jnp.float32(1.0))
    upd_j = jax.jit(algo.update)(st_j, ctx, items_j, jnp.float32(1.0))
    np.testing.assert_array_equal(items_j, items_e)
    np.testing.assert_allclose(upd_j.theta_w, upd_e.theta_w, atol=1e-5)
    assert int(upd_j.num_warm) == int(upd_e.num_warm) == 1


def test_no_recompilation_across_seeds_and_deterministic(key, monkeypatch):
    from jaxpapers.bandits import runner

    chex.clear_trace_counter()
    monkeypatch.setattr(runner, "_run_many", jax.jit(
        chex.assert_max_traces(runner._run_many.__wrapped__, n=1),
        static_argnames=("algo", "num_rounds", "trace_fn")))
    algo = make_random(num_slots=N, num_items=K)
    first = run_bandit_seeds(algo, _envs(key, 4), jax.random.split(key, 4), num_rounds=30)
    # new environments and keys (same shapes): no retrace
    out = run_bandit_seeds(algo, _envs(jax.random.key(7), 4), jax.random.split(jax.random.key(8), 4),
                           num_rounds=30)
    assert not np.allclose(out.regret, first.regret)
    again = run_bandit_seeds(algo, _envs(key, 4), jax.random.split(key, 4), num_rounds=30)
    np.testing.assert_array_equal(again.regret, first.regret)


def test_ofu_beats_random_and_is_sublinear(key):
    """Seeded statistical check (8 seeds, T = 1200): OFU's mean regret is far below random's
    (random's regret is linear, ~0.2 per round here) and its second half adds less than its first.
    """
    s, t = 8, 1200
    envs = _envs(key, s)
    keys = jax.random.split(jax.random.key(11), s)
    ofu = make_slate_glm_ofu(num_slots=N, num_items=K, dim=D, param_norm_ub=3.0)
    r_ofu = np.asarray(run_bandit_seeds(ofu, envs, keys, num_rounds=t).regret).sum(1).mean()
    r_rnd = np.asarray(run_bandit_seeds(make_random(num_slots=N, num_items=K), envs, keys,
                                        num_rounds=t).regret).sum(1).mean()
    assert r_ofu < 0.4 * r_rnd
    reg = np.asarray(run_bandit_seeds(ofu, envs, keys, num_rounds=t).regret).mean(0)
    assert reg[t // 2:].sum() < reg[: t // 2].sum()


@pytest.mark.parametrize("bad, error", [(0, ValueError), (-3, ValueError), (2.5, TypeError),
                                        (True, TypeError)])
def test_bad_num_rounds(key, bad, error):
    env = make_slate_env(key, num_slots=N, num_items=K, dim=D, theta_norm=1.0)
    with pytest.raises(error, match="num_rounds"):
        run_bandit(make_random(num_slots=N, num_items=K), env, key, num_rounds=bad)


def test_bad_algo_args():
    with pytest.raises(ValueError, match="num_items"):
        make_slate_glm_ofu(num_slots=2, num_items=0, dim=2, param_norm_ub=1.0)
    with pytest.raises(ValueError, match="num_rounds"):
        make_rs_slateglincb(num_slots=2, num_items=3, dim=2, num_rounds=0, param_norm_ub=1.0,
                            kappa=4.0)
    with pytest.raises(ValueError, match="kappa"):
        make_rs_slateglincb(num_slots=2, num_items=3, dim=2, num_rounds=5, param_norm_ub=1.0,
                            kappa=float("inf"))
