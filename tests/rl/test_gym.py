"""GymVecEnv on gymnasium MuJoCo: a 50-step HalfCheetah run, determinism, same-step autoreset
(true successor vs next observation) against a hand-driven single env, episode returns, bad
input."""

import numpy as np
import pytest

pytest.importorskip("gymnasium")
pytest.importorskip("mujoco")

import gymnasium  # noqa: E402

from jaxpapers.rl.gym import GymVecEnv  # noqa: E402


@pytest.fixture(autouse=True)
def _in_tmp_dir(tmp_path, monkeypatch):
    """MuJoCo appends compiler warnings (Hopper's deprecated ``settotalmass``) to MUJOCO_LOG.TXT in
    the working directory: keep it out of the repository."""
    monkeypatch.chdir(tmp_path)


def _run(env, actions):
    """Reset, then step through ``actions`` [T, E, A]; stacked outputs of every step."""
    first = env.reset()
    outs = [env.step(a) for a in actions]
    return first, [np.stack(x) for x in zip(*outs)]


def test_halfcheetah_50_steps_shapes_and_determinism():
    rng = np.random.default_rng(0)
    actions = rng.uniform(-1, 1, (50, 2, 6))
    runs = []
    for _ in range(2):
        env = GymVecEnv("HalfCheetah-v5", num_envs=2, seed=7)
        assert (env.obs_dim, env.act_dim, env.num_envs) == (17, 6, 2)
        first, (next_obs, reward, term, trunc, obs) = _run(env, actions)
        assert first.shape == (2, 17) and first.dtype == np.float32
        assert next_obs.shape == obs.shape == (50, 2, 17)
        assert next_obs.dtype == obs.dtype == reward.dtype == np.float32
        assert reward.shape == term.shape == trunc.shape == (50, 2)
        assert term.dtype == trunc.dtype == np.bool_
        # HalfCheetah never terminates and truncates at 1000 steps: successor == next observation
        assert not term.any() and not trunc.any()
        np.testing.assert_array_equal(next_obs, obs)
        assert np.all(np.isfinite(obs)) and np.std(reward) > 0
        assert env.env_steps == 100 and env.completed_returns() == []
        runs.append((first, next_obs, reward))
        env.close()
    for a, b in zip(runs[0], runs[1]):
        np.testing.assert_array_equal(a, b)  # same seed, same actions: bit for bit
    assert not np.array_equal(runs[0][0][0], runs[0][0][1])  # copies get different seeds
    other = GymVecEnv("HalfCheetah-v5", num_envs=2, seed=8)
    assert not np.array_equal(other.reset(), runs[0][0])
    other.close()


def test_truncation_successor_and_returns():
    """A 20-step time limit: at step 20 every row is truncated, next_obs is the final observation,
    obs a fresh start, and the two returns are the sums of the rewards."""
    env = GymVecEnv("HalfCheetah-v5", num_envs=2, seed=1, env_kwargs={"max_episode_steps": 20})
    rng = np.random.default_rng(1)
    _, (next_obs, reward, term, trunc, obs) = _run(env, rng.uniform(-1, 1, (25, 2, 6)))
    assert not term.any()
    np.testing.assert_array_equal(trunc, np.arange(25)[:, None].repeat(2, 1) == 19)
    assert not np.allclose(next_obs[19], obs[19])
    np.testing.assert_array_equal(next_obs[18:19], obs[18:19])
    # the fresh start is near the initial pose (HalfCheetah reset noise 0.1 on qpos)
    assert np.abs(obs[19, :, :8]).max() < 0.5
    got = env.completed_returns()
    np.testing.assert_allclose(got, reward[:20].astype(np.float64).sum(0), rtol=1e-5, atol=1e-4)
    assert env.completed_returns() == [] and env.env_steps == 50
    env.close()


def test_hopper_episode_ends_match_single_env():
    """Random actions end Hopper episodes within tens of steps. Row i must follow a single
    ``gymnasium.make`` env seeded ``seed + i`` and reset by hand (without a seed) after each end."""
    seed, num_envs, steps = 3, 2, 120
    env = GymVecEnv("Hopper-v5", num_envs=num_envs, seed=seed)
    rng = np.random.default_rng(2)
    actions = rng.uniform(-1, 1, (steps, num_envs, 3))
    first, (next_obs, reward, term, trunc, obs) = _run(env, actions)
    done = term | trunc
    assert term.sum() >= 4  # several episodes ended in each row
    for t, i in zip(*np.nonzero(done)):
        assert not np.allclose(next_obs[t, i], obs[t, i])
    np.testing.assert_array_equal(next_obs[~done], obs[~done])

    # the returns: per row, the reward sums between ends, in the order the episodes ended
    expected, running = [], np.zeros(num_envs)
    for t in range(steps):
        running += reward[t]
        for i in np.flatnonzero(done[t]):
            expected.append(running[i])
            running[i] = 0.0
    got = env.completed_returns()
    assert len(got) == int(done.sum())
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-4)
    assert env.env_steps == steps * num_envs
    env.close()

    for i in range(num_envs):
        ref = gymnasium.make("Hopper-v5")
        o, _ = ref.reset(seed=seed + i)
        np.testing.assert_array_equal(first[i], o.astype(np.float32))
        for t in range(steps):
            o, r, te, tr, _ = ref.step(actions[t, i].astype(np.float32))
            np.testing.assert_array_equal(next_obs[t, i], o.astype(np.float32))
            assert np.float32(r) == reward[t, i] and (te, tr) == (term[t, i], trunc[t, i])
            if te or tr:
                o, _ = ref.reset()
            np.testing.assert_array_equal(obs[t, i], o.astype(np.float32))
        ref.close()


def test_actions_are_rescaled_to_the_bounds():
    """InvertedPendulum's bounds are [-3, 3]: action a in [-1, 1] must reach the env as 3 a."""
    env = GymVecEnv("InvertedPendulum-v5", num_envs=1, seed=0)
    ref = gymnasium.make("InvertedPendulum-v5")
    env.reset()
    ref.reset(seed=0)
    for a in (0.2, -0.7, 1.0, 1.5):  # 1.5 is clipped to 1
        next_obs, *_ = env.step(np.array([[a]]))
        o, *_ = ref.step(np.array([3.0 * min(a, 1.0)], np.float32))
        np.testing.assert_array_equal(next_obs[0], o.astype(np.float32))
    env.close()
    ref.close()


def test_bad_input():
    with pytest.raises(ValueError, match="num_envs"):
        GymVecEnv("HalfCheetah-v5", num_envs=0, seed=0)
    with pytest.raises(ValueError, match="seed"):
        GymVecEnv("HalfCheetah-v5", num_envs=1, seed=-1)
    env = GymVecEnv("HalfCheetah-v5", num_envs=2, seed=0)
    with pytest.raises(RuntimeError, match="reset"):
        env.step(np.zeros((2, 6)))
    env.reset()
    for bad in (np.zeros((2, 5)), np.zeros(6), np.zeros((3, 6))):
        with pytest.raises(ValueError, match="actions"):
            env.step(bad)
    nan = np.zeros((2, 6))
    nan[1, 3] = np.nan
    with pytest.raises(ValueError, match="actions"):
        env.step(nan)
    assert env.env_steps == 0  # rejected actions take no step
    env.close()
