"""KernelFoundry's GPU check (one short script; needs a GPU, not run on this project's CPUs yet).

``python -m experiments.kernelfoundry.gpu_bench [--out results.json] [--repeats 20]``

For the issue's shapes (B 1, Hq 32, Hk 8, D 128, L = 32K, bf16, a 2% token budget as single
tokens or pages of 16 / 64): every point of ``sparse_decode_attention``'s block-size space is
exported for cuda, scored by the roofline proxy (:mod:`jaxpapers.evolve.cost`) and timed on the
device; it reports the tuned point's speedup over ``block_sizes=None`` (criterion >= 1.2x), the
Spearman rank correlation of model vs measured time, and jax's dense Pallas
``decode_attention`` over the whole cache beside it (when it imports). ``--dry`` (any machine):
model times only, for the first shape, to check the script.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys

import jax
import jax.numpy as jnp
import numpy as np

from jaxpapers.evolve import tasks
from pallas_kernels._common import time_fn


def _spearman(a, b) -> float:
    ra, rb = np.argsort(np.argsort(a)), np.argsort(np.argsort(b))
    return float(np.corrcoef(ra, rb)[0, 1])


def _inputs(shape, key):
    q, k, v, idx, valid, length = tasks.make_inputs("sparse_decode_attention", shape, 0)
    cast = [jnp.asarray(a, jnp.bfloat16) for a in (q, k, v)]
    return (*cast, jnp.asarray(idx), jnp.asarray(valid), jnp.asarray(length))


def main(argv=None) -> dict:
    from experiments.kernelfoundry.run import library_seconds
    from pallas_kernels.binary_hash_attention.kernel import AttentionBlockSizes
    from pallas_kernels.binary_hash_attention.ops import sparse_decode_attention
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="kernelfoundry_gpu.json")
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--dry", action="store_true")
    args = ap.parse_args(argv)
    gpu = jax.default_backend() == "gpu"
    if not gpu and not args.dry:
        sys.exit("gpu_bench needs a GPU (use --dry to check the script on a CPU)")
    task = tasks.get_task("sparse_decode_attention")
    space = task.space_dict()
    shapes = task.gpu_shapes[:1] if args.dry else task.gpu_shapes
    report = {"backend": jax.default_backend(), "shapes": []}
    for shape in shapes:
        row = {"shape": shape.name, "points": []}
        ins = None if args.dry else _inputs(shape, jax.random.key(0))
        for pt in [None] + [dict(zip(space, p)) for p in itertools.product(*space.values())]:
            model = library_seconds("sparse_decode_attention", shape, pt or {})
            rec = {"point": pt, "model_us": model * 1e6}
            if ins is not None and np.isfinite(model):
                bs = None if pt is None else AttentionBlockSizes(**pt)
                fn = jax.jit(lambda q, k, v, i, m, n, bs=bs: sparse_decode_attention(
                    q, k, v, i, m, length=n, page_size=shape.page_size,
                    implementation="pallas", gather="vector", block_sizes=bs))
                try:
                    rec["measured_us"] = time_fn(fn, [ins], repeats=args.repeats)
                except Exception as e:  # noqa: BLE001 - e.g. shared memory overflow
                    rec["error"] = f"{type(e).__name__}: {str(e)[:200]}"
            row["points"].append(rec)
        timed = [p for p in row["points"][1:] if "measured_us" in p]
        if timed and "measured_us" in row["points"][0]:
            best = min(timed, key=lambda p: p["measured_us"])
            row["default_us"] = row["points"][0]["measured_us"]
            row["tuned"] = best["point"]
            row["tuned_speedup"] = row["default_us"] / best["measured_us"]
            row["spearman_model_vs_measured"] = _spearman(
                [p["model_us"] for p in timed], [p["measured_us"] for p in timed])
            try:
                from jax.experimental.pallas.ops.gpu.decode_attention import gqa
                q, k, v = ins[:3]
                dense = jax.jit(lambda q, k, v: gqa(q, k.swapaxes(1, 2), v.swapaxes(1, 2)))
                row["dense_pallas_decode_us"] = time_fn(dense, [(q, k, v)],
                                                       repeats=args.repeats)
            except Exception as e:  # noqa: BLE001 - optional comparison
                row["dense_pallas_decode_error"] = f"{type(e).__name__}: {str(e)[:200]}"
        report["shapes"].append(row)
        print(json.dumps({k: v for k, v in row.items() if k != "points"}), flush=True)
    with open(args.out, "w") as f:
        json.dump(report, f, indent=1)
    return report


if __name__ == "__main__":
    main()
