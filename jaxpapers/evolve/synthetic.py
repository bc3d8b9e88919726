"""A synthetic kernel-search landscape and three searches over it (KernelFoundry, issue #30).

Landscape (our design; G = 12 genes in {0, 1, 2, 3}, genes 4a .. 4a + 3 belong to axis a of
(memory, compute, parallelism)):

* level of axis a = number of leading non-zero genes of its block of 4, capped at 3; the
  descriptor is the 3 levels, the cell its row-major index in the 4 x 4 x 4 grid (C = 64).
  E.g. block [1, 0, 2, 3] -> 1, [2, 3, 1, 1] -> 3, [0, 3, 3, 3] -> 0.
* P = 6 forbidden (gene, value) pairs per landscape, on 6 DISTINCT genes with values in
  {1, 2, 3} (so the all-zero start is correct). "Must not co-occur": a genotype matching two or
  more of the 6 pairs is WRONG (the value check fails, correctness level 4); otherwise correct.
* speed = (NK + exp(-|levels - peak|^2 / 4)) / 2 in [0, 1]: NK = mean over genes i of
  ``nk_table[i, g[i - 1], g[i], g[i + 1]]`` (K = 2 neighbours, cyclic), tables U[0, 1); peak a
  uniformly random cell.
* fitness = 5 + speed for a correct program; 4 (KernelFoundry's perf_score of a value mismatch,
  no speed-up credit) for a wrong one. Wrong programs still enter the archive (as in the
  original), and a correct one always beats them.

Searches, each one ``lax.scan`` over ``evaluations`` steps; every step evaluates exactly one
program. Step 0 evaluates the all-zero start (no parent yet); later steps make a child:

* mutation: 1 or 2 (probability 1/2 each) distinct genes get a uniformly random DIFFERENT value;
* ``"map_elites"``: parent by :func:`jaxpapers.evolve.sampling.sample_parent` (islands,
  migration), child = mutation of the parent, then for each of its inspirations
  (:func:`~jaxpapers.evolve.sampling.sample_inspirations`) with probability 1/2 one uniformly
  chosen block of 4 genes (one axis) is copied from the inspiration (our crossover: an
  inspiration lends one axis' optimisation). The start is the seed program (island 0, not
  counted by :func:`~jaxpapers.evolve.sampling.advance`); each later child is assigned,
  counted and may trigger a migration, in that order (the original's controller loop);
* ``"uniform_parent"``: parent uniform over the filled cells, mutation only, no islands;
* ``"hill_climb"``: one current genotype; child = its mutation; accepted if its fitness >= the
  current fitness (neutral moves are taken).

Every evaluated program is offered to an :class:`~jaxpapers.evolve.archive.Archive` (for the
hill climber too, only for reporting). Coverage counts the distinct cells reached by a CORRECT
evaluated program (``hit``), whether or not it is still the elite. :func:`run_seeds` runs one
method on S seeds (own landscape per seed) in one compiled vmapped call; :func:`compare` runs
every method on the same seeds (paired).

>>> import jax
>>> land = make_landscape(jax.random.key(0))
>>> trace = run_search(jax.random.key(1), land, method="hill_climb", evaluations=20)
>>> trace.coverage_curve.shape, int(trace.coverage_curve[0]), trace.fitness[0] >= 5
((20,), 1, Array(True, dtype=bool))
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

from jaxpapers.core import checks, pytree
from jaxpapers.evolve.archive import Archive, archive_init, archive_insert_with_info
from jaxpapers.evolve.sampling import (SamplingConfig, advance, assign_island, migrate,
                                       sample_inspirations, sample_parent, sampler_init)

__all__ = ["Landscape", "SearchTrace", "make_landscape", "evaluate", "levels", "mutate",
           "run_search", "run_seeds", "compare", "METHODS", "GRID", "NUM_GENES"]

NUM_GENES = 12  # G
NUM_VALUES = 4
BLOCK = 4  # genes per axis
GRID = (4, 4, 4)  # (memory, compute, parallelism) levels 0..3; C = 64
NUM_FORBIDDEN = 6  # P
MAX_LEVEL = 3
WRONG_FITNESS = 4.0  # perf_score of a value mismatch
CORRECT_FITNESS = 5.0  # perf_score of a correct program; speed is added
METHODS = ("map_elites", "uniform_parent", "hill_climb")


@pytree.dataclass
class Landscape:
    """One random landscape. G = 12 genes, P = 6 forbidden pairs.

    Attributes:
      nk_table: [G, 4, 4, 4] float32, gene i's NK contribution given (g[i-1], g[i], g[i+1]).
      forbidden_gene: [P] int32 distinct genes of the forbidden pairs.
      forbidden_value: [P] int32 their values (1..3 from :func:`make_landscape`).
      peak: [3] float32 the speed peak in level space (a cell from :func:`make_landscape`;
        any finite point is allowed, e.g. far away to switch the peak term off).
    """

    nk_table: jax.Array  # [G, 4, 4, 4]
    forbidden_gene: jax.Array  # [P]
    forbidden_value: jax.Array  # [P]
    peak: jax.Array  # [3]


@pytree.dataclass
class SearchTrace:
    """What one search did. E = evaluations, C = 64 cells, G = 12 genes.

    Attributes:
      coverage_curve: [E] int32, distinct cells hit by a correct program after each evaluation.
      best_fitness_curve: [E] float32, best fitness evaluated so far.
      archive: the final :class:`~jaxpapers.evolve.archive.Archive` (every evaluated program
        offered to it).
      hit: [C] bool, cells reached by a correct evaluated program.
      genotypes: [E, G] int32, the evaluated programs in order.
      fitness: [E] float32, their fitness.
    """

    coverage_curve: jax.Array  # [E]
    best_fitness_curve: jax.Array  # [E]
    archive: Archive
    hit: jax.Array  # [C]
    genotypes: jax.Array  # [E, G]
    fitness: jax.Array  # [E]


# ------------------------------------------------------------------ landscape


def make_landscape(key: jax.Array) -> Landscape:
    """Draw a landscape: NK tables U[0, 1), 6 distinct genes with values in {1, 2, 3}, a
    uniform peak cell (module doc).

    >>> make_landscape(jax.random.key(0)).nk_table.shape
    (12, 4, 4, 4)
    """
    checks.check_key("key", key)
    return _make_landscape(key)


@jax.jit
def _make_landscape(key: jax.Array) -> Landscape:
    k_nk, k_gene, k_value, k_peak = jax.random.split(key, 4)
    return Landscape(
        nk_table=jax.random.uniform(k_nk, (NUM_GENES, NUM_VALUES, NUM_VALUES, NUM_VALUES)),
        forbidden_gene=jax.random.permutation(k_gene, NUM_GENES)[:NUM_FORBIDDEN].astype(
            jnp.int32),
        forbidden_value=jax.random.randint(k_value, (NUM_FORBIDDEN,), 1, NUM_VALUES, jnp.int32),
        peak=jax.random.randint(k_peak, (len(GRID),), 0, GRID[0]).astype(jnp.float32))


def _check_landscape(landscape) -> None:
    if not isinstance(landscape, Landscape):
        raise TypeError(f"landscape must be a Landscape, got {type(landscape).__name__}")
    want = {"nk_table": (NUM_GENES, NUM_VALUES, NUM_VALUES, NUM_VALUES),
            "forbidden_gene": (NUM_FORBIDDEN,), "forbidden_value": (NUM_FORBIDDEN,),
            "peak": (len(GRID),)}
    for name, shape in want.items():
        got = np.shape(getattr(landscape, name))
        if got != shape:
            raise ValueError(f"landscape.{name} must have shape {shape} (unbatched), got {got}")


def _check_genotype(genotype) -> jax.Array:
    g = jnp.asarray(genotype)
    if g.shape != (NUM_GENES,) or not jnp.issubdtype(g.dtype, jnp.integer):
        raise ValueError(f"genotype must be an integer array of shape ({NUM_GENES},), got "
                         f"shape {g.shape} dtype {g.dtype}")
    checks.check_range("genotype", g, low=0, high=NUM_VALUES - 1)
    return g.astype(jnp.int32)


def levels(genotype: jax.typing.ArrayLike) -> jax.Array:
    """[3] int32 axis levels: leading non-zero genes of each block of 4, capped at 3.

    >>> levels(jnp.array([1, 0, 2, 3, 2, 3, 1, 1, 0, 3, 3, 3])).tolist()
    [1, 3, 0]
    """
    g = _check_genotype(genotype).reshape(len(GRID), BLOCK)
    lead = jnp.cumprod(g != 0, axis=1).sum(axis=1)
    return jnp.minimum(lead, MAX_LEVEL).astype(jnp.int32)


def evaluate(landscape: Landscape,
             genotype: jax.typing.ArrayLike) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Evaluate one program (unbatched; vmap for many).

    Args:
      landscape: the :class:`Landscape`.
      genotype: [G] int genes in {0, 1, 2, 3}.

    Returns:
      (descriptor [3] int32 levels, fitness float32 scalar, correct bool scalar): fitness is
      5 + speed when correct (fewer than 2 forbidden pairs matched), else 4.
    """
    _check_landscape(landscape)
    g = _check_genotype(genotype)
    desc = levels(g)
    matched = jnp.sum(g[landscape.forbidden_gene] == landscape.forbidden_value)
    correct = matched < 2
    left, right = jnp.roll(g, 1), jnp.roll(g, -1)  # g[i - 1], g[i + 1], cyclic
    nk = jnp.mean(landscape.nk_table[jnp.arange(NUM_GENES), left, g, right])
    dist2 = jnp.sum(jnp.square(desc.astype(jnp.float32) - landscape.peak))
    speed = 0.5 * (nk + jnp.exp(-dist2 / 4.0))
    fitness = jnp.where(correct, CORRECT_FITNESS + speed, WRONG_FITNESS).astype(jnp.float32)
    return desc, fitness, correct


