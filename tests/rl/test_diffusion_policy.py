"""The diffusion policy's samplers (plain == ddpm sample, critic guidance) and losses."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxpapers import diffusion as dfn
from jaxpapers import rl

T, A, O, B = 6, 2, 3, 64
C = jnp.array([0.6, -0.4])


def eps_fn(p, s, a, t):
    """A toy eps-model: per-timestep scale p[t], state-dependent shift."""
    return p[t] * jnp.tanh(a + 0.1 * jnp.sum(s)) + 0.05


def q_fn(s, a):
    return -jnp.sum((a - C) ** 2)


def _obs(seed=0):
    return jax.random.normal(jax.random.key(seed), (B, O))


P = jnp.linspace(0.5, 1.2, T)


def test_plain_sampler_is_the_ddpm_sample_exactly():
    key = jax.random.key(1)
    obs = _obs()
    ours = rl.sample_actions(eps_fn, P, key, obs, num_steps=T, act_dim=A)
    k_prior, k_steps = jax.random.split(key)
    den = lambda p, x, t: jax.vmap(eps_fn, (None, 0, 0, None))(  # noqa: E731
        p, obs, x, t.astype(jnp.int32))
    ref = dfn.sample(den, P, k_steps, jax.random.normal(k_prior, (B, A)),
                     schedule=rl.policy_schedule(T), sampler="ddpm", steps=T)
    np.testing.assert_array_equal(np.asarray(ours), np.asarray(ref))
    assert float(jnp.max(jnp.abs(ours))) <= 1.0


def test_zero_scale_or_zero_steps_equal_plain_and_guidance_raises_q():
    key, obs = jax.random.key(2), _obs(1)
    kw = dict(num_steps=T, act_dim=A)
    f = jax.jit(lambda lam, key: rl.sample_actions(eps_fn, P, key, obs, q_fn=q_fn,
                                                   guidance_scale=lam, guidance_steps=2, **kw))
    plain = jax.jit(lambda key: rl.sample_actions(eps_fn, P, key, obs, **kw))(key)
    np.testing.assert_array_equal(np.asarray(f(0.0, key)), np.asarray(plain))  # both jitted
    no_steps = jax.jit(lambda key: rl.sample_actions(eps_fn, P, key, obs, q_fn=q_fn,
                                                     guidance_scale=0.3, guidance_steps=0,
                                                     **kw))(key)
    np.testing.assert_array_equal(np.asarray(no_steps), np.asarray(plain))
    guided = f(0.05, key)
    assert f._cache_size() == 1  # the scale is traced: no recompilation
    dq = jax.vmap(q_fn)(obs, guided) - jax.vmap(q_fn)(obs, plain)
    assert float(jnp.mean(dq)) > 0 and float(jnp.mean(dq > 0)) > 0.9
    _, _, gain = rl.guided_gain(eps_fn, P, key, obs, q_fn=q_fn, guidance_scale=0.05,
                                guidance_steps=2, **kw)
    np.testing.assert_allclose(np.asarray(gain), np.asarray(dq), rtol=1e-6, atol=1e-7)


def test_one_guided_step_is_the_clipped_gradient_move():
    """L = 1: the output is clip(x0 + lam clip_norm(grad Q(x0)), -1, 1) with x0 the clipped
    x_0 prediction at the last step of the plain trajectory (a' = 1 there)."""
    key, obs, lam = jax.random.key(3), _obs(2), 0.3
    k_prior, k_steps = jax.random.split(key)
    den = lambda p, x, t: jax.vmap(eps_fn, (None, 0, 0, None))(  # noqa: E731
        p, obs, x, t.astype(jnp.int32))
    path = dfn.sample_trajectory(den, P, k_steps, jax.random.normal(k_prior, (B, A)),
                                 schedule=rl.policy_schedule(T), sampler="ddpm", steps=T)
    x = np.asarray(path[-2], np.float64)
    a = float(rl.policy_schedule(T).alphas_cumprod[0])
    eps = np.asarray(den(P, path[-2], jnp.zeros(())), np.float64)
    x0 = np.clip((x - np.sqrt(1 - a) * eps) / np.sqrt(a), -1, 1)
    g = -2.0 * (x0 - np.asarray(C, np.float64))
    g = g * np.minimum(1.0, 1.0 / np.linalg.norm(g, axis=1, keepdims=True))
    want = np.clip(x0 + lam * g, -1, 1)
    got = rl.sample_actions(eps_fn, P, key, obs, num_steps=T, act_dim=A, q_fn=q_fn,
                            guidance_scale=lam, guidance_steps=1)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)


