"""REL transformer: token layout, it learns k = 1, repeated calls do not recompile, stacked
training equals separate runs (slow), jit / vmap of the scorer."""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxpapers import lm
from jaxpapers.benchmarks.rel import algebra as A
from jaxpapers.benchmarks.rel import model as M
from jaxpapers.core import train

KW = dict(rows=2, cols=4, steps=150, batch_size=32, lr=3e-3, d_model=16, n_layers=1)


def _ops():
    ops = np.zeros((2, 3), bool)
    ops[0, 0] = True       # k = 1
    ops[1, :2] = True      # k = 2
    return ops


def test_tokens_layout():
    g = jnp.array([[[1, 2, 3], [4, 5, -1]]])
    np.testing.assert_array_equal(M.tokens(g, 10), [[1, 2, 3, 11, 4, 5, 10]])


def test_learns_k1_deterministic_and_no_recompile():
    params, hist = M.train_rc_models(jax.random.key(2), _ops(), **KW)
    assert hist["loss_per_model"].shape == (150, 2)
    # k = 1 (one column of the query row is the answer) is learnt: loss far below log 8
    assert hist["loss_per_model"][-10:, 0].mean() < 0.5 * np.log(8)
    acc = M.accuracy(params, jax.random.key(3), _ops(), rows=2, cols=4, num=400, d_model=16,
                     n_layers=1)
    assert acc[0] > 0.8, acc
    compiled = train.run_chunk._cache_size()
    again, _ = M.train_rc_models(jax.random.key(2), _ops(), **KW)
    assert train.run_chunk._cache_size() == compiled  # the same program, not a new one
    chex.assert_trees_all_equal(params, again)


@pytest.mark.slow
def test_stacked_training_equals_alone_and_scorer_jit_vmap():
    both, _ = M.train_rc_models(jax.random.key(2), _ops(), **KW)
    # the scorer: jit(vmap over models) == per-model eager calls
    cfg = M.model_config(10, 2, 4, d_model=16, n_layers=1)
    d = A.generate_rc(jax.random.key(0), 8, k=1, rows=2, cols=4)
    eager = jnp.stack([M.choice_logits(jax.tree.map(lambda x, i=i: x[i], both), d["grid"],
                                       d["choices"], config=cfg) for i in range(2)])
    vm = jax.jit(jax.vmap(lambda p: M.choice_logits(p, d["grid"], d["choices"], config=cfg)))(
        both)
    chex.assert_trees_all_close(eager, vm, rtol=1e-5, atol=1e-5)
    alone, _ = M.train_rc_models(jax.random.key(2), _ops()[:1], **KW)
    chex.assert_trees_all_close(jax.tree.map(lambda x: x[0], both),
                                jax.tree.map(lambda x: x[0], alone), rtol=2e-4, atol=2e-5)


def test_bad_operands():
    with pytest.raises(ValueError, match="operands"):
        M.train_rc_models(jax.random.key(0), np.ones((2, 5), bool), rows=2, cols=4, steps=1)
    assert lm.LMConfig  # the decoder is the library's
