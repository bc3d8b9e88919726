"""Template-parameter tuning: exhaustive, or budgeted best-first search over a grid of choices.

KernelFoundry's template stage takes the best kernel, exposes a few parameters (block sizes,
warps) and runs every combination. When the grid is larger than the budget, :func:`tune_template`
does a best-first local search over the index grid instead: a spread (Latin-hypercube-like) start
of up to 16 points, then unvisited +-1 index neighbours of the best point so far, one at a time
(first the one that continues the move that reached it, else a random one),
skipping (most of the time) neighbours that exact ties predict to repeat a known value, and random
unvisited points once no finite point has an unvisited neighbour. The objective is minimised (a
time); ``math.inf`` marks an invalid point, NaN counts as ``inf``. :func:`random_search` is the
baseline (``budget`` distinct uniform points).

This is host-side Python around an arbitrary callable (a compile-and-time harness), so nothing
here is traced: it is not meant for ``jax.jit`` / ``jax.vmap``. The key is used once, to seed a
NumPy generator (:func:`jaxpapers.core.rng.numpy_rng`); same key, same objective: same calls.

>>> import jax
>>> space = {"block": [8, 16, 32, 64], "warps": [1, 2, 4]}
>>> res = tune_template(lambda p: abs(p["block"] - 32) + p["warps"], space, budget=12,
...                     key=jax.random.key(0))
>>> res.best, res.best_value, res.evaluations
({'block': 32, 'warps': 1}, 1.0, 12)
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
import math
import numbers
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import numpy as np

from jaxpapers.core import rng as _rng

__all__ = ["TuneResult", "Objective", "tune_template", "random_search", "grid_size"]

Objective = Callable[[dict], float]
"""``objective(point) -> float`` to minimise; ``math.inf`` (or NaN) marks an invalid point."""

# Chosen by a small sweep on the test's roofline models (2 or 3 ties: same; a check every 2nd
# step lost M = 1 plateau runs at 10% of the grid, every 8th or never lost regular ones).
MIN_TIES = 2  # equal neighbour pairs (and no unequal one) that make an axis flat
CHECK_EVERY = 4  # every 4th step tests a prediction (evaluates a tier-1 move)
NUM_INITIAL = 16  # spread start points of the best-first search (capped at budget // 4)


@dataclasses.dataclass(frozen=True)
class TuneResult:
    """Outcome of a tuning run (a plain frozen container of Python values, not a pytree).

    Fields are also readable as keys (``res["best"]``).

    Attributes:
      best: the best point found, one value per key of ``space`` (ties: the first found).
      best_value: its objective value (``inf`` if every evaluated point was invalid).
      evaluations: how many times the objective was called (<= ``budget``; no point twice).
      history: ``(point, value)`` for each call, in call order (NaN stored as ``inf``).
    """

    best: dict
    best_value: float
    evaluations: int
    history: list

    def __getitem__(self, name: str) -> Any:
        if name not in {f.name for f in dataclasses.fields(self)}:
            raise KeyError(name)
        return getattr(self, name)


# --------------------------------------------------------------------------- validation


def _check_space(space: Any) -> tuple[list[str], list[list]]:
    """The space's names and candidate lists; ValueError naming ``space`` (and the key)."""
    if not isinstance(space, Mapping) or not space:
        raise ValueError(f"space must be a non-empty dict name -> list of candidate values, "
                         f"got {space!r}")
    names, values = [], []
    for name, cands in space.items():
        if isinstance(cands, (str, bytes)) or not isinstance(cands, Sequence) or not cands:
            raise ValueError(f"space[{name!r}] must be a non-empty list of candidate values, "
                             f"got {cands!r}")
        cands = list(cands)
        for i, a in enumerate(cands):
            for b in cands[:i]:
                if _same(a, b):
                    raise ValueError(f"space[{name!r}] lists the value {a!r} twice (a point "
                                     f"would be evaluated twice): {cands!r}")
        names.append(name)
        values.append(cands)
    return names, values


