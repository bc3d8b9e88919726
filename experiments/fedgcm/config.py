"""Configs for the FedGCM experiment (frozen, JSON-serialisable)."""

from __future__ import annotations

import dataclasses

EXTRA_SCALES = ()
TINY_SECONDS = 7  # tiny's wall time, measured: only orders `reproduce --jobs` (long first)


@dataclasses.dataclass(frozen=True)
class Config:
    """Homophily-grouped federated GNNs (FedGCM) on CSBM clients.

    Attributes:
      num_clients, nodes_per_client, num_classes, num_features: the offline stand-in: one CSBM
        graph per client, all clients sharing the class means.
      homophily_low, homophily_high: client ``c`` has edge homophily
        ``low + (high - low) c / (C - 1)`` (one level per client).
      mean_scale: sd of the shared class means (features = class mean + unit noise).
      mean_degree: expected degree of a node.
      split: train / validation fractions per client (the rest is test), 60/20/20.
      hidden, dropout: the two-layer model ``h' = ReLU(A_hat h W_nbr + h W_ego)``.
      num_rounds, local_steps, learning_rate, clip_norm: FedGCM's release: 5 full-batch Adam
        steps per round (fresh Adam), cosine learning rate, gradient-norm clip 5.
      num_groups: K (the release: 4). alpha: RPGrad's weight (the release's default 0.5).
      fedprox_mu: FedProx's proximal weight.
      alphas: the alpha sweep (normalised statistic).
      feature_fraction: the official statistic's share of raw feature columns (20%).
      low_homophily: clients with homophily <= this form the "low" subset.
      num_seeds: independent repetitions (data, split, init, dropout all from the run's key).
    """

    num_clients: int = 10
    nodes_per_client: int = 300
    num_classes: int = 3
    num_features: int = 16
    homophily_low: float = 0.1
    homophily_high: float = 0.9
    mean_scale: float = 0.35
    mean_degree: float = 15.0
    split: tuple[float, float] = (0.6, 0.2)
    hidden: int = 64
    dropout: float = 0.3
    num_rounds: int = 100
    local_steps: int = 5
    learning_rate: float = 0.01
    clip_norm: float = 5.0
    num_groups: int = 4
    alpha: float = 0.5
    fedprox_mu: float = 0.01
    alphas: tuple[float, ...] = (0.0, 0.2, 0.5, 1.0)
    feature_fraction: float = 0.2
    low_homophily: float = 0.3
    num_seeds: int = 6

    def __post_init__(self):
        if self.num_clients < 2:
            raise ValueError(f"num_clients must be >= 2, got {self.num_clients}")
        if not 0 <= self.homophily_low <= self.homophily_high <= 1:
            raise ValueError("need 0 <= homophily_low <= homophily_high <= 1")
        if not (0 < self.split[0] and 0 < self.split[1] and sum(self.split) < 1):
            raise ValueError(f"split must be two positive fractions summing below 1, got "
                             f"{self.split}")
        if self.alpha not in self.alphas or 0.0 not in self.alphas:
            raise ValueError("alphas must contain 0 and alpha")
        if not 1 <= self.num_groups <= self.num_clients:
            raise ValueError(f"num_groups must be in 1..num_clients={self.num_clients}, got "
                             f"{self.num_groups}")
        if self.low_homophily < self.homophily_low:
            raise ValueError("low_homophily must be >= homophily_low (the low subset would be "
                             "empty)")
        if self.num_seeds < 1:
            raise ValueError(f"num_seeds must be >= 1, got {self.num_seeds}")


def tiny() -> Config:
    """Seconds: 4 small clients, 4 rounds, 2 seeds (numbers meaningless)."""
    return Config(num_clients=4, nodes_per_client=60, hidden=16, num_rounds=4, num_groups=2,
                  mean_degree=6.0, num_seeds=2)


def small() -> Config:
    """The issue's stand-in: 10 CSBM clients x 300 nodes, 100 rounds, 6 seeds (~1 min on 2 cores)."""
    return Config()


def full() -> Config:
    """For a GPU: 300 rounds (the release), 20 seeds, 30 clients of 1000 nodes."""
    return Config(num_clients=30, nodes_per_client=1000, num_rounds=300, num_seeds=20)
