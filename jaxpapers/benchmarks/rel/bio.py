"""REL biology (REL-B1, homoplasy): random trees, a JC69 / HKY85 simulator in JAX, the official
convergence injection, B1 items and a detector baseline.

The released generator (``bio_benchmark/``) grows an unrooted binary tree from the cherry
``1 -- r -- 2`` by subdividing one edge per new leaf (a uniformly random *node*, then a uniformly
random neighbour of it), draws every edge length from U(0.1, 1.0), simulates 300 sites with
pyvolve's default nucleotide model (JC69) and writes the Newick from leaf 1, whose label is lost.
A "yes" item picks ``rc`` taxa greedily (max-min topological distance, at least 3 edges apart) and
overwrites 5 blocks of 5 sites (distinct random starts, blocks may overlap) so that, site by site,
all chosen taxa carry one random base.

Here the tree is rooted at the cherry's middle node ``r`` (the only degree-2 node), which gives
2 n - 1 nodes and keeps every leaf named. Under a reversible model with the root drawn from the
equilibrium frequencies the leaves' joint distribution does not depend on where the root sits
(Felsenstein's pulley principle), so rooting at ``r`` instead of at leaf 1 changes nothing for the
other leaves, and leaf 1 gets a sequence of its own.

* :func:`random_tree`, :func:`newick`, :func:`leaf_distances`: host-side tree building (numpy
  arrays from a jax key).
* :func:`simulate_alignment` (contract): per-node ``lax.scan`` over a topologically ordered tree,
  sites vectorised; jit (``num_sites``, ``model`` static) and vmap over keys.
* :func:`rate_matrix`, :func:`transition_matrices`: the substitution model, ``P(t) = expm(Q t)``
  from the eigendecomposition of the symmetrised ``Q``; float64 under ``jax.enable_x64``.
* :func:`choose_taxa`, :func:`inject_convergence`, :func:`generate_b1`: the B1 item builder.
* :func:`convergence_scores`, :func:`detect_convergence`, :func:`calibrate_thresholds`: *our*
  baseline detector (a run-recurrence test on pairs and triples of taxa), not the paper's.

Shapes: N nodes (2 n - 1 for a tree with n leaves), n leaves, S sites, k chosen taxa, B blocks.
Bases are int8 0..3 = A, C, G, T.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

__all__ = ["BASES", "MODELS", "EDGE_CHOICES", "random_tree", "newick", "leaf_distances",
           "rate_matrix", "transition_matrices", "simulate_alignment", "choose_taxa",
           "inject_convergence", "generate_b1", "convergence_scores", "detect_convergence",
           "calibrate_thresholds", "jc_pdistance_theory"]

BASES = "ACGT"
MODELS = ("jc69", "hky85")
EDGE_CHOICES = ("official", "uniform")
# transitions (purine <-> purine, pyrimidine <-> pyrimidine): A <-> G and C <-> T
_TRANSITION = np.array([[0, 0, 1, 0], [0, 0, 0, 1], [1, 0, 0, 0], [0, 1, 0, 0]], bool)


# ------------------------------------------------------------------------------------ checks
def _check_int(name: str, v: Any, lo: int) -> None:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < lo:
        raise ValueError(f"{name} must be an int >= {lo}, got {v!r}")


def _concrete(x: Any) -> np.ndarray | None:
    """``x`` as a numpy array, or None while it is traced (value checks are skipped then)."""
    if isinstance(x, jax.core.Tracer):
        return None
    return np.asarray(x)


def _host_rng(key: jax.Array) -> np.random.Generator:
    """A numpy generator seeded by the bits of a jax key, for host-side structure (trees, taxa):
    no compilation per shape, and the same draws on every platform and in either x64 mode."""
    if jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
        key = jax.random.key_data(key)
    return np.random.default_rng(np.asarray(key, np.uint32).ravel().tolist())


def _float_dtype() -> np.dtype:
    """jax's default float: float32, or float64 under ``jax.enable_x64``."""
    return jnp.asarray(0.0).dtype


