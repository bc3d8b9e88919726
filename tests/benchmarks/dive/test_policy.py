"""DIVE next-tool policy: jit == eager, stacked training == separate runs, no recompile."""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxpapers.benchmarks.dive import policy as pol
from jaxpapers.benchmarks.dive.synth import synthesize


@pytest.fixture(scope="module")
def data():
    tasks = synthesize(40, seed=5)
    return tasks, pol.decisions(tasks, dim=64)


def test_decisions_shapes_and_labels(data):
    tasks, d = data
    b = sum(len(t["program"]) + 1 for t in tasks)
    assert d["q"].shape == (b, 64) and d["tools"].shape == (b, pol.MAX_TOOLS, 64)
    assert d["mask"].shape == (b, pol.MAX_TOOLS) and d["label"].shape == (b,)
    assert np.sum(d["label"] == pol.STOP) == len(tasks)
    ok = d["label"] == pol.STOP
    ok |= d["mask"][np.arange(b), np.minimum(d["label"], pol.MAX_TOOLS - 1)]
    assert ok.all()  # every tool label is an offered slot


def test_logits_jit_equals_eager_and_vmap_equals_loop(data):
    _, d = data
    params = pol.init_params(jax.random.key(0), dim=64, hidden=8)
    args = [jnp.asarray(d[k][:6]) for k in ("q", "tools", "state", "mask")]
    eager = [pol.logits(params, *(a[i] for a in args)) for i in range(6)]
    jitted = jax.jit(jax.vmap(pol.logits, in_axes=(None, 0, 0, 0, 0)))(params, *args)
    chex.assert_trees_all_close(jnp.stack(eager), jitted, rtol=1e-5, atol=1e-6)
    assert bool(jnp.all(jnp.isinf(jitted[:, :-1]) == ~args[3]))


def test_stacked_training_equals_separate_runs(data):
    """Model 0 of a stacked run (two ranges x two seeds) equals the same model trained alone."""
    _, d = data
    n = d["label"].shape[0]
    key = jax.random.key(3)
    kw = dict(steps=8, batch_size=8, hidden=8)
    both, _ = pol.train_policy(d, key, ranges=[(0, n // 2), (n // 2, n - n // 2)],
                               num_seeds=2, **kw)
    alone, _ = pol.train_policy(d, key, ranges=[(0, n // 2)], num_seeds=1, **kw)
    assert jax.tree.leaves(both)[0].shape[0] == 4
    chex.assert_trees_all_close(jax.tree.map(lambda x: x[0], both),
                                jax.tree.map(lambda x: x[0], alone), rtol=1e-5, atol=1e-6)
    # and the models differ from each other (own seeds and data)
    assert not np.allclose(both["tool1"]["q"][0], both["tool1"]["q"][1])


def test_training_lowers_the_loss_and_compiles_once(data):
    _, d = data
    fn = chex.assert_max_traces(pol.loss_fn, n=1)  # a second trace would raise
    batch = {k: jnp.asarray(v[:16]) for k, v in d.items()}
    jitted = jax.jit(fn)
    jitted(pol.init_params(jax.random.key(1), dim=64, hidden=8), batch)
    jitted(pol.init_params(jax.random.key(2), dim=64, hidden=8), batch)
    _, hist = pol.train_policy(d, jax.random.key(4), num_seeds=2, steps=60, batch_size=32,
                               hidden=16)
    assert hist["loss"][-10:].mean() < hist["loss"][:5].mean()


def test_bad_ranges(data):
    _, d = data
    with pytest.raises(ValueError, match="ranges"):
        pol.train_policy(d, jax.random.key(0), ranges=[(0, 0)], steps=1)


def test_overlap_features_count_shared_buckets(data):
    """With only the overlap weights set (to 1), a tool's score is the number of hashed buckets
    its spec shares with the question plus those it shares with the state: the terms that let
    a policy match question words to a tool it never saw in training."""
    tasks, _ = data
    d = pol.decisions(tasks[:3], dim=pol.DIM)
    params = jax.tree.map(jnp.zeros_like, pol.init_params(jax.random.key(0), hidden=1))
    for name in ("qt", "st"):
        params["tool1"][name] = jnp.ones_like(params["tool1"][name])
    params["tool2"]["w"] = jnp.ones_like(params["tool2"]["w"])
    for i in range(d["label"].shape[0]):
        q, tools, state, mask = (d[k][i] for k in ("q", "tools", "state", "mask"))
        lg = np.asarray(pol.logits(params, q, tools, state, mask))
        want = ((q > 0) & (tools > 0)).sum(1) + ((state > 0) & (tools > 0)).sum(1)
        np.testing.assert_array_equal(lg[:-1][mask], want[mask])
        assert np.all(np.isneginf(lg[:-1][~mask]))
    # the flow token: the state's last type is shared with tools taking it first
    spec = pol.registry()[tasks[0]["program"][0]["tool"]].spec
    first = next(iter(spec.parameters["properties"].values()))["x-type"]
    assert f"flow_{first}" in pol._tool_words(spec)
    assert f"flow_{first}" in pol._state_words(first, 0)


def test_rollout_many_equals_single_rollouts_and_error_kinds(data):
    tasks, d = data
    params, _ = pol.train_policy(d, jax.random.key(7), num_seeds=3, steps=30, batch_size=16,
                                 hidden=8)
    for task in tasks[:6]:
        many = pol.rollout_many(params, task)
        single = [pol.rollout(jax.tree.map(lambda x, i=i: x[i], params), task)
                  for i in range(3)]
        assert many.tolist() == single
    choices = pol.predict(params, d)
    assert choices.shape == (3, d["label"].shape[0])
    rows = pol.error_kinds(tasks, choices[0])
    assert [r["kind"] == "correct" for r in rows] == (choices[0] == d["label"]).tolist()
    assert {r["kind"] for r in rows} <= set(pol.ERROR_KINDS)
    gold = [r["gold"] for r in rows]
    assert gold.count("STOP") == len(tasks)
    with pytest.raises(ValueError, match="choices"):
        pol.error_kinds(tasks, choices[0][:-1])
