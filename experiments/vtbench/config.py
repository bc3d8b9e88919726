"""Configs for the VT-Bench experiment (frozen, JSON-serialisable)."""

from __future__ import annotations

import dataclasses

EXTRA_SCALES = ()
TINY_SECONDS = 30  # tiny's wall time, measured: only orders `reproduce --jobs` (long first)


@dataclasses.dataclass(frozen=True)
class Config:
    """Prediction with every model, modality diagnostics, the QA twin.

    Attributes:
      seeds: training seeds of every model (all seeds and the four tasks of one model train in
        one program).
      steps, batch_size, lr, width, tab_width, hidden: the fusion models (Adam; conv widths
        w, 2w, 4w; table MLP width; concat_mlp head width).
      rows_per_image, missing_rate: vt-digits (3 table rows per image, 10% missing values).
      hgb_iter: boosting rounds of the tree baseline (sklearn HistGradientBoosting).
      ig_samples, ig_steps: test rows and Gauss-Legendre nodes of the IG diagnostic.
      qa_samples: QA base samples per mode (each gives 3 sizes x 4 tasks).
      clf_steps: steps of the QA digit / colour classifier.
      llm_samples: QA samples per mode sent to a VLM when ``JAXPAPERS_LLM_BASE_URL`` is set.
    """

    seeds: tuple[int, ...] = (0, 1)
    steps: int = 1500
    batch_size: int = 64
    lr: float = 3e-3
    width: int = 8
    tab_width: int = 64
    hidden: int = 128
    rows_per_image: int = 3
    missing_rate: float = 0.1
    hgb_iter: int = 60
    ig_samples: int = 48
    ig_steps: int = 100
    qa_samples: int = 100
    clf_steps: int = 600
    llm_samples: int = 5

    def __post_init__(self):
        for name in ("steps", "batch_size", "width", "tab_width", "hidden", "rows_per_image",
                     "hgb_iter", "ig_samples", "ig_steps", "qa_samples", "clf_steps",
                     "llm_samples"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be an int >= 1, got {v!r}")
        if not self.seeds or len(set(self.seeds)) != len(self.seeds):
            raise ValueError(f"seeds must be distinct ints, got {self.seeds!r}")
        if not 0 <= self.missing_rate < 1:
            raise ValueError(f"missing_rate must be in [0, 1), got {self.missing_rate!r}")
        if not self.lr > 0:
            raise ValueError(f"lr must be > 0, got {self.lr!r}")


def tiny() -> Config:
    """Seconds: every stage, numbers meaningless."""
    return Config(seeds=(0,), steps=20, width=4, tab_width=16, hidden=16, hgb_iter=5,
                  ig_samples=8, ig_steps=16, qa_samples=2, clf_steps=20, llm_samples=1)


def small() -> Config:
    """2 seeds, 1500 steps (2 cores, a few minutes)."""
    return Config()


def full() -> Config:
    """5 seeds as the release, 10x steps, a wider CNN, 150 QA samples per mode and size (GPU)."""
    return Config(seeds=(0, 1, 2, 3, 4), steps=15_000, width=32, hgb_iter=300,
                  ig_samples=500, qa_samples=150, clf_steps=3000, llm_samples=150)
