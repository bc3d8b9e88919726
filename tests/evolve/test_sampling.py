"""KernelFoundry sampling rules: parent frequencies vs an independent numpy mixture, the
empty-island fallback vs a plain-Python replay of the original procedure, inspirations and ring
migration vs plain-Python references of ``OptimizationAwareDatabase``, island counters, jit /
vmap, bad inputs."""

from __future__ import annotations

import math
import random
import zlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from jaxpapers.evolve.archive import archive_init, archive_insert
from jaxpapers.evolve.sampling import (SamplerState, SamplingConfig, advance, assign_island,
                                       migrate, migration_due, parent_distribution,
                                       sample_inspirations, sample_parent, sampler_init)

N_DRAWS = 6000


def make_archive(grid, cells, fits):
    """Archive over ``grid`` with elites of the given fitness in the given row-major cells."""
    desc = np.stack(np.unravel_index(np.asarray(cells), grid), axis=1)
    a = archive_init(grid, jnp.zeros(2, jnp.int32))
    geno = jnp.stack([jnp.asarray(cells, jnp.int32)] * 2, axis=1)
    return archive_insert(a, geno, desc, jnp.asarray(fits, jnp.float32))


def make_state(config, c, members, island=0):
    m = np.zeros((config.num_islands, c), bool)
    for i, cells in members.items():
        m[i, cells] = True
    z = jnp.zeros((), jnp.int32)
    return SamplerState(members=jnp.asarray(m), island=jnp.asarray(island, jnp.int32), count=z,
                        generations=jnp.zeros(config.num_islands, jnp.int32), last_migration=z)


def within_binomial(counts, probs, n, z=4.5):
    """Every cell count within z binomial standard errors (+1 for discreteness)."""
    expect = n * probs
    se = np.sqrt(n * probs * (1 - probs))
    assert np.all(np.abs(counts - expect) <= z * se + 1), (counts, expect)


# ------------------------------------------------------------------ config


@pytest.mark.parametrize("kwargs, field", [
    (dict(num_islands=0), "num_islands"), (dict(programs_per_island=0), "programs_per_island"),
    (dict(migrate_every=0), "migrate_every"), (dict(num_inspirations=-1), "num_inspirations"),
    (dict(migration_rate=1.5), "migration_rate"), (dict(p_uniform=-0.1, p_random=0.4),
                                                   "p_uniform"),
    (dict(p_elite=0.8), "sum to 1"), (dict(temperature=0.0), "temperature"),
    (dict(temperature=float("nan")), "temperature")])
def test_config_rejects_bad_values(kwargs, field):
    with pytest.raises(ValueError, match=field):
        SamplingConfig(**kwargs)


def test_config_rejects_bad_types():
    with pytest.raises(TypeError, match="num_islands"):
        SamplingConfig(num_islands=2.0)
    with pytest.raises(TypeError, match="p_elite"):
        SamplingConfig(p_elite=True)
    assert {SamplingConfig(): 1}[SamplingConfig()] == 1  # hashable, equal: a static jit arg


# ------------------------------------------------------------------ parent


GRID = (4, 4)
CELLS = [0, 3, 5, 6, 9, 14]
FITS = [4.0, 5.2, 5.9, 4.6, 5.5, 6.0]


def ref_parent_mixture(config, fits, cells, island_cells, c):
    """Independent numpy law: p_u U(island) + p_e softmax(f / T) + p_r U(filled)."""
    p = np.zeros(c)
    p[island_cells] += config.p_uniform / len(island_cells)
    f = np.asarray(fits, np.float64) / config.temperature
    w = np.exp(f - f.max())
    p[cells] += config.p_elite * w / w.sum()
    p[cells] += config.p_random / len(cells)
    return p


@pytest.mark.parametrize("config", [SamplingConfig(),
                                    SamplingConfig(p_uniform=0.5, p_elite=0.3, p_random=0.2,
                                                   temperature=0.5)])
