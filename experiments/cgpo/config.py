"""Configs for the CGPO experiment (frozen, JSON-serialisable)."""

from __future__ import annotations

import dataclasses

EXTRA_SCALES = ()
TINY_SECONDS = 45  # tiny's wall time, measured: only orders `reproduce --jobs` (long first)

# bandit runs: name -> (method, guidance on all steps?, hp overrides). "drift": lam = 0, w = 1.
BANDIT_RUNS = {
    "cgpo": ("cgpo", False, {}),
    "drift": ("cgpo", False, {"guidance_scale": 0.0, "beta": 0.0}),
    "no_guidance": ("cgpo", False, {"guidance_scale": 0.0}),
    "no_weights": ("cgpo", False, {"beta": 0.0}),
    "no_entropy": ("cgpo", False, {"alpha_ent": 0.0}),
    "guide_all": ("cgpo", True, {}),
    "qgrad": ("qgrad", False, {}),
    "qvpo": ("qvpo", False, {}),
}
POINT_METHODS = ("cgpo", "qgrad", "qvpo", "sac")


@dataclasses.dataclass(frozen=True)
class Config:
    """Diffusion-policy online RL: a four-peak bandit, the MultiGoal point mass, MuJoCo smoke.

    Attributes:
      num_seeds: runs per method (keys ``split(key, num_seeds)``; vmapped together).
      num_steps: T of the diffusion policy on the bandit (the issue's 20).
      guidance_steps, guidance_scale, beta, alpha_ent: CGPO's L, lam, weight temperature and
        entropy-term weight (bandit; ``point_*`` for the point mass).
      hidden: MLP sizes of every network; lr: Adam rate of actor, critics and value net.
      num_critics, num_quantiles, drop_per_net, n_cand, n_uniform: the critics (N x M atoms,
        k dropped per net) and the candidate / uniform-action counts.
      bandit_runs: keys of :data:`BANDIT_RUNS`.
      bandit_iters: iterations (``bandit_envs`` new actions and one update each),
        ``bandit_batch`` rows per update, after ``bandit_warmup`` iterations that act uniformly
        and update only the critics (a ReLU critic needs ~1000 updates to resolve the peaks;
        measured); ``warm_start``: Adam steps fitting the policy to
        uniform actions before RL (the issue's "uniform start"); ``eval_every``: iterations
        between snapshots (``mode_samples`` policy samples, ``gain_states`` dQ states).
      mode_radius: a sample belongs to a peak within this distance.
      point_methods, point_goals, point_horizon, point_steps (T), point_guidance_steps,
        point_guidance_scale, point_iters, point_envs, point_batch, point_warmup (uniform
        actions, critic-only updates, before the ``point_iters``), point_reward_scale,
        point_gamma, point_eval_episodes: the point mass runs.
      mujoco_env, mujoco_steps, mujoco_warmup, mujoco_update_every, mujoco_num_steps: the
        smoke run of cgpo on gymnasium MuJoCo (0 steps: skipped).
      fast_compile: compile the programs with XLA's backend optimisations off (tiny: the run
        is compilation; about 45% less compile time measured, slower steps).
    """

    num_seeds: int = 3
    num_steps: int = 20
    guidance_steps: int = 5
    guidance_scale: float = 0.05
    beta: float = 1.0
    alpha_ent: float = 0.02
    hidden: tuple[int, ...] = (64, 64)
    lr: float = 1e-3
    num_critics: int = 2
    num_quantiles: int = 25
    drop_per_net: int = 2
    n_cand: int = 4
    n_uniform: int = 4
    bandit_runs: tuple[str, ...] = tuple(BANDIT_RUNS)
    bandit_iters: int = 300
    bandit_envs: int = 16
    bandit_batch: int = 64
    bandit_warmup: int = 800
    warm_start: int = 300
    eval_every: int = 100
    mode_samples: int = 4000
    gain_states: int = 1024
    mode_radius: float = 0.25
    point_methods: tuple[str, ...] = POINT_METHODS
    point_goals: int = 4
    point_horizon: int = 30
    point_steps: int = 10
    point_guidance_steps: int = 2
    point_guidance_scale: float = 0.05
    point_iters: int = 500
    point_envs: int = 8
    point_batch: int = 64
    point_warmup: int = 100
    point_reward_scale: float = 0.1
    point_gamma: float = 0.99
    point_eval_episodes: int = 32
    mujoco_env: str = "HalfCheetah-v5"
    mujoco_steps: int = 1000
    mujoco_warmup: int = 500
    mujoco_update_every: int = 10
    mujoco_num_steps: int = 5
    fast_compile: bool = False

    def __post_init__(self):
        for name in ("num_seeds", "num_steps", "bandit_iters", "bandit_envs", "bandit_batch",
                     "eval_every", "mode_samples", "gain_states", "point_iters", "point_envs",
                     "point_batch", "point_eval_episodes", "point_horizon", "point_steps",
                     "mujoco_update_every", "mujoco_num_steps"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("warm_start", "bandit_warmup", "point_warmup", "mujoco_steps",
                     "mujoco_warmup"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if not 0 <= self.guidance_steps <= self.num_steps:
            raise ValueError(f"guidance_steps must be in [0, num_steps={self.num_steps}], got "
                             f"{self.guidance_steps}")
        if not 0 <= self.point_guidance_steps <= self.point_steps:
            raise ValueError(f"point_guidance_steps must be in [0, point_steps="
                             f"{self.point_steps}], got {self.point_guidance_steps}")
        for name in ("bandit_iters", "point_iters"):
            if getattr(self, name) % self.eval_every:
                raise ValueError(f"eval_every={self.eval_every} must divide {name}="
                                 f"{getattr(self, name)}")
        unknown = [r for r in self.bandit_runs if r not in BANDIT_RUNS]
        if unknown or not {"cgpo", "qgrad", "qvpo", "drift"} <= set(self.bandit_runs):
            raise ValueError(f"bandit_runs must be keys of BANDIT_RUNS including cgpo, qgrad, "
                             f"qvpo and drift, got {self.bandit_runs}")
        if "cgpo" not in self.point_methods:
            raise ValueError(f"point_methods must include 'cgpo', got {self.point_methods}")
        bad = [m for m in self.point_methods if m not in POINT_METHODS]
        if bad:
            raise ValueError(f"point_methods must be among {POINT_METHODS}, got {bad}")
        if not 1 <= self.point_goals <= 4:
            raise ValueError(f"point_goals must be in 1..4, got {self.point_goals}")
        for name in ("guidance_scale", "beta", "alpha_ent", "point_guidance_scale"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        for name in ("lr", "mode_radius", "point_reward_scale"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        if not 0 <= self.point_gamma <= 1:
            raise ValueError(f"point_gamma must be in [0, 1], got {self.point_gamma}")
        if self.drop_per_net >= self.num_quantiles:
            raise ValueError(f"drop_per_net must be < num_quantiles={self.num_quantiles}")


def tiny() -> Config:
    """Seconds: 2 seeds, a few iterations of the contract's runs (numbers meaningless); the
    time is compilation (one program per method and task)."""
    return Config(bandit_runs=("cgpo", "drift", "qgrad", "qvpo"), num_seeds=2, num_steps=4,
                  guidance_steps=2, hidden=(16,), num_quantiles=5,
                  drop_per_net=1, n_cand=2, n_uniform=2, bandit_iters=4, bandit_envs=4,
                  bandit_batch=8, warm_start=3, eval_every=2, mode_samples=64, gain_states=16,
                  point_goals=2, point_horizon=5, point_steps=3, point_guidance_steps=1,
                  point_iters=4, point_envs=2, point_batch=8, point_warmup=1, bandit_warmup=1,
                  point_eval_episodes=4, mujoco_steps=0, fast_compile=True)


def small() -> Config:
    """The issue's small run on 2 CPU cores: 3 seeds, the bandit with every variant, the
    point mass with four methods (T = 10 there for time; the issue's T = 20 on the bandit), a
    1000-step HalfCheetah smoke run of cgpo (T = 5)."""
    return Config()


def full() -> Config:
    """For a GPU: 5 seeds, longer runs, T = 20 everywhere (MuJoCo: ``python -m
    experiments.cgpo.mujoco``)."""
    return Config(num_seeds=5, bandit_iters=2000, eval_every=200, point_iters=10000,
                  point_steps=20, point_guidance_steps=5, hidden=(256, 256), bandit_batch=256,
                  point_batch=256, mujoco_steps=0)
