"""Watermarked sampling (paired keys, zero bias = plain sampling) and CodeTracer's processor."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxpapers import lm
from jaxpapers import watermark as wm
from jaxpapers.watermark import codetracer as ct
from jaxpapers.watermark import sampling

CFG = lm.LMConfig(d_model=16, n_layers=1, n_q_heads=2, n_kv_heads=1, head_dim=8, d_ff=32,
                  max_len=64)


@pytest.fixture(scope="module")
def setup():
    params = lm.init(CFG, jax.random.key(0))
    prompts = jax.random.randint(jax.random.key(1), (6, 8), 32, 127)
    return params, prompts


def test_zero_delta_is_plain_sampling_bit_for_bit(setup):
    params, prompts = setup
    kw = dict(config=CFG, key=jax.random.key(2), num_bytes=24, temperature=0.7)
    plain = wm.generate(params, prompts, **kw)
    for name in ("kgw", "sweet", "ewd"):
        zero = wm.generate(params, prompts, processor=wm.Scheme(name), processor_params=0.0, **kw)
        np.testing.assert_array_equal(np.asarray(zero.tokens), np.asarray(plain.tokens))
    np.testing.assert_array_equal(np.asarray(plain.entropy),
                                  np.asarray(wm.generate(params, prompts, **kw).entropy))


def test_one_compile_for_keys_temperatures_and_deltas(setup):
    params, prompts = setup
    kw = dict(config=CFG, num_bytes=16, processor=wm.Scheme("kgw"))
    wm.generate(params, prompts, key=jax.random.key(0), processor_params=1.0, **kw)
    before = sampling._generate._cache_size()
    for i, d in enumerate((0.5, 2.0, 3.0)):
        wm.generate(params, prompts, key=jax.random.key(i), temperature=0.5 + i,
                    processor_params=d, **kw)
    assert sampling._generate._cache_size() == before


def test_kgw_bias_makes_text_detectable(setup):
    params, prompts = setup
    kw = dict(config=CFG, key=jax.random.key(3), num_bytes=48, temperature=1.0)
    marked = wm.generate(params, prompts, processor=wm.Scheme("kgw", delta=4.0), **kw)
    plain = wm.generate(params, prompts, **kw)

    def z(out):
        seq = jnp.concatenate([prompts[:, -1:], out.tokens], axis=1)
        return np.asarray(jax.vmap(lambda s: wm.kgw_z(s, key=wm.DEFAULT_KEY, gamma=0.5,
                                                      dedup=True))(seq))

    # an untrained LM at temperature 1 is near uniform: delta 4 puts ~98% of the mass on the
    # green half, so z ~ (0.98 - 0.5) sqrt(n) / 0.5 >> 4 for n ~ 40 distinct pairs
    assert z(marked).min() > 4 and abs(z(plain).mean()) < 2


def test_context_update_matches_context_ids():
    toks = jnp.array([[3, 250, 7, 9, 255, 1]], jnp.int32)
    for width in (1, 2, 3, 4):
        c = sampling.initial_context(toks[:, :2], width)
        want = wm.context_ids(toks, width)
        for t in range(2, 6):
            assert int(c[0]) == int(want[0, t])
            c = sampling.next_context(c, toks[:, t], width)


def test_codetracer_bias_is_delta_on_at_most_k_green_printable_bytes(setup):
    params, _ = setup
    pol = ct.policy_init(jax.random.key(4))
    tracer = ct.CodeTracer(delta=2.0, k=16)
    logits = jax.random.normal(jax.random.key(5), (32, 256))
    green = jax.vmap(lambda c: wm.green_mask(c, key=wm.DEFAULT_KEY, gamma=0.5))(
        jnp.arange(32, dtype=jnp.uint32))
    bias, aux = tracer(pol, logits, green, jax.random.key(6))
    b = np.asarray(bias)
    gate = np.asarray(aux["gate"])
    assert set(np.unique(b)) <= {0.0, 2.0}
    np.testing.assert_array_equal((b > 0).sum(1), 16 * gate)
    allowed = np.asarray(green) & np.asarray(wm.printable_mask())[None]
    assert not (b > 0)[~allowed].any()
    assert 0 < gate.mean() < 1 and np.isfinite(np.asarray(aux["logp"])).all()
    bias2, _ = tracer((pol, jnp.float32(3.0)), logits, green, jax.random.key(6))
    np.testing.assert_array_equal(np.asarray(bias2), 1.5 * b)  # traced delta


def test_codetracer_process_term_has_gradients_through_gate_and_topk():
    pol = ct.policy_init(jax.random.key(7))
    tracer = ct.CodeTracer(delta=2.0, k=4)
    logits = jax.random.normal(jax.random.key(8), (8, 256))
    green = jax.vmap(lambda c: wm.green_mask(c, key=1, gamma=0.5))(jnp.arange(8, dtype=jnp.uint32))

    def f(p):
        return jnp.sum(tracer(p, logits, green, jax.random.key(9))[1]["process"])

    g = jax.grad(f)(pol)
    norms = [float(jnp.abs(x).max()) for x in jax.tree.leaves(g)]
    assert all(np.isfinite(norms)) and max(norms) > 0


@pytest.mark.slow  # compiles the gradient through a whole generation; the tiny run covers it
def test_grpo_training_runs_and_reports(setup):
    params, prompts = setup
    cfg = ct.GRPOConfig(prompts_per_step=2, group=2, num_bytes=8)
    pol, hist = wm.train_codetracer(params, np.asarray(prompts), lm_config=CFG,
                                    key=jax.random.key(10), num_steps=2, config=cfg,
                                    progress=False)
    assert set(hist) >= {"loss", "reward", "validity", "z_dedup", "gate"}
    assert all(np.isfinite(v).all() for v in hist.values())
    assert jax.tree.structure(pol) == jax.tree.structure(ct.policy_init(jax.random.key(0)))


@pytest.mark.parametrize("kw,err,match", [
    (dict(num_bytes=0), ValueError, "num_bytes"),
    (dict(num_bytes=100), ValueError, "max_len"),
    (dict(temperature=0.0), ValueError, "temperature"),
    (dict(gamma=1.5), ValueError, "gamma"),
    (dict(context_width=5), ValueError, "context_width"),
    (dict(wm_key=-1), ValueError, "key"),
])
def test_generate_bad_input(setup, kw, err, match):
    params, prompts = setup
    args = dict(config=CFG, key=jax.random.key(0), num_bytes=8)
    args.update(kw)
    with pytest.raises(err, match=match):
        wm.generate(params, prompts, **args)


def test_scheme_bad_input():
    with pytest.raises(ValueError, match="delta"):
        wm.Scheme("kgw", delta=-1.0)
    with pytest.raises(ValueError, match="name"):
        wm.Scheme("unknown")
