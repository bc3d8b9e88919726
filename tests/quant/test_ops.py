import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxpapers import quant


def test_int8_activation_path_is_exact_integer_arithmetic(key):
    kx, kw = jax.random.split(key)
    # integer activations with row max 127 quantize to themselves with scale exactly 1
    x = jax.random.randint(kx, (6, 128), -127, 128).at[:, 0].set(127).astype(jnp.float32)
    w = jax.random.normal(kw, (128, 32))
    q = quant.quantize(w, bits=4, group_size=32)
    q = q.replace(scales=jnp.ones_like(q.scales, jnp.float32))
    y = quant.qdot(x, q, activation_bits=8)
    lv = np.asarray(quant.levels(q), np.int64)
    np.testing.assert_array_equal(np.asarray(y, np.float64), np.asarray(x, np.int64) @ lv)


def test_weight_only_qdot_matches_dequantized_float64(key, x64):
    kx, kw = jax.random.split(key)
    x = jax.random.normal(kx, (7, 256), jnp.float32)
    q = quant.quantize(jax.random.normal(kw, (256, 64), jnp.float32), bits=4, group_size=64)
    want = np.asarray(x, np.float64) @ np.asarray(quant.dequantize(q, jnp.float64))
    got = np.asarray(quant.qdot(x, q), np.float64)
    # fp32 accumulation of K=256 products of O(1) terms: |err| <~ K * eps32 * max|x w|
    np.testing.assert_allclose(got, want, atol=256 * 1.2e-7 * 4, rtol=0)


class MLP(nn.Module):
    """The same model code runs with float or quantized kernels (jaxpapers.quant.dense).

    Kernels are declared with ``self.variable("params", ...)``: ``self.param`` compares the stored
    leaf's shape with the initializer's, which a packed int4 array ([K/2, N]) cannot pass.
    """

    @nn.compact
    def __call__(self, x):
        for i, width in enumerate((256, 256, 10)):
            shape = (x.shape[-1], width)
            k = self.variable("params", f"kernel_{i}", lambda s=shape: nn.initializers.lecun_normal()(
                self.make_rng("params"), s)).value
            b = self.param(f"bias_{i}", nn.initializers.zeros, (width,))
            x = quant.dense(x, k, b)
            if i < 2:
                x = nn.relu(x)
        return x


def test_quantized_mlp_within_bound_and_smaller(key):
    kx, kp = jax.random.split(key)
    model = MLP()
    x = jax.random.normal(kx, (32, 128))
    params = model.init(kp, x)
    rule = quant.QuantRule(pattern=r"kernel", bits=4, group_size=128, min_size=1024)
    qparams = quant.quantize_params(params, rule)
    kinds = jax.tree.leaves(qparams, is_leaf=lambda v: isinstance(v, quant.QuantizedArray))
    assert sum(isinstance(v, quant.QuantizedArray) for v in kinds) == 3  # kernels only, not biases
    y = model.apply(params, x)
    yq = jax.jit(model.apply)(qparams, x)
    # First layer: |x (W - W^)| <= sum_k |x_k| s_{g(k), n} / 2 exactly (documented bound).
    w0 = params["params"]["kernel_0"]
    q0 = qparams["params"]["kernel_0"]
    s = jnp.repeat(q0.scales.astype(jnp.float32), q0.group_size, axis=0)
    bound = jnp.abs(x) @ (s / 2)
    err0 = jnp.abs(x @ w0 - quant.qdot(x, q0))
    assert bool(jnp.all(err0 <= bound * (1 + 1e-4) + 1e-5))
    # Whole model: W4 g128 on lecun-normal weights; relative output error measured ~0.1.
    rel = float(jnp.linalg.norm(yq - y) / jnp.linalg.norm(y))
    assert rel < 0.2
    assert quant.tree_nbytes(params) / quant.tree_nbytes(qparams) > 3.0
    # dequantize_params gives plain arrays on which the float path reproduces yq closely
    yd = model.apply(quant.dequantize_params(qparams), x)
    np.testing.assert_allclose(np.asarray(yd), np.asarray(yq), rtol=1e-4, atol=1e-4)


def test_qwix_parity_same_dequantized_values(key):
    qwix_qarray = pytest.importorskip("qwix._src.core.qarray")
    w = jax.random.normal(key, (256, 64))
    for bits, qtype in ((8, jnp.int8), (4, jnp.int4)):
        q = quant.quantize(w, bits=bits, group_size=64)
        scale = jnp.repeat(q.scales, 1, axis=0)  # [G, N]
        # qwix with identical scales (its own absmax uses qmax + 0.5; the scheme is fixed here)
        qa = qwix_qarray.quantize_with_scale_zero_point(
            w.reshape(4, 64, 64), qtype, scale[:, None, :], None)
        theirs = np.asarray(qwix_qarray.dequantize(qa)).reshape(256, 64)
        np.testing.assert_allclose(np.asarray(quant.dequantize(q)), theirs, rtol=0, atol=1e-6)


def test_matmul_routes_a_quantized_array_to_the_one_kernel_op(key):
    """qdot is the "xla" path of pallas_kernels.quantized_matmul; "pallas" runs its kernel
    (interpret mode on CPU) on the QuantizedArray's plain arrays."""
    from pallas_kernels.quantized_matmul import quantized_matmul_reference

    kx, kw = jax.random.split(key)
    x = jax.random.normal(kx, (5, 256))
    q = quant.quantize(jax.random.normal(kw, (256, 128)), bits=4, group_size=64, symmetric=False)
    ref = quantized_matmul_reference(x, q.data, q.scales, q.zeros, bits=4, group_size=64,
                                     pack_rows=q.pack_rows)
    np.testing.assert_array_equal(np.asarray(quant.qdot(x, q)), np.asarray(ref))
    np.testing.assert_array_equal(np.asarray(quant.matmul(x, q)), np.asarray(ref))
    y = quant.dense(x, q, implementation="pallas")
    mag = np.abs(np.asarray(x)) @ np.abs(np.asarray(quant.dequantize(q, jnp.float32)))
    assert np.all(np.abs(np.asarray(y) - np.asarray(ref)) <= 2e-7 * np.sqrt(256) * mag + 1e-6)
    with pytest.warns(UserWarning, match="XLA path"):      # "auto" on CPU says it falls back
        np.testing.assert_array_equal(np.asarray(quant.matmul(x, q, implementation="auto")),
                                      np.asarray(ref))
    with pytest.raises(ValueError, match="implementation"):
        quant.matmul(x, q, implementation="jnp")
    with pytest.raises(ValueError, match="implementation"):
        quant.matmul(x, jnp.ones((256, 3)), implementation="cuda")   # checked for float w too
    with pytest.raises(TypeError, match="QuantizedArray"):
        quant.qdot(x, jnp.ones((256, 3)))


def test_layout_helpers_are_the_kernel_folders(key):
    """One definition of the layout numerics: jaxpapers.quant re-exports the kernel folder's."""
    from pallas_kernels.quantized_matmul import reference as R

    assert quant.pack_int4 is R.pack_int4 and quant.unpack_int4 is R.unpack_int4
    assert quant.quantize_activations is R.quantize_activations
    assert quant.SUPPORTED_BITS == R.SUPPORTED_BITS
    q = quant.quantize(jax.random.normal(key, (64, 8)), bits=3, group_size=16, symmetric=False)
    np.testing.assert_array_equal(quant.levels(q), R.levels(q.data, q.zeros, bits=3,
                                                            group_size=16))
