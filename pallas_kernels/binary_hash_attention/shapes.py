"""Named problem shapes shared by the tests ("ci") and the benchmark ("gpu")."""

from __future__ import annotations

import dataclasses

__all__ = ["ScoreShape", "AttentionShape", "CI_SCORE_SHAPES", "CI_ATTENTION_SHAPES",
           "GPU_SHAPES", "budget"]


@dataclasses.dataclass(frozen=True)
class ScoreShape:
    name: str
    b: int
    hq: int
    hk: int
    length: int
    num_bits: int
    tag: str = "ci"


@dataclasses.dataclass(frozen=True)
class AttentionShape:
    name: str
    b: int
    hq: int
    hk: int
    length: int
    d: int
    k: int            # selected entries per (batch, kv head): tokens, or pages when page_size > 1
    page_size: int = 1
    tag: str = "ci"


def budget(length: int, fraction: float = 0.02, minimum: int = 128) -> int:
    """BinaryPC's token budget: ``max(int(fraction * length), minimum)`` tokens."""
    return max(int(length * fraction), minimum)


# Interpret mode carries every operand through every grid step: keep these ~1 MiB or less.
CI_SCORE_SHAPES = (
    ScoreShape("mha_64bit_ragged_l", 2, 2, 2, 300, 64),
    ScoreShape("gqa4_32bit", 1, 8, 2, 1024, 32),
    ScoreShape("gqa2_128bit", 2, 4, 2, 130, 128),
    ScoreShape("gqa4_h32_64bit", 1, 32, 8, 256, 64),
)

CI_ATTENTION_SHAPES = (
    AttentionShape("mha_tokens", 2, 2, 2, 256, 32, 24),
    AttentionShape("gqa4_tokens", 2, 8, 2, 200, 64, 40),
    AttentionShape("gqa2_pages16", 2, 4, 2, 512, 32, 6, page_size=16),
    AttentionShape("gqa4_pages32_partial_last", 1, 4, 1, 300, 64, 5, page_size=32),
    AttentionShape("gqa8_pages64", 2, 8, 1, 512, 128, 4, page_size=64),
)

# The benchmark: B = 1, Hq = 32, Hk = 8, D = 128, 2% budget, L = 32K and 128K; the same
# token budget as single tokens and as pages of 16 / 64 tokens.
GPU_SHAPES = tuple(
    AttentionShape(f"L{length // 1024}k_p{p}", 1, 32, 8, length, 128,
                   -(-budget(length) // p), page_size=p, tag="gpu")
    for length in (32 * 1024, 128 * 1024) for p in (1, 16, 64)
)
