"""sample_trajectory: float64 numpy Euler on an analytic Gaussian denoiser (every row), the last
row is ``sample`` bit for bit, row 0 is the scaled prior sample, jit / vmap, bad input."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxpapers import diffusion as dfn

D = 5
MU, S0 = 0.3, 0.5  # data ~ N(MU, S0^2) per dimension


def _x0_jax(p, x, sigma):
    """Exact x_0-denoiser of N(mu, s0^2 I): (s0^2 x + sigma^2 mu) / (s0^2 + sigma^2)."""
    return (p["s0"] ** 2 * x + sigma ** 2 * p["mu"]) / (p["s0"] ** 2 + sigma ** 2)


def _eps_jax(p, x, sigma):
    return (x - _x0_jax(p, x, sigma)) / sigma


def _np_euler_path(x_T, sigmas, prior_scale):
    """float64 Euler (EDM Alg. 1 without Heun) on the same denoiser; every boundary."""
    x = np.asarray(x_T, np.float64) * prior_scale
    path = [x]
    for s, s_next in zip(sigmas[:-1], sigmas[1:]):
        x0 = (S0 ** 2 * x + s ** 2 * MU) / (S0 ** 2 + s ** 2)
        x = x + (s_next - s) * (x - x0) / s
        path.append(x)
    return np.stack(path)


def _params(dtype):
    return {"mu": jnp.asarray(MU, dtype), "s0": jnp.asarray(S0, dtype)}


@pytest.mark.parametrize("kind", ["sigma_grid", "edm_eps"])
def test_every_row_matches_float64_numpy_euler(x64, key, kind):
    x_T = jax.random.normal(key, (3, D), jnp.float64)
    if kind == "sigma_grid":
        sigmas = np.array([20.0, 2.5, 0.4, 0.05, 0.0])
        sch = dfn.SigmaSchedule(jnp.asarray(sigmas), prediction="sample")
        den = _x0_jax
    else:  # Karras grid, epsilon prediction
        sch = dfn.EDMSchedule(jnp.float64(0.002), jnp.float64(20.0), jnp.float64(7.0))
        sigmas = np.asarray(dfn.karras_sigmas(4, 0.002, 20.0))
        den = _eps_jax
    path = dfn.sample_trajectory(den, _params(jnp.float64), key, x_T, schedule=sch,
                                 sampler="euler", steps=4)
    assert path.shape == (5, 3, D) and path.dtype == jnp.float64
    prior = 20.0  # sigmas[0] of the grid; EDM's sigma_max (its Karras grid's first value is
    # sigma_max up to rounding, the scan starts from x_T * sigma_max exactly)
    want = _np_euler_path(x_T, sigmas, prior)
    # float64 through a handful of elementwise operations: agreement to ~1e-15 relative
    np.testing.assert_allclose(np.asarray(path), want, rtol=1e-12, atol=1e-12)
    # row 0 is exactly x_T times the prior's scale
    np.testing.assert_array_equal(np.asarray(path[0]), np.asarray(x_T) * prior)
    # the Euler path ends near the exact posterior flow's endpoint: not a trivial path
    assert np.abs(want[0] - want[-1]).max() > 1.0


_sample = jax.jit(dfn.sample, static_argnums=(0,), static_argnames=("sampler", "steps"))
_traj = jax.jit(dfn.sample_trajectory, static_argnums=(0,), static_argnames=("sampler", "steps"))


@pytest.mark.parametrize("sampler,schedule", [
    ("euler", dfn.SigmaSchedule(jnp.array([20.0, 3.0, 0.5, 0.002, 0.0]), prediction="sample")),
    ("euler_ancestral", dfn.EDMSchedule(jnp.float32(0.002), jnp.float32(20.0),
                                        jnp.float32(7.0))),
    ("lcm", dfn.EDMSchedule(jnp.float32(0.002), jnp.float32(20.0), jnp.float32(7.0),
                            prediction="sample")),
    ("ddim", dfn.VPSchedule(dfn.ddpm_alphas_cumprod(1000).astype(jnp.float32),
                            jnp.float32(1.0))),
])
def test_last_row_is_sample_bit_for_bit(key, sampler, schedule):
    k_x, k_s = jax.random.split(key)
    x_T = jax.random.normal(k_x, (4, D))
    den = _eps_jax if sampler in ("euler_ancestral", "ddim") else _x0_jax
    if sampler == "ddim":  # VP: an epsilon model of the same Gaussian in VP form
        den = lambda p, x, t: 0.1 * jnp.tanh(x) * jnp.log1p(t)  # noqa: E731
    p = _params(jnp.float32)
    path = _traj(den, p, k_s, x_T, schedule=schedule, sampler=sampler, steps=4)
    final = _sample(den, p, k_s, x_T, schedule=schedule, sampler=sampler, steps=4)
    np.testing.assert_array_equal(np.asarray(path[-1]), np.asarray(final))
    scale = dfn.init_noise_sigma(schedule)
    np.testing.assert_array_equal(np.asarray(path[0]),
                                  np.asarray(x_T * scale.astype(jnp.float32)))


def test_vmap_over_noise_equals_loop(key):
    sch = dfn.SigmaSchedule(jnp.array([10.0, 1.0, 0.1, 0.0]), prediction="sample")
    x_T = jax.random.normal(key, (3, D))
    p = _params(jnp.float32)
    f = lambda x: dfn.sample_trajectory(_x0_jax, p, jax.random.key(1), x, schedule=sch,  # noqa
                                        sampler="euler", steps=3)
    batched = jax.jit(jax.vmap(f))(x_T)
    assert batched.shape == (3, 4, D)
    for i in range(3):
        # float32 rounding of values up to |x| ~ 10 * 3 = 30 (1 ulp ~ 2e-6), a few ops per step
        np.testing.assert_allclose(np.asarray(batched[i]), np.asarray(f(x_T[i])), rtol=1e-6,
                                   atol=2e-5)


def test_bad_input_names_the_argument(key):
    x_T = jnp.ones(D)
    p = _params(jnp.float32)
    with pytest.raises(ValueError, match="sigmas"):
        dfn.sample_trajectory(_x0_jax, p, key, x_T, sampler="euler", steps=3,
                              schedule=dfn.SigmaSchedule(jnp.array([1.0, 2.0, 0.5, 0.0]),
                                                         prediction="sample"))
    with pytest.raises(ValueError, match="sigmas"):  # wrong length for steps
        dfn.sample_trajectory(_x0_jax, p, key, x_T, sampler="euler", steps=2,
                              schedule=dfn.SigmaSchedule(jnp.array([2.0, 1.0, 0.5, 0.0]),
                                                         prediction="sample"))
    with pytest.raises(ValueError, match="sampler"):
        dfn.sample_trajectory(_x0_jax, p, key, x_T, sampler="heun", steps=3,
                              schedule=dfn.SigmaSchedule(jnp.array([2.0, 1.0, 0.5, 0.0])))
    with pytest.raises(ValueError, match="x_T"):
        dfn.sample_trajectory(_x0_jax, p, key, jnp.ones(D, jnp.int32), sampler="euler",
                              steps=3, schedule=dfn.SigmaSchedule(jnp.array([2.0, 1.0, 0.5,
                                                                             0.0])))
