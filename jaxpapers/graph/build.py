"""Building and inspecting padded graphs: edge lists, reverse edges, self loops, degrees, dense A.

Every edit keeps shapes static: :func:`symmetrize` doubles the edge slots and :func:`add_self_loops`
appends N of them, whatever the masks say, so the result of a jitted edit on a batch of same-size
graphs is again a batch of same-size graphs.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from jaxpapers.core import checks
from jaxpapers.graph._types import Graph

__all__ = ["from_edges", "symmetrize", "add_self_loops", "degree", "to_dense", "real_edges",
           "check_graph", "check_node_array"]


def _edge_ids(name: str, ids, num_nodes: int):
    """``ids`` as a 1-D int32 array after checking its kind and (if concrete) its range."""
    shape, dtype = np.shape(ids), getattr(ids, "dtype", None)
    if checks.is_concrete(ids):
        ids = np.asarray(ids)
        dtype = ids.dtype
    if len(shape) != 1:
        raise ValueError(f"{name} must be a 1-D integer array [E], got shape {tuple(shape)}")
    size = math.prod(shape)
    if size and (dtype is None or not jnp.issubdtype(dtype, jnp.integer)):
        raise ValueError(f"{name} must hold integer node ids, got dtype {dtype}")
    if isinstance(ids, np.ndarray) and size:
        lo, hi = int(ids.min()), int(ids.max())
        if lo < 0:
            raise ValueError(f"{name} must be >= 0, got a node id {lo} < 0")
        if hi >= num_nodes:
            raise ValueError(f"{name} must be < num_nodes = {num_nodes}, got a node id "
                             f"{hi} >= num_nodes")
    return jnp.asarray(ids, jnp.int32) if size else jnp.zeros((0,), jnp.int32)


def from_edges(senders: ArrayLike, receivers: ArrayLike, *, num_nodes: int,
               max_edges: int | None = None, node_mask: ArrayLike | None = None) -> Graph:
    """A :class:`Graph` from a directed edge list, optionally padded to ``max_edges`` slots.

    Edges are kept as given (``senders[e] -> receivers[e]``; no reverse edges are added, see
    :func:`symmetrize`). Padded slots get ids 0 and ``edge_mask`` False; an edge touching a node
    whose ``node_mask`` is False is also marked False. Value checks run on concrete inputs only
    (inside ``jit`` the ids are unchecked).

    Args:
      senders: [E] integer source ids in ``[0, num_nodes)``.
      receivers: [E] integer target ids in ``[0, num_nodes)``.
      num_nodes: N >= 1 node slots (static).
      max_edges: edge slots after padding (static, >= E); E when None.
      node_mask: [N] bool real nodes; all True when None.

    Returns:
      A ``Graph`` with ``max_edges`` (or E) edge slots.

    Raises:
      ValueError: naming ``senders`` / ``receivers`` (not 1-D integer, different lengths, an id
        < 0 or >= num_nodes), ``num_nodes`` (< 1), ``max_edges`` (fewer than E) or
        ``node_mask`` (not [N] bool).

    >>> g = from_edges([0, 1], [1, 2], num_nodes=3, max_edges=4)
    >>> g.senders.tolist(), g.receivers.tolist(), g.edge_mask.tolist()
    ([0, 1, 0, 0], [1, 2, 0, 0], [True, True, False, False])
    """
    num_nodes = checks.check_int("num_nodes", num_nodes, minimum=1)
    s = _edge_ids("senders", senders, num_nodes)
    r = _edge_ids("receivers", receivers, num_nodes)
    if s.shape != r.shape:
        raise ValueError(f"senders and receivers must have the same length, got {s.shape[0]} "
                         f"senders and {r.shape[0]} receivers")
    num_edges = s.shape[0]
    if max_edges is None:
        max_edges = num_edges
    max_edges = checks.check_int("max_edges", max_edges, minimum=0)
    if max_edges < num_edges:
        raise ValueError(f"max_edges must be >= the number of edges, got max_edges = {max_edges} "
                         f"and {num_edges} edges")
    if node_mask is None:
        node_mask = jnp.ones((num_nodes,), bool)
    else:
        node_mask = jnp.asarray(node_mask)
        if node_mask.shape != (num_nodes,) or node_mask.dtype != jnp.bool_:
            raise ValueError(f"node_mask must be a bool array of shape [N] = ({num_nodes},), got "
                             f"shape {node_mask.shape} dtype {node_mask.dtype}")
    pad = max_edges - num_edges
    s, r = jnp.pad(s, (0, pad)), jnp.pad(r, (0, pad))
    edge_mask = (jnp.arange(max_edges) < num_edges) & node_mask[s] & node_mask[r]
    return Graph(s, r, edge_mask, node_mask, num_nodes)


def check_graph(graph: Graph, name: str = "graph") -> None:
    """``graph`` is an unbatched :class:`Graph` (static check; vmap over a batch of graphs)."""
    if not isinstance(graph, Graph):
        raise ValueError(f"{name} must be a jaxpapers.graph.Graph, got {type(graph).__name__}")
    if jnp.ndim(graph.senders) != 1 or jnp.ndim(graph.node_mask) != 1:
        raise ValueError(f"{name} must be unbatched (senders [E], node_mask [N]), got senders "
                         f"shape {jnp.shape(graph.senders)}; vmap over a batch of graphs")


def check_node_array(name: str, x, graph: Graph, ndim: int | None = None) -> jax.Array:
    """``x`` as an array with leading axis N = ``graph.num_nodes`` (and ``ndim`` axes if given)."""
    x = jnp.asarray(x)
    if x.ndim < 1 or x.shape[0] != graph.num_nodes or (ndim is not None and x.ndim != ndim):
        want = "[N, D]" if ndim == 2 else "[N, ...]"
        raise ValueError(f"{name} must have shape {want} with N = num_nodes = {graph.num_nodes}, "
                         f"got shape {x.shape}")
    return x


def real_edges(graph: Graph) -> jax.Array:
    """[E] bool: ``edge_mask`` and both ends real nodes (the edges every function counts).

    >>> g = from_edges([0, 1], [1, 2], num_nodes=3)
    >>> real_edges(g.replace(node_mask=jnp.array([True, True, False]))).tolist()
    [True, False]
    """
    return graph.edge_mask & graph.node_mask[graph.senders] & graph.node_mask[graph.receivers]


def symmetrize(graph: Graph) -> Graph:
    """Append the reverse of every edge slot (2E slots; padding stays padding).

    Edges already present in both directions become duplicates (multi-edges); build the graph
    from one direction per undirected edge.

    Args:
      graph: an unbatched ``Graph`` with E edge slots.

    Returns:
      A ``Graph`` with 2E slots: the E given ones, then their reverses with the same mask.

    >>> g = symmetrize(from_edges([0], [1], num_nodes=2))
    >>> g.senders.tolist(), g.receivers.tolist()
    ([0, 1], [1, 0])
    """
    check_graph(graph)
    s, r = graph.senders, graph.receivers
    return graph.replace(senders=jnp.concatenate([s, r]), receivers=jnp.concatenate([r, s]),
                         edge_mask=jnp.concatenate([graph.edge_mask, graph.edge_mask]))


def add_self_loops(graph: Graph) -> Graph:
    """Append one loop ``i -> i`` per node slot (E + N slots; loops of padded nodes masked off).

    Existing self loops are kept, so a node that had one ends with two.

    Args:
      graph: an unbatched ``Graph`` with E edge slots and N nodes.

    Returns:
      A ``Graph`` with E + N slots.

    >>> g = add_self_loops(from_edges([0], [1], num_nodes=2))
    >>> g.senders.tolist(), g.receivers.tolist(), g.edge_mask.tolist()
    ([0, 0, 1], [1, 0, 1], [True, True, True])
    """
    check_graph(graph)
    loops = jnp.arange(graph.num_nodes, dtype=jnp.int32)
    return graph.replace(senders=jnp.concatenate([graph.senders, loops]),
                         receivers=jnp.concatenate([graph.receivers, loops]),
                         edge_mask=jnp.concatenate([graph.edge_mask, graph.node_mask]))


def degree(graph: Graph, *, direction: str = "in") -> jax.Array:
    """Number of real edges into (``"in"``) or out of (``"out"``) each node, as floats.

    Unbatched. Multi-edges count with multiplicity; a self loop adds 1 to both degrees.

    Args:
      graph: an unbatched ``Graph``.
      direction: ``"in"`` (count at receivers) or ``"out"`` (count at senders).

    Returns:
      [N] float degrees (0 for padded nodes).

    >>> g = from_edges([0, 0, 1], [1, 2, 2], num_nodes=3)
    >>> degree(g).tolist(), degree(g, direction="out").tolist()
    ([0.0, 1.0, 2.0], [2.0, 1.0, 0.0])
    """
    check_graph(graph)
    checks.check_choice("direction", direction, ("in", "out"))
    ids = graph.receivers if direction == "in" else graph.senders
    w = real_edges(graph).astype(jnp.result_type(float))
    return jax.ops.segment_sum(w, ids, num_segments=graph.num_nodes)


def to_dense(graph: Graph) -> jax.Array:
    """Dense [N, N] adjacency with ``A[r, s]`` = number of real edges ``s -> r``.

    Row i lists the in-edges of node i, so ``to_dense(g) @ x == sum_aggregate(g, x)`` and the row
    sums are the in-degrees. Meant for tests and small graphs (O(N^2) memory).

    Args:
      graph: an unbatched ``Graph``.

    Returns:
      [N, N] float adjacency (multi-edges counted; padded rows and columns 0).

    >>> to_dense(from_edges([0, 0], [1, 1], num_nodes=2)).tolist()
    [[0.0, 0.0], [2.0, 0.0]]
    """
    check_graph(graph)
    n = graph.num_nodes
    w = real_edges(graph).astype(jnp.result_type(float))
    return jnp.zeros((n, n), w.dtype).at[graph.receivers, graph.senders].add(w)
