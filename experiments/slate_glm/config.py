"""Configurations of the slate GLM bandit experiment."""

from __future__ import annotations

import dataclasses

TINY_SECONDS = 17  # tiny's wall time, measured: only orders `reproduce --jobs` (long first)


@dataclasses.dataclass(frozen=True)
class Config:
    """Experiment configuration (JSON-serialisable).

    settings: (name, N slots, K items, d, ||theta*||, link) per synthetic setting; the first is
      the one reported under ``regret/{algo}``.
    beta_scales: extra runs of RS-SlateGLinCB and B-SlateGLinCB+ in the first setting with the
      UCB multiplier scaled by these factors (sensitivity to the theory constant).
    flat_max_arms: run RS-GLinCB and B-GLinCB on the flattened slates where K^N <= this.
    """

    num_rounds: int = 10_000
    num_seeds: int = 16
    settings: tuple = (("s1_N3_K5_d5_kappa9.5", 3, 5, 5, 2.0, "logistic"),
                       ("s2_N5_K4_d3_kappa56", 5, 4, 3, 4.0, "logistic"))
    context_mode: str = "fresh"
    beta_scales: tuple = (0.1, 0.01)
    flat_max_arms: int = 256
    timing_slots: tuple = (3, 4, 5, 6, 7, 8)
    timing_items: int = 7
    timing_dim: int = 5
    enum_max_slots: int = 6
    timing_repeats: int = 20
    icl_rounds: int = 2000
    icl_seeds: int = 4
    icl_slots: int = 4
    icl_pool: int = 8
    icl_dim: int = 8


def small() -> Config:
    """A few minutes on 2 CPU cores (T = 10^4, 16 seeds, 2 settings)."""
    return Config()


def full() -> Config:
    """T = 10^5, 16 seeds (about 10x the small run)."""
    return Config(num_rounds=100_000, icl_rounds=10_000, icl_seeds=8)


def tiny() -> Config:
    """Seconds: every stage on one small setting, a short horizon (numbers meaningless)."""
    return Config(num_rounds=120, num_seeds=2, settings=(("tiny", 2, 3, 2, 2.0, "logistic"),),
                  beta_scales=(), flat_max_arms=0, timing_slots=(3, 4), enum_max_slots=4,
                  timing_repeats=1, icl_rounds=40, icl_seeds=1, icl_slots=2, icl_pool=3,
                  icl_dim=4)
