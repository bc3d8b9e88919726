"""Regret decomposition of RS-SlateGLinCB (warm-up vs UCB rounds) and the runner's trace_fn."""

import math

import jax
import numpy as np
import pytest

from experiments.slate_glm import decompose
from jaxpapers.bandits import make_rs_slateglincb, make_slate_env, run_bandit_seeds


def _warm_and_det(state):
    return state.warm, state.num_det


@pytest.mark.slow  # ~20-40 s; tests/golden and test_refit_path cover the runner
def test_trace_fn_records_per_round_state():
    envs = jax.vmap(lambda k: make_slate_env(k, num_slots=2, num_items=3, dim=2, theta_norm=2.0))(
        jax.random.split(jax.random.key(0), 3))
    algo = make_rs_slateglincb(num_slots=2, num_items=3, dim=2, num_rounds=60, kappa=50.0,
                               param_norm_ub=3.0)
    keys = jax.random.split(jax.random.key(1), 3)
    plain = run_bandit_seeds(algo, envs, keys, num_rounds=60)
    res = run_bandit_seeds(algo, envs, keys, num_rounds=60, trace_fn=_warm_and_det)
    assert plain.trace is None
    np.testing.assert_array_equal(np.asarray(res.regret), np.asarray(plain.regret))
    warm, det = (np.asarray(x) for x in res.trace)
    assert warm.shape == det.shape == (3, 60) and warm.dtype == bool
    # tau = 1 / (0.01 kappa S^2 d) = 0.11 < ||x||^2 / lambda = 1: every seed starts warming up
    assert warm[:, 0].all() and not warm[:, -1].any()
    # switches = warm-up refits + determinant refits: warm-up rounds each trigger one refit
    np.testing.assert_array_equal(np.asarray(res.switches), np.cumsum(warm, 1) + det)


@pytest.mark.slow  # ~1 min: compiles three algorithms on both full-config settings
def test_decompose_rows_add_up():
    rows = decompose.decompose(80, 2)
    assert [r["algo"] for r in rows[:3]] == ["slate_glm_ofu", *decompose.RS_ALGOS]
    for r in rows:
        assert math.isclose(r["R_warm"] + r["R_ucb"], r["R_T"], rel_tol=1e-12, abs_tol=1e-12)
        assert 0 <= r["warm_rounds"] <= 80
    ofu = rows[0]["R_T"]
    assert math.isclose(rows[1]["ratio_to_ofu"] * ofu, rows[1]["R_T"], rel_tol=1e-12)
    with pytest.raises(ValueError, match="num_rounds"):
        decompose.decompose(10, 2)
