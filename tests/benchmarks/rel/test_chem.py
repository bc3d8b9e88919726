"""REL chemistry: formulas, exact isomer counts, canonical SMILES, and the C1 / C3 items."""

from __future__ import annotations

import itertools
import json
import os
import random
import subprocess
import sys
import time

import networkx as nx
import pytest

from jaxpapers.benchmarks.rel import chem

ALKANES = [1, 1, 1, 2, 3, 5, 9, 18, 35, 75]  # OEIS A000602, C1..C10
HETERO = {"C3H8O2": 11, "C4H10O": 7, "C5H12O": 14, "C7H16O": 72}


# ------------------------------------------------------------------------------ helpers

def _random_writing(smiles: str, rng: random.Random) -> str:
    """Another SMILES of the same molecule: atoms renumbered, a random first atom, branches
    in random order, and now and then an explicit single bond ``-``."""
    elements, edges = chem.parse_smiles(smiles)
    n = len(elements)
    perm = list(range(n))
    rng.shuffle(perm)
    adj = {perm[v]: [] for v in range(n)}
    for i, j in edges:
        adj[perm[i]].append(perm[j])
        adj[perm[j]].append(perm[i])
    label = {perm[v]: e for v, e in enumerate(elements)}

    def bond():
        return "-" if rng.random() < 0.2 else ""

    def write(v, parent):
        kids = [w for w in adj[v] if w != parent]
        rng.shuffle(kids)
        text = label[v]
        for k in kids[:-1]:
            text += "(" + bond() + write(k, v) + ")"
        if kids:
            text += bond() + write(kids[-1], v)
        return text

    return write(rng.randrange(n), -1)


def _pruefer_tree(seq, n):
    """The labelled tree on 0..n-1 with Pruefer sequence ``seq`` (as an edge list)."""
    degree = [1] * n
    for v in seq:
        degree[v] += 1
    edges = []
    for v in seq:
        leaf = min(u for u in range(n) if degree[u] == 1)
        edges.append((leaf, v))
        degree[leaf] -= 1
        degree[v] -= 1
    u, w = (x for x in range(n) if degree[x] == 1)
    return edges + [(u, w)]


def _brute_force_keys(elements):
    """Keys of every tree on these atoms within the valences, from all Pruefer sequences."""
    n = len(elements)
    if n == 1:
        return {chem.tree_key(elements, [])}
    keys = set()
    for seq in itertools.product(range(n), repeat=n - 2):
        # atom v has degree 1 + (times v occurs in seq)
        if any(seq.count(v) + 1 > chem.VALENCE[e] for v, e in enumerate(elements)):
            continue
        keys.add(chem.tree_key(elements, _pruefer_tree(seq, n)))
    return keys


def _graph(smiles):
    elements, edges = chem.parse_smiles(smiles)
    g = nx.Graph(edges)
    g.add_nodes_from(range(len(elements)))
    nx.set_node_attributes(g, dict(enumerate(elements)), "element")
    return g


# ------------------------------------------------------------------------------ formulas

def test_parse_formula_and_hill_order():
    assert chem.parse_formula("C4H10O") == {"C": 4, "H": 10, "O": 1}
    assert list(chem.parse_formula("OH10C4")) == ["C", "H", "O"]
    assert chem.parse_formula("CH3CH2OH") == {"C": 2, "H": 6, "O": 1}
    assert chem.parse_formula("ClCH2Br") == {"C": 1, "H": 2, "Br": 1, "Cl": 1}
    assert chem.parse_formula("H2O") == {"H": 2, "O": 1}
    assert chem.parse_formula("Cl2") == {"Cl": 2}
    assert chem.hill_formula({"N": 1, "H": 3}) == "H3N"        # no carbon: H alphabetical
    assert chem.hill_formula({"S": 1, "C": 2, "H": 6, "O": 0}) == "C2H6S"
    assert chem.hill_formula(chem.parse_formula("IC2H5")) == "C2H5I"


@pytest.mark.parametrize("bad", ["", "C2H6O-", "c2h6", "C2 H6", "Xe", "CB", "C2H5Pb", "CL",
                                 "C0H4", "C02H6", "H2", "H", "4C", 42, None])
def test_parse_formula_rejects(bad):
    with pytest.raises(ValueError, match="formula"):
        chem.parse_formula(bad)


def test_dbe():
    assert chem.dbe("C4H10O") == 0.0
    assert chem.dbe("C2H4") == 1.0
    assert chem.dbe("C6H6") == 4.0
    assert chem.dbe("C2H7N") == 0.0
    assert chem.dbe("CH2Cl2") == 0.0
    assert chem.dbe("C2H3N") == 2.0                            # acetonitrile
    assert chem.dbe("CH5") == -0.5
    assert isinstance(chem.dbe("CH4"), float)


