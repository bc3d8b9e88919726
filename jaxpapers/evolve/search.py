"""KernelFoundry's outer loop over kernel sources: MAP-Elites with islands, inspirations, prompts.

Per iteration (the official ``evolve_database_optimization_aware`` loop, one child at a time):

1. the sampler (:mod:`.sampling`) draws a parent cell from the current island (uniform 0.2 /
   softmax of elite fitness 0.7 / uniform over all 0.1) and its inspirations from other cells;
2. the prompt database (:mod:`.prompts`, optional) selects a prompt;
3. the mutator proposes a child (:class:`.mutators.Candidate`);
4. :func:`.evaluate.evaluate_source` scores it (ladder level + model speedup, cell from
   :mod:`.descriptors`);
5. the child enters the archive if its cell is empty or holds a strictly worse elite (wrong
   kernels too, as in the original); the island bookkeeping records it, counts the program,
   migrates when due; the prompt's fitness becomes the best child score so far.

The archive's genotype is the child's index into ``candidates``. The loop is plain Python:
each step waits for a sandboxed evaluation (seconds). The sampler's array work around it runs
as two small compiled programs of fixed shapes (:func:`_pick`, :func:`_record`): op by op
it would compile a program per primitive, seconds more than the loop itself at a few steps.
"""

from __future__ import annotations

import dataclasses
import functools
import sys
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from jaxpapers.evolve import prompts as prompts_mod
from jaxpapers.evolve.archive import (Archive, _raise_if_outside, archive_init,
                                      archive_insert_with_info)
from jaxpapers.evolve.evaluate import Evaluation, evaluate_source
from jaxpapers.evolve.mutators import Candidate
from jaxpapers.evolve.sampling import (SamplingConfig, advance, assign_island, migrate,
                                       sample_inspirations, sample_parent, sampler_init)

__all__ = ["GRID", "KernelSearchResult", "kernel_search"]

GRID = (4, 4, 4)  # (memory, compute, parallelism) levels 0..3


@dataclasses.dataclass(frozen=True)
class KernelSearchResult:
    """What one search made.

    Attributes:
      archive: the final :class:`Archive` (genotype: int32 index into ``candidates``).
      candidates: every child, in order.
      evaluations: their :class:`Evaluation` (same order).
      inserted: [T] bool, the child became its cell's elite.
      correct_cells: [T] int, cells hit by a correct (level 5) child so far.
      best_fitness: [T] float, best fitness so far.
      prompt_ids: the prompt each child was made with ("" without a prompt database).
    """

    archive: Archive
    candidates: tuple[Candidate, ...]
    evaluations: tuple[Evaluation, ...]
    inserted: np.ndarray
    correct_cells: np.ndarray
    best_fitness: np.ndarray
    prompt_ids: tuple[str, ...]

    def best(self) -> tuple[Candidate, Evaluation]:
        i = int(np.argmax([e.fitness for e in self.evaluations]))
        return self.candidates[i], self.evaluations[i]


@functools.partial(jax.jit, static_argnums=0)
def _start(config: SamplingConfig) -> tuple[Archive, Any]:
    """The empty archive (int32 genotypes: indices into the candidates) and its sampler."""
    archive = archive_init(GRID, jnp.zeros((), jnp.int32))
    return archive, sampler_init(archive, config)


@functools.partial(jax.jit, static_argnums=4)
def _pick(k_parent, k_insp, archive, state, config) -> tuple[jax.Array, jax.Array]:
    """(parent cell or -1, its [n] inspiration cells): steps 1 of the module docstring."""
    cell, _ = sample_parent(k_parent, archive, state, config)
    return cell, sample_inspirations(k_insp, archive, cell, config)


@functools.partial(jax.jit, static_argnums=6)
def _record(k_mig, archive, state, index, cell, fitness, config):
    """Step 5 for one evaluated child: (archive, state, inserted bool scalar)."""
    archive, info = archive_insert_with_info(archive, index[None], cell[None], fitness[None])
    state = assign_island(state, info.cells[0], info.inserted[0])
    state = advance(state, config)
    state = migrate(k_mig, archive, state, config)
    return archive, state, info.inserted[0]


