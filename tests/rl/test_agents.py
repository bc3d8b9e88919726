"""Agents (cgpo, qvpo, qgrad, sac) and the scan trainer: jit, vmap, no retrace, formulas."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxpapers import rl
from jaxpapers.rl import baselines, envs
from jaxpapers.rl.networks import TanhGaussianActor

SMALL = dict(num_steps=4, guidance_steps=2, hidden=(16,), num_quantiles=5, drop_per_net=1,
             n_cand=2, n_uniform=2, gamma=0.9)


def _batch(b=8, o=2, a=2, seed=0):
    k = jax.random.split(jax.random.key(seed), 4)
    return rl.Transition(jax.random.normal(k[0], (b, o)),
                         jax.random.uniform(k[1], (b, a), minval=-1, maxval=1),
                         jax.random.normal(k[2], (b,)), jax.random.normal(k[3], (b, o)),
                         jnp.zeros((b,)))


@pytest.mark.parametrize("method", rl.METHODS)
def test_update_is_pure_jitted_and_does_not_retrace(method):
    ag = rl.make_agent(rl.AgentConfig(method=method, **SMALL), 2, 2)
    st = ag.init(jax.random.key(0))
    upd = jax.jit(ag.update)
    s1, m1 = upd(st, rl.CGPOParams.make(), jax.random.key(1), _batch())
    s2, m2 = upd(s1, rl.CGPOParams.make(guidance_scale=0.2, beta=2.0, alpha_ent=0.0),
                 jax.random.key(2), _batch(seed=1))
    assert upd._cache_size() == 1
    spec = lambda t: jax.tree.map(lambda x: (x.shape, x.dtype), t)  # noqa: E731
    assert spec(st) == spec(s1) == spec(s2) and int(s2.step) == 2
    assert all(np.isfinite(float(v)) for v in m2.values())
    # same inputs, same outputs (pure)
    s1b, _ = upd(st, rl.CGPOParams.make(), jax.random.key(1), _batch())
    for x, y in zip(jax.tree.leaves(s1), jax.tree.leaves(s1b)):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    # the critic moved, the target moved by tau towards it
    c0, c1, t1 = (jax.tree.leaves(x)[0] for x in (st.critic, s1.critic, s1.target))
    np.testing.assert_allclose(np.asarray(t1), np.asarray(c0 + 0.005 * (c1 - c0)), rtol=1e-5,
                               atol=1e-7)


def test_cgpo_weights_formula():
    adv = jnp.array([-2.0, 0.0, 1.0, 5.0])
    w = rl.cgpo_weights(adv, 1.5)
    z = 1.5 * np.asarray(adv) / (np.std(np.asarray(adv)) + 1e-6)
    np.testing.assert_allclose(np.asarray(w), np.exp(np.clip(z, -3, 3)), rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(rl.cgpo_weights(adv, 0.0)), np.ones(4))


def test_sac_log_density_matches_numpy():
    net = TanhGaussianActor(2, (8,))
    params = net.init(jax.random.key(0), jnp.zeros(3))
    obs = jax.random.normal(jax.random.key(1), (5, 3))
    a, logp = baselines.sac_sample(net, params, jax.random.key(2), obs)
    mean, log_std = (np.asarray(x, np.float64) for x in net.apply(params, obs))
    u = np.arctanh(np.clip(np.asarray(a, np.float64), -1 + 1e-7, 1 - 1e-7))
    std = np.exp(log_std)
    ref = (-0.5 * ((u - mean) / std) ** 2 - log_std - 0.5 * np.log(2 * np.pi)
           - np.log(1 - np.tanh(u) ** 2)).sum(1)
    np.testing.assert_allclose(np.asarray(logp), ref, rtol=1e-3, atol=1e-3)


def test_fit_uniform_spreads_the_policy():
    # the experiment's bandit setting: T = 20, MLP 64 x 2, 300 Adam steps on 64 rows
    ag = rl.make_agent(rl.AgentConfig(method="cgpo", num_steps=20, hidden=(64, 64)), 1, 2)
    st = ag.init(jax.random.key(0))
    fit = rl.fit_uniform(ag, st.actor, jax.random.key(1), jnp.zeros((64, 1)), steps=300,
                         lr=1e-3)
    a = ag.act(st.replace(actor=fit), jax.random.key(2), jnp.zeros((2000, 1)))
    # U[-1, 1]^2: mean 0, sd 0.577 per coordinate, 25% per quadrant. The fitted DDPM (x_0
    # clipped) is a little narrower
    quad = np.histogram2d(np.asarray(a[:, 0]), np.asarray(a[:, 1]), bins=[[-1, 0, 1]] * 2)[0]
    assert float(jnp.max(jnp.abs(jnp.mean(a, axis=0)))) < 0.1
    assert float(jnp.min(jnp.std(a, axis=0))) > 0.35
    assert np.all((quad / 2000 > 0.15) & (quad / 2000 < 0.35)), quad
    # uniform puts no mass on the box's edges; the unfitted policy piles samples there
    edge = lambda x: float(jnp.mean(jnp.any(jnp.abs(x) >= 0.999, axis=1)))  # noqa: E731
    a0 = ag.act(st, jax.random.key(2), jnp.zeros((2000, 1)))
    assert edge(a) < 0.05 < edge(a0), (edge(a), edge(a0))


def _trainer(method="cgpo", **kw):
    ag = rl.make_agent(rl.AgentConfig(method=method, **SMALL), 2, 2)
    env = envs.point_goal(num_goals=2, horizon=5)
    return ag, env, rl.make_trainer(ag, env, num_envs=2, batch_size=8, capacity=64, warmup=2,
                                    **kw)


def test_trainer_scan_equals_python_loop_and_vmap_equals_loop():
    # the trainer is method-agnostic; sac keeps the compilations short
    ag, env, tr = _trainer("sac")
    hp = rl.CGPOParams.make()
    ts0 = tr.init(jax.random.key(0))
    key = jax.random.key(1)
    run = jax.jit(lambda ts, k: tr.run(ts, hp, k, 4))
    ts_scan, met = run(ts0, key)
    step = jax.jit(lambda ts, k: tr.step(ts, hp, k))
    ts_loop = ts0
    for k in jax.random.split(key, 4):
        ts_loop, _ = step(ts_loop, k)
    for x, y in zip(jax.tree.leaves(ts_scan), jax.tree.leaves(ts_loop)):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=2e-5, atol=2e-6)
    assert int(ts_scan.iteration) == 4 and int(ts_scan.buffer.size) == 8
    assert met["critic_loss"].shape == (4,) and met["episodes"].shape == (4,)
    # vmap over seeds == one run per seed (the same jitted run, unbatched)
    keys = jax.random.split(jax.random.key(2), 2)
    starts = jax.vmap(tr.init)(keys)
    both = jax.jit(jax.vmap(lambda ts, k: tr.run(ts, hp, k, 4)[0]))(starts, keys)
    for i in range(2):
        one = run(jax.tree.map(lambda x: x[i], starts), keys[i])[0]
        for x, y in zip(jax.tree.leaves(both), jax.tree.leaves(one)):
            np.testing.assert_allclose(np.asarray(x[i]), np.asarray(y), rtol=2e-5, atol=2e-6)
    assert run._cache_size() == 1


def test_evaluate_returns_match_a_manual_rollout():
    ag, env, tr = _trainer("sac")
    st = ag.init(jax.random.key(0))
    ret, final, seen, alive = rl.evaluate(ag, env, st, jax.random.key(1), num_episodes=3)
    assert ret.shape == (3,) and seen.shape == (5, 3, 2) and alive.shape == (5, 3)
    assert bool(jnp.all(alive[0]))
    # replay episode 0 by hand with the same keys
    k_reset, k_run = jax.random.split(jax.random.key(1))
    s, obs = jax.vmap(envs.reset, in_axes=(None, 0))(env, jax.random.split(k_reset, 3))
    total, live = np.zeros(3), np.ones(3, bool)
    for k in jax.random.split(k_run, env.max_steps):
        k_act, k_env = jax.random.split(k)
        a = ag.act(st, k_act, obs)
        s2, o2, r, te, trn = jax.vmap(envs.step, in_axes=(None, 0, 0, 0))(
            env, jax.random.split(k_env, 3), s, a)
        total += np.where(live, np.asarray(r), 0.0)
        live &= ~np.asarray(te | trn)
        s, obs = s2, o2
    np.testing.assert_allclose(np.asarray(ret), total, rtol=1e-5)


def test_agent_and_trainer_bad_input():
    with pytest.raises(ValueError, match="guidance_steps"):
        rl.AgentConfig(num_steps=4, guidance_steps=5)
    with pytest.raises(ValueError, match="method"):
        rl.AgentConfig(method="ppo")
    with pytest.raises(ValueError, match="drop_per_net"):
        rl.AgentConfig(num_quantiles=5, drop_per_net=5)
    with pytest.raises(ValueError, match="capacity"):
        _trainer(reward_scale=1.0)[2].init  # fine
        rl.make_trainer(rl.make_agent(rl.AgentConfig(**SMALL), 2, 2), envs.point_goal(),
                        num_envs=2, batch_size=32, capacity=16)
    with pytest.raises(ValueError, match="guidance_scale"):
        rl.CGPOParams.make(guidance_scale=-1.0)
    with pytest.raises(ValueError, match="fit_uniform"):
        ag = rl.make_agent(rl.AgentConfig(method="sac", **SMALL), 1, 2)
        rl.fit_uniform(ag, ag.init(jax.random.key(0)).actor, jax.random.key(1),
                       jnp.zeros((4, 1)), steps=2)