def _check_parents(parents: Any, branch_lengths: Any = None) -> None:
    """parents [N] int: parents[0] == -1, 0 <= parents[i] < i; lengths [N] finite, >= 0."""
    shape = np.shape(parents)
    if len(shape) != 1 or shape[0] < 1:
        raise ValueError(f"parents must be a 1-D array with >= 1 node, got shape {shape}")
    if not jnp.issubdtype(jnp.result_type(parents), jnp.integer):
        raise ValueError(f"parents must be integers, got {jnp.result_type(parents)}")
    p = _concrete(parents)
    if p is not None:
        idx = np.arange(shape[0])
        if p[0] != -1 or np.any((p[1:] < 0) | (p[1:] >= idx[1:])):
            raise ValueError("parents must have parents[0] == -1 and 0 <= parents[i] < i "
                             f"(nodes in topological order), got {p.tolist()}")
    if branch_lengths is None:
        return
    if np.shape(branch_lengths) != shape:
        raise ValueError(f"branch_lengths must have the shape of parents {shape}, "
                         f"got {np.shape(branch_lengths)}")
    t = _concrete(branch_lengths)
    if t is not None and not np.all(np.isfinite(t) & (t >= 0)):
        raise ValueError(f"branch_lengths must be finite and >= 0, got {t.tolist()}")


def _check_model(model: str, kappa: Any, freqs: Any) -> None:
    if model not in MODELS:
        raise ValueError(f"model must be one of {MODELS}, got {model!r}")
    if np.shape(kappa) != ():
        raise ValueError(f"kappa must be a scalar, got shape {np.shape(kappa)}")
    k = _concrete(kappa)
    if k is not None and not (np.isfinite(k) and k > 0):
        raise ValueError(f"kappa must be finite and > 0, got {kappa!r}")
    if freqs is None:
        return
    freqs = jnp.asarray(freqs)  # a tuple of tracers under jit becomes one traced array
    if freqs.shape != (4,):
        raise ValueError(f"freqs must have 4 entries (A, C, G, T), got shape {freqs.shape}")
    f = _concrete(freqs)
    if f is not None and not (np.all(np.isfinite(f) & (f > 0)) and abs(f.sum() - 1) <= 1e-6):
        raise ValueError(f"freqs must be positive and sum to 1, got {f.tolist()}")


def _check_tree(tree: dict) -> None:
    for name in ("parents", "branch_lengths", "is_leaf", "leaves", "names"):
        if name not in tree:
            raise ValueError(f"tree must have the keys of random_tree(); {name!r} is missing")
    _check_parents(tree["parents"], tree["branch_lengths"])
    if len(tree["names"]) != len(tree["leaves"]):
        raise ValueError(f"tree['names'] ({len(tree['names'])}) and tree['leaves'] "
                         f"({len(tree['leaves'])}) must have the same length")


# -------------------------------------------------------------------------------------- trees
def _pick(u: float, m: int) -> int:
    """A uniform index in 0..m-1 from a uniform ``u`` in [0, 1)."""
    return min(int(u * m), m - 1)


