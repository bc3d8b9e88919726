"""BinaryPC fit / encode / score: closed-form properties, quantisation bound, bad input."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxpapers import attention as A


def _keys(key, s=200, d=32, dtype=jnp.float32):
    k1, k2 = jax.random.split(key)
    # an uncentred key cloud (a common mean direction, as post-RoPE keys have)
    return (jax.random.normal(k1, (s, d), dtype) + 2.0 * jax.random.normal(k2, (1, d), dtype))


def test_residual_shrinks_every_bit_float64(key, x64):
    k1, k2 = jax.random.split(key)
    keys = _keys(k1, dtype=jnp.float64)
    proj, signs = jax.jit(lambda k, kk: A.fit_codes(k, kk, num_bits=64))(keys, k2)
    assert proj.dtype == jnp.float64 and set(np.unique(np.asarray(signs))) == {-1.0, 1.0}
    p, u, kn = np.asarray(proj), np.asarray(signs), np.asarray(keys)
    norms = [float(np.linalg.norm(kn - u[:, :b] @ p[:b])) for b in range(65)]
    # reduction of bit b = 2 sum_j |a_j . v| - n |v|^2 >= n |v|^2 >= 0 (u = sign(A v) is optimal)
    assert all(n1 <= n0 + 1e-9 for n0, n1 in zip(norms, norms[1:]))
    assert norms[-1] < 0.5 * norms[0]
    # the first bit absorbs the common mean direction (uncentred keys)
    mean = jnp.mean(keys, 0)
    cos = jnp.abs(proj[0] @ mean) / (jnp.linalg.norm(proj[0]) * jnp.linalg.norm(mean))
    assert cos > 0.9


def test_encode_of_fit_reproduces_fit_codes_and_masks(key):
    k1, k2 = jax.random.split(key)
    keys = _keys(k1, s=160)
    fit = jax.jit(A.fit_codes, static_argnames=("num_bits",))
    proj, signs = fit(keys, k2, num_bits=64)
    np.testing.assert_array_equal(jax.jit(A.binarypc_encode)(keys, proj), signs)
    # with a length mask: rows past the length do not change the fit
    proj_m, signs_m = fit(keys, k2, num_bits=64, length=100)
    keys_junk = keys.at[100:].set(1e3)
    proj_j, _ = fit(keys_junk, k2, num_bits=64, length=100)
    np.testing.assert_allclose(proj_m, proj_j, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(jax.jit(A.binarypc_encode)(keys, proj_m)[:100],
                                  signs_m[:100])
    # jit == eager (a shorter key set keeps the eager run cheap); same key, same bits
    eager = A.fit_codes(keys[:40], k2, num_bits=32)
    jitted = fit(keys[:40], k2, num_bits=32)
    np.testing.assert_allclose(jitted[0], eager[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(fit(keys, k2, num_bits=64)[0], proj)


def test_pack_unpack_layout(key):
    signs = jnp.where(jax.random.bernoulli(key, 0.5, (5, 64)), 1.0, -1.0)
    codes = A.pack_codes(signs)
    assert codes.dtype == jnp.uint32 and codes.shape == (5, 2)
    np.testing.assert_array_equal(A.unpack_codes(codes), signs)
    one = jnp.full((64,), -1.0).at[33].set(1.0)  # bit 1 of word 1
    np.testing.assert_array_equal(A.pack_codes(one), np.array([0, 2], np.uint32))


def test_contract_scores_equal_q_dot_uv_float64(key, x64):
    k1, k2, k3 = jax.random.split(key, 3)
    keys = _keys(k1, dtype=jnp.float64)
    q = jax.random.normal(k3, (32,), jnp.float64)
    proj = A.binarypc_fit(keys, num_bits=64, key=k2)
    u = A.binarypc_encode(keys, proj)
    np.testing.assert_allclose(A.binarypc_scores(q, keys, proj), q @ (u @ proj).T,
                               rtol=1e-12, atol=1e-10)


def test_quantised_scores_within_7bit_bound(key):
    k1, k2, k3 = jax.random.split(key, 3)
    keys = _keys(k1)
    proj, signs = jax.jit(lambda k, kk: A.fit_codes(k, kk, num_bits=64))(keys, k2)
    q = 3.0 * jax.random.normal(k3, (4, 32))  # 4 query heads of one group
    probe = q @ proj.T
    exact = A.code_scores(signs, probe, probe_bits=0)
    quant = A.code_scores(signs, probe, probe_bits=7)
    pq, scale = A.quantize_probe(probe, 7)
    assert pq.dtype == jnp.int8 and int(jnp.max(jnp.abs(pq.astype(jnp.int32)))) == 127
    # each of the 64 probe entries is off by at most scale / 2 = max|probe| / 254
    bound = 64 * jnp.max(jnp.abs(probe), axis=1) / 254.0
    err = jnp.max(jnp.abs(quant - exact), axis=1)
    assert bool(jnp.all(err <= bound * (1 + 1e-5)))
    assert bool(jnp.any(err > 0))  # the quantisation is really on the path


def test_build_state_vmaps_over_batch_like_a_loop(key):
    keys = jax.random.normal(key, (3, 2, 64, 32))
    ks = jax.random.split(jax.random.key(1), 3)
    lens = jnp.array([64, 40, 17])
    build = jax.jit(lambda k, ln, kk: A.binarypc_build(k, ln, kk, num_bits=32, num_forced=3))
    batched = jax.jit(jax.vmap(build))(keys, lens, ks)
    for i in range(3):
        one = build(keys[i], lens[i], ks[i])
        np.testing.assert_array_equal(batched.codes[i][:, :int(lens[i])],
                                      one.codes[:, :int(lens[i])])
        np.testing.assert_array_equal(batched.forced[i], one.forced)
        assert bool(jnp.all(one.forced < lens[i]))


def test_bad_input_names_the_argument(key):
    keys = jax.random.normal(key, (64, 32))
    with pytest.raises(ValueError, match="num_bits"):
        A.binarypc_fit(keys, num_bits=48, key=key)
    with pytest.raises(ValueError, match="keys"):
        A.binarypc_fit(keys.at[3, 4].set(jnp.nan), num_bits=32, key=key)
    proj = A.binarypc_fit(keys, num_bits=32, key=key)
    with pytest.raises(ValueError, match="head dimension.*q"):
        A.binarypc_scores(jnp.ones(16), keys, proj)
    with pytest.raises(ValueError, match="keys"):
        A.binarypc_fit(keys[0], num_bits=32, key=key)
