"""KernelFoundry's parent, inspiration, island and migration rules over a MAP-Elites archive.

Read from ``kernelfoundry/algorithm/evolve_database_optimization_aware.py`` (isl-org/kernelfoundry,
commit 650918e, ``OptimizationAwareDatabase``) and adapted to an :class:`Archive` that keeps ONE
elite per cell (the original also keeps up to ``population_size`` non-elite programs). C cells,
I = ``num_islands``. All functions are pure functions of a key and arrays (jit / vmap-able).

Parent (``_sample_parent``): draw u ~ U[0, 1);

* u < ``p_uniform`` (their "exploration"): uniform over the current island's members. The original
  island holds every program made there; here it holds the elites whose cell was last filled
  there (or copied there by migration). An EMPTY island, or ``num_islands == 1`` (the original's
  ``use_islands`` is False), falls back like the original: it draws 10 cells without replacement
  from the E empty + L "low" cells (filled, fitness strictly below the median elite fitness) and
  picks a low one among those uniformly; if none was drawn, a uniform filled cell. Exactly:
  p(cell) = (1 - P0) / L [low] + P0 / F [filled], P0 = C(E, 10) / C(E + L, 10) (E counted over
  this archive's C cells, the original's over its 4x4x4x4 grid).
* u < ``p_uniform + p_elite`` ("exploitation"): softmax(fitness / ``temperature``) over ALL
  elites (the original does NOT restrict this branch to the island; its temperature is 1); a
  uniform elite if the elite fitnesses sum to <= 0 (the original's guard).
* else ("random"): uniform over all filled cells (the original: over all programs).

An empty archive gives cell -1 (the original raises); every probability is finite (no NaN).

Inspirations (``_sample_diverse_inspirations``, n = ``num_inspirations``): first
max(1, n // 2) elites of OTHER cells than the parent ranked by fitness + 0.1 max(0, level sum
of the cell - level sum of the parent's cell); the rest from the remaining elites ranked by
fitness alone (the original's "top programs", then island bests and random correct programs,
which add nothing more when every program is an elite). The original breaks ties by dict order;
here ties are broken at random with the key. -1 pads when fewer than n other cells are filled.

Islands (``increase_island_counter_and_switch``, ``should_migrate``, ``migrate_programs``):
after each program :func:`advance` switches to island (i + 1) % I once ``programs_per_island``
programs were made on island i, then counts the program in that island's generation. Migration
is due when max(island generations) - (that maximum at the last migration) >=
``migrate_every``; then, for i = 0 .. I - 1 in order, the max(1, floor(migration_rate F / I))
best members of island i (F filled cells; the original counts all programs) are COPIED to island
(i + 1) % I (copy mode, the original's default: they stay members of island i too, and a copy
into island 1 can migrate again from island 1 in the same pass). ``members`` [I, C] holds the
membership so a cell can be on several islands; a new elite (:func:`assign_island`) belongs to
the current island only, as the original adds each child to the current island.

>>> import jax, jax.numpy as jnp
>>> from jaxpapers.evolve.archive import archive_init, archive_insert
>>> a = archive_insert(archive_init((2, 2), jnp.zeros(3)), jnp.ones((2, 3)),
...                    jnp.array([[0, 1], [1, 1]]), jnp.array([5.0, 6.0]))
>>> cfg = SamplingConfig()
>>> s = sampler_init(a, cfg)
>>> cell, branch = sample_parent(jax.random.key(0), a, s, cfg)
>>> int(cell) in (1, 3), sample_inspirations(jax.random.key(1), a, 1, cfg).tolist()
(True, [3, -1])
"""

from __future__ import annotations

import dataclasses
import math
import numbers

import jax
import jax.numpy as jnp
import numpy as np

from jaxpapers.core import checks, pytree
from jaxpapers.evolve.archive import Archive

__all__ = ["SamplingConfig", "SamplerState", "sampler_init", "parent_distribution",
           "sample_parent", "sample_inspirations", "assign_island", "advance", "migration_due",
           "migrate"]

LEVEL_BONUS = 0.1  # inspiration priority per level above the parent's (original: 0.1)
FALLBACK_DRAWS = 10  # cells drawn by the empty-island fallback (original: n=10)
BRANCH_UNIFORM, BRANCH_ELITE, BRANCH_RANDOM = 0, 1, 2


