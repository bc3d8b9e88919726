"""REL chemistry tasks over acyclic saturated isomers: formulas, trees, SMILES, C1 and C3 items.

The REL paper (github.com/ada-f/relational_reasoning, ``chem_benchmark/``) measures relational
complexity (RC: how many operands one relation binds at once) with three chemistry tasks:

* C1 (RC 2), "is this list a set of constitutional isomers?": n molecules (5, 10 or 30) of one
  molecular formula ("Yes"), or n - 1 of one formula plus one of another ("No");
* C2 (RC 2), the largest connected common substructure of a ChEMBL group (RDKit ``FindMCS``).
  It needs RDKit and ChEMBL and is not built here;
* C3 (RC >= the number of isomers), "complete the set": a universe of 8-100 constitutional
  isomers of one formula made by the ``surge`` generator; some are given, the answer is the
  rest. To know that nothing is missing a solver must hold the whole universe at once, so the
  RC of a C3 item is the size of its universe (``item["rc"]``).

This module builds C1 and C3 without RDKit or ``surge``, in plain Python, for the saturated
acyclic (DBE 0) formulas over C, N, O, S, F, Cl, Br, I with implicit hydrogens:

* a molecule is a tree of heavy atoms with single bonds; an atom's degree is at most its valence
  (:data:`VALENCE`: C 4, N 3, O 2, S 2, halogens 1) and hydrogens fill the rest. Bonds between
  any two atoms are allowed by valence alone, so peroxides (O-O), disulfides (S-S), hydrazines
  (N-N) and X-X pairs count. That is how ``surge`` counts with its default options: C3H8O2 has
  8 isomers without O-O (4 propanediols, 3 ether alcohols, dimethoxymethane) and 11 with the 3
  peroxides (propyl and isopropyl hydroperoxide, ethyl methyl peroxide), and the paper's
  universe has 11;
* for a tree with n heavy atoms the hydrogens are ``sum(valence) - 2 (n - 1)``, which makes
  ``dbe = C - H/2 - X/2 + N/2 + 1`` exactly 0; conversely every formula with DBE 0 and at least
  one heavy atom has at least one such tree, so DBE 0 formulas and these universes match;
* isomers are told apart by :func:`tree_key`, the AHU string of the tree rooted at its center
  (or its two centers), with element labels: equal keys if and only if the trees are
  isomorphic as element-labelled trees, i.e. the molecules are the same constitution;
* the enumerator (:func:`isomer_universe`) grows trees one atom at a time from single atoms,
  attaching each still-unused element to each atom with free valence, and keeps one tree per
  key at every size. Every tree on k + 1 atoms is a tree on k atoms plus a leaf, so nothing is
  missed, and the keys make it exact. Counts: alkanes C1-C10 1, 1, 1, 2, 3, 5, 9, 18, 35, 75
  (OEIS A000602); C3H8O2 11, C4H10O 7, C5H12O 14, C7H16O 72, the DBE 0 universes of the paper.

SMILES here are the subset these molecules need: organic-subset atoms without brackets
(implicit hydrogens at the normal valence), branches in parentheses, single bonds (an explicit
``-`` is read), no rings, charges, isotopes, aromatic atoms or dots. :func:`write_smiles` is
canonical: it starts at an end of a longest path and lets the deepest branch continue the main
chain (``CCCC``, ``CC(C)C``, ``CCO``), so isomorphic molecules get the same string.
"""

from __future__ import annotations

import functools
import random
import re
from collections import Counter
from collections.abc import Sequence

__all__ = ["VALENCE", "HALOGENS", "C1_FORMULAS", "parse_formula", "hill_formula", "dbe",
           "parse_smiles", "write_smiles", "canonical_smiles", "tree_key", "formula_of",
           "count_isomers", "isomer_universe", "generate_c1", "solve_c1", "generate_c3",
           "solve_c3"]

# Single-bond valence of each heavy atom (the lowest normal valence of the SMILES organic subset).
VALENCE = {"C": 4, "N": 3, "O": 2, "S": 2, "F": 1, "Cl": 1, "Br": 1, "I": 1}
HALOGENS = ("F", "Cl", "Br", "I")

