"""RSA-CP: parity with a loop-style float64 numpy reference, invariances, jit/vmap, errors."""

from __future__ import annotations

import math

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxpapers import conformal as cp

# Most tests call the jitted calibrator (eager op-by-op dispatch is slow on 2 cores);
# test_jit_equals_eager_and_vmap_equals_loop checks that eager and jit agree.
calibrate = jax.jit(cp.rsacp_calibrate, static_argnames=("extrapolate", "guard"))
include = jax.jit(cp.rsacp_include)
half_width = jax.jit(cp.rsacp_half_width)


# ---------------------------------------------------------------- numpy reference (loop style)
def np_ot_nodes(cal, ref):
    """Transport 1/m mass per sorted real score onto 1/N mass per sorted reference score, greedily
    (the monotone coupling), and take each real atom's barycentre."""
    src, tgt = np.sort(cal), np.sort(ref)
    m, n = len(src), len(tgt)
    # work in units of 1/(m n): each source atom holds n units, each target atom m units
    num = [0.0] * m
    i = j = 0
    rem_s, rem_t = n, m
    while i < m and j < n:
        d = min(rem_s, rem_t)
        num[i] += d * tgt[j]
        rem_s -= d
        rem_t -= d
        if rem_s == 0:
            i += 1
            rem_s = n
        if rem_t == 0:
            j += 1
            rem_t = m
    z = [v / n for v in num]
    for t in range(1, m):
        z[t] = max(z[t], z[t - 1])
    out = list(z)
    t = 0
    while t < m:  # average over tied real scores
        u = t
        while u + 1 < m and src[u + 1] == src[t]:
            u += 1
        avg = sum(z[t:u + 1]) / (u - t + 1)
        for v in range(t, u + 1):
            out[v] = avg
        t = u + 1
    for t in range(1, m):
        out[t] = max(out[t], out[t - 1])
    return src, np.array(out)


def np_bb_quantile(p, n, a, b):
    logs = []
    for x in range(n + 1):
        logs.append(math.lgamma(n + 1) - math.lgamma(x + 1) - math.lgamma(n - x + 1)
                    + math.lgamma(x + a) + math.lgamma(n - x + b) - math.lgamma(n + a + b)
                    - math.lgamma(a) - math.lgamma(b) + math.lgamma(a + b))
    mx = max(logs)
    pmf = [math.exp(v - mx) for v in logs]
    tot = sum(pmf)
    c = 0.0
    for x in range(n + 1):
        c += pmf[x] / tot
        if c >= p:
            return x
    return n


def np_ceil_rank(n, alpha):
    return math.ceil((n + 1) * (1 - alpha) * (1 - 1e-6))


def np_rsacp(cal, ref, test, alpha, beta):
    src, z = np_ot_nodes(cal, ref)
    m, n = len(src), len(ref)
    a = sorted(list(z) + list(ref))

    def a_at(i):
        if i < 1:
            return -math.inf
        if i > m + n:
            return math.inf
        return a[i - 1]

    j = min(max(np_ceil_rank(m + n, alpha), 1), m + n)
    q = {}
    for k in range(1, m + 2):
        bm = np_bb_quantile(beta / 2, n, k, m + 2 - k)
        bp = np_bb_quantile(1 - beta / 2, n, k, m + 2 - k)
        q[k] = max(min(a_at(k + bp), a_at(j)), a_at(k + bm))
    mapped, inc = [], []
    for s in test:
        if s <= src[0]:
            zs = z[0]
        elif s >= src[-1]:
            zs = z[-1]
        else:
            t = 0
            while not (src[t] <= s < src[t + 1]):
                t += 1
            zs = z[t] + (s - src[t]) / (src[t + 1] - src[t]) * (z[t + 1] - z[t])
        k = 1 + sum(1 for v in z if v <= zs)
        mapped.append(zs)
        inc.append(zs <= q[k])
    return z, np.array([q[k] for k in range(1, m + 2)]), np.array(mapped), np.array(inc)


