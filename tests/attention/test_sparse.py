"""Dense reference, selection, decode step: masks, compile-once, scan/vmap, sharding, errors."""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

from jaxpapers import attention as A


class Cache(NamedTuple):
    k: jax.Array  # [N, B, Hk, S, D]
    v: jax.Array  # [N, B, Hk, S, D]
    length: jax.Array  # [B]


def _qkv(key, hq=4, hk=2, s=64, d=16):
    k1, k2, k3 = jax.random.split(key, 3)
    return (jax.random.normal(k1, (hq, d)), jax.random.normal(k2, (hk, s, d)),
            jax.random.normal(k3, (hk, s, d)))


def test_dense_attention_matches_numpy_float64(key, x64):
    q, k, v = (x.astype(jnp.float64) for x in _qkv(key))
    out = A.dense_attention(q, k, v, 37)
    qn, kn, vn = map(np.asarray, (q, k, v))
    ref = []
    for h in range(4):
        logits = kn[h // 2, :37] @ qn[h] / np.sqrt(16)
        p = np.exp(logits - logits.max())
        ref.append((p / p.sum()) @ vn[h // 2, :37])
    np.testing.assert_allclose(out, np.stack(ref), rtol=1e-10)


def test_select_respects_budget_masks_forced_and_new_tokens(key):
    hk, s = 2, 64
    scores = jax.random.normal(key, (hk, s))
    forced = jnp.array([[50, 3, -1], [7, -1, -1]], jnp.int32)  # 50 is past hash_length: ignored
    idx, valid = A.select(scores, forced, 40, 45, budget=8, new_window=3)
    idx, valid = np.asarray(idx), np.asarray(valid)
    assert idx.shape == (hk, 11) and valid.all()
    for h in range(hk):
        top, new = idx[h, :8], idx[h, 8:]
        assert len(set(top)) == 8 and (top < 40).all()
        np.testing.assert_array_equal(new, [42, 43, 44])  # the 3 most recent decoded tokens
        assert 3 in top if h == 0 else 7 in top
        rest = sorted(set(range(40)) - set(top), key=lambda j: -float(scores[h, j]))
        assert float(scores[h, rest[0]]) <= min(float(scores[h, j]) for j in top
                                                if j not in (3, 7))
    # fewer decoded tokens than the window: the extra slots are invalid
    idx, valid = A.select(scores, forced, 40, 41, budget=8, new_window=3)
    np.testing.assert_array_equal(np.asarray(valid)[:, 8:], [[True, False, False]] * 2)
    # a budget larger than the hashed region leaves the surplus invalid
    _, valid = A.select(scores, forced[:, :0], 5, 5, budget=8)
    assert int(np.asarray(valid).sum()) == 2 * 5


def test_oracle_with_full_budget_equals_dense(key):
    q, k, v = _qkv(key)
    st = A.build_state("oracle", k, 48, None, budget=48)
    out = A.decode_step(st, q, k, v, 52, budget=48, new_window=4)
    np.testing.assert_allclose(out, A.dense_attention(q, k, v, 52), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("method", ["binarypc64", "simhash32", "magicpig", "quest", "random"])
def test_every_method_at_full_budget_equals_dense_and_is_a_selection_below(key, method):
    q, k, v = _qkv(key, d=64)
    st = A.build_state(method, k, 60, jax.random.key(1), budget=60)
    out = A.decode_step(st, q, k, v, 62, budget=60, new_window=2)
    np.testing.assert_allclose(out, A.dense_attention(q, k, v, 62), rtol=1e-5, atol=1e-6)
    # at a smaller budget the step is attention over exactly the selected rows
    st = A.build_state(method, k, 60, jax.random.key(1), budget=12)
    idx, valid = A.select(A.token_scores(st, q, k), A.forced_slots(st, 2), 60, 62, budget=12,
                          new_window=2)
    keep = np.zeros((2, 64), bool)
    for h in range(2):
        keep[h, np.asarray(idx[h])[np.asarray(valid[h])]] = True
    assert keep.sum(1).max() <= 14
    logits = jnp.einsum("hgd,hsd->hgs", q.reshape(2, 2, 64), k) / 8.0
    p = jax.nn.softmax(jnp.where(keep[:, None], logits, -jnp.inf), -1)
    ref = jnp.einsum("hgs,hsd->hgd", p, v).reshape(4, 64)
    np.testing.assert_allclose(A.decode_step(st, q, k, v, 62, budget=12, new_window=2), ref,
                               rtol=1e-5, atol=1e-6)


def test_decode_step_compiles_once_per_budget(key):
    q, k, v = _qkv(key, d=32)
    step = jax.jit(A.decode_step, static_argnames=("budget", "new_window"))
    ks = jax.random.split(jax.random.key(1), 3)
    build = jax.jit(functools.partial(A.build_state, "binarypc32", budget=8))
    for i, (hl, ln) in enumerate([(40, 41), (50, 55), (60, 64)]):
        st = build(k, hl, ks[i])
        step(st, q, k, v, ln, budget=8, new_window=4).block_until_ready()
    assert step._cache_size() == 1
    step(st, q, k, v, 64, budget=16, new_window=4)
    assert step._cache_size() == 2


def test_attn_fn_under_scan_over_layers_and_vmap_over_batch(key):
    n, b, hq, hk, s, d = 3, 2, 4, 2, 64, 32
    kk, kq, kv = jax.random.split(key, 3)
    keys = jax.random.normal(kk, (n, b, hk, s, d))
    vals = jax.random.normal(kv, (n, b, hk, s, d))
    qs = jax.random.normal(kq, (n, b, hq, d))
    length = jnp.array([60, 50], jnp.int32)

    # the fields of jaxpapers.lm.KVCache the builder reads; the hash was built 2 tokens ago
    cache = Cache(k=keys, v=vals, length=length - 2)
    states = jax.jit(A.make_attn_state_fn("binarypc32", jax.random.key(3), budget=8))(cache)
    attn = A.make_attn_fn(budget=8, new_window=4, dense_layers=1)

    def body(carry, xs):
        q, k, v, st, layer = xs
        return carry, attn(q, k, v, length, st, layer)

    _, outs = jax.jit(lambda: jax.lax.scan(body, 0, (qs, keys, vals, states,
                                                     jnp.arange(n))))()
    for layer in range(n):
        for i in range(b):
            st = jax.tree.map(lambda x: x[layer, i], states)
            if layer < 1:
                ref = A.dense_attention(qs[layer, i], keys[layer, i], vals[layer, i], length[i])
            else:
                ref = A.decode_step(st, qs[layer, i], keys[layer, i], vals[layer, i],
                                    length[i], budget=8, new_window=4)
            np.testing.assert_allclose(outs[layer, i], ref, rtol=1e-5, atol=1e-6)


def test_sharded_over_heads_equals_unsharded(key, num_devices):
    hk = 8
    q, k, v = _qkv(key, hq=16, hk=hk, s=64, d=32)
    st = A.build_state("binarypc32", k, 60, jax.random.key(1), budget=8)
    step = jax.jit(functools.partial(A.decode_step, budget=8, new_window=4))
    ref = step(st, q, k, v, 63)
    mesh = jax.make_mesh((hk,), ("h",), axis_types=(jax.sharding.AxisType.Auto,))
    heads = NamedSharding(mesh, P("h"))
    rep = NamedSharding(mesh, P())
    st_s = jax.tree.map(lambda x: jax.device_put(x, heads if x.ndim else rep), st)
    out = step(st_s, jax.device_put(q, heads), jax.device_put(k, heads),
               jax.device_put(v, heads), 63)
    assert len(out.sharding.device_set) == hk
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-6)


def test_bad_input_names_the_argument(key):
    q, k, v = _qkv(key, d=32)
    st = A.build_state("binarypc32", k, 60, jax.random.key(1), budget=8)
    with pytest.raises(ValueError, match="head dimension.*q"):
        A.decode_step(st, q[:, :16], k, v, 62, budget=8)
    with pytest.raises(ValueError, match="budget"):
        A.decode_step(st, q, k, v, 62, budget=65)
    with pytest.raises(ValueError, match="budget=61 is larger than the context"):
        A.build_state("binarypc32", k, 60, jax.random.key(1), budget=61)
    with pytest.raises(ValueError, match="num_bits"):
        A.build_state("binarypc64", k, 60, jax.random.key(1), budget=8, num_bits=40)
    with pytest.raises(ValueError, match="keys"):
        A.build_state("binarypc32", k.at[0, 1, 2].set(jnp.nan), 60, jax.random.key(1),
                      budget=8)
    with pytest.raises(ValueError, match="method"):
        A.build_state("lsh", k, 60, jax.random.key(1), budget=8)
    with pytest.raises(ValueError, match="implementation"):
        A.decode_step(st, q, k, v, 62, budget=8, implementation="cuda")


def test_kernel_route_matches_the_xla_path(key):
    """implementation="pallas": the kernels' ops (interpret mode on CPU), also under vmap."""
    q, k, v = _qkv(key, d=64)
    st = A.build_state("binarypc64", k, 60, jax.random.key(1), budget=16)
    ref = A.decode_step(st, q, k, v, 62, budget=16, new_window=2)   # default: "xla"
    out = A.decode_step(st, q, k, v, 62, budget=16, new_window=2, implementation="pallas")
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-6)
    two = jax.tree.map(lambda x: jnp.stack([x, x]), st)
    outs = jax.vmap(lambda s_, a: A.decode_step(s_, a, k, v, 62, budget=16, new_window=2,
                                                implementation="pallas"))(
        two, jnp.stack([q, q[::-1]]))
    np.testing.assert_allclose(outs[0], ref, rtol=1e-5, atol=1e-6)
    jaxpr = str(jax.make_jaxpr(lambda q: A.decode_step(st, q, k, v, 62, budget=16,
                                                       implementation="pallas"))(q))
    assert "binary_hash_scores" in jaxpr and "binary_hash_sparse_attention" in jaxpr


def test_auto_falls_back_on_cpu_with_a_warning_and_jnp_is_gone(key):
    q, k, v = _qkv(key, d=32)
    st = A.build_state("binarypc32", k, 60, jax.random.key(1), budget=8)
    ref = A.decode_step(st, q, k, v, 62, budget=8)
    with pytest.warns(UserWarning, match=r"decode_step\(implementation='auto'\) uses the XLA"):
        out = A.decode_step(st, q, k, v, 62, budget=8, implementation="auto")
    np.testing.assert_array_equal(out, ref)
    with pytest.raises(ValueError, match="implementation"):   # "xla" is the jnp path's name
        A.decode_step(st, q, k, v, 62, budget=8, implementation="jnp")


def test_explicit_pallas_raises_instead_of_falling_back(key, monkeypatch):
    """A case the compiled kernels cannot run (96-bit codes: W = 3 words on a simulated GPU)."""
    from pallas_kernels import _common

    q, k, v = _qkv(key, d=32)
    st = A.build_state("binarypc96", k, 60, jax.random.key(1), budget=8)
    monkeypatch.setattr(_common, "platform", lambda: "cuda")
    with pytest.raises(ValueError, match=r"implementation='pallas'\) cannot run here"):
        A.decode_step(st, q, k, v, 62, budget=8, implementation="pallas")


def test_plugs_into_the_lm_decode_step(key):
    """As jaxpapers.lm's attn_fn (random weights; no training): at a full budget every layer
    equals the dense decode, and at a small budget only the sparse layers change."""
    lm = pytest.importorskip("jaxpapers.lm")
    cfg = lm.LMConfig(d_model=32, n_layers=3, n_q_heads=2, n_kv_heads=1, head_dim=16, d_ff=64,
                      max_len=64)
    params = lm.init(cfg, key)
    toks = jax.random.randint(jax.random.key(1), (2, 41), 0, 256)
    _, cache = lm.prefill(params, toks[:, :40], config=cfg, max_len=64)
    dense_logits, _ = lm.decode_step(params, cache, toks[:, 40], config=cfg)
    state = A.make_attn_state_fn("oracle", jax.random.key(2), budget=40)(cache)
    full = A.make_attn_fn(budget=40, new_window=1, dense_layers=1)
    logits, _ = lm.decode_step(params, cache, toks[:, 40], config=cfg, attn_fn=full,
                               attn_state=state)
    np.testing.assert_allclose(logits, dense_logits, rtol=1e-4, atol=1e-4)
    state = A.make_attn_state_fn("binarypc32", jax.random.key(2), budget=4)(cache)
    few = A.make_attn_fn(budget=4, new_window=1, dense_layers=1)
    logits, _ = lm.decode_step(params, cache, toks[:, 40], config=cfg, attn_fn=few,
                               attn_state=state)
    assert bool(jnp.all(jnp.isfinite(logits)))
    assert float(jnp.max(jnp.abs(logits - dense_logits))) > 1e-4