# Default C1 formulas (DBE 0), universe sizes in the comments. generate_c1 keeps those with at
# least n isomers, so n up to 75 works without a formula.
C1_FORMULAS = ("C6H14", "C7H16", "C8H18", "C9H20", "C10H22",          # 5, 9, 18, 35, 75
               "C4H10O", "C5H12O", "C6H14O", "C7H16O", "C3H8O2",         # 7, 14, 32, 72, 11
               "C4H11N", "C5H13N", "C6H15N",                             # 8, 17, 39
               "C4H9Cl", "C5H11Cl", "C6H13Cl", "C3H6Cl2",                # 4, 8, 17, 4
               "C4H10S", "C5H12S")                                       # 7, 14

_FORMULA_TOKEN = re.compile(r"([A-Z][a-z]?)(\d*)")


# ---------------------------------------------------------------------------------------------
# Formulas
# ---------------------------------------------------------------------------------------------

def parse_formula(formula: str) -> dict[str, int]:
    """Atom counts of a molecular formula over C, N, O, S, F, Cl, Br, I and H.

    Element symbols with optional counts, in any order; a repeated element adds up
    (``CH3CH2OH`` is C2H6O). Counts are positive integers without leading zeros.

    Args:
      formula: e.g. ``"C4H10O"``.

    Returns:
      ``{element: count}`` for the elements present (H only if it has a count), keys in Hill
      order (C, H, then alphabetical; alphabetical with H when there is no carbon).

    Raises:
      ValueError: naming ``formula``, for a non-string or empty formula, bad syntax, an element
        outside the list, a zero count, or no heavy atom.

    >>> parse_formula("C2H6O")
    {'C': 2, 'H': 6, 'O': 1}
    """
    if not isinstance(formula, str) or not formula:
        raise ValueError(f"formula must be a non-empty string such as 'C4H10O', got {formula!r}")
    counts: dict[str, int] = {}
    pos = 0
    while pos < len(formula):
        m = _FORMULA_TOKEN.match(formula, pos)
        if m is None:
            raise ValueError(f"formula {formula!r}: bad syntax at position {pos} "
                             f"(expected an element symbol such as C, Cl or H)")
        symbol, digits = m.groups()
        if symbol != "H" and symbol not in VALENCE:
            raise ValueError(f"formula {formula!r}: unknown element {symbol!r} "
                             f"(supported: H, {', '.join(VALENCE)})")
        if digits.startswith("0"):
            raise ValueError(f"formula {formula!r}: count {digits!r} of {symbol} must be a "
                             f"positive integer without a leading zero")
        counts[symbol] = counts.get(symbol, 0) + (int(digits) if digits else 1)
        pos = m.end()
    if not any(e in VALENCE for e in counts):
        raise ValueError(f"formula {formula!r} has no heavy atom (C, N, O, S or a halogen)")
    return {e: counts[e] for e in _hill_order(counts)}


def _hill_order(counts) -> list[str]:
    if "C" in counts:
        return ["C"] + (["H"] if "H" in counts else []) + sorted(
            e for e in counts if e not in ("C", "H"))
    return sorted(counts)


def hill_formula(counts: dict[str, int]) -> str:
    """The Hill-order formula string of atom counts (count 1 is not written; zeros dropped).

    >>> hill_formula({"O": 1, "H": 6, "C": 2})
    'C2H6O'
    """
    kept = {e: c for e, c in counts.items() if c}
    return "".join(e + (str(kept[e]) if kept[e] != 1 else "") for e in _hill_order(kept))


def dbe(formula: str) -> float:
    """Degree of unsaturation ``C - H/2 - X/2 + N/2 + 1`` (X: halogens; O and S ignored).

    Returns:
      A float (half-integers come from formulas no neutral closed-shell molecule has).

    >>> dbe("C4H10O"), dbe("C2H4"), dbe("C6H6")
    (0.0, 1.0, 4.0)
    """
    c = parse_formula(formula)
    halogens = sum(c.get(x, 0) for x in HALOGENS)
    return float(c.get("C", 0) - c.get("H", 0) / 2 - halogens / 2 + c.get("N", 0) / 2 + 1)