# ---------------------------------------------------------------- tests
@pytest.mark.parametrize("m,n,alpha,beta", [(7, 50, 0.1, 0.4), (20, 301, 0.05, 0.1),
                                              (12, 240, 0.2, 0.4)])
def test_parity_with_numpy_reference(x64, m, n, alpha, beta):
    rng = np.random.default_rng(m * 1000 + n)
    cal = rng.lognormal(size=m)
    ref = rng.gamma(2.0, 1.3, size=n)
    test = np.concatenate([rng.lognormal(size=60), [cal.min() / 2, cal.max() * 3], cal[:3]])
    z, q, mapped, inc = np_rsacp(cal, ref, test, alpha, beta)
    st = calibrate(cal, ref, alpha=alpha, beta=beta)
    np.testing.assert_allclose(np.asarray(st.z_sorted), z, rtol=0, atol=1e-12)
    np.testing.assert_allclose(np.asarray(st.q_by_k), q, rtol=0, atol=1e-12)
    np.testing.assert_allclose(np.asarray(jax.jit(cp.rsacp_map)(st, test)), mapped, rtol=0,
                               atol=1e-12)
    np.testing.assert_array_equal(np.asarray(jax.jit(cp.rsacp_include)(st, test)), inc)


def test_ot_nodes_with_ties_match_reference(x64):
    rng = np.random.default_rng(3)
    cal = np.round(rng.lognormal(size=15), 1)  # forces tied real scores
    cal[4] = cal[5]
    ref = rng.lognormal(size=97)
    _, z = np_ot_nodes(cal, ref)
    got = cp.barycentric_ot_nodes(jnp.sort(cal), jnp.sort(ref))
    np.testing.assert_allclose(np.asarray(got), z, rtol=0, atol=1e-12)


def test_ot_nodes_are_block_means_when_blocks_align(x64):
    # N a multiple of M: node i is the plain mean of reference block i.
    ref = np.arange(1.0, 13.0)
    z = cp.barycentric_ot_nodes(jnp.array([0.1, 0.2, 0.3]), jnp.asarray(ref))
    np.testing.assert_allclose(np.asarray(z), [2.5, 6.5, 10.5], atol=1e-14)


def test_betabinomial_quantile_reduces_to_discrete_uniform(x64):
    # BB(n, 1, 1) is uniform on {0..n}: the p-quantile is ceil(p (n + 1)) - 1.
    n = 99
    for p in (0.0537, 0.2113, 0.5071, 0.8159):  # off the CDF's exact steps
        got = int(cp.betabinomial_quantiles(p, n, jnp.array([1.0]), jnp.array([1.0]))[0])
        assert got == math.ceil(p * (n + 1)) - 1


def test_half_width_closed_form_matches_grid_oracle(x64, key):
    k1, k2 = jax.random.split(key)
    cal = jnp.exp(jax.random.normal(k1, (24, 15)))
    ref = jnp.exp(jax.random.normal(k2, (1000,)))
    grid = jnp.linspace(0.0, 60.0, 60_001)
    step = float(grid[1] - grid[0])

    def one(c):
        st = cp.rsacp_calibrate(c, ref, alpha=0.1, beta=0.4)
        return cp.rsacp_half_width(st), cp.rsacp_half_width_grid(st, grid)

    w, wg = jax.jit(jax.vmap(one))(cal)
    w, wg = np.asarray(w), np.asarray(wg)
    assert np.all(np.isfinite(w)) and np.all(w < 60.0)
    # the grid maximum is the largest grid point not above the supremum
    assert np.all(wg <= w + 1e-12)
    assert np.all(w - wg <= step + 1e-9)


def test_half_width_infinite_when_top_rank_included(x64):
    # alpha = 0.05 with m = 10: split CP is infinite; a guarded RSA-CP must be too.
    rng = np.random.default_rng(0)
    st = calibrate(rng.lognormal(size=10), rng.lognormal(size=500), alpha=0.05, guard=True)
    assert np.isposinf(float(half_width(st)))