def random_tree(key: jax.Array, num_leaves: int, *, min_length: float = 0.1,
                max_length: float = 1.0, edge_choice: str = "official") -> dict:
    """A random binary tree grown like REL's ``RandomTree`` (host side, numpy out).

    Start from the cherry ``1 -- r -- 2``; for each new leaf ``3..n`` subdivide one edge with a
    new internal node carrying the leaf. ``edge_choice="official"`` picks the edge as the released
    code does (a uniformly random node, then a uniformly random neighbour: pendant edges are
    favoured); ``"uniform"`` picks a uniformly random edge. Every edge length is drawn from
    U(``min_length``, ``max_length``). The tree is rooted at ``r`` and its nodes renumbered in
    preorder, so ``parents[i] < i``. Unlike the released Newick, every leaf keeps its name.

    Args:
      key: a jax PRNG key (consumed: it seeds a numpy generator, see ``_host_rng``).
      num_leaves: n >= 2.
      min_length, max_length: edge length bounds, 0 <= min_length <= max_length.
      edge_choice: "official" or "uniform" (see above).

    Returns:
      dict with ``parents`` int32 [N] (-1 at the root, N = 2 n - 1), ``branch_lengths``
      float64 [N] (length of the edge to the parent, 0 at the root), ``is_leaf`` bool [N],
      ``leaves`` int32 [n] (node index of the leaf named ``names[j]``) and ``names``
      (["1", ..., "n"]).

    >>> tree = random_tree(jax.random.key(0), 4)
    >>> tree["parents"].shape, int(tree["is_leaf"].sum()), tree["names"]
    ((7,), 4, ['1', '2', '3', '4'])
    """
    _check_int("num_leaves", num_leaves, 2)
    lo, hi = float(min_length), float(max_length)
    if not (math.isfinite(lo) and math.isfinite(hi) and 0.0 <= lo <= hi):
        raise ValueError(f"min_length and max_length must be finite with 0 <= min_length <= "
                         f"max_length, got {min_length!r}, {max_length!r}")
    if edge_choice not in EDGE_CHOICES:
        raise ValueError(f"edge_choice must be one of {EDGE_CHOICES}, got {edge_choice!r}")
    n = int(num_leaves)
    rng = _host_rng(key)
    grow = rng.random((max(n - 2, 1), 2))
    unit = rng.random(2 * n - 1)

    # creation ids: leaves 0..n-1 (named 1..n), the root r = n, new internal nodes n+1, ...
    root = n
    parent = {root: -1, 0: root, 1: root}
    children: dict[int, list[int]] = {root: [0, 1], 0: [], 1: []}
    nodes = [0, root, 1]
    for leaf in range(2, n):
        u1, u2 = grow[leaf - 2]
        if edge_choice == "official":
            u = nodes[_pick(u1, len(nodes))]
            nbrs = ([parent[u]] if parent[u] >= 0 else []) + children[u]
            v = nbrs[_pick(u2, len(nbrs))]
            child = u if v == parent[u] else v  # the edge u -- v, named by its lower end
        else:
            child = [x for x in nodes if x != root][_pick(u1, len(nodes) - 1)]
        w = n + leaf - 1
        up = parent[child]
        children[up][children[up].index(child)] = w
        parent[w], children[w] = up, [child, leaf]
        parent[child] = parent[leaf] = w
        children[leaf] = []
        nodes += [w, leaf]

    order, stack = [], [root]  # preorder: a parent comes before its children
    while stack:
        x = stack.pop()
        order.append(x)
        stack.extend(reversed(children[x]))
    new = {x: i for i, x in enumerate(order)}
    parents = np.array([new[parent[x]] if parent[x] >= 0 else -1 for x in order], np.int32)
    lengths = lo + (hi - lo) * unit
    lengths[0] = 0.0
    return {"parents": parents, "branch_lengths": lengths,
            "is_leaf": np.array([not children[x] for x in order]),
            "leaves": np.array([new[i] for i in range(n)], np.int32),
            "names": [str(i + 1) for i in range(n)]}


def newick(tree: dict, *, digits: int = 6) -> str:
    """The Newick string of ``tree`` (rooted at node 0, leaves named, lengths with ``digits``).

    >>> newick({"parents": np.array([-1, 0, 0]), "branch_lengths": np.array([0, .5, .25]),
    ...         "is_leaf": np.array([False, True, True]), "leaves": np.array([1, 2]),
    ...         "names": ["1", "2"]}, digits=2)
    '(1:0.50,2:0.25);'
    """
    _check_tree(tree)
    _check_int("digits", digits, 0)
    parents = np.asarray(tree["parents"])
    lengths = np.asarray(tree["branch_lengths"], np.float64)
    num = len(parents)
    label = [""] * num
    for name, leaf in zip(tree["names"], np.asarray(tree["leaves"])):
        label[leaf] = str(name)
    kids: list[list[int]] = [[] for _ in range(num)]
    for i in range(1, num):
        kids[parents[i]].append(i)
    text = [""] * num
    for i in range(num - 1, -1, -1):  # children (higher index) first: no recursion
        body = "(" + ",".join(text[c] for c in kids[i]) + ")" + label[i] if kids[i] else label[i]
        text[i] = body if i == 0 else f"{body}:{lengths[i]:.{digits}f}"
    return text[0] + ";"


