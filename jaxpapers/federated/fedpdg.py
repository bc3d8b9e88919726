"""FedPDG building blocks: prediction discrepancy, budgeted selection, DPO pairs, balanced baseline.

**Reconstruction.** FedPDG ("We Generate What You Need", ICML 2026; no official code, no public
setup) generates data for label-skewed clients with a server-side diffusion model and keeps, for
each client, the generated samples where the global model is right and the client's model is
not. Every step below is our reading of the abstract (see ``/work/shared/papers/fedpdg.md``),
not the authors' code:

* :func:`prediction_discrepancy`: ``delta_k(x) = max(0, p_global(c|x) - p_local_k(c|x))`` for a
  candidate ``x`` generated for class ``c``: high where the global model knows a region that
  client ``k``'s model does not.
* :func:`select_top`: each client keeps its ``budget`` highest-scoring candidates.
* :func:`preference_pairs`: per class, the best-scored third of the candidates are paired with
  the worst-scored third (best with worst) as Diffusion-DPO winners / losers
  (:func:`jaxpapers.diffusion.train_dpo`).
* :func:`balanced_allocation`: the balance-oriented baseline (Gen-FedSD style), which spends the
  budget to move each client's class counts toward uniform.

All functions are pure, unbatched over clients (vmap them over a leading client axis) and work
under ``jax.jit``; the budgets are traced integers, class counts and fractions are static.

>>> import jax.numpy as jnp
>>> select_top(jnp.array([0.1, 0.9, 0.5, 0.9]), 2).tolist()
[False, True, False, True]
"""

from __future__ import annotations

from fractions import Fraction

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from jaxpapers.core.checks import check_finite, check_int, check_ndim, check_range, concrete

__all__ = ["prediction_discrepancy", "select_top", "balanced_allocation", "preference_pairs"]

# fractions are turned into exact rationals with a denominator up to this bound (1/3 stays 1/3)
_MAX_DENOMINATOR = 1000


def _check_budget(budget: ArrayLike) -> jax.Array:
    """An integer scalar ``>= 0`` (value checked only when concrete); returned as an array."""
    if jnp.ndim(budget) != 0:
        raise ValueError(f"budget must be a scalar, got shape {tuple(jnp.shape(budget))}")
    if isinstance(budget, (bool, np.bool_)) or not jnp.issubdtype(jnp.result_type(budget),
                                                                  jnp.integer):
        raise TypeError(f"budget must be an integer, got {type(budget).__name__} {budget!r}")
    v = concrete(budget)
    if v is not None and int(v) < 0:
        raise ValueError(f"budget must be >= 0, got {int(v)}")
    return jnp.asarray(budget)


def _check_labels(name: str, labels, n: int, num_classes: int) -> None:
    if jnp.shape(labels) != (n,):
        raise ValueError(f"{name} must have shape ({n},), got {tuple(jnp.shape(labels))}")
    if not jnp.issubdtype(jnp.result_type(labels), jnp.integer):
        raise TypeError(f"{name} must be integer class ids, got dtype {jnp.result_type(labels)}")
    v = concrete(labels)
    if v is not None and v.size and (v.min() < 0 or v.max() >= num_classes):
        raise ValueError(f"{name} must lie in [0, {num_classes}), got values in "
                         f"[{int(v.min())}, {int(v.max())}]")


