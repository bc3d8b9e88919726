"""Configs for the DIVE experiment (frozen, JSON-serialisable)."""

from __future__ import annotations

import dataclasses

EXTRA_SCALES = ()
TINY_SECONDS = 9  # tiny's wall time, measured: only orders `reproduce --jobs` (long first)


@dataclasses.dataclass(frozen=True)
class Config:
    """Synthesis diversity, then diversity vs quantity for a next-tool policy.

    Attributes:
      n_synth: tasks synthesised for the diversity table (the issue's 1000).
      heldout_fraction: tools held out per domain (new verb / object pairs of seen words).
      n_train: N, the largest training set; sizes: fractions of N trained (N/8 .. N).
      n_eval: held-out-tool tasks and in-distribution (narrow-toolset) tasks evaluated each.
      num_seeds: policies per (arm, size), trained together.
      steps, batch_size, lr, hidden: behaviour cloning.
      sandboxed_rollouts: run evaluation tool calls in the sandbox worker (slower).
    """

    n_synth: int = 1000
    heldout_fraction: float = 0.2
    n_train: int = 800
    sizes: tuple[float, ...] = (0.125, 0.25, 0.5, 1.0)
    n_eval: int = 300
    num_seeds: int = 5
    steps: int = 300
    batch_size: int = 64
    lr: float = 3e-3
    hidden: int = 32
    sandboxed_rollouts: bool = False

    def __post_init__(self):
        if 0.25 not in self.sizes or 1.0 not in self.sizes:
            raise ValueError("sizes must include 0.25 (N/4) and 1.0 (N)")
        for name in ("n_synth", "n_train", "n_eval", "num_seeds", "steps"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1")


def tiny() -> Config:
    """Seconds: small sets, few steps (numbers meaningless)."""
    return Config(n_synth=60, n_train=64, n_eval=20, num_seeds=2, steps=20)


def small() -> Config:
    """The issue's settings (N = 800, 5 seeds, 300 + 300 evaluation tasks)."""
    return Config()


def full() -> Config:
    """Larger: 48k synthesised tasks (the paper's count), N = 8000; the LM policy is not built."""
    return Config(n_synth=48000, n_train=8000, n_eval=1000, steps=2000)
