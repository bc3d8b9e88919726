"""Slate GLM environments as pure functions (Slate-GLM-OFU's synthetic setting).

Letters: N slots, K items per slot, d item dimension, P context pool size.

Items are uniform in [-1, 1]^d rescaled to norm exactly 1/sqrt(N) (so a slate, the concatenation
of one item per slot, has norm 1); theta* is uniform in [-1, 1]^{N d} rescaled to the norm
``theta_norm`` (the kappa knob: kappa = 1 / mu'(theta_norm) bounds 1/mu' over all slates).
Reward: Bernoulli(mu(<slate, theta*>)) with a logistic or probit mu.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from jaxpapers.bandits.glm import Link, get_link
from jaxpapers.core import checks
from jaxpapers.core.pytree import dataclass, static_field

__all__ = ["SlateEnv", "make_slate_env", "make_slate_env_from_pool", "env_contexts",
           "env_mean_reward", "env_sample_reward", "oracle_slate", "slate_features",
           "kappa_of", "CONTEXT_MODES"]

CONTEXT_MODES = ("fresh", "finite", "fixed")


@dataclass
class SlateEnv:
    """A slate GLM bandit environment (a pytree; ``link`` and ``mode`` are static).

    Attributes:
      theta_star: [N, d] true parameter, block i for slot i.
      pool: [P, N, K, d] context pool ("finite": P contexts drawn uniformly each round;
        "fixed": P = 1; "fresh": P = 1 placeholder, contexts drawn from the key).
      link: the GLM link.
      mode: one of "fresh", "finite", "fixed".
    """

    theta_star: jax.Array  # [N, d]
    pool: jax.Array  # [P, N, K, d]
    link: Link = static_field()
    mode: str = static_field()

    @property
    def shape(self) -> tuple[int, int, int]:
        """(N, K, d)."""
        return tuple(self.pool.shape[1:])


def _items(key, shape, num_slots):
    x = jax.random.uniform(key, shape, minval=-1.0, maxval=1.0)
    return x / jnp.linalg.norm(x, axis=-1, keepdims=True) / math.sqrt(num_slots)


def make_slate_env(key: jax.Array, *, num_slots: int, num_items: int, dim: int,
                   theta_norm: float, link: str = "logistic", mode: str = "fresh",
                   num_contexts: int = 5) -> SlateEnv:
    """Draw a synthetic slate GLM environment.

    Args:
      key: consumed; split into theta* and pool keys.
      num_slots: N >= 1.  num_items: K >= 1.  dim: d >= 1.
      theta_norm: ||theta*|| > 0 (larger means larger kappa).
      link: "logistic" or "probit".
      mode: "fresh" (new contexts every round), "finite" (``num_contexts`` contexts drawn with
        replacement), or "fixed" (one context).
      num_contexts: pool size for "finite".

    Returns:
      A :class:`SlateEnv`.

    >>> env = make_slate_env(jax.random.key(0), num_slots=3, num_items=5, dim=4, theta_norm=2.0)
    >>> env.shape
    (3, 5, 4)
    """
    for name, v in (("num_slots", num_slots), ("num_items", num_items), ("dim", dim)):
        checks.check_int(name, v, minimum=1)
    checks.check_range("theta_norm", theta_norm, low=0.0, low_open=True, scalar=True)
    checks.check_choice("mode", mode, CONTEXT_MODES)
    if mode == "finite":
        checks.check_int("num_contexts", num_contexts, minimum=1)
    k_theta, k_pool = jax.random.split(key)
    theta = jax.random.uniform(k_theta, (num_slots * dim,), minval=-1.0, maxval=1.0)
    theta = (theta / jnp.linalg.norm(theta) * theta_norm).reshape(num_slots, dim)
    p = num_contexts if mode == "finite" else 1
    pool = _items(k_pool, (p, num_slots, num_items, dim), num_slots)
    return SlateEnv(theta_star=theta, pool=pool, link=get_link(link), mode=mode)


def make_slate_env_from_pool(pool: jax.typing.ArrayLike, theta_star: jax.typing.ArrayLike, *,
                             link: str = "logistic", mode: str = "finite") -> SlateEnv:
    """An environment from user-given item features (validated).

    Args:
      pool: [P, N, K, d] finite item features.
      theta_star: [N, d] true parameter.
      link, mode: as in :func:`make_slate_env` ("fresh" is not allowed here).

    Raises:
      ValueError: wrong ranks, mismatched N or d, K < 1, non-finite values.

    >>> env = make_slate_env_from_pool(jnp.ones((2, 3, 4, 5)) / 5, jnp.zeros((3, 5)))
    >>> env.shape
    (3, 4, 5)
    """
    pool = np.asarray(pool, dtype=np.float32) if not isinstance(pool, jax.Array) else pool
    theta_star = jnp.asarray(theta_star)
    if pool.ndim != 4:
        raise ValueError(f"pool must have shape [P, N, K, d], got shape {tuple(pool.shape)}")
    p, n, k, d = pool.shape
    if p < 1 or n < 1 or k < 1 or d < 1:
        raise ValueError(f"pool dimensions [P, N, K, d] must all be >= 1 (K >= 1 items per slot), "
                         f"got {tuple(pool.shape)}")
    if theta_star.shape != (n, d):
        raise ValueError(f"theta_star must have shape [N, d] = {(n, d)} to match pool, got "
                         f"{tuple(theta_star.shape)}")
    checks.check_finite("pool", pool)
    checks.check_finite("theta_star", theta_star)
    checks.check_choice("mode (for a given pool)", mode, ("finite", "fixed"))
    if mode == "fixed" and p != 1:
        raise ValueError(f"mode 'fixed' needs a pool with P = 1, got P = {p}")
    return SlateEnv(theta_star=theta_star, pool=jnp.asarray(pool), link=get_link(link), mode=mode)


def env_contexts(env: SlateEnv, key: jax.Array, t: jax.typing.ArrayLike) -> jax.Array:
    """The contexts [N, K, d] of round ``t`` (``key`` consumed; ``t`` unused but traced)."""
    del t
    n, k, d = env.shape
    if env.mode == "fresh":
        return _items(key, (n, k, d), n).astype(env.pool.dtype)
    if env.mode == "fixed":
        return env.pool[0]
    return env.pool[jax.random.randint(key, (), 0, env.pool.shape[0])]


def slate_features(contexts: jax.Array, items: jax.Array) -> jax.Array:
    """The chosen items [N, d] of a slate ``items`` [N] (int) from ``contexts`` [N, K, d]."""
    return jnp.take_along_axis(contexts, items[:, None, None], axis=1)[:, 0]


def env_mean_reward(env: SlateEnv, slate: jax.Array) -> jax.Array:
    """mu(<slate, theta*>) for a slate [N, d]."""
    return env.link.mean(jnp.sum(slate * env.theta_star))


def env_sample_reward(env: SlateEnv, key: jax.Array, slate: jax.Array) -> jax.Array:
    """Bernoulli(mu(<slate, theta*>)) reward as a float scalar (``key`` consumed)."""
    return jax.random.bernoulli(key, env_mean_reward(env, slate)).astype(slate.dtype)


def oracle_slate(env: SlateEnv, contexts: jax.Array) -> jax.Array:
    """The best slate [N] (int32): since mu is increasing and <slate, theta*> = sum_i <x_i,
    theta*_i>, it is the per-slot argmax (O(N K d), no enumeration of the K^N slates)."""
    return jnp.argmax(jnp.einsum("nkd,nd->nk", contexts, env.theta_star), axis=1).astype(jnp.int32)


def kappa_of(env: SlateEnv) -> jax.Array:
    """1 / mu'(||theta*||): an upper bound on 1/mu'(<slate, theta*>) over all unit-norm slates."""
    return 1.0 / env.link.dmean(jnp.linalg.norm(env.theta_star))
