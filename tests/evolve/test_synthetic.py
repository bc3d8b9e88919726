"""Synthetic KernelFoundry landscape and searches: evaluate vs a plain-Python reference, level
rule edge cases, mutation statistics, every trace replayed in numpy (fitness, coverage, best,
archive, hill-climb acceptance), vmap == loop bitwise, no recompilation, bad inputs, and the
coverage of the three methods over 10 seeds x 200 evaluations (reported; loose bar only)."""

from __future__ import annotations

import logging
import zlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxpapers.evolve.synthetic import (METHODS, Landscape, compare, evaluate, levels,
                                        make_landscape, mutate, run_search, run_seeds)

E = 200
SEEDS = 10
KEY = zlib.crc32(b"synthetic")


# ------------------------------------------------------------------ plain-Python reference


def ref_levels(g):
    out = []
    for a in range(3):
        n = 0
        for x in g[4 * a:4 * a + 4]:
            if x == 0:
                break
            n += 1
        out.append(min(n, 3))
    return out


def ref_evaluate(land, g):
    """(levels, fitness float64, correct) by the module's rule, written out in Python."""
    g = [int(x) for x in g]
    nk = np.asarray(land.nk_table, np.float64)
    fg, fv = np.asarray(land.forbidden_gene).tolist(), np.asarray(land.forbidden_value).tolist()
    lv = ref_levels(g)
    matched = sum(g[fg[p]] == fv[p] for p in range(len(fg)))
    correct = matched < 2
    nk_term = sum(nk[i, g[(i - 1) % 12], g[i], g[(i + 1) % 12]] for i in range(12)) / 12
    dist2 = sum((lv[a] - float(land.peak[a])) ** 2 for a in range(3))
    speed = 0.5 * (nk_term + np.exp(-dist2 / 4))
    return lv, (5.0 + speed if correct else 4.0), correct


def cell_of(lv):
    return 16 * lv[0] + 4 * lv[1] + lv[2]


def replay(trace, land):
    """Check one trace against a numpy replay of evaluations, coverage, best and archive."""
    geno = np.asarray(trace.genotypes)
    fit = np.asarray(trace.fitness)
    assert geno.shape == (E, 12) and fit.shape == (E,)
    assert np.all(geno[0] == 0)  # step 0: the all-zero start
    hit, best = set(), -np.inf
    arch_fit, arch_geno = np.full(64, -np.inf), np.zeros((64, 12), int)
    for t in range(E):
        lv, f, ok = ref_evaluate(land, geno[t])
        np.testing.assert_allclose(fit[t], f, rtol=1e-6)
        c = cell_of(lv)
        if ok:
            hit.add(c)
        best = max(best, fit[t])
        if fit[t] > arch_fit[c]:
            arch_fit[c], arch_geno[c] = fit[t], geno[t]
        assert int(trace.coverage_curve[t]) == len(hit)
        assert float(trace.best_fitness_curve[t]) == best
    assert set(np.flatnonzero(np.asarray(trace.hit)).tolist()) == hit
    np.testing.assert_array_equal(np.asarray(trace.archive.fitness), arch_fit.astype(np.float32))
    np.testing.assert_array_equal(np.asarray(trace.archive.genotype), arch_geno)


def hamming(a, b):
    return int(np.sum(np.asarray(a) != np.asarray(b)))


def explained_by_crossover(child, parent, elites):
    """Genes of ``child`` that differ from ``parent`` outside blocks equal to an elite's."""
    diff = 0
    for b in range(3):
        sl = slice(4 * b, 4 * b + 4)
        if not any(np.array_equal(child[sl], e[sl]) for e in elites):
            diff += hamming(child[sl], parent[sl])
    return diff


@pytest.fixture(scope="module")
def land():
    return make_landscape(jax.random.key(KEY))


@pytest.fixture(scope="module")
def traces(land):
    return {m: run_search(jax.random.key(7), land, method=m, evaluations=E) for m in METHODS}


# ------------------------------------------------------------------ landscape


@pytest.mark.parametrize("block, level", [([1, 0, 2, 3], 1), ([2, 3, 1, 1], 3), ([0, 3, 3, 3], 0),
                                          ([3, 3, 0, 1], 2), ([1, 1, 1, 0], 3),
                                          ([0, 0, 0, 0], 0)])
def test_level_rule_edge_cases(block, level):
    for axis in range(3):
        g = np.zeros(12, np.int32)
        g[4 * axis:4 * axis + 4] = block
        want = [0, 0, 0]
        want[axis] = level
        assert levels(jnp.asarray(g)).tolist() == want == ref_levels(g.tolist())


