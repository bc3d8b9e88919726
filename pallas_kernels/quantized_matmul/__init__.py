"""Quantized matmul: activations x group-quantized int4/int8/int3 weights, kernel + reference.

Public op: :func:`quantized_matmul` (``implementation="auto"|"xla"|"pallas"``) on plain arrays
(packed ``data``, ``scales``, ``zeros``) plus static layout ints (``bits``, ``group_size``,
``pack_rows``). The layout helpers (int4 split-half packing, levels, dequantization, per-token
int8 activations) and the fp32 reference live in :mod:`.reference`: they define the numerics.
"""

from pallas_kernels.quantized_matmul.kernel import BlockSizes
from pallas_kernels.quantized_matmul.ops import IMPLEMENTATIONS, quantized_matmul
from pallas_kernels.quantized_matmul.reference import (MAX_PACK_ROWS, SUPPORTED_BITS, dequantize,
                                                       levels, pack_int4, pack_rows_for,
                                                       quantize_activations,
                                                       quantized_matmul_reference, unpack_int4)

__all__ = ["BlockSizes", "IMPLEMENTATIONS", "quantized_matmul", "quantized_matmul_reference",
           "SUPPORTED_BITS", "MAX_PACK_ROWS", "pack_rows_for", "pack_int4", "unpack_int4",
           "levels", "dequantize", "quantize_activations"]
