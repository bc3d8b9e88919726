"""Quantize the matching kernels of a parameter pytree (Flax or any nested dict)."""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import jax
import numpy as np

from jaxpapers.quant._types import QuantizedArray
from jaxpapers.quant.quantize import quantize

__all__ = ["QuantRule", "quantize_params", "dequantize_params", "tree_nbytes"]


@dataclasses.dataclass(frozen=True)
class QuantRule:
    """Which leaves to quantize, and how.

    A leaf is quantized when its path (``jax.tree_util.keystr``, e.g. ``"['params']['Dense_0']
    ['kernel']"``) matches ``pattern`` (``re.search``), it is a 2-D floating array, its K is
    divisible by ``group_size`` and it has at least ``min_size`` elements.
    """

    pattern: str = r"kernel"
    bits: int = 4
    group_size: int | None = 128
    symmetric: bool = True
    min_size: int = 1024

    def matches(self, path: str, leaf: Any) -> bool:
        if not hasattr(leaf, "ndim") or leaf.ndim != 2:
            return False
        if not np.issubdtype(leaf.dtype, np.floating) or leaf.size < self.min_size:
            return False
        g = leaf.shape[0] if self.group_size in (None, -1) else self.group_size
        return re.search(self.pattern, path) is not None and leaf.shape[0] % g == 0


def quantize_params(params: Any, rule: QuantRule = QuantRule()) -> Any:
    """``params`` with every leaf matching ``rule`` replaced by a :class:`QuantizedArray`."""
    if not isinstance(rule, QuantRule):
        raise TypeError(f"rule must be a QuantRule, got {type(rule).__name__}")

    def f(path, leaf):
        if rule.matches(jax.tree_util.keystr(path), leaf):
            return quantize(leaf, bits=rule.bits, group_size=rule.group_size,
                            symmetric=rule.symmetric)
        return leaf

    return jax.tree_util.tree_map_with_path(f, params)


def dequantize_params(params: Any) -> Any:
    """Replace every :class:`QuantizedArray` leaf by its dequantized float array."""
    from jaxpapers.quant.quantize import dequantize

    return jax.tree.map(lambda x: dequantize(x) if isinstance(x, QuantizedArray) else x, params,
                        is_leaf=lambda x: isinstance(x, QuantizedArray))


def tree_nbytes(params: Any) -> int:
    """Bytes held by a pytree's arrays (quantized leaves count data + scales + zero points)."""
    leaves = jax.tree.leaves(params, is_leaf=lambda x: isinstance(x, QuantizedArray))
    total = 0
    for x in leaves:
        if isinstance(x, QuantizedArray):
            total += x.nbytes
        elif hasattr(x, "dtype"):
            total += int(np.prod(x.shape)) * np.dtype(x.dtype).itemsize
    return total
