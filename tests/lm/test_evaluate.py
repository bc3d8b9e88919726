"""Bits/byte: cached decoding with dense attention equals the dense pass; the hook is used."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxpapers import lm

CFG = lm.LMConfig(d_model=32, n_layers=3, n_q_heads=4, n_kv_heads=2, head_dim=8, d_ff=48,
                  max_len=32)


@pytest.fixture
def setup(key):
    pkey, tkey = jax.random.split(key)
    return lm.init(CFG, pkey), jax.random.randint(tkey, (2, 20), 0, 256, jnp.int32)


def test_decode_bits_equal_dense_bits(setup):
    params, tokens = setup
    dense = lm.token_bits(params, tokens, config=CFG)  # [B, T - 1]
    # numpy reference of the per-byte code length
    logits = np.asarray(lm.forward(params, tokens[:, :-1], config=CFG), np.float64)
    logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    ref = -np.take_along_axis(logp, np.asarray(tokens[:, 1:, None]), -1)[..., 0] / np.log(2)
    np.testing.assert_allclose(dense, ref, rtol=1e-5, atol=1e-5)
    for prefix in (1, 7):
        per_byte = lm.bits_per_byte_decode(params, tokens, config=CFG, prefix_len=prefix,
                                           reduce=False)
        np.testing.assert_allclose(per_byte, dense[:, prefix - 1:], atol=1e-5, rtol=1e-5)
        np.testing.assert_allclose(
            lm.bits_per_byte_decode(params, tokens, config=CFG, prefix_len=prefix),
            lm.bits_per_byte(params, tokens, config=CFG, start=prefix - 1), atol=1e-5)


def test_attn_state_fn_and_attn_fn_are_used(setup):
    params, tokens = setup
    prefix = 8

    def state_fn(cache):  # built once from the prefilled cache: the prefix keys' mean norm
        return {"norm": jnp.linalg.norm(cache.k[:, :, :, :prefix], axis=-1).mean((1, 2, 3)),
                "layer": jnp.arange(CFG.n_layers)}

    def same_as_dense(q, k, v, length, layer_state, layer):
        ok = (layer_state["layer"] == layer) & (layer_state["norm"] > 0)
        return jnp.where(ok, lm.dense_attention(q, k, v, length), jnp.nan)

    def last_only(q, k, v, length, layer_state, layer):  # attend to the newest token only
        idx = (length - 1)[:, None, None, None]
        v_last = jnp.take_along_axis(v, jnp.broadcast_to(idx, v.shape[:2] + (1, v.shape[3])),
                                     axis=2)[:, :, 0]
        return jnp.repeat(v_last, q.shape[1] // v.shape[1], axis=1)

    dense = lm.bits_per_byte_decode(params, tokens, config=CFG, prefix_len=prefix)
    hooked = lm.bits_per_byte_decode(params, tokens, config=CFG, prefix_len=prefix,
                                     attn_fn=same_as_dense, attn_state_fn=state_fn)
    np.testing.assert_allclose(hooked, dense, atol=1e-6)
    other = lm.bits_per_byte_decode(params, tokens, config=CFG, prefix_len=prefix,
                                    attn_fn=last_only)
    assert abs(float(other) - float(dense)) > 1e-3


def test_unigram_closed_form():
    train = np.array([0, 0, 0, 1], np.uint8)
    got = lm.unigram_bits_per_byte(train, np.array([0, 1]), smoothing=1e-12, vocab=2)
    np.testing.assert_allclose(got, 0.5 * (-np.log2(0.75) - np.log2(0.25)), rtol=1e-9)
    # add-one smoothing over 256 bytes: an unseen byte costs log2((4 + 256) / 1)
    np.testing.assert_allclose(lm.unigram_bits_per_byte(train, np.array([7])), np.log2(260))


def test_bad_inputs(setup):
    params, tokens = setup
    with pytest.raises(ValueError, match="prefix_len"):
        lm.bits_per_byte_decode(params, tokens, config=CFG, prefix_len=20)
    with pytest.raises(ValueError, match="prefix_len"):
        lm.bits_per_byte_decode(params, tokens, config=CFG, prefix_len=0)
    with pytest.raises(ValueError, match="cache slots"):
        lm.bits_per_byte_decode(params, jnp.zeros((1, 40), jnp.int32), config=CFG, prefix_len=4)
    with pytest.raises(TypeError, match="attn_state_fn must be callable"):
        lm.bits_per_byte_decode(params, tokens, config=CFG, prefix_len=4, attn_state_fn=1)
    with pytest.raises(ValueError, match="start"):
        lm.bits_per_byte(params, tokens, config=CFG, start=19)
    with pytest.raises(ValueError, match="tokens must be token ids"):
        lm.bits_per_byte(params, tokens + 250, config=CFG)
    with pytest.raises(TypeError, match="eval_tokens must hold integer"):
        lm.unigram_bits_per_byte([1, 2], [0.5])
