"""Named problem shapes shared by the tests ("ci") and the benchmark ("gpu")."""

from __future__ import annotations

import dataclasses

__all__ = ["Shape", "CI_SHAPES", "GPU_SHAPES"]


@dataclasses.dataclass(frozen=True)
class Shape:
    name: str
    m: int
    k: int
    n: int
    bits: int
    group_size: int | None
    symmetric: bool = True
    tag: str = "ci"


# Interpret mode carries every operand through every grid step: keep these ~1 MiB or less.
CI_SHAPES = (
    Shape("w4_g128_ragged_m", 5, 256, 128, 4, 128),
    Shape("w4_g32_asym_ragged_n", 16, 256, 96, 4, 32, symmetric=False),
    Shape("w4_per_channel", 3, 384, 128, 4, None),
    Shape("w8_g64", 20, 256, 160, 8, 64),
    Shape("w8_per_channel_asym", 8, 128, 128, 8, None, symmetric=False),
    Shape("w4_g256_two_tiles", 16, 512, 128, 4, 256),
)

GPU_SHAPES = tuple(
    Shape(f"w4a16_g128_m{m}_k{k}", m, k, k, 4, 128, tag="gpu")
    for k in (4096, 8192) for m in (1, 4, 16, 64, 256)
)
