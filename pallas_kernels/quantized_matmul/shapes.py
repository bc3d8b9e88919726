"""Named problem shapes shared by the tests ("ci") and the benchmark ("gpu"); random operands."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from pallas_kernels.quantized_matmul.reference import pack_int4, pack_rows_for

__all__ = ["Shape", "CI_SHAPES", "GPU_SHAPES", "random_weight", "random_operands"]


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

    @property
    def group(self) -> int:
        """Rows per scale group (K for per-channel)."""
        return self.k if self.group_size in (None, -1) else self.group_size


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


def random_weight(key: jax.Array, k: int, n: int, *, bits: int, group_size: int,
                  symmetric: bool = True, scale_dtype=jnp.float32):
    """A random group-quantized [K, N] weight as plain arrays: ``(data, scales, zeros, layout)``.

    Levels are uniform over the format's whole range (symmetric: ``[-qmax, qmax]``; asymmetric:
    ``[0, 2^bits - 1]`` with random zero points), scales uniform in ``[0.5, 1.5] / qmax`` times a
    per-column factor in ``[0.2, 2]``. ``layout`` holds the static ``bits``, ``group_size`` and
    ``pack_rows`` keyword arguments of the op and the reference.
    """
    kl, ks, kz = jax.random.split(key, 3)
    g = group_size
    qmax = 2 ** (bits - 1) - 1
    if symmetric:
        q = jax.random.randint(kl, (k, n), -qmax, qmax + 1)
        data = (q + 8).astype(jnp.uint8) if bits == 4 else q.astype(jnp.int8)
        zeros = None
    else:
        top = 2 ** bits - 1
        data = jax.random.randint(kl, (k, n), 0, top + 1).astype(jnp.uint8)
        zeros = jax.random.randint(kz, (k // g, n), 0, top + 1).astype(jnp.uint8)
    p = pack_rows_for(g) if bits == 4 else g
    if bits == 4:
        data = pack_int4(data, p)
    col = jnp.linspace(0.2, 2.0, n)
    scales = (jax.random.uniform(ks, (k // g, n), minval=0.5, maxval=1.5) * col / qmax)
    return data, scales.astype(scale_dtype), zeros, dict(bits=bits, group_size=g, pack_rows=p)


def random_operands(key: jax.Array, s: Shape, dtype=jnp.float32):
    """Fresh ``(x [M, K] N(0, 1) in dtype, data, scales, zeros, layout)`` for shape ``s``."""
    kx, kw = jax.random.split(key)
    x = jax.random.normal(kx, (s.m, s.k)).astype(dtype)
    return (x, *random_weight(kw, s.k, s.n, bits=s.bits, group_size=s.group,
                              symmetric=s.symmetric))