def _heavy_composition(formula: str) -> tuple[tuple[str, int], ...]:
    """Heavy-atom counts of a DBE 0 formula (the H count then follows); else ValueError."""
    counts = parse_formula(formula)
    value = dbe(formula)
    if value != 0:
        raise ValueError(f"formula {formula!r} has DBE {value:g}; only saturated acyclic "
                         f"(DBE 0) formulas are enumerated")
    return tuple((e, counts[e]) for e in VALENCE if e in counts)


# ---------------------------------------------------------------------------------------------
# Trees: validation, centers, canonical strings
# ---------------------------------------------------------------------------------------------

def _check_tree(elements, edges) -> list[list[int]]:
    """Adjacency lists of a valid molecule tree; ValueError naming ``elements`` / ``edges``."""
    if not isinstance(elements, Sequence) or isinstance(elements, str) or not elements:
        raise ValueError(f"elements must be a non-empty list of element symbols, got "
                         f"{elements!r}")
    for e in elements:
        if not isinstance(e, str) or e not in VALENCE:
            raise ValueError(f"elements: unknown element {e!r} (supported: {', '.join(VALENCE)})")
    if not isinstance(edges, Sequence) or isinstance(edges, str):
        raise ValueError(f"edges must be a list of (i, j) index pairs, got {edges!r}")
    n = len(elements)
    adj: list[list[int]] = [[] for _ in range(n)]
    seen = set()
    for edge in edges:
        try:
            i, j = edge
        except (TypeError, ValueError):
            raise ValueError(f"edges: each edge must be a pair of atom indices, "
                             f"got {edge!r}") from None
        if not (isinstance(i, int) and isinstance(j, int) and 0 <= i < n and 0 <= j < n):
            raise ValueError(f"edges: {edge!r} is not a pair of indices in [0, {n})")
        if i == j or frozenset((i, j)) in seen:
            raise ValueError(f"edges: {edge!r} is a self-loop or a repeated bond")
        seen.add(frozenset((i, j)))
        adj[i].append(j)
        adj[j].append(i)
    if len(seen) != n - 1:
        raise ValueError(f"edges: a tree on {n} atoms has {n - 1} bonds, got {len(seen)}")
    reached = {0}
    stack = [0]
    while stack:
        for w in adj[stack.pop()]:
            if w not in reached:
                reached.add(w)
                stack.append(w)
    if len(reached) != n:
        raise ValueError("edges: the bonds do not connect all atoms (a tree is required)")
    for v, e in enumerate(elements):
        if len(adj[v]) > VALENCE[e]:
            raise ValueError(f"edges: atom {v} ({e}) has {len(adj[v])} bonds, more than its "
                             f"valence {VALENCE[e]}")
    return adj


def _centers(adj: list[list[int]]) -> list[int]:
    """The one or two centers of a tree (the last atoms left when leaves are peeled)."""
    n = len(adj)
    degree = [len(a) for a in adj]
    layer = [v for v in range(n) if degree[v] <= 1]
    left = n
    while left > 2:
        left -= len(layer)
        nxt = []
        for v in layer:
            for w in adj[v]:
                degree[w] -= 1
                if degree[w] == 1:
                    nxt.append(w)
        layer = nxt
    return layer


def _rooted(adj, root: int, block: int = -1):
    """(order, parent) of a traversal from ``root`` that never enters ``block``."""
    parent = {root: -1}
    order = [root]
    for v in order:  # grows while iterated: breadth-first
        for w in adj[v]:
            if w != parent[v] and w != block:
                parent[w] = v
                order.append(w)
    return order, parent


def _codes(elements, adj, root: int, block: int = -1):
    """AHU codes and heights of the subtrees hanging from ``root`` (``block`` cut off).

    ``code[v] = element + "(" + sorted child codes + ")"``: the parentheses make codes
    prefix-free, so equal codes mean isomorphic labelled rooted subtrees and vice versa.
    """
    order, parent = _rooted(adj, root, block)
    children: dict[int, list[int]] = {v: [] for v in order}
    for v in order[1:]:
        children[parent[v]].append(v)
    code: dict[int, str] = {}
    height: dict[int, int] = {}
    for v in reversed(order):
        kids = children[v]
        code[v] = elements[v] + "(" + "".join(sorted(code[c] for c in kids)) + ")"
        height[v] = 1 + max((height[c] for c in kids), default=-1)
    return code, height, children


