"""Configs for the TDM-R1 experiment (frozen, JSON-serialisable)."""

from __future__ import annotations

import dataclasses

from jaxpapers.diffusion import TDM_R1_DEFAULTS, TDM_R1_VARIANTS

EXTRA_SCALES = ()
TINY_SECONDS = 11  # tiny's wall time, measured: only orders `reproduce --jobs` (long first)


@dataclasses.dataclass(frozen=True)
class Config:
    """RL with a non-differentiable reward for the 4-step digits student (issue 24).

    Attributes:
      test_fraction, hidden, depth, train_steps, distill_steps, batch_size, learning_rate,
        sigma_min, sigma_max, rho, sigma_data, fid_iters: the digits split, the EDM teacher, its
        consistency student and the FID classifier, as qsched's recipe (``small()`` is qsched's
        ``small()``: the same models, cached once for both experiments).
      steps: K, the deterministic Euler steps of the rollout on ``karras_sigmas(K, sigma_min,
        sigma_max)``.
      reward_hidden, reward_iters: the reward classifier (sklearn MLP on the training rows).
      ink_percentile: a sample is "bold" when its ink count (pixels > 0) reaches this
        percentile of its class's real training digits.
      group_size: G, samples per prompt per iteration (10 prompts: the digits).
      tdm_iters: iterations of the TDM stage (variant ``tdm_only``) that gives the start model.
      rl_iters: RL iterations per run; num_seeds: runs per variant (vmapped together).
      eval_every: every run's EMA is also evaluated after every ``eval_every`` RL iterations
        (the reward / FID trajectory); must divide ``rl_iters``.
      variants: keys of ``TDM_R1_VARIANTS``, all run in one compiled vmapped update.
      num_boundaries: M, boundaries per update.
      lr_gen, lr_fake, lr_sur: AdamW learning rates of G, f and S (TDM stage and RL).
      lam_r: the generator's reward-term scale ``x0 + lam_r (D_S - D_T)`` in the RL stage (the
        library's stand-in for the release's surrogate CFG scale 2.5-4.5). All other trainer
        settings are ``TDM_R1_DEFAULTS``.
      n_eval, eval_draws: each model is evaluated on ``eval_draws`` x ``n_eval`` samples (the
        same noise for every model; classes ``i % 10``).
    """

    test_fraction: float = 0.4
    hidden: int = 256
    depth: int = 3
    train_steps: int = 4000
    distill_steps: int = 2000
    batch_size: int = 256
    learning_rate: float = 2e-3
    sigma_min: float = 0.002
    sigma_max: float = 20.0
    rho: float = 7.0
    sigma_data: float = 0.5
    fid_iters: int = 500
    steps: int = 4
    reward_hidden: tuple[int, ...] = (64,)
    reward_iters: int = 300
    ink_percentile: float = 75.0
    group_size: int = 16
    tdm_iters: int = 400
    rl_iters: int = 300
    eval_every: int = 50
    num_seeds: int = 2
    variants: tuple[str, ...] = tuple(TDM_R1_VARIANTS)
    num_boundaries: int = 2
    lr_gen: float = TDM_R1_DEFAULTS["lr_gen"]
    lr_fake: float = TDM_R1_DEFAULTS["lr_fake"]
    lr_sur: float = TDM_R1_DEFAULTS["lr_sur"]
    lam_r: float = TDM_R1_DEFAULTS["lam_r"]
    n_eval: int = 1000
    eval_draws: int = 2

    def __post_init__(self):
        if not 0 < self.test_fraction < 1:
            raise ValueError(f"test_fraction must be in (0, 1), got {self.test_fraction}")
        if not 0 <= self.ink_percentile <= 100:
            raise ValueError(f"ink_percentile must be in [0, 100], got {self.ink_percentile}")
        if self.steps < 2:
            raise ValueError(f"steps must be >= 2, got {self.steps}")
        if not 1 <= self.num_boundaries <= self.steps:
            raise ValueError(f"num_boundaries must be in [1, steps={self.steps}], got "
                             f"{self.num_boundaries}")
        if self.group_size < 2:
            raise ValueError(f"group_size must be >= 2 (advantages are group-relative), got "
                             f"{self.group_size}")
        for name in ("tdm_iters", "rl_iters", "num_seeds", "n_eval", "eval_draws",
                     "train_steps", "distill_steps", "reward_iters", "fid_iters"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.eval_every < 1 or self.rl_iters % self.eval_every:
            raise ValueError(f"eval_every must divide rl_iters={self.rl_iters}, got "
                             f"{self.eval_every}")
        if self.n_eval % 10:
            raise ValueError(f"n_eval must be a multiple of 10 (classes), got {self.n_eval}")
        unknown = [v for v in self.variants if v not in TDM_R1_VARIANTS]
        if unknown or "tdm_r1" not in self.variants or len(set(self.variants)) != len(
                self.variants):
            raise ValueError(f"variants must be distinct keys of TDM_R1_VARIANTS including "
                             f"'tdm_r1', got {self.variants}")
        if not self.sigma_max > self.sigma_min > 0:
            raise ValueError(f"need sigma_max > sigma_min > 0, got {self.sigma_min}, "
                             f"{self.sigma_max}")
        for name in ("lr_gen", "lr_fake", "lr_sur", "lam_r"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")


def tiny() -> Config:
    """Seconds: tiny models, a few iterations of every stage (numbers meaningless).

    The models and FID classifier are qsched's ``tiny()`` ones (cached once for both)."""
    return Config(hidden=32, depth=2, train_steps=60, distill_steps=30, batch_size=64,
                  fid_iters=20, reward_hidden=(16,), reward_iters=20, group_size=4,
                  tdm_iters=3, rl_iters=4, eval_every=2, n_eval=100)


def small() -> Config:
    """The issue's settings: 10 prompts x G = 16, 300 RL iterations, 2 seeds (2 CPU cores)."""
    return Config()


def full() -> Config:
    """For a GPU: 5 seeds, G = 24."""
    return Config(num_seeds=5, group_size=24)