def prediction_discrepancy(p_global: ArrayLike, p_local: ArrayLike,
                           labels: ArrayLike) -> jax.Array:
    """Per-candidate discrepancy ``delta_i = max(0, p_global[i, c_i] - p_local[i, c_i])``.

    FedPDG (reconstruction, module docstring): a candidate generated for class ``c_i`` that the
    global model classifies confidently but the client's local model does not lies in a region
    the client lacks. Takes class *probabilities* (apply ``jax.nn.softmax`` to logits first), so
    ``delta`` lies in ``[0, 1]``.

    Args:
      p_global: ``[N, C]`` global model's class probabilities of the ``N`` candidates.
      p_local: ``[N, C]`` the client's local model's probabilities of the same candidates.
      labels: ``[N]`` int, the class each candidate was generated for, in ``[0, C)``.

    Returns:
      ``[N]`` discrepancies in ``[0, 1]`` (same float dtype as the inputs).

    Raises:
      ValueError: shapes do not match (named), a concrete probability is outside ``[0, 1]``, or
        a concrete label is outside ``[0, C)``.

    >>> import jax.numpy as jnp
    >>> pg = jnp.array([[0.9, 0.1], [0.2, 0.8], [0.5, 0.5]])
    >>> pl = jnp.array([[0.3, 0.7], [0.1, 0.9], [0.5, 0.5]])
    >>> [round(float(d), 3) for d in prediction_discrepancy(pg, pl, jnp.array([0, 1, 0]))]
    [0.6, 0.0, 0.0]
    """
    check_ndim("p_global", p_global, 2, "[N, C]")
    if jnp.shape(p_local) != jnp.shape(p_global):
        raise ValueError(f"p_local must have the shape of p_global {tuple(jnp.shape(p_global))}, "
                         f"got {tuple(jnp.shape(p_local))}")
    n, c = jnp.shape(p_global)
    _check_labels("labels", labels, n, c)
    check_range("p_global", p_global, low=0.0, high=1.0)
    check_range("p_local", p_local, low=0.0, high=1.0)
    labels = jnp.asarray(labels)[:, None]
    pg = jnp.take_along_axis(jnp.asarray(p_global), labels, axis=1)[:, 0]
    pl = jnp.take_along_axis(jnp.asarray(p_local), labels, axis=1)[:, 0]
    return jnp.maximum(pg - pl, 0.0)


def _descending_order(scores: jax.Array, *groups: jax.Array) -> jax.Array:
    """Indices sorting by ``groups`` (first most significant), then score descending, then index.

    ``jnp.lexsort`` is stable and sorts by its last key first; the index tie-break comes from
    stability. Scores are negated, so ``-0.0`` and ``0.0`` tie (both compare equal).
    """
    return jnp.lexsort((-scores,) + tuple(reversed(groups)))


def _inverse_permutation(order: jax.Array) -> jax.Array:
    n = order.shape[0]
    return jnp.zeros(n, jnp.int32).at[order].set(jnp.arange(n, dtype=jnp.int32))


def select_top(scores: ArrayLike, budget: ArrayLike, *,
               valid: ArrayLike | None = None) -> jax.Array:
    """Mask of the ``budget`` highest scores among the valid entries.

    FedPDG (reconstruction): each client keeps its top-``budget`` candidates by discrepancy.
    Ties are broken by the lower index; invalid entries are never selected, so the mask holds
    ``min(budget, number of valid entries)`` trues. Jittable with a traced ``budget`` (a stable
    sort and ``rank < budget``), vmappable over clients.

    Args:
      scores: ``[N]`` finite float scores (higher is better).
      budget: integer scalar ``>= 0``, possibly traced; ``budget >= N`` selects every valid entry.
      valid: optional ``[N]`` bool; ``False`` entries are never selected (default: all valid).

    Returns:
      ``[N]`` bool selection mask.

    Raises:
      TypeError: ``budget`` is not an integer.
      ValueError: ``scores`` is not 1-D or holds NaN / inf, ``valid`` has the wrong shape,
        ``budget`` is not a scalar or a concrete ``budget`` is negative.

    >>> import jax.numpy as jnp
    >>> s = jnp.array([3.0, 1.0, 2.0, 5.0])
    >>> select_top(s, 2, valid=jnp.array([True, True, True, False])).tolist()
    [True, False, True, False]
    """
    check_ndim("scores", scores, 1, "[N]")
    check_finite("scores", scores)
    budget = _check_budget(budget)
    n = jnp.shape(scores)[0]
    if valid is None:
        valid = jnp.ones(n, bool)
    elif jnp.shape(valid) != (n,):
        raise ValueError(f"valid must have shape ({n},), got {tuple(jnp.shape(valid))}")
    valid = jnp.asarray(valid, bool)
    order = _descending_order(jnp.asarray(scores), (~valid).astype(jnp.int32))
    rank = _inverse_permutation(order)
    return (rank < budget) & valid