# ------------------------------------------------------------------------------ counts

@pytest.mark.parametrize("k", range(1, 11))
def test_alkane_counts(k):
    assert chem.count_isomers(f"C{k}H{2 * k + 2}") == ALKANES[k - 1]


@pytest.mark.parametrize("formula,count", sorted(HETERO.items()))
def test_heteroatom_counts(formula, count):
    assert chem.count_isomers(formula) == count
    assert len(chem.isomer_universe(formula)) == count


def test_peroxides_are_in_the_c3h8o2_eleven():
    """O-O bonds are allowed by valence: 8 isomers without them, 3 peroxides, 11 in all."""
    universe = chem.isomer_universe("C3H8O2")
    peroxides = {s for s in universe if "OO" in s}
    assert peroxides == {"CCCOO", "CC(C)OO", "CCOOC"}
    assert len(universe) - len(peroxides) == 8


def test_small_formulas_and_pairs_of_halogens():
    assert chem.isomer_universe("CH4") == ["C"]
    assert chem.isomer_universe("H2O") == ["O"]
    assert chem.isomer_universe("F2") == ["FF"]
    assert chem.isomer_universe("H2O2") == ["OO"]
    assert chem.isomer_universe("CH2Cl2") == ["ClCCl"]
    assert chem.isomer_universe("C2H4Cl2") == ["CC(Cl)Cl", "ClCCCl"]
    assert chem.isomer_universe("H10C4O") == chem.isomer_universe("C4H10O")


@pytest.mark.parametrize("formula", ["C3H8O2", "C4H10O", "C5H12O", "C6H14", "C7H16",
                                     "C2H6OS", "C2H6ClN", "C3H9N", "C4H10O2", "C3H7BrO",
                                     "CH6N2O", "C2H4FI"])
def test_enumeration_equals_pruefer_brute_force(formula):
    """Leaf growth finds exactly the trees that all Pruefer sequences give (<= 7 atoms)."""
    heavy = [e for e, c in chem.parse_formula(formula).items() if e != "H" for _ in range(c)]
    universe = chem.isomer_universe(formula)
    assert {chem.tree_key(*chem.parse_smiles(s)) for s in universe} == _brute_force_keys(heavy)


def test_universe_members_are_pairwise_non_isomorphic():
    """Checked with networkx (not with this module's keys): 72 distinct C7H16O molecules."""
    universe = chem.isomer_universe("C7H16O")
    graphs = [_graph(s) for s in universe]
    match = nx.algorithms.isomorphism.categorical_node_match("element", None)
    by_degrees = {}
    for g in graphs:
        sig = tuple(sorted((g.nodes[v]["element"], g.degree[v]) for v in g))
        by_degrees.setdefault(sig, []).append(g)
    for group in by_degrees.values():
        for a, b in itertools.combinations(group, 2):
            assert not nx.is_isomorphic(a, b, node_match=match)


def test_c10_counts_fast():
    chem._universe.cache_clear()
    t = time.perf_counter()
    assert chem.count_isomers("C10H22") == 75
    assert time.perf_counter() - t < 2.0


@pytest.mark.parametrize("formula", ["C2H4", "C6H6", "CH5", "C3H6O", "C2H3N"])
def test_count_refuses_dbe_not_zero(formula):
    with pytest.raises(ValueError, match="formula.*DBE"):
        chem.count_isomers(formula)
    with pytest.raises(ValueError, match="formula"):
        chem.isomer_universe(formula)


# ------------------------------------------------------------------------------ SMILES

@pytest.mark.parametrize("formula", ["C8H18", "C7H16O", "C3H8O2", "C4H9BrO", "C3H9NS",
                                     "C3H6ClF", "C2H6I2N2"])
def test_universe_round_trip_and_formula(formula):
    rng = random.Random(formula)
    hill = chem.hill_formula(chem.parse_formula(formula))
    universe = chem.isomer_universe(formula)
    assert universe == sorted(set(universe))
    for s in universe:
        elements, edges = chem.parse_smiles(s)
        assert chem.write_smiles(elements, edges) == s
        assert chem.canonical_smiles(s) == s
        assert chem.formula_of(s) == hill
        for _ in range(3):
            other = _random_writing(s, rng)
            assert chem.canonical_smiles(other) == s, other
            assert chem.formula_of(other) == hill


