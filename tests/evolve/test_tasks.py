"""Task inputs are deterministic and the references equal float64 numpy computations."""

import dataclasses

import numpy as np
import pytest

from jaxpapers.evolve import tasks
from pallas_kernels.binary_hash_attention.shapes import AttentionShape
from pallas_kernels.quantized_matmul.shapes import Shape


def _np_dequant_int4(data, scales, group):
    k2, n = data.shape
    k = 2 * k2
    p = min(group, 128)
    w = np.zeros((k, n))
    for t in range(k // p):
        for i in range(p // 2):
            byte = data[t * p // 2 + i].astype(np.int64)
            w[t * p + i] = (byte & 0xF) - 8
            w[t * p + p // 2 + i] = (byte >> 4) - 8
    return w * np.repeat(scales.astype(np.float64), group, axis=0)


def _np_attention(q, k, v, idx, valid, length, page):
    b, hq, d = q.shape
    hk = k.shape[1]
    out = np.zeros((b, hq, d))
    for bi in range(b):
        for h in range(hq):
            kh = h // (hq // hk)
            rows = [t for j in range(idx.shape[2]) if valid[bi, kh, j]
                    for t in range(idx[bi, kh, j] * page, (idx[bi, kh, j] + 1) * page)
                    if t < min(length[bi], k.shape[2])]
            if not rows:
                continue
            s = k[bi, kh, rows].astype(np.float64) @ q[bi, h] / np.sqrt(d)
            w = np.exp(s - s.max())
            out[bi, h] = (w / w.sum()) @ v[bi, kh, rows]
    return out


@pytest.mark.parametrize("name", sorted(tasks.TASKS))
def test_inputs_are_deterministic_per_seed_and_differ_across_seeds(name):
    t = tasks.TASKS[name]
    s = t.seen_shapes[0]
    a, b, c = (tasks.make_inputs(name, s, seed) for seed in (0, 0, 1))
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert not np.array_equal(a[0], c[0])
    assert tasks.shape_seed(name, s, 0) != tasks.shape_seed(name, s, 1)


@pytest.mark.parametrize("shape", tasks.TASKS["quantized_matmul"].seen_shapes
                         + tasks.TASKS["quantized_matmul"].holdout_shapes, ids=lambda s: s.name)
def test_matmul_reference_is_x_times_the_dequantized_weight(shape):
    x, data, scales = tasks.make_inputs("quantized_matmul", shape, 3)
    want = x.astype(np.float64) @ _np_dequant_int4(data, scales, shape.group)
    got = tasks.reference_output("quantized_matmul", shape, (x, data, scales))
    assert got.shape == (shape.m, shape.n) and got.dtype == np.float32
    err = np.abs(got - want).max() / max(1.0, np.abs(want).max())
    assert err <= tasks.tolerance("quantized_matmul", shape)


@pytest.mark.parametrize("shape", tasks.TASKS["sparse_decode_attention"].seen_shapes
                         + tasks.TASKS["sparse_decode_attention"].holdout_shapes,
                         ids=lambda s: s.name)
def test_attention_reference_matches_a_numpy_loop(shape):
    ins = tasks.make_inputs("sparse_decode_attention", shape, 2)
    q, k, v, idx, valid, length = ins
    assert idx.dtype == np.int32 and valid.dtype == bool and length.dtype == np.int32
    assert 0.5 < valid.mean() < 1.0 and (length >= shape.length // 2).all()
    want = _np_attention(*ins, shape.page_size)
    got = tasks.reference_output("sparse_decode_attention", shape, ins)
    assert got.shape == (shape.b, shape.hq, shape.d)
    assert np.abs(got - want).max() <= tasks.tolerance("sparse_decode_attention", shape)


def test_heldout_shapes_differ_from_seen_ones_and_names_are_unique():
    for t in tasks.TASKS.values():
        names = [s.name for s in t.seen_shapes + t.holdout_shapes + t.gpu_shapes]
        assert len(set(names)) == len(names)
        seen = {dataclasses.replace(s, name="") for s in t.seen_shapes}
        assert all(dataclasses.replace(s, name="") not in seen for s in t.holdout_shapes)


def test_bad_tasks_and_shapes_raise_naming_them():
    with pytest.raises(ValueError, match="task"):
        tasks.get_task("conv2d")
    with pytest.raises(ValueError, match="int4"):
        tasks.make_inputs("quantized_matmul", Shape("w8", 4, 128, 128, 8, 64), 0)
    with pytest.raises(TypeError, match="shape"):
        tasks.make_inputs("quantized_matmul", AttentionShape("a", 1, 2, 1, 64, 32, 4), 0)
    with pytest.raises(ValueError, match="Hq"):
        tasks.make_inputs("sparse_decode_attention", AttentionShape("a", 1, 3, 2, 64, 32, 4), 0)


def test_gpu_tolerance_allows_tf32_and_cpu_scales_with_sqrt_n():
    s1, s2 = tasks.TASKS["quantized_matmul"].seen_shapes[0], \
        tasks.TASKS["quantized_matmul"].holdout_shapes[0]
    assert tasks.tolerance("quantized_matmul", s2) > tasks.tolerance("quantized_matmul", s1)
    assert tasks.tolerance("quantized_matmul", s1, platform="cuda") == 2e-2