def _descriptor(cell) -> np.ndarray:
    """The evaluation's cell as a [3] float32 descriptor (the same cell and stored descriptor
    as integer levels, and one compiled :func:`_record` for either), raising like an eager
    insert when it lies outside the grid: under jit the insert would drop it silently."""
    x = np.asarray(cell, np.float32)
    if x.shape != (len(GRID),):
        raise ValueError(f"evaluation cell must have {len(GRID)} levels, got {cell!r}")
    _raise_if_outside(x[None], GRID)
    return x


def kernel_search(key: jax.Array, task, mutator, *, iterations: int,
                  evaluate: Callable[..., Evaluation] | None = None,
                  config: SamplingConfig = SamplingConfig(),
                  prompt_db: prompts_mod.PromptDatabase | None = None,
                  progress: bool = False, **evaluate_kwargs: Any) -> KernelSearchResult:
    """Run ``iterations`` steps of the loop in the module docstring on ``task``.

    Args:
      key: a typed PRNG key (consumed); every draw (parent, inspirations, mutation, migration,
        prompt) derives from it.
      task: a task name of :mod:`.tasks`.
      mutator: a mutator (``propose(key, parent, inspirations, prompt)`` and ``update``).
      iterations: children to make (>= 1).
      evaluate: ``evaluate(source, task, params=..., **evaluate_kwargs) -> Evaluation``
        (default :func:`evaluate_source`).
      config: the sampler's :class:`SamplingConfig`.
      prompt_db: optional prompt database; each child's fitness is recorded for its prompt.
      progress: print one line per iteration to stderr.

    Returns:
      A :class:`KernelSearchResult`.
    """
    if isinstance(iterations, bool) or not isinstance(iterations, int) or iterations < 1:
        raise ValueError(f"iterations must be an int >= 1, got {iterations!r}")
    evaluate = evaluate or evaluate_source
    archive, state = _start(config)
    candidates: list[Candidate] = []
    evals: list[Evaluation] = []
    inserted, cells_curve, best_curve, prompt_ids = [], [], [], []
    hit = set()
    best = -np.inf
    for it in range(iterations):
        key, k_parent, k_insp, k_mut, k_mig, k_prompt = jax.random.split(key, 6)
        parent, inspirations = None, ()
        if np.isfinite(np.asarray(archive.fitness)).any():
            cell, insp = _pick(k_parent, k_insp, archive, state, config)
            cell = int(cell)
            if cell >= 0:
                genotype = np.asarray(archive.genotype)
                parent = candidates[int(genotype[cell])]
                inspirations = tuple(candidates[int(genotype[c])] for c in np.asarray(insp)
                                     if c >= 0)
        prompt = prompts_mod.select(prompt_db, k_prompt) if prompt_db is not None else None
        child = mutator.propose(k_mut, parent, inspirations, prompt)
        mutator = mutator.update(child)
        ev = evaluate(child.source, task, params=dict(child.params), **evaluate_kwargs)
        archive, state, was_inserted = _record(
            k_mig, archive, state, np.int32(len(candidates)), _descriptor(ev.cell),
            np.float32(ev.fitness), config)
        if prompt_db is not None:
            prompt_db = prompts_mod.record(prompt_db, prompt.id, ev.fitness)
        candidates.append(child)
        evals.append(ev)
        inserted.append(bool(was_inserted))
        if ev.level == 5:
            hit.add(tuple(ev.cell))
        best = max(best, ev.fitness)
        cells_curve.append(len(hit))
        best_curve.append(best)
        prompt_ids.append(prompt.id if prompt is not None else "")
        if progress:
            print(f"[kernel_search {task}] {it + 1}/{iterations} {child.origin}: level "
                  f"{ev.level} fitness {ev.fitness:.3f} cell {ev.cell}", file=sys.stderr)
    return KernelSearchResult(archive, tuple(candidates), tuple(evals), np.array(inserted),
                              np.array(cells_curve), np.array(best_curve), tuple(prompt_ids))
