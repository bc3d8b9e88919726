"""The actors CGPO is compared with, on CGPO's critics (issue 25).

* ``qvpo`` (Ding et al., 2024): regress the policy on the best of ``n_cand`` of its own plain
  samples per state, weight ``Q 1[Q > 0]`` ("qcut"), plus the entropy term (uniform actions
  weighted ``alpha_ent`` times the state's weight).
* ``qgrad`` (Diffusion-QL / DACER's actor without their extras): maximise ``Q(s, a_theta(s))``
  by backpropagating through the whole sampler scan (``make_agent`` builds it inline).
* ``sac`` (Haarnoja et al., 2018): tanh-Gaussian actor, ``alpha log pi - Q``, automatic
  temperature with target entropy ``-A``.

Shared helper: :func:`regression_loss`, the weighted denoising loss with the entropy term,
used by cgpo and qvpo.
"""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp
import optax

from jaxpapers.rl.diffusion_policy import denoising_errors, sample_actions

__all__ = ["regression_loss", "qvpo_actor_loss", "sac_sample", "sac_actor_loss",
           "sac_temperature_step"]


def regression_loss(eps_fn: Callable, obs: jax.Array, targets: jax.Array, weights: jax.Array,
                    alpha_ent, key_loss: jax.Array, key_uniform: jax.Array, num_steps: int,
                    n_uniform: int) -> Callable:
    """``loss(params)``: ``sum_i w_i (err(s_i, a_i) + alpha_ent mean_j err(s_i, u_ij)) /
    sum_i w_i``, ``u_ij ~ U[-1, 1]^A`` (QVPO's entropy regulariser, eq. 12, with the state's
    weight), ``err`` the denoising error of :func:`denoising_errors`.

    Args:
      obs: [B, O]; targets: [B, A] the actions to regress on; weights: [B] (constants).
    """
    b, a_dim = targets.shape
    w = jax.lax.stop_gradient(weights)
    uni = jax.random.uniform(key_uniform, (b * n_uniform, a_dim), minval=-1.0, maxval=1.0)
    obs_u = jnp.repeat(obs, n_uniform, axis=0)
    k_main, k_uni = jax.random.split(key_loss)

    def loss(params):
        err = denoising_errors(eps_fn, params, k_main, obs, targets, num_steps=num_steps)
        err_u = denoising_errors(eps_fn, params, k_uni, obs_u, uni,
                                 num_steps=num_steps).reshape(b, n_uniform).mean(axis=1)
        return jnp.sum(w * (err + alpha_ent * err_u)) / jnp.maximum(jnp.sum(w), 1e-8)

    return loss


def qvpo_actor_loss(eps_fn: Callable, actor_params, q_batched: Callable, obs: jax.Array,
                    alpha_ent, key: jax.Array, key_loss: jax.Array, key_uniform: jax.Array, *,
                    num_steps: int, act_dim: int, n_cand: int, n_uniform: int):
    """QVPO's actor: best of ``n_cand`` plain samples per state by Q, weight ``max(Q, 0)``.

    Returns ``(loss(params), metrics)``.
    """
    b = obs.shape[0]
    rep = jnp.repeat(obs, n_cand, axis=0)
    cand = sample_actions(eps_fn, actor_params, key, rep, num_steps=num_steps, act_dim=act_dim)
    qs = q_batched(rep, cand).reshape(b, n_cand)
    best = jnp.argmax(qs, axis=1)
    targets = jax.lax.stop_gradient(cand.reshape(b, n_cand, act_dim)[jnp.arange(b), best])
    w = jnp.maximum(qs[jnp.arange(b), best], 0.0)
    loss = regression_loss(eps_fn, obs, targets, w, alpha_ent, key_loss, key_uniform,
                           num_steps, n_uniform)
    return loss, {"weight_zero_share": jnp.mean(w == 0.0)}


def sac_sample(net, params, key: jax.Array, obs: jax.Array):
    """``(actions [B, A] in (-1, 1), log pi [B])`` of the tanh-Gaussian actor (reparameterised;
    the log-density includes the tanh Jacobian ``log(1 - tanh(u)^2)``)."""
    mean, log_std = net.apply(params, obs)
    std = jnp.exp(log_std)
    u = mean + std * jax.random.normal(key, mean.shape, mean.dtype)
    logp_u = jnp.sum(-0.5 * ((u - mean) / std) ** 2 - log_std - 0.5 * jnp.log(2 * jnp.pi),
                     axis=-1)
    # log(1 - tanh(u)^2) = 2 (log 2 - u - softplus(-2u)), numerically stable
    log_jac = jnp.sum(2.0 * (jnp.log(2.0) - u - jax.nn.softplus(-2.0 * u)), axis=-1)
    return jnp.tanh(u), logp_u - log_jac


def sac_actor_loss(net, q_batched: Callable, obs: jax.Array, alpha, key: jax.Array) -> Callable:
    """``loss(params) = mean(alpha log pi(a|s) - Q(s, a))``, a reparameterised."""
    alpha = jax.lax.stop_gradient(alpha)

    def loss(params):
        a, logp = sac_sample(net, params, key, obs)
        return jnp.mean(alpha * logp - q_batched(obs, a))

    return loss


def sac_temperature_step(net, actor_params, log_alpha: jax.Array, opt_state,
                         optimizer: optax.GradientTransformation, key: jax.Array,
                         obs: jax.Array, *, target_entropy: float):
    """One Adam step on ``-log_alpha (log pi + target_entropy)``; returns (loss, log_alpha,
    opt_state)."""
    _, logp = sac_sample(net, actor_params, key, obs)
    logp = jax.lax.stop_gradient(logp)

    def loss(la):
        return -jnp.mean(la * (logp + target_entropy))

    val, g = jax.value_and_grad(loss)(log_alpha)
    upd, opt_state = optimizer.update(g, opt_state, log_alpha)
    return val, optax.apply_updates(log_alpha, upd), opt_state
