"""GridRisk / CliffCorridor: layout, exact optima (enumeration and history-dependent DP), sampling."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxpapers.search import envs, planning


def test_grid_risk_exact_optima():
    env = envs.grid_risk(max_steps=8)
    ex = envs.exact_path_objectives(env, 0.25)
    assert len(ex["paths"]) == 70  # C(8, 4) monotone paths
    assert ex["neutral"]["path"] == (1, 1, 0, 1, 0, 1, 0, 0)  # R R D R D R D D: three R cells
    assert ex["neutral"]["mean"] == pytest.approx(28.0, abs=1e-9)
    assert ex["neutral"]["cvar"] == pytest.approx(-8.0, abs=1e-9)
    assert ex["cvar_opt"]["path"] == (0, 0, 1, 0, 1, 0, 1, 1)  # D D R D R D R R: three Y cells
    assert ex["cvar_opt"]["mean"] == pytest.approx(14.5, abs=1e-9)
    assert ex["cvar_opt"]["cvar"] == pytest.approx(5.125, abs=1e-9)
    # history-dependent policies cannot beat the best path here (independent rewards, DAG)
    assert envs.exact_cvar_dp(env, 0.25) == pytest.approx(5.125, abs=1e-9)
    # at alpha = 1 the DP is the risk-neutral optimum
    assert envs.exact_cvar_dp(env, 1.0) == pytest.approx(28.0, abs=1e-9)


def test_cliff_corridor_exact():
    env = envs.cliff_corridor()
    ex = envs.exact_path_objectives(env, 0.25)
    p_ok = 0.97 ** 6
    assert ex["neutral"]["path"] == (1,) * 6
    assert ex["neutral"]["mean"] == pytest.approx(6 * (0.97 - 0.03 * 25), abs=1e-9)
    assert ex["cvar_opt"]["path"] == (0,) * 6 and ex["cvar_opt"]["cvar"] == pytest.approx(-6.0)
    assert envs.exact_cvar_dp(env, 0.25) == pytest.approx(-6.0, abs=1e-9)
    assert 1 - p_ok < 0.25  # the catastrophe is rare, yet inside the CVaR_0.25 tail


def test_step_reward_frequencies(key):
    env = envs.grid_risk()
    st = envs.reset(env)
    st = envs.EnvState(s=jnp.int32(5), t=st.t, done=st.done, ret=st.ret)  # (1, 0); down -> Y
    n = 40_000
    _, r = jax.vmap(lambda k: envs.step(env, st, jnp.int32(0), k))(jax.random.split(key, n))
    p_hat = float(np.mean(np.asarray(r) == 9.0))
    assert set(np.unique(np.asarray(r)).tolist()) == {-1.0, 9.0}
    assert abs(p_hat - 0.75) < 4 * np.sqrt(0.75 * 0.25 / n)
    # O cells cost -10 more on every entry; moving off the grid stays put
    st = envs.EnvState(s=jnp.int32(10), t=st.t, done=st.done, ret=st.ret)  # (2, 0) Y; down -> O
    _, r = envs.step(env, st, jnp.int32(0), key)
    assert float(r) == -11.0
    st = envs.EnvState(s=jnp.int32(4), t=st.t, done=st.done, ret=st.ret)  # (0, 4) O; right -> stay
    st2, r = envs.step(env, st, jnp.int32(1), key)
    assert int(st2.s) == 4 and float(r) == -11.0


def test_true_model_quantiles():
    env = envs.grid_risk()
    q = np.asarray(envs.reward_quantiles(env, 10))
    # entering R at (0, 2) from (0, 1): -1, +40 w.p. 0.3 -> the top 3 of 10 midpoints
    np.testing.assert_array_equal(q[1, 1], [-1.0] * 7 + [39.0] * 3)
    model = planning.make_true_model(env, 8)
    assert float(jnp.abs(model.value_q[24]).max()) == 0.0  # goal
    with pytest.raises(ValueError, match="leaf_value"):
        planning.make_true_model(env, 8, leaf_value="oracle")


def test_greedy_value_quantiles_match_the_exact_optima():
    env = envs.grid_risk(max_steps=8)
    q = 64
    tau = np.asarray((2 * np.arange(q) + 1) / (2 * q))
    # from the start the best continuation is the best path: its return quantiles
    for obj, alpha, path in (("mean", 1.0, (1, 1, 0, 1, 0, 1, 0, 0)),
                             ("cvar", 0.25, (0, 0, 1, 0, 1, 0, 1, 1))):
        vq = np.asarray(envs.greedy_value_quantiles(env, q, objective=obj, alpha=alpha))
        z, pr = envs.path_distribution(env, path)
        want = z[np.searchsorted(np.cumsum(pr), tau - 1e-12)]
        np.testing.assert_array_equal(vq[int(env.start)], want)
        assert float(np.abs(vq[24]).max()) == 0.0  # goal
    # mean-greedy values are the risk-neutral optimal values: E V(start) = 28
    vq = np.asarray(envs.greedy_value_quantiles(env, 1000, objective="mean"))
    assert vq[int(env.start)].mean() == pytest.approx(28.0, abs=0.05)
    # one step before the goal from (4, 3) there is a single continuation (right, -1)
    np.testing.assert_array_equal(vq[23], -1.0)
    with pytest.raises(ValueError, match="objective"):
        envs.greedy_value_quantiles(env, 8, objective="median")
    with pytest.raises(ValueError, match="alpha"):
        envs.greedy_value_quantiles(env, 8, objective="cvar", alpha=0.0)
    model = planning.make_true_model(env, 8, leaf_value="greedy", objective="cvar", alpha=0.25)
    assert model.value_q.shape == (env.num_states, 8)