def _key(elements, adj) -> str:
    centers = _centers(adj)
    if len(centers) == 1:
        return _codes(elements, adj, centers[0])[0][centers[0]]
    a, b = centers
    halves = sorted((_codes(elements, adj, a, b)[0][a], _codes(elements, adj, b, a)[0][b]))
    return halves[0] + "|" + halves[1]  # "|" never occurs in a one-center key


def tree_key(elements: Sequence[str], edges: Sequence[tuple[int, int]]) -> str:
    """The canonical string of a molecule tree: equal iff the molecules are the same isomer.

    The AHU code of the tree rooted at its center; with two centers, the codes of the two
    halves, sorted and joined by ``|``.

    Args:
      elements: element symbol of each heavy atom.
      edges: the bonds as index pairs; they must form a tree within the valences.

    Returns:
      A string such as ``'C(C()C())'`` (propane).

    Raises:
      ValueError: naming ``elements`` or ``edges`` when they are not such a tree.

    >>> tree_key(["C", "C", "O"], [(0, 1), (1, 2)]) == tree_key(["O", "C", "C"], [(2, 1), (0, 1)])
    True
    """
    return _key(list(elements), _check_tree(elements, edges))


# ---------------------------------------------------------------------------------------------
# SMILES
# ---------------------------------------------------------------------------------------------

def write_smiles(elements: Sequence[str], edges: Sequence[tuple[int, int]]) -> str:
    """The canonical SMILES of a molecule tree (bracket-free, implicit hydrogens).

    Rules: the first atom is, among the ends of longest paths, the one whose rooted AHU code is
    smallest; at each atom the branches are ordered by (height, code) and the last (deepest)
    continues the chain, the others go in parentheses. Both rules depend only on the labelled
    tree, so every numbering of one molecule gives the same string.

    Args:
      elements: element symbol of each heavy atom.
      edges: the bonds as index pairs, forming a tree within the valences.

    Returns:
      The SMILES string.

    Raises:
      ValueError: naming ``elements`` or ``edges`` when they are not such a tree.

    >>> write_smiles(["C", "C", "C", "C"], [(1, 0), (1, 2), (1, 3)])
    'CC(C)C'
    """
    adj = _check_tree(elements, edges)
    elements = list(elements)
    centers = _centers(adj)
    # the ends of longest paths are the atoms farthest from the center(s)
    depth = {c: 0 for c in centers}
    order = list(centers)
    for v in order:  # breadth-first from both centers at once
        for w in adj[v]:
            if w not in depth:
                depth[w] = depth[v] + 1
                order.append(w)
    far = max(depth.values())
    best = None
    for v in (v for v in range(len(elements)) if depth[v] == far):
        code, height, children = _codes(elements, adj, v)
        if best is None or code[v] < best[0][best[3]]:
            best = (code, height, children, v)
    code, height, children, root = best
    out: list[str] = []
    stack: list[int | str] = [root]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            out.append(item)
            continue
        out.append(elements[item])
        kids = sorted(children[item], key=lambda c: (height[c], code[c]))
        if kids:
            stack.append(kids[-1])
            for k in reversed(kids[:-1]):
                stack.extend((")", k, "("))
    return "".join(out)


_SMILES_ATOM = re.compile(r"Cl|Br|[CNOSFI]")