def test_evaluate_matches_reference_on_random_and_edge_genotypes(land):
    rng = np.random.default_rng(KEY)
    geno = rng.integers(0, 4, size=(200, 12))
    fg, fv = np.asarray(land.forbidden_gene), np.asarray(land.forbidden_value)
    one, two = np.zeros(12, int), np.zeros(12, int)
    one[fg[0]] = fv[0]  # exactly one forbidden pair: still correct
    two[fg[[0, 3]]] = fv[[0, 3]]  # two pairs co-occur: wrong
    geno = np.concatenate([geno, [one, two, np.zeros(12, int)]]).astype(np.int32)
    desc, fit, ok = jax.jit(jax.vmap(lambda g: evaluate(land, g)))(jnp.asarray(geno))
    ref = [ref_evaluate(land, g) for g in geno]
    assert np.asarray(desc).tolist() == [r[0] for r in ref]
    assert np.asarray(ok).tolist() == [r[2] for r in ref]
    np.testing.assert_allclose(np.asarray(fit), [r[1] for r in ref], rtol=1e-6)
    assert ok[-3] and not ok[-2] and ok[-1]  # the rule's edges; the start is correct
    assert 0.2 < np.mean(np.asarray(ok)[:200]) < 0.8  # both kinds among random programs
    eager = evaluate(land, jnp.asarray(geno[5]))
    assert float(eager[1]) == float(fit[5])


def test_make_landscape_draws_distinct_genes_and_nonzero_values():
    for seed in range(20):
        land = make_landscape(jax.random.key(seed))
        fg = np.asarray(land.forbidden_gene)
        assert len(set(fg.tolist())) == 6 and fg.min() >= 0 and fg.max() < 12
        assert set(np.asarray(land.forbidden_value).tolist()) <= {1, 2, 3}
        assert set(np.asarray(land.peak).tolist()) <= {0.0, 1.0, 2.0, 3.0}


def test_mutation_changes_one_or_two_genes_uniformly():
    n = 4000
    g = jnp.asarray(np.random.default_rng(3).integers(0, 4, 12), jnp.int32)
    kids = np.asarray(jax.jit(jax.vmap(lambda k: mutate(k, g)))(
        jax.random.split(jax.random.key(KEY), n)))
    changed = kids != np.asarray(g)[None]
    per_kid = changed.sum(1)
    assert set(per_kid.tolist()) == {1, 2}
    se = np.sqrt(n * 0.25)
    assert abs((per_kid == 2).sum() - n / 2) < 4.5 * se
    # each gene changes with probability (1/2)(1/12) + (1/2)(2/12) = 1/8
    p = 1 / 8
    assert np.all(np.abs(changed.sum(0) - n * p) < 4.5 * np.sqrt(n * p * (1 - p)) + 1)
    # the new value is uniform over the 3 other values
    for v in range(4):
        sel = changed & (np.asarray(g)[None] != v)
        frac = np.sum(sel & (kids == v)) / np.sum(sel)
        assert abs(frac - 1 / 3) < 4.5 * np.sqrt((2 / 9) / np.sum(sel))


# ------------------------------------------------------------------ searches


@pytest.mark.parametrize("method", METHODS)
def test_trace_replays_exactly_evaluations_programs(traces, land, method):
    trace = traces[method]
    replay(trace, land)
    geno = np.asarray(trace.genotypes)
    if method == "hill_climb":  # child of the current genotype, accepted when >=
        cur, cur_f = geno[0], float(trace.fitness[0])
        for t in range(1, E):
            assert hamming(geno[t], cur) in (1, 2)
            if float(trace.fitness[t]) >= cur_f:
                cur, cur_f = geno[t], float(trace.fitness[t])
    if method != "hill_climb":  # children of the elites present before step t
        elites = {0: geno[0]}
        fit = np.asarray(trace.fitness)
        best = {0: fit[0]}
        crossed = 0
        for t in range(1, E):
            if method == "uniform_parent":  # a mutation of one elite
                assert any(hamming(geno[t], e) in (1, 2) for e in elites.values())
            else:  # a mutation of one elite, then whole blocks copied from elites
                assert any(explained_by_crossover(geno[t], p, elites.values()) <= 2
                           for p in elites.values())
                crossed += min(hamming(geno[t], e) for e in elites.values()) > 2
            c = cell_of(ref_levels(geno[t].tolist()))
            if fit[t] > best.get(c, -np.inf):
                elites[c], best[c] = geno[t], fit[t]
        if method == "map_elites":
            assert crossed > 0  # some children are more than a mutation away from every elite


def test_hill_climb_accepts_neutral_moves():
    flat = Landscape(nk_table=jnp.zeros((12, 4, 4, 4)),
                     forbidden_gene=jnp.arange(6, dtype=jnp.int32),
                     forbidden_value=jnp.full((6,), 9, jnp.int32),  # never matched
                     peak=jnp.full((3,), 100.0))  # exp(-huge) = 0: fitness 5 everywhere
    trace = run_search(jax.random.key(1), flat, method="hill_climb", evaluations=E)
    assert np.all(np.asarray(trace.fitness) == 5.0)
    geno = np.asarray(trace.genotypes)
    # every neutral child is accepted: each program mutates the previous one (a strict >
    # rule would mutate the all-zero start every time)
    assert all(hamming(geno[t], geno[t - 1]) in (1, 2) for t in range(2, E))
    assert max(hamming(g, 0 * g) for g in geno) > 4
    assert int(trace.coverage_curve[-1]) > 5


