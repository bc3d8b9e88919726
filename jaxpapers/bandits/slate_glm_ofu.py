"""Slate-GLM-OFU (fully adaptive baseline; Goyal et al., "Efficient and optimal algorithms for
contextual slate bandits"), reconstructed from the authors' numpy code
(tanmaygoyal258/Logistic_Slate_Bandits, ``Slate_GLM_OFU.py``).

Letters: N slots, K items per slot, d item dimension, D = N d.

Per round: one ECOLog-style online step for the global estimate theta in R^D, a second step for
theta_bar (data-dependent radius), V~ (D x D) and per-slot V_i (d x d) updated with
mu'(<theta, x>) x x^T, and a slot-wise optimistic choice
``argmax_j <theta_i, x_ij> + r_t ||x_ij||_{V_i^{-1}}`` (O(N K d^2) per round).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from jaxpapers.bandits._types import SlateAlgo, no_refit
from jaxpapers.bandits.glm import (Link, LOGISTIC, argmax_random_ties, glm_nll, sherman_morrison,
                                   slot_sq_norms)
from jaxpapers.core import checks
from jaxpapers.core.pytree import dataclass

__all__ = ["OFUState", "make_slate_glm_ofu", "online_step", "ofu_radius"]


@dataclass
class OFUState:
    """Slate-GLM-OFU state.

    Attributes:
      theta: [N, d] current estimate.
      vtilde: [D, D] global design matrix  lambda I + sum mu'(<theta, x_s>) x_s x_s^T.
      vtilde_inv: [D, D] its inverse.
      v_inv: [N, d, d] per-slot inverses of V_i = lambda I + sum mu' x_si x_si^T.
      cum_loss: [] running data-dependent radius correction.
      t: [] int32 rounds observed (the authors' ``ctr`` - 1).
    """

    theta: jax.Array  # [N, d]
    vtilde: jax.Array  # [D, D]
    vtilde_inv: jax.Array  # [D, D]
    v_inv: jax.Array  # [N, d, d]
    cum_loss: jax.Array  # []
    t: jax.Array  # [] int32


def online_step(link: Link, theta: jax.Array, x: jax.Array, vtilde_inv: jax.Array,
                target: jax.typing.ArrayLike, scale: jax.typing.ArrayLike, radius,
                num_iters: int = 12) -> jax.Array:
    """One ECOLog online step:  argmin_theta  scale * L(<x, theta>) + 1/2 ||theta - theta_t||^2_V~.

    With L'(z) = mu(z) - target (``scale`` = 1: the log-loss of reward ``target``; ``scale`` = 2,
    ``target`` = 1/2: the theta_bar objective whose gradient is 2 mu - 1). The minimiser is
    theta_t - c V~^{-1} x where c solves the scalar equation c = scale (mu(z_t - c s) - target),
    s = ||x||^2_{V~^{-1}}; solved by Newton (g' = 1 + scale mu' s > 0). The authors run projected
    gradient descent in sqrt(V~) coordinates for the same objective; we then project onto the
    Euclidean ball ||theta|| <= radius (they project onto an ellipsoid; see the experiment README).

    Args:
      theta: [D] theta_t.  x: [D] slate.  vtilde_inv: [D, D].  radius: S.
    Returns:
      [D] the new estimate.
    """
    vx = vtilde_inv @ x
    s = x @ vx
    z0 = x @ theta

    def newton(_, c):
        z = z0 - c * s
        g = c - scale * (link.mean(z) - target)
        return c - g / (1.0 + scale * link.dmean(z) * s)

    c = jax.lax.fori_loop(0, num_iters, newton, jnp.zeros_like(z0))
    new = theta - c * vx
    nrm = jnp.linalg.norm(new)
    return jnp.where(nrm > radius, new * (radius / jnp.maximum(nrm, 1e-30)), new)


def ofu_radius(t, cum_loss, *, l2reg: float, param_norm_ub: float, failure_level: float):
    """Confidence radius r_t (Slate-GLM-OFU ``update_ucb_bonus``; ECOLog Thm. 3 refined):
    gamma = sqrt(l)/2 + 2 log(2 sqrt(1 + t/(4 l)) / delta) / sqrt(l);
    r^2 = max(0, 2 l S^2 + (1 + S)^2 gamma + cum_loss), with t the authors' ctr."""
    ctr = t.astype(cum_loss.dtype) + 1.0
    gamma = math.sqrt(l2reg) / 2 + 2 * jnp.log(
        2 * jnp.sqrt(1 + ctr / (4 * l2reg)) / failure_level) / math.sqrt(l2reg)
    r2 = 2 * l2reg * param_norm_ub ** 2 + (1 + param_norm_ub) ** 2 * gamma + cum_loss
    return jnp.sqrt(jnp.maximum(r2, 0.0))


