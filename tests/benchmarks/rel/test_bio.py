"""Tests for jaxpapers.benchmarks.rel.bio: trees, the JC69/HKY85 simulator (float64 closed forms,
scipy expm, pyvolve parity), keys/jit/vmap, the convergence injection, B1 items, the detector."""

from __future__ import annotations

import collections
import itertools
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.linalg
import scipy.special

from jaxpapers.benchmarks.rel import bio, bio_detect

FREQS = (0.1, 0.2, 0.3, 0.4)
HKY = {"model": "hky85", "kappa": 4.0, "freqs": FREQS}
SIM = jax.jit(bio.simulate_alignment, static_argnames=("num_sites", "model"))
TRANSITION_PAIRS = ((0, 2), (2, 0), (1, 3), (3, 1))  # A <-> G, C <-> T


def _pi(model):
    return np.array(FREQS) if model == "hky85" else np.full(4, 0.25)


def _kw(model):
    return HKY if model == "hky85" else {"model": "jc69"}


# ------------------------------------------------------------------------------------ trees
def _bfs_leaf_distances(tree):
    """Reference: breadth-first search on the undirected tree."""
    parents = tree["parents"]
    adj = collections.defaultdict(list)
    for i in range(1, len(parents)):
        adj[i].append(int(parents[i]))
        adj[int(parents[i])].append(i)
    out = []
    for src in tree["leaves"]:
        dist, frontier = {int(src): 0}, [int(src)]
        while frontier:
            nxt = []
            for x in frontier:
                for y in adj[x]:
                    if y not in dist:
                        dist[y] = dist[x] + 1
                        nxt.append(y)
            frontier = nxt
        out.append([dist[int(t)] for t in tree["leaves"]])
    return np.array(out)


@pytest.mark.parametrize("edge_choice", bio.EDGE_CHOICES)
@pytest.mark.parametrize("n", [2, 3, 17, 50])
def test_random_tree_invariants(n, edge_choice):
    tree = bio.random_tree(jax.random.key(n), n, min_length=0.2, max_length=0.7,
                           edge_choice=edge_choice)
    parents, lengths, is_leaf = tree["parents"], tree["branch_lengths"], tree["is_leaf"]
    assert parents.shape == lengths.shape == is_leaf.shape == (2 * n - 1,)
    assert parents.dtype == np.int32 and parents[0] == -1
    assert np.all((parents[1:] >= 0) & (parents[1:] < np.arange(1, 2 * n - 1)))
    kids = np.bincount(parents[1:], minlength=2 * n - 1)
    assert np.all(kids[is_leaf] == 0) and np.all(kids[~is_leaf] == 2)  # binary, rooted
    assert tree["names"] == [str(i) for i in range(1, n + 1)]
    assert sorted(tree["leaves"].tolist()) == np.flatnonzero(is_leaf).tolist()
    assert lengths[0] == 0 and np.all((lengths[1:] >= 0.2) & (lengths[1:] <= 0.7))
    text = bio.newick(tree)
    assert text.endswith(";") and text.count("(") == text.count(")") == n - 1
    assert sorted(re.findall(r"[(,](\d+):", text), key=int) == tree["names"]
    dist = bio.leaf_distances(tree)
    np.testing.assert_array_equal(dist, _bfs_leaf_distances(tree))
    assert dist.dtype == np.int32 and np.all(dist[~np.eye(n, dtype=bool)] >= 2)


def test_random_tree_keys():
    a, b, c = (bio.random_tree(k, 30) for k in
               (jax.random.key(1), jax.random.key(1), jax.random.key(2)))
    assert bio.newick(a) == bio.newick(b) != bio.newick(c)
    with jax.enable_x64(True):  # float32 draws: the tree does not depend on x64 mode
        assert bio.newick(bio.random_tree(jax.random.key(1), 30)) == bio.newick(a)


