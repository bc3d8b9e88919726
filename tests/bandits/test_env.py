import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxpapers.bandits import (LOGISTIC, PROBIT, env_contexts, env_mean_reward, kappa_of,
                               make_slate_env, make_slate_env_from_pool, oracle_slate,
                               slate_features)


@pytest.mark.parametrize("mode", ["fresh", "finite", "fixed"])
def test_item_norms_and_theta_norm(key, mode):
    env = make_slate_env(key, num_slots=4, num_items=6, dim=3, theta_norm=3.0, mode=mode)
    ctx = env_contexts(env, jax.random.key(5), 0)
    assert ctx.shape == (4, 6, 3)
    np.testing.assert_allclose(jnp.linalg.norm(ctx, axis=-1), 0.5, rtol=1e-5)
    np.testing.assert_allclose(jnp.linalg.norm(env.theta_star), 3.0, rtol=1e-5)
    c2 = env_contexts(env, jax.random.key(6), 1)
    if mode == "fixed":
        np.testing.assert_array_equal(ctx, c2)
    if mode == "fresh":
        assert not np.allclose(ctx, c2)


def test_oracle_matches_enumeration(key, x64):
    """The per-slot argmax equals the best of all K^N slates (float64 brute force)."""
    for link in ("logistic", "probit"):
        env = make_slate_env(key, num_slots=3, num_items=4, dim=2, theta_norm=4.0, link=link)
        for s in range(5):
            ctx = env_contexts(env, jax.random.key(s), s)
            best = max(float(env_mean_reward(env, slate_features(ctx, jnp.array(c))))
                       for c in itertools.product(range(4), repeat=3))
            ours = float(env_mean_reward(env, slate_features(ctx, oracle_slate(env, ctx))))
            assert ours == pytest.approx(best, abs=1e-12)


def test_kappa_knob(key):
    small = make_slate_env(key, num_slots=2, num_items=3, dim=2, theta_norm=1.0)
    big = make_slate_env(key, num_slots=2, num_items=3, dim=2, theta_norm=5.0)
    assert float(kappa_of(small)) == pytest.approx(1 / (0.25 * (1 - math.tanh(0.5) ** 2)), 1e-5)
    assert float(kappa_of(big)) > 30 * float(kappa_of(small)) / 5


def test_links():
    z = jnp.linspace(-3, 3, 7)
    np.testing.assert_allclose(LOGISTIC.dmean(z), jax.vmap(jax.grad(LOGISTIC.mean))(z), rtol=1e-5)
    np.testing.assert_allclose(PROBIT.dmean(z), jax.vmap(jax.grad(PROBIT.mean))(z), rtol=1e-5)


@pytest.mark.parametrize("kwargs, match", [
    (dict(num_items=0), "num_items"), (dict(num_slots=0), "num_slots"),
    (dict(theta_norm=float("nan")), "theta_norm"), (dict(mode="bogus"), "mode"),
    (dict(link="cauchit"), "link")])
def test_make_env_bad_input(key, kwargs, match):
    base = dict(num_slots=2, num_items=3, dim=2, theta_norm=1.0)
    with pytest.raises(ValueError, match=match):
        make_slate_env(key, **{**base, **kwargs})


def test_pool_bad_input():
    good = np.ones((2, 3, 4, 5), np.float32) / 5
    with pytest.raises(ValueError, match="pool"):
        make_slate_env_from_pool(good[0], np.zeros((3, 5)))
    with pytest.raises(ValueError, match="theta_star"):
        make_slate_env_from_pool(good, np.zeros((3, 4)))
    with pytest.raises(ValueError, match="K >= 1"):
        make_slate_env_from_pool(np.ones((2, 3, 0, 5)), np.zeros((3, 5)))
    bad = good.copy()
    bad[0, 1, 2, 3] = np.inf
    with pytest.raises(ValueError, match="finite"):
        make_slate_env_from_pool(bad, np.zeros((3, 5)))


@pytest.mark.parametrize("beta", [-1.0, float("nan"), float("inf")])
def test_rs_beta_bad_input(beta):
    from jaxpapers.bandits import make_rs_slateglincb
    with pytest.raises(ValueError, match="beta"):
        make_rs_slateglincb(num_slots=2, num_items=3, dim=2, num_rounds=10, param_norm_ub=2.0,
                            kappa=10.0, beta=beta)
