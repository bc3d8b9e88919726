"""Configs for the KernelFoundry experiment (frozen, JSON-serialisable)."""

from __future__ import annotations

import dataclasses

EXTRA_SCALES = ()
TINY_SECONDS = 20  # tiny's wall time, measured: only orders `reproduce --jobs` (long first)


@dataclasses.dataclass(frozen=True)
class Config:
    """(a) synthetic landscape, (b) kernel search, (c) template stage, (d) QDax parity, exploits.

    Attributes:
      synthetic_seeds, synthetic_evaluations: landscapes (one per seed, paired across methods)
        and evaluations per search (the issue: 10 x 200).
      search_iterations: children per kernel task with the scripted mutator (~40).
      search_tasks: the tasks searched.
      eval_seeds: input seeds per shape in each evaluation.
      timeout_s, memory_gb: limits of each sandboxed child.
      tune_space: "tiny" (a 2 x 2 x 1 x 2 / 3 x 2 sub-grid: each point is a Triton export,
        ~0.2 s), "small" (a 3 x 3 x 2 x 3 / 6 x 5 sub-grid of each task's space) or "full".
      tune_shapes: GPU shapes per task in the template stage (the first n of ``gpu_shapes``).
      tune_seeds: budgeted tuner and random-search runs per (task, shape).
      tune_budget: fraction of the grid the budgeted searches may evaluate (the issue: 25%).
      escapes: run the planted escape attempts (``escape_names``); escape_timeout_s: their
        time limit.
      qdax_parity: compare the archive with QDax 0.5's repertoire when qdax is installed.
    """

    synthetic_seeds: int = 10
    synthetic_evaluations: int = 200
    search_iterations: int = 40
    search_tasks: tuple[str, ...] = ("quantized_matmul", "sparse_decode_attention")
    eval_seeds: tuple[int, ...] = (0, 1, 2)
    timeout_s: float = 120.0
    memory_gb: float = 3.0
    tune_space: str = "small"
    tune_shapes: int = 2
    tune_seeds: int = 10
    tune_budget: float = 0.25
    escapes: bool = True
    escape_names: tuple[str, ...] = ("network", "write_outside", "read_secrets", "processes",
                                     "memory", "endless", "patch_score")
    escape_timeout_s: float = 20.0
    qdax_parity: bool = True

    def __post_init__(self):
        for name in ("synthetic_seeds", "synthetic_evaluations", "search_iterations",
                     "tune_shapes", "tune_seeds"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be an int >= 1, got {v!r}")
        if self.tune_space not in ("tiny", "small", "full"):
            raise ValueError(f"tune_space must be 'tiny', 'small' or 'full', got "
                             f"{self.tune_space!r}")
        if not 0 < self.tune_budget <= 1:
            raise ValueError(f"tune_budget must lie in (0, 1], got {self.tune_budget!r}")
        if not self.eval_seeds:
            raise ValueError("eval_seeds must not be empty")
        from jaxpapers.evolve.exploits import ATTEMPTS
        bad = [n for n in self.escape_names if n not in ATTEMPTS]
        if bad:
            raise ValueError(f"escape_names must be among {ATTEMPTS}, got {bad}")


def tiny() -> Config:
    """Under a minute: every stage, numbers meaningless (2 children per task, one escape, the
    tiny tuning grids)."""
    return Config(synthetic_seeds=2, synthetic_evaluations=30, search_iterations=2,
                  eval_seeds=(0,), tune_space="tiny", tune_shapes=1, tune_seeds=2,
                  escape_names=("network",))


def small() -> Config:
    """The issue's settings at CPU scale: 10 x 200 synthetic, ~40 children per kernel task."""
    return Config()


def full() -> Config:
    """The whole template grids on every GPU shape; with an LLM (JAXPAPERS_LLM_BASE_URL set)
    the paper's 50 iterations x 8 children would replace the scripted mutator (not wired: the
    scripted run is what this experiment reproduces offline)."""
    return Config(search_iterations=400, tune_space="full", tune_shapes=3)