@pytest.mark.parametrize("edge_choice, expected", [("official", 1 / 6), ("uniform", 1 / 4)])
def test_edge_choice_distribution(edge_choice, expected):
    """n = 4: leaf 4's sibling is internal iff the root -- internal edge is split. The official
    node-then-neighbour rule splits it with probability (1/5)(1/2 + 1/3) = 1/6 (the root has
    degree 2, the internal node 3), a uniform edge with 1/4: ~9 standard errors apart with 2000
    trials, so a 4-SE band (two-sided tail 6e-5) tells the two rules apart."""
    trials, hits = 2000, 0
    for k in jax.random.split(jax.random.key(0), trials):
        tree = bio.random_tree(k, 4, edge_choice=edge_choice)
        leaf4 = tree["leaves"][3]
        sibling = [i for i in np.flatnonzero(tree["parents"] == tree["parents"][leaf4])
                   if i != leaf4][0]
        hits += not tree["is_leaf"][sibling]
    se = np.sqrt(expected * (1 - expected) / trials)
    assert abs(hits / trials - expected) < 4 * se


# ------------------------------------------------------------------------------------ model
@pytest.mark.parametrize("model", bio.MODELS)
def test_transition_matrices_float64(x64, model):
    t = np.array([0.0, 1e-3, 0.3, 1.0, 5.0])
    p = np.asarray(bio.transition_matrices(t, **_kw(model)))
    q = np.asarray(bio.rate_matrix(**_kw(model)))
    pi = _pi(model)
    assert p.dtype == q.dtype == np.float64
    np.testing.assert_allclose(q.sum(1), 0, atol=1e-14)
    np.testing.assert_allclose(-(pi * np.diag(q)).sum(), 1, rtol=1e-14)  # subst. per site
    np.testing.assert_allclose(pi @ q, 0, atol=1e-14)  # pi is stationary
    np.testing.assert_allclose(p.sum(-1), 1, atol=1e-13)
    np.testing.assert_allclose(p[0], np.eye(4), atol=1e-13)
    np.testing.assert_allclose(pi[:, None] * p, np.swapaxes(pi[:, None] * p, 1, 2),
                               atol=1e-13)  # detailed balance pi_i P_ij = pi_j P_ji
    for ti, pt in zip(t, p):
        np.testing.assert_allclose(pt, scipy.linalg.expm(q * ti), atol=1e-10)
    if model == "jc69":
        diag = 0.25 + 0.75 * np.exp(-4 * t / 3)
        np.testing.assert_allclose(np.diagonal(p, axis1=1, axis2=2), diag[:, None] * np.ones(4),
                                   atol=1e-13)
        np.testing.assert_allclose(bio.jc_pdistance_theory(t), 1 - diag, atol=1e-14)
    else:  # HKY85: Q_ij proportional to pi_j, times kappa for a transition
        np.testing.assert_allclose(q[0, 2] / q[0, 1], 4.0 * FREQS[2] / FREQS[1], rtol=1e-13)
        np.testing.assert_allclose(q[1, 3] / q[1, 0], 4.0 * FREQS[3] / FREQS[0], rtol=1e-13)


def test_model_parameters_are_traceable():
    """kappa and freqs may be swept: vmap over them equals the loop (jit and vmap, STYLE)."""
    kappas = jnp.array([1.0, 4.0, 10.0])
    freqs = jnp.array([FREQS, (0.25, 0.25, 0.25, 0.25), (0.4, 0.3, 0.2, 0.1)])
    f = jax.jit(lambda k, fr: bio.transition_matrices(jnp.array([0.2, 0.7]), model="hky85",
                                                      kappa=k, freqs=fr))
    batched = jax.vmap(f)(kappas, freqs)
    looped = [f(k, fr) for k, fr in zip(kappas, freqs)]
    np.testing.assert_allclose(batched, np.stack(looped), atol=1e-6)
    np.testing.assert_allclose(looped[1][1], bio.transition_matrices(
        jnp.array(0.7), model="hky85", kappa=4.0, freqs=(0.25,) * 4), atol=1e-6)


