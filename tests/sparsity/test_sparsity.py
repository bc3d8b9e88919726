"""Activation sparsity on the byte LM (TEAL / CATS / mean compensation / SPON).

Checked against an independent float64 NumPy transformer (tests/sparsity/_reference.py) and
numpy's quantile; seeds are fixed integers.
"""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxpapers import lm, sparsity as S
from tests.sparsity import _reference as ref

CFG = lm.LMConfig(d_model=16, n_layers=2, n_q_heads=4, n_kv_heads=2, head_dim=4, d_ff=24,
                  max_len=24)


def _params(seed=0, biases=False, dtype=jnp.float32):
    p = lm.init(CFG, jax.random.key(seed))
    if biases:
        keys = iter(jax.random.split(jax.random.key(seed + 100), 7))
        for w, b in lm.model.BIASES.items():
            out = p["layers"][w].shape[-1]
            p["layers"][b] = 0.1 * jax.random.normal(next(keys), (CFG.n_layers, out))
    return jax.tree.map(lambda a: a.astype(dtype), p)


def _tokens(seed=1, b=3, t=20):
    return jax.random.randint(jax.random.key(seed), (b, t), 0, 256)


def _random_sparsity(seed=2, sites=S.TEAL_SITES, shift=True, dtype=jnp.float32):
    rng = np.random.default_rng(seed)
    thr = {s: jnp.asarray(rng.uniform(0.05, 0.4, CFG.n_layers), dtype) for s in sites}
    out = {"threshold": thr}
    if shift:
        out["shift"] = {s: jnp.asarray(0.05 * rng.normal(size=(CFG.n_layers,
                                                                lm.site_width(CFG, s))), dtype)
                        for s in sites if s in lm.SHIFT_SITES}
    return out


# ----------------------------------------------------------------------------- thresholds

@pytest.mark.parametrize("shape,level", [((7,), 0.0), ((3, 50), 0.5), ((4, 9, 11), 0.73),
                                         ((1000,), 0.999), ((2, 2), 0.25)])
def test_magnitude_threshold_is_numpy_quantile_in_float64(shape, level):
    x = np.random.default_rng(len(shape) * 31 + int(level * 1000)).normal(size=shape)
    want = np.quantile(np.abs(x), level)
    with jax.enable_x64(True):
        got = S.magnitude_threshold(jnp.asarray(x, jnp.float64), level)
        assert got.dtype == jnp.float64
        assert float(got) == want
    got32 = S.magnitude_threshold(jnp.asarray(x, jnp.float32), level)
    want32 = np.quantile(np.abs(x.astype(np.float32)).astype(np.float64), level)
    np.testing.assert_allclose(float(got32), want32, rtol=2e-7)


def test_magnitude_threshold_zeroes_the_requested_fraction_and_traces():
    x = jax.random.normal(jax.random.key(3), (64, 32))
    tau = S.magnitude_threshold(x, 0.6)
    assert abs(float(jnp.mean(jnp.abs(x) <= tau)) - 0.6) <= 1 / x.size
    traced = jax.jit(S.magnitude_threshold)(x, 0.6)  # traced level: index on device
    np.testing.assert_allclose(float(traced), float(tau), rtol=1e-6)
    batched = jax.vmap(S.magnitude_threshold, in_axes=(0, None))(x, 0.5)
    np.testing.assert_allclose(np.asarray(batched),
                               np.quantile(np.abs(np.asarray(x)), 0.5, axis=1), rtol=1e-6)


@pytest.mark.parametrize("bad,err", [(1.0, ValueError), (-0.1, ValueError),
                                     (float("nan"), ValueError), (True, TypeError)])
def test_magnitude_threshold_rejects_bad_levels(bad, err):
    with pytest.raises(err, match="sparsity"):
        S.magnitude_threshold(jnp.ones(4), bad)


def test_magnitude_threshold_rejects_bad_x():
    with pytest.raises(TypeError, match="x"):
        S.magnitude_threshold(jnp.arange(4), 0.5)
    with pytest.raises(ValueError, match="x"):
        S.magnitude_threshold(jnp.zeros((0,)), 0.5)
    with pytest.raises(ValueError, match="x"):
        S.magnitude_threshold(jnp.array([1.0, jnp.nan]), 0.5)


