"""Samplers: float64 numpy references of each update rule, coefficients, jit/vmap, bad input."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxpapers import diffusion as dfn

D = 6
# 4 steps by default (plus the one-step test below); 1, 2 and 8 as well under -m slow
STEPS = (4, *(pytest.param(n, marks=pytest.mark.slow) for n in (1, 2, 8)))

# one compilation per case instead of many eager op compilations (keeps the file fast)
_sample = jax.jit(dfn.sample, static_argnums=(0,), static_argnames=("sampler", "steps"))


# ----------------------------------------------------------------------------- random denoisers
def _params(seed):
    rng = np.random.default_rng(seed)
    return {"w": rng.normal(size=(D, D)) / np.sqrt(D), "b": rng.normal(size=D),
            "c": 0.5 + rng.uniform(size=D)}


def _den_jax(p, x, t):
    return p["c"] * jnp.tanh(x @ p["w"] + p["b"] * jnp.log1p(t))


def _den_np(p, x, t):
    return p["c"] * np.tanh(x @ p["w"] + p["b"] * np.log1p(t))


def _noises(key, steps, shape):
    keys = jax.random.split(key, steps)
    return [np.asarray(jax.random.normal(k, shape, jnp.float64)) for k in keys]


# ----------------------------------------------------------------------------- numpy references
def _np_karras(n, smin, smax, rho):
    i = np.arange(n) / max(n - 1, 1)
    s = (smax ** (1 / rho) + i * (smin ** (1 / rho) - smax ** (1 / rho))) ** rho
    return np.append(s, 0.0)


def _np_alphas():
    betas = np.linspace(0.00085 ** 0.5, 0.012 ** 0.5, 1000) ** 2
    return np.cumprod(1 - betas)


def _np_vp_ts(n, spacing):
    if spacing == "leading":
        return list((np.arange(n) * (1000 // n))[::-1])
    return list((np.round(np.arange(1000, 0, -1000 / n)) - 1).astype(int))


def _np_x0_eps(x, out, a, pred):
    if pred == "epsilon":
        return (x - np.sqrt(1 - a) * out) / np.sqrt(a), out
    if pred == "sample":
        return out, (x - np.sqrt(a) * out) / np.sqrt(1 - a)
    return np.sqrt(a) * x - np.sqrt(1 - a) * out, np.sqrt(a) * out + np.sqrt(1 - a) * x


def np_sample_vp(p, x, sampler, n, m, s, zs, pred, spacing, gamma=0.3, final=1.0):
    ac = _np_alphas()
    ts = _np_vp_ts(n, spacing)
    for i, t in enumerate(ts):
        out = m[i] * _den_np(p, x, float(t))
        x = s[i] * x
        x0, eps = _np_x0_eps(x, out, ac[t], pred)
        last = i == n - 1
        if sampler == "ddim":
            a_n = ac[ts[i + 1]] if not last else final
            x = np.sqrt(a_n) * x0 + np.sqrt(1 - a_n) * eps
        elif sampler == "lcm":
            st = 10.0 * t
            c_skip, c_out = 0.25 / (st ** 2 + 0.25), st / np.sqrt(st ** 2 + 0.25)
            den = c_out * x0 + c_skip * x
            if last:
                x = den
            else:
                a_n = ac[ts[i + 1]]
                x = np.sqrt(a_n) * den + np.sqrt(1 - a_n) * zs[i]
        elif sampler == "tcd":
            t_prev = ts[i + 1] if not last else 0
            t_s = int(np.floor((1 - gamma) * t_prev))
            a_s = ac[t_s] if t_s >= 0 else final
            a_p = ac[t_prev]
            xs = np.sqrt(a_s) * x0 + np.sqrt(1 - a_s) * eps
            if gamma > 0 and not last:
                x = np.sqrt(a_p / a_s) * xs + np.sqrt(1 - a_p / a_s) * zs[i]
            else:
                x = xs
    return x


def np_sample_sigma(p, x, sampler, sig, m, s, zs, pred):
    x = x * sig[0]
    for i in range(len(sig) - 1):
        si, sn = sig[i], sig[i + 1]
        out = m[i] * _den_np(p, x, si)
        x = s[i] * x
        x0 = x - si * out if pred == "epsilon" else out
        if sampler == "euler":
            x = x + (sn - si) * (x - x0) / si
        elif sampler == "euler_ancestral":
            up = np.sqrt(sn ** 2 * (si ** 2 - sn ** 2) / si ** 2)
            down = np.sqrt(sn ** 2 - up ** 2)
            x = x + (down - si) * (x - x0) / si + up * zs[i]
        elif sampler == "lcm":
            x = x0 + sn * zs[i]
    return x


def np_sample_flow(p, x, n, shift, m, s):
    t = np.linspace(1, 0, n + 1)[:-1]
    t = np.append(shift * t / (1 + (shift - 1) * t), 0.0)
    for i in range(n):
        out = m[i] * _den_np(p, x, t[i])
        x = s[i] * x + (t[i + 1] - t[i]) * out
    return x


def _coeffs(seed, n):
    rng = np.random.default_rng(seed + 100)
    return rng.uniform(0.8, 1.2, n), rng.uniform(0.8, 1.2, n)


# ----------------------------------------------------------------------------- reference tests
@pytest.mark.parametrize("steps", STEPS)
@pytest.mark.parametrize("sampler", ["ddim", "lcm", "tcd"])
@pytest.mark.parametrize("pred,spacing", [("epsilon", "trailing"), ("sample", "leading"),
                                          ("v_prediction", "trailing")])
def test_vp_samplers_match_numpy_float64(x64, sampler, steps, pred, spacing):
    seed = steps * 7 + len(sampler)
    p = _params(seed)
    key = jax.random.key(seed)
    x = np.random.default_rng(seed).normal(size=(3, D))
    m, s = _coeffs(seed, steps)
    sch = dfn.VPSchedule(dfn.ddpm_alphas_cumprod(1000), jnp.float64(1.0), prediction=pred,
                         spacing=spacing)
    got = _sample(_den_jax, jax.tree.map(jnp.asarray, p), key, jnp.asarray(x), schedule=sch,
                  sampler=sampler, steps=steps, coeffs=dfn.QSchedCoeffs(jnp.asarray(m),
                                                                           jnp.asarray(s)))
    ref = np_sample_vp(p, x, sampler, steps, m, s, _noises(key, steps, x.shape), pred, spacing)
    assert got.dtype == jnp.float64
    np.testing.assert_allclose(np.asarray(got), ref, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("steps", STEPS)
@pytest.mark.parametrize("sampler", ["euler", "euler_ancestral", "lcm"])
@pytest.mark.parametrize("pred", ["epsilon", "sample"])
def test_sigma_samplers_match_numpy_float64(x64, sampler, steps, pred):
    seed = steps * 11 + len(sampler)
    p = _params(seed)
    key = jax.random.key(seed)
    x = np.random.default_rng(seed).normal(size=(3, D))
    m, s = _coeffs(seed, steps)
    sch = dfn.EDMSchedule(jnp.float64(0.002), jnp.float64(20.0), jnp.float64(7.0),
                          prediction=pred)
    got = _sample(_den_jax, jax.tree.map(jnp.asarray, p), key, jnp.asarray(x), schedule=sch,
                  sampler=sampler, steps=steps, coeffs={"m": jnp.asarray(m),
                                                           "s": jnp.asarray(s)})
    sig = _np_karras(steps, 0.002, 20.0, 7.0)
    ref = np_sample_sigma(p, x, sampler, sig, m, s, _noises(key, steps, x.shape), pred)
    np.testing.assert_allclose(np.asarray(got), ref, atol=1e-6, rtol=1e-6)
    # an explicit sigma grid gives the same result
    got2 = _sample(_den_jax, jax.tree.map(jnp.asarray, p), key, jnp.asarray(x),
                      schedule=dfn.SigmaSchedule(jnp.asarray(sig), prediction=pred),
                      sampler=sampler, steps=steps, coeffs={"m": jnp.asarray(m),
                                                            "s": jnp.asarray(s)})
    np.testing.assert_allclose(np.asarray(got2), ref, atol=1e-6, rtol=1e-6)


def test_one_step_samplers_match_numpy_float64(x64):
    p = _params(9)
    key = jax.random.key(9)
    x = np.random.default_rng(9).normal(size=(2, D))
    m, s = _coeffs(9, 1)
    c = dfn.QSchedCoeffs(jnp.asarray(m), jnp.asarray(s))
    pj = jax.tree.map(jnp.asarray, p)
    zs = _noises(key, 1, x.shape)
    vp = dfn.VPSchedule(dfn.ddpm_alphas_cumprod(1000), jnp.float64(1.0))
    for sampler in ("ddim", "lcm", "tcd"):
        got = _sample(_den_jax, pj, key, jnp.asarray(x), schedule=vp, sampler=sampler, steps=1,
                      coeffs=c)
        ref = np_sample_vp(p, x, sampler, 1, m, s, zs, "epsilon", "trailing")
        np.testing.assert_allclose(np.asarray(got), ref, atol=1e-6, rtol=1e-6)
    edm = dfn.EDMSchedule(jnp.float64(0.002), jnp.float64(20.0), jnp.float64(7.0))
    for sampler in ("euler", "euler_ancestral", "lcm"):
        got = _sample(_den_jax, pj, key, jnp.asarray(x), schedule=edm, sampler=sampler, steps=1,
                      coeffs=c)
        ref = np_sample_sigma(p, x, sampler, _np_karras(1, 0.002, 20.0, 7.0), m, s, zs,
                              "epsilon")
        np.testing.assert_allclose(np.asarray(got), ref, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("steps", STEPS)
@pytest.mark.parametrize("shift", [1.0, 3.0])
def test_flow_euler_matches_numpy_float64(x64, steps, shift):
    p = _params(steps)
    x = np.random.default_rng(steps).normal(size=(2, D))
    m, s = _coeffs(steps, steps)
    got = _sample(_den_jax, jax.tree.map(jnp.asarray, p), jax.random.key(0), jnp.asarray(x),
                     schedule=dfn.FlowSchedule(jnp.float64(shift)), sampler="flow_euler",
                     steps=steps, coeffs=dfn.QSchedCoeffs(jnp.asarray(m), jnp.asarray(s)))
    np.testing.assert_allclose(np.asarray(got), np_sample_flow(p, x, steps, shift, m, s),
                               atol=1e-6, rtol=1e-6)


def test_euler_converges_to_gaussian_posterior_mean(x64):
    """Closed form: data N(0, v); the exact eps-denoiser makes the ODE map x_T to the data law.

    With ``eps(x, sigma) = x sigma / (v + sigma^2)`` the probability-flow ODE solution is
    ``x(sigma) = x_T sigma_max^-1 sqrt(v + sigma^2)`` (exact scaling); Euler's error is O(1/N).
    """
    v = 0.3
    den = lambda p, x, sg: x * sg / (v + sg ** 2)
    sch = dfn.EDMSchedule(jnp.float64(1e-3), jnp.float64(10.0), jnp.float64(7.0))
    xT = jnp.ones((1,))
    exact = np.sqrt(v + 1e-6) * 10.0 / np.sqrt(v + 100.0)  # x_T * sigma_max mapped to sigma ~ 0
    errs = []
    for n in (8, 16, 32, 64):
        out = _sample(den, None, jax.random.key(0), xT, schedule=sch, sampler="euler", steps=n)
        errs.append(abs(float(out[0]) - exact))
    # first-order method: halving the step roughly halves the error (ratio -> 2)
    ratios = np.array(errs[:-1]) / np.array(errs[1:])
    assert np.all(ratios > 1.6) and np.all(ratios < 2.6), (errs, ratios)


# ----------------------------------------------------------------------------- coefficients
@pytest.mark.parametrize("sampler,schedule", [
    ("ddim", "vp"), ("lcm", "vp"), ("tcd", "vp"), ("euler", "edm"),
    ("euler_ancestral", "edm"), ("lcm", "edm"), ("flow_euler", "flow")])
def test_coeffs_all_ones_equal_plain(key, sampler, schedule):
    sch = {"vp": dfn.VPSchedule(dfn.ddpm_alphas_cumprod(), jnp.float32(1.0)),
           "edm": dfn.EDMSchedule(jnp.float32(0.002), jnp.float32(20.0), jnp.float32(7.0)),
           "flow": dfn.FlowSchedule(jnp.float32(3.0))}[schedule]
    p = jax.tree.map(lambda a: jnp.asarray(a, jnp.float32), _params(1))
    x = jax.random.normal(jax.random.key(1), (4, D))
    plain = _sample(_den_jax, p, key, x, schedule=sch, sampler=sampler, steps=4)
    ones = _sample(_den_jax, p, key, x, schedule=sch, sampler=sampler, steps=4,
                      coeffs=dfn.ones_coeffs(4))
    # float32 values up to ~30 here: 1e-6 relative (XLA may fuse the "* 1" differently)
    np.testing.assert_allclose(np.asarray(ones), np.asarray(plain), atol=1e-6, rtol=1e-6)
    ramp1 = _sample(_den_jax, p, key, x, schedule=sch, sampler=sampler, steps=4,
                       coeffs=dfn.ramp_coeffs(1.0, 1.0, 4))
    np.testing.assert_allclose(np.asarray(ramp1), np.asarray(plain), atol=1e-6, rtol=1e-6)
    other = _sample(_den_jax, p, key, x, schedule=sch, sampler=sampler, steps=4,
                       coeffs=dfn.ramp_coeffs(0.9, 1.1, 4))
    assert float(jnp.max(jnp.abs(other - plain))) > 1e-3  # the coefficients do act


def test_jit_vmap_over_keys_and_coeff_grid_without_recompiling(key):
    sch = dfn.EDMSchedule(jnp.float32(0.002), jnp.float32(20.0), jnp.float32(7.0))
    p = jax.tree.map(lambda a: jnp.asarray(a, jnp.float32), _params(2))
    x = jax.random.normal(jax.random.key(3), (D,))

    def run(p, k, x, schedule, coeffs):
        return dfn.sample(_den_jax, p, k, x, schedule=schedule, sampler="euler_ancestral",
                          steps=4, coeffs=coeffs)

    chex.clear_trace_counter()
    f = jax.jit(chex.assert_max_traces(run, n=1))
    a = f(p, key, x, sch, dfn.ramp_coeffs(0.9, 1.1, 4))
    b = f(p, key, x, sch, dfn.ramp_coeffs(1.15, 0.85, 4))  # new values: no retrace
    assert not np.allclose(np.asarray(a), np.asarray(b))
    # jit == eager
    eager = dfn.sample(_den_jax, p, key, x, schedule=sch, sampler="euler_ancestral", steps=4,
                       coeffs=dfn.ramp_coeffs(0.9, 1.1, 4))
    np.testing.assert_allclose(np.asarray(a), np.asarray(eager), rtol=1e-5, atol=1e-5)

    # vmap over keys == loop
    keys = jax.random.split(jax.random.key(5), 3)
    c = dfn.ramp_coeffs(0.9, 1.1, 4)
    batched = jax.jit(jax.vmap(lambda k: run(p, k, x, sch, c)))(keys)
    loop = jnp.stack([f(p, keys[i], x, sch, c) for i in range(3)])
    chex.assert_trees_all_close(batched, loop, rtol=1e-5, atol=1e-5)

    # vmap over a coefficient grid == loop, and the vmapped function compiles once
    m0 = jnp.array([0.8, 1.0, 1.2])
    s0 = jnp.array([1.1, 1.0, 0.9])

    def grid(m0, s0):
        return jax.vmap(lambda a, b: run(p, key, x, sch, dfn.ramp_coeffs(a, b, 4)))(m0, s0)

    grid_fn = jax.jit(chex.assert_max_traces(grid, n=1))
    g1 = grid_fn(m0, s0)
    grid_fn(m0 + 0.01, s0 - 0.01)  # new values: no retrace
    loop = jnp.stack([f(p, key, x, sch, dfn.ramp_coeffs(m0[i], s0[i], 4)) for i in range(3)])
    chex.assert_trees_all_close(g1, loop, rtol=1e-5, atol=1e-5)


def test_same_key_same_result_bitwise(key):
    sch = dfn.VPSchedule(dfn.ddpm_alphas_cumprod(), jnp.float32(1.0))
    p = jax.tree.map(lambda a: jnp.asarray(a, jnp.float32), _params(4))
    x = jax.random.normal(jax.random.key(1), (2, D))
    a = dfn.sample(_den_jax, p, key, x, schedule=sch, sampler="tcd", steps=4)
    b = dfn.sample(_den_jax, p, key, x, schedule=sch, sampler="tcd", steps=4)
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_gradient_wrt_coefficients_is_finite(key):
    sch = dfn.EDMSchedule(jnp.float32(0.002), jnp.float32(20.0), jnp.float32(7.0))
    p = jax.tree.map(lambda a: jnp.asarray(a, jnp.float32), _params(5))
    x = jax.random.normal(jax.random.key(1), (D,))

    def loss(ms):
        return jnp.sum(dfn.sample(_den_jax, p, key, x, schedule=sch, sampler="euler", steps=4,
                                  coeffs=dfn.ramp_coeffs(ms[0], ms[1], 4)) ** 2)

    g = jax.grad(loss)(jnp.array([1.0, 1.0]))
    eps = 1e-2
    fd = [(loss(jnp.array([1.0 + eps, 1.0])) - loss(jnp.array([1.0 - eps, 1.0]))) / (2 * eps),
          (loss(jnp.array([1.0, 1.0 + eps])) - loss(jnp.array([1.0, 1.0 - eps]))) / (2 * eps)]
    np.testing.assert_allclose(np.asarray(g), np.asarray(fd), rtol=2e-2, atol=1e-3)


# ----------------------------------------------------------------------------- bad input
def _edm():
    return dfn.EDMSchedule(jnp.float32(0.002), jnp.float32(20.0), jnp.float32(7.0))


@pytest.mark.parametrize("kwargs, match", [
    (dict(steps=0), "steps"),
    (dict(sampler="heun"), "sampler"),
    (dict(sampler="ddim"), "sampler"),  # ddim needs a VP schedule
    (dict(coeffs=dfn.ramp_coeffs(0.9, 1.1, 3)), "coeffs.m"),
    (dict(coeffs={"m": jnp.ones(4), "s": jnp.ones(5)}), "coeffs.s"),
    (dict(coeffs={"m": jnp.ones(4)}), "coeffs"),
    (dict(schedule=dfn.EDMSchedule(jnp.float32(jnp.nan), jnp.float32(20.0),
                                   jnp.float32(7.0))), "sigma"),
    (dict(schedule=dfn.EDMSchedule(jnp.float32(-0.1), jnp.float32(20.0),
                                   jnp.float32(7.0))), "sigma"),
    (dict(schedule=dfn.SigmaSchedule(jnp.array([20.0, -1.0, 0.5, 0.1, 0.0]))), "sigmas"),
    (dict(schedule=dfn.SigmaSchedule(jnp.array([20.0, jnp.inf, 0.5, 0.1, 0.0]))), "sigmas"),
    (dict(schedule=dfn.SigmaSchedule(jnp.array([20.0, 1.0, 0.0]))), "sigmas"),
    (dict(schedule=dfn.EDMSchedule(jnp.float32(0.002), jnp.float32(20.0), jnp.float32(7.0),
                                   prediction="v_prediction")), "prediction"),
])
def test_bad_input_raises_value_error_naming_argument(key, kwargs, match):
    base = dict(schedule=_edm(), sampler="euler", steps=4)
    base.update(kwargs)
    with pytest.raises(ValueError, match=match):
        dfn.sample(_den_jax, _params(0), key, jnp.ones(D), **base)


@pytest.mark.parametrize("steps", [2.0, True])
def test_non_int_steps_raise_type_error_naming_argument(key, steps):
    with pytest.raises(TypeError, match="steps"):
        dfn.sample(_den_jax, _params(0), key, jnp.ones(D), schedule=_edm(), sampler="euler",
                   steps=steps)


def test_bad_ramp_and_vp_arguments():
    with pytest.raises(ValueError, match="steps"):
        dfn.ramp_coeffs(1.0, 1.0, 0)
    with pytest.raises(ValueError, match="alphas_cumprod"):
        dfn.discretize(dfn.VPSchedule(jnp.array([0.9, 0.0, 0.5]), jnp.float32(1.0)), 2)
    with pytest.raises(ValueError, match="spacing"):
        dfn.discretize(dfn.VPSchedule(dfn.ddpm_alphas_cumprod(), jnp.float32(1.0),
                                      spacing="linspace"), 2)
