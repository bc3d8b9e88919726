"""The TDM-R1 digits experiment's pieces: the reward rule on hand-made images, the ink
thresholds vs numpy, the exported classifier vs sklearn (also through ``host_reward``), the
config checks, and the TDM stage + vmapped RL runs on a tiny model (cached == fresh, vmap ==
loop). The whole ``--scale tiny`` run is covered by ``tests/core/test_tiny_runs.py``."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from experiments.common import digits
from experiments.tdm_r1 import config as cfg_mod
from experiments.tdm_r1 import run as tdm_run
from jaxpapers import diffusion as dfn


@pytest.fixture(scope="module")
def data():
    x_tr, y_tr, x_ho, y_ho = digits.load_digits(0.4, 0)
    return x_tr.astype(np.float32), y_tr, x_ho.astype(np.float32), y_ho


def _template_logits(x_tr, y_tr):
    """A hand-checkable classifier: logits = correlation with each class's mean image."""
    means = np.stack([x_tr[y_tr == c].mean(0) for c in range(10)])
    w = jnp.asarray(means - means.mean(1, keepdims=True)).T  # [64, 10]
    return lambda images: images @ w


def test_reward_rule_on_hand_made_images(data):
    x_tr, y_tr, _, _ = data
    logits = _template_logits(x_tr, y_tr)
    thr = tdm_run.ink_thresholds(x_tr, y_tr, 75.0)
    reward = jax.jit(tdm_run.make_reward(logits, thr))
    mean3 = x_tr[y_tr == 3].mean(0)
    bold = np.where(mean3 > -0.6, 1.0, -1.0).astype(np.float32)  # the 3's strokes, thick
    faint = np.where(mean3 > -0.6, -0.2, -1.0).astype(np.float32)  # same shape, no pixel > 0
    assert int(tdm_run.ink_count(bold)) >= float(thr[3]) and int(tdm_run.ink_count(faint)) == 0
    imgs = jnp.asarray(np.stack([bold, faint, bold, 1.7 * bold]))
    assert np.asarray(jnp.argmax(logits(jnp.clip(imgs, -1, 1)), -1)).tolist() == [3, 3, 3, 3]
    got = reward(imgs, jnp.array([3, 3, 5, 3]))
    # right digit + bold -> 1; faint -> 0; wrong prompt -> 0; out of range is clipped first
    assert np.asarray(got).tolist() == [1.0, 0.0, 0.0, 1.0] and got.dtype == jnp.float32
    # the threshold is inclusive: exactly threshold-many inked pixels pass, one fewer fails
    t = int(np.ceil(float(thr[3])))
    order = np.argsort(-mean3)
    for n, want in ((t, 1.0), (t - 1, 0.0)):
        img = np.full(64, -1.0, np.float32)
        img[order[:n]] = 0.5
        assert int(jnp.argmax(logits(jnp.asarray(img)))) == 3
        assert float(reward(jnp.asarray(img[None]), jnp.array([3]))[0]) == want


def test_ink_thresholds_match_numpy_percentile(key):
    k1, k2 = jax.random.split(key)
    x = np.asarray(jax.random.uniform(k1, (500, 64), minval=-1.0, maxval=1.0)) ** 3
    y = np.asarray(jax.random.randint(k2, (500,), 0, 10))
    ink = (x > 0).sum(1)
    wants = []
    for q in (75.0, 50.0, 90.0):
        want = np.array([np.percentile(ink[y == c], q) for c in range(10)])
        got = np.asarray(jax.jit(tdm_run.ink_thresholds, static_argnums=(2,))(x, y, q))
        np.testing.assert_allclose(got, want, rtol=1e-6)
        wants.append(want)
    wants = np.concatenate(wants)
    assert not np.allclose(wants, wants.round())  # some interpolated values: a real check


def test_exported_classifier_matches_sklearn_and_host_reward(data):
    x_tr, y_tr, x_ho, y_ho = data
    clf = tdm_run.fit_reward_classifier(x_tr, y_tr, hidden=(32,), max_iter=200, seed=0)
    logits = tdm_run.mlp_logits_fn(clf)
    pred = np.asarray(jnp.argmax(logits(jnp.asarray(x_ho)), -1))
    np.testing.assert_array_equal(pred, clf.predict(x_ho))
    assert clf.score(x_ho, y_ho) > 0.9
    thr = tdm_run.ink_thresholds(x_tr, y_tr, 75.0)
    reward = tdm_run.make_reward(logits, thr)
    thr_np = np.asarray(thr)

    def host(images, labels):  # the same rule in NumPy + sklearn, on the host
        x = np.clip(images, -1.0, 1.0)
        return (clf.predict(x) == labels) & ((x > 0).sum(1) >= thr_np[labels])

    noisy = jnp.asarray(x_ho[:200]) + 0.3 * jax.random.normal(jax.random.key(1), (200, 64))
    labels = jnp.asarray(y_ho[:200]).at[::7].set(0)  # some wrong prompts too
    want = reward(noisy, labels)
    got = jax.jit(dfn.host_reward(host))(noisy, labels)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    assert 0.05 < float(want.mean()) < 0.6
    # on real digits roughly a quarter pass: the 75th percentile of ink, times the accuracy
    assert 0.15 < float(reward(jnp.asarray(x_ho), jnp.asarray(y_ho)).mean()) < 0.4