def parse_smiles(smiles: str) -> tuple[list[str], list[tuple[int, int]]]:
    """Read a SMILES of the acyclic single-bond subset into heavy atoms and bonds.

    Accepted: organic-subset atoms C N O S F Cl Br I without brackets, branches ``( )``,
    explicit single bonds ``-``. Each atom's bonds must fit its valence (:data:`VALENCE`).

    Args:
      smiles: e.g. ``"CC(C)O"``.

    Returns:
      ``(elements, edges)``: the element of each atom in order of appearance, and the bonds as
      ``(i, j)`` pairs with ``i < j`` in order of appearance.

    Raises:
      ValueError: naming ``smiles`` for anything outside the subset (rings, brackets, double
        bonds, aromatic atoms, dots), unbalanced or empty branches, or too many bonds on an atom.

    >>> parse_smiles("CC(C)O")
    (['C', 'C', 'C', 'O'], [(0, 1), (1, 2), (1, 3)])
    """
    if not isinstance(smiles, str) or not smiles:
        raise ValueError(f"smiles must be a non-empty string, got {smiles!r}")
    elements: list[str] = []
    edges: list[tuple[int, int]] = []
    branch_points: list[int] = []
    prev = -1  # the atom the next atom bonds to
    last = "start"  # kind of the previous token: start, atom, open, close, bond
    pos = 0

    def fail(why: str):
        raise ValueError(f"smiles {smiles!r}: {why} at position {pos}")

    while pos < len(smiles):
        ch = smiles[pos]
        m = _SMILES_ATOM.match(smiles, pos)
        if m is not None:
            elements.append(m.group())
            if prev >= 0:
                edges.append((prev, len(elements) - 1))
            prev = len(elements) - 1
            last = "atom"
            pos = m.end()
            continue
        if ch == "(":
            if last not in ("atom", "close"):
                fail("a branch must follow an atom")
            branch_points.append(prev)
            last = "open"
        elif ch == ")":
            if last != "atom" or not branch_points:
                fail("unbalanced or empty branch")
            prev = branch_points.pop()
            last = "close"
        elif ch == "-":
            if last not in ("atom", "open", "close"):
                fail("a bond must follow an atom or a branch opening")
            last = "bond"
        elif ch.isdigit() or ch == "%":
            fail("ring closures are not supported (acyclic molecules only)")
        elif ch in "=#$:/\\":
            fail("only single bonds are supported")
        elif ch == "[":
            fail("bracket atoms are not supported")
        elif ch == ".":
            fail("disconnected structures are not supported")
        else:
            fail(f"unexpected character {ch!r} (atoms: {', '.join(VALENCE)})")
        pos += 1
    if last not in ("atom", "close") or branch_points:
        fail("unexpected end (an unclosed branch or a dangling bond)")
    degree = Counter(i for e in edges for i in e)
    for v, e in enumerate(elements):
        if degree[v] > VALENCE[e]:
            raise ValueError(f"smiles {smiles!r}: atom {v} ({e}) has {degree[v]} bonds, more "
                             f"than its valence {VALENCE[e]}")
    return elements, edges


def canonical_smiles(smiles: str) -> str:
    """The canonical form (:func:`write_smiles`) of any SMILES of the subset.

    >>> canonical_smiles("OCC") == canonical_smiles("C(O)C") == "CCO"
    True
    """
    return write_smiles(*parse_smiles(smiles))


def formula_of(smiles: str) -> str:
    """The Hill-order molecular formula of a SMILES of the subset (implicit H counted).

    >>> formula_of("CC(C)O"), formula_of("OO"), formula_of("ClCCl")
    ('C3H8O', 'H2O2', 'CH2Cl2')
    """
    elements, edges = parse_smiles(smiles)
    degree = Counter(i for e in edges for i in e)
    counts = Counter(elements)
    counts["H"] = sum(VALENCE[e] - degree[v] for v, e in enumerate(elements))
    return hill_formula(counts)


# ---------------------------------------------------------------------------------------------
# Isomer enumeration
# ---------------------------------------------------------------------------------------------

