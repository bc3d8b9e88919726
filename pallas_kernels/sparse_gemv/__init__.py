"""Sparse GEMV (TEAL-style activation sparsity, as used by SPON): Pallas kernels + reference.

Public op: :func:`sparse_gemv` ``(x, w, threshold, *, bias=None, implementation="auto",
interpret=None)`` computes ``where(|x| > threshold, x, 0) @ w (+ bias)`` for B <= 8 activation
rows, reading only the weight rows whose activation survives in some batch row. The numerics are
defined by :func:`sparse_gemv_reference` in :mod:`.reference`.
"""

from pallas_kernels.sparse_gemv.kernel import MAX_BATCH, BlockSizes
from pallas_kernels.sparse_gemv.ops import IMPLEMENTATIONS, VARIANTS, sparse_gemv
from pallas_kernels.sparse_gemv.reference import (accumulation_dtype, keep_mask,
                                                  sparse_gemv_reference, threshold_for_sparsity)

__all__ = ["sparse_gemv", "sparse_gemv_reference", "BlockSizes", "IMPLEMENTATIONS", "VARIANTS",
           "MAX_BATCH", "accumulation_dtype", "keep_mask", "threshold_for_sparsity"]
