"""Padded static-shape graphs and message passing in plain JAX (shared by FedGCM, FedPDG and
SuperMeshNet; no jraph).

A :class:`Graph` holds a directed edge list padded to E slots and a node mask over N slots, so
every function below works under ``jit`` and ``vmap`` over a batch of same-size graphs.
Undirected graphs are stored with both directions.

* :mod:`~jaxpapers.graph.build`: ``from_edges``, ``symmetrize``, ``add_self_loops``, ``degree``,
  ``to_dense`` (``A[r, s]`` = edges s -> r), ``real_edges``.
* :mod:`~jaxpapers.graph.propagate`: ``sum_aggregate``, ``mean_aggregate`` (GraphSAGE),
  ``gcn_propagate`` (Kipf & Welling), ``knn_interpolate`` (PyG semantics).
* :mod:`~jaxpapers.graph.mpnn`: ``MPNNBlock``, a Flax linen edge-MLP / node-MLP block with
  residuals and optional node and message centring.
* :mod:`~jaxpapers.graph.spectral`: ``high_frequency_energy``, the mean Rayleigh quotient
  x^T L x / x^T x (FedGCM), summed over edges.
* :mod:`~jaxpapers.graph.csbm`: ``csbm``, a jittable contextual stochastic block model, and
  ``edge_homophily``.

Classic small graphs from networkx: :func:`jaxpapers.core.data.networkx_graph`.
"""

from jaxpapers.graph._types import Graph
from jaxpapers.graph.build import (add_self_loops, degree, from_edges, real_edges, symmetrize,
                                   to_dense)
from jaxpapers.graph.csbm import csbm, csbm_max_edges, edge_homophily
from jaxpapers.graph.mpnn import MPNNBlock
from jaxpapers.graph.propagate import (gcn_propagate, knn_interpolate, mean_aggregate,
                                       sum_aggregate)
from jaxpapers.graph.spectral import high_frequency_energy

__all__ = [
    "Graph",
    "from_edges",
    "symmetrize",
    "add_self_loops",
    "degree",
    "to_dense",
    "real_edges",
    "sum_aggregate",
    "mean_aggregate",
    "gcn_propagate",
    "knn_interpolate",
    "MPNNBlock",
    "high_frequency_energy",
    "csbm",
    "csbm_max_edges",
    "edge_homophily",
]