def mutate(key: jax.Array, genotype: jax.typing.ArrayLike) -> jax.Array:
    """[G] int32: 1 or 2 (prob. 1/2 each) distinct genes set to a uniform different value."""
    checks.check_key("key", key)
    g = _check_genotype(genotype)
    # one draw (cheap to compile in a scan); the modulo bias of 32-bit words is < 1e-9
    b = jax.random.bits(key, (5,))
    first = (b[1] % NUM_GENES).astype(jnp.int32)
    second = (first + 1 + (b[2] % (NUM_GENES - 1)).astype(jnp.int32)) % NUM_GENES
    pos = jnp.stack([first, second])
    new = (g[pos] + 1 + (b[3:] % (NUM_VALUES - 1)).astype(jnp.int32)) % NUM_VALUES
    new = jnp.where(jnp.array([True, False]) | (b[0] % 2 == 1), new, g[pos])
    return g.at[pos].set(new)


def _crossover(key: jax.Array, child: jax.Array, donors: jax.Array,
               valid: jax.Array) -> jax.Array:
    """Per valid donor [n, G], with prob. 1/2 copy one uniform block of 4 genes into child."""
    block_of_gene = jnp.arange(NUM_GENES) // BLOCK
    b = jax.random.bits(key, (donors.shape[0], 2))
    for (b_do, b_block), donor, ok in zip(b, donors, valid):
        do = ok & (b_do % 2 == 1)
        child = jnp.where(do & (block_of_gene == b_block % len(GRID)), donor, child)
    return child


