"""Benchmark: sparse GEMV Pallas kernel vs dense bf16 ``jnp.dot`` vs XLA mask-then-dot.

Run: ``jaxpapers bench sparse_gemv`` (or ``python -m pallas_kernels.sparse_gemv.bench``).
Batch-1 bf16 GEMVs with K x N in {4096x4096, 4096x14336, 14336x4096} at sparsity 0 / 40 / 50 /
70 / 90 % (threshold = that quantile of |x| for x ~ N(0, 1); 0 % is tau = 0, i.e. dense). Prints,
per shape and sparsity: microseconds (median of repeats) of the kernel (best of a few block
configurations; the threshold is traced, so each configuration compiles once per shape), of dense
``jnp.dot`` and of mask-then-``jnp.dot``, the kernel's speed-up over both, the ideal
``1 / (1 - s)`` of a perfectly bandwidth-bound kernel, and the kernel's relative error against
the fp32 reference. Weights are rotated over ``NUM_BUFFERS`` copies so that a 117 MB
4096x14336 bf16 matrix is not timed from L2.
On CPU there is no compiled kernel (interpret mode is a test tool, not a speed): the benchmark
then times only the two XLA columns on small shapes and says that the kernel needs a GPU or TPU.
"""

from __future__ import annotations

import argparse
import datetime

import jax
import jax.numpy as jnp

from pallas_kernels._common import time_fn

from pallas_kernels.sparse_gemv.kernel import BlockSizes
from pallas_kernels.sparse_gemv.ops import _sparse_gemv
from pallas_kernels.sparse_gemv.reference import sparse_gemv_reference, threshold_for_sparsity
from pallas_kernels.sparse_gemv.shapes import GPU_SHAPES, SPARSITIES, Shape

__all__ = ["main", "time_fn"]

NUM_BUFFERS = 4
# Candidates per compiled platform (None fields: the op's per-platform choice, auto split-K).
GPU_BLOCKS = (BlockSizes(128, 64), BlockSizes(64, 128), BlockSizes(128, 128),
              BlockSizes(256, 32))
TPU_BLOCKS = (BlockSizes(512, 256), BlockSizes(256, 512), BlockSizes(1024, 256))
CPU_SHAPES = (Shape("cpu_1024x1024", 1, 1024, 1024, tag="cpu"),
              Shape("cpu_1024x2048", 1, 1024, 2048, tag="cpu"))


def _dense(x, w, tau):
    del tau
    return jnp.dot(x, w, preferred_element_type=jnp.float32).astype(x.dtype)


def _bench_shape(s: Shape, blocks, repeats: int):
    """Rows ``(sparsity, tau, t_kernel | None, blocks | None, t_dense, t_mask, rel_err)``."""
    keys = jax.random.split(jax.random.key(0), NUM_BUFFERS + 1)
    x = jax.random.normal(keys[0], (s.b, s.k), jnp.bfloat16)
    ws = [(jax.random.normal(k, (s.k, s.n), jnp.float32) / s.k ** 0.5).astype(jnp.bfloat16)
          for k in keys[1:]]
    dense = jax.jit(_dense)
    masked = jax.jit(lambda x, w, t: _sparse_gemv(x, w, t, implementation="xla"))
    kernels = [(bs, jax.jit(lambda x, w, t, bs=bs: _sparse_gemv(
        x, w, t, implementation="pallas", block_sizes=bs))) for bs in blocks]
    rows = []
    for sp in SPARSITIES:
        tau = threshold_for_sparsity(x, sp)
        args = [(x, w, tau) for w in ws]
        best = None
        for bs, fn in kernels:
            try:
                t = time_fn(fn, args, repeats=repeats)
            except Exception as e:  # noqa: BLE001 - report, keep benchmarking
                print(f"# {s.name} {bs}: {type(e).__name__}: {str(e)[:200]}")
                continue
            if best is None or t < best[0]:
                best = (t, bs, fn)
        err = None
        if best is not None:
            y = best[2](x, ws[0], tau).astype(jnp.float32)
            ref = sparse_gemv_reference(x, ws[0], tau).astype(jnp.float32)
            err = float(jnp.max(jnp.abs(y - ref)) / jnp.maximum(jnp.max(jnp.abs(ref)), 1e-30))
        rows.append((sp, float(tau), None if best is None else best[0],
                     None if best is None else best[1], time_fn(dense, args, repeats=repeats),
                     time_fn(masked, args, repeats=repeats), err))
    return rows


def _fmt_blocks(bs) -> str:
    return "-" if bs is None else f"{bs.block_k}x{bs.block_n}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=20)
    args = p.parse_args(argv or [])
    backend = jax.default_backend()
    dev = jax.devices()[0].device_kind
    compiled = backend in ("gpu", "tpu")
    shapes = GPU_SHAPES if compiled else CPU_SHAPES
    blocks = (TPU_BLOCKS if backend == "tpu" else GPU_BLOCKS) if compiled else ()
    print(f"# sparse_gemv benchmark, {datetime.date.today()}, {backend} ({dev}), "
          f"jax {jax.__version__}, bf16, B=1")
    if not compiled:
        print("# CPU: the Pallas kernel needs a GPU or TPU (interpret mode is a test tool, not a "
              "speed); timing only dense jnp.dot and XLA mask+dot on small shapes. These "
              "timings say nothing about the GPU claim.")
    print("| shape | K | N | sparsity | tau | kernel us (blocks k x n) | dense dot us | "
          "mask+dot us | vs dense | vs mask+dot | ideal | rel err |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for s in shapes:
        for sp, tau, t_k, bs, t_d, t_m, err in _bench_shape(s, blocks, args.repeats):
            kern = "-" if t_k is None else f"{t_k:.1f} ({_fmt_blocks(bs)})"
            vs_d = "-" if t_k is None else f"{t_d / t_k:.2f}x"
            vs_m = "-" if t_k is None else f"{t_m / t_k:.2f}x"
            e = "-" if err is None else f"{err:.1e}"
            print(f"| {s.name} | {s.k} | {s.n} | {sp:.0%} | {tau:.3f} | {kern} | {t_d:.1f} | "
                  f"{t_m:.1f} | {vs_d} | {vs_m} | {1 / (1 - sp):.2f}x | {e} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
