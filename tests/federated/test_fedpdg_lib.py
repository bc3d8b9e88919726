"""FedPDG building blocks (reconstruction): NumPy references, jit with traced budgets, vmap over
clients, edge cases and input validation."""

from fractions import Fraction

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxpapers import federated as fl

# ---------------------------------------------------------------- NumPy references


def _np_discrepancy(pg, pl, y):
    i = np.arange(len(y))
    return np.maximum(pg[i, y] - pl[i, y], 0.0)


def _np_select_top(s, budget, valid):
    order = sorted(range(len(s)), key=lambda i: (not valid[i], -s[i], i))
    out = np.zeros(len(s), bool)
    for i in order[:max(budget, 0)]:
        out[i] = valid[i]
    return out


def _np_balanced(counts, budget):
    """The definition: one unit at a time to the currently smallest class, ties to lowest index."""
    cur = np.array(counts, np.int64)
    alloc = np.zeros_like(cur)
    for _ in range(budget):
        c = int(np.argmin(cur))  # argmin returns the first (lowest-index) minimum
        cur[c] += 1
        alloc[c] += 1
    return alloc


def _np_pairs(s, y, num_classes, fraction):
    f = Fraction(fraction).limit_denominator(1000)
    n = len(s)
    p = n * f.numerator // f.denominator
    w, l = [], []
    for c in range(num_classes):
        idx = sorted((i for i in range(n) if y[i] == c), key=lambda i: (-s[i], i))
        m = len(idx) * f.numerator // f.denominator
        for j in range(m):
            w.append(idx[j])
            l.append(idx[len(idx) - 1 - j])
    k = len(w)
    return (np.array(w + [0] * (p - k), np.int32), np.array(l + [0] * (p - k), np.int32),
            np.array([True] * k + [False] * (p - k)))


# ---------------------------------------------------------------- prediction_discrepancy


def test_discrepancy_matches_numpy_and_vmaps_over_clients(x64):
    rng = np.random.default_rng(0)
    n, c, k = 20, 5, 3
    pg = rng.dirichlet(np.ones(c), size=n)
    pl = rng.dirichlet(np.ones(c), size=(k, n))
    y = rng.integers(0, c, n)
    got = fl.prediction_discrepancy(pg, pl[0], y)
    np.testing.assert_allclose(np.asarray(got), _np_discrepancy(pg, pl[0], y), rtol=0, atol=0)
    assert np.all(np.asarray(got) >= 0) and np.any(np.asarray(got) == 0)
    jitted = jax.jit(fl.prediction_discrepancy)(pg, pl[0], y)
    np.testing.assert_array_equal(np.asarray(jitted), np.asarray(got))
    vm = jax.vmap(fl.prediction_discrepancy, in_axes=(None, 0, None))(pg, pl, y)
    np.testing.assert_array_equal(np.asarray(vm),
                                  np.stack([_np_discrepancy(pg, pl[i], y) for i in range(k)]))


def test_discrepancy_bad_inputs():
    pg = jnp.full((4, 3), 1 / 3)
    y = jnp.array([0, 1, 2, 0])
    with pytest.raises(ValueError, match="p_local"):
        fl.prediction_discrepancy(pg, pg[:3], y)
    with pytest.raises(ValueError, match="p_global"):
        fl.prediction_discrepancy(pg[0], pg[0], y)
    with pytest.raises(ValueError, match="labels"):
        fl.prediction_discrepancy(pg, pg, y[:3])
    with pytest.raises(ValueError, match="labels"):
        fl.prediction_discrepancy(pg, pg, jnp.array([0, 1, 3, 0]))
    with pytest.raises(ValueError, match="p_global"):
        fl.prediction_discrepancy(pg * 4, pg, y)  # logits, not probabilities
    with pytest.raises(TypeError, match="labels"):
        fl.prediction_discrepancy(pg, pg, jnp.zeros(4))


# ---------------------------------------------------------------- select_top


