"""quantized_matmul: the Pallas kernel (interpret mode on CPU) against its jnp reference."""


import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.kernels._lowering import lower_for

from jaxpapers import quant
from pallas_kernels.quantized_matmul import (BlockSizes, quantized_matmul,
                                             quantized_matmul_reference)
from pallas_kernels.quantized_matmul.ops import _pallas_forward
from pallas_kernels.quantized_matmul.shapes import CI_SHAPES

# Per-dtype relative tolerance of one product/accumulation step; the bound on |kernel - ref| is
# tol * sqrt(K) * (|x| @ |w|): both sides accumulate in fp32 in a different order, and the
# integer weights are exact in bf16, so only accumulation order and the final cast differ.
_TOL = {jnp.float32: 2e-7, jnp.bfloat16: 8e-3}  # bf16: one rounding of the output (2^-8) x 2


def _case(seed, shape, dtype):
    kx, kw = jax.random.split(jax.random.key(seed))
    w = jax.random.normal(kw, (shape.k, shape.n)) * jnp.linspace(0.2, 2.0, shape.n)
    x = jax.random.normal(kx, (shape.m, shape.k)).astype(dtype)
    q = quant.quantize(w, bits=shape.bits, group_size=shape.group_size, symmetric=shape.symmetric)
    return x, q


def _assert_close(y, ref, x, q, dtype):
    mag = np.abs(np.asarray(x, np.float32)) @ np.abs(np.asarray(quant.dequantize(q, jnp.float32)))
    bound = _TOL[dtype] * np.sqrt(q.shape[0]) * mag + 1e-6
    err = np.abs(np.asarray(y, np.float32) - np.asarray(ref, np.float32))
    assert np.all(err <= bound), float((err / bound).max())


@pytest.mark.parametrize("shape", CI_SHAPES, ids=lambda s: s.name)
def test_kernel_matches_reference_f32(shape):
    x, q = _case(hash(shape.name) % 1000, shape, jnp.float32)
    y = quantized_matmul(x, q, implementation="pallas")
    assert y.shape == (shape.m, shape.n) and y.dtype == jnp.float32
    _assert_close(y, quantized_matmul_reference(x, q), x, q, jnp.float32)


@pytest.mark.parametrize("shape", CI_SHAPES[:2], ids=lambda s: s.name)
def test_kernel_matches_reference_bf16(shape):
    x, q = _case(7, shape, jnp.bfloat16)
    y = quantized_matmul(x, q, implementation="pallas")
    assert y.dtype == jnp.bfloat16
    _assert_close(y, quantized_matmul_reference(x, q), x, q, jnp.bfloat16)


@pytest.mark.parametrize("bits, group", [(8, None), (4, 64), (8, 32)])
def test_int8_activations_exact_against_integer_numpy(bits, group):
    kx, kw = jax.random.split(jax.random.key(bits * 100 + (group or 0)))
    k, n, m = 256, 128, 9
    # integer activations with a 127 in every row quantize to themselves with scale 1
    x = jax.random.randint(kx, (m, k), -127, 128).at[:, 3].set(127).astype(jnp.float32)
    q = quant.quantize(jax.random.normal(kw, (k, n)), bits=bits, group_size=group)
    q = q.replace(scales=jnp.ones_like(q.scales, jnp.float32))  # isolate the integer path
    y = quantized_matmul(x, q, implementation="pallas", activation_bits=8)
    want = np.asarray(x, np.int64) @ np.asarray(quant.levels(q), np.int64)
    np.testing.assert_array_equal(np.asarray(y, np.int64), want)


def test_split_k_equals_single_pass():
    x, q = _case(3, CI_SHAPES[-1], jnp.float32)
    one = quantized_matmul(x, q, implementation="pallas")
    two = quantized_matmul(x, q, implementation="pallas",
                           block_sizes=BlockSizes(block_m=16, block_n=128, block_k=128, split_k=2))
    _assert_close(two, one, x, q, jnp.float32)


