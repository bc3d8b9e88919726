"""Contextual stochastic block model (Deshpande et al., 2018) and edge homophily.

Labels are balanced over C classes (a random permutation of ``i mod C``), features are a class
mean plus Gaussian noise, and each unordered pair {i, j}, i != j, is joined independently with
probability ``p_in`` (same class) or ``p_out`` (different classes). With class size
``n_c = N / C`` the two probabilities

    p_in  = h k / (n_c - 1),        p_out = (1 - h) k / (N - n_c)

give every node expected degree k and an expected share h of same-class edges (exactly when C
divides N; up to the rounding of class sizes otherwise). Sampling draws one uniform per pair, so
it costs O(N^2) time and memory (a few thousand nodes are fine).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from jaxpapers.core import checks
from jaxpapers.graph._types import Graph
from jaxpapers.graph.build import check_graph, real_edges

__all__ = ["csbm", "csbm_max_edges", "edge_homophily"]


def csbm_max_edges(num_nodes: int, mean_degree: float) -> int:
    """The default edge slots of :func:`csbm`: twice a high-probability bound on the edge count.

    The number of undirected edges M is a sum of independent Bernoullis with mean
    ``mu = N k / 2`` and variance below mu; the bound ``mu + 6 sqrt(mu) + 8`` (capped at
    ``N (N - 1) / 2``) is exceeded with probability below 1e-8.

    >>> csbm_max_edges(100, 4.0)
    586
    """
    mu = num_nodes * mean_degree / 2.0
    pairs = min(num_nodes * (num_nodes - 1) // 2, math.ceil(mu + 6.0 * math.sqrt(mu) + 8.0))
    return 2 * pairs


def csbm(key: jax.Array, *, num_nodes: int, num_classes: int, num_features: int,
         homophily: ArrayLike, mean_degree: float, mean_scale: ArrayLike = 1.0,
         noise_scale: ArrayLike = 1.0, class_means: ArrayLike | None = None,
         max_edges: int | None = None) -> tuple[Graph, jax.Array, jax.Array]:
    """Sample a contextual SBM graph with features and labels (see module docs for the model).

    Jittable: ``num_nodes``, ``num_classes``, ``num_features``, ``mean_degree`` and ``max_edges``
    are static (they fix the shapes); ``homophily``, ``mean_scale``, ``noise_scale`` and
    ``class_means`` may be traced. Vmap over keys for several graphs.

    The edge list is undirected stored in both directions (edge ``2 j`` slots: pairs ``i < j``
    first, then their reverses), with no self loops and no duplicates. If more than
    ``max_edges / 2`` pairs are drawn, the pairs past that (in row-major order) are dropped;
    with the default :func:`csbm_max_edges` this has probability below 1e-8.

    Args:
      key: a ``jax.random.key``; consumed.
      num_nodes: N >= 2 C.
      num_classes: C >= 2.
      num_features: d >= 1.
      homophily: [] h in [0, 1], the expected share of same-class edges.
      mean_degree: k > 0, the expected degree of each node. ``p_in`` and ``p_out`` (module docs)
        must be <= 1 (checked when ``homophily`` is concrete, clipped otherwise).
      mean_scale: [] std of the class means, drawn i.i.d. N(0, mean_scale^2) per class and
        feature (unused when ``class_means`` is given).
      noise_scale: [] std of the i.i.d. Gaussian feature noise.
      class_means: optional [C, d] class means, e.g. shared by several clients.
      max_edges: even number of directed edge slots (static); ``csbm_max_edges(N, k)`` if None.

    Returns:
      ``(graph, x, y)``: ``Graph`` with N nodes (all real) and ``max_edges`` slots, [N, d] float
      features ``x = mu[y] + noise``, [N] int32 labels.

    >>> g, x, y = csbm(jax.random.key(0), num_nodes=60, num_classes=3, num_features=2,
    ...                homophily=0.8, mean_degree=4.0)
    >>> x.shape, y.shape, g.senders.shape, bool(g.edge_mask.any())
    ((60, 2), (60,), (388,), True)
    """
    checks.check_key("key", key)
    n = checks.check_int("num_nodes", num_nodes, minimum=1)
    c = checks.check_int("num_classes", num_classes, minimum=2)
    if n < 2 * c:
        raise ValueError(f"num_nodes must be >= 2 * num_classes = {2 * c}, got {n}")
    d = checks.check_int("num_features", num_features, minimum=1)
    if checks.is_tracer(mean_degree) or not isinstance(mean_degree, (int, float)):
        raise ValueError(f"mean_degree must be a Python number (static), got {mean_degree!r}")
    checks.check_range("mean_degree", mean_degree, low=0.0, low_open=True)
    checks.check_range("homophily", homophily, low=0.0, high=1.0, scalar=True)
    checks.check_range("noise_scale", noise_scale, low=0.0, scalar=True)
    class_size = n / c
    p_in_scale, p_out_scale = mean_degree / (class_size - 1.0), mean_degree / (n - class_size)
    h = checks.concrete(homophily)
    if h is not None:
        p_in, p_out = float(h) * p_in_scale, (1.0 - float(h)) * p_out_scale
        if p_in > 1.0 or p_out > 1.0:
            raise ValueError(f"mean_degree = {mean_degree} is too large for homophily = "
                             f"{float(h)} with {n} nodes in {c} classes: edge probabilities "
                             f"p_in = {p_in:.3g}, p_out = {p_out:.3g} must be <= 1")
    if max_edges is None:
        max_edges = csbm_max_edges(n, mean_degree)
    max_edges = checks.check_int("max_edges", max_edges, minimum=2)
    if max_edges % 2:
        raise ValueError(f"max_edges must be even (both directions), got {max_edges}")

    k_label, k_mean, k_noise, k_edge = jax.random.split(key, 4)
    y = jax.random.permutation(k_label, jnp.arange(n, dtype=jnp.int32) % c)
    if class_means is None:
        mu = jnp.asarray(mean_scale) * jax.random.normal(k_mean, (c, d))
    else:
        mu = jnp.asarray(class_means)
        if mu.shape != (c, d):
            raise ValueError(f"class_means must have shape [C, d] = ({c}, {d}), got {mu.shape}")
    x = mu[y] + jnp.asarray(noise_scale) * jax.random.normal(k_noise, (n, d), mu.dtype)

    homophily = jnp.asarray(homophily, jnp.result_type(float))
    p_in = jnp.clip(homophily * p_in_scale, 0.0, 1.0)
    p_out = jnp.clip((1.0 - homophily) * p_out_scale, 0.0, 1.0)
    prob = jnp.where(y[:, None] == y[None, :], p_in, p_out)
    upper = jnp.arange(n)[:, None] < jnp.arange(n)[None, :]
    adj = upper & (jax.random.uniform(k_edge, (n, n), prob.dtype) < prob)
    pairs = max_edges // 2
    i, j = jnp.nonzero(adj, size=pairs, fill_value=0)
    valid = jnp.arange(pairs) < jnp.sum(adj)
    i, j = i.astype(jnp.int32), j.astype(jnp.int32)
    graph = Graph(senders=jnp.concatenate([i, j]), receivers=jnp.concatenate([j, i]),
                  edge_mask=jnp.concatenate([valid, valid]), node_mask=jnp.ones((n,), bool),
                  num_nodes=n)
    return graph, x, y


def edge_homophily(graph: Graph, y: ArrayLike) -> jax.Array:
    """Share of real edges whose two ends have the same label (0 when there is no real edge).

    Unbatched. For a symmetric edge list this equals the share over undirected edges.

    Args:
      graph: ``Graph`` with N nodes.
      y: [N] integer labels.

    Returns:
      [] float share in [0, 1].

    >>> from jaxpapers.graph import from_edges
    >>> g = from_edges([0, 1, 2], [1, 2, 3], num_nodes=4)
    >>> float(edge_homophily(g, jnp.array([0, 0, 1, 1])))
    0.666...
    """
    check_graph(graph)
    y = jnp.asarray(y)
    if y.shape != (graph.num_nodes,):
        raise ValueError(f"y must have shape [N] = ({graph.num_nodes},), got {y.shape}")
    real = real_edges(graph)
    same = real & (y[graph.senders] == y[graph.receivers])
    total = jnp.sum(real)
    return (jnp.sum(same) / jnp.maximum(total, 1)).astype(jnp.result_type(float))