def test_rescaling_reference_leaves_decisions_unchanged(x64):
    rng = np.random.default_rng(1)
    cal, ref = rng.lognormal(size=20), rng.lognormal(size=800)
    test = rng.lognormal(size=500)
    base = include(calibrate(cal, ref, alpha=0.05, beta=0.4), test)
    for scale in (1e-3, 0.37, 25.0):  # powers of two would be trivially exact; these are not
        st = calibrate(cal, scale * ref, alpha=0.05, beta=0.4)
        np.testing.assert_array_equal(np.asarray(include(st, test)), np.asarray(base))
    w0 = half_width(calibrate(cal, ref, alpha=0.05))
    w1 = half_width(calibrate(cal, 0.37 * ref, alpha=0.05))
    np.testing.assert_allclose(float(w0), float(w1), rtol=1e-10)


def test_jit_equals_eager_and_vmap_equals_loop(key):
    k1, k2, k3 = jax.random.split(key, 3)
    cal = jnp.exp(jax.random.normal(k1, (5, 12)))
    ref = jnp.exp(jax.random.normal(k2, (5, 300)))
    test = jnp.exp(jax.random.normal(k3, (5, 40)))

    def f(c, r, t):
        st = cp.rsacp_calibrate(c, r, alpha=0.1, beta=0.4)
        return cp.rsacp_include(st, t), cp.rsacp_half_width(st), st.q_by_k

    batched = jax.jit(jax.vmap(f))(cal, ref, test)
    for b in range(5):
        if b < 2:  # eager dispatch is slow; two rows suffice for eager == jit
            eager = f(cal[b], ref[b], test[b])
        jitted = jax.jit(f)(cal[b], ref[b], test[b])
        if b < 2:
            chex.assert_trees_all_equal(eager, jitted)
        chex.assert_trees_all_equal(jitted, jax.tree.map(lambda v: v[b], batched))


def test_no_recompilation_on_second_call(key):
    k1, k2 = jax.random.split(key)

    chex.clear_trace_counter()

    @jax.jit
    @chex.assert_max_traces(n=1)
    def f(c, r, alpha):
        return cp.rsacp_half_width(cp.rsacp_calibrate(c, r, alpha=alpha, beta=0.4))

    c, r = jnp.exp(jax.random.normal(k1, (10,))), jnp.exp(jax.random.normal(k2, (200,)))
    f(c, r, 0.1)
    f(c * 2.0, r + 1.0, 0.05)  # new values (alpha too), same shapes: no retrace


def test_worst_case_bound_holds_for_adversarial_real_law(key):
    # Real scores with mass piled at the top of each gap stress the interpolation; the bound
    # K/(m+1) must hold for any real law. 4000 splits: SE <= 0.5/sqrt(4000) = 0.008.
    m, n, b = 10, 500, 4000
    k1, k2, k3 = jax.random.split(key, 3)
    u = jax.random.uniform(k1, (b, m + 1))
    scores = 1.0 / (1.0 - u) ** 3  # very heavy right tail: gaps are strongly convex
    ref = jnp.exp(jax.random.normal(k2, (n,)))

    def one(s):
        st = cp.rsacp_calibrate(s[:m], ref, alpha=0.1, beta=0.4)
        return cp.rsacp_include(st, s[m]), cp.rsacp_coverage_lower_bound(st)

    cov, lb = jax.jit(jax.vmap(one))(scores)
    cov, lb = float(jnp.mean(cov)), float(jnp.mean(lb))
    assert cov >= lb - 3 * 0.5 / np.sqrt(b)


@pytest.mark.parametrize("m,alpha", [(10, 0.1), (20, 0.05)])
def test_guarded_variant_restores_coverage(key, m, alpha):
    b = 4000
    k1, k2 = jax.random.split(key)
    scores = jnp.exp(jax.random.normal(k1, (b, m + 1)))
    ref = 3.0 + jax.random.uniform(k2, (b, 200))  # badly misspecified reference

    def one(s, r):
        st = cp.rsacp_calibrate(s[:m], r, alpha=alpha, beta=0.4, guard=True)
        return cp.rsacp_include(st, s[m])

    cov = float(jnp.mean(jax.jit(jax.vmap(one))(scores, ref)))
    se = math.sqrt(alpha * (1 - alpha) / b)
    assert cov >= 1 - alpha - 3 * se


