"""The roofline proxy reads exported cuda programs exactly: hand-counted bytes, flops, programs."""

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import export
from jax.experimental import pallas as pl

from jaxpapers.evolve import cost
from pallas_kernels._common import compiler_params

TRITON = export.DisabledSafetyCheck.custom_call("__gpu$xla.gpu.triton")


def _cuda_export(fn, *avals):
    return export.export(jax.jit(fn), platforms=("cuda",), disabled_checks=[TRITON])(*avals)


def _copy_kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...] * 2.0


def _copy(x):
    return pl.pallas_call(
        _copy_kernel, grid=(x.shape[0] // 8,),
        in_specs=[pl.BlockSpec((8, 128), lambda i: (i, 0))],
        out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)),
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        compiler_params=compiler_params("cuda", ("parallel",)))(x)


def _loop_kernel(a_ref, b_ref, o_ref, *, trips):
    def body(i, acc):
        a = a_ref[:, pl.ds(i * 32, 32)]
        b = b_ref[pl.ds(i * 32, 32), :]
        return acc + jnp.dot(a, b, preferred_element_type=jnp.float32)
    o_ref[...] = jax.lax.fori_loop(0, trips, body, jnp.zeros(o_ref.shape, jnp.float32))


def _loop_matmul(a, b):
    trips = a.shape[1] // 32
    return pl.pallas_call(
        functools.partial(_loop_kernel, trips=trips), grid=(a.shape[0] // 16, b.shape[1] // 64),
        in_specs=[pl.BlockSpec((16, a.shape[1]), lambda i, j: (i, 0)),
                  pl.BlockSpec((b.shape[0], 64), lambda i, j: (0, j))],
        out_specs=pl.BlockSpec((16, 64), lambda i, j: (i, j)),
        out_shape=jax.ShapeDtypeStruct((a.shape[0], b.shape[1]), jnp.float32),
        compiler_params=compiler_params("cuda", ("parallel", "parallel")))(a, b)


def test_copy_kernel_bytes_and_programs():
    exp = _cuda_export(_copy, jax.ShapeDtypeStruct((64, 128), jnp.float32))
    c = cost.analyze_module(exp.mlir_module())
    assert len(c.kernels) == 1
    k = c.kernels[0]
    assert k.programs == 8
    assert k.bytes_per_program == 2 * 8 * 128 * 4        # one block loaded, one stored
    assert k.flops_per_program == 0 and k.dynamic_loops == 0
    assert c.xla_bytes == 0 and c.xla_flops == 0


def test_fori_loop_trip_counts_multiply_loads_and_dots():
    a = jax.ShapeDtypeStruct((32, 96), jnp.float32)
    b = jax.ShapeDtypeStruct((96, 128), jnp.float32)
    c = cost.analyze_module(_cuda_export(_loop_matmul, a, b).mlir_module())
    (k,) = c.kernels
    assert k.programs == 2 * 2
    assert k.dynamic_loops == 0
    trips = 3
    assert k.flops_per_program == trips * 2 * 16 * 32 * 64
    assert k.bytes_per_program == trips * (16 * 32 + 32 * 64) * 4 + 16 * 64 * 4
    assert k.dot_dtype == "f32"


def test_seconds_formula_with_a_partial_wave():
    hw = cost.Hardware(hbm_bytes_per_s=1e12, sms=4, flops_tf32=1e12, launch_s=1e-6)
    k = cost.KernelCost("k", programs=6, bytes_per_program=1e6, flops_per_program=2e6,
                        dot_dtype="f32", dynamic_loops=0)
    body = max(6 * 1e6 / 1e12, 6 * 2e6 / 1e12)
    assert k.seconds(hw) == pytest.approx(1e-6 + body * math.ceil(6 / 4) * 4 / 6)
    p = cost.ProgramCost((k, k), xla_bytes=3e6, xla_flops=0.0, dynamic_loops=0)
    assert p.seconds(hw) == pytest.approx(2 * k.seconds(hw) + 3e6 / 1e12 + 1e-6)
    assert hw.peak("bf16") == hw.flops_bf16 and hw.peak("i8") == hw.flops_int8


def test_xla_dot_counts_operands_result_and_flops():
    def f(x, w):
        return jnp.dot(x, w, precision="highest") + 1.0   # the add is fused: free
    exp = _cuda_export(f, jax.ShapeDtypeStruct((8, 256), jnp.float32),
                       jax.ShapeDtypeStruct((256, 64), jnp.float32))
    c = cost.analyze_module(exp.mlir_module())
    assert c.kernels == ()
    assert c.xla_flops == 2 * 8 * 64 * 256
    assert c.xla_bytes == (8 * 256 + 256 * 64 + 8 * 64) * 4


def test_exported_cost_needs_a_cuda_program_and_text():
    exp = export.export(jax.jit(lambda x: x * 2), platforms=("cpu",))(
        jax.ShapeDtypeStruct((4,), jnp.float32))
    with pytest.raises(ValueError, match="exported"):
        cost.exported_cost(exp)
    with pytest.raises(ValueError, match="mlir_text"):
        cost.analyze_module("not mlir {")
    with pytest.raises(TypeError, match="mlir_text"):
        cost.analyze_module(b"bytes")


def test_bigger_blocks_mean_fewer_programs_same_total_bytes_for_copy():
    x = jax.ShapeDtypeStruct((512, 128), jnp.float32)
    c = cost.analyze_module(_cuda_export(_copy, x).mlir_module())
    (k,) = c.kernels
    total = k.programs * k.bytes_per_program
    assert total == 2 * 512 * 128 * 4
    assert np.isfinite(c.seconds())
