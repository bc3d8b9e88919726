"""High-frequency energy of node signals: the mean Rayleigh quotient x^T L x / x^T x over columns.

A smooth signal (neighbours alike) has a small quotient, a signal that flips across edges a large
one. FedGCM uses it to measure how much of a client's feature signal lives in the high graph
frequencies. The quadratic form is summed over edges, never through a dense Laplacian:

* unnormalized, ``L = D - A``:  ``x^T L x = 1/2 sum over real edges s -> r of (x_s - x_r)^2``;
* normalized, ``L = I' - D^{-1/2} A D^{-1/2}``:
  ``x^T L x = 1/2 sum over real edges of (x_s / sqrt(d_s) - x_r / sqrt(d_r))^2``,

with ``A[r, s]`` the number of real edges ``s -> r`` and ``d`` the in-degrees. Both identities
hold when the edge list is symmetric (every undirected edge stored in both directions, as
:func:`~jaxpapers.graph.symmetrize` and :func:`~jaxpapers.graph.csbm` make it): then A is
symmetric, the Laplacians are positive semidefinite and the quotient lies in ``[0, 2 d_max]``
(unnormalized) or ``[0, 2]`` (normalized). For a non-symmetric list the edge sums are still
``>= 0`` but are not the quadratic form of either matrix.

Self loops: a loop contributes ``(x_i - x_i)^2 = 0``. For ``D - A`` that is exact (the loop adds 1
to both ``D_ii`` and ``A_ii``, which cancel), so self loops change nothing. For the normalized
Laplacian a loop raises ``d_i`` and so changes the quotient; FedGCM's release adds self loops
first: pass ``add_self_loops(graph)``.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from jaxpapers.core import checks
from jaxpapers.graph._types import Graph
from jaxpapers.graph.build import check_graph, check_node_array, real_edges
from jaxpapers.graph.propagate import _float, _safe_rsqrt

__all__ = ["high_frequency_energy"]


def high_frequency_energy(graph: Graph, x: ArrayLike, *, normalized: bool, centered: bool,
                          feature_fraction: float = 1.0, key: jax.Array | None = None
                          ) -> jax.Array:
    """Mean over feature columns c of the Rayleigh quotient ``x_c^T L x_c / x_c^T x_c``.

    Only real nodes count: padded rows of ``x`` are replaced by 0 and padded nodes have no real
    edges. ``normalized=False`` uses ``L = D - A``; ``normalized=True`` uses
    ``L = I' - D^{-1/2} A D^{-1/2}`` where ``I'`` and ``D^{-1/2}`` are 0 on the rows of nodes
    with in-degree 0, i.e. isolated nodes add nothing to the numerator (they still count in the
    denominator ``x_c^T x_c``, a sum over all real nodes). See the module docstring for the edge
    sums used and why the edge list should be symmetric. ``centered`` first subtracts from each
    column its mean over the real nodes.

    A column whose ``x_c^T x_c`` is 0 is left out of the mean; so is a column that centring leaves
    numerically constant (``x_c^T x_c <= (n eps)^2 sum_i x_ic^2`` before centring, n real nodes,
    eps the dtype's machine epsilon). With no column left the result is 0.

    Unbatched (vmap over graphs and features; ``key`` may be vmapped too).

    Args:
      graph: ``Graph`` with N nodes and a symmetric edge list.
      x: [N, F] node features.
      normalized: use the symmetric normalized Laplacian (static).
      centered: centre each column over the real nodes first (static).
      feature_fraction: in (0, 1] (static). Below 1, a uniformly random subset of
        ``max(1, floor(feature_fraction * F))`` columns is used (FedGCM's release: 0.2 of the raw
        columns); ``key`` is then required.
      key: a ``jax.random.key`` choosing the columns; consumed. Unused when the fraction is 1.

    Returns:
      [] float mean quotient.

    >>> from jaxpapers.graph import from_edges, symmetrize
    >>> path = symmetrize(from_edges([0, 1], [1, 2], num_nodes=3))  # 0 - 1 - 2
    >>> x = jnp.array([[1.0, 1.0], [-1.0, 1.0], [1.0, 1.0]])  # alternating, constant
    >>> float(high_frequency_energy(path, x, normalized=False, centered=False))  # (8/3 + 0) / 2
    1.333...
    >>> float(high_frequency_energy(path, x, normalized=False, centered=True))  # constant skipped
    3.0
    """
    check_graph(graph)
    x = _float(check_node_array("x", x, graph, ndim=2))
    normalized = checks.check_bool("normalized", normalized)
    centered = checks.check_bool("centered", centered)
    if checks.is_tracer(feature_fraction) or not isinstance(feature_fraction, (int, float)):
        raise ValueError(f"feature_fraction must be a Python float in (0, 1] (static), got "
                         f"{feature_fraction!r}")
    checks.check_range("feature_fraction", feature_fraction, low=0.0, high=1.0, low_open=True)
    num_features = x.shape[1]
    if feature_fraction < 1.0:
        if key is None:
            raise ValueError("key is required when feature_fraction < 1 (it picks the columns)")
        checks.check_key("key", key)
        # the small offset keeps e.g. 0.29 * 100 = 28.999... at 29
        m = max(1, math.floor(feature_fraction * num_features + 1e-9))
        cols = jax.random.permutation(key, num_features)[:m]
        x = x[:, cols]

    node_mask = graph.node_mask[:, None]
    x = jnp.where(node_mask, x, 0.0)
    raw = jnp.sum(x * x, axis=0)
    n_real = jnp.sum(graph.node_mask).astype(x.dtype)
    if centered:
        mean = jnp.sum(x, axis=0) / jnp.maximum(n_real, 1.0)
        x = jnp.where(node_mask, x - mean, 0.0)
    den = jnp.sum(x * x, axis=0)

    real = real_edges(graph)
    s, r = graph.senders, graph.receivers
    if normalized:
        deg = jax.ops.segment_sum(real.astype(x.dtype), r, num_segments=graph.num_nodes)
        x = x * _safe_rsqrt(deg)[:, None]
    diff = jnp.where(real[:, None], x[s] - x[r], 0.0)
    num = 0.5 * jnp.sum(diff * diff, axis=0)

    eps = jnp.finfo(x.dtype).eps
    keep = den > (n_real * eps) ** 2 * raw
    quotient = jnp.where(keep, num / jnp.where(keep, den, 1.0), 0.0)
    count = jnp.sum(keep)
    return jnp.where(count > 0, jnp.sum(quotient) / jnp.maximum(count, 1), 0.0).astype(x.dtype)
