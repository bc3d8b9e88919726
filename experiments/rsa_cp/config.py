"""Configs for the RSA-CP experiment (frozen, JSON-serialisable)."""

from __future__ import annotations

import dataclasses

TINY_SECONDS = 7  # tiny's wall time, measured: only orders `reproduce --jobs` (long first)


@dataclasses.dataclass(frozen=True)
class Config:
    """Simulation + real-data grid.

    Attributes:
      n_cals: calibration sizes M of the simulations.
      alphas: miscoverage levels.
      n_splits: random calibration/test splits per cell.
      n_test: test scores per split (coverage of a split = their mean).
      n_ref: reference size N in the simulations.
      n_train: training rows of the linear model in the simulations.
      dim: feature dimension of the simulations.
      beta: RSA-CP rank-window level (the release uses 0.4 in simulations).
      settings: simulated noise laws ("lognormal", "student_t").
      references: reference qualities ("clean", "shifted", "misspecified").
      real_datasets: bundled sklearn datasets (diabetes: ridge + |residual|; the others:
        logistic regression + LAC score); reference = out-of-fold scores on the training half.
      real_n_cals: calibration sizes on real data.
      real_alpha: miscoverage level on real data.
      real_n_splits: splits per real-data cell.
    """

    n_cals: tuple[int, ...] = (10, 20, 40, 80, 160)
    alphas: tuple[float, ...] = (0.05, 0.1)
    n_splits: int = 2000
    n_test: int = 100
    n_ref: int = 1000
    n_train: int = 100
    dim: int = 5
    beta: float = 0.4
    settings: tuple[str, ...] = ("lognormal", "student_t")
    references: tuple[str, ...] = ("clean", "shifted", "misspecified")
    real_datasets: tuple[str, ...] = ("diabetes", "breast_cancer", "digits", "wine")
    real_n_cals: tuple[int, ...] = (20,)
    real_alpha: float = 0.1
    real_n_splits: int = 2000


def small() -> Config:
    """Both data laws, both levels, n 10..160, clean + misspecified references, 2000 splits."""
    return Config(references=("clean", "misspecified"))


def full() -> Config:
    """Paper settings with more splits and a larger reference (N = 3000)."""
    return Config(n_cals=(10, 20, 40, 80, 160), n_splits=10000, n_ref=3000,
                  references=("clean", "shifted", "misspecified"),
                  real_n_cals=(10, 20, 40), real_n_splits=10000)


def tiny() -> Config:
    """Seconds: one setting, one size, few splits (numbers meaningless)."""
    return Config(n_cals=(20,), alphas=(0.1,), n_splits=64, n_test=16, n_ref=64,
                  settings=("lognormal",), references=("clean",), real_datasets=("diabetes",),
                  real_n_cals=(20,), real_n_splits=32)