def _real(name: str, value) -> float:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__} {value!r}")
    v = float(value)
    if not math.isfinite(v):
        raise ValueError(f"{name} must be finite, got {v}")
    return v


@dataclasses.dataclass(frozen=True)
class SamplingConfig:
    """Static (hashable) settings of the sampler; defaults are KernelFoundry's.

    Attributes:
      num_islands: I >= 1 islands (1: no island model, as the original with one island).
      programs_per_island: programs made on an island before switching to the next (>= 1).
      migrate_every: island generations between migrations (>= 1).
      migration_rate: in [0, 1]; max(1, floor(rate F / I)) elites leave each island.
      p_uniform: probability of the uniform draw over the current island ("exploration").
      p_elite: probability of the softmax draw over all elites ("exploitation").
      p_random: probability of the uniform draw over all filled cells.
      temperature: > 0, divides the fitness inside the softmax.
      num_inspirations: n >= 0 inspirations per parent.
    """

    num_islands: int = 4
    programs_per_island: int = 10
    migrate_every: int = 10
    migration_rate: float = 0.1
    p_uniform: float = 0.2
    p_elite: float = 0.7
    p_random: float = 0.1
    temperature: float = 1.0
    num_inspirations: int = 2

    def __post_init__(self):
        checks.check_int("num_islands", self.num_islands, minimum=1)
        checks.check_int("programs_per_island", self.programs_per_island, minimum=1)
        checks.check_int("migrate_every", self.migrate_every, minimum=1)
        checks.check_int("num_inspirations", self.num_inspirations, minimum=0)
        for name in ("migration_rate", "p_uniform", "p_elite", "p_random"):
            v = _real(name, getattr(self, name))
            if not 0.0 <= v <= 1.0:
                raise ValueError(f"{name} must lie in [0, 1], got {v}")
        total = self.p_uniform + self.p_elite + self.p_random
        if abs(total - 1.0) > 1e-6:
            raise ValueError(f"p_uniform + p_elite + p_random must sum to 1, got {self.p_uniform}"
                             f" + {self.p_elite} + {self.p_random} = {total}")
        if _real("temperature", self.temperature) <= 0:
            raise ValueError(f"temperature must be > 0, got {self.temperature}")


@pytree.dataclass
class SamplerState:
    """Island bookkeeping kept beside an archive. I islands, C cells.

    Attributes:
      members: [I, C] bool, cell c's elite is a member of island i (only filled cells).
      island: [] int32, the current island.
      count: [] int32, programs made on the current island since the last switch.
      generations: [I] int32, programs made on each island (its "generation").
      last_migration: [] int32, max(generations) at the last migration (0 before any).
    """

    members: jax.Array  # [I, C]
    island: jax.Array  # []
    count: jax.Array  # []
    generations: jax.Array  # [I]
    last_migration: jax.Array  # []


# ------------------------------------------------------------------ checks and helpers


def _check_config(config) -> SamplingConfig:
    if not isinstance(config, SamplingConfig):
        raise TypeError(f"config must be a SamplingConfig, got {type(config).__name__}")
    return config


def _check_archive(archive) -> int:
    if not isinstance(archive, Archive):
        raise TypeError(f"archive must be an Archive, got {type(archive).__name__}")
    c = math.prod(archive.grid_shape)
    if np.shape(archive.fitness) != (c,):
        raise ValueError(f"archive.fitness must have shape [C] = ({c},), got "
                         f"{np.shape(archive.fitness)}")
    return c


def _check_state(state, c: int, config: SamplingConfig) -> None:
    if not isinstance(state, SamplerState):
        raise TypeError(f"state must be a SamplerState, got {type(state).__name__}")
    want = (config.num_islands, c)
    if np.shape(state.members) != want or np.shape(state.generations) != want[:1]:
        raise ValueError(f"state must have members [I, C] = {want} and generations [I] = "
                         f"({want[0]},) for config.num_islands and the archive, got "
                         f"{np.shape(state.members)} and {np.shape(state.generations)}")


def _level_sums(grid_shape: tuple[int, ...]) -> np.ndarray:
    """[C] int32 sum of the levels of each row-major cell."""
    c = math.prod(grid_shape)
    return np.stack(np.unravel_index(np.arange(c), grid_shape)).sum(0).astype(np.int32)