# ----------------------------------------------------------------------------- the sparse model

def test_sparse_forward_matches_numpy_reference_with_biases_float64():
    with jax.enable_x64(True):
        params = _params(biases=True, dtype=jnp.float64)
        sp = _random_sparsity(dtype=jnp.float64)
        sp["threshold"]["mlp_gate"] = jnp.array([0.02, 0.05], jnp.float64)
        tokens = _tokens()
        got = lm.forward(params, tokens, config=CFG, sparsity=sp)
        assert got.dtype == jnp.float64
        want = ref.forward(params, tokens, CFG, sp)
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-10, atol=1e-10)
        dense = ref.forward(params, tokens, CFG)
        np.testing.assert_allclose(np.asarray(lm.forward(params, tokens, config=CFG)), dense,
                                   rtol=1e-10, atol=1e-10)
        assert np.abs(want - dense).max() > 1e-3  # the sparsity did something


def test_no_sparsity_is_bit_identical():
    params, tokens = _params(), _tokens()
    dense = np.asarray(lm.forward(params, tokens, config=CFG))
    for sp in (None, {}, {"threshold": {}}, {"threshold": {}, "shift": {}}):
        np.testing.assert_array_equal(np.asarray(lm.forward(params, tokens, config=CFG,
                                                            sparsity=sp)), dense)


def test_sparse_forward_equals_sparse_prefill_plus_decode():
    with jax.enable_x64(True):
        params = _params(biases=True, dtype=jnp.float64)
        sp = _random_sparsity(dtype=jnp.float64)
        tokens = _tokens(t=12)
        full = lm.forward(params, tokens, config=CFG, sparsity=sp)
        logits, cache = lm.prefill(params, tokens[:, :7], config=CFG, max_len=12, sparsity=sp)
        np.testing.assert_allclose(np.asarray(logits), np.asarray(full[:, :7]), atol=1e-10)
        for t in range(7, 12):
            step, cache = lm.decode_step(params, cache, tokens[:, t], config=CFG, sparsity=sp)
            np.testing.assert_allclose(np.asarray(step), np.asarray(full[:, t]), atol=1e-10)
        dec = lm.bits_per_byte_decode(params, tokens, config=CFG, prefix_len=4, sparsity=sp)
        tf = lm.bits_per_byte(params, tokens, config=CFG, start=3, sparsity=sp)
        np.testing.assert_allclose(float(dec), float(tf), rtol=1e-12)


def test_thresholds_are_traced_one_compile_per_structure():
    params, tokens = _params(), _tokens()
    lm.forward(params, tokens, config=CFG, sparsity=_random_sparsity(0))
    before = lm.model._forward._cache_size()
    for seed in (1, 2, 3):
        lm.forward(params, tokens, config=CFG, sparsity=_random_sparsity(seed))
    assert lm.model._forward._cache_size() == before