@pytest.mark.parametrize("bad", [dict(ink_percentile=120.0), dict(num_boundaries=5),
                                 dict(group_size=1), dict(variants=("tdm_r1", "ppo")),
                                 dict(variants=("tdm_only",)), dict(n_eval=15),
                                 dict(num_seeds=0), dict(steps=1), dict(lr_gen=0.0),
                                 dict(test_fraction=1.0), dict(sigma_min=30.0)])
def test_config_rejects_bad_values(bad):
    with pytest.raises(ValueError, match=next(iter(bad)).split("_")[0]):
        dataclasses.replace(cfg_mod.small(), **bad)


def test_configs_are_valid():
    for make in (cfg_mod.tiny, cfg_mod.small, cfg_mod.full):
        c = make()
        assert "tdm_r1" in c.variants and c.num_seeds >= 2
    assert cfg_mod.small().group_size == 16 and cfg_mod.small().rl_iters == 300
    assert cfg_mod.full().num_seeds == 5 and cfg_mod.full().group_size == 24


def test_tdm_stage_cached_and_variants_vmapped_equal_loop(data, tmp_path, monkeypatch):
    """Tiny random models: the TDM stage cached == fresh (bit for bit), and the vmapped runs of
    every variant x seed equal one run of the same variant and seed keys alone."""
    monkeypatch.setenv("JAXPAPERS_CACHE", str(tmp_path))
    x_tr, y_tr, _, _ = data
    cfg = dataclasses.replace(cfg_mod.tiny(), hidden=16, depth=1, tdm_iters=2, rl_iters=2,
                              variants=("tdm_r1", "tdm_only"), num_seeds=2, group_size=2)
    init = lambda k: dfn.init_mlp(k, dim=64, num_classes=10, hidden=16, depth=1)  # noqa
    teacher, student = init(jax.random.key(1)), init(jax.random.key(2))
    reward = tdm_run.make_reward(_template_logits(x_tr, y_tr),
                                 tdm_run.ink_thresholds(x_tr, y_tr, 50.0))
    tdm, one, many = tdm_run.make_trainer(cfg, reward)
    k_tdm, k_rl = jax.random.split(jax.random.key(3))
    first = tdm_run.tdm_stage(cfg, tdm, one, student, teacher, k_tdm)
    again = tdm_run.tdm_stage(cfg, tdm, one, student, teacher, k_tdm)
    assert not first["cached"] and again["cached"]
    for a, b in zip(jax.tree.leaves(first["gen"]), jax.tree.leaves(again["gen"])):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    moved = [np.abs(np.asarray(a) - np.asarray(b)).max()
             for a, b in zip(jax.tree.leaves(first["gen"]), jax.tree.leaves(student))]
    assert max(moved) > 0  # the TDM stage trained G
    checkpoints, curves, names = tdm_run.run_variants(cfg, tdm, many, first["gen"], teacher,
                                                      k_rl)
    assert names == ["tdm_r1", "tdm_r1", "tdm_only", "tdm_only"]
    assert [it for it, _ in checkpoints] == [2]
    ema = checkpoints[-1][1]
    assert curves["reward"].shape == (2, 4)
    # run 3 = tdm_only, seed 1: alone, with seed 1's keys
    keys = jax.random.split(jax.random.split(k_rl, 2)[1], cfg.rl_iters)
    state, alone = one(tdm.init(first["gen"], teacher), teacher, keys,
                       dfn.tdm_r1_params("tdm_only", lr_gen=cfg.lr_gen, lr_fake=cfg.lr_fake,
                                         lr_sur=cfg.lr_sur))
    # float32; batching may reorder a few reductions (ulp-level differences)
    for a, b in zip(jax.tree.leaves(jax.tree.map(lambda v: v[3], ema)),
                    jax.tree.leaves(state.gen_ema)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(curves["reward"][:, 3], np.asarray(alone["reward"]), atol=1e-6)
    # seeds are paired across variants: the first rollout (from the same start) is identical
    np.testing.assert_array_equal(curves["reward"][0, :2], curves["reward"][0, 2:])