def test_parent_frequencies_match_the_configured_mixture(config):
    a = make_archive(GRID, CELLS, FITS)
    state = make_state(config, 16, {0: [0, 3], 1: [9], 2: [5, 6, 14]}, island=2)
    keys = jax.random.split(jax.random.key(zlib.crc32(b"parent")), N_DRAWS)
    cells, branches = jax.jit(jax.vmap(lambda k: sample_parent(k, a, state, config)))(keys)
    cells, branches = np.asarray(cells), np.asarray(branches)
    # branch frequencies vs (p_uniform, p_elite, p_random)
    pb = np.array([config.p_uniform, config.p_elite, config.p_random])
    within_binomial(np.bincount(branches, minlength=3), pb, N_DRAWS)
    # the island branch only draws island members, uniformly
    assert set(cells[branches == 0]) <= {5, 6, 14}
    # cell frequencies vs the independent mixture, cell by cell and by a chi-square test
    p = ref_parent_mixture(config, FITS, CELLS, [5, 6, 14], 16)
    counts = np.bincount(cells, minlength=16)
    assert counts[p == 0].sum() == 0  # never an empty cell
    within_binomial(counts, p, N_DRAWS)
    chi2 = np.sum((counts[p > 0] - N_DRAWS * p[p > 0]) ** 2 / (N_DRAWS * p[p > 0]))
    assert chi2 < stats.chi2.ppf(1 - 1e-4, df=(p > 0).sum() - 1)
    mix = np.array([config.p_uniform, config.p_elite, config.p_random]) @ np.asarray(
        parent_distribution(a, state, config))
    np.testing.assert_allclose(mix, p, atol=1e-6)


def official_fallback_draw(rng, fits_by_cell, c):
    """Plain-Python replay of the original's exploration fallback (secondary + final)."""
    filled = [i for i in range(c) if fits_by_cell.get(i) is not None]
    median = np.median([fits_by_cell[i] for i in filled])
    empty = [("e", i) for i in range(c) if i not in fits_by_cell]
    low = [("l", i) for i in filled if fits_by_cell[i] < median]
    cand = empty + low
    if len(cand) > 10:
        cand = rng.sample(cand, 10)
    low_drawn = [i for kind, i in cand if kind == "l"]
    if low_drawn:
        return rng.choice(low_drawn)
    return rng.choice(filled)


def test_empty_island_fallback_matches_the_original_procedure():
    grid = (4, 8)  # C = 32, F = 8, E = 24, L = 4 below the median
    cells = [1, 4, 7, 12, 18, 22, 27, 31]
    fits = [4.0, 5.1, 5.3, 4.4, 5.8, 4.9, 5.6, 4.2]
    config = SamplingConfig()
    a = make_archive(grid, cells, fits)
    state = make_state(config, 32, {0: cells}, island=3)  # island 3 is empty
    row = np.asarray(parent_distribution(a, state, config))[0]
    p0 = math.comb(24, 10) / math.comb(28, 10)
    low = [c for c, f in zip(cells, fits) if f < np.median(fits)]
    expect = np.zeros(32)
    expect[cells] += p0 / 8
    expect[low] += (1 - p0) / 4
    np.testing.assert_allclose(row, expect, atol=1e-6)
    rng = random.Random(zlib.crc32(b"fallback"))
    n = 20000
    draws = [official_fallback_draw(rng, dict(zip(cells, fits)), 32) for _ in range(n)]
    within_binomial(np.bincount(draws, minlength=32), expect, n)
    # one island only: the original has no island model and always falls back
    one = SamplingConfig(num_islands=1)
    row1 = np.asarray(parent_distribution(a, make_state(one, 32, {0: cells}), one))[0]
    np.testing.assert_allclose(row1, expect, atol=1e-6)


def test_empty_archive_gives_minus_one_and_no_nan():
    config = SamplingConfig()
    a = archive_init(GRID, jnp.zeros(2, jnp.int32))
    state = sampler_init(a, config)
    probs = np.asarray(parent_distribution(a, state, config))
    assert np.all(probs == 0) and np.all(np.isfinite(probs))
    for seed in range(5):
        cell, _ = sample_parent(jax.random.key(seed), a, state, config)
        assert int(cell) == -1
    assert sample_inspirations(jax.random.key(0), a, -1, config).tolist() == [-1, -1]


def test_nonpositive_elite_scores_fall_back_to_uniform():
    config = SamplingConfig()
    a = make_archive(GRID, [1, 2, 3], [-1.0, 0.0, 0.5])  # sum <= 0: the original's guard
    row = np.asarray(parent_distribution(a, sampler_init(a, config), config))[1]
    np.testing.assert_allclose(row[[1, 2, 3]], [1 / 3] * 3, atol=1e-7)