def test_vmap_over_levels_equals_a_loop():
    params, tokens = _params(), _tokens()
    sps = [_random_sparsity(s) for s in (4, 5, 6)]
    stacked = jax.tree.map(lambda *a: jnp.stack(a), *sps)
    out = jax.vmap(lambda sp: lm.model._forward_impl(params, tokens, CFG, sp))(stacked)
    for i, sp in enumerate(sps):
        np.testing.assert_allclose(np.asarray(out[i]),
                                   np.asarray(lm.forward(params, tokens, config=CFG, sparsity=sp)),
                                   rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("sp,err,match", [
    ({"threshold": {"mlp_out": jnp.zeros(2)}}, ValueError, "unknown site"),
    ({"shift": {"mlp_gate": jnp.zeros((2, 24))}}, ValueError, "mlp_gate"),
    ({"shift": {"attn_in": jnp.zeros((2, 15))}}, ValueError, "attn_in"),
    ({"threshold": {"attn_in": jnp.array([0.1, jnp.nan])}}, ValueError, "NaN"),
    ({"threshold": {"attn_in": jnp.array([0.1, -1.0])}}, ValueError, ">= 0"),
    ({"threshold": {"attn_in": jnp.zeros(3)}}, ValueError, "shape"),
    ({"thresholds": {}}, ValueError, "unknown keys"),
    ({"threshold": {"attn_in": jnp.zeros(2, jnp.int32)}}, TypeError, "floating"),
    ([1, 2], TypeError, "sparsity"),
])
def test_bad_sparsity_names_the_entry(sp, err, match):
    with pytest.raises(err, match=match):
        lm.forward(_params(), _tokens(), config=CFG, sparsity=sp)


def test_bias_of_the_wrong_shape_is_refused():
    params = _params()
    params["layers"]["bq"] = jnp.zeros((2, 3))
    with pytest.raises(ValueError, match="bq"):
        lm.forward(params, _tokens(), config=CFG)


# ----------------------------------------------------------------------------- calibration

def _record(params, tokens, sp):
    rec = {}
    ref.forward(params, tokens, CFG, sp, record=rec)
    return rec


def test_sequential_calibration_is_the_quantile_with_earlier_sites_sparse():
    with jax.enable_x64(True):
        params = _params(dtype=jnp.float64)
        tokens = _tokens(b=4, t=24)
        # levels whose quantile falls strictly between two order statistics (no entry sits
        # exactly at tau, where 1e-15 differences between two implementations flip a mask)
        levels = {"attn_in": 0.41, "attn_out": 0.67, "mlp_in": 0.53, "mlp_hidden": 0.61}
        shift = _random_sparsity(7, dtype=jnp.float64)["shift"]
        sp = S.calibrate(params, tokens, config=CFG, sparsity=levels, shift=shift)
        assert sp["shift"] is not shift and set(sp["shift"]) == set(shift)
        rec = _record(params, tokens, sp)  # activations under the calibrated sparsity
        for (layer, site), act in rec.items():
            if site in levels:
                want = np.quantile(np.abs(act), levels[site])
                np.testing.assert_allclose(float(sp["threshold"][site][layer]), want,
                                           rtol=1e-12)
        z = S.achieved_sparsity(params, tokens, config=CFG, sparsity=sp)
        for site, level in levels.items():
            np.testing.assert_allclose(np.asarray(z[site]), level, atol=2 / act.size * 100)


def test_dense_calibration_uses_dense_activations():
    with jax.enable_x64(True):
        params, tokens = _params(dtype=jnp.float64), _tokens(b=4, t=24)
        sp = S.calibrate_dense(params, tokens, config=CFG, sparsity=0.5)
        rec = _record(params, tokens, None)
        for site in S.TEAL_SITES:
            for layer in range(CFG.n_layers):
                np.testing.assert_allclose(float(sp["threshold"][site][layer]),
                                           np.quantile(np.abs(rec[(layer, site)]), 0.5),
                                           rtol=1e-12)
        assert sp["shift"] == {}


@pytest.mark.parametrize("calibration", ["sequential", "dense"])
def test_mean_compensation_restores_the_channel_means(calibration):
    with jax.enable_x64(True):
        params, tokens = _params(dtype=jnp.float64), _tokens(b=4, t=24)
        sp = S.mean_compensation(params, tokens, config=CFG, sparsity=0.55,  # no entry at tau
                                 calibration=calibration)
        rec = _record(params, tokens, sp if calibration == "sequential" else None)
        for site in S.TEAL_SITES:
            for layer in range(CFG.n_layers):
                act = rec[(layer, site)].reshape(-1, lm.site_width(CFG, site))
                tau = float(sp["threshold"][site][layer])
                np.testing.assert_allclose(tau, np.quantile(np.abs(act), 0.55), rtol=1e-12)
                kept = np.where(np.abs(act) > tau, act, 0.0)
                np.testing.assert_allclose(np.asarray(sp["shift"][site][layer]),
                                           (act - kept).mean(0), atol=1e-12)


def test_cats_calibrates_the_gate_only():
    params, tokens = _params(), _tokens()
    sp = S.calibrate(params, tokens, config=CFG, sparsity=0.5, sites=S.CATS_SITES)
    assert set(sp["threshold"]) == {"mlp_gate"}
    z = S.achieved_sparsity(params, tokens, config=CFG, sparsity=sp)
    np.testing.assert_allclose(np.asarray(z["mlp_gate"]), 0.5, atol=0.01)


@pytest.mark.parametrize("bad,err", [(1.0, ValueError), ({"mlp_out": 0.5}, ValueError),
                                     ({"attn_in": -0.2}, ValueError), ({}, ValueError)])
def test_calibration_rejects_bad_levels(bad, err):
    with pytest.raises(err, match="sparsity"):
        S.calibrate(_params(), _tokens(), config=CFG, sparsity=bad)


def test_weight_reads_skipped_closed_forms():
    c = CFG
    d, f = c.d_model, c.d_ff
    dq, dk = c.n_q_heads * c.head_dim, c.n_kv_heads * c.head_dim
    total = d * (dq + 2 * dk) + dq * d + 3 * d * f
    assert S.weight_reads_skipped(c, {s: np.ones(2) for s in S.TEAL_SITES}) == pytest.approx(1.0)
    assert S.weight_reads_skipped(c, {s: np.zeros(2) for s in S.TEAL_SITES}) == 0.0
    # CATS at 50%: half of w_up's columns and of w_down's rows
    assert S.weight_reads_skipped(c, {"mlp_gate": np.full(2, 0.5)}) == pytest.approx(
        0.5 * 2 * d * f / total)
    assert S.weight_reads_skipped(c, {"attn_out": np.array([0.2, 0.4])}) == pytest.approx(
        0.3 * dq * d / total)


def test_hidden_state_error_zero_when_dense():
    params, tokens = _params(), _tokens()
    err = S.hidden_state_error(params, tokens, config=CFG, sparsity={"threshold": {}})
    np.testing.assert_array_equal(np.asarray(err), 0.0)
    err = S.hidden_state_error(params, tokens, config=CFG, sparsity=_random_sparsity())
    assert err.shape == (CFG.n_layers,) and bool(jnp.all(err > 0))


# ----------------------------------------------------------------------------- absorb and SPON

def test_absorb_is_exact_per_layer_with_recorded_masks():
    params = _params(biases=True)
    shift = _random_sparsity(8)["shift"]
    new = S.absorb(params, shift)
    assert "bq" in new["layers"] and new["layers"] is not params["layers"]
    rng = np.random.default_rng(9)
    for site, mats in S.FEEDS.items():
        for layer in range(CFG.n_layers):
            xt = rng.normal(size=(5, lm.site_width(CFG, site))).astype(np.float32)
            xt[rng.random(xt.shape) < 0.5] = 0.0  # a recorded mask
            s = np.asarray(shift[site][layer])
            for w in mats:
                W = np.asarray(params["layers"][w][layer])
                b = np.asarray(params["layers"][lm.model.BIASES[w]][layer])
                lhs = (xt + s) @ W + b
                rhs = xt @ W + np.asarray(new["layers"][lm.model.BIASES[w]][layer])
                np.testing.assert_allclose(lhs, rhs, atol=1e-5)


def test_absorb_end_to_end_float64_and_leaves_input_untouched():
    with jax.enable_x64(True):
        params = _params(dtype=jnp.float64)
        before = jax.tree.map(np.asarray, params)
        sp = _random_sparsity(10, dtype=jnp.float64)
        new = S.absorb(params, sp["shift"])
        a = lm.forward(params, _tokens(), config=CFG, sparsity=sp)
        b = lm.forward(new, _tokens(), config=CFG, sparsity={"threshold": sp["threshold"]})
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-9)
        assert set(params["layers"]) == set(before["layers"])  # no bias added to the input
        chex.assert_trees_all_equal(jax.tree.map(np.asarray, params), before)


