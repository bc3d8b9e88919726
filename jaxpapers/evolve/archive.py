"""A MAP-Elites grid archive over integer descriptor levels (KernelFoundry's insert rule).

The archive holds at most one elite per cell of a D-dimensional grid of shape ``grid_shape``;
C = prod(grid_shape) cells, numbered ROW-MAJOR (``np.ravel_multi_index``: the last axis varies
fastest). A candidate's descriptor gives one integer level per axis; its cell is the cell of
those levels.

Insert rule (Mouret & Clune 2015, "Illuminating search spaces by mapping elites", Alg. 1:
``if P(b') = empty or f(P(b')) < f(x'): P(b') <- x'``; KernelFoundry inserts "into an empty
cell or over a strictly worse elite"), applied to a batch of B candidates at once:

1. a candidate whose fitness is not finite (NaN, +inf, -inf) or whose descriptor lies outside
   the grid never enters;
2. among the remaining candidates of one cell, the batch best is the one with the highest
   fitness, and among equal highest fitnesses the one with the LOWEST batch index;
3. the batch best replaces the cell's elite only if its fitness is STRICTLY greater (an empty
   cell holds -inf, so any finite fitness fills it).

This equals inserting the candidates one by one in batch order with the strict rule (the first
of equal candidates enters, the later ones are not strictly better). QDax's
``MapElitesRepertoire.add`` has the same per-cell max and strict ``>``, but lets every one of
equal best candidates scatter into the cell, so which genotype is kept is unspecified there.

Descriptors. Integer arrays give the levels directly. Floating arrays are floored: the level of
``x`` on axis d is ``floor(x)``, so each cell is the unit box ``[i, i + 1)`` on every axis and
integer-valued floats such as ``2.0`` are the level ``2``; a non-integer such as ``2.7`` is
level 2 (it is not rejected). A level must lie in ``[0, grid_shape[d])``. Called with concrete
arrays, :func:`archive_insert` raises a ``ValueError`` naming ``descriptors`` and the first
offending row (NaN descriptors included); inside ``jit`` / ``vmap`` the values are unknown when
checking, so such a candidate is dropped instead (never inserted, ``cells == -1`` in the info).
The archive stores the elite's descriptor as given (cast to float32, not floored).

Fitness is stored as float32: a float64 fitness is rounded first, so two float64 values that
round to the same float32 are a tie.

>>> import jax.numpy as jnp
>>> archive = archive_init((2, 3), jnp.zeros(4))
>>> archive = archive_insert(archive, jnp.ones((2, 4)), jnp.array([[1, 2], [1, 2]]),
...                          jnp.array([0.5, 0.5]))
>>> int(coverage(archive)), [x.item() for x in best(archive)]
(1, [0.5, 5])
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxpapers.core import checks, pytree

__all__ = ["Archive", "InsertInfo", "archive_init", "archive_insert", "archive_insert_with_info",
           "cell_index", "coverage", "best"]

_MAX_CELLS = 2**31 - 1  # cell indices are int32


@pytree.dataclass
class Archive:
    """A MAP-Elites grid archive (one elite per cell). C = prod(grid_shape), D = len(grid_shape).

    Attributes:
      fitness: [C] float32 elite fitness; ``-inf`` marks an empty cell (every filled cell holds
        a finite value).
      genotype: the elites, a pytree whose leaves have a leading axis C (``[C, *leaf_shape]``);
        zeros in empty cells.
      descriptor: [C, D] float32 descriptor of each elite as it was inserted; NaN in empty cells.
      grid_shape: static tuple of D positive ints, the number of levels per descriptor axis.
        Cells are row-major over it (``np.ravel_multi_index``).
    """

    fitness: jax.Array  # [C]
    genotype: Any  # leaves [C, ...]
    descriptor: jax.Array  # [C, D]
    grid_shape: tuple[int, ...] = pytree.static_field()


@pytree.dataclass
class InsertInfo:
    """What happened to each candidate of one :func:`archive_insert_with_info` call (B of them).

    Attributes:
      inserted: [B] bool, the candidate is now the elite of its cell.
      cells: [B] int32 row-major cell of the candidate's descriptor; -1 where the descriptor is
        outside the grid or NaN (only possible under ``jit`` / ``vmap``; eagerly it raises).
    """

    inserted: jax.Array  # [B]
    cells: jax.Array  # [B]


# ------------------------------------------------------------------ checks


def _check_grid_shape(grid_shape: Any) -> tuple[int, ...]:
    """A non-empty tuple of positive ints with at most 2**31 - 1 cells in all."""
    if isinstance(grid_shape, (int, np.integer)) or not hasattr(grid_shape, "__iter__"):
        raise TypeError(f"grid_shape must be a tuple of ints, got {grid_shape!r}")
    shape = tuple(grid_shape)
    if not shape:
        raise ValueError("grid_shape must have at least one axis (D >= 1), got ()")
    for d, n in enumerate(shape):
        checks.check_int(f"grid_shape[{d}]", n, minimum=1)
    shape = tuple(int(n) for n in shape)
    if math.prod(shape) > _MAX_CELLS:
        raise ValueError(f"grid_shape {shape} has {math.prod(shape)} cells; at most "
                         f"{_MAX_CELLS} fit int32 cell indices")
    return shape


def _as_descriptors(descriptors: Any, grid_shape: tuple[int, ...]) -> jax.Array:
    """``descriptors`` as a [B, D] integer or float (>= float32) array; shape checks only."""
    x = jnp.asarray(descriptors)
    if jnp.issubdtype(x.dtype, jnp.bool_) or not (
            jnp.issubdtype(x.dtype, jnp.integer) or jnp.issubdtype(x.dtype, jnp.floating)):
        raise TypeError(f"descriptors must be an integer or floating array, got dtype {x.dtype}")
    d = len(grid_shape)
    if x.ndim != 2 or x.shape[1] != d:
        raise ValueError(f"descriptors must have shape [B, D] with D = len(grid_shape) = {d} "
                         f"(grid_shape {grid_shape}), got shape {x.shape}")
    if jnp.issubdtype(x.dtype, jnp.floating) and jnp.finfo(x.dtype).bits < 32:
        x = x.astype(jnp.float32)  # floor of a bf16/f16 value is exact in float32
    return x


def _levels(x, grid_shape: tuple[int, ...], xp):
    """(levels [B, D] int32, in_grid [B] bool) of descriptors ``x``; ``xp`` is np or jnp.

    The same code runs eagerly in numpy (to raise) and traced in jnp (to drop), so both agree.
    """
    n = xp.asarray(grid_shape)
    if xp.issubdtype(x.dtype, xp.integer):
        ok = (x >= 0) & (x < n)
        level = x
    else:
        level = xp.floor(x)
        ok = xp.isfinite(x) & (level >= 0) & (level < n)
    in_grid = xp.all(ok, axis=1)
    levels = xp.where(in_grid[:, None], level, 0).astype(np.int32)
    return levels, in_grid


def _ravel(levels, grid_shape: tuple[int, ...]):
    """Row-major cell index [B] int32 of in-grid levels [B, D] (``np.ravel_multi_index``)."""
    strides = [math.prod(grid_shape[d + 1:]) for d in range(len(grid_shape))]
    return (levels * jnp.asarray(strides, jnp.int32)).sum(axis=1).astype(jnp.int32)


def _raise_if_outside(x: jax.Array, grid_shape: tuple[int, ...]) -> None:
    """Eagerly (concrete ``x``): ValueError naming ``descriptors`` and its first bad row."""
    v = checks.concrete(x)
    if v is None:
        return  # traced: out-of-grid candidates are dropped instead
    _, in_grid = _levels(v, grid_shape, np)
    if not np.all(in_grid):
        bad = np.flatnonzero(~in_grid)
        row = int(bad[0])
        raise ValueError(
            f"descriptors row {row} = {v[row].tolist()} lies outside grid_shape {grid_shape} "
            f"({bad.size} of {v.shape[0]} rows do); each level floor(descriptor[d]) must be "
            f"finite and in [0, grid_shape[d])")


def _check_archive(archive: Any) -> tuple[int, int]:
    """(C, D) of a well-formed :class:`Archive` (static checks)."""
    if not isinstance(archive, Archive):
        raise TypeError(f"archive must be an Archive (from archive_init), got "
                        f"{type(archive).__name__}")
    c, d = math.prod(archive.grid_shape), len(archive.grid_shape)
    if np.shape(archive.fitness) != (c,) or np.shape(archive.descriptor) != (c, d):
        raise ValueError(f"archive fields must have fitness [C] = ({c},) and descriptor [C, D] = "
                         f"({c}, {d}) for grid_shape {archive.grid_shape}, got "
                         f"{np.shape(archive.fitness)} and {np.shape(archive.descriptor)}")
    return c, d


def _check_candidates(archive: Archive, genotypes, descriptors, fitnesses):
    """Validated (genotypes, descriptors [B, D], fitnesses [B] float32) for ``archive``."""
    grid_shape = archive.grid_shape
    x = _as_descriptors(descriptors, grid_shape)
    b = x.shape[0]
    f = jnp.asarray(fitnesses)
    if jnp.issubdtype(f.dtype, jnp.bool_) or not (
            jnp.issubdtype(f.dtype, jnp.integer) or jnp.issubdtype(f.dtype, jnp.floating)):
        raise TypeError(f"fitnesses must be a real (integer or floating) array, got dtype "
                        f"{f.dtype}")
    if f.shape != (b,):
        raise ValueError(f"fitnesses must have shape [B] = ({b},) (B = descriptors.shape[0]), "
                         f"got shape {f.shape}")
    ref_leaves, ref_def = jax.tree_util.tree_flatten(archive.genotype)
    leaves, treedef = jax.tree_util.tree_flatten(genotypes)
    if treedef != ref_def:
        raise ValueError(f"genotypes must have the archive's genotype structure {ref_def}, got "
                         f"{treedef}")
    out = []
    for i, (leaf, ref) in enumerate(zip(leaves, ref_leaves)):
        leaf = jnp.asarray(leaf)
        want = (b, *np.shape(ref)[1:])
        if leaf.shape != want or leaf.dtype != ref.dtype:
            raise ValueError(f"genotypes leaf {i} must have shape [B, ...] = {want} and dtype "
                             f"{ref.dtype} (B = descriptors.shape[0], the rest as in the "
                             f"archive), got shape {leaf.shape} and dtype {leaf.dtype}")
        out.append(leaf)
    _raise_if_outside(x, grid_shape)
    return jax.tree_util.tree_unflatten(treedef, out), x, f.astype(jnp.float32)


# ------------------------------------------------------------------ public API


def archive_init(grid_shape: tuple[int, ...], genotype_like: Any) -> Archive:
    """An empty archive for genotypes shaped like ``genotype_like``.

    Args:
      grid_shape: D positive ints, the number of levels per descriptor axis (static).
      genotype_like: ONE genotype (unbatched): a pytree of arrays (or anything with ``shape``
        and ``dtype``, e.g. ``jax.ShapeDtypeStruct``); only shapes and dtypes are used.

    Returns:
      An :class:`Archive` with fitness [C] = -inf, genotype leaves zeros [C, *leaf.shape] of the
      leaf's dtype, descriptor [C, D] = NaN.

    >>> a = archive_init((4, 4, 4), {"genes": jnp.zeros(12, jnp.int32)})
    >>> a.fitness.shape, a.genotype["genes"].shape, a.descriptor.shape
    ((64,), (64, 12), (64, 3))
    """
    grid_shape = _check_grid_shape(grid_shape)
    c = math.prod(grid_shape)

    def zeros(leaf):
        if not (hasattr(leaf, "shape") and hasattr(leaf, "dtype")):
            leaf = jnp.asarray(leaf)
        return jnp.zeros((c, *leaf.shape), leaf.dtype)

    return Archive(fitness=jnp.full((c,), -jnp.inf, jnp.float32),
                   genotype=jax.tree.map(zeros, genotype_like),
                   descriptor=jnp.full((c, len(grid_shape)), jnp.nan, jnp.float32),
                   grid_shape=grid_shape)


def cell_index(descriptors: jax.typing.ArrayLike, grid_shape: tuple[int, ...]) -> jax.Array:
    """Row-major cell index of each descriptor (``np.ravel_multi_index`` of the levels).

    Args:
      descriptors: [B, D] integer levels, or floats floored to levels (see the module doc).
      grid_shape: D positive ints (static).

    Returns:
      [B] int32 cell indices in [0, C); -1 for a descriptor outside the grid, which can only
      happen under ``jit`` / ``vmap`` (eagerly it raises).

    Raises:
      ValueError: bad ``grid_shape``, ``descriptors`` not [B, D], or (concrete input) a
        descriptor outside the grid.

    >>> cell_index(jnp.array([[0, 0], [1, 2], [1.5, 0.25]]), (2, 3)).tolist()
    [0, 5, 3]
    """
    grid_shape = _check_grid_shape(grid_shape)
    x = _as_descriptors(descriptors, grid_shape)
    _raise_if_outside(x, grid_shape)
    levels, in_grid = _levels(x, grid_shape, jnp)
    return jnp.where(in_grid, _ravel(levels, grid_shape), -1)


@jax.jit
def _insert(archive: Archive, genotypes, x: jax.Array, f: jax.Array):
    """The batch MAP-Elites rule on validated inputs (x [B, D], f [B] float32)."""
    c = archive.fitness.shape[0]
    b = f.shape[0]
    levels, in_grid = _levels(x, archive.grid_shape, jnp)
    cells = jnp.where(in_grid, _ravel(levels, archive.grid_shape), -1)  # [B]
    valid = in_grid & jnp.isfinite(f)  # rule 1
    seg = jnp.where(valid, cells, c)  # invalid candidates go to a dump segment C
    # rule 2: per-cell batch best, lowest batch index among equal best fitnesses
    batch_best = jax.ops.segment_max(jnp.where(valid, f, -jnp.inf), seg,
                                     num_segments=c + 1)  # [C + 1]
    idx = jnp.arange(b, dtype=jnp.int32)
    is_best = valid & (f == batch_best[seg])
    first = jax.ops.segment_min(jnp.where(is_best, idx, b), seg, num_segments=c + 1)  # [C + 1]
    # rule 3: strictly greater than the elite (empty = -inf); the dump segment never improves
    elite = jnp.concatenate([archive.fitness, jnp.full((1,), jnp.inf, jnp.float32)])
    improves = batch_best > elite  # [C + 1]
    inserted = valid & (first[seg] == idx) & improves[seg]  # [B], at most one per cell
    target = jnp.where(inserted, cells, c)  # out of bounds: dropped by the scatter

    def put(old, new):
        return old.at[target].set(new.astype(old.dtype), mode="drop")

    new = archive.replace(fitness=put(archive.fitness, f),
                          genotype=jax.tree.map(put, archive.genotype, genotypes),
                          descriptor=put(archive.descriptor, x))
    return new, InsertInfo(inserted=inserted, cells=cells)


def archive_insert_with_info(archive: Archive, genotypes: Any, descriptors: jax.typing.ArrayLike,
                             fitnesses: jax.typing.ArrayLike) -> tuple[Archive, InsertInfo]:
    """Insert a batch of B candidates by the MAP-Elites rule; also say which ones entered.

    Unbatched over archives (one archive); vmap it for several independent archives.

    Args:
      archive: the :class:`Archive` (C cells, D = len(grid_shape) descriptor axes).
      genotypes: pytree with the archive's genotype structure; leaves [B, *leaf_shape] with
        the archive's leaf dtypes.
      descriptors: [B, D] integer levels or floats (floored); see the module doc for the
        out-of-grid rule (ValueError eagerly, dropped under jit / vmap).
      fitnesses: [B] real; cast to float32. Non-finite values never enter.

    Returns:
      (new archive, :class:`InsertInfo` with ``inserted`` [B] bool and ``cells`` [B] int32).

    Raises:
      TypeError: ``archive`` is not an Archive, or non-numeric descriptors / fitnesses.
      ValueError: shapes that do not match (naming ``descriptors``, ``fitnesses`` or
        ``genotypes``), or (concrete input) a descriptor outside the grid.

    >>> a = archive_init((3,), jnp.zeros((), jnp.int32))
    >>> a, info = archive_insert_with_info(a, jnp.arange(4, dtype=jnp.int32),
    ...                                    jnp.array([[0], [0], [2], [2]]),
    ...                                    jnp.array([1.0, 2.0, jnp.nan, 3.0]))
    >>> info.inserted.tolist(), a.genotype.tolist(), a.fitness.tolist()
    ([False, True, False, True], [1, 0, 3], [2.0, -inf, 3.0])
    """
    _check_archive(archive)
    genotypes, x, f = _check_candidates(archive, genotypes, descriptors, fitnesses)
    return _insert(archive, genotypes, x, f)


def archive_insert(archive: Archive, genotypes: Any, descriptors: jax.typing.ArrayLike,
                   fitnesses: jax.typing.ArrayLike) -> Archive:
    """:func:`archive_insert_with_info` without the info: the archive after the batch.

    Args:
      archive: the :class:`Archive`.
      genotypes: pytree, leaves [B, *leaf_shape] matching the archive's.
      descriptors: [B, D] levels (ints, or floats that are floored).
      fitnesses: [B] real (non-finite never enters).

    Returns:
      The new :class:`Archive` (same shapes, dtypes and grid_shape).

    >>> a = archive_init((2,), jnp.zeros(()))
    >>> a = archive_insert(a, jnp.array([7.0, 8.0]), jnp.array([[1], [1]]), jnp.array([1., 1.]))
    >>> a.genotype.tolist()  # equal fitnesses: the first candidate is kept
    [0.0, 7.0]
    """
    return archive_insert_with_info(archive, genotypes, descriptors, fitnesses)[0]


def coverage(archive: Archive) -> jax.Array:
    """Number of filled cells, an int32 scalar (the elites with fitness > -inf).

    >>> int(coverage(archive_init((2, 2), jnp.zeros(()))))
    0
    """
    _check_archive(archive)
    return jnp.sum(archive.fitness > -jnp.inf, dtype=jnp.int32)


def best(archive: Archive) -> tuple[jax.Array, jax.Array]:
    """The best elite: (fitness float32 scalar, cell int32 scalar).

    Among equal best fitnesses the lowest cell index is returned. An empty archive gives
    ``(-inf, -1)``.

    >>> [v.item() for v in best(archive_init((2,), jnp.zeros(())))]
    [-inf, -1]
    """
    _check_archive(archive)
    cell = jnp.argmax(archive.fitness).astype(jnp.int32)
    fit = archive.fitness[cell]
    return fit, jnp.where(fit > -jnp.inf, cell, -1)