def balanced_allocation(class_counts: ArrayLike, budget: ArrayLike) -> jax.Array:
    """Balance-oriented baseline: per-class numbers of synthetic samples that sum to ``budget``.

    Water-filling: the result equals giving the ``budget`` samples one at a time, each to the
    class whose (already augmented) count is smallest, ties to the lowest class index. In closed
    form: with the counts sorted ``s_0 <= ... <= s_{C-1}``, let ``k`` be the largest number of
    classes whose lift to ``s_{k-1}`` costs at most the budget, ``cost_k = k s_{k-1} -
    sum_{i<k} s_i``; the water level is ``L = s_{k-1} + floor((budget - cost_k) / k)`` and every
    class below ``L`` is raised to it; the ``r = budget - (k L - sum_{i<k} s_i) < k`` units left
    go one each to the lowest-index classes at level ``L``. This is the allocation of a
    Gen-FedSD-style augmentation that moves every client toward uniform classes, the baseline
    FedPDG argues against (reconstruction).

    Jittable: ``budget`` may be traced; ``C`` is the static length of ``class_counts``.

    Args:
      class_counts: ``[C]`` non-negative integer counts of the client's real samples per class.
      budget: non-negative integer scalar, the number of synthetic samples to add.

    Returns:
      ``[C]`` non-negative integers (dtype of ``class_counts``) summing to ``budget``.

    Raises:
      TypeError: ``class_counts`` or ``budget`` is not an integer array.
      ValueError: ``class_counts`` is not a non-empty 1-D array of non-negative counts, or a
        concrete ``budget`` is negative or not a scalar.

    >>> import jax.numpy as jnp
    >>> balanced_allocation(jnp.array([5, 0, 2, 0]), 6).tolist()
    [0, 3, 1, 2]
    """
    check_ndim("class_counts", class_counts, 1, "[C]")
    if jnp.shape(class_counts)[0] < 1:
        raise ValueError("class_counts must hold at least one class, got shape (0,)")
    if not jnp.issubdtype(jnp.result_type(class_counts), jnp.integer):
        raise TypeError("class_counts must be integer counts, got dtype "
                        f"{jnp.result_type(class_counts)}")
    v = concrete(class_counts)
    if v is not None and v.min() < 0:
        raise ValueError(f"class_counts must be >= 0, got {v.tolist()}")
    budget = _check_budget(budget)
    counts = jnp.asarray(class_counts)
    dtype = counts.dtype
    budget = budget.astype(dtype)
    c = counts.shape[0]
    s = jnp.sort(counts)
    k_arr = jnp.arange(1, c + 1, dtype=dtype)
    prefix = jnp.cumsum(s)
    cost = k_arr * s - prefix  # cost_k of lifting the k smallest to s_{k-1}; nondecreasing
    k = jnp.sum(cost <= budget).astype(dtype)  # >= 1 because cost_1 = 0
    level = s[k - 1] + (budget - cost[k - 1]) // k
    lifted = counts <= level  # exactly the k smallest (level < s_k, see docstring)
    alloc = jnp.where(lifted, level - counts, 0)
    left = budget - jnp.sum(alloc)
    order_in_lifted = jnp.cumsum(lifted.astype(dtype)) - 1
    return (alloc + (lifted & (order_in_lifted < left)).astype(dtype)).astype(dtype)


def _as_fraction(fraction) -> Fraction:
    if isinstance(fraction, (bool, np.bool_)) or not isinstance(
            fraction, (int, float, Fraction, np.integer, np.floating)):
        raise TypeError(f"fraction must be a Python number, got {type(fraction).__name__}")
    if not np.isfinite(float(fraction)) or not 0.0 < float(fraction) <= 0.5:
        raise ValueError(f"fraction must lie in (0, 0.5], got {fraction!r}")
    return Fraction(fraction).limit_denominator(_MAX_DENOMINATOR)