def test_select_top_matches_numpy_with_ties_and_invalid():
    rng = np.random.default_rng(1)
    n = 23
    s = rng.integers(0, 5, n).astype(np.float32)  # many ties
    valid = rng.random(n) < 0.7
    f = jax.jit(chex.assert_max_traces(fl.select_top, n=1))
    chex.clear_trace_counter()
    for budget in range(0, n + 3):  # budget 0 ... budget > N: one compilation (traced budget)
        got = np.asarray(f(s, budget, valid=valid))
        np.testing.assert_array_equal(got, _np_select_top(s, budget, valid))
        assert got.sum() == min(budget, valid.sum())
        assert not np.any(got & ~valid)
    assert np.asarray(fl.select_top(s, n)).all()  # budget >= N without a mask: everything


def test_select_top_ties_go_to_the_lower_index_and_vmap_over_budgets():
    s = jnp.array([1.0, 2.0, 2.0, 2.0, 0.0])
    assert fl.select_top(s, 2).tolist() == [False, True, True, False, False]
    assert fl.select_top(s, 0).tolist() == [False] * 5
    budgets = jnp.arange(7)
    vm = jax.vmap(fl.select_top, in_axes=(None, 0))(s, budgets)
    loop = np.stack([_np_select_top(np.asarray(s), b, np.ones(5, bool)) for b in range(7)])
    np.testing.assert_array_equal(np.asarray(vm), loop)
    # vmap over clients, each with its own budget
    rng = np.random.default_rng(2)
    sc = rng.normal(size=(4, 9))
    b = np.array([0, 3, 9, 12])
    vm = jax.vmap(fl.select_top)(sc, b)
    for i in range(4):
        np.testing.assert_array_equal(np.asarray(vm[i]), _np_select_top(sc[i], b[i],
                                                                          np.ones(9, bool)))


def test_select_top_bad_inputs():
    s = jnp.arange(5.0)
    with pytest.raises(ValueError, match="budget"):
        fl.select_top(s, -1)
    with pytest.raises(ValueError, match="budget"):
        fl.select_top(s, jnp.array([1, 2]))
    with pytest.raises(TypeError, match="budget"):
        fl.select_top(s, 2.0)
    with pytest.raises(ValueError, match="valid"):
        fl.select_top(s, 2, valid=jnp.ones(4, bool))
    with pytest.raises(ValueError, match="scores"):
        fl.select_top(s[None], 2)
    with pytest.raises(ValueError, match="scores"):
        fl.select_top(s.at[1].set(jnp.nan), 2)


# ---------------------------------------------------------------- balanced_allocation


def test_balanced_allocation_matches_greedy_reference():
    rng = np.random.default_rng(3)
    f = jax.jit(chex.assert_max_traces(fl.balanced_allocation, n=1))
    chex.clear_trace_counter()
    cases = [np.array([5, 0, 2, 0]), np.array([3, 3, 3]), np.array([0]), np.array([7, 1, 1, 4])]
    cases += [rng.integers(0, 8, 6) for _ in range(6)]
    for counts in cases:
        for budget in (0, 1, 2, 5, 13, 40):
            want = _np_balanced(counts, budget)
            got = np.asarray((f if len(counts) == 6 else fl.balanced_allocation)(counts, budget))
            np.testing.assert_array_equal(got, want, err_msg=f"{counts} {budget}")
            assert got.sum() == budget and np.all(got >= 0)
    # a big budget ends (nearly) uniform: counts differ by at most one
    final = cases[-1] + np.asarray(fl.balanced_allocation(cases[-1], 1000))
    assert final.max() - final.min() <= 1


def test_balanced_allocation_vmaps_over_clients():
    counts = jnp.array([[5, 0, 2, 0], [1, 1, 1, 1], [0, 9, 0, 3]])
    budgets = jnp.array([6, 3, 10])
    got = jax.vmap(fl.balanced_allocation)(counts, budgets)
    want = np.stack([_np_balanced(np.asarray(c), int(b)) for c, b in zip(counts, budgets)])
    np.testing.assert_array_equal(np.asarray(got), want)