def _same(a: Any, b: Any) -> bool:
    """``a == b`` as a plain bool (False where the comparison is not a single truth value)."""
    try:
        return bool(a == b)
    except (TypeError, ValueError):  # e.g. arrays of several elements
        return a is b


def _check_budget(budget: Any) -> int:
    if isinstance(budget, bool) or not isinstance(budget, numbers.Integral) or budget < 1:
        raise ValueError(f"budget must be an int >= 1, got {budget!r}")
    return int(budget)


def _check_key(key: Any) -> None:
    """A typed key (``jax.random.key``) of shape ``()``, or a legacy raw ``uint32[2]`` key."""
    dtype = getattr(key, "dtype", None)
    shape = getattr(key, "shape", None)
    if dtype is not None and jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key) and shape == ():
        return
    if isinstance(key, jax.Array) and key.dtype == np.uint32 and key.shape == (2,):
        return
    raise ValueError(f"key must be a single jax PRNG key from jax.random.key(seed), got "
                     f"{type(key).__name__} {key!r}")


def _as_value(value: Any, point: dict) -> float:
    """The objective's return as a float (NaN -> inf); a non-number is a TypeError."""
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool)
    if not ok and hasattr(value, "shape") and hasattr(value, "dtype"):
        ok = tuple(value.shape) in ((), (1,)) and np.dtype(value.dtype).kind in "fiu"
    if not ok:
        raise TypeError(f"objective must return a real number (math.inf for an invalid point), "
                        f"got {type(value).__name__} {value!r} at point {point!r}")
    out = float(np.asarray(value).reshape(()))
    return math.inf if math.isnan(out) else out


# --------------------------------------------------------------------------- the search


class _Evaluator:
    """Calls the objective on index tuples, at most ``budget`` times and never twice."""

    def __init__(self, objective, names, values, budget):
        if not callable(objective):
            raise TypeError(f"objective must be callable, got {objective!r}")
        self.objective, self.names, self.values = objective, names, values
        self.budget = budget
        self.seen: dict[tuple, float] = {}
        self.history: list[tuple[dict, float]] = []
        self.best_idx: tuple | None = None
        self.best_value = math.inf

    @property
    def left(self) -> int:
        return self.budget - len(self.history)

    def point(self, idx: tuple) -> dict:
        return {n: v[i] for n, v, i in zip(self.names, self.values, idx)}

    def __call__(self, idx: tuple) -> float:
        if idx in self.seen or self.left <= 0:  # guarded by the callers; a bug if it fires
            raise RuntimeError(f"internal: point {idx} re-evaluated or budget exceeded")
        value = _as_value(self.objective(self.point(idx)), self.point(idx))
        self.seen[idx] = value
        self.history.append((self.point(idx), value))
        if self.best_idx is None or value < self.best_value:
            self.best_idx, self.best_value = idx, value
        return value

    def result(self) -> TuneResult:
        return TuneResult(best=self.point(self.best_idx), best_value=self.best_value,
                          evaluations=len(self.history), history=self.history)


def _spread_points(gen: np.random.Generator, shape: tuple[int, ...], n: int) -> list[tuple]:
    """``n`` index tuples, each axis stratified into ``n`` bins with a random pairing (LHS)."""
    cols = []
    for size in shape:
        strata = (gen.permutation(n) + gen.random(n)) / n  # one point per stratum of [0, 1)
        cols.append(np.minimum((strata * size).astype(int), size - 1))
    return [tuple(int(c[j]) for c in cols) for j in range(n)]


def _random_unvisited(gen: np.random.Generator, shape: tuple[int, ...], seen: dict,
                      size: int) -> tuple:
    """A uniformly random index tuple not in ``seen`` (the grid must have one)."""
    if 2 * len(seen) < size:  # rejection: expected < 2 draws
        while True:
            idx = tuple(int(gen.integers(s)) for s in shape)
            if idx not in seen:
                return idx
    # size < 2 * len(seen) <= 2 * budget: small enough to list
    free = [idx for idx in itertools.product(*map(range, shape)) if idx not in seen]
    return free[int(gen.integers(len(free)))]


