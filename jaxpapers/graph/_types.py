"""The padded graph container shared by the graph module (a frozen, registered pytree dataclass)."""

from __future__ import annotations

import jax

from jaxpapers.core.pytree import dataclass, static_field

__all__ = ["Graph"]


@dataclass
class Graph:
    """A directed graph padded to static sizes (unbatched; vmap adds a leading axis to the arrays).

    Letters: N node slots (``num_nodes``), E edge slots. Edge e goes ``senders[e] ->
    receivers[e]``; messages flow along it and are aggregated at the receiver. An edge is *real*
    when ``edge_mask[e]`` is True and both its ends are real nodes (``node_mask``); every function
    of :mod:`jaxpapers.graph` ignores the other slots, whatever their ids (which must still lie in
    ``[0, N)``) or the features stored there. An undirected graph is stored with both directions.

    A batch of graphs (same N, same E) is a ``Graph`` whose array fields have a leading axis B;
    ``num_nodes`` is static, so graphs of one batch share it.

    Attributes:
      senders: [E] int32 source node of each edge slot.
      receivers: [E] int32 target node of each edge slot.
      edge_mask: [E] bool, True for real edges (padding False).
      node_mask: [N] bool, True for real nodes (padding False).
      num_nodes: N, static.
    """

    senders: jax.Array  # [E] int32
    receivers: jax.Array  # [E] int32
    edge_mask: jax.Array  # [E] bool
    node_mask: jax.Array  # [N] bool
    num_nodes: int = static_field()

    @property
    def num_edge_slots(self) -> int:
        """E, the number of edge slots (real and padded)."""
        return self.senders.shape[-1]