def test_poisson_tail_against_scipy(x64):
    """The detector's tail -log10 P(Poisson(lam) >= r) against scipy (closed form check)."""
    r = np.array([1, 2, 5, 5, 8, 20, 100, 6200, 6400, 1, 3], float)
    lam = np.array([0.5, 1.5, 0.0123, 3.0, 1e-4, 10.0, 60.0, 6000.0, 6000.0, 1.0, 3.5])
    ours = np.asarray(jax.jit(bio_detect._poisson_tail_score)(r, lam))
    ref = -np.log10(scipy.special.pdtrc(r - 1, lam))  # P(X > r - 1) = P(X >= r)
    np.testing.assert_allclose(ours[:7], ref[:7], rtol=1e-9)
    # lam >> 64 terms: the geometric bound keeps the score conservative (below, close)
    assert np.all(ours[7:9] <= ref[7:9]) and np.all(ours[7:9] > ref[7:9] - 0.01)
    assert np.all(ours[9:] == 0)  # r <= lam: no excess, score 0


def test_jc_pdistance_two_nodes(key):
    """p-distance of 10^5 sites within 0.01 of 3/4 (1 - exp(-4d/3)) (SE <= 0.0016)."""
    d = jnp.array([0.1, 0.5, 1.0])
    lengths = jnp.stack([jnp.zeros(3), d], axis=1)  # three 2-node trees, vmapped
    sim = jax.vmap(lambda k, t: bio.simulate_alignment(k, jnp.array([-1, 0]), t,
                                                       num_sites=100_000))
    aln = np.asarray(sim(jax.random.split(key, 3), lengths))
    p = np.mean(aln[:, 0] != aln[:, 1], axis=-1)
    np.testing.assert_array_less(np.abs(p - np.asarray(bio.jc_pdistance_theory(d))), 0.01)


def test_hky_two_nodes_against_expm(key):
    """Root and child composition, p-distance and transition fraction within 3 SE of expm(Qd)."""
    d, sites = 0.3, 100_000
    aln = np.asarray(bio.simulate_alignment(key, jnp.array([-1, 0]), jnp.array([0.0, d]),
                                            num_sites=sites, **HKY))
    with jax.enable_x64(True):
        q = np.asarray(bio.rate_matrix(**HKY))
    joint = np.array(FREQS)[:, None] * scipy.linalg.expm(q * d)  # P(root = i, child = j)
    ti = sum(joint[i, j] for i, j in TRANSITION_PAIRS)
    checks = [(np.mean(aln[r] == b), FREQS[b]) for r in (0, 1) for b in range(4)]
    checks.append((np.mean(aln[0] != aln[1]), 1 - np.trace(joint)))
    checks.append((np.mean([(aln[0] == i) & (aln[1] == j) for i, j in TRANSITION_PAIRS]) * 4,
                   ti))
    for observed, expected in checks:
        assert abs(observed - expected) < 3 * np.sqrt(expected * (1 - expected) / sites)


# ------------------------------------------------------------------------- keys, jit, vmap
@pytest.mark.parametrize("model", bio.MODELS)
def test_keys_jit_vmap_no_recompile(key, model):
    tree = bio.random_tree(jax.random.key(7), 12)
    args = (tree["parents"], tree["branch_lengths"])
    keys = jax.random.split(key, 3)
    eager = np.stack([bio.simulate_alignment(k, *args, num_sites=64, **_kw(model))
                      for k in keys])
    assert eager.shape == (3, 23, 64) and eager.dtype == np.int8 and eager.min() >= 0
    assert eager.max() <= 3
    again = bio.simulate_alignment(keys[0], *args, num_sites=64, **_kw(model))
    np.testing.assert_array_equal(again, eager[0])  # same key, same alignment
    assert np.mean(eager[0] != eager[1]) > 0.3  # different keys differ

    @jax.jit  # the public function under jit (tracer inputs) and vmap over keys
    def batched(keys, parents, lengths):
        return jax.vmap(lambda k: bio.simulate_alignment(k, parents, lengths, num_sites=64,
                                                         **_kw(model)))(keys)

    np.testing.assert_array_equal(batched(keys, *args), eager)  # jit(vmap) == eager loop
    compiled = batched._cache_size()
    batched(jax.random.split(keys[0], 3), tree["parents"], tree["branch_lengths"] * 2)
    assert batched._cache_size() == compiled  # new keys and lengths: no recompilation


