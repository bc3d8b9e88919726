"""The quantized-array pytree."""

from __future__ import annotations

import dataclasses

import jax
import numpy as np

from jaxpapers.core import pytree

__all__ = ["QuantizedArray"]


@pytree.dataclass
class QuantizedArray:
    """A [K, N] weight quantized group-wise along K (the contraction axis).

    Letters: K rows (contraction), N columns, G = K / group_size groups, P = ``pack_rows``.

    Storage (``data``):
      * ``bits == 8``: [K, N] int8 two's-complement values ``q`` (symmetric) or uint8 levels ``u``
        (asymmetric).
      * ``bits == 4``: [K/2, N] uint8, two 4-bit levels per byte, **split-half packing** in tiles of
        ``P`` rows: for tile ``t`` and ``0 <= i < P/2`` the byte at row ``t*P/2 + i`` holds row
        ``t*P + i`` in its low nibble and row ``t*P + P/2 + i`` in its high nibble. Unpacking a tile
        needs only ``& 0xF`` and ``>> 4`` and yields two contiguous row blocks (no interleave, no
        concatenate), which is what the Pallas kernel needs on Triton and Mosaic.
        Symmetric levels are stored offset by 8 (``u = q + 8``, ``q`` in [-7, 7]).
      * ``bits == 3``: [K, N] unpacked like 8 bits: int8 ``q`` in [-3, 3] (symmetric) or uint8
        levels ``u`` in [0, 7] (asymmetric). ``nbytes`` counts this unpacked storage.

    Dequantized value: ``w[k, n] = (level[k, n] - zero[g, n]) * scales[g, n]`` with ``g = k //
    group_size``; ``zero`` is 0 (int8, int3) or 8 (int4) when symmetric, ``zeros[g, n]`` otherwise.

    Attributes:
      data: packed integers, see above.
      scales: [G, N] float scales.
      zeros: [G, N] uint8 zero points (asymmetric), or None (symmetric).
      bits: 3, 4 or 8 (static).
      group_size: rows per scale group (static); ``K`` means per-channel.
      pack_rows: P, rows per packing tile (static; 4-bit only, equals ``min(group_size, 128)``).
      shape: the original (K, N) (static).
      dtype: name of the original floating dtype (static).
    """

    data: jax.Array
    scales: jax.Array
    zeros: jax.Array | None
    bits: int = pytree.static_field()
    group_size: int = pytree.static_field()
    pack_rows: int = pytree.static_field()
    shape: tuple[int, int] = pytree.static_field()
    dtype: str = pytree.static_field()

    @property
    def symmetric(self) -> bool:
        return self.zeros is None

    @property
    def num_groups(self) -> int:
        return self.shape[0] // self.group_size

    @property
    def nbytes(self) -> int:
        """Bytes of packed data, scales and zero points."""
        return sum(int(np.prod(a.shape)) * np.dtype(a.dtype).itemsize
                   for a in (self.data, self.scales, self.zeros) if a is not None)

    def replace(self, **kw) -> "QuantizedArray":
        return dataclasses.replace(self, **kw)
