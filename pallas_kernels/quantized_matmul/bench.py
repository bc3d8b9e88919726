"""Benchmark: W4A16 Pallas kernel vs bf16 ``jnp.dot`` vs XLA dequantize+dot on this backend.

Run: ``jaxpapers bench quantized_matmul`` (or ``python -m pallas_kernels.quantized_matmul.bench``).
Prints, per shape: microseconds (median of repeats), achieved HBM GB/s counting packed weights +
scales + x + y, and the speed ratio to bf16. Eight distinct weight buffers are rotated, so an
8192x8192 int4 matrix (~35 MB, which fits in an H200's L2) is not timed from cache.
On CPU there is no compiled kernel (interpret mode is a test tool, not a speed): the benchmark then
times only the XLA paths on the "ci" shapes and says so.
"""

from __future__ import annotations

import argparse
import datetime

import jax
import jax.numpy as jnp

from pallas_kernels._common import time_fn

from pallas_kernels.quantized_matmul.kernel import BlockSizes
from pallas_kernels.quantized_matmul.ops import quantized_matmul
from pallas_kernels.quantized_matmul.shapes import CI_SHAPES, GPU_SHAPES, random_weight

__all__ = ["main", "time_fn"]

NUM_BUFFERS = 8
# Split-K candidates: with M <= 16 and N/bn output tiles (64 at N = 8192) a GPU has too few
# programs to keep its SMs busy; splitting K multiplies the programs. The best is reported.
SPLIT_K = (1, 2, 4, 8)


def _bench_shape(s, implementation: str, repeats: int):
    keys = jax.random.split(jax.random.key(0), 2 * NUM_BUFFERS + 1)
    x = jax.random.normal(keys[0], (s.m, s.k), jnp.bfloat16)
    ws = [jax.random.normal(k, (s.k, s.n), jnp.bfloat16) for k in keys[1:NUM_BUFFERS + 1]]
    # random levels and bf16 scales in the kernel's layout (timing does not depend on the values)
    qs = [random_weight(k, s.k, s.n, bits=s.bits, group_size=s.group, symmetric=s.symmetric,
                        scale_dtype=jnp.bfloat16) for k in keys[NUM_BUFFERS + 1:]]
    layout = qs[0][3]
    args = [(x, d, sc, z) for d, sc, z, _ in qs]
    best = None
    for sk in SPLIT_K if implementation == "pallas" else (1,):
        bs = BlockSizes(block_m=0, block_n=128, block_k=512, split_k=sk)
        kern = jax.jit(lambda x, d, sc, z, bs=bs: quantized_matmul(
            x, d, sc, z, **layout, implementation=implementation, block_sizes=bs))
        try:
            t = time_fn(kern, args, repeats=repeats)
        except ValueError:  # this split does not cut K into whole groups / packing tiles
            continue
        if best is None or t < best[0]:
            best = (t, sk)
    t_k, split_k = best
    deq = jax.jit(lambda x, d, sc, z: quantized_matmul(x, d, sc, z, **layout,
                                                       implementation="xla"))
    dense = jax.jit(lambda x, w: jnp.dot(x, w, preferred_element_type=jnp.float32).astype(x.dtype))
    t_x = time_fn(deq, args, repeats=repeats)
    t_d = time_fn(dense, [(x, w) for w in ws], repeats=repeats)
    weight_bytes = sum(a.nbytes for a in qs[0][:3] if a is not None)
    moved = weight_bytes + x.size * 2 + s.m * s.n * 2
    return t_k, split_k, t_x, t_d, moved / (t_k * 1e-6) / 1e9


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=20)
    args = p.parse_args(argv or [])
    backend = jax.default_backend()
    dev = jax.devices()[0].device_kind
    compiled = backend in ("gpu", "tpu")
    shapes = GPU_SHAPES if compiled else CI_SHAPES[:2]
    impl = "pallas" if compiled else "xla"
    print(f"# quantized_matmul benchmark, {datetime.date.today()}, {backend} ({dev}), "
          f"jax {jax.__version__}")
    if not compiled:
        print("# no compiled Pallas kernel on CPU: timing the XLA path in the kernel column")
    print("| shape | M | K=N | kernel us (best split_k) | XLA deq+dot us | bf16 dot us | "
          "kernel GB/s | speed vs bf16 |")
    print("|---|---|---|---|---|---|---|---|")
    for s in shapes:
        t_k, sk, t_x, t_d, gbs = _bench_shape(s, impl, args.repeats)
        print(f"| {s.name} | {s.m} | {s.k} | {t_k:.1f} ({sk}) | {t_x:.1f} | {t_d:.1f} | "
              f"{gbs:.0f} | {t_d / t_k:.2f}x |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
