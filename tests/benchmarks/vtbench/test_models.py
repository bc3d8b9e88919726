"""VT-Bench fusion models: embed/head split, Concat is additive (cannot represent an
interaction), input-level MUL and DAFT embeddings, training jit == eager, stacked seeds == seeds
apart, no recompilation, bad input."""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxpapers.benchmarks.vtbench import models as M
from jaxpapers.core import train

SHAPE = (8, 8, 1)
D = 5


def _inputs(n=6, key=0):
    k1, k2 = jax.random.split(jax.random.key(key))
    return jax.random.uniform(k1, (n,) + SHAPE), jax.random.normal(k2, (n, D))


def _cfg(kind, **kw):
    return M.ModelConfig(kind, 4, SHAPE, D, width=4, tab_width=8, hidden=8, **kw)


@pytest.mark.parametrize("kind", M.MODELS)
def test_embed_head_compose_to_apply_and_jit(kind):
    cfg = _cfg(kind)
    params = M.init(cfg, jax.random.key(1))
    img, tab = _inputs()
    out = M.apply(cfg, params, img, tab)
    assert out.shape == (6, 4)
    zi, zt = M.embed(cfg, params, img, tab)
    chex.assert_trees_all_close(M.head(cfg, params, zi, zt), out, rtol=1e-6, atol=1e-6)
    jitted = jax.jit(lambda p, a, b: M.apply(cfg, p, a, b))(params, img, tab)
    chex.assert_trees_all_close(jitted, out, rtol=1e-5, atol=1e-5)
    if kind == "mul":  # input-level embeddings: the flattened image and the raw table
        np.testing.assert_array_equal(zi, img.reshape(6, -1))
        np.testing.assert_array_equal(zt, tab)
    if kind == "daft":  # the last stage's map (2 x 2 x 4w) and the raw table (identity)
        assert zi.shape == (6, 2 * 2 * 16)
        np.testing.assert_array_equal(zt, tab)


@pytest.mark.parametrize("kind, additive", [("concat", True), ("image", True), ("table", True),
                                            ("concat_mlp", False), ("max", False),
                                            ("daft", False), ("mul", False)])
def test_only_concat_is_additive_in_the_modalities(kind, additive):
    """f(i1, t1) + f(i2, t2) == f(i1, t2) + f(i2, t1) for every output iff the head adds an
    image term and a table term (the reason Concat cannot fit y = (digit + shift) mod 10)."""
    cfg = _cfg(kind)
    params = M.init(cfg, jax.random.key(2))
    (i1, t1), (i2, t2) = _inputs(8, 3), _inputs(8, 4)

    def f(a, b):
        return M.apply(cfg, params, a, b)

    gap = jnp.abs(f(i1, t1) + f(i2, t2) - f(i1, t2) - f(i2, t1)).max()
    if additive:
        assert gap < 1e-5
    else:
        assert gap > 1e-3


def _data(n=40, tasks=2):
    rng = np.random.default_rng(0)
    img = rng.uniform(size=(n,) + SHAPE).astype(np.float32)
    tabs = rng.normal(size=(tasks, n, D)).astype(np.float32)
    ys = rng.integers(0, 4, (tasks, n)).astype(np.float32)
    ys[-1] = rng.normal(size=n)  # the last task is a regression
    return img, tabs, ys, np.arange(tasks) == tasks - 1


def test_stacked_seeds_equal_seeds_apart_and_no_recompile():
    img, tabs, ys, reg = _data()
    cfg = _cfg("concat_mlp")
    kw = dict(cfg=cfg, regression=reg, steps=15, batch_size=8, lr=1e-2)
    both, loss = M.train_models(jax.random.key(0), img, tabs, ys, seeds=(0, 1), **kw)
    assert loss.shape == (15, 4)
    assert np.isfinite(loss).all() and loss[-3:, 3].mean() < loss[:3, 3].mean()  # regression
    compiled = train.run_chunk._cache_size()
    alone1, _ = M.train_models(jax.random.key(0), img, tabs, ys, seeds=(1, 0), **kw)
    assert train.run_chunk._cache_size() == compiled  # new seed values, the same program
    # replica order is task-major: (t0 s0, t0 s1, t1 s0, t1 s1) vs (t0 s1, t0 s0, ...)
    perm = [1, 0, 3, 2]
    chex.assert_trees_all_close(jax.tree.map(lambda x: x[np.array(perm)], alone1), both,
                                rtol=1e-4, atol=1e-5)
    again, _ = M.train_models(jax.random.key(0), img, tabs, ys, seeds=(0, 1), **kw)
    chex.assert_trees_all_equal(again, both)  # same key, same bits
    out = M.predict_stacked(both, jnp.asarray(img), jnp.asarray(tabs), cfg=cfg)
    assert out.shape == (4, 40, 4)
    np.testing.assert_allclose(
        out[2], M.apply(cfg, jax.tree.map(lambda x: x[2], both), img, tabs[1]),
        rtol=1e-5, atol=1e-5)


def test_training_loss_and_gradient_jit_equal_eager():
    """The loss every replica trains (cross-entropy, or squared error for a regression task)
    and its gradient: jit == op-by-op eager, on the model with the fewest ops (eager dispatch
    compiles each op on its own); the stacked step around it is checked by the test above."""
    img, tabs, ys, reg = _data()
    cfg = _cfg("table")
    params = M.init(cfg, jax.random.key(0))
    for t in (0, 1):  # a classification and a regression task
        args = (jnp.asarray(img[:8]), jnp.asarray(tabs[t, :8]), jnp.asarray(ys[t, :8]),
                jnp.asarray(reg[t]))

        def value_grad(p, *a):
            return jax.value_and_grad(lambda q: M._loss(cfg, q, *a))(p)

        eager = value_grad(params, *args)
        jitted = jax.jit(value_grad)(params, *args)
        chex.assert_trees_all_close(jitted, eager, rtol=1e-5, atol=1e-6)
        out = M.apply(cfg, params, *args[:2])
        if t == 1:  # squared error on output 0
            np.testing.assert_allclose(eager[0], np.mean((out[:, 0] - args[2]) ** 2), rtol=1e-5)
        else:
            logp = jax.nn.log_softmax(out)
            want = -np.mean(np.take_along_axis(np.asarray(logp),
                                               np.asarray(args[2], int)[:, None], 1))
            np.testing.assert_allclose(eager[0], want, rtol=1e-5)


def test_bad_input():
    with pytest.raises(ValueError, match="model must be one of"):
        M.ModelConfig("vit", 4, SHAPE, D)
    with pytest.raises(ValueError, match="table_dim 0"):
        M.ModelConfig("concat", 4, SHAPE, 0)
    with pytest.raises(ValueError, match="image_shape"):
        M.ModelConfig("concat", 4, (8, 8), D)
    cfg = _cfg("concat")
    params = M.init(cfg, jax.random.key(0))
    img, tab = _inputs()
    with pytest.raises(ValueError, match="same rows"):
        M.apply(cfg, params, img, tab[:5])
    with pytest.raises(ValueError, match="table must be"):
        M.apply(cfg, params, img, tab[:, :4])
    with pytest.raises(ValueError, match="image must be"):
        M.apply(cfg, params, img[..., 0], tab)
    data = _data()
    with pytest.raises(ValueError, match="seeds"):
        M.train_models(jax.random.key(0), *data[:3], cfg=cfg, regression=data[3],
                       seeds=(0, 0), steps=2)
    with pytest.raises(ValueError, match="must agree"):
        M.train_models(jax.random.key(0), data[0], data[1], data[2][:1], cfg=cfg,
                       regression=data[3], seeds=(0,), steps=2)
