"""bandit2d and point_goal: rewards vs float64 numpy, noise statistics, mode masses, termination,
clipping, truncation, autoreset, jit == eager, vmap == loop, no recompilation, bad input."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxpapers.rl import envs

CENTRES = np.array([[0.5, 0.5], [0.5, -0.5], [-0.5, 0.5], [-0.5, -0.5]])
GOALS = np.array([[5.0, 0.0], [-5.0, 0.0], [0.0, 5.0], [0.0, -5.0]])


def _bandit_np(a, width=0.15, centres=CENTRES):
    a = np.clip(np.asarray(a, np.float64), -1.0, 1.0)
    d2 = ((a[..., None, :] - centres) ** 2).sum(-1)
    return np.exp(-d2 / (2 * width ** 2)).sum(-1)


def _point_np(pos, a, goals=GOALS):
    """(next pos, reward, terminated) of the MultiGoal point mass in float64."""
    a = np.clip(np.asarray(a, np.float64), -1.0, 1.0)
    p = np.clip(np.asarray(pos, np.float64) + a, -7.0, 7.0)
    d2 = ((p - goals) ** 2).sum(-1)
    hit = bool(np.sqrt(d2.min()) <= 1.0)
    return p, -30.0 * (a ** 2).sum() - d2.min() + 10.0 * hit, hit


# the env is a pytree argument (its static fields are part of the treedef): one compile per kind
jstep = jax.jit(envs.step)
jgoal = jax.jit(envs.goal_reached)


def _state(pos, t=0):
    return envs.EnvState(pos=jnp.asarray(pos, jnp.float32), t=jnp.int32(t))


# a few actions on, between and outside the peaks (the last two are clipped to [-1, 1])
BANDIT_ACTIONS = np.array([[0.5, 0.5], [0.4, -0.45], [0.0, 0.0], [-0.5, 0.62], [-0.3, -0.6],
                           [0.5, 0.0], [2.0, 0.5], [-0.9, -3.0]])


def test_bandit_reward_matches_numpy(key):
    env = envs.bandit2d(noise=0.0)
    state, obs = envs.reset(env, key)
    np.testing.assert_array_equal(np.asarray(obs), np.zeros(1, np.float32))
    ref = _bandit_np(BANDIT_ACTIONS)
    _, _, r, term, trunc = jax.jit(jax.vmap(lambda k, a: envs.step(env, k, state, a)))(
        jax.random.split(key, len(ref)), jnp.asarray(BANDIT_ACTIONS))
    np.testing.assert_allclose(r, ref, rtol=1e-5, atol=1e-6)
    assert np.all(np.asarray(term)) and not np.any(np.asarray(trunc))  # one-step episodes
    np.testing.assert_allclose(envs.bandit_mean_reward(env, BANDIT_ACTIONS), ref,
                               rtol=1e-5, atol=1e-6)
    # leading batch dims and another width / centre set
    env2 = envs.bandit2d(centres=((0.1, -0.2), (0.7, 0.7)), width=0.3)
    acts = BANDIT_ACTIONS.reshape(2, 4, 2)
    np.testing.assert_allclose(envs.bandit_mean_reward(env2, acts),
                               _bandit_np(acts, 0.3, np.array([[0.1, -0.2], [0.7, 0.7]])),
                               rtol=1e-5, atol=1e-6)
    assert float(ref[0]) > 1.0 > float(ref[2])  # a peak pays about 1, the centre next to nothing


def test_bandit_noise_statistics(key):
    """reward - mean reward ~ N(0, 0.1^2): sample mean and sd within 5 standard errors."""
    n, sigma = 20_000, 0.1
    env = envs.bandit2d(noise=sigma)
    state, _ = envs.reset(env, key)
    a = jnp.array([0.45, -0.5])
    r = jax.jit(jax.vmap(lambda k: envs.step(env, k, state, a)[2]))(jax.random.split(key, n))
    e = np.asarray(r, np.float64) - _bandit_np(np.asarray(a))
    assert abs(e.mean()) < 5 * sigma / np.sqrt(n)
    assert abs(e.std() - sigma) < 5 * sigma / np.sqrt(2 * n)  # sd of the sample sd ~ s/sqrt(2n)
    assert len(np.unique(e)) > 0.99 * n  # every key draws its own noise (float32 ties aside)


def test_mode_masses_hand_built():
    env = envs.bandit2d()
    acts = np.array([[0.5, 0.5], [0.5 + 0.24, 0.5],  # peak 0, 0.24 away: inside
                     [0.5, 0.5 - 0.26],  # 0.26 from peak 0: outside every peak
                     [0.5, -0.5], [0.3, -0.4], [0.55, -0.6],  # peak 1 (0.22 and 0.11 away)
                     [-0.5, -0.5], [0.0, 0.0]])
    np.testing.assert_allclose(envs.mode_masses(env, acts), [2 / 8, 3 / 8, 0.0, 1 / 8], atol=1e-7)
    # a larger radius takes in the 0.26 point; a tiny one keeps only exact hits
    np.testing.assert_allclose(envs.mode_masses(env, acts, radius=0.3), [3 / 8, 3 / 8, 0, 1 / 8])
    np.testing.assert_allclose(envs.mode_masses(env, acts, radius=1e-3), [1 / 8, 1 / 8, 0, 1 / 8])
    # all on one peak -> mass 1 there
    np.testing.assert_allclose(envs.mode_masses(env, np.full((5, 2), -0.5)), [0, 0, 0, 1])
    # the radius may be traced (a sweep): vmap over it
    m = jax.vmap(lambda r: envs.mode_masses(env, acts, radius=r))(jnp.array([0.25, 0.3]))
    np.testing.assert_allclose(m[1], [3 / 8, 3 / 8, 0, 1 / 8])


POINT_CASES = [  # (pos, action): origin, clipped action, a goal hit, both clip walls, near miss
    ([0.0, 0.0], [0.3, -0.2]),
    ([1.0, 2.0], [3.0, -0.5]),
    ([3.6, 0.4], [0.9, -0.1]),
    ([6.5, -6.8], [1.0, -1.0]),
    ([-6.9, 6.95], [-0.8, 0.7]),
    ([0.0, -3.9], [0.05, -0.09]),
    ([-4.0, 0.0], [-0.5, 0.0]),
    ([0.0, 4.2], [0.0, -0.5]),
]


@pytest.mark.parametrize("num_goals", [1, 4])
def test_point_goal_matches_numpy(key, num_goals):
    env = envs.point_goal(num_goals=num_goals)
    assert (env.obs_dim, env.act_dim, env.max_steps, env.num_targets) == (2, 2, 30, num_goals)
    hits = 0
    for pos, a in POINT_CASES:
        p_ref, r_ref, hit = _point_np(pos, a, GOALS[:num_goals])
        st, obs, r, term, trunc = jstep(env, key, _state(pos, 4), jnp.asarray(a))
        np.testing.assert_allclose(obs, p_ref, atol=1e-6)
        np.testing.assert_allclose(st.pos, p_ref, atol=1e-6)
        np.testing.assert_allclose(float(r), r_ref, rtol=1e-5, atol=1e-4)
        assert bool(term) == hit and not bool(trunc) and int(st.t) == 5
        assert int(jgoal(env, st)) == (
            int(np.argmin(((p_ref - GOALS[:num_goals]) ** 2).sum(-1))) if hit else -1)
        hits += hit
    assert hits == (1 if num_goals == 1 else 2)  # (3.6, .4) + a hits goal 0; (-4, 0) + a goal 1
    # the walls: (6.5, -6.8) + (1, -1) stops at (7, -7)
    st, *_ = jstep(env, key, _state([6.5, -6.8]), jnp.array([1.0, -1.0]))
    np.testing.assert_array_equal(st.pos, [7.0, -7.0])


def test_goal_reached():
    env = envs.point_goal()
    cases = {(5.0, 0.0): 0, (-4.2, 0.5): 1, (0.0, 5.99): 2, (0.7, -5.7): 3, (0.0, 0.0): -1,
             (3.9, 0.0): -1, (5.0, 1.01): -1}
    assert int(envs.goal_reached(env, _state((0.7, -5.7)))) == 3  # eager
    got = jax.jit(jax.vmap(lambda p: envs.goal_reached(env, _state(p))))(jnp.array(list(cases)))
    np.testing.assert_array_equal(got, list(cases.values()))


def test_point_goal_truncation_at_horizon(key):
    env = envs.point_goal(num_goals=2, horizon=5)
    state, obs = envs.reset(env, key)
    flags = []
    for _ in range(5):
        state, obs, r, term, trunc = jstep(env, key, state, jnp.array([0.0, 0.2]))  # keyless env
        flags.append((bool(term), bool(trunc)))
    assert flags == [(False, False)] * 4 + [(False, True)]
    # reaching a goal on the last step is termination, not truncation
    env1 = envs.point_goal(num_goals=1, horizon=1)
    *_, term, trunc = jstep(env1, key, _state([4.5, 0.0]), jnp.array([0.5, 0.0]))
    assert bool(term) and not bool(trunc)


def test_point_goal_start_distribution(key):
    env = envs.point_goal()
    n = 20_000
    states, obs = jax.jit(jax.vmap(lambda k: envs.reset(env, k)))(jax.random.split(key, n))
    x = np.asarray(obs, np.float64)
    np.testing.assert_array_equal(x, np.asarray(states.pos))
    assert np.all(np.asarray(states.t) == 0)
    assert np.all(np.abs(x.mean(0)) < 5 * 0.1 / np.sqrt(n))
    assert np.all(np.abs(x.std(0) - 0.1) < 5 * 0.1 / np.sqrt(2 * n))


def test_step_autoreset(key):
    env = envs.point_goal(num_goals=1, horizon=3)
    k1, k2 = jax.random.split(key)
    # a goal hit: next_obs is the successor, the state and obs are a fresh start
    st, next_obs, r, term, trunc, obs = envs.step_autoreset(env, k1, _state([3.5, 0.0], 1),
                                                            jnp.array([1.0, 0.0]))
    assert bool(term) and int(st.t) == 0
    np.testing.assert_allclose(next_obs, [4.5, 0.0])
    np.testing.assert_array_equal(obs, st.pos)
    assert float(jnp.max(jnp.abs(obs))) < 1.0  # N(0, 0.1^2) start
    fresh, fresh_obs = envs.reset(env, jax.random.split(k1)[1])
    np.testing.assert_array_equal(obs, fresh_obs)
    # no end: identical to step
    st, next_obs, r, term, trunc, obs = envs.step_autoreset(env, k2, _state([0.0, 0.0], 0),
                                                            jnp.array([0.5, 0.5]))
    assert int(st.t) == 1 and not bool(term | trunc)
    np.testing.assert_array_equal(next_obs, obs)


@pytest.mark.parametrize("make", [lambda: envs.bandit2d(), lambda: envs.point_goal(horizon=4)])
def test_jit_vmap_equals_eager_loop(key, make):
    env = make()
    n = 3
    k_reset, k_act, k_step = jax.random.split(key, 3)
    keys_r = jax.random.split(k_reset, n)
    keys_s = jax.random.split(k_step, n)
    acts = jax.random.uniform(k_act, (n, 2), minval=-1.3, maxval=1.3)

    def rollout(kr, ks, a):
        st, _ = envs.reset(env, kr)
        return envs.step_autoreset(env, ks, st, a)

    batched = jax.jit(jax.vmap(rollout))(keys_r, keys_s, acts)
    loop = [rollout(keys_r[i], keys_s[i], acts[i]) for i in range(n)]  # eager, op by op
    for i in range(n):
        jax.tree.map(lambda x, y: np.testing.assert_allclose(x, y, rtol=1e-6, atol=1e-6),
                     jax.tree.map(lambda x: x[i], batched), loop[i])
    # the env itself is a pytree argument: vmap over a swept width (bandit) or cost (point)
    swept = jax.vmap(lambda w: env.replace(width=w, action_cost=w))(jnp.array([0.1, 0.2]))
    st0, _ = envs.reset(env, key)
    r = jax.jit(jax.vmap(lambda e: envs.step(e, key, st0, jnp.array([0.4, 0.4]))[2]))(swept)
    assert r.shape == (2,) and float(r[0]) != float(r[1])


def test_no_recompilation(key):
    traces = []

    @jax.jit
    def f(env, key, state, a):
        traces.append(1)
        return envs.step(env, key, state, a)

    env = envs.point_goal()
    st, _ = envs.reset(env, key)
    out = f(env, key, st, jnp.array([0.1, 0.2]))
    out = f(env.replace(action_cost=jnp.float32(1.0)), key, out[0], jnp.array([0.3, -0.2]))
    assert len(traces) == 1
    assert out[0].t.dtype == jnp.int32 and out[0].pos.dtype == jnp.float32


def test_bad_input(key):
    with pytest.raises(ValueError, match="width"):
        envs.bandit2d(width=0.0)
    with pytest.raises(ValueError, match="noise"):
        envs.bandit2d(noise=-0.1)
    with pytest.raises(ValueError, match="centres"):
        envs.bandit2d(centres=((0.0, 0.0, 0.0),))
    for bad in (0, 5, 2.0):
        with pytest.raises(ValueError, match="num_goals"):
            envs.point_goal(num_goals=bad)
    with pytest.raises(ValueError, match="horizon"):
        envs.point_goal(horizon=0)
    bandit, point = envs.bandit2d(), envs.point_goal()
    with pytest.raises(ValueError, match="radius"):
        envs.mode_masses(bandit, jnp.zeros((3, 2)), radius=0.0)
    with pytest.raises(ValueError, match="actions"):
        envs.mode_masses(bandit, jnp.zeros((3, 3)))
    with pytest.raises(ValueError, match="actions"):
        envs.bandit_mean_reward(bandit, jnp.zeros((3,)))
    with pytest.raises(ValueError, match="bandit2d"):
        envs.mode_masses(point, jnp.zeros((3, 2)))
    with pytest.raises(ValueError, match="point_goal"):
        envs.goal_reached(bandit, _state([0.0, 0.0]))
    st, _ = envs.reset(point, key)
    with pytest.raises(ValueError, match="action"):
        envs.step(point, key, st, jnp.zeros((4, 2)))
