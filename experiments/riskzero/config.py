"""Configurations of the RiskZero experiment (GridRisk: planning with the true model + learning)."""

from __future__ import annotations

import dataclasses

TINY_SECONDS = 19  # tiny's wall time, measured: only orders `reproduce --jobs` (long first)


@dataclasses.dataclass(frozen=True)
class Config:
    """Experiment configuration (JSON-serialisable).

    Planning: ``plan_*`` (true GridRisk model, Gumbel root selection, greedy at evaluation).
    Learning: ``learn_*`` (RiskZero, Risk-AlphaZero, risk-neutral MuZero; seeds vmapped).
    """

    alpha: float = 0.25
    num_quantiles: int = 32
    plan_episodes: int = 512
    plan_simulations: int = 32
    plan_samples: int = 256
    # the first one is reported under planning/*: "greedy" = return-to-go of the objective's best
    # continuation path (a value head at its fixed point); "rollout" = uniform random policy;
    # "zero" = no leaf evaluation
    plan_leaf_values: tuple = ("greedy", "rollout", "zero")
    plan_history: str = "path"
    # "alphazero_neutral" is a diagnostic: Risk-AlphaZero (true model) with alpha = 1 (CVaR_1 = mean),
    # i.e. a risk-neutral learner without model error
    learn_variants: tuple = ("riskzero", "risk_alphazero", "muzero", "alphazero_neutral")
    learn_seeds: int = 6
    learn_simulations: int = 8
    learn_samples: int = 64
    learn_envs: int = 16
    learn_evals: int = 5
    learn_iters_per_eval: int = 30
    learn_eval_episodes: int = 128
    learn_updates_per_iter: int = 32
    learn_batch_size: int = 64
    learning_rate: float = 5e-3


def small() -> Config:
    """A few minutes on 2 CPU cores: 512 planning episodes with 32 simulations and 256 return
    samples (paper: 4096); learning 150 iterations x 16 envs (paper: 1000 x 32), 32 updates per
    iteration, 8 simulations and 64 samples (paper: 32 and 4096), 6 seeds."""
    return Config()


def full() -> Config:
    """The paper's grid-risk settings (GPU): 32 simulations, 4096 return samples, 64 quantiles,
    32 self-play envs, 1000 iterations, 5 seeds, 1024 evaluation episodes."""
    return Config(num_quantiles=64, plan_episodes=4096, plan_samples=4096, learn_seeds=5,
                  learn_simulations=32, learn_samples=4096, learn_envs=32, learn_evals=20,
                  learn_iters_per_eval=50, learn_eval_episodes=1024)


def tiny() -> Config:
    """Seconds: planning and one learner for one iteration (numbers meaningless; the learning
    claim needs a second learner, whose compile would double the time: its code is tested in
    tests/search/test_experiment.py)."""
    return Config(num_quantiles=8, plan_episodes=16, plan_simulations=4, plan_samples=16,
                  plan_leaf_values=("greedy",), learn_variants=("riskzero",),
                  learn_seeds=2, learn_simulations=2, learn_samples=8, learn_envs=2,
                  learn_evals=1, learn_iters_per_eval=1, learn_eval_episodes=4,
                  learn_updates_per_iter=1, learn_batch_size=4)