def leaf_distances(tree: dict) -> np.ndarray:
    """Topological distances (edge counts) between leaves, int32 [n, n] in ``names`` order.

    >>> leaf_distances({"parents": np.array([-1, 0, 0, 1, 1]), "branch_lengths": np.ones(5),
    ...                 "is_leaf": np.array([0, 0, 1, 1, 1], bool), "leaves": np.array([2, 3, 4]),
    ...                 "names": ["1", "2", "3"]}).tolist()
    [[0, 3, 3], [3, 0, 2], [3, 2, 0]]
    """
    _check_tree(tree)
    parents = np.asarray(tree["parents"])
    num = len(parents)
    anc = np.zeros((num, num), bool)  # anc[i, j]: j is i or an ancestor of i
    depth = np.zeros(num, np.int64)
    anc[0, 0] = True
    for i in range(1, num):
        anc[i] = anc[parents[i]]
        anc[i, i] = True
        depth[i] = depth[parents[i]] + 1
    leaves = np.asarray(tree["leaves"])
    a = anc[leaves].astype(np.int64)
    lca_depth = a @ a.T - 1  # shared ancestors-or-self = depth(lca) + 1
    d = depth[leaves]
    return (d[:, None] + d[None, :] - 2 * lca_depth).astype(np.int32)


# ---------------------------------------------------------------------------- the model
def _model_parts(model: str, kappa: Any, freqs: Any, dtype) -> tuple[jax.Array, jax.Array]:
    """(pi [4], scaled Q [4, 4]) without checks."""
    if model == "jc69" or freqs is None:
        pi = jnp.full((4,), 0.25, dtype)
    else:
        pi = jnp.asarray(freqs, dtype)
    k = jnp.asarray(1.0 if model == "jc69" else kappa, dtype)
    exch = jnp.where(_TRANSITION, k, jnp.ones((), dtype)) * (1 - jnp.eye(4, dtype=dtype))
    q = exch * pi[None, :]
    q = q - jnp.diag(q.sum(1))
    return pi, q / -(pi @ jnp.diag(q))  # -sum_i pi_i Q_ii = 1: lengths in substitutions/site


def _spectral(model: str, kappa: Any, freqs: Any, dtype):
    """pi [4], eigenvalues [4] and the two factors of P(t) = left diag(exp(lam t)) right."""
    pi, q = _model_parts(model, kappa, freqs, dtype)
    root_pi = jnp.sqrt(pi)
    s = root_pi[:, None] * q / root_pi[None, :]  # S = D^1/2 Q D^-1/2, symmetric (reversible)
    lam, vec = jnp.linalg.eigh((s + s.T) / 2)
    return pi, lam, vec / root_pi[:, None], vec.T * root_pi[None, :]


def _transition(t: jax.Array, lam, left, right) -> jax.Array:
    return jnp.einsum("ik,...k,kj->...ij", left, jnp.exp(t[..., None] * lam), right,
                      precision=lax.Precision.HIGHEST)


def rate_matrix(*, model: str = "hky85", kappa: float = 2.0, freqs=None) -> jax.Array:
    """The scaled rate matrix Q [4, 4] (rows A, C, G, T), in jax's default float.

    HKY85: ``Q_ij ∝ pi_j`` for a transversion and ``kappa pi_j`` for a transition (A <-> G,
    C <-> T); JC69 is HKY85 with ``kappa = 1`` and uniform ``pi`` (``kappa`` and ``freqs`` are
    ignored). Rows sum to 0 and ``-sum_i pi_i Q_ii = 1``.

    Args:
      model: "jc69" or "hky85".
      kappa: transition/transversion rate ratio, > 0 (traceable).
      freqs: equilibrium frequencies [4], positive, summing to 1; None = uniform (traceable).

    >>> with jax.enable_x64(True):
    ...     q = rate_matrix(model="jc69")
    >>> np.round(np.asarray(q[0]), 4).tolist()
    [-1.0, 0.3333, 0.3333, 0.3333]
    """
    _check_model(model, kappa, freqs)
    return _rate_core(kappa, freqs, model=model)