# ------------------------------------------------------------------ searches


def _uniform_parent(key: jax.Array, archive: Archive) -> jax.Array:
    filled = jnp.isfinite(archive.fitness)
    rank = jnp.floor(jax.random.uniform(key) * filled.sum())  # the rank-th filled cell
    cell = jnp.argmax(jnp.cumsum(filled) > rank)
    return jnp.where(filled.any(), cell, -1).astype(jnp.int32)


def _run(key, landscape, method: str, evaluations: int, config: SamplingConfig) -> SearchTrace:
    """One search (unbatched, traced); arguments already checked."""
    start = jnp.zeros((NUM_GENES,), jnp.int32)
    archive = archive_init(GRID, start)
    c = math.prod(GRID)
    carry = dict(archive=archive, hit=jnp.zeros((c,), bool),
                 best=jnp.full((), -jnp.inf, jnp.float32), current=start,
                 current_fitness=jnp.full((), -jnp.inf, jnp.float32))
    if method == "map_elites":
        carry["sampler"] = sampler_init(archive, config)

    def step(carry, keys_t):
        k_par, k_insp, k_mut, k_cross, k_mig = keys_t
        archive = carry["archive"]
        if method == "hill_climb":
            has_parent = jnp.isfinite(carry["current_fitness"])
            child = mutate(k_mut, carry["current"])
        else:
            if method == "map_elites":
                parent, _ = sample_parent(k_par, archive, carry["sampler"], config)
            else:
                parent = _uniform_parent(k_par, archive)
            has_parent = parent >= 0
            child = mutate(k_mut, archive.genotype[jnp.maximum(parent, 0)])
            if method == "map_elites" and config.num_inspirations:
                insp = sample_inspirations(k_insp, archive, parent, config)
                child = _crossover(k_cross, child, archive.genotype[jnp.maximum(insp, 0)],
                                   insp >= 0)
        child = jnp.where(has_parent, child, start)  # step 0: the all-zero start
        desc, fit, correct = evaluate(landscape, child)
        archive, info = archive_insert_with_info(archive, child[None], desc[None], fit[None])
        cell = info.cells[0]
        new = dict(carry, archive=archive, hit=carry["hit"].at[cell].max(correct),
                   best=jnp.maximum(carry["best"], fit))
        if method == "hill_climb":
            accept = fit >= carry["current_fitness"]
            new["current"] = jnp.where(accept, child, carry["current"])
            new["current_fitness"] = jnp.where(accept, fit, carry["current_fitness"])
        if method == "map_elites":
            seeded = assign_island(carry["sampler"], cell, info.inserted[0])
            moved = migrate(k_mig, archive, advance(seeded, config), config)
            new["sampler"] = jax.tree.map(lambda a, b: jnp.where(has_parent, b, a),
                                          seeded, moved)
        out = (new["hit"].sum(dtype=jnp.int32), new["best"], child, fit)
        return new, out

    carry, (cov, best, genotypes, fitness) = jax.lax.scan(
        step, carry, jax.random.split(key, (evaluations, 5)))
    return SearchTrace(coverage_curve=cov, best_fitness_curve=best, archive=carry["archive"],
                       hit=carry["hit"], genotypes=genotypes, fitness=fitness)


