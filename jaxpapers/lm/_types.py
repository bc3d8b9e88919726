"""Configuration and state containers of the byte-level language model.

Letters used in shape comments: ``N`` layers, ``B`` batch, ``T`` tokens of an input, ``S`` cache
slots, ``Hq`` query heads, ``Hk`` key/value heads, ``D`` head dimension, ``V`` vocabulary (256).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax

from jaxpapers.core import checks, pytree

__all__ = ["LMConfig", "TrainConfig", "KVCache", "AttnFn", "AttnStateFn", "VOCAB_SIZE"]

VOCAB_SIZE = 256

# attn_fn(q [B, Hq, D], k [B, Hk, S, D], v [B, Hk, S, D], length [B] int32, layer_state,
#         layer [] int32) -> out [B, Hq, D]
AttnFn = Callable[[jax.Array, jax.Array, jax.Array, jax.Array, Any, jax.Array], jax.Array]
# attn_state_fn(cache) -> attn_state (a pytree whose leaves have a leading n_layers axis)
AttnStateFn = Callable[["KVCache"], Any]


@dataclasses.dataclass(frozen=True)
class LMConfig:
    """Shape of a decoder-only transformer over bytes (hashable, so usable as a static argument).

    Attributes:
      vocab: vocabulary size (256 for bytes).
      d_model: width of the residual stream.
      n_layers: number of transformer blocks.
      n_q_heads: query heads Hq.
      n_kv_heads: key/value heads Hk (grouped-query attention; ``n_q_heads % n_kv_heads == 0``).
      head_dim: D, even (RoPE rotates pairs of dimensions).
      d_ff: hidden width of the SwiGLU feed-forward block.
      max_len: the longest sequence (and KV cache) the model accepts.
      rope_base: RoPE frequency base.
    """

    vocab: int = VOCAB_SIZE
    d_model: int = 128
    n_layers: int = 4
    n_q_heads: int = 4
    n_kv_heads: int = 2
    head_dim: int = 64
    d_ff: int = 384
    max_len: int = 2048
    rope_base: float = 10_000.0

    def __post_init__(self):
        for name in ("vocab", "d_model", "n_layers", "n_q_heads", "n_kv_heads", "head_dim",
                     "d_ff", "max_len"):
            checks.check_int(name, getattr(self, name), minimum=1)
        if self.vocab > VOCAB_SIZE:
            raise ValueError(f"vocab must be <= {VOCAB_SIZE} (bytes), got {self.vocab}")
        if self.n_q_heads % self.n_kv_heads:
            raise ValueError(f"n_q_heads ({self.n_q_heads}) must be a multiple of n_kv_heads "
                             f"({self.n_kv_heads})")
        if self.head_dim % 2:
            raise ValueError(f"head_dim must be even for RoPE, got {self.head_dim}")
        if isinstance(self.rope_base, bool) or not isinstance(self.rope_base, (int, float)):
            raise TypeError(f"rope_base must be a number, got {self.rope_base!r}")
        if not self.rope_base > 1.0:
            raise ValueError(f"rope_base must be > 1, got {self.rope_base}")

    @property
    def group_size(self) -> int:
        """Query heads per key/value head."""
        return self.n_q_heads // self.n_kv_heads


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """How to train an :class:`LMConfig` on the standard library's source.

    Attributes:
      seq_len: length of the training windows (<= the model's ``max_len``).
      batch_size: windows per step.
      num_steps: optimisation steps of the first stage.
      learning_rate: peak AdamW learning rate (linear warm-up, cosine decay to 10%).
      warmup_steps: warm-up steps.
      weight_decay: AdamW weight decay (matrices only).
      grad_clip: global gradient-norm clip.
      max_files: read at most this many stdlib files (None: all); the split stays by file hash.
      heldout_fraction: fraction of files held out.
      chunk_size: steps per compiled ``lax.scan`` chunk.
      extra_stages: ``((seq_len, batch_size, num_steps), ...)`` run after the first stage with
        the same optimizer state and one learning-rate schedule over all steps (a cheap
        short-context stage followed by a long-context one teaches RoPE the long positions).
    """

    seq_len: int = 1024
    batch_size: int = 4
    num_steps: int = 600
    learning_rate: float = 3e-3
    warmup_steps: int = 50
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    max_files: int | None = None
    heldout_fraction: float = 0.1
    chunk_size: int = 50
    extra_stages: tuple[tuple[int, int, int], ...] = ()

    def __post_init__(self):
        for name in ("seq_len", "batch_size", "num_steps", "chunk_size"):
            checks.check_int(name, getattr(self, name), minimum=1)
        checks.check_int("warmup_steps", self.warmup_steps, minimum=0)
        if self.max_files is not None:
            checks.check_int("max_files", self.max_files, minimum=1)
        for name in ("learning_rate", "weight_decay", "grad_clip"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise TypeError(f"{name} must be a number, got {type(v).__name__} {v!r}")
            checks.check_range(name, v, low=0.0)
        checks.check_level("heldout_fraction", self.heldout_fraction)
        if not isinstance(self.extra_stages, tuple):
            raise TypeError(f"extra_stages must be a tuple, got {type(self.extra_stages).__name__}")
        for i, stage in enumerate(self.extra_stages):
            if not isinstance(stage, tuple) or len(stage) != 3:
                raise ValueError(f"extra_stages[{i}] must be (seq_len, batch_size, num_steps), "
                                 f"got {stage!r}")
            for name, v in zip(("seq_len", "batch_size", "num_steps"), stage):
                checks.check_int(f"extra_stages[{i}].{name}", v, minimum=1)

    @property
    def stages(self) -> tuple[tuple[int, int, int], ...]:
        """All ``(seq_len, batch_size, num_steps)`` stages, the first one included."""
        return ((self.seq_len, self.batch_size, self.num_steps),) + self.extra_stages

    @property
    def total_steps(self) -> int:
        """Optimisation steps over all stages."""
        return sum(s[2] for s in self.stages)

    @property
    def max_seq_len(self) -> int:
        """The longest training window."""
        return max(s[0] for s in self.stages)


@pytree.dataclass
class KVCache:
    """Per-layer key/value cache of a batch of sequences, keys stored after RoPE.

    Slots ``s >= length[b]`` of sequence ``b`` are invalid (their content is unspecified).

    Attributes:
      k: [N, B, Hk, S, D] post-RoPE keys.
      v: [N, B, Hk, S, D] values.
      length: [B] int32, number of valid slots (= the position of the next token).
    """

    k: jax.Array  # [N, B, Hk, S, D]
    v: jax.Array  # [N, B, Hk, S, D]
    length: jax.Array  # [B] int32

    @property
    def max_len(self) -> int:
        """S, the number of slots."""
        return self.k.shape[3]
