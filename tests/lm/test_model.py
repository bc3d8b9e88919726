"""Model tests: prefill/decode against the dense forward pass, the attn_fn hook, RoPE, errors."""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxpapers import lm

GQA = lm.LMConfig(d_model=32, n_layers=3, n_q_heads=4, n_kv_heads=2, head_dim=8, d_ff=48,
                  max_len=32)
MHA = lm.LMConfig(d_model=32, n_layers=2, n_q_heads=2, n_kv_heads=2, head_dim=8, d_ff=48,
                  max_len=32)
TOL = dict(atol=2e-5, rtol=2e-5)  # f32 logits of O(1); sums of a few dozen terms


def _setup(cfg, key, b=3, t=12):
    pkey, tkey = jax.random.split(key)
    params = lm.init(cfg, pkey)
    tokens = jax.random.randint(tkey, (b, t), 0, cfg.vocab, jnp.int32)
    return params, tokens


def _decode_all(params, tokens, cfg, prefix, **kw):
    logits, cache = lm.prefill(params, tokens[:, :prefix], config=cfg, max_len=tokens.shape[1])
    out = [logits]
    for t in range(prefix, tokens.shape[1]):
        step, cache = lm.decode_step(params, cache, tokens[:, t], config=cfg, **kw)
        out.append(step[:, None])
    return jnp.concatenate(out, axis=1), cache


def test_forward_equals_prefill(key):
    params, tokens = _setup(GQA, key)
    full = lm.forward(params, tokens, config=GQA)
    logits, cache = lm.prefill(params, tokens, config=GQA, max_len=20)
    np.testing.assert_allclose(logits, full, **TOL)
    assert cache.k.shape == (3, 3, 2, 20, 8) and cache.length.tolist() == [12] * 3
    assert cache.length.dtype == jnp.int32


@pytest.mark.parametrize("cfg", [GQA, MHA], ids=["gqa", "mha"])
def test_decode_sequence_equals_forward(cfg, key):
    params, tokens = _setup(cfg, key)
    full = lm.forward(params, tokens, config=cfg)
    got, cache = _decode_all(params, tokens, cfg, prefix=4)
    np.testing.assert_allclose(got, full, **TOL)
    # the cached keys are the post-RoPE keys of the dense pass
    _, k, v = lm.collect_qkv(params, tokens, config=cfg)
    np.testing.assert_allclose(cache.k, k, **TOL)
    np.testing.assert_allclose(cache.v, v, **TOL)


def test_decode_from_single_token_prefix(key):
    params, tokens = _setup(GQA, key, b=2, t=6)
    got, _ = _decode_all(params, tokens, GQA, prefix=1)
    np.testing.assert_allclose(got, lm.forward(params, tokens, config=GQA), **TOL)


def test_collect_qkv_matches_manual_layer0(key):
    params, tokens = _setup(GQA, key, b=2, t=5)
    q, k, v = lm.collect_qkv(params, tokens, config=GQA)
    lp = jax.tree.map(lambda x: x[0], params["layers"])
    x = params["embed"][tokens]
    h = x / jnp.sqrt(jnp.mean(x**2, -1, keepdims=True) + 1e-5) * lp["attn_norm"]
    q0 = (h @ lp["wq"]).reshape(2, 5, 4, 8).transpose(0, 2, 1, 3)
    np.testing.assert_allclose(q[0], lm.rope(q0, jnp.arange(5), base=GQA.rope_base), **TOL)
    v0 = (h @ lp["wv"]).reshape(2, 5, 2, 8).transpose(0, 2, 1, 3)
    np.testing.assert_allclose(v[0], v0, **TOL)
    assert q.shape == (3, 2, 4, 5, 8) and k.shape == v.shape == (3, 2, 2, 5, 8)


def test_dense_attention_numpy_reference(key):
    kq, kk, kv = jax.random.split(key, 3)
    q = jax.random.normal(kq, (2, 4, 8))
    k = jax.random.normal(kk, (2, 2, 6, 8))
    v = jax.random.normal(kv, (2, 2, 6, 8))
    length = jnp.array([3, 6], jnp.int32)
    out = np.asarray(lm.dense_attention(q, k, v, length))
    qn, kn, vn = np.asarray(q, np.float64), np.asarray(k, np.float64), np.asarray(v, np.float64)
    for b, n in enumerate([3, 6]):
        for j in range(4):
            g = j // 2  # query head j uses kv head j // (Hq / Hk)
            s = kn[b, g, :n] @ qn[b, j] / np.sqrt(8)
            p = np.exp(s - s.max())
            np.testing.assert_allclose(out[b, j], (p / p.sum()) @ vn[b, g, :n], atol=1e-5)


