"""Configs for the SuperMeshNet experiment (frozen, JSON-serialisable)."""

from __future__ import annotations

import dataclasses

EXTRA_SCALES = ()
TINY_SECONDS = 17  # tiny's wall time, measured: only orders `reproduce --jobs` (long first)

MODELS = ("knn", "sup_all", "sup_few", "sup_few_ib", "comp", "comp_noib")
DATASETS = ("angle", "laplace", "geometry")


@dataclasses.dataclass(frozen=True)
class Config:
    """Mesh super-resolution on scikit-fem plate data: supervised vs complementary MPNNs.

    Attributes:
      datasets: which plate datasets ("angle": elasticity, one mesh, traction angle varies;
        "laplace": Laplace with +-1 holes, hole shapes vary; "geometry": elasticity, hole
        shapes vary).
      lr_size, lr_hole, hr_size, hr_hole: mesh sizes in mm (coarse grid spacing and the size
        near the holes) of the low- and high-resolution meshes.
      num_test, num_val, num_paired, num_lr_only: samples per dataset: test, validation (model
        selection, instead of the release's early stopping on the test loss), the few paired
        LR-HR training samples and the LR-only ones. ``sup_all`` trains on all
        ``num_paired + num_lr_only`` pairs.
      models: which of :data:`MODELS` to run (``knn`` needs no training).
      hidden: MLP width (the release: 30); 3 Dense layers per MLP.
      depth: GN blocks on each of the LR and HR graphs (the release: 3).
      steps: optimizer steps per model (the same budget for every model), ``batch`` triplets
        (complementary) or pairs (supervised) per step.
      learning_rate: Adam's (the release: 1e-3).
      eval_every: steps between validation / test evaluations.
      last_evals: the release's RMSE is the mean over the last evaluations (it uses 5).
      num_seeds: initialisations and triplet orders (the data is fixed per dataset).
      data_seed: the seed of the FEM parameters (angles, hole radii).
    """

    datasets: tuple[str, ...] = ("angle", "laplace")
    lr_size: float = 60.0
    lr_hole: float = 30.0
    hr_size: float = 30.0
    hr_hole: float = 15.0
    num_test: int = 40
    num_val: int = 20
    num_paired: int = 20
    num_lr_only: int = 180
    models: tuple[str, ...] = MODELS
    hidden: int = 30
    depth: int = 3
    steps: int = 240
    batch: int = 1
    learning_rate: float = 1e-3
    eval_every: int = 40
    last_evals: int = 3
    num_seeds: int = 2
    data_seed: int = 0

    def __post_init__(self):
        bad = [d for d in self.datasets if d not in DATASETS]
        if bad or not self.datasets:
            raise ValueError(f"datasets must be a non-empty subset of {DATASETS}, got "
                             f"{self.datasets}")
        bad = [m for m in self.models if m not in MODELS]
        if bad or not self.models:
            raise ValueError(f"models must be a non-empty subset of {MODELS}, got {self.models}")
        for name in ("num_test", "num_val", "num_paired", "steps", "batch", "eval_every",
                     "last_evals", "num_seeds", "hidden", "depth"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.num_paired < 2:
            raise ValueError("num_paired must be >= 2 (a triplet draws two distinct pairs)")
        if self.num_lr_only < 1:
            raise ValueError(f"num_lr_only must be >= 1, got {self.num_lr_only}")
        if self.eval_every > self.steps:
            raise ValueError("eval_every must be <= steps")
        if not 0 < self.learning_rate < 1:
            raise ValueError(f"learning_rate must be in (0, 1), got {self.learning_rate}")
        if not (self.hr_size < self.lr_size and self.hr_hole < self.lr_hole):
            raise ValueError("the HR mesh must be finer than the LR mesh")

    @property
    def num_samples(self) -> int:
        return self.num_test + self.num_val + self.num_paired + self.num_lr_only


def tiny() -> Config:
    """Seconds: coarse meshes, a handful of samples, a few steps (numbers meaningless)."""
    return Config(lr_size=80.0, lr_hole=40.0, hr_size=40.0, hr_hole=20.0, num_test=4, num_val=2,
                  num_paired=3, num_lr_only=5, hidden=8, depth=1, steps=6, batch=2, eval_every=3,
                  last_evals=2, num_seeds=2)


def small() -> Config:
    """The issue's split (40 test, 20 paired, 180 LR-only, + 20 validation) on coarse meshes
    (LR ~60 / HR ~300 nodes), two seeds, 240 steps of one triplet or pair for every model
    (< 4 min on 2 cores, data included; far shorter than the release's training)."""
    return Config()


def full() -> Config:
    """For a GPU: the release's sizes (1000 samples, 100 test, 200 train pairs of which 20
    paired), its mesh sizes (LR 40/16 mm, HR 10/4 mm), all three datasets, 5 seeds, long
    training (the release stops early; we select on validation)."""
    return Config(datasets=("angle", "laplace", "geometry"), lr_size=40.0, lr_hole=16.0,
                  hr_size=10.0, hr_hole=4.0, num_test=100, num_val=100, num_paired=20,
                  num_lr_only=180, steps=50_000, batch=8, eval_every=1000, last_evals=5,
                  num_seeds=5)