@functools.lru_cache(maxsize=512)
def _universe(composition: tuple[tuple[str, int], ...]) -> tuple[str, ...]:
    """Sorted canonical SMILES of every tree with exactly these heavy atoms (DBE 0)."""
    target = dict(composition)
    total = sum(target.values())
    # level: key -> (elements, edges, adjacency) of one tree of that isomorphism class
    level = {}
    for e in target:
        level[e + "()"] = ((e,), (), ((),))
    for size in range(1, total):
        nxt = {}
        for elements, edges, adj in level.values():
            used = Counter(elements)
            free = [VALENCE[e] - len(adj[v]) for v, e in enumerate(elements)]
            left = total - size - 1  # atoms still to add after this one
            for e in target:
                if used[e] >= target[e]:
                    continue
                # attaching e changes the free valence by VALENCE[e] - 2; a tree with atoms left
                # to add needs free valence >= 1 (atoms of valence >= 2 first keep it so)
                if left and sum(free) + VALENCE[e] - 2 < 1:
                    continue
                for u in range(size):
                    if free[u] == 0:
                        continue
                    new_adj = tuple(a + (size,) if v == u else a for v, a in enumerate(adj))
                    new_adj += ((u,),)
                    new_elements = elements + (e,)
                    key = _key(new_elements, new_adj)
                    if key not in nxt:
                        nxt[key] = (new_elements, edges + ((u, size),), new_adj)
        level = nxt
    return tuple(sorted(write_smiles(el, ed) for el, ed, _ in level.values()))


def isomer_universe(formula: str) -> list[str]:
    """All acyclic saturated constitutional isomers of a DBE 0 formula, as canonical SMILES.

    Trees of the heavy atoms within the valences (O-O, S-S, N-N and halogen pairs allowed by
    valence alone), one per isomorphism class; see the module docstring. Results are cached.

    Returns:
      The sorted list of canonical SMILES (a new list on each call).

    Raises:
      ValueError: naming ``formula`` when it does not parse or its DBE is not 0.

    >>> isomer_universe("C4H10O")
    ['CC(C)(C)O', 'CC(C)CO', 'CC(C)OC', 'CC(O)CC', 'CCCCO', 'CCCOC', 'CCOCC']
    """
    return list(_universe(_heavy_composition(formula)))


def count_isomers(formula: str) -> int:
    """The number of acyclic saturated constitutional isomers of a DBE 0 formula.

    Raises:
      ValueError: naming ``formula`` when it does not parse or its DBE is not 0.

    >>> [count_isomers(f) for f in ("C7H16", "C3H8O2", "C5H12O")]
    [9, 11, 14]
    """
    return len(_universe(_heavy_composition(formula)))


# ---------------------------------------------------------------------------------------------
# Tasks
# ---------------------------------------------------------------------------------------------

def _check_seed(seed) -> None:
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"seed must be an int, got {seed!r}")


def _substituted(smiles: str, rng: random.Random) -> str:
    """One heavy atom of ``smiles`` replaced by another element whose valence fits its bonds.

    The formula changes and the heavy-atom count does not. A suitable (atom, element) pair
    always exists: a non-carbon atom can become C (valence 4 >= its bonds), and a molecule of
    carbons only has a carbon with at most one bond (a leaf, or CH4), which any element fits.
    """
    elements, edges = parse_smiles(smiles)
    degree = Counter(i for e in edges for i in e)
    options = [(v, x) for v, e in enumerate(elements) for x in VALENCE
               if x != e and VALENCE[x] >= degree[v]]
    v, x = options[rng.randrange(len(options))]
    elements[v] = x
    return write_smiles(elements, edges)


