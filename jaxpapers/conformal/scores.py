"""Nonconformity scores for regression (absolute residual, CQR) and classification (LAC, APS).

All functions are unbatched-in-spirit elementwise maps: they accept any leading batch shape.
A larger score means "less conforming"; a candidate is in the prediction set when its score is
at most the calibrated threshold.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

__all__ = ["abs_residual_score", "cqr_score", "lac_score", "aps_score", "aps_all_scores",
           "lac_all_scores"]


def abs_residual_score(y: ArrayLike, pred: ArrayLike) -> jax.Array:
    """|y - f(x)|.

    Args:
      y: [...] targets. pred: [...] point predictions (same shape).

    Returns:
      [...] scores.

    >>> import jax.numpy as jnp
    >>> abs_residual_score(jnp.array([1.0, 2.0]), jnp.array([1.5, 1.0])).tolist()
    [0.5, 1.0]
    """
    y, pred = jnp.asarray(y), jnp.asarray(pred)
    if y.shape != pred.shape:
        raise ValueError(f"y and pred must have the same shape, got {y.shape} and {pred.shape}")
    return jnp.abs(y - pred)


def cqr_score(y: ArrayLike, lower: ArrayLike, upper: ArrayLike) -> jax.Array:
    """Conformalized quantile regression score max(lo(x) - y, y - hi(x)) (Romano et al., 2019).

    Args:
      y, lower, upper: [...] targets and the quantile regressor's lower/upper predictions.

    Returns:
      [...] scores (negative inside the band). The interval is [lo - q, hi + q].
    """
    y, lower, upper = jnp.asarray(y), jnp.asarray(lower), jnp.asarray(upper)
    if not (y.shape == lower.shape == upper.shape):
        raise ValueError(f"y, lower and upper must have the same shape, got {y.shape}, "
                         f"{lower.shape}, {upper.shape}")
    return jnp.maximum(lower - y, y - upper)


def lac_all_scores(probs: ArrayLike) -> jax.Array:
    """LAC (least ambiguous set) scores of every class: 1 - p_k.

    Args:
      probs: [..., K] class probabilities.

    Returns:
      [..., K] scores.
    """
    return 1.0 - jnp.asarray(probs)


def lac_score(probs: ArrayLike, labels: ArrayLike) -> jax.Array:
    """LAC score of the given label: 1 - p_y.

    Args:
      probs: [..., K] class probabilities. labels: [...] integer labels.

    Returns:
      [...] scores.

    >>> import jax.numpy as jnp
    >>> lac_score(jnp.array([[0.75, 0.25]]), jnp.array([1])).tolist()
    [0.75]
    """
    probs = jnp.asarray(probs)
    labels = jnp.asarray(labels)
    if probs.shape[:-1] != labels.shape:
        raise ValueError(f"labels must have shape {probs.shape[:-1]}, got {labels.shape}")
    p = jnp.take_along_axis(probs, labels[..., None].astype(jnp.int32), axis=-1)[..., 0]
    return 1.0 - p


def aps_all_scores(probs: ArrayLike, u: ArrayLike | None = None) -> jax.Array:
    """APS scores of every class (Romano, Sesia & Candes, 2020).

    The score of class k is the total mass of the classes ranked strictly above k plus
    ``u * p_k`` (randomised, u ~ U(0, 1)) or plus ``p_k`` (``u=None``, deterministic). Ties in
    probability are broken by class index.

    Args:
      probs: [..., K] class probabilities.
      u: [...] uniform draws for the randomised score, or None.

    Returns:
      [..., K] scores in [0, 1].
    """
    probs = jnp.asarray(probs)
    order = jnp.argsort(-probs, axis=-1, stable=True)
    sorted_p = jnp.take_along_axis(probs, order, axis=-1)
    above = jnp.cumsum(sorted_p, axis=-1) - sorted_p  # mass strictly above, in sorted order
    inv = jnp.argsort(order, axis=-1)
    above = jnp.take_along_axis(above, inv, axis=-1)
    w = jnp.ones(probs.shape[:-1]) if u is None else jnp.asarray(u)
    return above + w[..., None] * probs


def aps_score(probs: ArrayLike, labels: ArrayLike, u: ArrayLike | None = None) -> jax.Array:
    """APS score of the given label (see :func:`aps_all_scores`).

    Args:
      probs: [..., K] probabilities. labels: [...] integer labels. u: [...] uniforms or None.

    Returns:
      [...] scores.
    """
    probs = jnp.asarray(probs)
    labels = jnp.asarray(labels)
    if probs.shape[:-1] != labels.shape:
        raise ValueError(f"labels must have shape {probs.shape[:-1]}, got {labels.shape}")
    all_s = aps_all_scores(probs, u)
    return jnp.take_along_axis(all_s, labels[..., None].astype(jnp.int32), axis=-1)[..., 0]
