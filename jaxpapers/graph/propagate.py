"""Message passing with ``jax.ops.segment_sum`` (sum, mean, GCN) and k-NN interpolation.

Messages flow along edges ``s -> r`` and are summed at receivers with a static number of segments
(N), so every function here works under ``jit`` and ``vmap`` over same-size padded graphs. Padded
edges and nodes contribute nothing, whatever features they hold (if finite or not: they are
selected away with ``where``, never multiplied by zero).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from jaxpapers.core import checks
from jaxpapers.graph._types import Graph
from jaxpapers.graph.build import check_graph, check_node_array, real_edges

__all__ = ["sum_aggregate", "mean_aggregate", "gcn_propagate", "knn_interpolate",
           "knn_neighbours", "knn_apply", "KnnNeighbours"]


def _per_row(w: jax.Array, x: jax.Array) -> jax.Array:
    """``w`` [K] reshaped to broadcast against ``x`` [K, ...]."""
    return w.reshape(w.shape + (1,) * (x.ndim - 1))


def _float(x: jax.Array) -> jax.Array:
    return x if jnp.issubdtype(x.dtype, jnp.inexact) else x.astype(jnp.result_type(float))


def _safe_rsqrt(d: jax.Array) -> jax.Array:
    """d^{-1/2} where d > 0, else 0 (no inf or NaN, also in gradients)."""
    pos = d > 0
    return jnp.where(pos, 1.0 / jnp.sqrt(jnp.where(pos, d, 1.0)), 0.0)


def _incoming(graph: Graph, x: jax.Array, real: jax.Array) -> jax.Array:
    """[E, ...] sender features of real edges, 0 on the other slots."""
    return jnp.where(_per_row(real, x), x[graph.senders], 0)


def sum_aggregate(graph: Graph, x: ArrayLike) -> jax.Array:
    """Sum of incoming neighbour features: ``out_r = sum over real edges s -> r of x_s``.

    Unbatched (vmap over graphs). Equals ``to_dense(graph) @ x``.

    Args:
      graph: ``Graph`` with N nodes.
      x: [N, ...] node features.

    Returns:
      [N, ...] sums (0 for nodes without real in-edges, padded nodes included).

    >>> from jaxpapers.graph import from_edges
    >>> g = from_edges([0, 1, 2], [2, 2, 0], num_nodes=3)
    >>> sum_aggregate(g, jnp.array([1.0, 2.0, 4.0])).tolist()
    [4.0, 0.0, 3.0]
    """
    check_graph(graph)
    x = check_node_array("x", x, graph)
    real = real_edges(graph)
    return jax.ops.segment_sum(_incoming(graph, x, real), graph.receivers,
                               num_segments=graph.num_nodes)


def mean_aggregate(graph: Graph, x: ArrayLike) -> jax.Array:
    """GraphSAGE mean aggregator: the mean of the features of the real in-neighbours.

    ``out_r = (1 / deg_in(r)) sum over real edges s -> r of x_s`` (Hamilton et al., 2017,
    Eq. 1's AGGREGATE = mean), 0 for a node with no real in-edge. Multi-edges count with
    multiplicity. Unbatched.

    Args:
      graph: ``Graph`` with N nodes.
      x: [N, ...] node features.

    Returns:
      [N, ...] float means.

    >>> from jaxpapers.graph import from_edges
    >>> g = from_edges([0, 1, 2], [2, 2, 0], num_nodes=3)
    >>> mean_aggregate(g, jnp.array([1.0, 2.0, 4.0])).tolist()
    [4.0, 0.0, 1.5]
    """
    check_graph(graph)
    x = _float(check_node_array("x", x, graph))
    real = real_edges(graph)
    total = jax.ops.segment_sum(_incoming(graph, x, real), graph.receivers,
                                num_segments=graph.num_nodes)
    count = jax.ops.segment_sum(real.astype(x.dtype), graph.receivers,
                                num_segments=graph.num_nodes)
    return total / _per_row(jnp.maximum(count, 1.0), total)


def gcn_propagate(graph: Graph, x: ArrayLike, *, add_self_loops: bool = True) -> jax.Array:
    """GCN propagation ``D~^{-1/2} A~ D~^{-1/2} x`` (Kipf & Welling, 2017, Eq. 2).

    ``A~ = A + I`` (a loop on each real node) when ``add_self_loops``, else ``A``; with
    ``A[r, s]`` the number of real edges ``s -> r`` (see :func:`~jaxpapers.graph.to_dense`) and
    ``D~ = diag(row sums of A~)`` the in-degrees of the looped graph (PyG's ``gcn_norm`` with
    the default source-to-target flow). So ``out_r = sum over s -> r of x_s / sqrt(d_s d_r)``
    (+ ``x_r / d_r`` for the loop). ``D~^{-1/2}`` is taken as 0 on nodes of in-degree 0, so
    such nodes (padded ones; without loops, also isolated nodes and pure sources of a directed
    graph) get 0 and send nothing; nothing is divided by zero. Unbatched.

    Args:
      graph: ``Graph`` with N nodes; store undirected graphs with both directions.
      x: [N, ...] node features.
      add_self_loops: add ``I`` to ``A`` (static). Existing loops in ``graph`` are kept too.

    Returns:
      [N, ...] float propagated features.

    >>> from jaxpapers.graph import from_edges
    >>> g = from_edges([0, 1], [1, 0], num_nodes=2)
    >>> gcn_propagate(g, jnp.array([1.0, 3.0])).tolist()  # degrees 2: (x_0 + x_1) / 2
    [2.0, 2.0]
    """
    check_graph(graph)
    checks.check_bool("add_self_loops", add_self_loops)
    x = _float(check_node_array("x", x, graph))
    real = real_edges(graph)
    s, r, n = graph.senders, graph.receivers, graph.num_nodes
    deg = jax.ops.segment_sum(real.astype(x.dtype), r, num_segments=n)
    if add_self_loops:
        deg = deg + graph.node_mask.astype(x.dtype)
    # 1 / sqrt(d_s d_r) in one rounding; 0 when d_s = 0 (a sender with no in-edge: D^{-1/2}
    # is taken as 0 on degree-0 nodes, as PyG's gcn_norm does)
    coef = _safe_rsqrt(jnp.where(real, deg[s] * deg[r], 0.0))
    out = jax.ops.segment_sum(_per_row(coef, x) * _incoming(graph, x, real), r, num_segments=n)
    if add_self_loops:
        x_real = jnp.where(_per_row(graph.node_mask, x), x, 0)
        out = out + x_real / _per_row(jnp.where(deg > 0, deg, 1.0), x)
    return out


def knn_interpolate(x_src: ArrayLike, pos_src: ArrayLike, pos_dst: ArrayLike, *, k: int = 3,
                    src_mask: ArrayLike | None = None,
                    eps: float | jax.Array | None = None) -> jax.Array:
    """Inverse-squared-distance weighted mean of the k nearest sources' features (PyG semantics).

    For each destination ``t``: take the k real sources nearest to ``pos_dst[t]`` (ties to the
    lower index), with ``d_j^2 = |pos_dst[t] - pos_src[j]|^2`` weigh them by
    ``w_j = 1 / max(d_j^2, 1e-16)`` (``eps`` None, as ``torch_geometric.nn.unpool.knn_interpolate``)
    or ``w_j = 1 / (d_j^2 + eps)`` (``eps`` given, as SuperMeshNet's release with ``eps = 1e-8``),
    and return ``sum_j w_j x_src[j] / sum_j w_j``. Sources with ``src_mask`` False are never chosen;
    with fewer than k real sources only the real ones count, and with none the output is 0.
    Distances are computed densely: O(T S P) memory. Unbatched.

    Args:
      x_src: [S, ...] source features.
      pos_src: [S, P] source positions.
      pos_dst: [T, P] destination positions.
      k: neighbours per destination, 1 <= k <= S (static).
      src_mask: [S] bool real sources; all True when None.
      eps: None (PyG's clamp) or a finite float > 0 added to every squared distance (may be
        traced; checked when concrete).

    Returns:
      [T, ...] interpolated features (a linear map of ``x_src``, whose rows of weights sum to 1
      where a destination has a real source).

    Raises:
      ValueError: naming ``pos_src`` / ``pos_dst`` / ``x_src`` (shapes), ``k`` (< 1 or > S),
        ``src_mask`` (not [S] bool) or ``eps`` (not finite and > 0).

    >>> x = jnp.array([[1.0], [3.0], [100.0]])
    >>> pos = jnp.array([[0.0], [2.0], [10.0]])
    >>> knn_interpolate(x, pos, jnp.array([[1.0]]), k=2).tolist()  # equal weights on 1 and 3
    [[2.0]]
    >>> out = knn_interpolate(x, pos, jnp.array([[0.0]]), k=2, eps=1.0)  # w = 1/1, 1/5
    >>> round(float(out[0, 0]), 5)  # (1 + 3 / 5) / (1 + 1 / 5)
    1.33333
    """
    x_src = _float(jnp.asarray(x_src))
    pos_src, pos_dst = _check_positions(pos_src, pos_dst)
    num_src = pos_src.shape[0]
    if x_src.ndim < 1 or x_src.shape[0] != num_src:
        raise ValueError(f"x_src must have shape [S, ...] with S = {num_src} (from pos_src), got "
                         f"{x_src.shape}")
    return knn_apply(knn_neighbours(pos_src, pos_dst, k=k, src_mask=src_mask, eps=eps), x_src)


class KnnNeighbours(NamedTuple):
    """The k nearest real sources of each destination and their raw weights (see
    :func:`knn_interpolate`; letters T destinations, k neighbours).

    Attributes:
      idx: [T, k] int32 source ids, nearest first.
      w: [T, k] weights ``1 / max(d^2, 1e-16)`` or ``1 / (d^2 + eps)``; 0 where ``finite`` is False.
      finite: [T, k] bool, False for the slots left when fewer than k sources are real.
    """

    idx: jax.Array
    w: jax.Array
    finite: jax.Array


def _check_positions(pos_src, pos_dst):
    pos_src, pos_dst = jnp.asarray(pos_src), jnp.asarray(pos_dst)
    if pos_src.ndim != 2 or pos_dst.ndim != 2 or pos_src.shape[1] != pos_dst.shape[1]:
        raise ValueError(f"pos_src and pos_dst must have shapes [S, P] and [T, P], got "
                         f"{pos_src.shape} and {pos_dst.shape}")
    return pos_src, pos_dst


def knn_neighbours(pos_src: ArrayLike, pos_dst: ArrayLike, *, k: int = 3,
                   src_mask: ArrayLike | None = None,
                   eps: float | jax.Array | None = None) -> KnnNeighbours:
    """The neighbour search of :func:`knn_interpolate`, to reuse for several fields.

    ``knn_apply(knn_neighbours(pos_src, pos_dst, ...), x)`` equals
    ``knn_interpolate(x, pos_src, pos_dst, ...)`` bit for bit. Unbatched.

    Args and raises: as :func:`knn_interpolate` (without ``x_src``).

    Returns:
      :class:`KnnNeighbours` for the T destinations.

    >>> nb = knn_neighbours(jnp.array([[0.0], [2.0], [10.0]]), jnp.array([[1.0]]), k=2)
    >>> nb.idx.tolist(), knn_apply(nb, jnp.array([1.0, 3.0, 100.0])).tolist()
    ([[0, 1]], [2.0])
    """
    pos_src, pos_dst = _check_positions(pos_src, pos_dst)
    num_src = pos_src.shape[0]
    k = checks.check_int("k", k, minimum=1, maximum=num_src)
    if eps is not None:
        checks.check_range("eps", eps, low=0.0, low_open=True, scalar=True)
    # one coordinate at a time: XLA:CPU runs a [T, S, P] broadcast-and-reduce over the short
    # minor axis P ~20x slower than P fused elementwise passes over [T, S]
    d2 = jnp.zeros((pos_dst.shape[0], num_src), jnp.result_type(pos_src, pos_dst))  # [T, S]
    for p in range(pos_src.shape[1]):
        d2 = d2 + (pos_dst[:, p, None] - pos_src[None, :, p]) ** 2
    if src_mask is not None:
        src_mask = jnp.asarray(src_mask)
        if src_mask.shape != (num_src,) or src_mask.dtype != jnp.bool_:
            raise ValueError(f"src_mask must be a bool array of shape [S] = ({num_src},), got "
                             f"shape {src_mask.shape} dtype {src_mask.dtype}")
        d2 = jnp.where(src_mask[None, :], d2, jnp.inf)
    neg_d2, idx = jax.lax.top_k(-d2, k)  # [T, k]
    d2k = -neg_d2
    finite = jnp.isfinite(d2k)
    d2k = jnp.where(finite, d2k, 1.0)
    w = 1.0 / (jnp.maximum(d2k, 1e-16) if eps is None else d2k + eps)
    return KnnNeighbours(idx.astype(jnp.int32), jnp.where(finite, w, 0.0), finite)


def knn_apply(neighbours: KnnNeighbours, x_src: ArrayLike) -> jax.Array:
    """``sum_j w_j x_src[idx_j] / sum_j w_j`` per destination (0 without a real source).

    Args:
      neighbours: from :func:`knn_neighbours` (T destinations, S sources).
      x_src: [S, ...] source features.

    Returns:
      [T, ...] interpolated features, linear in ``x_src``.
    """
    x_src = _float(jnp.asarray(x_src))
    finite = neighbours.finite
    w = neighbours.w.astype(x_src.dtype)
    extra = (1,) * (x_src.ndim - 1)
    xs = jnp.where(finite.reshape(finite.shape + extra), x_src[neighbours.idx], 0)  # [T, k, ...]
    num = jnp.sum(w.reshape(w.shape + extra) * xs, axis=1)
    den = jnp.sum(w, axis=1)
    return num / jnp.where(den > 0, den, 1.0).reshape(den.shape + extra)