def test_canonical_smiles_of_hand_written_variants():
    groups = [["CCO", "OCC", "C(O)C", "C(C)O", "C-C-O", "C(-C)O"],
              ["CC(C)C", "C(C)(C)C", "CC(C)(C)", "C(-C)(C)-C"],
              ["CC(C)(C)C", "C(C)(C)(C)C", "CC(C)(C)(C)"],
              ["CC(C)CC", "CCC(C)C", "C(CC)(C)C", "C(C)(C)CC"],
              ["CCC(O)CO", "OCC(O)CC", "C(O)C(O)CC", "C(C(CC)O)O"],
              ["ClC(Br)I", "BrC(I)Cl", "IC(Cl)Br", "C(Cl)(Br)I"],
              ["CCOOC", "COOCC", "O(C)OCC"]]
    canon = []
    for group in groups:
        forms = {chem.canonical_smiles(s) for s in group}
        assert len(forms) == 1, (group, forms)
        canon.append(forms.pop())
    assert len(set(canon)) == len(canon)
    assert canon[:3] == ["CCO", "CC(C)C", "CC(C)(C)C"]
    assert chem.canonical_smiles("CCCCC") != chem.canonical_smiles("CCC(C)C")


def test_parse_smiles_structure():
    assert chem.parse_smiles("C") == (["C"], [])
    assert chem.parse_smiles("ClCBr") == (["Cl", "C", "Br"], [(0, 1), (1, 2)])
    assert chem.parse_smiles("C(C)(C)C") == (["C"] * 4, [(0, 1), (0, 2), (0, 3)])
    assert chem.parse_smiles("CC(C(O)C)S") == (
        ["C", "C", "C", "O", "C", "S"], [(0, 1), (1, 2), (2, 3), (2, 4), (1, 5)])
    assert chem.formula_of("NN") == "H4N2"
    assert chem.formula_of("CSC") == "C2H6S"


@pytest.mark.parametrize("bad", ["", "C1CC1", "C=C", "C#N", "[CH4]", "c1ccccc1", "CcC",
                                 "C.C", "C(", "C)", "(C)C", "C()", "C(C", "CC-", "-C", "C--C",
                                 "C(C)(C)(C)(C)C", "O(C)(C)C", "FCF(C)", "CX", "Cl(C)C",
                                 "C/C", "C%10C", None, 5])
def test_parse_smiles_rejects(bad):
    with pytest.raises(ValueError, match="smiles"):
        chem.parse_smiles(bad)


@pytest.mark.parametrize("elements,edges,name", [
    ([], [], "elements"), (["C", "Xe"], [(0, 1)], "elements"), ("CC", [(0, 1)], "elements"),
    (["C", "C"], [], "edges"), (["C", "C", "C"], [(0, 1), (1, 2), (2, 0)], "edges"),
    (["C", "C", "C", "C"], [(0, 1), (0, 1), (2, 3)], "edges"),
    (["C", "C", "C"], [(0, 1), (0, 3)], "edges"), (["C", "C"], [(0, 0)], "edges"),
    (["C", "C", "C", "C"], [(0, 1), (2, 3), (3, 2)], "edges"),
    (["O", "C", "C", "C"], [(0, 1), (0, 2), (0, 3)], "edges"),
    (["C", "C"], [(0,)], "edges"), (["C", "C"], "01", "edges")])
def test_tree_functions_reject(elements, edges, name):
    with pytest.raises(ValueError, match=name):
        chem.write_smiles(elements, edges)
    with pytest.raises(ValueError, match=name):
        chem.tree_key(elements, edges)


# ------------------------------------------------------------------------------ C1

def _c1_items():
    sizes = (2, 5, 10, 30)
    explicit = (None, None, "C5H12O", "C3H8O2", "C4H9BrO", "C9H20")
    items = []
    for seed in range(200):
        n = sizes[seed % 4]
        formula = explicit[seed % 6]
        if formula is not None and chem.count_isomers(formula) < n:
            formula = None
        items.append(chem.generate_c1(seed, n=n, formula=formula))
    return items


def test_c1_items_and_solver():
    items = _c1_items()
    answers = [it["answer"] for it in items]
    assert 60 < answers.count("Yes") < 140                     # p = 1/2, sd 7
    for it in items:
        mols = it["molecules"]
        assert len(mols) == it["n"] == len(set(mols))
        assert all(chem.canonical_smiles(s) == s for s in mols)
        formulas = [chem.formula_of(s) for s in mols]
        heavy = {len(chem.parse_smiles(s)[0]) for s in mols}
        assert len(heavy) == 1                                 # same heavy-atom count
        if it["answer"] == "Yes":
            assert set(formulas) == {it["formula"]} and it["odd_index"] is None
        else:
            odd = it["odd_index"]
            assert formulas[odd] == it["odd_formula"] != it["formula"]
            assert formulas[:odd] + formulas[odd + 1:] == [it["formula"]] * (it["n"] - 1)
        assert chem.solve_c1(it) == it["answer"]
        assert chem.solve_c1({"molecules": [_random_writing(s, random.Random(0))
                                            for s in mols]}) == it["answer"]
    defaults = {it["formula"] for it, seed in zip(items, range(200)) if seed % 6 < 2}
    assert defaults <= set(chem.C1_FORMULAS) and len(defaults) > 3