def _neighbours(idx: tuple, shape: tuple[int, ...]) -> list[tuple]:
    """The +-1 index neighbours of ``idx`` along each axis, inside the grid."""
    out = []
    for axis, size in enumerate(shape):
        for step in (-1, 1):
            j = idx[axis] + step
            if 0 <= j < size:
                out.append(idx[:axis] + (j,) + idx[axis + 1:])
    return out


class _MoveStats:
    """Predicts which unvisited neighbours would only repeat a value already seen.

    An axis is *flat* once at least ``MIN_TIES`` pairs of evaluated finite grid neighbours along
    it had equal values and no pair had different ones (e.g. ``num_warps`` of a memory-bound
    decode kernel, or a block size a roofline term does not see). A move is *predicted known*
    (tier 1) if it runs along a flat axis, or if its target agrees on every non-flat axis with
    a finite point already evaluated (the target's value is then predicted to be that point's);
    any other move is tier 0. One different pair along a flat axis makes it non-flat again.

    Without this the best-first search spends a plateau-heavy M = 1 model's budget flooding
    each plateau point by point, and stepping off every plateau point along the same axis.
    """

    def __init__(self, shape: tuple[int, ...]):
        self.shape = shape
        self.ties = np.zeros(len(shape), int)  # per axis: equal finite neighbour pairs
        self.changes = np.zeros(len(shape), int)  # ... and unequal ones
        self.flat = np.zeros(len(shape), bool)
        self.version = 0  # bumped when the set of flat axes changes
        self.points: list[tuple] = []  # finite points evaluated
        self.known: set[tuple] = set()  # ... projected onto the non-flat axes

    def _project(self, idx: tuple) -> tuple:
        return tuple(-1 if f else i for i, f in zip(idx, self.flat))

    def tier(self, src: tuple, dst: tuple) -> int:
        """1 if evaluating ``dst``, a neighbour of ``src``, is predicted known; else 0."""
        return int(bool(self.flat[_axis(src, dst)]) or self._project(dst) in self.known)

    def add(self, idx: tuple, value: float, seen: dict) -> None:
        """Records the evaluation of ``idx`` (``seen`` holds every evaluation so far)."""
        if value == math.inf:
            return
        for n in _neighbours(idx, self.shape):
            other = seen.get(n, math.inf)
            if other < math.inf:
                if other == value:
                    self.ties[_axis(idx, n)] += 1
                else:
                    self.changes[_axis(idx, n)] += 1
        self.points.append(idx)
        flat = (self.changes == 0) & (self.ties >= MIN_TIES)
        if np.any(flat != self.flat):
            self.flat, self.version = flat, self.version + 1
            self.known = {self._project(p) for p in self.points}
        else:
            self.known.add(self._project(idx))


def _axis(a: tuple, b: tuple) -> int:
    """The axis along which the neighbours ``a`` and ``b`` differ."""
    return next(k for k, (i, j) in enumerate(zip(a, b)) if i != j)


