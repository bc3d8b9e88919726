"""Risk utilities, quantile sampling and the quantile-Huber loss against float64 references."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.stats import norm

from jaxpapers.search import risk


def _ref_distortion(z, g):
    z = np.sort(np.asarray(z, np.float64))
    u = np.arange(len(z) + 1) / len(z)
    return float(np.sum(np.diff(g(u)) * z))


def test_utilities_float64(key, x64):
    z = jax.random.normal(key, (203,), jnp.float64) * 3 + 1
    zn = np.asarray(z)
    for alpha in (0.05, 0.25, 0.5, 1.0):
        ref = _ref_distortion(zn, lambda u: np.minimum(u / alpha, 1.0))
        np.testing.assert_allclose(float(risk.cvar(z, alpha)), ref, rtol=1e-12)
        np.testing.assert_allclose(float(jax.jit(risk.cvar)(z, alpha)), ref, rtol=1e-12)
    # alpha M integer: exactly the mean of the lowest alpha M samples
    z8 = jnp.arange(8.0)
    assert float(risk.cvar(z8, 0.25)) == 0.5
    np.testing.assert_allclose(float(risk.cvar(z, 1.0)), zn.mean(), rtol=1e-12)
    np.testing.assert_allclose(float(risk.mean_utility(z)), zn.mean(), rtol=1e-12)
    eta = 0.7
    np.testing.assert_allclose(float(risk.wang(z, eta)),
                               _ref_distortion(zn, lambda u: norm.cdf(norm.ppf(u) + eta)),
                               rtol=1e-9)
    np.testing.assert_allclose(float(risk.power(z, eta)),
                               _ref_distortion(zn, lambda u: 1 - (1 - u) ** (1 + eta)),
                               rtol=1e-12)
    # risk aversion ordering: CVaR <= Wang(eta > 0) ... <= mean
    assert float(risk.cvar(z, 0.25)) < float(risk.wang(z, eta)) < float(risk.mean_utility(z))


def test_kth_smallest_and_sort_small_match_sort(key):
    k1, k2 = jax.random.split(key)
    # heavy ties (integers), negatives, zeros of both signs, infinities
    z = jnp.round(jax.random.normal(k1, (7, 5, 40)) * 3)
    z = z.at[0, 0, :4].set(jnp.array([-0.0, 0.0, jnp.inf, -jnp.inf]))
    zs = np.sort(np.asarray(z), -1)
    for k in (1, 2, 17, 39, 40):
        np.testing.assert_array_equal(np.asarray(risk.kth_smallest(z, k)), zs[..., k - 1])
    np.testing.assert_array_equal(np.asarray(jax.jit(risk.sort_small)(z)), zs)
    # vmap over a leading axis equals the batched call
    np.testing.assert_array_equal(np.asarray(jax.vmap(lambda r: risk.kth_smallest(r, 9))(z)),
                                  zs[..., 8])
    # continuous data, and the fallback above max_size
    w = jax.random.normal(k2, (3, 100))
    np.testing.assert_array_equal(np.asarray(risk.sort_small(w)), np.sort(np.asarray(w), -1))
    np.testing.assert_array_equal(np.asarray(risk.sort_small(w[:, :16], max_size=8)),
                                  np.sort(np.asarray(w[:, :16]), -1))
    # NaN of either sign (x86 makes -NaN from inf - inf) sorts last, as in jnp.sort
    zn = jnp.array([3.0, jnp.nan, 1.0, 2.0, -jnp.nan, -0.0, 0.0])
    assert np.signbit(np.asarray(-jnp.nan))  # the second NaN really is negative
    assert float(risk.kth_smallest(zn, 5)) == 3.0 and np.isnan(float(risk.kth_smallest(zn, 6)))
    assert float(risk.kth_smallest(zn, 1)) == 0.0 and np.signbit(risk.kth_smallest(zn, 1))
    got = np.asarray(risk.sort_small(zn))
    np.testing.assert_array_equal(got[:5], [-0.0, 0.0, 1.0, 2.0, 3.0])
    assert np.signbit(got[0]) and not np.signbit(got[1]) and np.isnan(got[5:]).all()
    with pytest.raises(ValueError, match="k must"):
        risk.kth_smallest(zn, 8)


def test_kth_smallest_float64(key, x64):
    z = jax.random.normal(key, (4, 301), jnp.float64) * 1e-3 + 1.0  # many shared high bits
    zs = np.sort(np.asarray(z), -1)
    for k in (1, 76, 301):
        np.testing.assert_array_equal(np.asarray(risk.kth_smallest(z, k)), zs[..., k - 1])


def test_cvar_ties_and_nan():
    z = jnp.array([1.0, 1.0, 1.0, 1.0, 5.0, 0.0, 1.0, 9.0])  # sorted: 0 1 1 1 1 1 5 9
    for alpha, ref in ((0.25, 0.5), (0.5, 0.75), (0.3, (0 + 1 + 0.4 * 1) / 2.4), (1.0, 19 / 8)):
        np.testing.assert_allclose(float(risk.cvar(z, alpha)), ref, rtol=1e-6)
        np.testing.assert_allclose(float(risk.cvar(z, jnp.asarray(alpha))), ref, rtol=1e-6)
    assert np.isnan(float(risk.cvar(z.at[7].set(jnp.nan), 0.25)))
    # infinities: no 0 * inf from empty pads or zero weights
    zi = jnp.array([-jnp.inf, 0.0, 1.0, 2.0])
    for a in (0.25, jnp.asarray(0.25)):
        assert float(risk.cvar(zi, a)) == -np.inf
    assert float(risk.cvar(jnp.array([0.0, 1.0, 2.0, jnp.inf]), 0.5)) == 0.5
    assert float(risk.cvar(jnp.array([0.0, 1.0, 2.0, jnp.inf]), jnp.asarray(0.5))) == 0.5
    assert float(risk.cvar(jnp.array([0.0, 1.0, 2.0, jnp.inf]), 1.0)) == np.inf
    # 16-bit samples beyond 256 / 2048 entries: counts stay exact
    zb = jnp.concatenate([jnp.zeros(3000), jnp.ones(1096)]).astype(jnp.bfloat16)
    np.testing.assert_allclose(float(risk.cvar(zb, 0.75)), (3072 - 3000) / 3072,  # 72 ones
                               rtol=1e-2)


def test_exact_cvar_discrete():
    # three independent Y cells (+10 w.p. .75) and 8 steps of -1: CVaR_0.25 = 82 / 16
    vals = -8 + 10 * np.arange(4)
    probs = np.array([1, 9, 27, 27]) / 64
    assert risk.exact_cvar_discrete(vals, probs, 0.25) == pytest.approx(5.125, abs=1e-12)


def test_sampling_matches_quantile_function(key):
    q = jnp.array([-10.0, -10.0, 0.0, 1.0, 2.0, 3.0, 4.0, 40.0])
    for stratified in (False, True):
        x = risk.sample_quantiles(key, q, 200_000, stratified=stratified)
        # mean of the piecewise-linear quantile function, by quadrature
        tau = (np.arange(8) + 0.5) / 8
        u = (np.arange(1_000_000) + 0.5) / 1_000_000
        ref = np.interp(u, tau, np.asarray(q)).mean()
        tol = 1e-3 if stratified else 5 * np.std(np.interp(u, tau, q)) / np.sqrt(200_000)
        assert abs(float(x.mean()) - ref) < tol
    point = risk.sample_quantiles(key, jnp.full((8,), 3.0), 64)
    assert np.all(np.asarray(point) == 3.0)
    u = np.asarray(risk.hashed_uniform(key, 100_000))
    assert u.min() > 0 and u.max() < 1
    # the largest 24-bit value rounds up to 1 in float32 unless clipped; coarse dtypes too
    top = jnp.uint32(0)  # find a seed whose first draw has the top 24 bits all set
    hits = np.nonzero(np.asarray(risk.mix32(jnp.arange(2 ** 22, dtype=jnp.uint32))) >> 8
                      == 2 ** 24 - 1)[0]
    if hits.size:
        top = jnp.uint32(int(hits[0]))
        assert float(risk.uniform_from_seed(top, 1)[0]) < 1.0
    for dt in (jnp.float16, jnp.bfloat16):
        v = np.asarray(risk.uniform_from_seed(jnp.arange(64, dtype=jnp.uint32), 512, dt), np.float32)
        assert v.min() > 0 and v.max() < 1
    # uniformity: Kolmogorov-Smirnov distance below the 99.9% critical value 1.95 / sqrt(n)
    ks = np.max(np.abs(np.sort(u) - (np.arange(1, u.size + 1) / u.size)))
    assert ks < 1.95 / np.sqrt(u.size)


def test_quantile_function_batched_matches_interp(key):
    k1, k2 = jax.random.split(key)
    q = jnp.sort(jax.random.normal(k1, (3, 2, 16)), -1)  # [B, S, Q]
    tau = jax.random.uniform(k2, (3, 2, 50))  # [B, S, M], including the flat outer tails
    mid = (np.arange(16) + 0.5) / 16
    ref = np.stack([[np.interp(np.asarray(tau[i, j]), mid, np.asarray(q[i, j])) for j in range(2)]
                    for i in range(3)])
    np.testing.assert_allclose(np.asarray(jax.jit(risk.quantile_function)(q, tau)), ref,
                               rtol=1e-5, atol=1e-6)
    # one row of quantiles broadcast against a batch of tau
    np.testing.assert_allclose(np.asarray(risk.quantile_function(q[0, 0], tau)),
                               np.interp(np.asarray(tau), mid, np.asarray(q[0, 0])), rtol=1e-5,
                               atol=1e-6)
    # independent seeds give uncorrelated uniform streams
    u = np.asarray(risk.uniform_from_seed(jnp.arange(4, dtype=jnp.uint32), 20_000))
    c = np.corrcoef(u)
    assert np.max(np.abs(c - np.eye(4))) < 4 / np.sqrt(20_000)


def test_quantile_huber_loss_reference_and_minimiser(key, x64):
    pred = jax.random.normal(key, (5,), jnp.float64)
    target = jax.random.normal(jax.random.fold_in(key, 1), (7,), jnp.float64) * 2
    tau = (2 * np.arange(5) + 1) / 10
    d = np.asarray(target)[None, :] - np.asarray(pred)[:, None]
    hub = np.where(np.abs(d) <= 1, 0.5 * d ** 2, np.abs(d) - 0.5)
    ref = np.sum(np.mean(np.abs(tau[:, None] - (d < 0)) * hub, axis=1))
    np.testing.assert_allclose(float(risk.quantile_huber_loss(pred, target)), ref, rtol=1e-12)
    # gradient descent on the loss recovers the empirical quantiles of a sample
    samples = jax.random.normal(jax.random.fold_in(key, 2), (4000,), jnp.float64)
    p = jnp.zeros(4, jnp.float64)
    g = jax.jit(jax.grad(lambda p: risk.quantile_huber_loss(p, samples, kappa=0.01)))
    for _ in range(3000):
        p = p - 0.05 * g(p)
    want = np.quantile(np.asarray(samples), (2 * np.arange(4) + 1) / 8)
    np.testing.assert_allclose(np.asarray(p), want, atol=0.03)


def test_bad_levels():
    z = jnp.arange(4.0)
    for alpha in (0.0, 1.5, -0.1):
        with pytest.raises(ValueError, match="alpha"):
            risk.cvar(z, alpha)
        with pytest.raises(ValueError, match="alpha"):
            risk.make_utility("cvar", alpha)
    with pytest.raises(ValueError, match="utility"):
        risk.make_utility("entropic", 1.0)
    with pytest.raises(ValueError, match="eta"):
        risk.power(z, -2.0)
