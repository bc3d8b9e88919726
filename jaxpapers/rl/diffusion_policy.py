"""Diffusion policies: the plain and critic-guided ancestral samplers, and the weighted
denoising loss (CGPO, issue 25; DACER / QVPO's VP policy).

The policy is a VP DDPM over actions in [-1, 1]^A with T steps and the VP-SDE schedule
(:func:`jaxpapers.diffusion.vp_sde_alphas_cumprod`, b0 = 0.1, b1 = 10 as DACER / QVPO), an
eps-model ``eps_fn(params, obs [O], a_t [A], t)`` with t the integer timestep (T - 1 at the first
denoising step, 0 at the last), x_0 clipped to [-1, 1] at every step.

* Plain sampling is :func:`jaxpapers.diffusion.sample` with ``sampler="ddpm"`` -- the same call.
* Critic guidance (CGPO): in the last L steps ``a0_hat <- clip(a0_hat + lam clip_norm(grad_a
  Q(s, a0_hat)), -1, 1)`` before the posterior mean; ``clip_norm(g) = g min(1, 1 / |g|)``. The
  re-clip is ours (it keeps the guided action in the action box; the page does not say).
* The actor's loss: ``sum_i w_i |eps_theta(sqrt(abar_t) a_i + sqrt(1 - abar_t) eps, t, s_i) -
  eps|^2 / sum_i w_i`` with ``t ~ U{0..T-1}`` and ``eps ~ N(0, I)`` per row (QVPO eq. 9's
  weighted form of Ho et al.'s simple loss).
"""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp

from jaxpapers import diffusion as dfn
from jaxpapers.core import checks

__all__ = ["policy_schedule", "sample_actions", "guided_gain", "denoising_errors",
           "weighted_denoising_loss", "clip_norm", "BETA_MIN", "BETA_MAX"]

BETA_MIN, BETA_MAX = 0.1, 10.0  # DACER / QVPO


def policy_schedule(num_steps: int) -> dfn.VPSchedule:
    """The T-step VP schedule of the policy (``final_alpha_cumprod = 1``: the last step returns
    the clipped x_0, as diffusers' DDPMScheduler)."""
    return dfn.VPSchedule(dfn.vp_sde_alphas_cumprod(num_steps, BETA_MIN, BETA_MAX),
                          jnp.float32(1.0))


def clip_norm(g: jax.Array, max_norm: float = 1.0) -> jax.Array:
    """[..., A] -> rows rescaled to Euclidean norm <= ``max_norm``."""
    norm = jnp.sqrt(jnp.sum(g * g, axis=-1, keepdims=True))
    return g * jnp.minimum(1.0, max_norm / jnp.maximum(norm, 1e-12))


def _check(obs, num_steps, act_dim, q_fn, guidance_steps):
    checks.check_ndim("obs", obs, 2, "[B, O]")
    num_steps = checks.check_int("num_steps", num_steps, minimum=1)
    checks.check_int("act_dim", act_dim, minimum=1)
    guidance_steps = checks.check_int("guidance_steps", guidance_steps, minimum=0)
    if guidance_steps > num_steps:
        raise ValueError(f"guidance_steps must be <= num_steps={num_steps}, got "
                         f"{guidance_steps}")
    if guidance_steps and q_fn is None:
        raise ValueError("guidance_steps > 0 needs q_fn (the critic), got q_fn=None")
    checks.check_finite("obs", obs)


