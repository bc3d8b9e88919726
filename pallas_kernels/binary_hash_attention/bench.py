"""Benchmark: BinaryPC sparse decode attention vs dense decode attention on this backend.

Run: ``jaxpapers bench binary_hash_attention`` (or
``python -m pallas_kernels.binary_hash_attention.bench``).

Per "gpu" shape (B = 1, Hq = 32, Hk = 8, D = 128, bf16, L = 32K / 128K, a 2% token budget as
single tokens or pages of 16 / 64): attention-only decode time of the sparse kernel over the
selected rows, of XLA dense attention over the whole cache, and of jax's dense Pallas
flash-decoding kernel (``jax.experimental.pallas.ops.gpu.decode_attention``) when it imports;
plus the whole BinaryPC step (score kernel + ``lax.top_k`` + sparse attention) for token
selection. Times are medians of repeats around ``block_until_ready``. K/V at these sizes
(64-256 MB per tensor) exceed the GPU's L2, so no buffer rotation is needed.

On CPU there is no compiled kernel (interpret mode is a test tool, not a speed): a small shape is
timed through the XLA paths only, and the table says the numbers are not meaningful.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import statistics
import time

import jax
import jax.numpy as jnp

from pallas_kernels.binary_hash_attention.ops import hash_scores, sparse_decode_attention
from pallas_kernels.binary_hash_attention.reference import pack_codes
from pallas_kernels.binary_hash_attention.shapes import GPU_SHAPES, AttentionShape, budget

__all__ = ["main", "time_fn"]

CPU_SHAPE = AttentionShape("cpu_L4k_tokens", 1, 8, 2, 4096, 64, budget(4096), tag="ci")
NUM_BITS = 64


def time_fn(fn, *args, repeats: int = 20) -> float:
    """Median microseconds of ``fn(*args)`` (after one warm-up call)."""
    jax.block_until_ready(fn(*args))
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(*args))
        samples.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(samples)


def _dense_xla(q, k, v):
    b, hq, d = q.shape
    hk = k.shape[1]
    qg = q.reshape(b, hk, hq // hk, d)
    s = jnp.einsum("bhgd,bhld->bhgl", qg, k, preferred_element_type=jnp.float32) * d ** -0.5
    p = jax.nn.softmax(s, axis=-1)
    o = jnp.einsum("bhgl,bhld->bhgd", p.astype(v.dtype), v, preferred_element_type=jnp.float32)
    return o.reshape(b, hq, d).astype(q.dtype)


def _dense_pallas():
    """jax's dense flash-decoding kernel over [B, Hk, L, D] (no transpose), or None."""
    try:
        from jax.experimental.pallas.ops.gpu import decode_attention as da
    except Exception:  # noqa: BLE001 - any import problem means "not available"
        return None

    def run(q, k, v):
        b, hq, d = q.shape
        hk = k.shape[1]
        inner = functools.partial(
            da.decode_attn_unbatched, start_idx=None, kv_seq_len=None, sm_scale=d ** -0.5,
            block_h=16, block_k=128, k_splits=16, num_warps=None, num_stages=2, grid=None,
            interpret=False, debug=False, return_residuals=False, normalize_output=True)
        o = jax.vmap(jax.vmap(lambda q, k, v: inner(q, k, v)))(
            q.reshape(b, hk, hq // hk, d), k, v)
        return o.reshape(b, hq, d)

    return jax.jit(run)


def _case(s: AttentionShape, dtype):
    kq, kk, kv, ks, ku, kp = jax.random.split(jax.random.key(0), 6)
    q = jax.random.normal(kq, (s.b, s.hq, s.d), dtype)
    k = jax.random.normal(kk, (s.b, s.hk, s.length, s.d), dtype)
    v = jax.random.normal(kv, (s.b, s.hk, s.length, s.d), dtype)
    num_pages = s.length // s.page_size
    # distinct sorted entries, as a top-k selection would give (sorted helps locality)
    idx = jnp.sort(jax.vmap(jax.vmap(lambda key: jax.random.permutation(key, num_pages)[:s.k]))(
        jax.random.split(ks, (s.b, s.hk))), axis=-1).astype(jnp.int32)
    valid = jnp.ones(idx.shape, bool)
    u = jnp.where(jax.random.bernoulli(ku, 0.5, (s.b, s.hk, s.length, NUM_BITS)), 1, -1)
    probe = jax.random.randint(kp, (s.b, s.hq, NUM_BITS), -127, 128).astype(jnp.int8)
    return q, k, v, idx, valid, pack_codes(u), probe


def _bench(s: AttentionShape, implementation: str, dtype, repeats: int):
    q, k, v, idx, valid, codes, probe = _case(s, dtype)
    length = jnp.full((s.b,), s.length, jnp.int32)
    scale = jnp.ones((s.b, s.hq), jnp.float32)
    sparse = jax.jit(lambda q, k, v, i, m, n: sparse_decode_attention(
        q, k, v, i, m, length=n, page_size=s.page_size, implementation=implementation))
    t_sparse = time_fn(sparse, q, k, v, idx, valid, length, repeats=repeats)
    t_dense = time_fn(jax.jit(_dense_xla), q, k, v, repeats=repeats)
    dense_pallas = _dense_pallas() if implementation == "pallas" else None
    t_pallas = None
    if dense_pallas is not None:
        try:
            t_pallas = time_fn(dense_pallas, q, k, v, repeats=repeats)
        except Exception as e:  # noqa: BLE001 - report, keep benchmarking
            print(f"# jax dense Pallas decode attention failed: {type(e).__name__}: {e}")
    t_step = None
    if s.page_size == 1:
        kbud = s.k

        @jax.jit
        def step(q, k, v, codes, probe):
            sc = hash_scores(codes, probe, scale, length, implementation=implementation)
            _, sel = jax.lax.top_k(sc, kbud)
            return sparse_decode_attention(q, k, v, sel, jnp.ones(sel.shape, bool),
                                           implementation=implementation)

        t_step = time_fn(step, q, k, v, codes, probe, repeats=repeats)
    return t_sparse, t_dense, t_pallas, t_step


def _fmt(t):
    return "-" if t is None else f"{t:.1f}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=20)
    args = p.parse_args(argv or [])
    backend = jax.default_backend()
    dev = jax.devices()[0].device_kind
    compiled = backend in ("gpu", "tpu")
    shapes = GPU_SHAPES if compiled else (CPU_SHAPE,)
    impl = "pallas" if compiled else "xla"
    dtype = jnp.bfloat16 if compiled else jnp.float32
    print(f"# binary_hash_attention benchmark, {datetime.date.today()}, {backend} ({dev}), "
          f"jax {jax.__version__}, {jnp.dtype(dtype).name}")
    if not compiled:
        print("# CPU: no compiled Pallas kernel; the sparse column times the XLA reference on a "
              "small shape. These timings are NOT meaningful for the GPU claim.")
    print("| shape | L | selected tokens | sparse attn us | XLA dense us | Pallas dense us | "
          "vs XLA dense | vs Pallas dense | score+top-k+attend us |")
    print("|---|---|---|---|---|---|---|---|---|")
    for s in shapes:
        t_s, t_d, t_p, t_step = _bench(s, impl, dtype, args.repeats)
        vs_p = "-" if t_p is None else f"{t_p / t_s:.2f}x"
        print(f"| {s.name} | {s.length} | {s.k * s.page_size} | {t_s:.1f} | {t_d:.1f} | "
              f"{_fmt(t_p)} | {t_d / t_s:.2f}x | {vs_p} | {_fmt(t_step)} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
