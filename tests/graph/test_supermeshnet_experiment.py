"""Pieces of experiments/supermeshnet: config checks, the split (no HR leak into the LR-only
pool), the per-model batch draws, and the stacked training step against one model alone."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

pytest.importorskip("skfem")

from experiments.supermeshnet import config as sc  # noqa: E402
from experiments.supermeshnet import run as sr  # noqa: E402
from jaxpapers.graph import supermeshnet as smn  # noqa: E402


@pytest.fixture(scope="module")
def tiny_data():
    cfg = dataclasses.replace(sc.tiny(), datasets=("laplace",))
    return cfg, sr.load_data(cfg)["laplace"]


@pytest.mark.parametrize("change", [dict(datasets=()), dict(datasets=("cube",)),
                                    dict(models=("knn", "gan")), dict(num_paired=1),
                                    dict(num_lr_only=0), dict(steps=0), dict(eval_every=500),
                                    dict(learning_rate=0.0), dict(hr_size=80.0)])
def test_bad_configs(change):
    with pytest.raises(ValueError):
        dataclasses.replace(sc.tiny(), **change)


def test_split_sizes_and_no_hr_in_the_lr_only_pool(tiny_data):
    cfg, d = tiny_data
    n = lambda s: jax.tree.leaves(s)[0].shape[0]  # noqa: E731
    assert (n(d["test"]), n(d["val"]), n(d["train"]), n(d["lr_only"])) == (
        cfg.num_test, cfg.num_val, cfg.num_paired + cfg.num_lr_only, cfg.num_lr_only)
    assert float(jnp.max(jnp.abs(d["lr_only"].hr_y))) == 0.0  # never built
    # the LR-only pool is the tail of the training pool (same LR inputs), whose HR fields exist
    np.testing.assert_array_equal(d["lr_only"].lr_y, d["train"].lr_y[cfg.num_paired:])
    assert float(jnp.max(jnp.abs(d["train"].hr_y[cfg.num_paired:]))) > 0.0
    # one padding for every split: the samples of a triplet stack
    shapes = {tuple(x.shape[1:] for x in jax.tree.leaves(d[k])) for k in
              ("test", "val", "train", "lr_only")}
    assert len(shapes) == 1


def test_batches_draw_distinct_pairs_from_each_models_pool(tiny_data):
    cfg, d = tiny_data
    keys = jax.random.key_data(jax.random.split(jax.random.key(0), 2))
    feed = {"train": d["train"], "lr_only": d["lr_only"], "keys": keys,
            "n_pairs": jnp.asarray([2, 8], jnp.int32)}
    draw = sr._Batches("complementary", 16)
    for step in range(5):
        s1, s2, s3 = draw(jnp.int32(step), feed)
        ids = lambda s: np.asarray(s.hr_y[..., 0])  # noqa: E731
        # model 0 may only see the first 2 pairs: their HR fields
        allowed = {float(x) for x in np.asarray(d["train"].hr_y[:2, 0])}
        assert set(ids(s1)[0].tolist()) <= allowed and set(ids(s2)[0].tolist()) <= allowed
        assert np.all(np.any(np.asarray(s1.hr_y != s2.hr_y), axis=-1))  # distinct pairs
        assert float(jnp.max(jnp.abs(s3.hr_y))) == 0.0
    sup = sr._Batches("supervised", 4)(jnp.int32(0), feed)
    assert sup.hr_y.shape[:2] == (2, 4)


def test_stacked_step_equals_each_model_alone(tiny_data):
    cfg, d = tiny_data
    one = jax.tree.map(lambda a: a[0], d["train"])
    ps = [smn.init(k, one, hidden=8, depth=1) for k in jax.random.split(jax.random.key(1), 2)]
    stacked = jax.tree.map(lambda *xs: jnp.stack(xs), *ps)
    batch = (jax.tree.map(lambda a: a[None, :2], d["train"]),
             jax.tree.map(lambda a: a[None, 2:4], d["train"]),
             jax.tree.map(lambda a: a[None, :2], d["lr_only"]))
    batch2 = jax.tree.map(lambda a: jnp.concatenate([a, a]), batch)
    loss_fn = sr._stacked_loss("complementary")
    # jitted: eager grads of the scanned trunk compile op by op (minutes)
    grads = jax.jit(jax.grad(lambda p, b: loss_fn(p, b, None)[0]))(stacked, batch2)
    one_grad = jax.jit(jax.grad(lambda q, b: smn.batch_loss(q, b)[0]))
    for i, p in enumerate(ps):
        gi = one_grad(p, jax.tree.map(lambda a: a[0], batch))
        for a, b in zip(jax.tree.leaves(gi), jax.tree.leaves(jax.tree.map(lambda x: x[i],
                                                                           grads))):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-7)


def test_knn_baseline_equals_numpy(tiny_data):
    _, d = tiny_data
    s = jax.tree.map(lambda a: np.asarray(a[0]), d["test"])
    lm, hm = s.lr_graph.node_mask, s.hr_graph.node_mask
    lp, ly, hp, hy = s.lr_pos[lm], s.lr_y[lm], s.hr_pos[hm], s.hr_y[hm]
    d2 = ((hp[:, None, :].astype(np.float64) - lp[None]) ** 2).sum(-1)
    idx = np.argsort(d2, axis=1, kind="stable")[:, :3]
    w = 1.0 / (np.take_along_axis(d2, idx, 1) + 1e-8)
    pred = (w * ly[idx]).sum(1) / w.sum(1)
    expect = np.sqrt(np.mean((pred - hy) ** 2))
    got = sr.knn_rmse(jax.tree.map(lambda a: a[:1], d["test"]))
    assert abs(got - expect) < 1e-5 * max(1.0, expect)