def test_released_procedure_undercovers_at_small_n(key):
    """Documents the finding: coverage ~ ((1-alpha) m + 1/2)/(m + 1) < 1 - alpha.

    m = 10, alpha = 0.1, clean reference: predicted 0.864, split CP's exact 10/11 = 0.909.
    With 4000 splits the SE is about 0.0055, so 0.864 + 4 SE < 0.9 separates the two.
    """
    m, b = 10, 4000
    k1, k2 = jax.random.split(key)
    scores = jnp.exp(jax.random.normal(k1, (b, m + 1)))
    ref = jnp.exp(jax.random.normal(k2, (b, 1000)))

    def one(s, r):
        return cp.rsacp_include(cp.rsacp_calibrate(s[:m], r, alpha=0.1, beta=0.4), s[m])

    cov = float(jnp.mean(jax.jit(jax.vmap(one))(scores, ref)))
    se = math.sqrt(0.1 * 0.9 / b)
    assert abs(cov - 9.5 / 11) < 4 * se + 0.01  # the midpoint-plotting-position prediction
    assert cov < 0.9 - 3 * se


def test_prediction_set_shape_and_monotone_in_alpha(x64):
    rng = np.random.default_rng(4)
    cal, ref = rng.uniform(size=30), rng.uniform(size=500)
    scores = rng.uniform(size=(7, 5))
    pset = jax.jit(cp.rsacp_prediction_set)
    s_lo = pset(calibrate(cal, ref, alpha=0.05), scores)
    s_hi = pset(calibrate(cal, ref, alpha=0.3), scores)
    assert s_lo.shape == (7, 5) and s_lo.dtype == jnp.bool_
    assert bool(jnp.all(s_lo >= s_hi))  # smaller alpha -> superset
    assert int(s_lo.sum()) > int(s_hi.sum())


@pytest.mark.parametrize("kwargs,match", [
    (dict(alpha=0.0), "alpha"), (dict(alpha=1.0), "alpha"), (dict(alpha=1.5), "alpha"),
    (dict(alpha=0.1, beta=0.0), "beta"),
])
def test_bad_levels(kwargs, match):
    with pytest.raises(ValueError, match=match):
        cp.rsacp_calibrate(jnp.ones(5), jnp.arange(10.0), **kwargs)


def test_bad_inputs():
    with pytest.raises(ValueError, match="cal_scores"):
        cp.rsacp_calibrate(jnp.zeros((0,)), jnp.arange(10.0), alpha=0.1)
    with pytest.raises(ValueError, match="cal_scores"):
        cp.rsacp_calibrate(jnp.ones((3, 4)), jnp.arange(10.0), alpha=0.1)
    with pytest.raises(ValueError, match="cal_scores"):
        cp.rsacp_calibrate(jnp.array([1.0, jnp.nan]), jnp.arange(10.0), alpha=0.1)
    with pytest.raises(ValueError, match="ref_scores"):
        cp.rsacp_calibrate(jnp.ones(5), jnp.full((10,), 2.0), alpha=0.1)  # degenerate
    with pytest.raises(ValueError, match="ref_scores"):
        cp.rsacp_calibrate(jnp.ones(5), jnp.array([1.0, 2.0, jnp.nan]), alpha=0.1)
    st = calibrate(jnp.arange(1.0, 6.0), jnp.arange(10.0), alpha=0.1)
    with pytest.raises(ValueError, match="test_scores"):
        cp.rsacp_include(st, jnp.array([jnp.nan]))


def test_validation_does_not_break_jit():
    f = jax.jit(lambda c, r, a: cp.rsacp_half_width(cp.rsacp_calibrate(c, r, alpha=a)))
    assert np.isfinite(float(f(jnp.arange(1.0, 31.0), jnp.arange(100.0), 0.2)))
