"""Padded static-shape graphs and message passing in plain JAX (shared by FedGCM, FedPDG and
SuperMeshNet; no jraph).

A :class:`Graph` holds a directed edge list padded to E slots and a node mask over N slots, so
every function below works under ``jit`` and ``vmap`` over a batch of same-size graphs.
Undirected graphs are stored with both directions.

* :mod:`~jaxpapers.graph.build`: ``from_edges``, ``symmetrize``, ``add_self_loops``, ``degree``,
  ``to_dense`` (``A[r, s]`` = edges s -> r), ``real_edges``.
* :mod:`~jaxpapers.graph.propagate`: ``sum_aggregate``, ``mean_aggregate`` (GraphSAGE),
  ``gcn_propagate`` (Kipf & Welling), ``knn_interpolate`` (PyG semantics, or the additive
  ``1 / (d^2 + eps)`` weights), and its two halves ``knn_neighbours`` / ``knn_apply`` to reuse one
  neighbour search for several fields.
* :mod:`~jaxpapers.graph.mpnn`: ``MPNNBlock``, a Flax linen edge-MLP / node-MLP block with
  residuals and optional node, message (over edges) and aggregate (over nodes) centring.
* :mod:`~jaxpapers.graph.spectral`: ``high_frequency_energy``, the mean Rayleigh quotient
  x^T L x / x^T x (FedGCM), summed over edges.
* :mod:`~jaxpapers.graph.supermeshnet` (imported as ``graph.supermeshnet``): SuperMeshNet's
  mesh super-resolution model, complementary and supervised losses, batched / sharded losses
  and training on ``core.train.fit``.
* :mod:`~jaxpapers.graph.meshes`: ``MeshSample`` (padded LR / HR mesh pair) and its builders
  ``mesh_sample``, ``triangle_edges``, ``stack_samples``.
* :mod:`~jaxpapers.graph.csbm`: ``csbm``, a jittable contextual stochastic block model, and
  ``edge_homophily``.

Classic small graphs from networkx: :func:`jaxpapers.core.data.networkx_graph`.
"""

from jaxpapers.graph._types import Graph
from jaxpapers.graph.build import (add_self_loops, degree, from_edges, real_edges, symmetrize,
                                   to_dense)
from jaxpapers.graph.csbm import csbm, csbm_max_edges, edge_homophily
from jaxpapers.graph.mpnn import MPNNBlock
from jaxpapers.graph.propagate import (KnnNeighbours, gcn_propagate, knn_apply, knn_interpolate,
                                       knn_neighbours, mean_aggregate, sum_aggregate)
from jaxpapers.graph.spectral import high_frequency_energy
from jaxpapers.graph import supermeshnet  # a namespace: its init, train, ... are generic names
from jaxpapers.graph.meshes import MeshSample, mesh_sample, stack_samples, triangle_edges

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
    "knn_neighbours",
    "knn_apply",
    "KnnNeighbours",
    "MPNNBlock",
    "high_frequency_energy",
    "supermeshnet",
    "MeshSample",
    "mesh_sample",
    "stack_samples",
    "triangle_edges",
    "csbm",
    "csbm_max_edges",
    "edge_homophily",
]