@functools.partial(jax.jit, static_argnames=("model",))
def _rate_core(kappa, freqs, *, model):
    return _model_parts(model, kappa, freqs, _float_dtype())[1]


def transition_matrices(branch_lengths: jax.typing.ArrayLike, *, model: str = "jc69",
                        kappa: float = 2.0, freqs=None) -> jax.Array:
    """``P(t) = expm(Q t)`` [..., 4, 4] for branch lengths ``t`` [...] (substitutions/site).

    Computed from the eigendecomposition of the symmetrised ``S = D^1/2 Q D^-1/2``
    (``D = diag(pi)``): ``P(t) = D^-1/2 U exp(Lambda t) U^T D^1/2``, in jax's default float
    (float64 under ``jax.enable_x64``, where it matches ``scipy.linalg.expm`` to ~1e-15).

    >>> p = transition_matrices(jnp.array([0.0, 1.0]))
    >>> p.shape, bool(jnp.allclose(p[0], jnp.eye(4), atol=1e-6))
    ((2, 4, 4), True)
    """
    _check_model(model, kappa, freqs)
    return _transition_core(branch_lengths, kappa, freqs, model=model)


@functools.partial(jax.jit, static_argnames=("model",))
def _transition_core(branch_lengths, kappa, freqs, *, model):
    dtype = _float_dtype()
    _, lam, left, right = _spectral(model, kappa, freqs, dtype)
    return _transition(jnp.asarray(branch_lengths, dtype), lam, left, right)


def jc_pdistance_theory(d: jax.typing.ArrayLike) -> jax.Array:
    """Expected p-distance (fraction of differing sites) at JC69 distance ``d``:
    ``3/4 (1 - exp(-4 d / 3))``.

    >>> round(float(jc_pdistance_theory(0.0)), 6), round(float(jc_pdistance_theory(1e9)), 6)
    (0.0, 0.75)
    """
    d = jnp.asarray(d, _float_dtype())
    return 0.75 * (1.0 - jnp.exp(-4.0 * d / 3.0))


def _inverse_cdf(u: jax.Array, cdf: jax.Array) -> jax.Array:
    """States int8 [S] from uniforms u [S] and (possibly unnormalised) CDF rows [S, 4]."""
    return jnp.sum(u[:, None] * cdf[:, 3:] >= cdf[:, :3], axis=-1).astype(jnp.int8)


def simulate_alignment(key: jax.Array, parents: jax.typing.ArrayLike,
                       branch_lengths: jax.typing.ArrayLike, *, num_sites: int,
                       model: str = "jc69", kappa: float = 2.0, freqs=None) -> jax.Array:
    """Simulate a nucleotide alignment down a tree (unbatched; vmap over keys).

    The root's states are drawn from ``pi``; then, under ``lax.scan`` in index order, node ``i``
    draws each site from row ``state(parents[i])`` of ``P(branch_lengths[i])`` (inverse CDF,
    all sites at once). Sites are independent and identically distributed.

    Args:
      key: a jax PRNG key (consumed: split into one key per node).
      parents: int [N], ``parents[0] == -1`` and ``0 <= parents[i] < i``.
      branch_lengths: float [N] >= 0, substitutions per site (the root's entry is unused).
      num_sites: S >= 1 (static).
      model: "jc69" or "hky85" (static).
      kappa: HKY85 transition/transversion ratio, > 0 (ignored by JC69).
      freqs: HKY85 equilibrium frequencies [4] (A, C, G, T); None = uniform.

    Returns:
      int8 [N, S], 0..3 = A, C, G, T, every node (internal ones included).

    >>> aln = simulate_alignment(jax.random.key(0), jnp.array([-1, 0, 0]),
    ...                          jnp.array([0.0, 0.1, 0.2]), num_sites=8)
    >>> aln.shape, aln.dtype
    ((3, 8), dtype('int8'))
    """
    _check_int("num_sites", num_sites, 1)
    _check_model(model, kappa, freqs)
    _check_parents(parents, branch_lengths)
    return _simulate_core(key, parents, branch_lengths, kappa, freqs, num_sites=num_sites,
                          model=model)


