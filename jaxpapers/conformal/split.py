"""Split conformal prediction (Vovk et al., 2005; Lei et al., 2018).

With n exchangeable calibration scores and a test score, the threshold
``q = S_(ceil((n + 1)(1 - alpha)))`` (the k-th smallest calibration score; +inf when k > n) gives
``P(s_test <= q) >= 1 - alpha`` for any score distribution, and ``< 1 - alpha + 1/(n + 1)``
without ties.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from jaxpapers.conformal._checks import check_scores
from jaxpapers.core import checks

__all__ = ["conformal_rank", "split_conformal_quantile", "split_conformal_interval"]

# (n + 1)(1 - alpha) is computed in the working float precision; a value within this relative
# distance of an integer is taken to be that integer, so float32 rounding (e.g. 0.95f * 20 =
# 19.0000005) never moves the rank up by one. It is far below any meaningful change of alpha.
_RANK_RTOL = 1e-6


def conformal_rank(n: int | jax.Array, alpha: ArrayLike) -> jax.Array:
    """ceil((n + 1)(1 - alpha)) as an int32 (see the module note on rounding).

    Args:
      n: number of calibration scores. alpha: [] miscoverage level.

    Returns:
      [] int32 rank k (may exceed n).
    """
    x = (jnp.asarray(n, jnp.result_type(float)) + 1.0) * (1.0 - jnp.asarray(alpha))
    return jnp.ceil(x * (1.0 - _RANK_RTOL)).astype(jnp.int32)


def split_conformal_quantile(scores: ArrayLike, alpha: ArrayLike) -> jax.Array:
    """The split-CP threshold: the ceil((n + 1)(1 - alpha))-th smallest score, +inf past n.

    Unbatched; vmap over calibration sets.

    Args:
      scores: [n] calibration scores, n >= 1, no NaN.
      alpha: [] miscoverage level in (0, 1).

    Returns:
      [] threshold q; a test candidate with score <= q is in the prediction set.

    >>> import jax.numpy as jnp
    >>> float(split_conformal_quantile(jnp.arange(1.0, 20.0), 0.1))  # ceil(20 * 0.9) = 18
    18.0
    >>> float(split_conformal_quantile(jnp.arange(1.0, 5.0), 0.1))
    inf
    """
    check_scores(scores, "scores")
    checks.check_level("alpha", alpha)
    s = jnp.sort(jnp.asarray(scores))
    n = s.shape[0]
    k = conformal_rank(n, alpha)
    val = s[jnp.clip(k - 1, 0, n - 1)]
    return jnp.where(k > n, jnp.inf, jnp.where(k < 1, -jnp.inf, val))


def split_conformal_interval(pred: ArrayLike, q: ArrayLike) -> tuple[jax.Array, jax.Array]:
    """Absolute-residual interval [pred - q, pred + q].

    Args:
      pred: [...] point predictions. q: [] threshold.

    Returns:
      (lower, upper), each [...].
    """
    pred = jnp.asarray(pred)
    return pred - q, pred + q
