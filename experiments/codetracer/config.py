"""Configs for the CodeTracer experiment (frozen, JSON-serialisable)."""

from __future__ import annotations

import dataclasses

EXTRA_SCALES = ()
TINY_SECONDS = 11  # tiny's wall time, measured: only orders `reproduce --jobs` (long first)


@dataclasses.dataclass(frozen=True)
class Config:
    """Watermarking the byte LM's code completions: KGW, SWEET, EWD and CodeTracer.

    Attributes:
      lm_preset: "small" (cached, shared with binarypc and spon) or "tiny" (tests).
      lm_seed: seed of the LM's training (its cache key).
      num_prompts: held-out prompts, each the ``prompt_len`` bytes ending right after a
        ``def ...:`` line (the issue asks 512; on 2 CPU cores one 512 x 128-byte generation of
        the small LM takes ~60 s, so ``small`` uses 128 and ``full`` 2048).
      prompt_len, num_bytes: prompt and completion lengths.
      temperature: sampling temperature (the same sampling keys for every scheme).
      deltas: biases compared (every scheme at each).
      lengths: detection lengths (bytes of the completion) for AUROC.
      headline_delta, headline_length: the contract's AUROC / TPR setting.
      gamma, wm_key, z_threshold: MarkLLM's defaults.
      grpo_steps, grpo_prompts, grpo_group, grpo_bytes, grpo_lr, grpo_lam, grpo_process,
      grpo_gate_init:
        CodeTracer's GRPO training (prompts drawn from the *training* files); the policy is
        trained once at ``headline_delta`` and evaluated at every delta. The gate starts on
        (logit 2: 88% of steps) so that training learns where to stop watermarking; from a
        coin flip (0) it turns on during training but ends weaker (README).
      topk: bytes CodeTracer promotes per gated step.
      exec_per_scheme: completions per scheme run in the sandbox (0: skip).
      null_windows, null_keys, null_len: human held-out code windows scored with many keys for
        the false-positive rates.
      bootstrap: paired bootstrap resamples of the validity drop.
    """

    lm_preset: str = "small"
    lm_seed: int = 0
    num_prompts: int = 128
    prompt_len: int = 96
    num_bytes: int = 128
    temperature: float = 0.6
    deltas: tuple[float, ...] = (1.0, 2.0, 3.0)
    lengths: tuple[int, ...] = (32, 64, 128)
    headline_delta: float = 2.0
    headline_length: int = 64
    gamma: float = 0.5
    wm_key: int = 15485863
    z_threshold: float = 4.0
    grpo_steps: int = 30
    grpo_prompts: int = 4
    grpo_group: int = 8
    grpo_bytes: int = 64
    grpo_lr: float = 3e-3
    grpo_lam: float = 1.0
    grpo_process: float = 0.1
    grpo_gate_init: float = 2.0
    topk: int = 16
    exec_per_scheme: int = 64
    null_windows: int = 256
    null_keys: int = 64
    null_len: int = 128
    bootstrap: int = 1000

    def __post_init__(self):
        if self.lm_preset not in ("tiny", "small"):
            raise ValueError(f"lm_preset must be 'tiny' or 'small', got {self.lm_preset!r}")
        if self.headline_delta not in self.deltas:
            raise ValueError("headline_delta must be one of deltas")
        if self.headline_length not in self.lengths or max(self.lengths) > self.num_bytes:
            raise ValueError("lengths must include headline_length and be <= num_bytes")
        if not 0 < self.gamma < 1:
            raise ValueError(f"gamma must be in (0, 1), got {self.gamma}")


def tiny() -> Config:
    """Seconds: the tiny LM (max_len 128), a few prompts and GRPO steps (numbers meaningless)."""
    return Config(lm_preset="tiny", num_prompts=16, prompt_len=48, num_bytes=32, deltas=(2.0,),
                  lengths=(16, 32), headline_length=32, grpo_steps=1, grpo_prompts=2,
                  grpo_group=2, grpo_bytes=16, exec_per_scheme=2, null_windows=8, null_keys=4,
                  null_len=64, bootstrap=50)


def small() -> Config:
    """The issue's settings on the cached small LM (< 4 min on 2 idle cores, LM cached)."""
    return Config()


def full() -> Config:
    """For a GPU: a delta sweep (Pareto curve), longer GRPO training, more prompts."""
    return Config(deltas=(0.5, 1.0, 1.5, 2.0, 3.0, 4.0), grpo_steps=500, grpo_prompts=16,
                  grpo_bytes=128, num_prompts=2048, null_windows=2048, null_keys=256)