_run_jit = jax.jit(_run, static_argnums=(2, 3, 4))


@functools.partial(jax.jit, static_argnums=(2, 3, 4))
def _run_many(keys, landscapes, method, evaluations, config):
    return jax.vmap(lambda k, land: _run(k, land, method, evaluations, config))(keys, landscapes)


@functools.partial(jax.jit, static_argnums=1)
def _seed_inputs(key: jax.Array, seeds: int) -> tuple[jax.Array, Landscape]:
    """Seed s: fold_in(key, s) split into (landscape key, search key)."""
    pairs = jax.vmap(lambda s: jax.random.split(jax.random.fold_in(key, s)))(jnp.arange(seeds))
    return pairs[:, 1], jax.vmap(_make_landscape)(pairs[:, 0])


def _check_run_args(method, evaluations, config) -> None:
    checks.check_choice("method", method, METHODS)
    checks.check_int("evaluations", evaluations, minimum=1)
    if not isinstance(config, SamplingConfig):
        raise TypeError(f"config must be a SamplingConfig, got {type(config).__name__}")


def run_search(key: jax.Array, landscape: Landscape, *, method: str, evaluations: int = 200,
               config: SamplingConfig = SamplingConfig()) -> SearchTrace:
    """Run one search for exactly ``evaluations`` evaluations (unbatched; vmap over seeds).

    Args:
      key: a typed PRNG key (consumed).
      landscape: the :class:`Landscape`.
      method: ``"map_elites"``, ``"uniform_parent"`` or ``"hill_climb"`` (static; module doc).
      evaluations: E >= 1 (static), the start included.
      config: :class:`~jaxpapers.evolve.sampling.SamplingConfig` for ``"map_elites"`` (static).

    Returns:
      :class:`SearchTrace` with [E] curves, the final archive, hit [64] and the [E, 12] programs.
    """
    checks.check_key("key", key)
    _check_landscape(landscape)
    _check_run_args(method, evaluations, config)
    return _run_jit(key, landscape, method, int(evaluations), config)