@pytest.mark.parametrize("model", bio.MODELS)
def test_pyvolve_parity(key, model, tmp_path, monkeypatch):
    """Same rate matrix as pyvolve, and per-pair p-distances on one 6-leaf tree agree.

    Columns are i.i.d. in both simulators, so the mean p-distance over pairs (a per-column
    average) has SE = column std / sqrt(S): within 3 SE. Each of the 15 pairs within 4 SE
    (Bonferroni: 15 P(|z| > 4) ~ 1e-3). pyvolve is slow (~0.2 ms per site and leaf): 4000 sites.
    """
    pyvolve = pytest.importorskip("pyvolve")
    monkeypatch.chdir(tmp_path)
    tree = bio.random_tree(jax.random.key(3), 6)
    params = {} if model == "jc69" else {"kappa": 4.0, "state_freqs": list(FREQS)}
    pv_model = pyvolve.Model("nucleotide", params)
    with jax.enable_x64(True):
        np.testing.assert_allclose(pv_model.extract_rate_matrix(),
                                   bio.rate_matrix(**_kw(model)), atol=1e-12)
    np.random.seed(0)  # pyvolve draws from numpy's global generator
    sites = 4000
    evolver = pyvolve.Evolver(tree=pyvolve.read_tree(tree=bio.newick(tree, digits=10)),
                              partitions=pyvolve.Partition(models=pv_model, size=sites))
    evolver(seqfile=None, ratefile=None, infofile=None)
    seqs = evolver.get_sequences()
    theirs = np.stack([np.array([bio.BASES.index(c) for c in seqs[nm]])
                       for nm in tree["names"]])
    ours = np.asarray(bio.simulate_alignment(key, tree["parents"], tree["branch_lengths"],
                                             num_sites=2 * sites, **_kw(model)))[tree["leaves"]]
    pairs = list(itertools.combinations(range(6), 2))

    def per_column(aln):  # [pairs, S] differing indicators
        return np.stack([aln[i] != aln[j] for i, j in pairs]).astype(float)

    a, b = per_column(theirs), per_column(ours)
    col_a, col_b = a.mean(0), b.mean(0)
    se = np.sqrt(col_a.var() / col_a.size + col_b.var() / col_b.size)
    assert abs(col_a.mean() - col_b.mean()) < 3 * se
    pa, pb = a.mean(1), b.mean(1)
    se_pair = np.sqrt(pa * (1 - pa) / a.shape[1] + pb * (1 - pb) / b.shape[1])
    np.testing.assert_array_less(np.abs(pa - pb), 4 * se_pair)
    comp_a = np.array([np.mean(theirs == s) for s in range(4)])
    comp_b = np.array([np.mean(ours == s) for s in range(4)])
    np.testing.assert_allclose(comp_a, _pi(model), atol=0.03)  # pooled over correlated leaves
    np.testing.assert_allclose(comp_b, _pi(model), atol=0.03)


