"""binary_hash_attention: BinaryPC score and sparse-decode kernels (interpret mode on CPU)."""


import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.kernels._lowering import lower_for
from tests.kernels._seeds import seed_for

from pallas_kernels.binary_hash_attention import (AttentionBlockSizes, ScoreBlockSizes,
                                                  entry_limits, hash_scores,
                                                  hash_scores_reference, pack_codes,
                                                  quantize_probe, sparse_decode_attention,
                                                  sparse_decode_attention_reference,
                                                  unpack_codes)
from pallas_kernels import _common
from pallas_kernels.binary_hash_attention import kernel as K
from pallas_kernels.binary_hash_attention.shapes import (CI_ATTENTION_SHAPES, CI_SCORE_SHAPES,
                                                         GPU_SHAPES)

# Attention tolerance: |kernel - ref| <= _TOL[dtype] * sqrt(n) * max|v| + _ULP[dtype] * |ref|.
# The output is a convex combination of rows of v (so max|v| bounds its size), reached through
# two reductions: the logits' dot over D and the weighted sum over the attended tokens; their
# rounding errors are independent, so they add in variance: n = D + tokens (a random walk of
# sqrt(n) steps). Per step, f32: kernel and reference differ only in summation order and in the
# online softmax's rescaling (a few ulps of 2^-23); bf16: q, k, v are the same bf16 values, but
# the kernel feeds bf16 probabilities to the P @ V dot (2^-9 relative each) as jax's paged
# attention does. _ULP: both outputs are rounded to the output dtype from slightly different f32
# values, so they may be one ulp apart (at most 2^-7 |x| in bf16). Measured worst cases on the CI
# shapes: 2.1e-7 sqrt(n) (f32) and 1 bf16 ulp; the scores are integers and compared exactly.
_TOL = {jnp.float32: 2e-7, jnp.bfloat16: 2e-3}
_ULP = {jnp.float32: 2.0 ** -23, jnp.bfloat16: 2.0 ** -7}


# ----------------------------------------------------------------------------- helpers


def _score_case(seed, s):
    ku, kp, ks, kl = jax.random.split(jax.random.key(seed), 4)
    u = jnp.where(jax.random.bernoulli(ku, 0.5, (s.b, s.hk, s.length, s.num_bits)), 1, -1)
    probe = jax.random.randint(kp, (s.b, s.hq, s.num_bits), -127, 128).astype(jnp.int8)
    scale = jax.random.uniform(ks, (s.b, s.hq), minval=0.01, maxval=2.0)
    length = jax.random.randint(kl, (s.b,), 1, s.length + 1).at[0].set(s.length)
    return u, pack_codes(u), probe, scale, length


