"""Configs for the FedPDG experiment (frozen, JSON-serialisable)."""

from __future__ import annotations

import dataclasses

EXTRA_SCALES = ()
TINY_SECONDS = 14  # tiny's wall time, measured: only orders `reproduce --jobs` (long first)


@dataclasses.dataclass(frozen=True)
class Config:
    """Prediction-discrepancy-guided synthetic data for label-skewed federated learning on digits.

    Attributes:
      public_fraction: share of the digits rows (class-balanced) that form the public set, each
        image shifted by one pixel (edge-padded): the generator's pretraining data.
      tail_ratio: the global class distribution ``n_c ∝ tail_ratio ** (-rank / 9)`` (class order
        shuffled per seed); train and test rows both follow it.
      test_fraction: share of each class's long-tailed rows held out for testing.
      num_clients, dirichlet_alpha, min_size: the label-skewed split of the training rows.
      hidden: the classifier MLP ``64 - hidden - 10``.
      warmup_rounds, rounds, local_steps, learning_rate: FedAvg warm-up, then FedAvg on local (+
        synthetic) data; full-batch Adam steps per round (fresh Adam), cosine decay per phase.
      finetune_steps: client k's local model = the global model fine-tuned this many steps.
      fedprox_mu: FedProx's weight (the FedProx baseline).
      gen_hidden, gen_depth, gen_steps, gen_batch, gen_lr: the EDM generator (pretrained once on
        the public set, cached).
      sample_steps: Euler steps of the generator's sampler.
      dpo_candidates: candidates per class scored by the global model to form DPO pairs.
      dpo_steps, dpo_batch, dpo_lr, dpo_beta: Diffusion-DPO against the frozen pretrained
        generator.
      pool_per_class: candidates per class the server sends (every method draws from them).
      budget_ratio: r, each client receives ``r |D_k|`` synthetic samples.
      budget_sweep: other r at which balanced and FedPDG are also run (diagnostic).
      num_seeds: repetitions (split, clients, classifier, DPO, sampling), vmapped where possible.
    """

    public_fraction: float = 0.15
    tail_ratio: float = 10.0
    test_fraction: float = 0.3
    num_clients: int = 10
    dirichlet_alpha: float = 0.1
    min_size: int = 5
    hidden: int = 128
    warmup_rounds: int = 30
    rounds: int = 30
    local_steps: int = 5
    learning_rate: float = 0.01
    finetune_steps: int = 20
    fedprox_mu: float = 0.01
    gen_hidden: int = 256
    gen_depth: int = 3
    gen_steps: int = 3000
    gen_batch: int = 128
    gen_lr: float = 2e-3
    sample_steps: int = 16
    dpo_candidates: int = 96
    dpo_steps: int = 300
    dpo_batch: int = 64
    dpo_lr: float = 1e-4
    dpo_beta: float = 50.0
    pool_per_class: int = 80
    budget_ratio: float = 0.5
    budget_sweep: tuple[float, ...] = (0.25, 1.0)
    num_seeds: int = 3

    def __post_init__(self):
        if not 0 < self.public_fraction < 0.5:
            raise ValueError(f"public_fraction must be in (0, 0.5), got {self.public_fraction}")
        if self.dirichlet_alpha <= 0:
            raise ValueError(f"dirichlet_alpha must be > 0, got {self.dirichlet_alpha}")
        if not 0 < self.budget_ratio:
            raise ValueError(f"budget_ratio must be > 0, got {self.budget_ratio}")
        if self.num_seeds < 1:
            raise ValueError(f"num_seeds must be >= 1, got {self.num_seeds}")


def tiny() -> Config:
    """Seconds: a small generator and few rounds (numbers meaningless)."""
    return Config(num_clients=4, hidden=32, warmup_rounds=3, rounds=3, finetune_steps=3,
                  gen_hidden=32, gen_depth=1, gen_steps=50, gen_batch=32, sample_steps=4,
                  dpo_candidates=12, dpo_steps=5, dpo_batch=8, pool_per_class=40, num_seeds=2,
                  min_size=2, budget_sweep=(0.25,))


def small() -> Config:
    """Digits, 10 clients, 3 seeds (under 4 min on 2 cores from a cold cache)."""
    return Config()


def full() -> Config:
    """For a GPU: a larger generator, longer DPO, more rounds and seeds."""
    return Config(gen_steps=20000, gen_hidden=512, dpo_steps=2000, dpo_candidates=512,
                  pool_per_class=400, warmup_rounds=100, rounds=100, num_seeds=10)
