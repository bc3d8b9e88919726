"""Reference-score sources for RSA-CP.

RSA-CP's coverage analysis treats the reference scores as fixed (independent of the real
calibration and test scores). Sources here:

* :func:`gamma_reference`, :func:`normal_reference`: draws from a parametric family fitted by
  moments to *some* scores (the release fits them to the real calibration scores; that makes the
  reference depend on the calibration data, which the worst-case bound does not cover).
* :func:`generator_reference`: scores from a user-supplied synthetic generator ``fn(key, n)``.
* Out-of-fold residuals of a held-out model live in :mod:`jaxpapers.conformal.sklearn`
  (``oof_residual_reference``), since they need a scikit-learn estimator.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from jaxpapers.conformal._checks import check_scores
from jaxpapers.core import checks

__all__ = ["gamma_reference", "normal_reference", "generator_reference"]


def gamma_reference(key: jax.Array, scores: ArrayLike, *, num: int) -> jax.Array:
    """``num`` draws from the Gamma law with the mean and variance of ``scores``.

    Args:
      key: a ``jax.random.key``; consumed.
      scores: [M] positive scores to match (M >= 2, not all equal).
      num: N, number of reference scores (static).

    Returns:
      [N] reference scores.

    >>> import jax, jax.numpy as jnp
    >>> gamma_reference(jax.random.key(0), jnp.array([1.0, 2.0, 3.0]), num=5).shape
    (5,)
    """
    check_scores(scores, "scores", min_size=2)
    num = checks.check_int("num", num, minimum=1)
    s = jnp.asarray(scores)
    s = s.astype(jnp.result_type(s.dtype, float))
    mean, var = jnp.mean(s), jnp.var(s, ddof=1)
    shape = mean**2 / var
    scale = var / mean
    return jax.random.gamma(key, shape, (num,), dtype=s.dtype) * scale


def normal_reference(key: jax.Array, scores: ArrayLike, *, num: int,
                     fold: bool = False) -> jax.Array:
    """``num`` draws from the Normal law with the mean and variance of ``scores``.

    Args:
      key: a ``jax.random.key``; consumed.
      scores: [M] scores to match (M >= 2).
      num: N (static).
      fold: return absolute values (for nonnegative scores).

    Returns:
      [N] reference scores.
    """
    check_scores(scores, "scores", min_size=2)
    num = checks.check_int("num", num, minimum=1)
    s = jnp.asarray(scores)
    x = jnp.mean(s) + jnp.std(s, ddof=1) * jax.random.normal(key, (num,), dtype=s.dtype)
    return jnp.abs(x) if fold else x


def generator_reference(key: jax.Array, generate_fn: Callable[[jax.Array, int], jax.Array], *,
                        num: int) -> jax.Array:
    """Reference scores from a user-supplied synthetic generator.

    Args:
      key: a ``jax.random.key``; consumed (passed to ``generate_fn``).
      generate_fn: ``fn(key, num) -> [num]`` scores, e.g. residuals of a model on synthetic data.
      num: N (static).

    Returns:
      [N] reference scores.
    """
    num = checks.check_int("num", num, minimum=1)
    out = jnp.asarray(generate_fn(key, num))
    if out.shape != (num,):
        raise ValueError(f"generate_fn must return shape ({num},), got {out.shape}")
    return out
