"""Weight quantization: group-wise int8/int4/int3 arrays, quantized matmuls, pytree quantization.

The Pallas kernel for the hot path is ``pallas_kernels.quantized_matmul``; the functions here are
the XLA path and the definition of the numerics.
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