def test_single_evaluation_is_the_start(land):
    trace = run_search(jax.random.key(0), land, method="hill_climb", evaluations=1)
    assert trace.genotypes.shape == (1, 12) and np.all(np.asarray(trace.genotypes) == 0)
    assert trace.coverage_curve.tolist() == [1]


def test_no_recompilation_on_the_second_call(land, traces, caplog):
    other = make_landscape(jax.random.key(KEY + 1))
    with caplog.at_level(logging.WARNING), jax.log_compiles():
        caplog.clear()
        run_search(jax.random.key(8), other, method="map_elites", evaluations=E)
        jax.block_until_ready(run_search(jax.random.key(9), land, method="map_elites",
                                         evaluations=E))
    assert not [r for r in caplog.records if "compil" in r.getMessage().lower()]


# ------------------------------------------------------------------ seeds and the comparison


@pytest.fixture(scope="module")
def seeded():
    """run_seeds for every method (the compiled calls compare reuses)."""
    return {m: run_seeds(jax.random.key(0), method=m, seeds=SEEDS, evaluations=E)
            for m in METHODS}


@pytest.fixture(scope="module")
def comparison(seeded):
    return compare(jax.random.key(0), seeds=SEEDS, evaluations=E)


def test_vmap_over_seeds_equals_python_loop_bitwise(seeded, comparison):
    lands = seeded["map_elites"][1]
    for m in METHODS:
        trace, lands_m = seeded[m]
        for a, b in zip(jax.tree.leaves(lands_m), jax.tree.leaves(lands)):
            np.testing.assert_array_equal(a, b)  # same landscapes for every method
        for s in range(SEEDS):
            k_land, k_search = jax.random.split(jax.random.fold_in(jax.random.key(0), s))
            land = make_landscape(k_land)
            for a, b in zip(jax.tree.leaves(land), jax.tree.leaves(lands)):
                np.testing.assert_array_equal(a, b[s])
            one = run_search(k_search, land, method=m, evaluations=E)
            for a, b in zip(jax.tree.leaves(one), jax.tree.leaves(trace)):
                np.testing.assert_array_equal(np.asarray(a), np.asarray(b[s]))
        np.testing.assert_array_equal(comparison[m]["coverage"], trace.coverage_curve[:, -1])
        np.testing.assert_array_equal(comparison[m]["best_fitness"],
                                      trace.best_fitness_curve[:, -1])


def test_coverage_of_the_three_methods(comparison):
    cov = {m: comparison[m]["coverage"] for m in METHODS}
    print(f"\ncoverage over {SEEDS} seeds x {E} evaluations (digest's numpy prototype: "
          "map_elites 29, 37 with crossover, uniform_parent 32, hill_climb 20)")
    for m in METHODS:
        print(f"  {m:15s} mean {cov[m].mean():5.1f} per seed {cov[m].tolist()} "
              f"best fitness {comparison[m]['best_fitness'].mean():.3f}")
    # loose bars that catch a broken search, not a tuned margin (observed: about 1.6-1.8x)
    for m in ("map_elites", "uniform_parent"):
        assert np.sum(cov[m] > cov["hill_climb"]) >= 8
        assert cov[m].mean() > 1.3 * cov["hill_climb"].mean()
    assert np.all(cov["hill_climb"] >= 2) and np.all(cov["map_elites"] <= 64)


# ------------------------------------------------------------------ bad inputs


def test_bad_inputs_raise_clear_errors(land):
    key = jax.random.key(0)
    with pytest.raises(ValueError, match="method"):
        run_search(key, land, method="random")
    with pytest.raises(ValueError, match="evaluations"):
        run_search(key, land, method="hill_climb", evaluations=0)
    with pytest.raises(TypeError, match="evaluations"):
        run_search(key, land, method="hill_climb", evaluations=10.0)
    with pytest.raises(TypeError, match="config"):
        run_search(key, land, method="map_elites", config={"num_islands": 4})
    with pytest.raises(TypeError, match="landscape"):
        run_search(key, {"nk_table": land.nk_table}, method="hill_climb")
    with pytest.raises(ValueError, match="landscape.peak"):
        run_search(key, land.replace(peak=jnp.zeros(2)), method="hill_climb")
    with pytest.raises(TypeError, match="key"):
        run_search(jax.random.PRNGKey(0), land, method="hill_climb")
    with pytest.raises(ValueError, match="genotype"):
        evaluate(land, jnp.zeros(11, jnp.int32))
    with pytest.raises(ValueError, match="genotype"):
        evaluate(land, jnp.full(12, 4, jnp.int32))
    with pytest.raises(ValueError, match="genotype"):
        evaluate(land, jnp.zeros(12))
    with pytest.raises(ValueError, match="seeds"):
        compare(key, seeds=0)
    with pytest.raises(ValueError, match="method"):
        run_seeds(key, method="hill")