class _Frontier:
    """Finite evaluated points by (value, call order), and the choice of the next neighbour.

    ``fresh`` holds points that may still have an unvisited tier-0 neighbour, ``stale`` those
    whose unvisited neighbours were all tier 1 when last looked at (tier-0 neighbours only turn
    into tier 1 while the flat axes stay the same; when they change, ``stale`` rejoins
    ``fresh``). A point with no unvisited neighbour is dropped for good.
    """

    def __init__(self, moves: _MoveStats, seen: dict, gen: np.random.Generator):
        self.moves, self.seen, self.gen = moves, seen, gen
        self.fresh: list = []  # (value, call order, idx), sorted
        self.stale: list = []
        self.version = moves.version
        self.came: dict[tuple, tuple] = {}  # point -> the (axis, step) move that reached it

    def add(self, value: float, order: int, idx: tuple) -> None:
        bisect.insort(self.fresh, (value, order, idx))

    def pick(self, check: bool) -> tuple | None:
        """The next point: a tier-1 neighbour on a ``check`` step (if any), else tier 0."""
        if self.version != self.moves.version:
            self.fresh = sorted(self.fresh + self.stale)
            self.stale, self.version = [], self.moves.version
        idx = None
        if check and self.moves.flat.any():  # no flat axis: no tier-1 move exists
            idx = self._best(tier=1)
        if idx is None:
            idx = self._best(tier=0)
        if idx is None:  # every unvisited neighbour of every point is tier 1
            idx = self._best(tier=1)
        return idx

    def _ahead(self, src: tuple) -> tuple | None:
        """The neighbour one more step along the move that reached ``src`` (pattern search's
        "keep going": ``src`` is the best point, so that move improved)."""
        if src not in self.came:
            return None
        axis, step = self.came[src]
        return src[:axis] + (src[axis] + step,) + src[axis + 1:]

    def _free(self, src: tuple, tier: int) -> tuple[bool, list]:
        """(any unvisited neighbour, those of ``tier``)."""
        free = [n for n in _neighbours(src, self.moves.shape) if n not in self.seen]
        return bool(free), [n for n in free if self.moves.tier(src, n) == tier]

    def _best(self, tier: int) -> tuple | None:
        """A random ``tier`` neighbour of the best point that has one (None: no point has)."""
        i = j = 0
        while i < len(self.fresh) or (tier == 1 and j < len(self.stale)):
            from_fresh = tier == 0 or j == len(self.stale) or (
                i < len(self.fresh) and self.fresh[i] < self.stale[j])
            pool, k = (self.fresh, i) if from_fresh else (self.stale, j)
            src = pool[k][2]
            any_free, cands = self._free(src, tier)
            if cands:
                ahead = self._ahead(src)
                dst = ahead if ahead in cands else cands[int(self.gen.integers(len(cands)))]
                axis = _axis(src, dst)
                self.came[dst] = (axis, dst[axis] - src[axis])
                return dst
            if not any_free:
                del pool[k]
            elif tier == 0:  # only tier-1 neighbours left
                bisect.insort(self.stale, pool.pop(k))
            elif from_fresh:
                i += 1
            else:
                j += 1
        return None


def grid_size(space: Mapping[str, Sequence]) -> int:
    """The number of points of the Cartesian product of ``space`` (validated as in tuning).

    >>> grid_size({"block_m": [16, 32, 64], "num_warps": [2, 4]})
    6
    """
    _, values = _check_space(space)
    return math.prod(len(v) for v in values)


