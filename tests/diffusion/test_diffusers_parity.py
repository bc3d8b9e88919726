"""DDIM / Euler / LCM equal diffusers' schedulers on the same timesteps and sigmas.

Skipped (never faked) when diffusers or torch are not installed.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxpapers import diffusion as dfn

torch = pytest.importorskip("torch")
diffusers = pytest.importorskip("diffusers")

D = 8
_BETAS = dict(num_train_timesteps=1000, beta_start=0.00085, beta_end=0.012,
              beta_schedule="scaled_linear")


def _g(w, x, t):
    """Random denoiser as a function of (input, noise level); numpy / torch / jax agnostic."""
    return np.tanh(np.asarray(x, np.float64) @ w + 0.01 * np.log1p(float(t)))


def _w(seed):
    return np.random.default_rng(seed).normal(size=(D, D)) / np.sqrt(D)


def _jax_g(w):
    wj = jnp.asarray(w, jnp.float32)
    return lambda x, t: jnp.tanh(x @ wj + 0.01 * jnp.log1p(t))


def test_ddim_matches_diffusers():
    w = _w(0)
    x_start = np.random.default_rng(1).normal(size=(2, D)).astype(np.float32)
    sch = diffusers.DDIMScheduler(**_BETAS, clip_sample=False, set_alpha_to_one=True,
                                  timestep_spacing="trailing", prediction_type="epsilon")
    sch.set_timesteps(4)
    x = torch.tensor(x_start)
    for t in sch.timesteps:
        out = torch.tensor(_g(w, x.numpy(), int(t)), dtype=torch.float32)
        x = sch.step(out, t, x, eta=0.0).prev_sample
    ours_sch = dfn.VPSchedule(jnp.asarray(sch.alphas_cumprod.numpy()), jnp.float32(1.0),
                              spacing="trailing")
    np.testing.assert_array_equal(
        np.asarray(dfn.discretize(ours_sch, 4).model_in).astype(int), sch.timesteps.numpy())
    g = _jax_g(w)
    ours = dfn.sample(lambda p, x, t: g(x, t), None, jax.random.key(0), jnp.asarray(x_start),
                      schedule=ours_sch, sampler="ddim", steps=4)
    np.testing.assert_allclose(np.asarray(ours), x.numpy(), rtol=1e-4, atol=1e-4)


def test_euler_matches_diffusers_on_its_sigmas():
    w = _w(2)
    x_start = np.random.default_rng(3).normal(size=(2, D)).astype(np.float32)
    sch = diffusers.EulerDiscreteScheduler(**_BETAS, prediction_type="epsilon")
    sch.set_timesteps(4)
    x = torch.tensor(x_start) * sch.init_noise_sigma
    for t in sch.timesteps:
        x_in = sch.scale_model_input(x, t)
        out = torch.tensor(_g(w, x_in.numpy(), 0), dtype=torch.float32)
        x = sch.step(out, t, x).prev_sample
    sigmas = np.asarray(sch.sigmas.numpy(), np.float32)
    g = _jax_g(w)
    ours = dfn.sample(lambda p, x, s: g(x / jnp.sqrt(s ** 2 + 1.0), 0.0), None,
                      jax.random.key(0),
                      jnp.asarray(x_start) * float(sch.init_noise_sigma) / float(sigmas[0]),
                      schedule=dfn.SigmaSchedule(jnp.asarray(sigmas)), sampler="euler", steps=4)
    np.testing.assert_allclose(np.asarray(ours), x.numpy(), rtol=1e-4, atol=1e-4)


def test_lcm_matches_diffusers_with_shared_noise(monkeypatch):
    import diffusers.schedulers.scheduling_lcm as lcm_mod

    w = _w(4)
    x_start = np.random.default_rng(5).normal(size=(2, D)).astype(np.float32)
    key = jax.random.key(6)
    zs = [np.asarray(jax.random.normal(k, x_start.shape, jnp.float32))
          for k in jax.random.split(key, 4)]
    it = iter(zs)
    monkeypatch.setattr(lcm_mod, "randn_tensor",
                        lambda shape, **kw: torch.tensor(next(it), dtype=torch.float32))
    sch = diffusers.LCMScheduler(**_BETAS, prediction_type="epsilon")
    sch.set_timesteps(timesteps=[999, 749, 499, 249])
    x = torch.tensor(x_start)
    for t in sch.timesteps:
        out = torch.tensor(_g(w, x.numpy(), int(t)), dtype=torch.float32)
        x = sch.step(out, t, x).prev_sample
    g = _jax_g(w)
    ours = dfn.sample(lambda p, x, t: g(x, t), None, key, jnp.asarray(x_start),
                      schedule=dfn.VPSchedule(jnp.asarray(sch.alphas_cumprod.numpy()),
                                              jnp.float32(1.0), spacing="trailing"),
                      sampler="lcm", steps=4)
    np.testing.assert_allclose(np.asarray(ours), x.numpy(), rtol=1e-4, atol=1e-4)


def test_ddpm_matches_diffusers_with_shared_noise(monkeypatch):
    """Ancestral DDPM (fixed_small variance, clip_sample) on all 20 timesteps of the VP-SDE
    schedule CGPO's policy uses, diffusers drawing the noise we draw."""
    import diffusers.schedulers.scheduling_ddpm as ddpm_mod

    w = _w(7)
    steps = 20
    ac = np.asarray(dfn.vp_sde_alphas_cumprod(steps), np.float64)
    betas = 1.0 - ac / np.concatenate([[1.0], ac[:-1]])
    x_start = np.random.default_rng(8).normal(size=(2, D)).astype(np.float32)
    key = jax.random.key(9)
    zs = [np.asarray(jax.random.normal(k, x_start.shape, jnp.float32))
          for k in jax.random.split(key, steps)]
    it = iter(zs)
    monkeypatch.setattr(ddpm_mod, "randn_tensor",
                        lambda shape, **kw: torch.tensor(next(it), dtype=torch.float32))
    sch = diffusers.DDPMScheduler(num_train_timesteps=steps, trained_betas=betas.tolist(),
                                  clip_sample=True, variance_type="fixed_small",
                                  prediction_type="epsilon")
    sch.set_timesteps(steps)
    x = torch.tensor(x_start)
    for t in sch.timesteps:
        out = torch.tensor(_g(w, x.numpy(), int(t)), dtype=torch.float32)
        x = sch.step(out, t, x).prev_sample
    g = _jax_g(w)
    ours = dfn.sample(lambda p, x, t: g(x, t), None, key, jnp.asarray(x_start),
                      schedule=dfn.VPSchedule(jnp.asarray(ac, jnp.float32), jnp.float32(1.0)),
                      sampler="ddpm", steps=steps)
    np.testing.assert_allclose(np.asarray(ours), x.numpy(), rtol=1e-4, atol=1e-4)
