"""Configs for the REL experiment (frozen, JSON-serialisable)."""

from __future__ import annotations

import dataclasses

EXTRA_SCALES = ()
TINY_SECONDS = 14  # tiny's wall time, measured: only orders `reproduce --jobs` (long first)


@dataclasses.dataclass(frozen=True)
class Config:
    """Shortcuts, the RC sweep with a small transformer, biology and chemistry checks.

    Attributes:
      panel_items: official-style and our A1-A4 items per task (the release ships 125).
      rc_test: RC instances per k for the solvers, shortcuts and transformer accuracy.
      rows, cols, modulus: the RC sweep's grid (2 x 8 over Z_10) and the controls' columns.
      control_cols: grids of the k = 1, 2 control (2 x cols each).
      steps, batch_size, lr, d_model, n_layers, num_seeds: the transformers (every k and seed
        of one grid shape trained together).
      bio_leaves, bio_rcs, bio_items, bio_sites: the biology detector sweep (items per RC,
        half "yes"); jc_sites: sites for the JC69 p-distance check.
      chem_items: C1 / C3 items for the reference solvers.
      llm_items, llm_rows, llm_shots, llm_bio_leaves, llm_max_tokens, llm_cache: the LLM
        stage, run only when ``JAXPAPERS_LLM_BASE_URL`` is set: items per (family, RC), the RC
        family's rows (unique instances on llm_rows x cols), in-context examples per prompt
        (one pass each), B1 tree size, the reply budget, and an optional JSON-lines reply cache
        (resume; "" for none).
    """

    panel_items: int = 125
    rc_test: int = 4000
    rows: int = 2
    cols: int = 8
    modulus: int = 10
    control_cols: tuple[int, ...] = (4, 8, 16)
    steps: int = 1000
    batch_size: int = 64
    lr: float = 1e-3
    d_model: int = 48
    n_layers: int = 2
    num_seeds: int = 1
    bio_leaves: int = 50
    bio_rcs: tuple[int, ...] = (2, 5, 10, 25)
    bio_items: int = 12
    bio_sites: int = 300
    jc_sites: int = 100_000
    chem_items: int = 200
    llm_items: int = 10
    llm_rows: int = 4
    llm_shots: tuple[int, ...] = (0, 4)
    llm_bio_leaves: int = 12
    llm_max_tokens: int = 4096
    llm_cache: str = ""

    def __post_init__(self):
        for name in ("panel_items", "rc_test", "steps", "batch_size", "num_seeds",
                     "bio_items", "chem_items", "llm_items", "llm_rows", "llm_bio_leaves",
                     "llm_max_tokens"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be an int >= 1, got {v!r}")
        if any(isinstance(v, bool) or not isinstance(v, int) or v < 0 for v in self.llm_shots):
            raise ValueError(f"llm_shots must be ints >= 0, got {self.llm_shots!r}")
        if self.cols < 8:
            raise ValueError(f"cols must be >= 8 (k = 1..7), got {self.cols}")


def tiny() -> Config:
    """Seconds: few items, a few steps (numbers meaningless)."""
    return Config(panel_items=16, rc_test=200, control_cols=(4, 8), steps=10, batch_size=16,
                  d_model=16, bio_leaves=12, bio_rcs=(2, 3), bio_items=4, jc_sites=20_000,
                  chem_items=20, llm_items=2, llm_shots=(0,))


def small() -> Config:
    """The issue's settings at one seed (2 x 8 grid, P = 10, 1000 steps, batch 64, d 48)."""
    return Config()


def full() -> Config:
    """10x steps, 3 seeds (GPU)."""
    return Config(steps=10_000, num_seeds=3, rc_test=10_000, bio_items=100,
                  bio_rcs=(2, 3, 5, 10, 15, 20, 25))
