"""sparse_gemv: both Pallas fetch patterns (interpret mode on CPU) against the jnp reference.

Operands are fresh random normals (``shapes.random_operands``, seeded by ``zlib.crc32`` of the
case name) with some exact zeros, so ``threshold = 0`` has something to drop; thresholds are
quantiles of ``|x|`` (TEAL's calibration) and are passed traced, so one compilation per case
serves every sparsity level.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.kernels._lowering import lower_for
from tests.kernels._seeds import seed_for

from pallas_kernels import _common
from pallas_kernels.sparse_gemv import (MAX_BATCH, BlockSizes, sparse_gemv, sparse_gemv_reference,
                                        threshold_for_sparsity)
from pallas_kernels.sparse_gemv.ops import _Config, _pallas_forward, _sparse_gemv
from pallas_kernels.sparse_gemv.shapes import CI_SHAPES, GPU_SHAPES, SPARSITIES, random_operands

# Per-dtype relative tolerance of one accumulation/rounding step; the bound on |kernel - ref| is
# tol * sqrt(K) * (|x_kept| @ |w|). Both sides upcast the inputs exactly (so products are exact
# and the kept entries are identical) and accumulate in fp32 (f64) in a different order; the
# output is then rounded once to the result dtype, which may land one output ulp apart:
# f32 ~ eps32; f16 and bf16 two output ulps relative (2^-10 x 2, 2^-8 x 2); f64 ~ eps64.
_TOL = {jnp.float32: 2e-7, jnp.float16: 2e-3, jnp.bfloat16: 8e-3, jnp.float64: 4e-16}

# 0.0 means tau = 0 (only the exact zeros are dropped); 1.0 is tau = max |x|: everything is
# dropped, every K block is skipped and the result must be exactly zero
_SPARSITY_LEVELS = (0.0, 0.5, 0.95, 1.0)


def _operands(name, b, k, n, dtype=jnp.float32, zero_fraction=0.3):
    return random_operands(jax.random.key(seed_for(name)), b, k, n, dtype, zero_fraction)


def _assert_close(y, ref, x, w, tau, dtype):
    xf = np.asarray(x, np.float64)
    kept = np.where(np.abs(xf) > float(tau), np.abs(xf), 0.0)
    mag = kept @ np.abs(np.asarray(w, np.float64))
    bound = _TOL[dtype] * np.sqrt(w.shape[0]) * mag + 1e-30
    err = np.abs(np.asarray(y, np.float64) - np.asarray(ref, np.float64))
    assert np.all(err <= bound), float((err / bound).max())


def _pallas(variant="gpu", block_sizes=None):
    return jax.jit(lambda x, w, t: _sparse_gemv(x, w, t, implementation="pallas",
                                                variant=variant, block_sizes=block_sizes))


def _check_levels(fn, x, w, dtype):
    for s in _SPARSITY_LEVELS:
        tau = threshold_for_sparsity(x, s)
        y = fn(x, w, tau)
        assert y.shape == (x.shape[0], w.shape[1]) and y.dtype == dtype
        dropped = float(jnp.mean(jnp.abs(x.astype(jnp.float32)) <= tau))
        assert dropped >= max(s - 0.02, 0.25)    # 30% exact zeros, or the quantile
        _assert_close(y, sparse_gemv_reference(x, w, tau), x, w, tau, dtype)


# ----------------------------------------------------------------------------- values


def _case_id(v):
    return getattr(v, "name", None) or (jnp.dtype(v).name if isinstance(v, type) else str(v))


_CASES = [(s, b, jnp.float32) for s in CI_SHAPES for b in (1, 3, 8)] + [
    (CI_SHAPES[0], 3, jnp.bfloat16), (CI_SHAPES[1], 1, jnp.bfloat16),
    (CI_SHAPES[1], 8, jnp.bfloat16), (CI_SHAPES[1], 3, jnp.float16)]


@pytest.mark.parametrize("shape, b, dtype", _CASES,
                         ids=_case_id)
def test_gpu_kernel_matches_reference(shape, b, dtype):
    name = f"gpu/{shape.name}/{b}/{jnp.dtype(dtype).name}"
    x, w = _operands(name, b, shape.k, shape.n, dtype)
    _check_levels(_pallas("gpu"), x, w, dtype)


@pytest.mark.parametrize("shape, b, dtype", [(CI_SHAPES[0], 3, jnp.float32),
                                             (CI_SHAPES[1], 8, jnp.bfloat16)],
                         ids=_case_id)
def test_tpu_kernel_matches_reference(shape, b, dtype):
    name = f"tpu/{shape.name}/{b}/{jnp.dtype(dtype).name}"
    x, w = _operands(name, b, shape.k, shape.n, dtype)
    # K blocks of 128 with the first one empty: the prefetched list starts at block 1 and its
    # tail repeats the last id (those steps must not accumulate again)
    x = x.at[:, :128].set(0.0)
    _check_levels(_pallas("tpu", BlockSizes(block_k=128)), x, w, dtype)


def test_xla_path_matches_reference_and_mixed_dtypes_promote():
    x, w = _operands("xla", 3, 300, 200)
    f = jax.jit(lambda x, w, t: sparse_gemv(x, w, t, implementation="xla"))
    _check_levels(f, x, w, jnp.float32)
    xb = x.astype(jnp.bfloat16)
    y = sparse_gemv(xb, w, 0.5, implementation="xla")   # bf16 x f32 -> f32
    assert y.dtype == jnp.float32
    _assert_close(y, sparse_gemv_reference(xb, w, 0.5), xb, w, 0.5, jnp.float32)


def test_float64_kernel_against_numpy(x64):
    x, w = _operands("f64", 3, 129, 67, jnp.float64)
    tau = 0.4
    xn = np.asarray(x)
    want = np.where(np.abs(xn) > tau, xn, 0.0) @ np.asarray(w)
    for impl in ("pallas", "xla"):
        y = sparse_gemv(x, w, tau, implementation=impl)
        assert y.dtype == jnp.float64
        _assert_close(y, want, x, w, tau, jnp.float64)


def test_split_k_with_a_ragged_last_split_and_skipped_blocks():
    # K = 300 in blocks of 32 -> 10 blocks; 4 splits of 3 blocks (the last owns 1)
    x, w = _operands("splits", 3, 300, 200)
    x = x.at[:, 64:160].set(0.0)   # three all-zero K blocks: skipped, never loaded
    bs = BlockSizes(block_k=32, block_n=64, num_splits=4)
    _check_levels(_pallas("gpu", bs), x, w, jnp.float32)


def test_batch_uses_the_union_of_rows_and_skips_unread_rows():
    # Each batch row keeps a different set of K entries: a kernel that masked weight rows by
    # one batch row (TEAL's kernel for B > 1) would drop the other rows' contributions.
    k, n, b = 256, 128, 3
    x, w = _operands("union", b, k, n, zero_fraction=0.0)
    owner = jnp.arange(k) % 4                      # row b keeps k = b (mod 4); k = 3 (mod 4): none
    x = jnp.where(owner[None, :] == jnp.arange(b)[:, None], x, 0.0)
    x = x.at[:, 128:].set(0.0)                     # and K block [128, 256) is empty for all rows
    unread = np.asarray(jnp.all(x == 0, axis=0))   # rows no batch row needs
    want = sparse_gemv_reference(x, w, 0.0)
    # NaN in unread weight rows: a kernel that reads (and multiplies) them would return NaN.
    w_nan = jnp.where(jnp.asarray(unread)[:, None], jnp.nan, w)
    y = _pallas("gpu", BlockSizes(block_k=64))(x, w_nan, jnp.float32(0.0))
    _assert_close(y, want, x, w, 0.0, jnp.float32)
    # The TPU pattern skips whole empty K blocks (it reads every row of a listed block).
    w_blk = w.at[128:].set(jnp.nan)
    y = _pallas("tpu", BlockSizes(block_k=128))(x, w_blk, jnp.float32(0.0))
    _assert_close(y, want, x, w, 0.0, jnp.float32)


def test_bias_and_one_dimensional_x():
    x, w = _operands("bias", 1, 300, 200)
    bias = jax.random.normal(jax.random.key(seed_for("bias/b")), (200,))
    for impl in ("pallas", "xla"):
        y = sparse_gemv(x[0], w, 0.3, bias=bias, implementation=impl)
        assert y.shape == (200,)
        ref = sparse_gemv_reference(x[0], w, 0.3, bias=bias)
        assert ref.shape == (200,)
        _assert_close(y[None], ref[None], x, w, 0.3, jnp.float32)
        y2 = sparse_gemv(x, w, 0.3, bias=bias, implementation=impl)
        _assert_close(y2, ref[None], x, w, 0.3, jnp.float32)


# ----------------------------------------------------------------------------- transforms


def test_vmap_over_x_threshold_and_both():
    x, w = _operands("vmap", 2, 129, 67)
    xs = jnp.stack([x, -2.0 * x, x[::-1]])
    taus = jnp.array([0.0, 0.5, 1.2], jnp.float32)
    f = lambda x, t: sparse_gemv(x, w, t, implementation="pallas")
    cases = ((jax.vmap(f, in_axes=(0, None))(xs, taus[1]), lambda i: (xs[i], taus[1])),
             (jax.vmap(f, in_axes=(None, 0))(x, taus), lambda i: (x, taus[i])),
             (jax.vmap(f)(xs, taus), lambda i: (xs[i], taus[i])))
    for ys, args in cases:
        assert ys.shape == (3, 2, 67)
        for i in range(3):
            xi, ti = args(i)
            _assert_close(ys[i], sparse_gemv_reference(xi, w, ti), xi, w, ti, jnp.float32)


def test_jit_with_traced_threshold_compiles_once():
    x, w = _operands("once", 3, 129, 67)
    traces = []

    @jax.jit
    def f(x, tau):
        traces.append(tau)
        return sparse_gemv(x, w, tau, implementation="pallas")

    for s in SPARSITIES:
        tau = jnp.asarray(threshold_for_sparsity(x, s), jnp.float32)
        _assert_close(f(x, tau), sparse_gemv_reference(x, w, tau), x, w, tau, jnp.float32)
    assert len(traces) == 1 and f._cache_size() == 1


def test_gradients_match_the_reference_vjp():
    x, w = _operands("grad", 3, 129, 67)
    bias = jax.random.normal(jax.random.key(seed_for("grad/bias")), (67,))
    dy = jax.random.normal(jax.random.key(seed_for("grad/dy")), (3, 67))
    tau = jnp.float32(0.5)
    _, vjp_ref = jax.vjp(lambda x, w, b, t: sparse_gemv_reference(x, w, t, bias=b),
                         x, w, bias, tau)
    _, vjp_ker = jax.vjp(lambda x, w, b, t: sparse_gemv(x, w, t, bias=b,
                                                        implementation="pallas"),
                         x, w, bias, tau)
    for got, want in zip(vjp_ker(dy), vjp_ref(dy)):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-5)
    assert float(vjp_ker(dy)[3]) == 0.0


# ----------------------------------------------------------------------------- dispatch


def test_pallas_call_is_on_the_path():
    x, w = _operands("jaxpr", 3, 129, 67)
    for variant, name in (("gpu", "sparse_gemv"), ("tpu", "sparse_gemv_prefetch")):
        text = str(jax.make_jaxpr(lambda x, t: _sparse_gemv(
            x, w, t, implementation="pallas", variant=variant))(x, 0.5))
        assert "pallas_call" in text and f"name={name}" in text.replace("'", "")
    xla = str(jax.make_jaxpr(lambda x, t: sparse_gemv(x, w, t, implementation="xla"))(x, 0.5))
    assert "pallas_call" not in xla


def test_auto_on_cpu_falls_back_and_says_so():
    x, w = _operands("auto", 2, 129, 67)
    with pytest.warns(UserWarning, match="XLA path"):
        y = sparse_gemv(x, w, 0.5)
    np.testing.assert_array_equal(np.asarray(y),
                                  np.asarray(sparse_gemv(x, w, 0.5, implementation="xla")))


def test_explicit_pallas_raises_where_it_cannot_run(monkeypatch):
    x, w = _operands("raise", 2, 129, 67)
    with pytest.raises(ValueError, match=r"sparse_gemv\(implementation='pallas'\) cannot run "
                                         r"here: no compiled Pallas kernel on backend 'cpu'"):
        sparse_gemv(x, w, 0.5, implementation="pallas", interpret=False)
    monkeypatch.setattr(_common, "platform", lambda: "tpu")
    with jax.enable_x64(True):
        x64, w64 = x.astype(jnp.float64), w.astype(jnp.float64)
        with pytest.raises(ValueError, match="no float64"):
            sparse_gemv(x64, w64, 0.5, implementation="pallas", interpret=False)


def test_bad_inputs():
    x, w = _operands("bad", 3, 129, 67)
    bias = jnp.ones((67,))
    with pytest.raises(ValueError, match=r"^x must have 1 <= B <= 8 rows"):
        sparse_gemv(jnp.ones((MAX_BATCH + 1, 129)), w, 0.5)
    with pytest.raises(ValueError, match=r"^x must have 1 <= B <= 8"):
        sparse_gemv(jnp.ones((0, 129)), w, 0.5)
    with pytest.raises(ValueError, match=r"^x must be \[B, K\]"):
        sparse_gemv(jnp.ones((2, 2, 129)), w, 0.5)
    with pytest.raises(ValueError, match=r"^x and w disagree on K"):
        sparse_gemv(x[:, :100], w, 0.5)
    with pytest.raises(ValueError, match=r"^w must be 2-D"):
        sparse_gemv(x, w[None], 0.5)
    with pytest.raises(ValueError, match=r"^w must be 2-D"):
        sparse_gemv(x, w[:, 0], 0.5)
    with pytest.raises(ValueError, match=r"^bias must be None or \[N\]"):
        sparse_gemv(x, w, 0.5, bias=bias[:10])
    with pytest.raises(ValueError, match=r"^threshold must be a number >= 0, got NaN"):
        sparse_gemv(x, w, float("nan"))
    with pytest.raises(ValueError, match=r"^threshold must be >= 0"):
        sparse_gemv(x, w, jnp.float32(-0.1))
    with pytest.raises(ValueError, match=r"^threshold must be a scalar"):
        sparse_gemv(x, w, jnp.array([0.1, 0.2]))
    with pytest.raises(TypeError, match=r"^x must be floating"):
        sparse_gemv(x.astype(jnp.int32), w, 0.5)
    with pytest.raises(TypeError, match=r"^w must be floating"):
        sparse_gemv(x, w.astype(jnp.int8), 0.5)
    with pytest.raises(TypeError, match=r"^bias must be floating"):
        sparse_gemv(x, w, 0.5, bias=jnp.ones((67,), jnp.int32))
    with pytest.raises(TypeError, match=r"^threshold must be a float scalar"):
        sparse_gemv(x, w, jnp.int32(1))
    with pytest.raises(TypeError, match=r"^threshold must be a float scalar"):
        sparse_gemv(x, w, True)
    with pytest.raises(ValueError, match="implementation must be one of"):
        sparse_gemv(x, w, 0.5, implementation="triton")
    with pytest.raises(ValueError, match=r"block_sizes.block_k must be a power of two"):
        _sparse_gemv(x, w, 0.5, implementation="pallas", block_sizes=BlockSizes(block_k=48))
    with pytest.raises(ValueError, match=r"block_sizes.block_n must be a multiple of 128"):
        _sparse_gemv(x, w, 0.5, implementation="pallas", variant="tpu",
                     block_sizes=BlockSizes(block_n=64))
    with pytest.raises(ValueError, match=r"block_sizes.num_splits must be in \[1, 2\]"):
        _sparse_gemv(x, w, 0.5, implementation="pallas", block_sizes=BlockSizes(num_splits=3))
    # python ints are fine thresholds (0 keeps every nonzero), traced ones are not checked
    assert sparse_gemv(x, w, 0, implementation="xla").shape == (3, 67)
    assert jax.jit(lambda t: sparse_gemv(x, w, t, implementation="xla"))(-1.0).shape == (3, 67)


# ----------------------------------------------------------------------------- lowerings


def _lowered(platform, variant, b, k, n, dtype=jnp.bfloat16, block_sizes=BlockSizes()):
    from pallas_kernels.sparse_gemv.ops import _choose_blocks

    bk, bn, splits = _choose_blocks(variant, k, n, block_sizes, compiled=True)
    cfg = _Config(implementation="pallas", variant=variant, block_k=bk, block_n=bn,
                  num_splits=splits, acc_dtype="float32", out_dtype=jnp.dtype(dtype).name,
                  interpret=False, platform=platform)
    args = (jnp.zeros((b, k), dtype), jnp.zeros((k, n), dtype), jnp.zeros((), jnp.float32),
            jnp.zeros((n,), dtype))
    return lower_for(platform, lambda x, w, t, c: _pallas_forward(x, w, t, c, cfg), *args).as_text()


@pytest.mark.parametrize("b, k, n", [(1, 14336, 4096), (3, 4096, 14336), (8, 300, 200)])
def test_gpu_kernel_lowers_for_cuda(b, k, n):
    # The real Triton lowering runs on CPU (lowering is not compiling: register pressure and
    # shared-memory limits show only on a device). K = 14336 blocks are not a power of two as a
    # whole; only the [bk, 1] / [bk, bn] tiles loaded in the kernel must be.
    assert "triton" in _lowered("cuda", "gpu", b, k, n).lower()


@pytest.mark.parametrize("b, k, n, dtype", [(1, 14336, 4096, jnp.bfloat16),
                                            (3, 4096, 14336, jnp.bfloat16),
                                            (8, 300, 200, jnp.float32)])
def test_tpu_kernel_lowers_for_tpu(b, k, n, dtype):
    # Mosaic: scalar-prefetched block ids drive the x / w index maps.
    assert "tpu_custom_call" in _lowered("tpu", "tpu", b, k, n, dtype)


def test_benchmark_shapes_follow_the_issue():
    assert {(s.k, s.n) for s in GPU_SHAPES} == {(4096, 4096), (4096, 14336), (14336, 4096)}
    assert all(s.b == 1 for s in GPU_SHAPES)
    assert SPARSITIES == (0.0, 0.4, 0.5, 0.7, 0.9)