def preference_pairs(scores: ArrayLike, labels: ArrayLike, *, num_classes: int,
                     fraction: float = 1 / 3) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Per-class (winner, loser) index pairs: the best-scored share paired with the worst.

    FedPDG (reconstruction) step 3: the ``n_c`` candidates of class ``c`` are ranked by score
    (descending; ties by the lower index) and ``m_c = floor(fraction * n_c)`` pairs are formed:
    the ``j``-th best (rank ``j``) is the winner of pair ``j`` and the ``j``-th worst (rank
    ``n_c - 1 - j``) its loser, ``j = 0 .. m_c - 1`` (best with worst, second best with second
    worst, ...). Classes with fewer than ``1 / fraction`` candidates (fewer than 3 by default)
    give no pair; winners and losers never overlap since ``fraction <= 1/2``.

    The output has the static length ``P = floor(fraction * N)`` (an upper bound, since
    ``sum_c floor(fraction n_c) <= floor(fraction N)``): valid pairs first, ordered by class and
    then ``j``; the rest are padding with index 0 and ``mask`` False. ``fraction`` is rounded to
    the nearest rational with denominator <= 1000 (1/3 stays exactly 1/3) so the floors are
    exact integer arithmetic.

    Args:
      scores: ``[N]`` finite float candidate scores (e.g. the global model's log-probability of
        the intended class).
      labels: ``[N]`` int class of each candidate, in ``[0, num_classes)``.
      num_classes: ``C >= 1`` (static).
      fraction: static share in ``(0, 1/2]`` of each class used for winners (and for losers).

    Returns:
      ``(winners [P], losers [P], mask [P])``: int32 indices into the candidates and a bool
      validity mask.

    Raises:
      TypeError: ``num_classes`` is not an int, ``fraction`` not a number, ``labels`` not ints.
      ValueError: ``scores`` not 1-D / not finite, ``labels`` not ``[N]`` or out of range,
        ``num_classes < 1`` or ``fraction`` outside ``(0, 1/2]``.

    >>> import jax.numpy as jnp
    >>> s = jnp.array([0.1, 0.9, 0.5, 0.3, 0.7, 0.2, 0.8])
    >>> y = jnp.array([0, 0, 0, 0, 0, 0, 1])
    >>> w, l, m = preference_pairs(s, y, num_classes=2)
    >>> w.tolist(), l.tolist(), m.tolist()
    ([1, 4], [0, 5], [True, True])
    """
    c = check_int("num_classes", num_classes, minimum=1)
    frac = _as_fraction(fraction)
    check_ndim("scores", scores, 1, "[N]")
    check_finite("scores", scores)
    n = jnp.shape(scores)[0]
    _check_labels("labels", labels, n, c)
    num, den = frac.numerator, frac.denominator
    p = (n * num) // den
    scores, labels = jnp.asarray(scores), jnp.asarray(labels, jnp.int32)

    order = _descending_order(scores, labels)  # class ascending, score descending, index
    counts = jnp.bincount(labels, length=c).astype(jnp.int32)  # n_c
    starts = jnp.cumsum(counts) - counts  # first sorted position of each class
    rank = _inverse_permutation(order) - starts[labels]  # rank_desc within the class
    m = (counts * num) // den  # m_c pairs per class
    offsets = jnp.cumsum(m) - m  # first pair slot of each class
    n_i, m_i, off_i = counts[labels], m[labels], offsets[labels]
    idx = jnp.arange(n, dtype=jnp.int32)
    is_winner = rank < m_i
    is_loser = rank >= n_i - m_i
    w_slot = jnp.where(is_winner, off_i + rank, p)  # slot p is out of range: dropped
    l_slot = jnp.where(is_loser, off_i + (n_i - 1 - rank), p)
    winners = jnp.zeros(p, jnp.int32).at[w_slot].set(idx, mode="drop")
    losers = jnp.zeros(p, jnp.int32).at[l_slot].set(idx, mode="drop")
    mask = jnp.arange(p) < jnp.sum(m)
    return winners, losers, mask
