"""REL algebra: the RC family's exactness, solvers, shortcuts, determinism; A1-A4 items."""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxpapers.benchmarks.rel import algebra as A

COLS = 8


@pytest.fixture(scope="module")
def batches():
    return {k: A.generate_rc(jax.random.key(k), 4000, k=k, rows=2, cols=COLS)
            for k in range(1, COLS)}


def test_structure_and_rule(batches):
    for k, d in batches.items():
        g, ops = np.asarray(d["grid"]), np.asarray(d["operands"])
        assert g.shape == (4000, 2, COLS) and ops.sum() == k
        assert (g[:, -1, -1] == -1).all() and (g[:, :, :-1] >= 0).all() and (g < 10).all()
        # every complete row obeys the rule; the hidden answer too
        assert ((g[:, 0, :-1] @ ops) % 10 == g[:, 0, -1]).all()
        assert ((g[:, 1, :-1] @ ops) % 10 == np.asarray(d["answer"])).all()
        ch = np.asarray(d["choices"])
        assert (ch[np.arange(4000), np.asarray(d["target"])] == np.asarray(d["answer"])).all()
        assert all(len(set(row)) == 8 for row in ch[:200])  # distinct candidates
        # target position uniform over 8 (chi-square-free check: each slot 500 +- 5 SD)
        counts = np.bincount(np.asarray(d["target"]), minlength=8)
        assert np.all(np.abs(counts - 500) < 5 * np.sqrt(4000 * 1 / 8 * 7 / 8)), counts


def test_unique_no_other_k_subset_fits(batches):
    for k, d in batches.items():
        g, ops = np.asarray(d["grid"])[:300], np.asarray(d["operands"])
        assert bool(np.asarray(d["unique"]).all())
        for sub in itertools.combinations(range(COLS - 1), k):
            mask = np.zeros(COLS - 1, bool)
            mask[list(sub)] = True
            if (mask == ops).all():
                continue
            assert not ((g[:, 0, :-1] @ mask) % 10 == g[:, 0, -1]).any(), (k, sub)


def test_answer_independent_of_any_k_minus_1_cells(batches):
    """RC = k: given any k - 1 operand cells of the query row the answer stays uniform."""
    for k in (2, 4, 7):
        d = batches[k]
        q = np.asarray(d["grid"])[:, -1, :-1][:, np.asarray(d["operands"])]
        ans = np.asarray(d["answer"])
        partial = q[:, : k - 1].sum(1) % 10
        # conditional on the partial sum, the answer is uniform: within 5 SD of 1/10 each
        for v in range(10):
            sel = ans[partial == v]
            freq = np.bincount(sel, minlength=10) / len(sel)
            sd = np.sqrt(0.1 * 0.9 / len(sel))
            assert np.all(np.abs(freq - 0.1) < 5 * sd), (k, v, freq)


def test_solvers(batches):
    for k, d in batches.items():
        t = np.asarray(d["target"])
        assert (np.asarray(A.reference_solver(d)) == t).all()
        for b in range(COLS):
            acc = float(np.mean(np.asarray(A.bounded_solver(d, budget=b)) == t))
            if b >= k:
                assert acc == 1.0
            else:  # 1/8 +- 0.03 (the bar; 5.7 SD of a Bernoulli(1/8) mean of 4000)
                assert abs(acc - 1 / 8) <= 0.03, (k, b, acc)


def test_shortcuts_at_chance_on_rc(batches):
    for k, d in batches.items():
        t = np.asarray(d["target"])
        for name, pick in A.shortcut_answers(d).items():
            assert float(np.mean(np.asarray(pick) == t)) <= 1 / 8 + 0.05, (k, name)


def test_same_key_same_instances_vmap_equals_loop_and_jit(batches):
    a = batches[3]  # key(3): the fixture's program, so no new compile here
    b = A.generate_rc(jax.random.key(3), 4000, k=3, rows=2, cols=COLS)
    c = A.generate_rc(jax.random.key(4), 4000, k=3, rows=2, cols=COLS)
    for f in ("grid", "choices", "target", "operands"):
        np.testing.assert_array_equal(a[f], b[f])
    assert not np.array_equal(a["grid"], c["grid"])
    ops = a["operands"]
    keys = jax.random.split(jax.random.key(5), 4)
    kw = dict(k=3, rows=2, cols=COLS, operands=ops, unique=False)  # (unique: a while_loop)
    vm = jax.vmap(lambda kk: A.generate_rc(kk, 16, **kw)["grid"])(keys)
    loop = jnp.stack([A.generate_rc(kk, 16, **kw)["grid"] for kk in keys])
    np.testing.assert_array_equal(vm, loop)


@pytest.mark.parametrize("kwargs, name", [
    (dict(k=8, rows=2, cols=8), "k"), (dict(k=0, rows=2, cols=8), "k"),
    (dict(k=2, rows=2, cols=8, modulus=1), "modulus"),
    (dict(k=2, rows=2, cols=8, modulus=5, num_choices=8), "num_choices"),
    (dict(k=2, rows=2, cols=8, operands=np.ones(7, bool)), "operands"),
    (dict(k=2, rows=2, cols=8, operands=np.ones(6, bool)), "operands"),
    (dict(k=2, rows=0, cols=8), "rows"),
    (dict(k=2, rows=2, cols=16), "unique=True is impractical")])
def test_bad_input(kwargs, name):
    with pytest.raises(ValueError, match=name):
        A.generate_rc(jax.random.key(0), 4, **kwargs)
    with pytest.raises(ValueError, match="budget"):
        A.bounded_solver(A.generate_rc(jax.random.key(0), 2, k=1, rows=2, cols=3), budget=-1)


@pytest.mark.parametrize("task", A.TASKS)
def test_panel_items_and_their_shortcuts(task):
    """The release's items fall to the measured shortcuts; ours keep only those that are the
    rule itself (copy / extrapolation), and the integer shortcut is gone."""
    off = A.official_items(jax.random.key(1), task, 200)
    ours = A.our_items(jax.random.key(1), task, 200)
    for items in (off, ours):
        ch, t = items["choices"], items["target"]
        assert ch.shape == (200, 8, 3, 3) and items["context"].shape == (200, 8, 3, 3)
        assert set(np.unique(t)) <= set(range(8))
    acc = {n: float(np.mean(p == off["target"])) for n, p in A.panel_shortcuts(off).items()}
    acc_ours = {n: float(np.mean(p == ours["target"]))
                for n, p in A.panel_shortcuts(ours).items()}
    assert acc["extrap"] == 1.0
    if task in ("a1", "a3", "a4"):
        assert acc["copy"] == 1.0 and acc_ours["copy"] == 1.0  # copying is the rule
    if task != "a1":
        assert acc["integer"] == 1.0
    else:  # A1 panels are floats, as released: no candidate is integer-valued, pick 0
        assert acc["integer"] <= 1 / 8 + 0.1
    assert acc_ours["integer"] <= 1 / 8 + 0.1  # same-distribution candidates
    assert acc_ours["rank"] <= 1 / 8 + 0.1
    with pytest.raises(ValueError, match="task"):
        A.official_items(jax.random.key(0), "a9", 3)