@functools.partial(jax.jit, static_argnames=("num_sites", "model"))
def _simulate_core(key, parents, branch_lengths, kappa, freqs, *, num_sites, model):
    # jitted so that eager calls reuse one compiled program (an eager scan retraces each call)
    dtype = _float_dtype()
    parents = jnp.asarray(parents)
    num_nodes = parents.shape[0]
    pi, lam, left, right = _spectral(model, kappa, freqs, dtype)
    p = _transition(jnp.asarray(branch_lengths, dtype), lam, left, right)  # [N, 4, 4]
    cdf = jnp.cumsum(jnp.maximum(p, 0.0), axis=-1)  # rounding can leave tiny negatives
    # the root is the scan's first step, with every row of its table = pi (its "parent",
    # states[-1], is then irrelevant): one random draw site in the program
    cdf = cdf.at[0].set(jnp.broadcast_to(jnp.cumsum(pi), (4, 4)))
    keys = jax.random.split(key, num_nodes)

    def step(states, xs):
        i, k, c = xs  # node index, its key, its CDF rows [4, 4]
        u = jax.random.uniform(k, (num_sites,), dtype)
        return states.at[i].set(_inverse_cdf(u, c[states[parents[i]]])), None

    states = jnp.zeros((num_nodes, num_sites), jnp.int8)
    states, _ = lax.scan(step, states, (jnp.arange(num_nodes), keys, cdf))
    return states


# ------------------------------------------------------------------------------ injection
def choose_taxa(key: jax.Array, tree: dict, rc: int, *, min_edges: int = 3) -> np.ndarray:
    """Greedy max-min choice of ``rc`` leaves at least ``min_edges`` edges apart (host side).

    As REL's ``choose_distant_taxa``: a uniformly random first leaf, then repeatedly the leaf
    whose smallest topological distance to the chosen ones is largest (ties broken uniformly at
    random), failing when that distance drops below ``min_edges``.

    Args:
      key: a jax PRNG key (consumed).
      tree: a :func:`random_tree` dict.
      rc: number of taxa k >= 2 (REL's ``n_convergent_taxa``, the item's RC).
      min_edges: the smallest allowed pairwise topological distance.

    Returns:
      int32 [k]: leaf positions (indices into ``tree["names"]``) in the order chosen.

    Raises:
      ValueError: (naming ``rc``) if no such choice is found.

    >>> tree = random_tree(jax.random.key(0), 12)
    >>> taxa = choose_taxa(jax.random.key(1), tree, 3)
    >>> bool(leaf_distances(tree)[np.ix_(taxa, taxa)][~np.eye(3, dtype=bool)].min() >= 3)
    True
    """
    _check_int("rc", rc, 2)
    _check_int("min_edges", min_edges, 1)
    dist = leaf_distances(tree)
    n = dist.shape[0]
    if rc > n:
        raise ValueError(f"rc must be <= the number of leaves {n}, got {rc}")
    rng = _host_rng(key)
    first = int(rng.integers(n))
    ties = rng.random((rc, n))
    chosen = [first]
    closest = dist[first].astype(np.float64)
    for step in range(1, rc):
        score = closest + ties[step]  # integer distances; the noise in [0, 1) breaks ties
        score[chosen] = -np.inf
        best = int(np.argmax(score))
        if closest[best] < min_edges:
            raise ValueError(f"rc={rc}: only {len(chosen)} leaves of this {n}-leaf tree are "
                             f">= {min_edges} edges apart by greedy max-min choice")
        chosen.append(best)
        closest = np.minimum(closest, dist[best])
    return np.array(chosen, np.int32)