def test_balanced_allocation_bad_inputs():
    with pytest.raises(ValueError, match="class_counts"):
        fl.balanced_allocation(jnp.array([1, -1, 2]), 3)
    with pytest.raises(ValueError, match="class_counts"):
        fl.balanced_allocation(jnp.zeros((2, 2), int), 3)
    with pytest.raises(ValueError, match="class_counts"):
        fl.balanced_allocation(jnp.zeros((0,), int), 3)
    with pytest.raises(TypeError, match="class_counts"):
        fl.balanced_allocation(jnp.array([1.0, 2.0]), 3)
    with pytest.raises(ValueError, match="budget"):
        fl.balanced_allocation(jnp.array([1, 2]), -2)


# ---------------------------------------------------------------- preference_pairs


@pytest.mark.parametrize("fraction", [1 / 3, 0.5, 0.25])
def test_preference_pairs_match_numpy(fraction):
    rng = np.random.default_rng(4)
    n, c = 40, 4
    # class 3 gets 2 candidates (fewer than 3: no pair at 1/3), ties from rounded scores
    y = np.concatenate([rng.integers(0, 3, n - 2), [3, 3]])
    s = np.round(rng.normal(size=n), 1).astype(np.float32)
    f = jax.jit(fl.preference_pairs, static_argnames=("num_classes", "fraction"))
    w, l, m = f(s, y, num_classes=c, fraction=fraction)
    ww, lw, mw = _np_pairs(s, y, c, fraction)
    np.testing.assert_array_equal(np.asarray(w), ww)
    np.testing.assert_array_equal(np.asarray(l), lw)
    np.testing.assert_array_equal(np.asarray(m), mw)
    w, l, m = (np.asarray(a) for a in (w, l, m))
    # every valid pair: same class, winner scored at least as high, no candidate used twice
    assert np.all(y[w[m]] == y[l[m]]) and np.all(s[w[m]] >= s[l[m]])
    used = np.concatenate([w[m], l[m]])
    assert len(set(used.tolist())) == len(used)
    if fraction == 1 / 3:
        assert not np.any(y[w[m]] == 3)


def test_preference_pairs_edge_cases():
    # N < 3: no room for a pair at 1/3 (P = 0)
    w, l, m = fl.preference_pairs(jnp.array([1.0, 2.0]), jnp.array([0, 0]), num_classes=1)
    assert w.shape == l.shape == m.shape == (0,)
    # three tied candidates: best = lowest index, worst = highest index
    w, l, m = fl.preference_pairs(jnp.zeros(3), jnp.zeros(3, int), num_classes=1)
    assert (w.tolist(), l.tolist(), m.tolist()) == ([0], [2], [True])
    # every class too small: P = 2 slots, both padding
    w, l, m = fl.preference_pairs(jnp.arange(6.0), jnp.array([0, 0, 1, 1, 2, 2]), num_classes=3)
    assert m.tolist() == [False, False] and w.tolist() == [0, 0]
    # vmap over clients
    rng = np.random.default_rng(5)
    s = rng.normal(size=(3, 12)).astype(np.float32)
    y = rng.integers(0, 2, (3, 12))
    out = jax.vmap(lambda a, b: fl.preference_pairs(a, b, num_classes=2))(s, y)
    for i in range(3):
        for got, want in zip(out, _np_pairs(s[i], y[i], 2, 1 / 3)):
            np.testing.assert_array_equal(np.asarray(got[i]), want)


def test_preference_pairs_bad_inputs():
    s, y = jnp.arange(6.0), jnp.array([0, 0, 0, 1, 1, 1])
    with pytest.raises(ValueError, match="fraction"):
        fl.preference_pairs(s, y, num_classes=2, fraction=0.6)
    with pytest.raises(ValueError, match="fraction"):
        fl.preference_pairs(s, y, num_classes=2, fraction=0.0)
    with pytest.raises(ValueError, match="labels"):
        fl.preference_pairs(s, y[:5], num_classes=2)
    with pytest.raises(ValueError, match="labels"):
        fl.preference_pairs(s, y, num_classes=1)
    with pytest.raises(ValueError, match="num_classes"):
        fl.preference_pairs(s, y, num_classes=0)
    with pytest.raises(ValueError, match="scores"):
        fl.preference_pairs(s.reshape(2, 3), y, num_classes=2)