def test_qgrad_gradient_reaches_the_first_denoising_step():
    obs = _obs(3)

    def loss(p):
        a = rl.sample_actions(eps_fn, p, jax.random.key(4), obs, num_steps=T, act_dim=A)
        return -jnp.mean(jax.vmap(q_fn)(obs, a))

    g = jax.grad(loss)(P)
    assert abs(float(g[T - 1])) > 1e-6, g  # t = T - 1 is the first denoising step
    assert np.all(np.abs(np.asarray(g)) > 0)


def test_vmap_over_keys_equals_loop():
    obs = _obs(4)[:8]
    keys = jax.random.split(jax.random.key(5), 3)
    f = lambda k: rl.sample_actions(eps_fn, P, k, obs, num_steps=T, act_dim=A,  # noqa: E731
                                    q_fn=q_fn, guidance_scale=0.1, guidance_steps=2)
    batched = jax.vmap(f)(keys)
    for i, k in enumerate(keys):
        np.testing.assert_allclose(np.asarray(batched[i]), np.asarray(f(k)), rtol=1e-6,
                                   atol=1e-6)


def test_weighted_loss_normalises_and_one_hot_picks_a_row():
    obs = _obs(5)[:4]
    acts = jax.random.uniform(jax.random.key(6), (4, A), minval=-1, maxval=1)
    key = jax.random.key(7)
    errs = rl.denoising_errors(eps_fn, P, key, obs, acts, num_steps=T)
    for i in range(4):
        w = jnp.zeros(4).at[i].set(3.0)
        assert float(rl.weighted_denoising_loss(eps_fn, P, key, obs, acts, w, num_steps=T)) \
            == pytest.approx(float(errs[i]), rel=1e-6)
    # the error is |eps_hat - eps|^2 at t ~ U{0..T-1}: check one row against numpy
    k_t, k_eps = jax.random.split(key)
    t = np.asarray(jax.random.randint(k_t, (4,), 0, T))
    eps = np.asarray(jax.random.normal(k_eps, (4, A)), np.float64)
    ab = np.asarray(rl.policy_schedule(T).alphas_cumprod, np.float64)[t][:, None]
    noisy = np.sqrt(ab) * np.asarray(acts, np.float64) + np.sqrt(1 - ab) * eps
    pred = np.asarray(P, np.float64)[t][:, None] * np.tanh(
        noisy + 0.1 * np.asarray(obs, np.float64).sum(1, keepdims=True)) + 0.05
    np.testing.assert_allclose(np.asarray(errs), ((pred - eps) ** 2).sum(1), rtol=1e-5)


def test_sampler_bad_input():
    obs = _obs()
    with pytest.raises(ValueError, match="guidance_steps"):
        rl.sample_actions(eps_fn, P, jax.random.key(0), obs, num_steps=T, act_dim=A,
                          q_fn=q_fn, guidance_steps=T + 1)
    with pytest.raises(ValueError, match="q_fn"):
        rl.sample_actions(eps_fn, P, jax.random.key(0), obs, num_steps=T, act_dim=A,
                          guidance_steps=1)
    with pytest.raises(ValueError, match="obs"):
        rl.sample_actions(eps_fn, P, jax.random.key(0), obs[0], num_steps=T, act_dim=A)
    with pytest.raises(ValueError, match="obs"):
        rl.sample_actions(eps_fn, P, jax.random.key(0), obs.at[0, 0].set(jnp.nan),
                          num_steps=T, act_dim=A)