def sample_actions(eps_fn: Callable, params, key: jax.Array, obs: jax.Array, *, num_steps: int,
                   act_dim: int, q_fn: Callable | None = None,
                   guidance_scale: jax.typing.ArrayLike = 0.0,
                   guidance_steps: int = 0) -> jax.Array:
    """Actions of the diffusion policy, plain or critic-guided in the last steps.

    Args:
      eps_fn: unbatched ``eps_fn(params, obs [O], a_t [A], t) -> [A]``, t an int32 timestep
        (0 = the last denoising step).
      params: the eps-model's parameters (differentiable: DACER's Q-gradient actor loss
        backpropagates through every step).
      key: consumed: ``split(key)`` -> (prior noise, the sampler's per-step noise).
      obs: [B, O] states.
      num_steps: T (static). act_dim: A (static).
      q_fn: unbatched ``q_fn(obs [O], a [A]) -> []`` (the critic), needed for guidance.
      guidance_scale: lam >= 0 (traceable; 0 with L > 0 gives the plain actions exactly).
      guidance_steps: L, the final steps that are guided (static, 0 <= L <= T).

    Returns:
      [B, A] actions in [-1, 1]. With L = 0 this is exactly
      ``dfn.sample(den, params, k2, normal(k1, [B, A]), schedule=policy_schedule(T),
      sampler="ddpm", steps=T)`` for ``k1, k2 = split(key)``.

    Raises:
      ValueError: ``guidance_steps`` > ``num_steps`` or without ``q_fn``, ``obs`` not [B, O] or
        not finite.

    >>> import jax, jax.numpy as jnp
    >>> eps = lambda p, s, a, t: p * a          # a toy eps-model
    >>> a = sample_actions(eps, 0.5, jax.random.key(0), jnp.zeros((3, 2)), num_steps=5,
    ...                    act_dim=2)
    >>> a.shape, bool(jnp.all(jnp.abs(a) <= 1.0))
    ((3, 2), True)
    """
    _check(obs, num_steps, act_dim, q_fn, guidance_steps)
    k_prior, k_steps = jax.random.split(key)
    x_T = jax.random.normal(k_prior, (obs.shape[0], act_dim), jnp.float32)
    batched_eps = jax.vmap(eps_fn, in_axes=(None, 0, 0, None))

    def den(p, x, t):
        return batched_eps(p, obs, x, t.astype(jnp.int32))

    guide = None
    if guidance_steps:
        grad_q = jax.vmap(jax.grad(q_fn, argnums=1))
        lam = jnp.asarray(guidance_scale, jnp.float32)

        def critic_guide(x0, x, t):
            g = jax.lax.stop_gradient(clip_norm(grad_q(obs, x0)))
            return jnp.clip(x0 + lam * g, -1.0, 1.0)

        guide = critic_guide
    return dfn.sample(den, params, k_steps, x_T, schedule=policy_schedule(num_steps),
                      sampler="ddpm", steps=num_steps, guide=guide, guide_steps=guidance_steps)


def guided_gain(eps_fn: Callable, params, key: jax.Array, obs: jax.Array, *, num_steps: int,
                act_dim: int, q_fn: Callable, guidance_scale: jax.typing.ArrayLike,
                guidance_steps: int) -> tuple[jax.Array, jax.Array, jax.Array]:
    """``(a_plain [B, A], a_tilde [B, A], dQ [B])``: plain and guided actions from the same key
    (common random numbers) and ``dQ = Q(s, a_tilde) - Q(s, a_plain)``, CGPO's "guidance
    raises Q" check."""
    kw = dict(num_steps=num_steps, act_dim=act_dim)
    plain = sample_actions(eps_fn, params, key, obs, **kw)
    guided = sample_actions(eps_fn, params, key, obs, q_fn=q_fn, guidance_scale=guidance_scale,
                            guidance_steps=guidance_steps, **kw)
    q = jax.vmap(q_fn)
    return plain, guided, q(obs, guided) - q(obs, plain)


def denoising_errors(eps_fn: Callable, params, key: jax.Array, obs: jax.Array,
                     actions: jax.Array, *, num_steps: int) -> jax.Array:
    """[B] per-row ``|eps_theta(sqrt(abar_t) a + sqrt(1 - abar_t) eps, t, s) - eps|^2`` with
    ``t ~ U{0..T-1}``, ``eps ~ N(0, I)`` drawn from ``key`` (Ho et al., 2020, eq. 14)."""
    checks.check_ndim("actions", actions, 2, "[B, A]")
    b = actions.shape[0]
    k_t, k_eps = jax.random.split(key)
    t = jax.random.randint(k_t, (b,), 0, num_steps)
    eps = jax.random.normal(k_eps, actions.shape, actions.dtype)
    abar = policy_schedule(num_steps).alphas_cumprod[t][:, None]
    noisy = jnp.sqrt(abar) * actions + jnp.sqrt(1.0 - abar) * eps
    pred = jax.vmap(eps_fn, in_axes=(None, 0, 0, 0))(params, obs, noisy, t)
    return jnp.sum((pred - eps) ** 2, axis=-1)


def weighted_denoising_loss(eps_fn: Callable, params, key: jax.Array, obs: jax.Array,
                            actions: jax.Array, weights: jax.Array, *,
                            num_steps: int) -> jax.Array:
    """``sum_i w_i err_i / max(sum_i w_i, 1e-8)`` over :func:`denoising_errors` (weights are
    treated as constants)."""
    w = jax.lax.stop_gradient(weights)
    err = denoising_errors(eps_fn, params, key, obs, actions, num_steps=num_steps)
    return jnp.sum(w * err) / jnp.maximum(jnp.sum(w), 1e-8)
