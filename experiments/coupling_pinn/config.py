"""Configuration of the coupling-PINN reproduction (depth sweep on the gradient-fitting task)."""

from __future__ import annotations

import dataclasses


# further configs `jaxpapers reproduce coupling_pinn --scale <name>` accepts
EXTRA_SCALES = ("depth_sweep",)
TINY_SECONDS = 23  # tiny's wall time, measured: only orders `reproduce --jobs` (long first)


@dataclasses.dataclass(frozen=True)
class Config:
    """All sizes of one run (JSON-serialisable).

    archs / depths / width: the depth sweep (depth = blocks after the input lift).
    omega: frequency w of the target u* = sin(2 pi w x^2 + (w/2) pi y^2) on [-1, 1]^2.
    steps / batch_size / learning_rate: Adam with cosine decay to 1% (the release's schedule);
      a fresh uniform batch of interior points per step (boundary = their 4 edge projections).
    weight_fact: (mean, std) random weight factorisation as in the release, or None.
    fourier_scale: Fourier-feature std (release: 4 for w = 30), or None.
    eval_n: evaluation grid eval_n x eval_n for the relative L2 error.
    deriv_depths / deriv_width / deriv_points: input-derivative norms at initialisation.
    spectra_points: points at which the block-Jacobian spectra of the deepest nets are averaged.
    time_problem / time_archs / time_depth / time_steps / time_batch / causal_tol: the
      time-dependent benchmark (causal weighting with tolerance ``causal_tol``).
    """

    archs: tuple[str, ...] = ("mlp", "resnet", "pirate", "coupled")
    depths: tuple[int, ...] = (4, 24)
    width: int = 32
    omega: float = 1.0
    steps: int = 1000
    batch_size: int = 64
    learning_rate: float = 1e-3
    weight_fact: tuple[float, float] | None = (0.5, 0.1)
    fourier_scale: float | None = None
    eval_n: int = 100
    deriv_depths: tuple[int, ...] = (4, 8, 16, 24, 32)
    deriv_width: int = 32
    deriv_points: int = 256
    spectra_points: int = 8
    time_problem: str = "burgers"
    time_archs: tuple[str, ...] = ("mlp", "coupled")
    time_depth: int = 4
    time_steps: int = 500
    time_batch: int = 64
    causal_tol: float | None = 1.0


def small() -> Config:
    """A few minutes on 2 CPU cores: width 32, depths 4 and 24 only (not 4-32), 1000 steps at
    batch 64, Burgers with 500 steps. Derivative norms at init for depths 4, 8, 16, 24, 32."""
    return Config()


def depth_sweep() -> Config:
    """The issue's full small sweep: ``small()`` at depths 4, 8, 16, 24, 32 (same width 32,
    1000 steps, batch 64, same key, so the depth-4/24 cells equal ``small()``'s), without the
    time-dependent benchmark. ~2.5x ``small()``'s sweep time (about 10 min on 2 shared cores),
    hence a separate config rather than ``small()``."""
    return Config(depths=(4, 8, 16, 24, 32), time_archs=())


def full() -> Config:
    """Paper-scale (GPU): the release's Sec. 5.1 settings (W 128, Fourier features scale 4,
    batch 1024, 50k Adam steps cosine to 1%) on w = 30, depths 4-32."""
    return Config(depths=(4, 8, 16, 24, 32), width=128, omega=30.0, steps=50_000,
                  batch_size=1024, fourier_scale=4.0, eval_n=200, deriv_width=128,
                  time_problem="allen_cahn", time_archs=("mlp", "pirate", "coupled"),
                  time_depth=8, time_steps=50_000, time_batch=1024)


def tiny() -> Config:
    """Seconds: every stage with shallow, narrow nets and a few steps (numbers meaningless)."""
    return Config(archs=("mlp", "coupled"), depths=(2,), width=8, steps=10, batch_size=16,
                  eval_n=12, deriv_depths=(2,), deriv_width=8, deriv_points=8, spectra_points=2,
                  time_archs=("mlp",), time_depth=2, time_steps=4, time_batch=16)