def test_absorb_rejects_bad_shift():
    with pytest.raises(ValueError, match="shift"):
        S.absorb(_params(), {"attn_in": jnp.zeros((2, 5))})
    with pytest.raises(ValueError, match="unknown site"):
        S.absorb(_params(), {"mlp_gate": jnp.zeros((2, 24))})


def test_spon_loss_zero_when_nothing_is_sparse_and_has_a_gradient_otherwise():
    params, tokens = _params(), _tokens()
    zero_thr = {s: jnp.zeros(2) for s in S.TEAL_SITES}
    zero_shift = {s: jnp.zeros((2, lm.site_width(CFG, s))) for s in S.TEAL_SITES}
    assert float(S.spon_loss(zero_shift, params, tokens, config=CFG, threshold=zero_thr)) == 0.0
    thr = _random_sparsity(11, shift=False)["threshold"]
    loss, grad = jax.value_and_grad(S.spon_loss)(zero_shift, params, tokens, config=CFG,
                                                 threshold=thr)
    assert float(loss) > 0
    assert all(float(jnp.abs(g).max()) > 0 for g in grad.values())


def _train_tokens():
    return np.asarray(jax.random.randint(jax.random.key(12), (4000,), 0, 256), np.uint8)


def test_train_spon_reduces_kl_and_levels_train_as_separate_runs():
    params = _params()
    calib = _tokens(b=4, t=24)
    thr = [S.calibrate(params, calib, config=CFG, sparsity=lvl)["threshold"] for lvl in (0.5, 0.7)]
    stacked = {s: jnp.stack([t[s] for t in thr]) for s in thr[0]}
    kw = dict(config=CFG, key=jax.random.key(13), num_steps=30, batch_size=4, seq_len=16,
              learning_rate=1e-2, progress=False)
    shift, hist = S.train_spon(params, stacked, _train_tokens(), **kw)
    assert shift["attn_in"].shape == (2, CFG.n_layers, CFG.d_model)
    held = _tokens(seed=15, b=4, t=16)
    for i in range(2):
        kl = hist[f"kl/{i}"]
        assert kl[-5:].mean() < kl[:5].mean()
        trained = {s: v[i] for s, v in shift.items()}
        zero = jax.tree.map(jnp.zeros_like, trained)
        after = S.spon_loss(trained, params, held, config=CFG, threshold=thr[i])
        before = S.spon_loss(zero, params, held, config=CFG, threshold=thr[i])
        assert float(after) < float(before)
        alone, h1 = S.train_spon(params, thr[i], _train_tokens(), **kw)
        chex.assert_trees_all_close(alone, {s: v[i] for s, v in shift.items()},
                                    rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(h1["loss"], kl, rtol=1e-4)


def test_train_spon_data_parallel_equals_single_device():
    from jaxpapers.core import sharding

    params = _params()
    thr = S.calibrate(params, _tokens(b=4, t=24), config=CFG, sparsity=0.6)["threshold"]
    kw = dict(config=CFG, key=jax.random.key(14), num_steps=6, batch_size=8, seq_len=16,
              progress=False)
    single, _ = S.train_spon(params, thr, _train_tokens(), **kw)
    mesh = sharding.data_parallel_mesh(8)
    multi, _ = S.train_spon(params, thr, _train_tokens(), mesh=mesh, **kw)
    chex.assert_trees_all_close(jax.device_get(multi), jax.device_get(single), rtol=1e-4,
                                atol=1e-6)


@pytest.mark.parametrize("kw,err,match", [
    (dict(threshold={}), ValueError, "threshold"),
    (dict(sites=("mlp_gate",)), ValueError, "sites"),
    (dict(num_steps=-1), ValueError, "num_steps"),
    (dict(seq_len=100), ValueError, "seq_len"),
    (dict(train_tokens=np.zeros(10, np.uint8)), ValueError, "train_tokens"),
    (dict(train_tokens=np.zeros(100, np.float32)), TypeError, "train_tokens"),
])
def test_train_spon_bad_input(kw, err, match):
    args = dict(threshold={"attn_in": jnp.full(2, 0.1)}, train_tokens=_train_tokens())
    args.update({k: v for k, v in kw.items() if k in args})
    rest = {k: v for k, v in kw.items() if k not in args}
    with pytest.raises(err, match=match):
        S.train_spon(_params(), args["threshold"], args["train_tokens"], config=CFG,
                     key=jax.random.key(0), progress=False, **{"seq_len": 16, **rest})