def generate_c1(seed: int, *, n: int, formula: str | None = None) -> dict:
    """A C1 item (isomer set, yes or no), deterministic in ``seed``.

    "Yes" (probability 1/2): n distinct isomers of ``formula``. "No": n - 1 distinct isomers of
    ``formula`` and one molecule of another formula with the same heavy-atom count, made by
    replacing one atom of a further isomer with another element that fits its bonds. Without
    ``formula``, one is drawn uniformly among the :data:`C1_FORMULAS` with at least n isomers.

    Args:
      seed: seed of ``random.Random``.
      n: molecules in the item, at least 2.
      formula: a DBE 0 formula with at least n isomers, or None.

    Returns:
      ``{"task": "C1", "seed", "n", "formula" (Hill), "molecules" (n canonical SMILES,
      shuffled), "answer" ("Yes" | "No"), "odd_index" (position of the odd molecule or None),
      "odd_formula" (its formula or None), "rc": 2}``.

    Raises:
      ValueError: naming ``seed``, ``n`` or ``formula`` for bad values, or ``n`` when the
        formula has fewer than n isomers.

    >>> item = generate_c1(0, n=5)
    >>> solve_c1(item) == item["answer"], len(item["molecules"])
    (True, 5)
    """
    _check_seed(seed)
    if isinstance(n, bool) or not isinstance(n, int) or n < 2:
        raise ValueError(f"n must be an int >= 2, got {n!r}")
    rng = random.Random(seed)
    if formula is None:
        pool = list(C1_FORMULAS)
        rng.shuffle(pool)  # the first eligible one of a random order is uniform among them
        formula = next((f for f in pool if count_isomers(f) >= n), None)
        if formula is None:
            raise ValueError(f"n={n} exceeds the isomer count of every C1_FORMULAS entry "
                             f"(at most {max(count_isomers(f) for f in C1_FORMULAS)})")
    universe = isomer_universe(formula)
    formula = hill_formula(parse_formula(formula))
    if len(universe) < n:
        raise ValueError(f"n={n} exceeds the {len(universe)} isomers of formula {formula}")
    chosen = rng.sample(universe, n)
    answer = "Yes" if rng.random() < 0.5 else "No"
    odd_index = odd_formula = None
    if answer == "No":
        chosen[-1] = _substituted(chosen[-1], rng)
        odd_formula = formula_of(chosen[-1])
    order = list(range(n))
    rng.shuffle(order)
    molecules = [chosen[i] for i in order]
    if answer == "No":
        odd_index = order.index(n - 1)
    return {"task": "C1", "seed": seed, "n": n, "formula": formula, "molecules": molecules,
            "answer": answer, "odd_index": odd_index, "odd_formula": odd_formula, "rc": 2}


def solve_c1(item: dict) -> str:
    """Reference C1 solver: "Yes" iff every molecule has the same formula (:func:`formula_of`).

    Reads only ``item["molecules"]`` (any SMILES of the subset).
    """
    return "Yes" if len({formula_of(s) for s in item["molecules"]}) == 1 else "No"


def generate_c3(seed: int, *, formula: str, num_given: int) -> dict:
    """A C3 item (missing isomers), deterministic in ``seed``.

    ``num_given`` distinct isomers of ``formula`` are drawn from its universe and shown; the
    answer is the rest. At least one is given, since the paper's prompt shows only the given
    molecules and the formula must follow from them. The item's RC is the universe size.

    Args:
      seed: seed of ``random.Random``.
      formula: a DBE 0 formula.
      num_given: isomers shown, ``1 <= num_given < count_isomers(formula)``.

    Returns:
      ``{"task": "C3", "seed", "formula" (Hill), "num_given", "given" (canonical SMILES in
      random order), "answer" (sorted canonical SMILES of the missing isomers), "rc"}``.

    Raises:
      ValueError: naming ``seed``, ``formula`` or ``num_given`` for bad values.

    >>> item = generate_c3(0, formula="C4H10O", num_given=3)
    >>> len(item["answer"]), item["rc"], solve_c3(item) == item["answer"]
    (4, 7, True)
    """
    _check_seed(seed)
    universe = isomer_universe(formula)
    formula = hill_formula(parse_formula(formula))
    if isinstance(num_given, bool) or not isinstance(num_given, int) \
            or not 1 <= num_given < len(universe):
        raise ValueError(f"num_given must be an int in [1, {len(universe)}) for formula "
                         f"{formula} ({len(universe)} isomers), got {num_given!r}")
    rng = random.Random(seed)
    given = rng.sample(universe, num_given)
    shown = set(given)
    return {"task": "C3", "seed": seed, "formula": formula, "num_given": num_given,
            "given": given, "answer": [s for s in universe if s not in shown],
            "rc": len(universe)}


def solve_c3(item: dict) -> list[str]:
    """Reference C3 solver: the universe of ``item["formula"]`` minus the given molecules.

    The given SMILES are compared in canonical form, so any writing of them works.

    Returns:
      The sorted canonical SMILES of the missing isomers.
    """
    shown = {canonical_smiles(s) for s in item["given"]}
    return [s for s in isomer_universe(item["formula"]) if s not in shown]
