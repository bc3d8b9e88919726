"""Named problem shapes shared by the tests ("ci") and the benchmark ("gpu"); random operands."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

__all__ = ["Shape", "CI_SHAPES", "GPU_SHAPES", "SPARSITIES", "random_operands"]


@dataclasses.dataclass(frozen=True)
class Shape:
    name: str
    b: int      # activation rows (1 <= b <= 8)
    k: int      # reduction length (hidden size in)
    n: int      # output features
    tag: str = "ci"


# Interpret mode carries every operand through every grid step: keep these small. Both are
# ragged (K and N not multiples of any block), so padding and edge blocks are always exercised.
CI_SHAPES = (
    Shape("ragged_k300_n200", 3, 300, 200),
    Shape("ragged_k129_n67", 3, 129, 67),
)

# The benchmark: batch-1 decoding GEMVs of a Llama-3-8B-sized MLP / attention projection
# (hidden 4096, intermediate 14336): square, up/gate (K=4096 -> N=14336), down (14336 -> 4096).
GPU_SHAPES = (
    Shape("square_4096x4096", 1, 4096, 4096, tag="gpu"),
    Shape("up_4096x14336", 1, 4096, 14336, tag="gpu"),
    Shape("down_14336x4096", 1, 14336, 4096, tag="gpu"),
)

# Fractions of x dropped by the threshold in the benchmark (0: dense, tau = 0).
SPARSITIES = (0.0, 0.4, 0.5, 0.7, 0.9)


def random_operands(key: jax.Array, b: int, k: int, n: int, dtype=jnp.float32,
                    zero_fraction: float = 0.0):
    """Fresh ``(x [b, k] ~ N(0, 1), w [k, n] ~ N(0, 1 / k))`` in ``dtype``, never all zeros.

    ``zero_fraction`` of x's entries are set to exactly 0 (as after a ReLU-like activation), so
    ``threshold = 0`` has something to drop.
    """
    kx, kw, kz = jax.random.split(key, 3)
    x = jax.random.normal(kx, (b, k))
    if zero_fraction > 0:
        x = jnp.where(jax.random.uniform(kz, (b, k)) < zero_fraction, 0.0, x)
    w = jax.random.normal(kw, (k, n)) / jnp.sqrt(k)
    return x.astype(dtype), w.astype(dtype)
