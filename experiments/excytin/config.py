"""Configs for the ExCyTIn-Bench experiment (frozen, JSON-serialisable)."""

from __future__ import annotations

import dataclasses

EXTRA_SCALES = ()
TINY_SECONDS = 4  # tiny's wall time, measured: only orders `reproduce --jobs` (long first)

# (agent, layer) runs of the scripted investigators; the contract's reward metrics.
RUNS = (("oracle", "alert"), ("graph_walk", "alert"), ("random", "alert"),
        ("graph_walk", "log"), ("log_walk", "log"), ("random", "log"))


@dataclasses.dataclass(frozen=True)
class Config:
    """A seeded tenant, its graph-derived questions and scripted investigators on SQLite.

    Attributes:
      incidents: attacks in the tenant (one investigation graph each); users, hosts,
        noise_rows: the organisation and its benign activity (see ``generate_tenant``).
      per_incident: questions selected per incident (the paper's 100); k: most start entities.
      max_steps: steps per episode (the paper's 15; its results table uses 25); max_rows: rows
        shown per query result; timeout_s: seconds per query; decay: step credit.
      runs: (agent, layer) pairs run on every question.
      replay_duckdb: replay every logged query on DuckDB and compare with SQLite.
      llm_questions: questions given to an LLM agent when ``JAXPAPERS_LLM_BASE_URL`` and
        ``JAXPAPERS_LLM_MODEL`` are set (0: never); skipped offline.
    """

    incidents: int = 8
    users: int = 40
    hosts: int = 24
    noise_rows: int = 60
    per_incident: int = 100
    k: int = 10
    max_steps: int = 15
    max_rows: int = 15
    timeout_s: float = 30.0
    decay: float = 0.4
    runs: tuple[tuple[str, str], ...] = RUNS
    replay_duckdb: bool = True
    llm_questions: int = 50

    def __post_init__(self):
        for name in ("incidents", "per_incident", "k", "max_steps", "max_rows"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be an int >= 1, got {v!r}")
        bad = [r for r in self.runs if r not in RUNS]
        if bad:
            raise ValueError(f"runs must be pairs from {RUNS}, got {bad}")


def tiny() -> Config:
    """Seconds: 2 incidents, 10 questions each (numbers meaningless)."""
    return Config(incidents=2, noise_rows=10, per_incident=10, llm_questions=0)


def small() -> Config:
    """The issue's small setting: 8 incidents, <= 100 questions each, 15 steps."""
    return Config()


def full() -> Config:
    """64 incidents, 25 steps (the repository's results setting); CPU is enough (no JAX)."""
    return Config(incidents=64, users=200, hosts=120, noise_rows=400, max_steps=25,
                  llm_questions=589)