def test_custom_attn_fn_gets_layers_and_states(key):
    params, tokens = _setup(GQA, key)
    n = GQA.n_layers
    seen = []

    def record(layer, layer_id, length, cache_len):
        seen.append((int(layer), float(layer_id), np.asarray(length).tolist(), int(cache_len)))

    def attn_fn(q, k, v, length, layer_state, layer):
        assert q.shape == (3, 4, 8) and k.shape == (3, 2, 12, 8) and layer.dtype == jnp.int32
        jax.debug.callback(record, layer, layer_state["id"], length, k.shape[2])
        out = lm.dense_attention(q, k, v, length)
        # equals the dense output only if the state slice belongs to this layer
        return out * (1.0 + layer_state["id"] - layer.astype(jnp.float32))

    state = {"id": jnp.arange(n, dtype=jnp.float32)}
    dense, _ = _decode_all(params, tokens, GQA, prefix=9)
    custom, _ = _decode_all(params, tokens, GQA, prefix=9, attn_fn=attn_fn, attn_state=state)
    np.testing.assert_array_equal(custom, dense)
    jax.effects_barrier()
    assert [s[0] for s in seen] == list(range(n)) * 3
    assert all(s[0] == s[1] for s in seen)
    # length counts the token just written: 10, 11, 12 for the three decode steps
    assert [s[2] for s in seen[::n]] == [[10] * 3, [11] * 3, [12] * 3]
    # a wrong state slice changes the result, so the state really reaches attn_fn
    wrong = {"id": jnp.arange(n, dtype=jnp.float32)[::-1]}
    off, _ = _decode_all(params, tokens, GQA, prefix=9, attn_fn=attn_fn, attn_state=wrong)
    assert not np.allclose(off, dense, atol=1e-3)


def test_jit_and_vmap(key):
    params, tokens = _setup(GQA, key, b=4, t=8)
    eager = lm.forward(params, tokens, config=GQA)
    jitted = jax.jit(lambda p, t: lm.forward(p, t, config=GQA))(params, tokens)
    np.testing.assert_allclose(jitted, eager, **TOL)
    per_example = jax.vmap(lambda t: lm.forward(params, t[None], config=GQA)[0])(tokens)
    np.testing.assert_allclose(per_example, eager, **TOL)

    _, cache = lm.prefill(params, tokens[:, :5], config=GQA, max_len=8)
    step = jax.jit(lambda c, t: lm.decode_step(params, c, t, config=GQA))
    logits, new = step(cache, tokens[:, 5])
    ref, ref_cache = lm.decode_step(params, cache, tokens[:, 5], config=GQA)
    np.testing.assert_allclose(logits, ref, **TOL)
    # vmap over a batch of independent single-sequence caches
    split = jax.tree.map(lambda x: jnp.moveaxis(x.reshape(x.shape[0], 4, 1, *x.shape[2:]), 1, 0)
                         if x.ndim == 5 else x.reshape(4, 1), cache)
    vm_logits, vm_cache = jax.vmap(
        lambda c, t: lm.decode_step(params, c, t, config=GQA))(split, tokens[:, 5:6])
    np.testing.assert_allclose(vm_logits[:, 0], ref, **TOL)
    np.testing.assert_array_equal(vm_cache.length[:, 0], ref_cache.length)


def test_decode_step_does_not_recompile(key, monkeypatch):
    from jaxpapers.lm import model

    chex.clear_trace_counter()
    monkeypatch.setattr(model, "_decode_jit", jax.jit(chex.assert_max_traces(model._decode, n=1),
                                                      static_argnames=("config", "attn_fn")))
    params, tokens = _setup(GQA, key, b=2, t=10)
    _, cache = lm.prefill(params, tokens[:, :4], config=GQA, max_len=10)
    for t in range(4, 8):  # one trace for every step
        _, cache = lm.decode_step(params, cache, tokens[:, t], config=GQA)


