"""Split CP: numpy parity, exact coverage over many splits, jit/vmap, errors; scores."""

from __future__ import annotations

import math

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxpapers import conformal as cp


def np_split_quantile(scores, alpha):
    s = sorted(float(v) for v in scores)
    n = len(s)
    k = math.ceil((n + 1) * (1 - alpha) * (1 - 1e-6))
    if k > n:
        return math.inf
    return s[k - 1]


@pytest.mark.parametrize("n", [1, 5, 9, 19, 20, 99, 160])
@pytest.mark.parametrize("alpha", [0.05, 0.1, 0.2, 0.5])
def test_parity_with_numpy(x64, n, alpha):
    rng = np.random.default_rng(n)
    s = rng.standard_t(3, size=n)
    got = float(cp.split_conformal_quantile(s, alpha))
    want = np_split_quantile(s, alpha)
    assert got == want or abs(got - want) <= 1e-12


def test_rank_is_not_pushed_up_by_float32_rounding():
    # (19 + 1)(1 - 0.05) = 19 exactly; float32 arithmetic must not give rank 20
    assert int(cp.conformal_rank(19, jnp.float32(0.05))) == 19
    assert int(cp.conformal_rank(9, jnp.float32(0.1))) == 9
    assert int(cp.conformal_rank(10, jnp.float32(0.1))) == 10  # ceil(9.9)


@pytest.mark.parametrize("n", [10, 20, 40, 80, 160])
@pytest.mark.parametrize("alpha", [0.05, 0.1])
def test_coverage_over_2000_splits(key, n, alpha):
    # One test point per split: covered ~ Bernoulli with mean ceil((n+1)(1-a))/(n+1) >= 1 - a.
    b = 2000
    scores = jax.random.exponential(key, (b, n + 1))
    q = jax.jit(jax.vmap(lambda s: cp.split_conformal_quantile(s[:n], alpha)))(scores)
    cov = np.asarray(scores[:, n] <= q, float)
    se = cov.std(ddof=1) / np.sqrt(b) if cov.std() > 0 else 0.0
    assert cov.mean() >= 1 - alpha - 3 * max(se, math.sqrt(alpha * (1 - alpha) / b))


def test_jit_vmap_and_no_recompile(key):
    s = jax.random.normal(key, (6, 25))
    chex.clear_trace_counter()
    f = jax.jit(chex.assert_max_traces(cp.split_conformal_quantile, n=1))
    v = jax.vmap(cp.split_conformal_quantile, in_axes=(0, None))(s, 0.1)
    for i in range(6):
        assert float(f(s[i], 0.1)) == float(cp.split_conformal_quantile(s[i], 0.1)) == float(v[i])
    f(s[0] + 1.0, 0.2)  # new values (alpha too), same shapes: no retrace


def test_bad_input():
    with pytest.raises(ValueError, match="alpha"):
        cp.split_conformal_quantile(jnp.ones(5), 0.0)
    with pytest.raises(ValueError, match="alpha"):
        cp.split_conformal_quantile(jnp.ones(5), 1.2)
    with pytest.raises(ValueError, match="scores"):
        cp.split_conformal_quantile(jnp.zeros((0,)), 0.1)
    with pytest.raises(ValueError, match="scores"):
        cp.split_conformal_quantile(jnp.array([1.0, jnp.nan]), 0.1)
    with pytest.raises(ValueError, match="scores"):
        cp.split_conformal_quantile(jnp.ones((2, 2)), 0.1)
    with pytest.raises(ValueError, match="same shape"):
        cp.abs_residual_score(jnp.ones(3), jnp.ones(4))


def test_scores_closed_forms():
    probs = jnp.array([[0.5, 0.3, 0.2], [0.1, 0.1, 0.8]])
    labels = jnp.array([1, 0])
    np.testing.assert_allclose(cp.lac_score(probs, labels), [0.7, 0.9], atol=1e-6)
    # APS deterministic: mass above plus own mass; ties broken by index (class 0 before 1)
    np.testing.assert_allclose(cp.aps_score(probs, labels), [0.8, 0.9], atol=1e-6)
    np.testing.assert_allclose(cp.aps_all_scores(probs, jnp.zeros(2)),
                               [[0.0, 0.5, 0.8], [0.8, 0.9, 0.0]], atol=1e-6)
    np.testing.assert_allclose(cp.cqr_score(jnp.array([0.0, 3.0]), jnp.array([1.0, 1.0]),
                                            jnp.array([2.0, 2.0])), [1.0, 1.0])
