"""quantized_matmul: the Pallas kernel (interpret mode on CPU) against its jnp reference.

The op takes plain arrays (packed data, scales, zero points) and static layout ints; operands are
fresh random weights in that layout (``shapes.random_operands``), never zeros.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.kernels._lowering import lower_for
from tests.kernels._seeds import seed_for

from pallas_kernels import _common
from pallas_kernels.quantized_matmul import (BlockSizes, dequantize, levels, quantized_matmul,
                                             quantized_matmul_reference)
from pallas_kernels.quantized_matmul.ops import _Config, _pallas_forward
from pallas_kernels.quantized_matmul.shapes import CI_SHAPES, random_operands, random_weight

# Per-dtype relative tolerance of one product/accumulation step; the bound on |kernel - ref| is
# tol * sqrt(K) * (|x| @ |w|): both sides accumulate in fp32 in a different order, and the
# integer weights are exact in bf16, so only accumulation order and the final cast differ.
_TOL = {jnp.float32: 2e-7, jnp.bfloat16: 8e-3}  # bf16: one rounding of the output (2^-8) x 2


def _case(name, shape, dtype=jnp.float32):
    return random_operands(jax.random.key(seed_for(name)), shape, dtype)


def _assert_close(y, ref, x, w, dtype):
    mag = np.abs(np.asarray(x, np.float32)) @ np.abs(np.asarray(w, np.float32))
    bound = _TOL[dtype] * np.sqrt(w.shape[0]) * mag + 1e-6
    err = np.abs(np.asarray(y, np.float32) - np.asarray(ref, np.float32))
    assert np.all(err <= bound), float((err / bound).max())


@pytest.mark.parametrize("shape", CI_SHAPES, ids=lambda s: s.name)
def test_kernel_matches_reference_f32(shape):
    x, data, scales, zeros, layout = _case(shape.name, shape)
    y = quantized_matmul(x, data, scales, zeros, **layout, implementation="pallas")
    assert y.shape == (shape.m, shape.n) and y.dtype == jnp.float32
    ref = quantized_matmul_reference(x, data, scales, zeros, **layout)
    _assert_close(y, ref, x, dequantize(data, scales, zeros, **layout), jnp.float32)


@pytest.mark.parametrize("shape", CI_SHAPES[:2], ids=lambda s: s.name)
def test_kernel_matches_reference_bf16(shape):
    x, data, scales, zeros, layout = _case(shape.name + "/bf16", shape, jnp.bfloat16)
    y = quantized_matmul(x, data, scales, zeros, **layout, implementation="pallas")
    assert y.dtype == jnp.bfloat16
    ref = quantized_matmul_reference(x, data, scales, zeros, **layout)
    _assert_close(y, ref, x, dequantize(data, scales, zeros, **layout), jnp.bfloat16)


@pytest.mark.parametrize("bits, group, symmetric", [(8, 256, True), (4, 64, True),
                                                    (4, 32, False), (8, 32, True)])
def test_int8_activations_exact_against_integer_numpy(bits, group, symmetric):
    name = f"int8_act/{bits}/{group}/{symmetric}"
    kx, kw = jax.random.split(jax.random.key(seed_for(name)))
    k, n, m = 256, 128, 9
    # integer activations with a 127 in every row quantize to themselves with scale 1
    x = jax.random.randint(kx, (m, k), -127, 128).at[:, 3].set(127).astype(jnp.float32)
    data, scales, zeros, layout = random_weight(kw, k, n, bits=bits, group_size=group,
                                                symmetric=symmetric)
    scales = jnp.ones_like(scales)  # isolate the integer path
    want = np.asarray(x, np.int64) @ np.asarray(levels(data, zeros, **layout), np.int64)
    for impl in ("pallas", "xla"):
        y = quantized_matmul(x, data, scales, zeros, **layout, implementation=impl,
                             activation_bits=8)
        np.testing.assert_array_equal(np.asarray(y, np.int64), want)


def test_split_k_equals_single_pass():
    x, data, scales, zeros, layout = _case("split_k", CI_SHAPES[-1])
    one = quantized_matmul(x, data, scales, zeros, **layout, implementation="pallas")
    two = quantized_matmul(x, data, scales, zeros, **layout, implementation="pallas",
                           block_sizes=BlockSizes(block_m=16, block_n=128, block_k=128, split_k=2))
    _assert_close(two, one, x, dequantize(data, scales, zeros, **layout), jnp.float32)


def test_vmap_over_batch_of_x():
    x, data, scales, zeros, layout = _case("vmap", CI_SHAPES[0])
    xb = jnp.stack([x, 2.0 * x + 1.0, -x])
    f = jax.jit(lambda x: quantized_matmul(x, data, scales, zeros, **layout,
                                           implementation="pallas"))
    yb = jax.vmap(f)(xb)
    w = dequantize(data, scales, zeros, **layout)
    for i in range(3):
        ref = quantized_matmul_reference(xb[i], data, scales, zeros, **layout)
        _assert_close(yb[i], ref, xb[i], w, jnp.float32)


def test_pallas_call_is_on_the_path():
    x, data, scales, zeros, layout = _case("jaxpr", CI_SHAPES[0])
    jaxpr = str(jax.make_jaxpr(lambda x: quantized_matmul(
        x, data, scales, zeros, **layout, implementation="pallas"))(x))
    assert "pallas_call" in jaxpr and "quantized_matmul" in jaxpr
    xla = str(jax.make_jaxpr(lambda x: quantized_matmul(
        x, data, scales, zeros, **layout, implementation="xla"))(x))
    assert "pallas_call" not in xla


def test_gradient_wrt_x_and_scales_matches_reference_vjp():
    x, data, scales, zeros, layout = _case("grad", CI_SHAPES[1])   # asymmetric int4, g32
    dy = jax.random.normal(jax.random.key(seed_for("grad/dy")), (x.shape[0], scales.shape[1]))
    _, vjp_ref = jax.vjp(lambda x, s: quantized_matmul_reference(x, data, s, zeros, **layout),
                         x, scales)
    _, vjp_ker = jax.vjp(lambda x, s: quantized_matmul(x, data, s, zeros, **layout,
                                                       implementation="pallas"), x, scales)
    for got, want in zip(vjp_ker(dy), vjp_ref(dy)):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-5)
    g = jax.grad(lambda x: jnp.sum(quantized_matmul(x, data, scales, zeros, **layout,
                                                    implementation="pallas") ** 2))(x)
    assert g.shape == x.shape and bool(jnp.all(jnp.isfinite(g)))
    # the weight-only XLA path is the plain reference: forward-mode works too
    _, t = jax.jvp(lambda x: quantized_matmul(x, data, scales, zeros, **layout,
                                              implementation="xla"), (x,), (x,))
    assert t.shape == (x.shape[0], scales.shape[1])


def test_int8_activation_gradient_is_straight_through_on_both_paths():
    x, data, scales, zeros, layout = _case("ste", CI_SHAPES[0])
    dy = jax.random.normal(jax.random.key(seed_for("ste/dy")), (x.shape[0], scales.shape[1]))
    want = dy @ dequantize(data, scales, zeros, **layout).T
    for impl in ("xla", "pallas"):
        _, vjp = jax.vjp(lambda x: quantized_matmul(x, data, scales, zeros, **layout,
                                                    activation_bits=8, implementation=impl), x)
        np.testing.assert_allclose(np.asarray(vjp(dy)[0]), np.asarray(want), rtol=1e-5,
                                   atol=1e-5)


def test_auto_on_cpu_falls_back_and_says_so():
    x, data, scales, zeros, layout = _case("auto", CI_SHAPES[0])
    with pytest.warns(UserWarning, match="XLA path"):
        y = quantized_matmul(x, data, scales, zeros, **layout)  # auto
    ref = quantized_matmul_reference(x, data, scales, zeros, **layout)
    np.testing.assert_array_equal(np.asarray(y), np.asarray(ref))


def test_explicit_pallas_raises_where_the_compiled_kernel_cannot_run(monkeypatch):
    x, data, scales, zeros, layout = _case("raise", CI_SHAPES[2])   # per-channel, K = 384
    monkeypatch.setattr(_common, "platform", lambda: "cuda")
    with pytest.raises(ValueError, match=r"quantized_matmul\(implementation='pallas'\) cannot "
                                         r"run here: Triton needs power-of-two K"):
        quantized_matmul(x, data, scales, zeros, **layout, implementation="pallas")
    with pytest.warns(UserWarning, match="XLA path: Triton needs power-of-two K"):
        quantized_matmul(x, data, scales, zeros, **layout, implementation="auto")


def test_bad_inputs():
    x, data, scales, zeros, layout = _case("bad", CI_SHAPES[0])   # int4 g128, K = 256
    with pytest.raises(ValueError, match="implementation"):
        quantized_matmul(x, data, scales, **layout, implementation="cuda")
    with pytest.raises(ValueError, match=r"\[..., K=256\]"):
        quantized_matmul(x[:, :100], data, scales, **layout)
    with pytest.raises(TypeError, match="floating"):
        quantized_matmul(x.astype(jnp.int32), data, scales, **layout)
    with pytest.raises(TypeError, match="data must be uint8"):
        quantized_matmul(x, data.astype(jnp.int8), scales, **layout)
    with pytest.raises(ValueError, match="scales"):
        quantized_matmul(x, data, scales[:1], **layout)
    with pytest.raises(ValueError, match="zeros"):
        quantized_matmul(x, data, scales, scales.astype(jnp.uint8)[:, :3], **layout)
    with pytest.raises(ValueError, match="group_size"):
        quantized_matmul(x, data, scales, bits=4, group_size=100)
    with pytest.raises(ValueError, match="bits"):
        quantized_matmul(x, data, scales, bits=5, group_size=128)
    with pytest.raises(ValueError, match="pack_rows"):
        quantized_matmul(x, data, scales, bits=4, group_size=128, pack_rows=3)
    with pytest.raises(ValueError, match="activation_bits"):
        quantized_matmul(x, data, scales, **layout, activation_bits=4)
    x8, d8, s8, z8, l8 = _case("bad8", CI_SHAPES[4])   # asymmetric int8
    with pytest.raises(ValueError, match="activation_bits=8 needs symmetric"):
        quantized_matmul(x8, d8, s8, z8, **l8, activation_bits=8)


def _lower(platform, x, data, scales, zeros, layout):
    cfg = _Config(**layout, activation_bits=None, out_dtype="bfloat16", implementation="pallas",
                  block_sizes=BlockSizes(16, 128, 512, 1), interpret=False, platform=platform)
    return lower_for(platform, lambda *a: _pallas_forward(*a, cfg), x, data, scales, zeros)


@pytest.mark.parametrize("platform", ["cuda", "tpu"])
def test_kernel_lowers_for_gpu_and_tpu(platform):
    # The real Triton / Mosaic lowering runs on CPU and rejects what hardware would reject.
    x = jnp.ones((16, 1024), jnp.bfloat16)
    for bits, sym in ((4, True), (4, False), (8, True)):
        key = jax.random.key(seed_for(f"lower/{platform}/{bits}/{sym}"))
        data, scales, zeros, layout = random_weight(key, 1024, 256, bits=bits, group_size=128,
                                                    symmetric=sym, scale_dtype=jnp.bfloat16)
        text = _lower(platform, x, data, scales, zeros, layout).as_text()
        assert ("tpu_custom_call" in text) if platform == "tpu" else ("triton" in text.lower()
                                                                       or "mosaic" in text.lower())