# ------------------------------------------------------------------- injection and items
def test_inject_convergence(key):
    base = np.random.default_rng(0).integers(0, 4, (9, 40)).astype(np.int8)
    taxa = jnp.array([1, 4, 7])
    out, starts = bio.inject_convergence(key, base, taxa, num_blocks=5, block_len=5)
    out, starts = np.asarray(out), np.asarray(starts)
    assert out.dtype == np.int8 and starts.dtype == np.int32
    assert len(set(starts.tolist())) == 5 and starts.min() >= 0 and starts.max() <= 35
    planted = np.zeros(40, bool)
    for s in starts:
        planted[s:s + 5] = True
    assert np.all(out[[1, 4, 7]][:, planted] == out[1, planted])  # shared by all chosen taxa
    np.testing.assert_array_equal(out[:, ~planted], base[:, ~planted])
    np.testing.assert_array_equal(out[[0, 2, 3, 5, 6, 8]], base[[0, 2, 3, 5, 6, 8]])
    keys = jax.random.split(key, 3)
    batched = jax.jit(jax.vmap(lambda k, a, t: bio.inject_convergence(k, a, t)[0],
                               in_axes=(0, None, None)))
    np.testing.assert_array_equal(batched(keys, base, taxa),  # jit(vmap) == eager loop
                                  [bio.inject_convergence(k, base, taxa)[0] for k in keys])


@pytest.mark.parametrize("rc", [2, 3, 6])
def test_choose_taxa_greedy_max_min(key, rc):
    tree = bio.random_tree(jax.random.key(11), 30)
    dist = bio.leaf_distances(tree)
    taxa = bio.choose_taxa(key, tree, rc, min_edges=3)
    assert len(set(taxa.tolist())) == rc
    assert dist[np.ix_(taxa, taxa)][~np.eye(rc, dtype=bool)].min() >= 3
    for t in range(1, rc):  # each pick maximises the smallest distance to the earlier picks
        closest = dist[taxa[:t]].min(0).astype(float)
        closest[taxa[:t]] = -1
        assert closest[taxa[t]] == closest.max()


def test_generate_b1_items(key):
    yes = bio.generate_b1(key, num_leaves=20, rc=3)  # the detector test's shapes: no recompile
    no = bio.generate_b1(key, num_leaves=20, rc=3, yes=False)
    assert (yes["answer"], no["answer"], no["taxa"], no["blocks"]) == ("Yes", "No", [], [])
    assert yes["newick"] == no["newick"]  # paired: same tree
    assert list(yes["alignment"]) == [str(i) for i in range(1, 21)]
    assert len(yes["taxa"]) == 3 and yes["taxa"] == sorted(yes["taxa"], key=int)
    gold = [yes["tree"]["names"].index(t) for t in yes["taxa"]]
    dist = bio.leaf_distances(yes["tree"])
    assert dist[np.ix_(gold, gold)][~np.eye(3, dtype=bool)].min() >= 3
    rows_y = np.array([list(s) for s in yes["alignment"].values()])
    rows_n = np.array([list(s) for s in no["alignment"].values()])
    assert rows_y.shape == (20, 300) and set(rows_y.ravel()) <= set("ACGT")
    planted = np.zeros(300, bool)
    for s in yes["blocks"]:
        planted[s:s + 5] = True
    assert len(yes["blocks"]) == 5
    assert np.all(rows_y[gold][:, planted] == rows_y[gold[0], planted])
    changed = rows_y != rows_n  # only the gold taxa inside the blocks differ from the "no" twin
    assert not changed[:, ~planted].any()
    assert not np.delete(changed, gold, axis=0).any()


def test_detector_beats_chance():
    """20 "yes" (RC 3) and 20 "no" items, 20 leaves, 300 sites, Bonferroni alpha = 0.01.

    A planted triple shares >= 5 runs of >= 5 sites where a distant triple shares one with
    probability ~1e-2, so the triple test finds it; measured: 40 / 40 correct. Asserted: 32 /
    40 correct (a data-blind guess reaches 32 with probability 1e-4), at most 2 false alarms,
    and mean taxa F1 >= 0.8 on the "yes" items.
    """
    correct, false_alarms, f1 = 0, 0, []
    for i, k in enumerate(jax.random.split(jax.random.key(5), 40)):
        item = bio.generate_b1(k, num_leaves=20, rc=3, yes=i % 2 == 0)
        answer, taxa = bio.detect_convergence(item["alignment"], item["tree"])
        correct += answer == item["answer"]
        false_alarms += answer == "Yes" and item["answer"] == "No"
        if item["answer"] == "Yes":
            hit = len(set(taxa) & set(item["taxa"]))
            f1.append(2 * hit / (len(taxa) + len(item["taxa"])))
    assert correct >= 32 and false_alarms <= 2 and np.mean(f1) >= 0.8


