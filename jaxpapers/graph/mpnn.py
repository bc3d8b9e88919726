"""A generic message-passing block (Gilmer et al., 2017; the processor step of MeshGraphNets).

One block, for real edges ``s -> r`` with features ``e_sr`` and real nodes i:

    m_sr = phi_e([x_s, x_r, e_sr])                          (edge MLP)
    m_sr <- m_sr - mean over real edges of m                (if center_messages)
    a_i  = sum over real edges s -> i of m_si               (segment_sum)
    a_i  <- a_i - mean over real nodes of a                 (if center_aggregate)
    h_i  = phi_v([x_i, a_i])                                 (node MLP)
    x'_i = skip(x_i) + h_i,  e'_sr = skip(e_sr) + m_sr      (if residual)
    x'_i <- x'_i - mean over real nodes of x'               (if center_nodes)

``skip`` is the identity when the width already equals ``hidden`` and a bias-free linear map
otherwise. Padded nodes and edges get 0 outputs and never touch the real ones.

The two message centrings differ: ``center_messages`` centres the messages over edges before
they are summed, ``center_aggregate`` centres the summed messages over nodes (SuperMeshNet's
``ib_e``: ``agg - mean(agg, 0)`` in its ``NodeBlock``). With ``residual`` and ``center_nodes``
the block is SuperMeshNet's ``GnBlock`` with ``ib_n``.
"""

from __future__ import annotations

from collections.abc import Callable

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxpapers.graph._types import Graph
from jaxpapers.graph.build import check_graph, check_node_array, real_edges

__all__ = ["MPNNBlock"]


def _masked_mean(v: jax.Array, mask: jax.Array) -> jax.Array:
    """Mean of the rows of ``v`` [K, H] where ``mask`` [K]; 0 when no row is real."""
    total = jnp.sum(jnp.where(mask[:, None], v, 0.0), axis=0)
    return total / jnp.maximum(jnp.sum(mask), 1).astype(v.dtype)


class _MLP(nn.Module):
    hidden: int
    num_layers: int
    activation: Callable[[jax.Array], jax.Array]
    layer_norm: bool

    @nn.compact
    def __call__(self, v):
        for i in range(self.num_layers):
            v = nn.Dense(self.hidden)(v)
            if i < self.num_layers - 1:
                v = self.activation(v)
        return nn.LayerNorm()(v) if self.layer_norm else v


class MPNNBlock(nn.Module):
    """One message-passing step on a padded :class:`~jaxpapers.graph.Graph` (see module docs).

    Unbatched: call it on one graph, vmap ``apply`` over a batch of same-size graphs.

    Attributes:
      hidden: H, the width of messages and outputs.
      num_layers: Dense layers per MLP (>= 1; activations between them, none after the last).
      residual: add the (projected) inputs to the outputs.
      center_nodes: subtract the mean over real nodes from the node outputs.
      center_messages: subtract the mean over real edges from the messages before aggregation.
      center_aggregate: subtract the mean over real nodes from the aggregated messages ``a``
        (after the sum, before the node MLP; SuperMeshNet's ``ib_e``). Independent of
        ``center_messages``; both may be on.
      layer_norm: LayerNorm after each MLP (as MeshGraphNets).
      activation: the MLPs' nonlinearity.

    Call args:
      graph: ``Graph`` with N nodes and E edge slots.
      x: [N, F] node features.
      e: optional [E, F_e] edge features.

    Returns:
      ``(x_new, e_new)``: [N, H] node features and [E, H] edge features (the messages, plus the
      skip of ``e`` when ``residual`` and ``e`` is given); 0 on padded slots.

    >>> import jax
    >>> from jaxpapers.graph import from_edges
    >>> g = from_edges([0, 1, 2], [1, 2, 0], num_nodes=3)
    >>> block = MPNNBlock(hidden=4)
    >>> params = block.init(jax.random.key(0), g, jnp.ones((3, 2)))
    >>> x_new, e_new = block.apply(params, g, jnp.ones((3, 2)))
    >>> x_new.shape, e_new.shape
    ((3, 4), (3, 4))
    """

    hidden: int
    num_layers: int = 2
    residual: bool = True
    center_nodes: bool = False
    center_messages: bool = False
    center_aggregate: bool = False
    layer_norm: bool = False
    activation: Callable[[jax.Array], jax.Array] = nn.gelu

    @nn.compact
    def __call__(self, graph: Graph, x: jax.Array, e: jax.Array | None = None
                 ) -> tuple[jax.Array, jax.Array]:
        check_graph(graph)
        if self.hidden < 1 or self.num_layers < 1:
            raise ValueError(f"hidden and num_layers must be >= 1, got hidden = {self.hidden}, "
                             f"num_layers = {self.num_layers}")
        x = check_node_array("x", x, graph, ndim=2)
        s, r = graph.senders, graph.receivers
        edge_real, node_real = real_edges(graph), graph.node_mask
        x = jnp.where(node_real[:, None], x, 0)  # padding never reaches an MLP (or a grad)
        parts = [x[s], x[r]]
        if e is not None:
            e = jnp.asarray(e)
            if e.ndim != 2 or e.shape[0] != s.shape[0]:
                raise ValueError(f"e must have shape [E, F_e] with E = {s.shape[0]} edge slots, "
                                 f"got {e.shape}")
            parts.append(jnp.where(edge_real[:, None], e, 0))
        mlp = lambda name: _MLP(self.hidden, self.num_layers, self.activation, self.layer_norm,
                                name=name)
        m = jnp.where(edge_real[:, None], mlp("edge_mlp")(jnp.concatenate(parts, -1)), 0.0)
        if self.center_messages:
            m = jnp.where(edge_real[:, None], m - _masked_mean(m, edge_real), 0.0)
        agg = jax.ops.segment_sum(m, r, num_segments=graph.num_nodes)
        if self.center_aggregate:
            agg = jnp.where(node_real[:, None], agg - _masked_mean(agg, node_real), 0.0)
        h = mlp("node_mlp")(jnp.concatenate([x, agg], -1))

        def skip(v, name):
            return v if v.shape[-1] == self.hidden else nn.Dense(self.hidden, use_bias=False,
                                                                  name=name)(v)

        x_new, e_new = h, m
        if self.residual:
            x_new = x_new + skip(x, "node_skip")
            if e is not None:
                e_new = e_new + skip(e, "edge_skip")
        if self.center_nodes:
            x_new = x_new - _masked_mean(x_new, node_real)
        return (jnp.where(node_real[:, None], x_new, 0.0),
                jnp.where(edge_real[:, None], e_new, 0.0))