def run_seeds(key: jax.Array, *, method: str, seeds: int = 10, evaluations: int = 200,
              config: SamplingConfig = SamplingConfig()) -> tuple[SearchTrace, Landscape]:
    """One search per seed, vmapped in ONE compiled call; seed s has its own landscape.

    Seed s uses ``fold_in(key, s)``, split into (landscape key, search key); the landscapes do
    not depend on ``method``, so methods run with the same key are paired. Seed s equals
    ``run_search(search key, landscape, ...)`` bit for bit.

    Args:
      key: a typed PRNG key.
      method, evaluations, config: as in :func:`run_search` (static).
      seeds: S >= 1 (static).

    Returns:
      (:class:`SearchTrace` with a leading axis S on every leaf, :class:`Landscape` [S, ...]).
    """
    checks.check_key("key", key)
    checks.check_int("seeds", seeds, minimum=1)
    _check_run_args(method, evaluations, config)
    search_keys, landscapes = _seed_inputs(key, int(seeds))
    return _run_many(search_keys, landscapes, method, int(evaluations), config), landscapes


def compare(key: jax.Array, *, seeds: int = 10, evaluations: int = 200,
            config: SamplingConfig = SamplingConfig(), methods=METHODS,
            curves: bool = False) -> dict:
    """Paired comparison: :func:`run_seeds` for each method (one jit per method), so every
    method sees the same ``seeds`` landscapes.

    Returns:
      ``{method: {"coverage": [seeds] int32 numpy (final coverage), "best_fitness": [seeds]
      float32 numpy}}``; with ``curves=True`` also ``"coverage_curve"`` and
      ``"best_fitness_curve"``, [seeds, evaluations] numpy.

    >>> out = compare(jax.random.key(0), seeds=2, evaluations=30, methods=("hill_climb",))
    >>> out["hill_climb"]["coverage"].shape
    (2,)
    """
    checks.check_key("key", key)
    checks.check_int("seeds", seeds, minimum=1)
    for method in methods:
        _check_run_args(method, evaluations, config)
    out = {}
    for method in methods:
        trace, _ = run_seeds(key, method=method, seeds=seeds, evaluations=evaluations,
                             config=config)
        out[method] = {"coverage": np.asarray(trace.coverage_curve[:, -1]),
                       "best_fitness": np.asarray(trace.best_fitness_curve[:, -1])}
        if curves:
            out[method]["coverage_curve"] = np.asarray(trace.coverage_curve)
            out[method]["best_fitness_curve"] = np.asarray(trace.best_fitness_curve)
    return out