def test_rope_relative_position_property(key, x64):
    kq, kk = jax.random.split(key)
    q = jax.random.normal(kq, (16,), jnp.float64)
    k = jax.random.normal(kk, (16,), jnp.float64)

    def score(m, n):
        rq = lm.rope(q[None], jnp.array([m]), base=100.0)[0]
        rk = lm.rope(k[None], jnp.array([n]), base=100.0)[0]
        return float(rq @ rk)

    for m, n, shift in [(3, 1, 7), (0, 5, 100), (40, 40, 3)]:
        np.testing.assert_allclose(score(m + shift, n + shift), score(m, n), rtol=1e-12,
                                   atol=1e-12)
    # rotation: norm preserved; pair (i, i + D/2) rotated by p * base**(-2i/D) (numpy reference)
    out = np.asarray(lm.rope(q[None], jnp.array([5]), base=100.0)[0])
    ang = 5 * 100.0 ** (-np.arange(8) * 2 / 16)
    qa, qb = np.asarray(q[:8]), np.asarray(q[8:])
    ref = np.concatenate([qa * np.cos(ang) - qb * np.sin(ang), qa * np.sin(ang) + qb * np.cos(ang)])
    np.testing.assert_allclose(out, ref, rtol=1e-12, atol=1e-12)
    assert out.dtype == np.float64


def test_init_is_deterministic(key):
    a = lm.init(GQA, key)
    b = lm.init(GQA, jax.random.key(0))
    chex.assert_trees_all_equal(a, b)
    assert a["layers"]["wk"].shape == (3, 32, 16)


@pytest.mark.parametrize("field, value, err", [
    ("n_kv_heads", 3, "n_q_heads"), ("head_dim", 7, "head_dim"), ("d_model", 0, "d_model"),
    ("max_len", 2.0, "max_len"), ("vocab", 300, "vocab"), ("rope_base", 0.5, "rope_base")])
def test_config_validation(field, value, err):
    kw = dict(d_model=32, n_layers=2, n_q_heads=4, n_kv_heads=2, head_dim=8, d_ff=48, max_len=32)
    kw[field] = value
    with pytest.raises((ValueError, TypeError), match=err):
        lm.LMConfig(**kw)


def test_bad_inputs(key):
    params, tokens = _setup(GQA, key, b=2, t=8)
    with pytest.raises(ValueError, match="tokens must be token ids"):
        lm.forward(params, tokens.at[0, 0].set(256), config=GQA)
    with pytest.raises(ValueError, match="tokens must be token ids"):
        lm.forward(params, tokens.at[0, 0].set(-1), config=GQA)
    with pytest.raises(TypeError, match="tokens must hold integer"):
        lm.forward(params, tokens.astype(jnp.float32), config=GQA)
    with pytest.raises(ValueError, match="tokens must have 2 dimensions"):
        lm.forward(params, tokens[0], config=GQA)
    with pytest.raises(ValueError, match="config.max_len"):
        lm.forward(params, jnp.zeros((1, 33), jnp.int32), config=GQA)
    with pytest.raises(ValueError, match="params do not match"):
        lm.forward(params, tokens, config=MHA)
    with pytest.raises(ValueError, match="max_len must be in"):
        lm.prefill(params, tokens, config=GQA, max_len=4)
    _, cache = lm.prefill(params, tokens, config=GQA, max_len=9)
    _, cache = lm.decode_step(params, cache, tokens[:, 0], config=GQA)
    with pytest.raises(ValueError, match="cache overflow"):
        lm.decode_step(params, cache, tokens[:, 0], config=GQA)
    with pytest.raises(ValueError, match="token has batch"):
        lm.decode_step(params, cache, tokens[:1, 0], config=GQA)
    with pytest.raises(TypeError, match="token must hold integer"):
        lm.decode_step(params, cache, tokens[:, 0].astype(jnp.float32), config=GQA)
    _, cache = lm.prefill(params, tokens[:, :4], config=GQA, max_len=9)
    with pytest.raises(ValueError, match="attn_state"):
        lm.decode_step(params, cache, tokens[:, 0], config=GQA, attn_state=jnp.zeros((2, 5)))
    with pytest.raises(TypeError, match="attn_fn must be callable"):
        lm.decode_step(params, cache, tokens[:, 0], config=GQA, attn_fn="dense")
    with pytest.raises(TypeError, match="cache must be a KVCache"):
        lm.decode_step(params, (cache.k, cache.v), tokens[:, 0], config=GQA)
    with pytest.raises(TypeError, match="config must be an LMConfig"):
        lm.forward(params, tokens, config=None)
    with pytest.raises(TypeError, match="key must be a typed key"):
        lm.init(GQA, 0)
