"""Quantized matmul: activations x group-quantized int4/int8 weights, Pallas kernel + reference.

Public op: :func:`quantized_matmul` (``implementation="auto"|"xla"|"pallas"``).
"""

from pallas_kernels.quantized_matmul.kernel import BlockSizes
from pallas_kernels.quantized_matmul.ops import IMPLEMENTATIONS, quantized_matmul
from pallas_kernels.quantized_matmul.reference import quantized_matmul_reference

__all__ = ["BlockSizes", "IMPLEMENTATIONS", "quantized_matmul", "quantized_matmul_reference"]
