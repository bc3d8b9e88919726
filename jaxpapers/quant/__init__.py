"""Weight quantization: group-wise int8/int4/int3 arrays, quantized matmuls, pytree quantization.

The storage layout and the matmul numerics are defined once, in ``pallas_kernels.quantized_matmul``
(plain arrays: packed data, scales, zero points, static layout ints). This package holds the
quantizer, the :class:`QuantizedArray` pytree and adapters to that op: :func:`qdot` is its
``implementation="xla"`` path, :func:`matmul` / :func:`dense` take any ``implementation``.
"""

from jaxpapers.quant._types import QuantizedArray
from jaxpapers.quant.ops import dense, matmul, qdot, quantize_activations
from jaxpapers.quant.params import QuantRule, dequantize_params, quantize_params, tree_nbytes
from jaxpapers.quant.quantize import (SUPPORTED_BITS, dequantize, levels, pack_int4, quantize,
                                      unpack_int4)

__all__ = [
    "QuantizedArray",
    "SUPPORTED_BITS",
    "quantize",
    "dequantize",
    "levels",
    "pack_int4",
    "unpack_int4",
    "quantize_activations",
    "qdot",
    "matmul",
    "dense",
    "QuantRule",
    "quantize_params",
    "dequantize_params",
    "tree_nbytes",
]