def test_sample_parent_jit_vmap_and_eager_agree():
    config = SamplingConfig()
    a = make_archive(GRID, CELLS, FITS)
    state = make_state(config, 16, {1: [9, 14]}, island=1)
    keys = jax.random.split(jax.random.key(3), 8)
    batched = jax.vmap(lambda k: sample_parent(k, a, state, config))(keys)
    for j, k in enumerate(keys):
        eager = sample_parent(k, a, state, config)
        jitted = jax.jit(sample_parent, static_argnums=3)(k, a, state, config)
        assert int(eager[0]) == int(jitted[0]) == int(batched[0][j])
        assert int(eager[1]) == int(jitted[1]) == int(batched[1][j])


# ------------------------------------------------------------------ inspirations


def ref_inspirations(fits_by_cell, parent, grid, n):
    """Plain-Python ``_sample_diverse_inspirations`` for an elites-only archive (no ties)."""
    level = {c: sum(np.unravel_index(c, grid)) for c in fits_by_cell}
    psum = level[parent] if parent >= 0 else 0
    others = [c for c in fits_by_cell if c != parent]
    pri = sorted(others, key=lambda c: fits_by_cell[c] + 0.1 * max(0, level[c] - psum),
                 reverse=True)
    out = pri[:max(1, n // 2)]
    top = sorted(others, key=lambda c: fits_by_cell[c], reverse=True)
    for c in top:
        if len(out) >= n:
            break
        if c not in out:
            out.append(c)
    return out[:n] + [-1] * (n - len(out[:n]))


@pytest.mark.parametrize("n", [1, 2, 3, 5])
@pytest.mark.parametrize("parent", [-1, 0, 5, 14])
def test_inspirations_match_the_original_rule(n, parent):
    # fitness gaps < 0.1 per level, so the level bonus reorders some cells
    fits = [5.50, 5.52, 5.45, 5.51, 5.30, 5.58]
    cells = [0, 3, 5, 6, 9, 15]
    if parent == 14:
        cells, fits = cells + [14], fits + [5.0]
    config = SamplingConfig(num_inspirations=n)
    a = make_archive(GRID, cells, fits)
    got = sample_inspirations(jax.random.key(n), a, parent, config).tolist()
    assert got == ref_inspirations(dict(zip(cells, fits)), parent, GRID, n)
    real = [c for c in got if c >= 0]
    assert parent not in real and set(real) <= set(cells) and len(set(real)) == len(real)


def test_inspirations_pad_with_minus_one_and_break_ties_at_random():
    config = SamplingConfig(num_inspirations=3)
    a = make_archive(GRID, [2, 7], [5.0, 5.5])
    assert sample_inspirations(jax.random.key(0), a, 2, config).tolist() == [7, -1, -1]
    tied = make_archive(GRID, [0, 1, 4, 5], [5.0, 5.0, 5.0, 5.0])  # level sums 0, 1, 1, 2
    firsts = {int(sample_inspirations(jax.random.key(s), tied, 0, SamplingConfig())[0])
              for s in range(30)}
    assert firsts == {5}  # the level bonus decides: cell 5 has the largest level sum
    seconds = {int(sample_inspirations(jax.random.key(s), tied, 0, SamplingConfig())[1])
               for s in range(30)}
    assert seconds == {1, 4}  # equal fitness: both orders occur


# ------------------------------------------------------------------ islands and migration


def ref_counters(steps, config):
    """Plain-Python ``increase_island_counter_and_switch`` + ``should_migrate`` schedule."""
    island, counter, gens, last, due_at = 0, 0, [0] * config.num_islands, 0, []
    for t in range(1, steps + 1):
        if counter >= config.programs_per_island:
            island = (island + 1) % config.num_islands
            counter = 0
        counter += 1
        gens[island] += 1
        if max(gens) - last >= config.migrate_every:
            due_at.append(t)
            last = max(gens)
    return island, counter, gens, due_at


@pytest.mark.parametrize("config", [SamplingConfig(),
                                    SamplingConfig(num_islands=3, programs_per_island=4,
                                                   migrate_every=6)])
def test_advance_and_migration_schedule_match_the_original(config):
    a = make_archive(GRID, [0], [5.0])
    state = sampler_init(a, config)
    due_at = []
    step = jax.jit(lambda s: advance(s, config))
    for t in range(1, 131):
        state = step(state)
        if bool(migration_due(state, config)):
            due_at.append(t)
            state = migrate(jax.random.key(t), a, state, config)
    island, counter, gens, ref_due = ref_counters(130, config)
    assert int(state.island) == island and int(state.count) == counter
    assert state.generations.tolist() == gens and due_at == ref_due
    if config == SamplingConfig():
        assert ref_due == [10, 50, 90, 130]  # every 40 programs after the first 10


def ref_migrate(members, fits_by_cell, rate, n_isl):
    """Plain-Python ``migrate_programs`` (copy mode, sequential over islands); no ties."""
    islands = [set(m) for m in members]
    n = max(1, int(rate * len(fits_by_cell) / n_isl))
    moved = 0
    for i in range(n_isl):
        progs = sorted(islands[i], key=lambda c: fits_by_cell[c], reverse=True)[:n]
        target = (i + 1) % n_isl
        for c in progs:
            if c not in islands[target]:
                islands[target].add(c)
                moved += 1
    return islands, moved


@pytest.mark.parametrize("rate", [0.1, 0.5, 1.0])
def test_migration_copies_the_right_cells(rate):
    grid = (4, 8)
    rng = np.random.default_rng(zlib.crc32(b"migrate"))
    cells = sorted(rng.choice(32, size=20, replace=False).tolist())
    fits = (4 + rng.permutation(20) / 10).tolist()  # distinct
    config = SamplingConfig(migration_rate=rate)
    members = {0: cells[:8], 1: cells[8:11], 2: [], 3: cells[11:]}
    state = make_state(config, 32, members).replace(
        generations=jnp.array([10, 0, 0, 0], jnp.int32))
    a = make_archive(grid, cells, fits)
    new = migrate(jax.random.key(1), a, state, config)
    ref, moved = ref_migrate([members[i] for i in range(4)], dict(zip(cells, fits)), rate, 4)
    got = [set(np.flatnonzero(row).tolist()) for row in np.asarray(new.members)]
    assert got == ref
    assert int(new.members.sum() - state.members.sum()) == moved > 0
    assert int(new.last_migration) == 10
    # not due: unchanged
    early = state.replace(generations=jnp.array([9, 0, 0, 0], jnp.int32))
    same = migrate(jax.random.key(1), a, early, config)
    assert np.array_equal(same.members, early.members) and int(same.last_migration) == 0


def test_assign_island_sets_the_current_island_only():
    config = SamplingConfig()
    state = make_state(config, 16, {0: [3], 1: [3, 4]}, island=2)
    new = assign_island(state, 3, True)
    assert np.asarray(new.members)[:, 3].tolist() == [False, False, True, False]
    assert np.array_equal(np.asarray(new.members)[:, 4], np.asarray(state.members)[:, 4])
    for cell, ins in [(3, False), (-1, True)]:
        assert np.array_equal(assign_island(state, cell, ins).members, state.members)


# ------------------------------------------------------------------ bad inputs


def test_bad_inputs_raise_clear_errors():
    config = SamplingConfig()
    a = make_archive(GRID, CELLS, FITS)
    state = sampler_init(a, config)
    with pytest.raises(ValueError, match="state"):
        parent_distribution(a, sampler_init(a, SamplingConfig(num_islands=2)), config)
    with pytest.raises(TypeError, match="config"):
        sample_parent(jax.random.key(0), a, state, {"p_elite": 0.7})
    with pytest.raises(TypeError, match="key"):
        sample_parent(jax.random.PRNGKey(0), a, state, config)
    with pytest.raises(TypeError, match="archive"):
        sample_inspirations(jax.random.key(0), {"fitness": a.fitness}, 0, config)
    with pytest.raises(ValueError, match="parent_cell"):
        sample_inspirations(jax.random.key(0), a, 16, config)
    with pytest.raises(ValueError, match="parent_cell"):
        sample_inspirations(jax.random.key(0), a, jnp.array([1, 2]), config)
    with pytest.raises(TypeError, match="state"):
        advance(a, config)