def inject_convergence(key: jax.Array, alignment: jax.typing.ArrayLike,
                       taxa: jax.typing.ArrayLike, *, num_blocks: int = 5,
                       block_len: int = 5) -> tuple[jax.Array, jax.Array]:
    """Plant convergent blocks: REL's ``inject_convergent_blocks_tree_aware`` (unbatched).

    ``num_blocks`` distinct starts are drawn uniformly from ``0..S - block_len`` (blocks may
    overlap); in block order, each site of each block gets one uniformly random base, written
    into every row of ``taxa`` (a later block overwrites an earlier one where they overlap, so
    every planted site is shared by all of ``taxa``).

    Args:
      key: a jax PRNG key (consumed).
      alignment: int [R, S] (rows: leaves or nodes).
      taxa: int [k] row indices, k >= 2, distinct.
      num_blocks: B, 1 <= B <= S - block_len + 1 (static).
      block_len: 1 <= block_len <= S (static).

    Returns:
      (alignment [R, S] with the dtype of the input, starts int32 [B] in drawing order).

    >>> aln, starts = inject_convergence(jax.random.key(0), jnp.zeros((4, 20), jnp.int8),
    ...                                  jnp.array([0, 2]), num_blocks=2, block_len=3)
    >>> bool(jnp.all(aln[0] == aln[2])), starts.shape
    (True, (2,))
    """
    _check_int("num_blocks", num_blocks, 1)
    _check_int("block_len", block_len, 1)
    shape = np.shape(alignment)
    if len(shape) != 2:
        raise ValueError(f"alignment must be 2-D [rows, sites], got shape {shape}")
    rows, sites = shape
    if block_len > sites:
        raise ValueError(f"block_len must be <= the number of sites {sites}, got {block_len}")
    if num_blocks > sites - block_len + 1:
        raise ValueError(f"num_blocks must be <= {sites - block_len + 1} (distinct starts), "
                         f"got {num_blocks}")
    if len(np.shape(taxa)) != 1 or np.shape(taxa)[0] < 2:
        raise ValueError(f"taxa must be 1-D with >= 2 row indices, got shape {np.shape(taxa)}")
    t = _concrete(taxa)
    if t is not None and (np.any((t < 0) | (t >= rows)) or len(set(t.tolist())) != len(t)):
        raise ValueError(f"taxa must be distinct row indices in 0..{rows - 1}, got {t.tolist()}")
    return _inject_core(key, alignment, taxa, num_blocks=num_blocks, block_len=block_len)


@functools.partial(jax.jit, static_argnames=("num_blocks", "block_len"))
def _inject_core(key, alignment, taxa, *, num_blocks, block_len):
    alignment = jnp.asarray(alignment)
    taxa = jnp.asarray(taxa)
    num_starts = alignment.shape[1] - block_len + 1
    bits = jax.random.bits(key, (num_starts + num_blocks * block_len,))  # one draw: uint32
    # distinct starts, uniformly without replacement: the first B of a random permutation
    # (argsort of 32-bit draws; a tie, ~1e-5 here, only keeps index order)
    starts = jnp.argsort(bits[:num_starts])[:num_blocks]
    bases = (bits[num_starts:] & 3).reshape(num_blocks, block_len).astype(alignment.dtype)
    # writing the blocks in order = each site takes the base of the last block covering it
    sites = jnp.arange(alignment.shape[1])
    offset = sites[None, :] - starts[:, None]  # [B, S]
    covers = (offset >= 0) & (offset < block_len)
    last = jnp.max(jnp.where(covers, jnp.arange(num_blocks)[:, None], -1), axis=0)  # [S]
    safe = jnp.maximum(last, 0)
    base = bases[safe, jnp.clip(offset[safe, sites], 0, block_len - 1)]  # [S]
    rows = jnp.zeros(alignment.shape[0], bool).at[taxa].set(True)
    planted = rows[:, None] & (last >= 0)[None, :]
    return jnp.where(planted, base[None, :], alignment), starts.astype(jnp.int32)


def _sorted_names(names) -> list[str]:
    return sorted(names, key=lambda s: (int(s), s) if str(s).isdigit() else (math.inf, s))


