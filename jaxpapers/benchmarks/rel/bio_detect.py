"""Our B1 baseline detector (a run-recurrence test on pairs and triples of taxa), not the
paper's method; split out of :mod:`jaxpapers.benchmarks.rel.bio`, which re-exports it.

See :func:`detect_convergence` for the statistic.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.scipy.special import gammaln

from jaxpapers.benchmarks.rel.bio import (BASES, _check_int, _check_tree, _float_dtype,
                                          _sorted_names, generate_b1, leaf_distances)

__all__ = ["convergence_scores", "detect_convergence", "calibrate_thresholds"]


def _run_scores(same: jax.Array, window: int, dtype) -> jax.Array:
    """-log10 P(Poisson(lambda) >= R) for identity indicators same [..., S] (see below)."""
    sites = same.shape[-1]
    miss = jnp.concatenate([jnp.zeros(same.shape[:-1] + (1,), jnp.int32),
                            jnp.cumsum(~same, axis=-1, dtype=jnp.int32)], axis=-1)
    full = miss[..., window:] == miss[..., :-window]  # the window starting at s is all identical
    after_miss = jnp.concatenate([jnp.ones(same.shape[:-1] + (1,), bool),
                                  ~same[..., :sites - window]], axis=-1)
    runs = jnp.sum(full & after_miss, axis=-1).astype(dtype)  # maximal runs of >= w
    q = jnp.mean(same, axis=-1, dtype=dtype)
    lam = q**window * (1 + (sites - window) * (1 - q))
    return _poisson_tail_score(runs, lam)


_TAIL_TERMS = 64


def _poisson_tail_score(r: jax.Array, lam: jax.Array) -> jax.Array:
    """``-log10 P(Poisson(lam) >= r)`` where ``r > lam`` (integer-valued r), else 0.

    The upper tail summed in log space: ``_TAIL_TERMS`` terms from ``r`` on, plus the geometric
    bound ``t_{r+K} / (1 - lam / (r + K))`` on the rest (terms shrink by ``lam / k < 1``), so
    the tail is never underestimated. (Cheaper to compile than ``gammainc``; a count at or
    below its mean is no evidence, so those scores are 0.)
    """
    excess = r > lam
    r = jnp.where(excess, r, lam + 1.0)  # keep the unused branch finite
    log_lam = jnp.log(lam)[..., None]
    k = r[..., None] + jnp.arange(_TAIL_TERMS + 1, dtype=r.dtype)
    log_terms = k * log_lam - lam[..., None] - gammaln(k + 1.0)  # log P(X = k)
    rest = log_terms[..., -1] - jnp.log1p(-lam / k[..., -1])  # >= the sum beyond the series
    log_tail = jax.nn.logsumexp(jnp.concatenate([log_terms[..., :-1], rest[..., None]], -1), -1)
    return jnp.where(excess, jnp.maximum(-log_tail / math.log(10.0), 0.0), 0.0)


def convergence_scores(alignment: jax.typing.ArrayLike, distances: jax.typing.ArrayLike, *,
                       window: int = 5, min_edges: int = 3, order: int = 2) -> jax.Array:
    """Run-recurrence scores of every pair (``order=2``) or triple (``order=3``) of taxa.

    Our baseline statistic (not the paper's; unbatched). For a group G of taxa pairwise at
    least ``min_edges`` edges apart, a site is "shared" when all of G carry the same base, and
    ``R`` counts the maximal runs of >= ``window`` shared sites. Given the tree, alignment
    columns are i.i.d., so without convergence the shared indicators are i.i.d. Bernoulli(q);
    q is estimated by G's shared fraction, and the number of runs is close to Poisson with
    mean ``lambda = q^w (1 + (S - w)(1 - q))`` (a run starts at site 0 or after an unshared
    site). Score = ``-log10 P(Poisson(lambda) >= R)`` when ``R > lambda``; 0 otherwise (no
    excess), for groups with a repeated taxon and for a pair closer than ``min_edges``. A
    planted group shares every block, so ``R >= num_blocks`` at any distance, whereas distant
    taxa rarely share a run: for a pair q ~ 0.3 (lambda ~ 0.5), for a triple q ~ 0.1
    (lambda ~ 0.01). Planted sites also raise q, which only makes the score conservative.

    Args:
      alignment: int [n, S] leaf states.
      distances: int [n, n] topological distances (:func:`leaf_distances`).
      window: w, the run length (REL's block length), 1 <= w <= S (static).
      min_edges: the smallest pairwise distance of a tested group (static).
      order: 2 (pairs) or 3 (triples) (static).

    Returns:
      float [n, n] (order 2) or [n, n, n] (order 3), symmetric in its indices.

    >>> aln = jnp.array([[0, 1, 2, 3, 3, 3, 0, 1, 2, 3, 3, 3],   # taxa 0 and 1 share two
    ...                  [0, 1, 2, 0, 0, 0, 0, 1, 2, 0, 0, 0],   # runs of 3 identical sites
    ...                  [1, 2, 3, 0, 0, 0, 1, 2, 3, 0, 0, 0]])  # taxa 0 and 2 none
    >>> s = convergence_scores(aln, jnp.full((3, 3), 4), window=3)
    >>> round(float(s[0, 1]), 2), float(s[0, 2])
    (0.82, 0.0)
    """
    _check_scores(alignment, distances, window, order)
    return _scores_core(alignment, distances, window=window, min_edges=min_edges, order=order)


def _check_scores(alignment, distances, window, order) -> None:
    shape = np.shape(alignment)
    if len(shape) != 2:
        raise ValueError(f"alignment must be 2-D [taxa, sites], got shape {shape}")
    n, sites = shape
    _check_int("window", window, 1)
    if window > sites:
        raise ValueError(f"window must be <= the number of sites {sites}, got {window}")
    if np.shape(distances) != (n, n):
        raise ValueError(f"distances must be [{n}, {n}], got shape {np.shape(distances)}")
    if order not in (2, 3):
        raise ValueError(f"order must be 2 or 3, got {order!r}")


@functools.partial(jax.jit, static_argnames=("window", "min_edges", "order"))
def _scores_core(alignment, distances, *, window, min_edges, order):
    dtype = _float_dtype()
    a = jnp.asarray(alignment)
    n = a.shape[0]
    same = a[:, None, :] == a[None, :, :]  # [n, n, S]
    far = (jnp.asarray(distances) >= min_edges) & ~jnp.eye(n, dtype=bool)  # [n, n]
    if order == 2:
        return jnp.where(far, _run_scores(same, window, dtype), 0.0)

    def one(i):  # triples (i, j, k): [n, n]
        score = _run_scores(same[i][:, None, :] & same[i][None, :, :], window, dtype)
        return jnp.where(far[i][:, None] & far[i][None, :] & far, score, 0.0)

    return lax.map(one, jnp.arange(n))


@functools.partial(jax.jit, static_argnames=("window", "min_edges", "orders"))
def _scores_orders(alignment, distances, *, window, min_edges, orders):
    # several orders in one program (one compilation for the detector)
    return tuple(_scores_core(alignment, distances, window=window, min_edges=min_edges,
                              order=order) for order in orders)


def _leaf_codes(alignment_leaves: Any, names: list[str]) -> np.ndarray:
    """int8 [n, S] from {name: "ACGT..."} (rows in ``names`` order) or an array."""
    if not isinstance(alignment_leaves, dict):
        return np.asarray(alignment_leaves)
    missing = [nm for nm in names if nm not in alignment_leaves]
    if missing:
        raise ValueError(f"alignment_leaves lacks taxa {missing[:5]}")
    codes = np.full(256, 255, np.uint8)
    codes[np.frombuffer(BASES.encode(), np.uint8)] = np.arange(4)
    rows = [codes[np.frombuffer(alignment_leaves[nm].upper().encode(), np.uint8)]
            for nm in names]
    if len({len(r) for r in rows}) != 1 or any(np.any(r == 255) for r in rows):
        raise ValueError("alignment_leaves must hold equal-length strings over ACGT")
    return np.stack(rows).astype(np.int8)


def detect_convergence(alignment_leaves: Any, tree: dict, *, window: int = 5,
                       min_edges: int = 3, alpha: float = 0.01,
                       thresholds: dict[int, float] | None = None) -> tuple[str, list[str]]:
    """Our baseline B1 answer (host side): ("Yes", taxa) or ("No", []).

    Not the paper's method (REL evaluates LLMs). :func:`convergence_scores` for every pair and
    every triple of taxa pairwise at least ``min_edges`` apart, Bonferroni within each order
    with half of ``alpha`` each: a group is significant when its Poisson tail probability is
    below ``alpha / (2 m)``, m the number of tested groups of its size. "Yes" if any group is
    significant; the taxa are the connected union of significant groups (groups sharing a
    taxon join) that holds the group furthest above its threshold. The family-wise false-alarm
    rate on "no" items is at most about ``alpha``: the Poisson tail is an approximation and
    Bonferroni over correlated groups is conservative (for 50 leaves and 300 sites the largest
    pair score of "no" items is ~3.3 at its 95th percentile, against 5.1 here), so for pairs
    (RC 2) :func:`calibrate_thresholds` on simulated "no" trees is the more powerful choice.

    Args:
      alignment_leaves: int [n, S] in ``tree["names"]`` order, or {name: "ACGT..."}.
      tree: a :func:`random_tree` dict.
      window, min_edges: see :func:`convergence_scores`.
      alpha: the false-alarm level, in (0, 1).
      thresholds: {2: pair score, 3: triple score} to use instead of Bonferroni (e.g. from
        :func:`calibrate_thresholds`); an order left out is not tested.

    Returns:
      ("Yes" or "No", taxon names sorted numerically).

    >>> item = generate_b1(jax.random.key(0), num_leaves=8, rc=2, yes=False, num_sites=50)
    >>> detect_convergence(item["alignment"], item["tree"])[0] in ("Yes", "No")
    True
    """
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    _check_tree(tree)
    names = list(tree["names"])
    aln = _leaf_codes(alignment_leaves, names)
    if aln.ndim != 2 or aln.shape[0] != len(names):
        raise ValueError(f"alignment_leaves must be [{len(names)}, S] (tree['names'] rows), "
                         f"got shape {aln.shape}")
    dist = leaf_distances(tree)
    far = (dist >= min_edges) & ~np.eye(len(names), dtype=bool)
    counts = {2: int(far.sum()) // 2,
              3: int(np.einsum("ij,jk,ik->", far, far, far, dtype=np.int64)) // 6}
    if thresholds is None:
        thresholds = {k: math.log10(2 * m / alpha) for k, m in counts.items() if m}
    elif not set(thresholds) <= {2, 3}:
        raise ValueError(f"thresholds must map orders 2 and/or 3 to scores, got {thresholds}")
    orders = tuple(sorted(k for k in thresholds if counts[k]))
    _check_scores(aln, dist, window, 2)
    if not orders:  # no group of taxa is far enough apart to test
        return "No", []
    all_scores = _scores_orders(aln, dist, window=window, min_edges=min_edges, orders=orders)
    groups: list[tuple[float, tuple[int, ...]]] = []  # (score - threshold, members)
    for order, scores in zip(orders, all_scores):
        excess = np.asarray(scores, np.float64) - float(thresholds[order])
        for idx in zip(*np.nonzero(excess > 0)):
            if all(idx[r] < idx[r + 1] for r in range(order - 1)):
                groups.append((float(excess[idx]), tuple(int(i) for i in idx)))
    if not groups:
        return "No", []
    taxa = set(max(groups)[1])
    grew = True
    while grew:  # union of significant groups connected to the best one
        grew = False
        for _, members in groups:
            if taxa.intersection(members) and not taxa.issuperset(members):
                taxa.update(members)
                grew = True
    return "Yes", _sorted_names([names[j] for j in taxa])


def calibrate_thresholds(key: jax.Array, *, num_leaves: int, num_trees: int = 100,
                         level: float = 0.05, window: int = 5, min_edges: int = 3,
                         **item_kwargs) -> dict[int, float]:
    """Score thresholds for :func:`detect_convergence` from simulated "no" items (host side).

    For each order (pairs, triples), the ``1 - level / 2`` empirical quantile of the largest
    :func:`convergence_scores` entry over ``num_trees`` "no" items (:func:`generate_b1` with
    ``yes=False``), so the false-alarm rate on such items is about ``level`` (both orders
    together, by a union bound).

    Args:
      key: a jax PRNG key (consumed: one key per tree).
      num_leaves: n of the trees to calibrate on.
      num_trees: number of "no" items.
      level: the target false-alarm rate, in (0, 1).
      window, min_edges: see :func:`convergence_scores`.
      **item_kwargs: more :func:`generate_b1` arguments (``num_sites``, ``model``, ...).

    Returns:
      {2: pair threshold, 3: triple threshold}.

    >>> t = calibrate_thresholds(jax.random.key(0), num_leaves=8, num_trees=4, num_sites=60)
    >>> sorted(t)
    [2, 3]
    """
    _check_int("num_trees", num_trees, 1)
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level!r}")
    best: dict[int, list[float]] = {2: [], 3: []}
    for k in jax.random.split(key, num_trees):
        item = generate_b1(k, num_leaves=num_leaves, rc=2, yes=False, **item_kwargs)
        tree = item["tree"]
        aln = _leaf_codes(item["alignment"], tree["names"])
        dist = leaf_distances(tree)
        _check_scores(aln, dist, window, 2)
        scores = _scores_orders(aln, dist, window=window, min_edges=min_edges, orders=(2, 3))
        for order, sc in zip((2, 3), scores):
            best[order].append(float(jnp.max(sc)))
    return {order: float(np.quantile(v, 1 - level / 2)) for order, v in best.items()}