def _attention_case(seed, s, dtype=jnp.float32):
    kq, kk, kv, ki, kval, kl = jax.random.split(jax.random.key(seed), 6)
    q = jax.random.normal(kq, (s.b, s.hq, s.d)).astype(dtype)
    k = (2.0 * jax.random.normal(kk, (s.b, s.hk, s.length, s.d))).astype(dtype)
    v = jax.random.normal(kv, (s.b, s.hk, s.length, s.d)).astype(dtype)
    num_pages = -(-s.length // s.page_size)
    idx = jax.random.randint(ki, (s.b, s.hk, s.k), 0, num_pages)
    valid = jax.random.bernoulli(kval, 0.8, (s.b, s.hk, s.k))
    # ragged: batch 0 uses the whole cache, the others end somewhere inside it
    length = jax.random.randint(kl, (s.b,), s.length // 2, s.length + 1).at[0].set(s.length)
    return q, k, v, idx, valid, length


def _numpy_attention(q, k, v, idx, valid, length, page_size, sm_scale):
    """A loop-by-loop float64 definition, independent of the jnp reference."""
    q, k, v = (np.asarray(a, np.float64) for a in (q, k, v))
    idx, valid, length = np.asarray(idx), np.asarray(valid), np.asarray(length)
    b, hq, d = q.shape
    hk, l = k.shape[1], k.shape[2]
    out = np.zeros((b, hq, d))
    for bi in range(b):
        for h in range(hq):
            kh = h // (hq // hk)
            toks = [t for p, ok in zip(idx[bi, kh], valid[bi, kh]) if ok
                    for t in range(p * page_size, (p + 1) * page_size)
                    if t < min(l, length[bi])]
            if not toks:
                continue
            s = k[bi, kh, toks] @ q[bi, h] * sm_scale
            w = np.exp(s - s.max())
            out[bi, h] = w @ v[bi, kh, toks] / w.sum()
    return out


def _reduction_length(s):
    """D plus the tokens attended per head (K entries of page_size tokens)."""
    return s.d + s.k * s.page_size


def _close(y, ref, dtype, v, n):
    """Kernel output ``y`` vs ``ref`` within the per-dtype bound above (values ``v``, length n)."""
    ref = np.asarray(ref, np.float32)
    vmax = float(np.abs(np.asarray(v, np.float32)).max())
    bound = _TOL[dtype] * np.sqrt(n) * vmax + _ULP[dtype] * np.abs(ref)
    err = np.abs(np.asarray(y, np.float32) - ref)
    assert np.all(err <= bound), f"max err / bound = {float((err / bound).max())}"


# ----------------------------------------------------------------------------- formats / scores


def test_pack_unpack_round_trip_and_bit_order():
    u = jnp.where(jax.random.bernoulli(jax.random.key(1), 0.5, (3, 5, 96)), 1, -1)
    codes = pack_codes(u)
    assert codes.dtype == jnp.uint32 and codes.shape == (3, 5, 3)
    np.testing.assert_array_equal(np.asarray(unpack_codes(codes)), np.asarray(u))
    one = jnp.full((64,), -1).at[33].set(1)                 # bit 1 of word 1
    np.testing.assert_array_equal(np.asarray(pack_codes(one)), [0, 2])
    with pytest.raises(ValueError, match="num_bits"):
        pack_codes(jnp.ones((4, 48)))


def test_quantize_probe_bound():
    p = jax.random.normal(jax.random.key(2), (3, 64)) * 5
    qp, scale = quantize_probe(p)
    assert qp.dtype == jnp.int8 and int(jnp.max(jnp.abs(qp.astype(jnp.int32)))) == 127
    assert scale.dtype == jnp.float32
    err = np.abs(np.asarray(qp, np.float32) * np.asarray(scale)[:, None] - np.asarray(p))
    assert np.all(err <= np.asarray(scale)[:, None] / 2 + 1e-6)
    q4, s4 = quantize_probe(p, 4)                       # 4 magnitude bits: [-15, 15]
    assert int(jnp.max(jnp.abs(q4.astype(jnp.int32)))) == 15
    np.testing.assert_allclose(np.asarray(s4), np.asarray(scale) * 127 / 15, rtol=1e-6)
    zq, zs = quantize_probe(jnp.zeros((2, 32)))         # all-zero rows: scale 1, levels 0
    assert not np.asarray(zq).any() and np.all(np.asarray(zs) == 1.0)
    with pytest.raises(ValueError, match="probe_bits"):
        quantize_probe(p, 8)                            # 255 levels do not fit int8


def test_unpack_codes_dtype():
    codes = pack_codes(jnp.where(jax.random.bernoulli(jax.random.key(3), 0.5, (4, 64)), 1, -1))
    assert unpack_codes(codes).dtype == jnp.int8
    f = unpack_codes(codes, jnp.float32)
    assert f.dtype == jnp.float32 and set(np.unique(np.asarray(f))) == {-1.0, 1.0}


@pytest.mark.parametrize("shape", CI_SCORE_SHAPES, ids=lambda s: s.name)
def test_scores_kernel_equals_integer_definition(shape):
    u, codes, probe, scale, length = _score_case(seed_for(shape.name), shape)
    # integer definition in int64 numpy: sum_b u_b * probe_b, then one float32 multiply
    g = shape.hq // shape.hk
    ui = np.asarray(u, np.int64)
    pi = np.asarray(probe, np.int64).reshape(shape.b, shape.hk, g, shape.num_bits)
    s_int = np.einsum("bhln,bhgn->bhgl", ui, pi)
    want = s_int.astype(np.float32) * np.asarray(scale, np.float32).reshape(
        shape.b, shape.hk, g, 1)
    live = np.arange(shape.length)[None, None, None] < np.asarray(length)[:, None, None, None]
    want = np.where(live, want, -np.inf).astype(np.float32)
    for reduce, expect in (("max", want.max(axis=2)), (None, want.reshape(shape.b, shape.hq, -1))):
        ref = hash_scores_reference(codes, probe, scale, length, group_reduce=reduce)
        ker = hash_scores(codes, probe, scale, length, group_reduce=reduce,
                          implementation="pallas")
        assert ker.dtype == jnp.float32 and ker.shape == expect.shape
        np.testing.assert_array_equal(np.asarray(ref), expect)   # exact: integers, one multiply
        np.testing.assert_array_equal(np.asarray(ker), expect)


def test_scores_small_block_many_programs():
    s = CI_SCORE_SHAPES[0]
    _, codes, probe, scale, length = _score_case(5, s)
    ker = hash_scores(codes, probe, scale, length, implementation="pallas",
                      block_sizes=ScoreBlockSizes(block_l=128))
    np.testing.assert_array_equal(np.asarray(ker),
                                  np.asarray(hash_scores_reference(codes, probe, scale, length)))


def test_scores_approximate_the_float_inner_product():
    # score = q . (U V)^T exactly before quantisation, within the 7-bit bound after
    kq, kv, ku = jax.random.split(jax.random.key(6), 3)
    nb, d, l = 64, 32, 100
    vmat = jax.random.normal(kv, (nb, d))
    u = jnp.where(jax.random.bernoulli(ku, 0.5, (1, 1, l, nb)), 1, -1)
    q = jax.random.normal(kq, (1, 2, d))
    exact = jnp.einsum("bgd,ld->bgl", q, u[0, 0].astype(jnp.float32) @ vmat)
    probe, scale = quantize_probe(q @ vmat.T)
    s = hash_scores(pack_codes(u), probe, scale, jnp.array([l]), group_reduce=None,
                    implementation="pallas")
    bound = nb * np.asarray(scale)[..., None] / 2 + 1e-3 * np.abs(np.asarray(exact)).max()
    assert np.all(np.abs(np.asarray(s) - np.asarray(exact)) <= bound)


# ----------------------------------------------------------------------------- attention


def test_reference_matches_loop_definition():
    s = CI_ATTENTION_SHAPES[2]
    q, k, v, idx, valid, length = _attention_case(7, s)
    ref = sparse_decode_attention_reference(q, k, v, idx, valid, length=length,
                                            page_size=s.page_size)
    want = _numpy_attention(q, k, v, idx, valid, length, s.page_size, s.d ** -0.5)
    np.testing.assert_allclose(np.asarray(ref), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("gather", ["vector", "prefetch"])
@pytest.mark.parametrize("shape", CI_ATTENTION_SHAPES, ids=lambda s: s.name)
def test_attention_kernel_matches_reference_f32(shape, gather):
    q, k, v, idx, valid, length = _attention_case(seed_for(shape.name), shape)
    kw = dict(length=length, page_size=shape.page_size)
    ref = sparse_decode_attention_reference(q, k, v, idx, valid, **kw)
    y = sparse_decode_attention(q, k, v, idx, valid, implementation="pallas", gather=gather, **kw)
    assert y.shape == q.shape and y.dtype == jnp.float32
    _close(y, ref, jnp.float32, v, _reduction_length(shape))


def test_attention_bf16_and_custom_scale():
    s = CI_ATTENTION_SHAPES[1]
    q, k, v, idx, valid, length = _attention_case(8, s, jnp.bfloat16)
    ref = sparse_decode_attention_reference(q, k, v, idx, valid, length=length, sm_scale=0.05)
    for gather in ("vector", "prefetch"):
        y = sparse_decode_attention(q, k, v, idx, valid, length=length, sm_scale=0.05,
                                    implementation="pallas", gather=gather)
        assert y.dtype == jnp.bfloat16
        _close(y, ref, jnp.bfloat16, v, _reduction_length(s))


def test_splits_and_block_sizes_agree():
    s = CI_ATTENTION_SHAPES[1]
    q, k, v, idx, valid, length = _attention_case(9, s)
    ref = sparse_decode_attention_reference(q, k, v, idx, valid, length=length)
    for bs in (AttentionBlockSizes(block_k=16, num_splits=3),
               AttentionBlockSizes(block_k=32, num_splits=2)):
        y = sparse_decode_attention(q, k, v, idx, valid, length=length, gather="vector",
                                    implementation="pallas", block_sizes=bs)
        _close(y, ref, jnp.float32, v, _reduction_length(s))
    y = sparse_decode_attention(q, k, v, idx, valid, length=length, gather="prefetch",
                                implementation="pallas", block_sizes=AttentionBlockSizes(4, 1))
    _close(y, ref, jnp.float32, v, _reduction_length(s))


def test_invalid_entries_ignored_and_empty_heads_are_zero():
    s = CI_ATTENTION_SHAPES[2]
    q, k, v, idx, valid, length = _attention_case(10, s)
    valid = valid.at[0, 1].set(False)              # kv head 1 of batch 0 selects nothing
    # garbage behind invalid entries must not matter (even out-of-range ones under jit)
    idx_bad = jnp.where(valid, idx, 10_000)
    f = jax.jit(lambda i: sparse_decode_attention(q, k, v, i, valid, length=length,
                                                  page_size=s.page_size,
                                                  implementation="pallas"))
    y, y_bad = f(idx), f(idx_bad)
    np.testing.assert_array_equal(np.asarray(y), np.asarray(y_bad))
    g = s.hq // s.hk
    assert np.all(np.asarray(y[0, g:2 * g]) == 0.0)
    ref = sparse_decode_attention_reference(q, k, v, idx, valid, length=length,
                                            page_size=s.page_size)
    _close(y, ref, jnp.float32, v, _reduction_length(s))


def test_vmap_over_layers():
    s = CI_ATTENTION_SHAPES[0]
    cases = [_attention_case(20 + i, s) for i in range(3)]
    stack = [jnp.stack(parts) for parts in zip(*cases)]
    f = jax.jit(jax.vmap(lambda q, k, v, i, m, n: sparse_decode_attention(
        q, k, v, i, m, length=n, implementation="pallas")))
    ys = f(*stack)
    for i, c in enumerate(cases):
        _close(ys[i], sparse_decode_attention_reference(*c[:5], length=c[5]), jnp.float32, c[2],
               _reduction_length(s))
    ss = CI_SCORE_SHAPES[0]
    sc = [_score_case(30 + i, ss)[1:] for i in range(2)]
    sstack = [jnp.stack(parts) for parts in zip(*sc)]
    scores = jax.vmap(lambda c, p, s, n: hash_scores(c, p, s, n, implementation="pallas"))(
        *sstack)
    for i, c in enumerate(sc):
        np.testing.assert_array_equal(np.asarray(scores[i]), np.asarray(hash_scores_reference(*c)))


def test_sharded_over_kv_heads_equals_unsharded(num_devices):
    # A kernel inside shard_map needs check_vma=False (see PALLAS_NOTES).
    from jax.sharding import AxisType
    from jax.sharding import PartitionSpec as P

    mesh = jax.make_mesh((2,), ("x",), axis_types=(AxisType.Auto,))
    s = CI_ATTENTION_SHAPES[1]
    q, k, v, idx, valid, length = _attention_case(18, s)
    heads = P(None, "x")
    f = jax.shard_map(lambda q, k, v, i, m, n: sparse_decode_attention(
        q, k, v, i, m, length=n, implementation="pallas"), mesh=mesh,
        in_specs=(heads,) * 5 + (P(),), out_specs=heads, check_vma=False)
    y = jax.jit(f)(q, k, v, idx, valid, length)
    _close(y, sparse_decode_attention(q, k, v, idx, valid, length=length,
                                      implementation="pallas"), jnp.float32, v,
           _reduction_length(s))


def test_pallas_call_is_on_the_path():
    s = CI_ATTENTION_SHAPES[2]
    q, k, v, idx, valid, length = _attention_case(11, s)
    for gather, name in (("vector", "binary_hash_sparse_attention"),
                         ("prefetch", "binary_hash_sparse_attention_prefetch")):
        jaxpr = str(jax.make_jaxpr(lambda q: sparse_decode_attention(
            q, k, v, idx, valid, length=length, page_size=16, gather=gather,
            implementation="pallas"))(q))
        assert "pallas_call" in jaxpr and name in jaxpr
    xla = str(jax.make_jaxpr(lambda q: sparse_decode_attention(
        q, k, v, idx, valid, length=length, page_size=16, implementation="xla"))(q))
    assert "pallas_call" not in xla
    _, codes, probe, scale, n = _score_case(12, CI_SCORE_SHAPES[0])
    jaxpr = str(jax.make_jaxpr(lambda c: hash_scores(c, probe, scale, n,
                                                     implementation="pallas"))(codes))
    assert "pallas_call" in jaxpr and "binary_hash_scores" in jaxpr


def test_no_recompilation_on_repeated_calls():
    s = CI_ATTENTION_SHAPES[0]
    step = jax.jit(lambda q, k, v, i, m, n: sparse_decode_attention(
        q, k, v, i, m, length=n, implementation="pallas"))
    for seed in range(3):   # fresh values, same shapes
        jax.block_until_ready(step(*_attention_case(40 + seed, s)))
    assert step._cache_size() == 1
    score = jax.jit(lambda c, p, sc, n: hash_scores(c, p, sc, n, implementation="pallas"))
    for seed in range(3):
        jax.block_until_ready(score(*_score_case(50 + seed, CI_SCORE_SHAPES[0])[1:]))
    assert score._cache_size() == 1


def test_auto_on_cpu_falls_back_and_says_so():
    s = CI_ATTENTION_SHAPES[0]
    q, k, v, idx, valid, length = _attention_case(13, s)
    with pytest.warns(UserWarning, match="XLA path"):
        y = sparse_decode_attention(q, k, v, idx, valid, length=length)
    np.testing.assert_array_equal(np.asarray(y), np.asarray(
        sparse_decode_attention_reference(q, k, v, idx, valid, length=length)))
    _, codes, probe, scale, n = _score_case(14, CI_SCORE_SHAPES[0])
    with pytest.warns(UserWarning, match="XLA path"):
        hash_scores(codes, probe, scale, n)


def test_bad_inputs():
    _, codes, probe, scale, n = _score_case(15, CI_SCORE_SHAPES[0])
    with pytest.raises(TypeError, match="codes"):
        hash_scores(codes.astype(jnp.int32), probe, scale, n)
    with pytest.raises(TypeError, match="probe"):
        hash_scores(codes, probe.astype(jnp.float32), scale, n)
    with pytest.raises(ValueError, match="num_bits"):
        hash_scores(codes, probe[..., :48], scale, n)
    with pytest.raises(ValueError, match="num_bits"):
        hash_scores(codes, probe[..., :32], scale, n)        # W = 2 words vs 32 bits
    with pytest.raises(ValueError, match=r"Hq=3 .* Hk=2"):
        hash_scores(codes, probe[:, :1].repeat(3, 1), scale[:, :1].repeat(3, 1), n)
    with pytest.raises(ValueError, match="length"):
        hash_scores(codes, probe, scale, n[:1])
    with pytest.raises(ValueError, match="group_reduce"):
        hash_scores(codes, probe, scale, n, group_reduce="mean")
    with pytest.raises(ValueError, match="implementation"):
        hash_scores(codes, probe, scale, n, implementation="cuda")

    s = CI_ATTENTION_SHAPES[2]
    q, k, v, idx, valid, length = _attention_case(16, s)
    kw = dict(length=length, page_size=16, implementation="pallas")
    with pytest.raises(ValueError, match="head dim"):
        sparse_decode_attention(q[..., :16], k, v, idx, valid, **kw)
    with pytest.raises(ValueError, match=r"Hq=3 .* Hk=2"):
        sparse_decode_attention(q[:, :3], k, v, idx, valid, **kw)
    with pytest.raises(ValueError, match="indices out of range"):
        sparse_decode_attention(q, k, v, idx.at[1, 0, 0].set(32), valid.at[1, 0, 0].set(True),
                                **kw)
    with pytest.raises(ValueError, match="indices out of range"):
        sparse_decode_attention(q, k, v, idx.at[0, 1, 2].set(-1), valid.at[0, 1, 2].set(True),
                                **kw)
    with pytest.raises(TypeError, match="valid"):
        sparse_decode_attention(q, k, v, idx, valid.astype(jnp.int32), **kw)
    with pytest.raises(ValueError, match="indices"):
        sparse_decode_attention(q, k, v, idx[0], valid[0], **kw)
    with pytest.raises(ValueError, match="page_size"):
        sparse_decode_attention(q, k, v, idx, valid, length=length, page_size=0)
    with pytest.raises(ValueError, match="gather"):
        sparse_decode_attention(q, k, v, idx, valid, gather="dma", **kw)
    with pytest.raises(ValueError, match="v must"):
        sparse_decode_attention(q, k, v[:, :, :100], idx, valid, **kw)


def test_explicit_pallas_raises_where_the_compiled_kernel_cannot_run(monkeypatch):
    # Only "auto" may fall back; "pallas" names the reason (a simulated GPU: no kernel runs).
    _, codes, probe, scale, n = _score_case(19, CI_SCORE_SHAPES[0])
    codes3, probe3 = codes[..., :1].repeat(3, -1), probe[..., :32].repeat(3, -1)   # W = 3
    s = CI_ATTENTION_SHAPES[0]
    q, k, v, idx, valid, length = _attention_case(21, s)
    q48, k48, v48 = q[..., :24].repeat(2, -1), k[..., :24].repeat(2, -1), v[..., :24].repeat(2, -1)
    monkeypatch.setattr(_common, "platform", lambda: "cuda")
    with pytest.raises(ValueError, match=r"hash_scores\(implementation='pallas'\) cannot run "
                                         r"here: Triton blocks need a power-of-two word count"):
        hash_scores(codes3, probe3, scale, n, implementation="pallas")
    with pytest.raises(ValueError, match=r"sparse_decode_attention\(implementation='pallas'\) "
                                         r"cannot run here: Triton blocks need power-of-two D"):
        sparse_decode_attention(q48, k48, v48, idx, valid, length=length, implementation="pallas",
                                gather="vector")
    with pytest.warns(UserWarning, match="XLA path: Triton blocks need a power-of-two word"):
        hash_scores(codes3, probe3, scale, n, implementation="auto")


@pytest.mark.slow  # ~11 s; the plain interpret-mode tests cover both kernels' values
def test_tpu_interpreter_finds_no_out_of_bounds_reads_or_races():
    # The Mosaic interpreter raises on out-of-bounds reads and reports races (slow: tiny case).
    from jax.experimental.pallas import tpu as pltpu

    ip = pltpu.InterpretParams(out_of_bounds_reads="raise", detect_races=True)
    b, hk, g, l, d, page = 1, 2, 2, 64, 32, 16
    kq, kk, kv, kc, kp = jax.random.split(jax.random.key(17), 5)
    q = jax.random.normal(kq, (b, hk * g, d))
    k = jax.random.normal(kk, (b, hk, l, d))
    v = jax.random.normal(kv, (b, hk, l, d))
    idx = jnp.array([[[3, 0, 1, 2], [2, 2, 3, 0]]], jnp.int32)
    valid = jnp.array([[[True, True, False, True], [True, True, True, False]]])
    length = jnp.array([50])
    lim = entry_limits(idx, valid, l, page, length)
    o = K.attend_prefetch_call(q.reshape(b, hk, g, d), k.reshape(b, hk, l // page, page, d),
                               v.reshape(b, hk, l // page, page, d), jnp.where(lim > 0, idx, 0),
                               lim, block_k=2, sm_scale=d ** -0.5, interpret=ip, platform="cpu")
    ref = sparse_decode_attention_reference(q, k, v, idx, valid, length=length, page_size=page)
    _close(o.reshape(b, hk * g, d), ref, jnp.float32, v, d + idx.shape[-1] * page)
    codes = jax.random.bits(kc, (b, hk, 300, 2), jnp.uint32)
    probe = jax.random.randint(kp, (b, hk, 16, 64), -127, 128).astype(jnp.int8)
    scale = jnp.ones((b, hk, 16, 1), jnp.float32)
    s = K.hash_scores_call(codes, probe, scale, group=16, reduce=False, block_l=128,
                           interpret=ip, platform="cpu")
    want = hash_scores_reference(codes, probe.reshape(b, hk * 16, 64), scale.reshape(b, -1),
                                 jnp.array([300]), group_reduce=None)
    np.testing.assert_array_equal(np.asarray(s).reshape(want.shape), np.asarray(want))


# ----------------------------------------------------------------------------- lowerings


def _lower(platform, f, *args):
    return lower_for(platform, f, *args).as_text()


def _lowered_kernel(text, platform):
    return ("tpu_custom_call" in text) if platform == "tpu" else ("triton" in text.lower())


@pytest.mark.parametrize("platform", ["cuda", "tpu"])
def test_score_kernel_lowers(platform):
    # The real Triton / Mosaic lowering runs on CPU (lowering is not compiling).
    b, hk, l, w = 1, 8, 4096, 2
    gp = 16 if platform == "cuda" else 8
    args = (jnp.zeros((b, hk, l, w), jnp.uint32), jnp.zeros((b, hk, gp, 64), jnp.int8),
            jnp.zeros((b, hk, gp, 1), jnp.float32))
    for reduce in (True, False):
        text = _lower(platform, lambda c, p, s: K.hash_scores_call(
            c, p, s, group=4, reduce=reduce, block_l=512, interpret=False, platform=platform),
            *args)
        assert _lowered_kernel(text, platform)


@pytest.mark.parametrize("page_size", [1, 16, 64])
@pytest.mark.parametrize("platform", ["cuda", "tpu"])
def test_attention_kernel_lowers(platform, page_size):
    # GPU: the in-kernel vector gather (Triton); TPU: scalar-prefetch index maps (Mosaic).
    b, hk, g, l, d, n = 1, 8, 4, 2048, 128, 64
    k5 = jnp.zeros((b, hk, l // page_size, page_size, d), jnp.bfloat16)
    sel = jnp.zeros((b, hk, n), jnp.int32)
    if platform == "cuda":
        q4 = jnp.zeros((b, hk, 16, d), jnp.bfloat16)
        f = lambda q, k, v, i, m: K.attend_vector_call(
            q, k, v, i, m, block_k=max(1, 64 // page_size), num_splits=4, sm_scale=0.1,
            interpret=False, platform="cuda")
    else:
        q4 = jnp.zeros((b, hk, g, d), jnp.bfloat16)
        f = lambda q, k, v, i, m: K.attend_prefetch_call(
            q, k, v, i, m, block_k=16 if page_size == 1 else 4, sm_scale=0.1, interpret=False,
            platform="tpu")
    assert _lowered_kernel(_lower(platform, f, q4, k5, k5, sel, sel), platform)


def test_gpu_shapes_follow_the_issue():
    assert {s.length for s in GPU_SHAPES} == {32 * 1024, 128 * 1024}
    for s in GPU_SHAPES:
        assert (s.b, s.hq, s.hk, s.d) == (1, 32, 8, 128)
        assert s.k * s.page_size >= int(0.02 * s.length)
