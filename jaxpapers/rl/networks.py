"""Flax (linen) networks of the diffusion-policy agents (issue 25).

All modules take inputs with any leading batch axes ``[..., F]``; parameters are plain pytrees
(``module.init`` / ``module.apply``), so agents pass them to pure functions.

* :class:`EpsMLP` -- the policy's noise predictor ``eps_theta(s, a_t, t)``: ``[s, a_t,
  emb(t)]`` through an MLP (mish activations, as DACER / QVPO), ``emb`` a 16-dim sinusoidal
  embedding of the integer timestep.
* :class:`QuantileCritics` -- N independent MLPs ``(s, a) -> [M]`` quantiles (TQC), stacked
  with ``nn.vmap``: output ``[..., N, M]``.
* :class:`ValueMLP` -- ``V(s) -> []`` (CGPO's value calibration).
* :class:`TanhGaussianActor` -- SAC's actor: mean and log-std of a Gaussian squashed by tanh.
"""

from __future__ import annotations

from typing import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

__all__ = ["EpsMLP", "QuantileCritics", "ValueMLP", "TanhGaussianActor", "timestep_embedding",
           "LOG_STD_MIN", "LOG_STD_MAX"]

LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0


def timestep_embedding(t: jax.Array, dim: int = 16) -> jax.Array:
    """[...] integer timesteps -> [..., dim] sinusoidal embedding (Vaswani et al. 2017)."""
    half = dim // 2
    freqs = jnp.exp(-jnp.log(10000.0) * jnp.arange(half) / max(half - 1, 1))
    ang = jnp.asarray(t, jnp.float32)[..., None] * freqs
    return jnp.concatenate([jnp.sin(ang), jnp.cos(ang)], axis=-1)


class _MLP(nn.Module):
    hidden: Sequence[int]
    out: int
    act: str = "mish"

    @nn.compact
    def __call__(self, x):
        act = {"mish": jax.nn.mish, "relu": jax.nn.relu}[self.act]
        for h in self.hidden:
            x = act(nn.Dense(h)(x))
        return nn.Dense(self.out)(x)


class EpsMLP(nn.Module):
    """``eps_theta(obs [..., O], a_t [..., A], t [...] int) -> [..., A]``."""

    act_dim: int
    hidden: Sequence[int] = (128, 128)
    time_dim: int = 16

    @nn.compact
    def __call__(self, obs, a_t, t):
        emb = timestep_embedding(jnp.broadcast_to(t, a_t.shape[:-1]), self.time_dim)
        x = jnp.concatenate([obs, a_t, emb], axis=-1)
        return _MLP(tuple(self.hidden), self.act_dim)(x)


class QuantileCritics(nn.Module):
    """``(obs [..., O], act [..., A]) -> [..., N, M]``: N critics of M quantile atoms each."""

    num_critics: int = 2
    num_quantiles: int = 25
    hidden: Sequence[int] = (128, 128)

    @nn.compact
    def __call__(self, obs, act):
        x = jnp.concatenate([obs, act], axis=-1)
        ens = nn.vmap(_MLP, variable_axes={"params": 0}, split_rngs={"params": True},
                      in_axes=None, out_axes=-2, axis_size=self.num_critics)
        return ens(tuple(self.hidden), self.num_quantiles, "relu")(x)


class ValueMLP(nn.Module):
    """``V(obs [..., O]) -> [...]``."""

    hidden: Sequence[int] = (128, 128)

    @nn.compact
    def __call__(self, obs):
        return _MLP(tuple(self.hidden), 1, "relu")(obs)[..., 0]


class TanhGaussianActor(nn.Module):
    """``obs [..., O] -> (mean [..., A], log_std [..., A])`` (log-std clipped to [-5, 2])."""

    act_dim: int
    hidden: Sequence[int] = (128, 128)

    @nn.compact
    def __call__(self, obs):
        out = _MLP(tuple(self.hidden), 2 * self.act_dim, "relu")(obs)
        mean, log_std = jnp.split(out, 2, axis=-1)
        return mean, jnp.clip(log_std, LOG_STD_MIN, LOG_STD_MAX)
