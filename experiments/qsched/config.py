"""Configs for the Q-Sched experiment (frozen, JSON-serialisable)."""

from __future__ import annotations

import dataclasses


# further configs `jaxpapers reproduce qsched --scale <name>` accepts
EXTRA_SCALES = ("small_teacher",)
TINY_SECONDS = 14  # tiny's wall time, measured: only orders `reproduce --jobs` (long first)


@dataclasses.dataclass(frozen=True)
class Config:
    """Digits (8x8) class-conditional EDM model, few-step sampler, W8/W4/W3 RTN, Q-Sched.

    Attributes:
      test_fraction: rows of sklearn digits held out; the FID classifier is trained on them.
      model: "student" (default, the paper's setting: a few-step model consistency-distilled from
        the EDM teacher, sampled with the ``lcm`` multistep sampler, eps-parameterised) or
        "teacher" (the EDM denoiser itself, sampled with ``sampler``).
      sampler: few-step sampler for the teacher ("euler" or "euler_ancestral").
      train_steps, batch_size, learning_rate, hidden, depth: EDM denoiser training.
      distill_steps: consistency-distillation steps (student only).
      sigma_min, sigma_max, rho, sigma_data: EDM / Karras schedule.
      steps: few-step budgets N.
      precisions: "fp" and weight bit widths "w8", "w4", "w3" (RTN, symmetric, group-wise).
      group_size: quantization group size along K.
      box: the Q-Sched grid box for (m0, s0); grid_size points per axis (the paper: 50).
      calib_per_class: calibration prompts per class (10 classes).
      k: JAQ quality weight; temperature: alignment softmax temperature.
      n_eval: generated samples per FID evaluation; seeds: evaluation seeds.
      spearman_samples: samples per grid point for the JAQ-FID rank correlation.
      wide_box: the ablation's wider grid box.
      grad_iters, grad_lr: projected-gradient calibration (Adam).
      fid_iters: training iterations of the FID feature classifier (sklearn MLP).
      ablations: run the wide-box and gradient ablations.
    """

    test_fraction: float = 0.4
    model: str = "student"
    sampler: str = "euler"
    train_steps: int = 4000
    batch_size: int = 256
    learning_rate: float = 2e-3
    hidden: int = 256
    depth: int = 3
    distill_steps: int = 2000
    sigma_min: float = 0.002
    sigma_max: float = 20.0
    rho: float = 7.0
    sigma_data: float = 0.5
    steps: tuple[int, ...] = (4, 8)
    precisions: tuple[str, ...] = ("fp", "w8", "w4", "w3")
    group_size: int = 16
    box: tuple[float, float] = (0.8, 1.2)
    grid_size: int = 13
    calib_per_class: int = 2
    k: float = 1.0
    temperature: float = 2.0
    n_eval: int = 1000
    seeds: int = 3
    spearman_samples: int = 256
    wide_box: tuple[float, float] = (0.6, 1.8)
    grad_iters: int = 60
    grad_lr: float = 0.02
    ablations: bool = True
    fid_iters: int = 500


def small() -> Config:
    """Minutes on 2 CPU cores: the full report grid at a 13 x 13 calibration grid."""
    return Config()


def small_teacher() -> Config:
    """The same grid on the undistilled EDM teacher sampled with few Euler steps."""
    return Config(model="teacher", sampler="euler")


def full() -> Config:
    """The paper's 50 x 50 grid, longer training, more samples and seeds (GPU)."""
    return Config(train_steps=20000, grid_size=50, calib_per_class=3, n_eval=2000, seeds=5,
                  spearman_samples=512, grad_iters=200, distill_steps=10000)


def tiny() -> Config:
    """Seconds: every stage of the pipeline on a tiny model (numbers meaningless)."""
    return Config(train_steps=60, distill_steps=30, batch_size=64, hidden=32, depth=2,
                  steps=(4,), precisions=("fp", "w4"), grid_size=3, calib_per_class=1,
                  n_eval=64, seeds=2, spearman_samples=16, ablations=False, fid_iters=20)