def ofu_observe(link: Link, state: OFUState, contexts: jax.Array, items: jax.Array,
                reward: jax.Array, *, param_norm_ub: float) -> OFUState:
    """The Slate-GLM-OFU parameter update (``update_parameters``) after playing ``items``."""
    n, _, d = contexts.shape
    x_slots = jnp.take_along_axis(contexts, items[:, None, None], axis=1)[:, 0]  # [N, d]
    x = x_slots.reshape(-1)
    theta = state.theta.reshape(-1)
    theta_new = online_step(link, theta, x, state.vtilde_inv, reward, 1.0, param_norm_ub)
    theta_bar = online_step(link, theta_new, x, state.vtilde_inv, 0.5, 2.0, param_norm_ub)
    diff = theta_new - theta_bar
    disc = jnp.maximum(diff @ state.vtilde @ diff, 0.0)
    sens = link.dmean(x @ theta_new)
    vtilde = state.vtilde + sens * jnp.outer(x, x)
    vtilde_inv = sherman_morrison(state.vtilde_inv, x, sens)
    loss_theta = glm_nll(link, x @ theta_new, reward)
    loss_bar = glm_nll(link, x @ theta_bar, reward)
    cum_loss = state.cum_loss + 2 * (1 + param_norm_ub) * (loss_bar - loss_theta) - 0.5 * disc
    v_inv = jax.vmap(sherman_morrison, in_axes=(0, 0, None))(state.v_inv, x_slots, sens)
    return OFUState(theta=theta_new.reshape(n, d), vtilde=vtilde, vtilde_inv=vtilde_inv,
                    v_inv=v_inv, cum_loss=cum_loss, t=state.t + 1)


def make_slate_glm_ofu(*, num_slots: int, num_items: int, dim: int, param_norm_ub: float,
                       link: Link = LOGISTIC, l2reg: float = 5.0, failure_level: float = 0.05,
                       dtype=jnp.float32) -> SlateAlgo:
    """Slate-GLM-OFU as an ``init / select / update`` triple (unbatched; vmap for seeds).

    Args:
      num_slots: N.  num_items: K.  dim: d.
      param_norm_ub: S, an upper bound on ||theta*|| (the authors use int(||theta*||) + 1).
      link: GLM link used by the learner's loss (the authors use the sigmoid loss also for probit
        rewards; we use the environment's link, see the README).
      l2reg: lambda (authors: 5).  failure_level: delta.

    Returns:
      A :class:`SlateAlgo`; ``num_switches`` is the number of rounds (it updates every round).

    >>> algo = make_slate_glm_ofu(num_slots=2, num_items=3, dim=2, param_norm_ub=2.0)
    >>> s = algo.init(jax.random.key(0))
    >>> items, s = algo.select(s, jax.random.key(1), jnp.ones((2, 3, 2)) / 2)
    >>> items.shape
    (2,)
    """
    _validate(num_slots, num_items, dim, param_norm_ub, l2reg, failure_level)
    n, k, d = num_slots, num_items, dim
    big = n * d

    def init(key):
        del key
        return OFUState(theta=jnp.zeros((n, d), dtype),
                        vtilde=l2reg * jnp.eye(big, dtype=dtype),
                        vtilde_inv=jnp.eye(big, dtype=dtype) / l2reg,
                        v_inv=jnp.broadcast_to(jnp.eye(d, dtype=dtype) / l2reg, (n, d, d)),
                        cum_loss=jnp.zeros((), dtype), t=jnp.zeros((), jnp.int32))

    def select(state, key, contexts):
        r = ofu_radius(state.t, state.cum_loss, l2reg=l2reg, param_norm_ub=param_norm_ub,
                       failure_level=failure_level)
        scores = (jnp.einsum("nkd,nd->nk", contexts, state.theta)
                  + r * jnp.sqrt(slot_sq_norms(contexts, state.v_inv)))
        return argmax_random_ties(key, scores), state

    def observe(state, contexts, items, reward):
        return ofu_observe(link, state, contexts, items, reward, param_norm_ub=param_norm_ub)

    return SlateAlgo(init=init, select=select,
                     **no_refit(observe, num_switches=lambda s: s.t, name="slate_glm_ofu"))


def _validate(n, k, d, s, l2reg, delta):
    for name, v in (("num_slots", n), ("num_items", k), ("dim", d)):
        checks.check_int(name, v, minimum=1)
    checks.check_range("param_norm_ub", s, low=0.0, low_open=True, scalar=True)
    checks.check_range("l2reg", l2reg, low=0.0, low_open=True, scalar=True)
    checks.check_level("failure_level", delta)