def test_c1_default_formulas_have_the_documented_sizes():
    sizes = [chem.count_isomers(f) for f in chem.C1_FORMULAS]
    assert sizes == [5, 9, 18, 35, 75, 7, 14, 32, 72, 11, 8, 17, 39, 4, 8, 17, 4, 7, 14]
    assert all(chem.dbe(f) == 0 for f in chem.C1_FORMULAS)


def test_c1_deterministic():
    assert chem.generate_c1(3, n=10) == chem.generate_c1(3, n=10)
    items = [json.dumps(chem.generate_c1(s, n=5)) for s in range(20)]
    assert len(set(items)) == 20
    assert chem.generate_c1(0, n=75)["formula"] == "C10H22"    # the only default with 75


def test_items_same_in_another_process():
    """No dependence on the string hash seed (PYTHONHASHSEED) or process state."""
    code = ("import json; from jaxpapers.benchmarks.rel import chem; "
            "print(json.dumps([chem.generate_c1(7, n=10), "
            "chem.generate_c3(7, formula='C6H14O', num_given=9)]))")
    env = dict(os.environ, PYTHONHASHSEED="12345")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, check=True).stdout
    here = [chem.generate_c1(7, n=10), chem.generate_c3(7, formula="C6H14O", num_given=9)]
    assert json.loads(out) == here


@pytest.mark.parametrize("kwargs,name", [
    (dict(seed=0, n=1), "n"), (dict(seed=0, n=0), "n"), (dict(seed=0, n="5"), "n"),
    (dict(seed=0, n=True), "n"), (dict(seed=0, n=8, formula="C4H10O"), "n"),
    (dict(seed=0, n=76), "n"), (dict(seed=0, n=5, formula="C6H6"), "formula"),
    (dict(seed=0, n=5, formula="C4H10Q"), "formula"), (dict(seed="0", n=5), "seed"),
    (dict(seed=1.5, n=5), "seed")])
def test_c1_rejects(kwargs, name):
    seed = kwargs.pop("seed")
    with pytest.raises(ValueError, match=name):
        chem.generate_c1(seed, **kwargs)


# ------------------------------------------------------------------------------ C3

C3_FORMULAS = ("C3H8O2", "C4H10O", "C5H12O", "C7H16O", "C8H18", "C6H15N", "C4H9Cl", "C9H20")


def test_c3_items_and_solver():
    rng = random.Random(0)
    for seed in range(200):
        formula = C3_FORMULAS[seed % len(C3_FORMULAS)]
        size = chem.count_isomers(formula)
        k = 1 + seed % (size - 1)
        it = chem.generate_c3(seed, formula=formula, num_given=k)
        assert it["rc"] == size == len(it["given"]) + len(it["answer"])
        assert len(it["given"]) == k == it["num_given"]
        assert it["answer"] == sorted(it["answer"])
        assert sorted(it["given"] + it["answer"]) == chem.isomer_universe(formula)
        assert chem.solve_c3(it) == it["answer"]
        rewritten = dict(it, given=[_random_writing(s, rng) for s in it["given"]])
        assert chem.solve_c3(rewritten) == it["answer"]


def test_c3_deterministic():
    a = chem.generate_c3(5, formula="C7H16O", num_given=30)
    assert a == chem.generate_c3(5, formula="C7H16O", num_given=30)
    items = [json.dumps(chem.generate_c3(s, formula="C7H16O", num_given=30)) for s in range(20)]
    assert len(set(items)) == 20
    assert chem.generate_c3(1, formula="OH10C4", num_given=2)["formula"] == "C4H10O"


@pytest.mark.parametrize("kwargs,name", [
    (dict(formula="C4H10O", num_given=7), "num_given"),
    (dict(formula="C4H10O", num_given=8), "num_given"),
    (dict(formula="C4H10O", num_given=0), "num_given"),
    (dict(formula="C4H10O", num_given=-1), "num_given"),
    (dict(formula="C4H10O", num_given=2.0), "num_given"),
    (dict(formula="C2H4", num_given=1), "formula"),
    (dict(formula="", num_given=1), "formula")])
def test_c3_rejects(kwargs, name):
    with pytest.raises(ValueError, match=name):
        chem.generate_c3(0, **kwargs)


def test_c3_rejects_seed():
    with pytest.raises(ValueError, match="seed"):
        chem.generate_c3(None, formula="C4H10O", num_given=2)