# -------------------------------------------------------------------------------- bad input
_P, _T = np.array([-1, 0, 0]), np.array([0.0, 0.1, 0.2])
_TREE = bio.random_tree(jax.random.key(0), 4)
_ALN = jnp.zeros((4, 20), jnp.int8)
BAD = [
    (lambda: bio.simulate_alignment(jax.random.key(0), np.array([0, 0, 0]), _T, num_sites=5),
     "parents"),
    (lambda: bio.simulate_alignment(jax.random.key(0), np.array([-1, 0, 2]), _T, num_sites=5),
     "parents"),
    (lambda: bio.simulate_alignment(jax.random.key(0), np.array([-1.0, 0, 0]), _T,
                                    num_sites=5), "parents"),
    (lambda: bio.simulate_alignment(jax.random.key(0), _P, np.array([0, -0.1, 0.2]),
                                    num_sites=5), "branch_lengths"),
    (lambda: bio.simulate_alignment(jax.random.key(0), _P, np.array([0, np.nan, 0.2]),
                                    num_sites=5), "branch_lengths"),
    (lambda: bio.simulate_alignment(jax.random.key(0), _P, _T[:2], num_sites=5),
     "branch_lengths"),
    (lambda: bio.simulate_alignment(jax.random.key(0), _P, _T, num_sites=0), "num_sites"),
    (lambda: bio.simulate_alignment(jax.random.key(0), _P, _T, num_sites=5, model="gtr"),
     "model"),
    (lambda: bio.simulate_alignment(jax.random.key(0), _P, _T, num_sites=5, model="hky85",
                                    kappa=0.0), "kappa"),
    (lambda: bio.simulate_alignment(jax.random.key(0), _P, _T, num_sites=5, model="hky85",
                                    freqs=(0.5, 0.5, 0.5, 0.5)), "freqs"),
    (lambda: bio.simulate_alignment(jax.random.key(0), _P, _T, num_sites=5, model="hky85",
                                    freqs=(0.5, 0.5, 0.0, 0.0)), "freqs"),
    (lambda: bio.simulate_alignment(jax.random.key(0), _P, _T, num_sites=5, model="hky85",
                                    freqs=(0.5, 0.5)), "freqs"),
    (lambda: bio.random_tree(jax.random.key(0), 1), "num_leaves"),
    (lambda: bio.random_tree(jax.random.key(0), 5, min_length=2.0), "min_length"),
    (lambda: bio.random_tree(jax.random.key(0), 5, edge_choice="yule"), "edge_choice"),
    (lambda: bio.inject_convergence(jax.random.key(0), _ALN, jnp.array([1])), "taxa"),
    (lambda: bio.inject_convergence(jax.random.key(0), _ALN, jnp.array([1, 9])), "taxa"),
    (lambda: bio.inject_convergence(jax.random.key(0), _ALN, jnp.array([1, 2]), block_len=21),
     "block_len"),
    (lambda: bio.inject_convergence(jax.random.key(0), _ALN, jnp.array([1, 2]), num_blocks=17),
     "num_blocks"),
    (lambda: bio.choose_taxa(jax.random.key(0), _TREE, 1), "rc"),
    (lambda: bio.choose_taxa(jax.random.key(0), _TREE, 4), "rc"),  # a cherry is 2 edges apart
    (lambda: bio.generate_b1(jax.random.key(0), num_leaves=4, rc=4, max_tries=2), "rc"),
    (lambda: bio.detect_convergence(_ALN, _TREE, alpha=0.0), "alpha"),
    (lambda: bio.convergence_scores(_ALN, jnp.zeros((4, 4)), window=21), "window"),
]


@pytest.mark.parametrize("fn, name", BAD)
def test_bad_input(fn, name):
    with pytest.raises(ValueError, match=name):
        fn()
