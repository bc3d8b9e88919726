"""Pallas kernels for jaxpapers' hot paths, each beside a pure-jnp reference.

Each kernel lives in ``pallas_kernels/<name>/`` with ``reference.py``, ``kernel.py`` and a
``bench.py`` exposing ``main() -> int``. A kernel becomes benchmarkable by ``jaxpapers bench`` when
it is listed in ``_BENCHMARKS`` below. ``_common`` holds what every op shares: the
``implementation="auto"|"xla"|"pallas"`` resolver, platform detection and compiler params.

Kernels stand alone: nothing here imports ``jaxpapers`` (``tests/kernels/test_layering.py``);
ops take plain arrays and static ints, and ``jaxpapers`` adapts its types to them.
"""

from __future__ import annotations

import importlib

__all__ = ["benchmarks", "run_benchmark"]

# kernel name -> module with ``main() -> int``.
_BENCHMARKS: dict[str, str] = {
    "binary_hash_attention": "pallas_kernels.binary_hash_attention.bench",
    "quantized_matmul": "pallas_kernels.quantized_matmul.bench",
    "sparse_gemv": "pallas_kernels.sparse_gemv.bench",
}


def benchmarks() -> tuple[str, ...]:
    """Names of the kernels with a benchmark."""
    return tuple(sorted(_BENCHMARKS))


def run_benchmark(name: str) -> int:
    """Run the benchmark of kernel ``name`` on the current backend; returns an exit code."""
    if name not in _BENCHMARKS:
        raise ValueError(f"unknown kernel {name!r}; available: {', '.join(benchmarks()) or 'none'}")
    return importlib.import_module(_BENCHMARKS[name]).main()