def generate_b1(key: jax.Array, *, num_leaves: int, rc: int, num_sites: int = 300,
                yes: bool = True, num_blocks: int = 5, block_len: int = 5, min_edges: int = 3,
                model: str = "jc69", kappa: float = 2.0, freqs=None, min_length: float = 0.1,
                max_length: float = 1.0, edge_choice: str = "official",
                max_tries: int = 20) -> dict:
    """One REL-B1 item (host side): tree, leaf alignment, and for "yes" ``rc`` convergent taxa.

    The key is split into ``max_tries`` attempts; each attempt splits its key into (tree,
    simulation, taxa, injection) keys. A "yes" attempt whose tree admits no greedy choice of
    ``rc`` taxa (:func:`choose_taxa`) is redrawn, as the released builder does. A "no" item is
    the first attempt without injection, so ``yes=True`` and ``yes=False`` with the same key
    share tree and base alignment whenever the first attempt succeeds (paired items).

    Args:
      key: a jax PRNG key (consumed).
      num_leaves: n >= 2.
      rc: number of convergent taxa (the relational complexity), >= 2.
      num_sites, model, kappa, freqs: see :func:`simulate_alignment` (REL: 300, "jc69").
      yes: plant convergence ("Yes") or not ("No").
      num_blocks, block_len: see :func:`inject_convergence` (REL: 5 and 5).
      min_edges: see :func:`choose_taxa` (REL: 3).
      min_length, max_length, edge_choice: see :func:`random_tree`.
      max_tries: attempts before a ValueError naming ``rc``.

    Returns:
      dict: ``alignment`` {name: "ACGT..."} (leaves, in name order), ``newick``, ``answer``
      ("Yes"/"No"), ``taxa`` (gold names, numerically sorted; [] for "No"), ``blocks``
      (0-based block starts; [] for "No"), ``rc``, ``num_leaves``, ``num_sites`` (all
      JSON-ready), and ``tree`` (the :func:`random_tree` dict, numpy arrays). The gold taxa
      are the names shown in the alignment (the released builder stores positions in the
      string-sorted name list instead, which a scorer then compares with names).

    >>> item = generate_b1(jax.random.key(0), num_leaves=10, rc=2, num_sites=40)
    >>> item["answer"], len(item["taxa"]), len(item["alignment"]["1"])
    ('Yes', 2, 40)
    """
    _check_int("rc", rc, 2)
    _check_int("num_leaves", num_leaves, 2)
    _check_int("num_sites", num_sites, 1)
    _check_int("max_tries", max_tries, 1)
    _check_model(model, kappa, freqs)
    for attempt in jax.random.split(key, max_tries):
        k_tree, k_sim, k_taxa, k_inject = jax.random.split(attempt, 4)
        tree = random_tree(k_tree, num_leaves, min_length=min_length, max_length=max_length,
                           edge_choice=edge_choice)
        if yes:
            try:
                chosen = choose_taxa(k_taxa, tree, rc, min_edges=min_edges)
            except ValueError:
                continue
        aln = simulate_alignment(k_sim, tree["parents"], tree["branch_lengths"],
                                 num_sites=num_sites, model=model, kappa=kappa, freqs=freqs)
        aln = np.asarray(aln)[tree["leaves"]]
        taxa, starts = [], []
        if yes:
            aln, starts = inject_convergence(k_inject, aln, chosen, num_blocks=num_blocks,
                                             block_len=block_len)
            taxa = _sorted_names([tree["names"][j] for j in chosen])
            starts = np.asarray(starts).tolist()
        letters = np.frombuffer(BASES.encode(), np.uint8)[np.asarray(aln)]
        return {"alignment": {name: row.tobytes().decode()
                              for name, row in zip(tree["names"], letters)},
                "newick": newick(tree), "answer": "Yes" if yes else "No", "taxa": taxa,
                "blocks": starts, "rc": rc, "num_leaves": num_leaves, "num_sites": num_sites,
                "tree": tree}
    raise ValueError(f"rc={rc}: no {num_leaves}-leaf tree in {max_tries} tries had {rc} taxa "
                     f">= {min_edges} edges apart")


# the detector lives in bio_detect (imported last: it uses the functions above)
from jaxpapers.benchmarks.rel.bio_detect import (  # noqa: E402
    calibrate_thresholds, convergence_scores, detect_convergence)