def _rank(tiebreak: jax.Array, score: jax.Array) -> jax.Array:
    """[C] int32 rank (0 = first) by decreasing ``score``, ties by the random uint32
    ``tiebreak`` [C], then by index. Pairwise comparisons (C^2, C is small) instead of a sort:
    much cheaper to compile inside a scan."""
    idx = jnp.arange(score.shape[0])
    before = (score[None, :] > score[:, None]) | (
        (score[None, :] == score[:, None]) & ((tiebreak[None, :] < tiebreak[:, None]) | (
            (tiebreak[None, :] == tiebreak[:, None]) & (idx[None, :] < idx[:, None]))))
    return before.sum(axis=1, dtype=jnp.int32)


def _top(tiebreak: jax.Array, score: jax.Array, n: int) -> jax.Array:
    """[n] int32 cells of ranks 0 .. n - 1 (see :func:`_rank`)."""
    rank = _rank(tiebreak, score)
    return jnp.argmax(rank[None, :] == jnp.arange(n)[:, None], axis=1).astype(jnp.int32)


def _uniform(mask: jax.Array) -> jax.Array:
    return mask / jnp.maximum(mask.sum(), 1).astype(jnp.float32)


def _fallback(fitness: jax.Array, filled: jax.Array) -> jax.Array:
    """[C] the original's empty-island distribution (see the module doc), zeros if empty."""
    c = fitness.shape[0]
    f = filled.sum()
    e = (c - f).astype(jnp.float32)
    # median of the filled fitnesses (the mean of the two middle ones when F is even)
    rank = _rank(jnp.zeros((c,), jnp.uint32), jnp.where(filled, fitness, -jnp.inf))
    middle = (rank == (f - 1) // 2) | (rank == f // 2)
    median = jnp.sum(jnp.where(middle & filled, fitness, 0.0)) / jnp.maximum(
        jnp.sum(middle & filled), 1)
    low = filled & (fitness < median)  # empty archive: no filled cell, so no low cell
    n_low = low.sum()
    j = jnp.arange(FALLBACK_DRAWS, dtype=jnp.float32)
    num, den = e - j, e + n_low - j
    factor = jnp.where(num > 0, num / jnp.maximum(den, 1.0), 0.0)
    p0 = jnp.where(n_low == 0, 1.0, jnp.prod(factor))  # P(no low cell among the draws)
    return (1.0 - p0) * _uniform(low) + p0 * _uniform(filled)


# ------------------------------------------------------------------ public API


def sampler_init(archive: Archive, config: SamplingConfig = SamplingConfig()) -> SamplerState:
    """Island state for ``archive``: its filled cells on island 0 (the original's setup adds
    the initial programs to the current island, 0), island 0 current, all counters zero.

    Returns:
      :class:`SamplerState` with members [I, C] bool.
    """
    config = _check_config(config)
    c = _check_archive(archive)
    filled = jnp.isfinite(archive.fitness)
    members = jnp.zeros((config.num_islands, c), bool).at[0].set(filled)
    zero = jnp.zeros((), jnp.int32)
    return SamplerState(members=members, island=zero, count=zero,
                        generations=jnp.zeros((config.num_islands,), jnp.int32),
                        last_migration=zero)


def parent_distribution(archive: Archive, state: SamplerState,
                        config: SamplingConfig = SamplingConfig()) -> jax.Array:
    """Per-branch parent probabilities (unbatched).

    Args:
      archive: the archive (C cells; empty cells have fitness -inf).
      state: its :class:`SamplerState`.
      config: the :class:`SamplingConfig`.

    Returns:
      [3, C] float32: row 0 the uniform-over-island branch (with the empty-island fallback),
      row 1 the softmax-over-all-elites branch, row 2 the uniform-over-filled branch. Each row
      sums to 1, or is all zeros when the archive is empty. The parent law is
      ``[p_uniform, p_elite, p_random] @ rows``.
    """
    config = _check_config(config)
    c = _check_archive(archive)
    _check_state(state, c, config)
    fit = archive.fitness
    filled = jnp.isfinite(fit)
    fallback = _fallback(fit, filled)
    if config.num_islands > 1:
        island = state.members[state.island] & filled
        explore = jnp.where(island.any(), _uniform(island), fallback)
    else:
        explore = fallback
    logits = jnp.where(filled, fit / config.temperature, -jnp.inf)
    top = jnp.max(logits)
    weights = jnp.where(filled, jnp.exp(logits - jnp.where(filled.any(), top, 0.0)), 0.0)
    softmax = weights / jnp.maximum(weights.sum(), jnp.finfo(jnp.float32).tiny)
    positive = jnp.sum(jnp.where(filled, fit, 0.0)) > 0  # the original's np.sum(scores) > 0
    elite = jnp.where(positive, softmax, _uniform(filled))
    return jnp.stack([explore, elite, _uniform(filled)]).astype(jnp.float32)


def sample_parent(key: jax.Array, archive: Archive, state: SamplerState,
                  config: SamplingConfig = SamplingConfig()) -> tuple[jax.Array, jax.Array]:
    """Draw one parent cell by KernelFoundry's three-branch rule (unbatched; module doc).

    Args:
      key: a typed PRNG key (consumed).
      archive: the archive.
      state: its :class:`SamplerState` (the current island matters).
      config: the :class:`SamplingConfig`.

    Returns:
      (cell, branch): int32 scalars; cell in [0, C) or -1 for an empty archive; branch 0
      (uniform over the island), 1 (softmax over elites) or 2 (uniform over filled cells).
    """
    checks.check_key("key", key)
    probs = parent_distribution(archive, state, config)
    u, u_cell = jax.random.uniform(key, (2,))  # one draw: cheap to compile inside a scan
    branch = jnp.where(u < config.p_uniform, BRANCH_UNIFORM,
                       jnp.where(u < config.p_uniform + config.p_elite, BRANCH_ELITE,
                                 BRANCH_RANDOM)).astype(jnp.int32)
    cdf = jnp.cumsum(probs[branch])  # inverse-CDF draw: lands on a cell with p > 0
    p = probs[branch] > 0
    last = p.shape[0] - 1 - jnp.argmax(p[::-1])  # guards u_cell * total rounding up to total
    cell = jnp.minimum(jnp.searchsorted(cdf, u_cell * cdf[-1], side="right"), last)
    cell = jnp.where(jnp.isfinite(archive.fitness).any(), cell, -1).astype(jnp.int32)
    return cell, branch


def sample_inspirations(key: jax.Array, archive: Archive, parent_cell: jax.typing.ArrayLike,
                        config: SamplingConfig = SamplingConfig()) -> jax.Array:
    """The parent's inspirations: elites of other cells, higher priority first (module doc).

    Args:
      key: a typed PRNG key (consumed; breaks ties at random).
      archive: the archive (C cells).
      parent_cell: int scalar, the parent's cell in [0, C), or -1 (no parent: every filled
        cell is another cell and the parent's level sum counts as 0, as in the original).
      config: the :class:`SamplingConfig` (n = ``num_inspirations``).

    Returns:
      [n] int32 distinct filled cells other than ``parent_cell``: the first max(1, n // 2) by
      fitness + 0.1 max(0, level sum - parent's level sum), then the others by fitness; -1
      where fewer than n other cells are filled.
    """
    checks.check_key("key", key)
    config = _check_config(config)
    c = _check_archive(archive)
    parent_cell = jnp.asarray(parent_cell)
    if parent_cell.shape != () or not jnp.issubdtype(parent_cell.dtype, jnp.integer):
        raise ValueError(f"parent_cell must be an integer scalar, got shape "
                         f"{parent_cell.shape} dtype {parent_cell.dtype}")
    checks.check_range("parent_cell", parent_cell, low=-1, high=c - 1)
    n = config.num_inspirations
    if n == 0:
        return jnp.zeros((0,), jnp.int32)
    fit = archive.fitness
    sums = jnp.asarray(_level_sums(archive.grid_shape))
    has_parent = parent_cell >= 0
    parent_sum = jnp.where(has_parent, sums[jnp.maximum(parent_cell, 0)], 0)
    cand = jnp.isfinite(fit) & (jnp.arange(c) != parent_cell)
    tiebreak = jax.random.bits(key, (2, c))
    n1 = min(max(1, n // 2), n)
    bonus = LEVEL_BONUS * jnp.maximum(0, sums - parent_sum).astype(jnp.float32)
    first = _top(tiebreak[0], jnp.where(cand, fit + bonus, -jnp.inf), n1)
    ok1 = cand[first]
    rest = cand.at[first].set(False)
    second = _top(tiebreak[1], jnp.where(rest, fit, -jnp.inf), n - n1)
    ok2 = rest[second]
    picks = jnp.concatenate([jnp.where(ok1, first, -1), jnp.where(ok2, second, -1)])
    return picks.astype(jnp.int32)


def assign_island(state: SamplerState, cell: jax.typing.ArrayLike,
                  inserted: jax.typing.ArrayLike) -> SamplerState:
    """Record a child: if it became the elite of ``cell``, that cell now belongs to the current
    island only (its previous elite's memberships go with the replaced elite).

    Args:
      state: the :class:`SamplerState`.
      cell: int scalar, the child's cell (-1: none, nothing changes).
      inserted: bool scalar, the child entered the archive.

    Returns:
      The new state.
    """
    if not isinstance(state, SamplerState):
        raise TypeError(f"state must be a SamplerState, got {type(state).__name__}")
    i, c = state.members.shape
    cell = jnp.asarray(cell, jnp.int32)
    do = jnp.asarray(inserted, bool) & (cell >= 0)
    column = jnp.arange(i) == state.island
    target = jnp.where(do, cell, c)  # out of range: dropped
    return state.replace(members=state.members.at[:, target].set(column, mode="drop"))


def advance(state: SamplerState, config: SamplingConfig = SamplingConfig()) -> SamplerState:
    """Count one program made on the current island (the original's
    ``increase_island_counter_and_switch``): switch to the next island first if the current one
    already made ``programs_per_island``, then add 1 to the counter and to its generation.
    """
    config = _check_config(config)
    if not isinstance(state, SamplerState):
        raise TypeError(f"state must be a SamplerState, got {type(state).__name__}")
    switch = state.count >= config.programs_per_island
    island = jnp.where(switch, (state.island + 1) % config.num_islands, state.island)
    count = jnp.where(switch, 0, state.count) + 1
    return state.replace(island=island.astype(jnp.int32), count=count.astype(jnp.int32),
                         generations=state.generations.at[island].add(1))


def migration_due(state: SamplerState, config: SamplingConfig = SamplingConfig()) -> jax.Array:
    """bool scalar: several islands and max(generations) - last_migration >= migrate_every."""
    config = _check_config(config)
    due = jnp.max(state.generations) - state.last_migration >= config.migrate_every
    return due & (config.num_islands > 1)


def migrate(key: jax.Array, archive: Archive, state: SamplerState,
            config: SamplingConfig = SamplingConfig()) -> SamplerState:
    """Ring migration when due (:func:`migration_due`), else ``state`` unchanged.

    For i = 0 .. I - 1 in turn, the m = max(1, floor(migration_rate F / I)) best members of
    island i (F filled cells; float32 arithmetic; ties at random with ``key``) are copied to
    island (i + 1) % I; then last_migration = max(generations).

    Args:
      key: a typed PRNG key (consumed).
      archive: the archive (fitness ranks the migrants).
      state: the :class:`SamplerState`.
      config: the :class:`SamplingConfig`.

    Returns:
      The new state; ``members`` only gains entries.
    """
    checks.check_key("key", key)
    config = _check_config(config)
    c = _check_archive(archive)
    _check_state(state, c, config)
    n_isl = config.num_islands
    if n_isl < 2:
        return state
    fit = archive.fitness
    filled = jnp.isfinite(fit)
    n_filled = filled.sum().astype(jnp.float32)
    m = jnp.maximum(1, jnp.floor(jnp.float32(config.migration_rate) * n_filled / n_isl))
    members = state.members
    tiebreak = jax.random.bits(key, (n_isl, c))
    for i in range(n_isl):
        source = members[i] & filled
        rank = _rank(tiebreak[i], jnp.where(source, fit, -jnp.inf))
        target = (i + 1) % n_isl
        members = members.at[target].set(members[target] | (source & (rank < m)))
    due = migration_due(state, config)
    return state.replace(
        members=jnp.where(due, members, state.members),
        last_migration=jnp.where(due, jnp.max(state.generations), state.last_migration))
