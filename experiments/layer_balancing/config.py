"""Configuration of the layer-balancing reproduction (2-layer linear nets, layer-wise rates)."""

from __future__ import annotations

import dataclasses

TINY_SECONDS = 5  # tiny's wall time, measured: only orders `reproduce --jobs` (long first)


@dataclasses.dataclass(frozen=True)
class Config:
    """All sizes of one run (JSON-serialisable).

    widths: h (= d = n) for the theory curves, optimal splits and midpoint table.
    alphas: budgets s = 2 h^alpha.
    num_fracs: points eta1 / s on each theory curve (in [0, 1]).
    mc_widths: widths where Monte Carlo points (surrogate and full GD) are drawn on the curves.
    mc_fracs: fractions eta1 / s of the MC points. mc_draws: Haar draws per MC point.
    check_widths / check_draws: small widths where MC settles the one-step formula question.
    gap_widths / gap_alpha / gap_draws: full-GD minus surrogate gap vs width (equal split).
    three_layer_budgets: budgets (in units of sqrt(h)) for the 3-layer optimal-split table.
    """

    widths: tuple[int, ...] = (256, 512, 1000)
    alphas: tuple[float, ...] = (1.1, 1.25, 1.4, 1.5)
    num_fracs: int = 101
    mc_widths: tuple[int, ...] = (256,)
    mc_fracs: tuple[float, ...] = (0.05, 0.2, 0.35, 0.5, 0.65, 0.8, 0.95)
    mc_draws: int = 4
    check_widths: tuple[int, ...] = (8, 16, 32)
    check_draws: int = 2000
    gap_widths: tuple[int, ...] = (32, 64, 128)
    gap_alpha: float = 1.25
    gap_draws: int = 32
    three_layer_budgets: tuple[float, ...] = (1.0, 2.0, 3.0)


def small() -> Config:
    """A couple of minutes on 2 CPU cores."""
    return Config()


def full() -> Config:
    """The official sweep: h = d = n = 1000, 5 seeds (Haar draws), 19 split points per budget."""
    return Config(widths=(256, 512, 1000), mc_widths=(256, 1000),
                  mc_fracs=tuple(i / 20 for i in range(1, 20)), mc_draws=5, check_draws=10000,
                  gap_widths=(32, 64, 128, 256), gap_draws=64)


def tiny() -> Config:
    """Seconds: the whole pipeline at one width (also the direction test's config)."""
    return Config(widths=(512,), alphas=(1.25, 1.5), num_fracs=21, mc_widths=(),
                  check_widths=(8,), check_draws=1000, gap_widths=(),
                  three_layer_budgets=(2.0,))
