"""Configs for the SPON experiment (frozen, JSON-serialisable)."""

from __future__ import annotations

import dataclasses

EXTRA_SCALES = ()
TINY_SECONDS = 17  # tiny's wall time, measured: only orders `reproduce --jobs` (long first)


@dataclasses.dataclass(frozen=True)
class Config:
    """Activation sparsity on the byte LM: TEAL, CATS, mean compensation and SPON at equal
    achieved sparsity.

    Attributes:
      lm_preset: "small" (4 layers, d 128, F 384; trained once and cached by ``jaxpapers.lm``,
        shared with binarypc) or "tiny" (2 layers, d 32; for the test suite).
      lm_seed: seed of the LM's training (part of its cache key).
      levels: target sparsities; metric names use ``round(100 * level)`` + "pct".
      calib_windows, calib_len: calibration windows drawn from the training files (their start
        positions from the run's key).
      eval_windows, eval_len: held-out windows for bits/byte (every position sparse); the
        first ``eval_len - 1`` bytes of each also measure achieved sparsity.
      hidden_windows: held-out windows for the per-layer hidden-state error.
      spon_steps, spon_batch, spon_seq_len, spon_lr: SPON's Adam training of the shifts
        (all levels, and the dense-calibrated variant, in one vmapped call).
      dense_variants: also run TEAL's dense calibration (TEAL and mean compensation) to show
        how dense calibration under-states the sparsity applied.
      spon_dense_levels: levels at which SPON is also trained from the dense thresholds and
        left at them (the confound of crediting SPON for running denser); needs
        ``dense_variants``. Each adds one vmapped lane to the SPON training.
      absorb_windows: windows of the absorption checks (float32 per layer with recorded masks,
        float64 end to end).
    """

    lm_preset: str = "small"
    lm_seed: int = 0
    levels: tuple[float, ...] = (0.4, 0.5, 0.6, 0.7)
    calib_windows: int = 32
    calib_len: int = 256
    eval_windows: int = 64
    eval_len: int = 257
    hidden_windows: int = 8
    spon_steps: int = 150
    spon_batch: int = 8
    spon_seq_len: int = 128
    spon_lr: float = 3e-3
    dense_variants: bool = True
    spon_dense_levels: tuple[float, ...] = (0.7,)
    absorb_windows: int = 4

    def __post_init__(self):
        if self.lm_preset not in ("tiny", "small"):
            raise ValueError(f"lm_preset must be 'tiny' or 'small', got {self.lm_preset!r}")
        if not self.levels or any(not 0.0 < lv < 1.0 for lv in self.levels):
            raise ValueError(f"levels must be in (0, 1), got {self.levels}")
        for name in ("calib_windows", "calib_len", "eval_windows", "hidden_windows",
                     "spon_batch", "spon_seq_len", "absorb_windows"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.spon_dense_levels and not (self.dense_variants and
                                           set(self.spon_dense_levels) <= set(self.levels)):
            raise ValueError("spon_dense_levels must be a subset of levels and needs "
                             "dense_variants=True")
        if self.eval_len < 3:
            raise ValueError(f"eval_len must be >= 3, got {self.eval_len}")


def tiny() -> Config:
    """Seconds: the tiny LM, two levels, a few SPON steps (numbers meaningless)."""
    return Config(lm_preset="tiny", levels=(0.5, 0.7), calib_windows=4, calib_len=64,
                  eval_windows=4, eval_len=65, hidden_windows=2, spon_steps=4, spon_batch=2,
                  spon_seq_len=32, absorb_windows=2)


def small() -> Config:
    """The issue's settings on the cached small LM (< 4 min on 2 idle cores, LM cached)."""
    return Config()


def full() -> Config:
    """Longer SPON training on 256-byte windows, more held-out text (for a GPU)."""
    return Config(spon_steps=600, spon_seq_len=256, eval_windows=256, calib_windows=64,
                  spon_dense_levels=(0.4, 0.5, 0.6, 0.7))