def tune_template(objective: Objective, space: Mapping[str, Sequence], *, budget: int,
                  key: jax.Array, num_initial: int = NUM_INITIAL) -> TuneResult:
    """Minimises ``objective`` over the grid ``space`` with at most ``budget`` distinct calls.

    If ``budget >= grid_size(space)`` every point is run once, in ``itertools.product`` order
    (KernelFoundry's template stage, "all combinations run"); ``key`` is then unused. Otherwise
    a best-first search on the index grid:

    1. ``min(num_initial, max(1, budget // 4))`` spread points (a Latin hypercube over indices;
       duplicates replaced by random unvisited points);
    2. each step evaluates an unvisited +-1 neighbour (along one axis) of the best finite point
       found so far (ties: first found) that has one, chosen at random among its neighbours;
    3. plateaus: a neighbour is *predicted known* when it lies along an axis on which every
       evaluated pair of finite neighbours so far tied exactly (at least ``MIN_TIES`` pairs),
       or when it matches an evaluated finite point on all the other axes. Such neighbours are
       taken only on every ``CHECK_EVERY``-th step (which tests a prediction: one unequal pair
       ends an axis's flatness) or when no other neighbour of any finite point is left;
    4. when no finite point has an unvisited neighbour, a random unvisited point.

    Step 3 matters only where values tie exactly (cost models, bucketed timings); with noisy
    measured times no axis is ever flat and the search is plain best-first. Measured on the
    roofline models of ``tests/evolve/test_tune.py`` and two variants (24 shapes, 30 seeds):
    with 25% of the grid it found the exhaustive optimum in all 720 runs (with 10%: 99% on
    regular shapes, 100% at M = 1). Without step 3, a pure-roofline M = 1 model was hit in 20
    of 40 runs where random search hit it in 40: best-first floods each plateau point by point.

    Args:
      objective: ``objective(point) -> float``, ``point`` a fresh dict with one value per key of
        ``space`` (in its order). Lower is better; ``math.inf`` marks an invalid point and NaN
        is treated as ``inf``. Anything but a real number raises ``TypeError``.
      space: dict name -> non-empty list of candidate values (distinct within a list); an
        axis's order defines its neighbours, so list values in increasing order.
      budget: the most objective calls (int >= 1).
      key: a jax PRNG key (``jax.random.key(seed)``), used once.
      num_initial: the most spread start points (int >= 1).

    Returns:
      :class:`TuneResult` with ``best``, ``best_value``, ``evaluations`` (number of calls made)
      and ``history`` (the ``(point, value)`` list in call order).

    >>> import jax
    >>> space = {"bm": [8, 16, 32, 64, 128], "bk": [8, 16, 32, 64, 128]}
    >>> cost = lambda p: (p["bm"] - 64) ** 2 + (p["bk"] - 16) ** 2 if p["bk"] <= 64 else math.inf
    >>> res = tune_template(cost, space, budget=12, key=jax.random.key(1))
    >>> res.best, res.evaluations <= 12
    ({'bm': 64, 'bk': 16}, True)
    """
    names, values = _check_space(space)
    budget = _check_budget(budget)
    _check_key(key)
    if isinstance(num_initial, bool) or not isinstance(num_initial, numbers.Integral) \
            or num_initial < 1:
        raise ValueError(f"num_initial must be an int >= 1, got {num_initial!r}")
    shape = tuple(len(v) for v in values)
    size = math.prod(shape)
    ev = _Evaluator(objective, names, values, budget)
    if budget >= size:
        for idx in itertools.product(*map(range, shape)):
            ev(idx)
        return ev.result()

    gen = _rng.numpy_rng(key)
    moves = _MoveStats(shape)
    frontier = _Frontier(moves, ev.seen, gen)

    def run(idx):
        value = ev(idx)
        moves.add(idx, value, ev.seen)
        if value < math.inf:
            frontier.add(value, len(ev.history) - 1, idx)

    for idx in _spread_points(gen, shape, min(num_initial, max(1, budget // 4))):
        run(idx if idx not in ev.seen else _random_unvisited(gen, shape, ev.seen, size))
    step = 0
    while ev.left > 0:
        step += 1
        idx = frontier.pick(check=step % CHECK_EVERY == 0)  # every 4th step tests a prediction
        run(idx if idx is not None else _random_unvisited(gen, shape, ev.seen, size))
    return ev.result()


def random_search(objective: Objective, space: Mapping[str, Sequence], *, budget: int,
                  key: jax.Array) -> TuneResult:
    """Baseline: ``min(budget, grid_size(space))`` distinct uniformly random points.

    Same arguments, checks and result as :func:`tune_template`; the points are drawn without
    replacement (so with ``budget >= grid_size(space)`` it is exhaustive, in random order).

    >>> import jax
    >>> res = random_search(lambda p: p["x"], {"x": [3, 1, 2]}, budget=3, key=jax.random.key(0))
    >>> res.best, res.evaluations
    ({'x': 1}, 3)
    """
    names, values = _check_space(space)
    budget = _check_budget(budget)
    _check_key(key)
    shape = tuple(len(v) for v in values)
    size = math.prod(shape)
    ev = _Evaluator(objective, names, values, budget)
    gen = _rng.numpy_rng(key)
    if size <= 2 * budget:  # small grid: a random order of all of it
        for flat in gen.permutation(size)[:budget]:
            ev(tuple(int(i) for i in np.unravel_index(flat, shape)))
        return ev.result()
    for _ in range(budget):
        ev(_random_unvisited(gen, shape, ev.seen, size))
    return ev.result()
