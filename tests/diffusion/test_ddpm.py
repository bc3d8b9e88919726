"""The ancestral ``ddpm`` sampler against a float64 numpy loop, and its x_0 guidance hook."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxpapers import diffusion as dfn

D = 3
STEPS = 20


def _schedule(final=1.0):
    return dfn.VPSchedule(dfn.vp_sde_alphas_cumprod(STEPS), jnp.float32(final))


def _den(p, x, t):
    """An eps-model of (x, timestep); p scales it (differentiable parameters)."""
    return p * jnp.tanh(x * 0.7 + 0.05 * t) + 0.1 * jnp.cos(t)


def _numpy_ddpm(x_T, zs, p, clip=1.0, guide=None, guide_steps=0):
    ac = np.asarray(dfn.vp_sde_alphas_cumprod(STEPS), np.float64)
    x = np.asarray(x_T, np.float64)
    for i, t in enumerate(range(STEPS - 1, -1, -1)):
        a = ac[t]
        a_prev = ac[t - 1] if t > 0 else 1.0
        eps = p * np.tanh(x * 0.7 + 0.05 * t) + 0.1 * np.cos(t)
        x0 = (x - np.sqrt(1 - a) * eps) / np.sqrt(a)
        if clip is not None:
            x0 = np.clip(x0, -clip, clip)
        if guide is not None and i >= STEPS - guide_steps:
            x0 = guide(x0)
        alpha = a / a_prev
        beta = 1 - alpha
        mean = np.sqrt(a_prev) * beta / (1 - a) * x0 + np.sqrt(alpha) * (1 - a_prev) / (1 - a) * x
        var = max(beta * (1 - a_prev) / (1 - a), 1e-20)
        x = mean + (np.sqrt(var) * zs[i] if t > 0 else 0.0)
    return x


def _zs(key, shape):
    return [np.asarray(jax.random.normal(k, shape, jnp.float32), np.float64)
            for k in jax.random.split(key, STEPS)]


@pytest.mark.parametrize("clip", [1.0, None])
def test_ddpm_matches_float64_numpy(clip):
    x_T = jax.random.normal(jax.random.key(0), (4, D))
    key = jax.random.key(1)
    ours = dfn.sample(_den, 1.3, key, x_T, schedule=_schedule(), sampler="ddpm", steps=STEPS,
                      clip_sample=clip)
    ref = _numpy_ddpm(x_T, _zs(key, (4, D)), 1.3, clip=clip)
    np.testing.assert_allclose(np.asarray(ours), ref, rtol=2e-5, atol=2e-5)
    if clip is not None:  # the last step returns the clipped x_0 (a' = 1)
        assert float(jnp.max(jnp.abs(ours))) <= 1.0


def test_vp_sde_alphas_closed_form():
    t = np.arange(1, 21)
    alphas = np.exp(-0.1 / 20 - 9.9 * (2 * t - 1) / (2 * 400))
    np.testing.assert_allclose(np.asarray(dfn.vp_sde_alphas_cumprod(20)), np.cumprod(alphas),
                               rtol=1e-6)
    with pytest.raises(ValueError, match="beta_min"):
        dfn.vp_sde_alphas_cumprod(20, beta_min=5.0, beta_max=1.0)


def test_guide_runs_only_in_the_last_steps_and_matches_numpy():
    x_T = jax.random.normal(jax.random.key(2), (4, D))
    key = jax.random.key(3)
    shift = 0.05
    for L in (1, 5, STEPS):
        ours = dfn.sample(_den, 1.0, key, x_T, schedule=_schedule(), sampler="ddpm", steps=STEPS,
                          guide=lambda x0, x, t: x0 + shift, guide_steps=L)
        ref = _numpy_ddpm(x_T, _zs(key, (4, D)), 1.0, guide=lambda x0: x0 + shift, guide_steps=L)
        np.testing.assert_allclose(np.asarray(ours), ref, rtol=2e-5, atol=2e-5)


def test_identity_guide_equals_plain_exactly_and_trajectory_rows():
    x_T = jax.random.normal(jax.random.key(4), (4, D))
    key = jax.random.key(5)
    kw = dict(schedule=_schedule(), sampler="ddpm", steps=STEPS)
    plain = jax.jit(lambda p: dfn.sample(_den, p, key, x_T, **kw))(1.0)
    guided = jax.jit(lambda p: dfn.sample(_den, p, key, x_T, guide=lambda x0, x, t: x0 + 0.0 * t,
                                          guide_steps=4, **kw))(1.0)
    np.testing.assert_array_equal(np.asarray(plain), np.asarray(guided))
    path = dfn.sample_trajectory(_den, 1.0, key, x_T, guide=lambda x0, x, t: x0 + 0.1,
                                 guide_steps=3, **kw)
    last = dfn.sample(_den, 1.0, key, x_T, guide=lambda x0, x, t: x0 + 0.1, guide_steps=3, **kw)
    assert path.shape == (STEPS + 1, 4, D)
    np.testing.assert_array_equal(np.asarray(path[-1]), np.asarray(last))
    np.testing.assert_array_equal(np.asarray(path[:STEPS - 2]),
                                  np.asarray(dfn.sample_trajectory(_den, 1.0, key, x_T, **kw)
                                             [:STEPS - 2]))


def test_gradient_flows_through_every_step():
    x_T = jax.random.normal(jax.random.key(6), (2, D))

    def first_step_only(p):  # p[t] scales the eps-model at timestep t only
        den = lambda q, x, t: q[t.astype(jnp.int32)] * jnp.tanh(x)  # noqa: E731
        return jnp.sum(dfn.sample(den, p, jax.random.key(7), x_T, schedule=_schedule(),
                                  sampler="ddpm", steps=STEPS, clip_sample=None) ** 2)

    g = jax.grad(first_step_only)(jnp.ones(STEPS))
    assert np.all(np.abs(np.asarray(g)) > 0), g  # incl. t = 19, the first denoising step


def test_ddpm_bad_input():
    x_T = jnp.zeros((2, D))
    kw = dict(schedule=_schedule(), steps=STEPS)
    with pytest.raises(ValueError, match="guide_steps"):
        dfn.sample(_den, 1.0, jax.random.key(0), x_T, sampler="ddpm", guide=lambda a, b, c: a,
                   guide_steps=STEPS + 1, **kw)
    with pytest.raises(ValueError, match="guide"):
        dfn.sample(_den, 1.0, jax.random.key(0), x_T, sampler="ddpm", guide_steps=2, **kw)
    with pytest.raises(ValueError, match="ddpm"):
        dfn.sample(_den, 1.0, jax.random.key(0), x_T, sampler="ddim", guide=lambda a, b, c: a,
                   guide_steps=2, **kw)
    with pytest.raises(ValueError, match="clip_sample"):
        dfn.sample(_den, 1.0, jax.random.key(0), x_T, sampler="ddpm", clip_sample=0.0, **kw)
    with pytest.raises(ValueError, match="VPSchedule"):
        dfn.sample(_den, 1.0, jax.random.key(0), x_T, sampler="ddpm", steps=2,
                   schedule=dfn.SigmaSchedule(jnp.array([1.0, 0.5, 0.0])))