def test_vmap_over_batch_of_x():
    x, q = _case(4, CI_SHAPES[0], jnp.float32)
    xb = jnp.stack([x, 2.0 * x + 1.0, -x])
    f = jax.jit(lambda x: quantized_matmul(x, q, implementation="pallas"))
    yb = jax.vmap(f)(xb)
    for i in range(3):
        _assert_close(yb[i], quantized_matmul_reference(xb[i], q), xb[i], q, jnp.float32)


def test_pallas_call_is_on_the_path():
    x, q = _case(5, CI_SHAPES[0], jnp.float32)
    jaxpr = str(jax.make_jaxpr(lambda x: quantized_matmul(x, q, implementation="pallas"))(x))
    assert "pallas_call" in jaxpr and "quantized_matmul" in jaxpr
    xla = str(jax.make_jaxpr(lambda x: quantized_matmul(x, q, implementation="xla"))(x))
    assert "pallas_call" not in xla


def test_gradient_wrt_x_matches_reference_vjp():
    x, q = _case(6, CI_SHAPES[1], jnp.float32)
    dy = jax.random.normal(jax.random.key(60), (x.shape[0], q.shape[1]))
    _, vjp_ref = jax.vjp(lambda x: quantized_matmul_reference(x, q), x)
    _, vjp_ker = jax.vjp(lambda x: quantized_matmul(x, q, implementation="pallas"), x)
    np.testing.assert_allclose(np.asarray(vjp_ker(dy)[0]), np.asarray(vjp_ref(dy)[0]),
                               rtol=1e-5, atol=1e-5)
    g = jax.grad(lambda x: jnp.sum(quantized_matmul(x, q, implementation="pallas") ** 2))(x)
    assert g.shape == x.shape and bool(jnp.all(jnp.isfinite(g)))


def test_auto_on_cpu_falls_back_and_says_so():
    x, q = _case(8, CI_SHAPES[0], jnp.float32)
    from pallas_kernels.quantized_matmul import ops

    ops._warned.clear()
    with pytest.warns(UserWarning, match="XLA path"):
        y = quantized_matmul(x, q)  # auto
    np.testing.assert_array_equal(np.asarray(y), np.asarray(quantized_matmul_reference(x, q)))


def test_bad_inputs():
    x, q = _case(9, CI_SHAPES[0], jnp.float32)
    with pytest.raises(ValueError, match="implementation"):
        quantized_matmul(x, q, implementation="cuda")
    with pytest.raises(ValueError, match=r"\[..., K=256\]"):
        quantized_matmul(x[:, :100], q)
    with pytest.raises(TypeError, match="floating"):
        quantized_matmul(x.astype(jnp.int32), q)
    with pytest.raises(TypeError, match="QuantizedArray"):
        quantized_matmul(x, jnp.ones((256, 128)))
    with pytest.raises(ValueError, match="activation_bits"):
        quantized_matmul(x, q, activation_bits=4)


def _lower(platform, x, q):
    f = lambda x, q: _pallas_forward(x, q, None, BlockSizes(16, 128, 512, 1), jnp.bfloat16,
                                     False, platform)
    return lower_for(platform, f, x, q)


@pytest.mark.parametrize("platform", ["cuda", "tpu"])
def test_kernel_lowers_for_gpu_and_tpu(platform):
    # The real Triton / Mosaic lowering runs on CPU and rejects what hardware would reject.
    w = jax.random.normal(jax.random.key(11), (1024, 256))
    x = jnp.ones((16, 1024), jnp.bfloat16)
    for bits, sym in ((4, True), (4, False), (8, True)):
        q = quant.quantize(w, bits=bits, group_size=128, symmetric=sym)
        text = _lower(platform, x, q).as_text()
        assert ("tpu_custom_call" in text) if platform == "tpu" else ("triton" in text.lower()
                                                                       or "mosaic" in text.lower())
