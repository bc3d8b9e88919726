"""Padded low- / high-resolution mesh samples for mesh super-resolution (SuperMeshNet's data).

A :class:`MeshSample` holds one sample's LR and HR triangle-mesh graphs, normalised positions and
fields, padded to fixed node and edge slots so that samples stack into batches;
:func:`mesh_sample` builds one from numpy meshes with SuperMeshNet's normalisation and
:func:`triangle_edges` gives a mesh's directed edges. Host-side builders (numpy checks).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from jaxpapers.core import checks, pytree
from jaxpapers.graph._types import Graph

__all__ = ["MeshSample", "triangle_edges", "mesh_sample", "stack_samples"]


@pytree.dataclass
class MeshSample:
    """One LR / HR sample, padded (unbatched; a batch adds a leading axis B to every array).

    Letters: N_L and N_H LR and HR node slots, E_L and E_H edge slots. Real nodes come first (the
    builder's layout; any layout works if the masks say so). Padded slots hold finite values
    (the builder writes 0) and are ignored everywhere.

    Attributes:
      lr_graph: the LR mesh graph, N_L nodes, E_L edge slots (``lr_graph.node_mask`` marks real
        LR nodes).
      lr_pos: [N_L, 2] normalised LR positions.
      lr_y: [N_L] normalised LR field.
      hr_graph: the HR mesh graph, N_H nodes, E_H edge slots.
      hr_pos: [N_H, 2] normalised HR positions.
      hr_y: [N_H] normalised HR target (0 for an LR-only sample).
      y_min: [] the LR field's minimum (field = y_min + y_range * normalised field).
      y_range: [] the LR field's range.
    """

    lr_graph: Graph
    lr_pos: jax.Array  # [N_L, 2]
    lr_y: jax.Array  # [N_L]
    hr_graph: Graph
    hr_pos: jax.Array  # [N_H, 2]
    hr_y: jax.Array  # [N_H]
    y_min: jax.Array  # []
    y_range: jax.Array  # []

    @property
    def lr_mask(self) -> jax.Array:
        """[N_L] bool real LR nodes."""
        return self.lr_graph.node_mask

    @property
    def hr_mask(self) -> jax.Array:
        """[N_H] bool real HR nodes."""
        return self.hr_graph.node_mask


# --------------------------------------------------------------------------- building samples


def triangle_edges(triangles: ArrayLike, *, dedupe: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Directed edges of a triangle mesh: ``(0,1), (1,2), (2,0), (1,0), (2,1), (0,2)`` per triangle.

    Host-side numpy. Without ``dedupe`` an interior edge shared by two triangles appears twice in
    each direction, as in the release's ``utils/dataset.py`` (which concatenates the six edge
    lists without coalescing), so the sum aggregation counts it twice; ``dedupe`` keeps one copy
    of each directed edge (PyG's ``FaceToEdge``).

    Args:
      triangles: [T, 3] integer vertex ids.
      dedupe: drop repeated directed edges.

    Returns:
      ``(senders, receivers)``, int32 arrays of 6T (or fewer, deduplicated) entries.

    >>> s, r = triangle_edges([[0, 1, 2], [1, 3, 2]])
    >>> len(s), len(triangle_edges([[0, 1, 2], [1, 3, 2]], dedupe=True)[0])
    (12, 10)
    """
    t = np.asarray(triangles)
    pairs = [(0, 1), (1, 2), (2, 0), (1, 0), (2, 1), (0, 2)]
    s = np.concatenate([t[:, a] for a, _ in pairs]).astype(np.int32)
    r = np.concatenate([t[:, b] for _, b in pairs]).astype(np.int32)
    if dedupe:
        _, first = np.unique(np.stack([s, r], 1), axis=0, return_index=True)
        keep = np.sort(first)
        s, r = s[keep], r[keep]
    return s, r


def _check_mesh(prefix: str, points, triangles, field, need_field: bool):
    pts = np.asarray(points, np.float64)
    if pts.ndim != 2 or pts.shape[1] != 2 or pts.shape[0] < 1:
        raise ValueError(f"{prefix}_points must have shape [N, 2] with N >= 1, got {pts.shape}")
    if not np.all(np.isfinite(pts)):
        raise ValueError(f"{prefix}_points holds NaN or inf values; expected finite positions")
    span = pts.max(0) - pts.min(0)
    if np.any(span <= 0):
        raise ValueError(f"{prefix}_points must span a positive range along both axes (min-max "
                         f"normalisation), got ranges {span.tolist()}")
    tri = np.asarray(triangles)
    if tri.ndim != 2 or tri.shape[1] != 3 or not np.issubdtype(tri.dtype, np.integer):
        raise ValueError(f"{prefix}_triangles must be an integer array [T, 3], got shape "
                         f"{tri.shape} dtype {tri.dtype}")
    n = pts.shape[0]
    if tri.size and (tri.min() < 0 or tri.max() >= n):
        raise ValueError(f"{prefix}_triangles must hold vertex ids in [0, {n}) (the number of "
                         f"{prefix}_points), got ids in [{tri.min()}, {tri.max()}]")
    if field is None:
        if need_field:
            raise ValueError(f"{prefix}_field is required")
        return pts, tri, None
    y = np.asarray(field, np.float64)
    if y.ndim == 2 and y.shape[1] == 1:
        y = y[:, 0]
    if y.shape != (n,):
        raise ValueError(f"{prefix}_field must have shape [N] = ({n},) (one value per "
                         f"{prefix}_points row), got {y.shape}")
    if not np.all(np.isfinite(y)):
        raise ValueError(f"{prefix}_field holds NaN or inf values; expected finite values")
    return pts, tri, y


def _slots(name: str, value, need: int) -> int:
    if value is None:
        return need
    value = checks.check_int(name, value, minimum=1)
    if value < need:
        raise ValueError(f"{name} must be >= {need} (what this mesh needs), got {value}")
    return value


def mesh_sample(lr_points: ArrayLike, lr_triangles: ArrayLike, lr_field: ArrayLike,
                hr_points: ArrayLike, hr_triangles: ArrayLike, hr_field: ArrayLike | None = None,
                *, max_lr_nodes: int | None = None, max_lr_edges: int | None = None,
                max_hr_nodes: int | None = None, max_hr_edges: int | None = None,
                dedupe_edges: bool = False) -> MeshSample:
    """A padded :class:`MeshSample` from numpy meshes, normalised as the release does.

    Host-side (numpy checks, not traceable). Positions: ``(p - min) / (max - min)`` per sample
    (LR and HR meshes separately) and axis. Fields: ``(y - min y^L) / (max y^L - min y^L)`` for
    both the LR field and the HR target (release ``utils/dataset.py``). Edges:
    :func:`triangle_edges`.
    Arrays get jax's default float dtype (float32, or float64 under ``jax.enable_x64``).

    Args:
      lr_points: [n_L, 2] LR vertex positions.
      lr_triangles: [T_L, 3] LR triangles (vertex ids).
      lr_field: [n_L] LR field (finite, not constant).
      hr_points: [n_H, 2] HR vertex positions.
      hr_triangles: [T_H, 3] HR triangles.
      hr_field: [n_H] HR target, or None for an LR-only sample (stored as zeros).
      max_lr_nodes, max_lr_edges, max_hr_nodes, max_hr_edges: slot counts after padding (>= what
        the mesh needs; the exact need when None). Samples stack only with equal slot counts.
      dedupe_edges: keep one copy of each directed edge (default: the release's duplicates).

    Returns:
      The sample; real nodes and edges first, padded slots zero and masked off.

    Raises:
      ValueError: naming the argument: points not [N, 2], not finite or flat along an axis;
        triangles not integer [T, 3] or with an id outside ``[0, N)``; a field whose length is
        not N, with NaN or inf, or (LR) constant; a ``max_*`` below the need.

    >>> import numpy as np
    >>> pts = np.array([[0.0, 0.0], [2.0, 0.0], [0.0, 1.0], [2.0, 1.0]])
    >>> tri = np.array([[0, 1, 2], [1, 3, 2]])
    >>> s = mesh_sample(pts, tri, [0.0, 1.0, 2.0, 4.0], pts, tri, [1.0, 1.0, 1.0, 1.0],
    ...                 max_hr_nodes=6)
    >>> s.lr_pos[1].tolist(), s.lr_y.tolist(), s.hr_mask.tolist()
    ([1.0, 0.0], [0.0, 0.25, 0.5, 1.0], [True, True, True, True, False, False])
    """
    checks.check_bool("dedupe_edges", dedupe_edges)
    lp, lt, ly = _check_mesh("lr", lr_points, lr_triangles, lr_field, True)
    hp, ht, hy = _check_mesh("hr", hr_points, hr_triangles, hr_field, False)
    y_min, y_max = float(ly.min()), float(ly.max())
    if y_max <= y_min:
        raise ValueError(f"lr_field must not be constant (its range scales both fields), got "
                         f"every value {y_min}")
    y_range = y_max - y_min
    dtype = jnp.result_type(float)

    def side(prefix, pts, tri, y, max_nodes, max_edges):
        n = pts.shape[0]
        s, r = triangle_edges(tri, dedupe=dedupe_edges)
        slots_n = _slots(f"max_{prefix}_nodes", max_nodes, n)
        slots_e = _slots(f"max_{prefix}_edges", max_edges, max(len(s), 1))
        lo, hi = pts.min(0), pts.max(0)
        pos = np.zeros((slots_n, 2))
        pos[:n] = (pts - lo) / (hi - lo)
        val = np.zeros(slots_n)
        if y is not None:
            val[:n] = (y - y_min) / y_range
        # numpy, then one transfer per array (from_edges's eager jnp ops would compile per shape;
        # so would jnp.asarray, which stages a program per shape and dtype: device_put does not)
        pad = slots_e - len(s)
        graph = Graph(_put(np.pad(s, (0, pad)), np.int32), _put(np.pad(r, (0, pad)), np.int32),
                      _put(np.arange(slots_e) < len(s)), _put(np.arange(slots_n) < n), slots_n)
        return graph, _put(pos, dtype), _put(val, dtype)

    lg, lpos, lyv = side("lr", lp, lt, ly, max_lr_nodes, max_lr_edges)
    hg, hpos, hyv = side("hr", hp, ht, hy, max_hr_nodes, max_hr_edges)
    return MeshSample(lg, lpos, lyv, hg, hpos, hyv, _put(y_min, dtype), _put(y_range, dtype))


def _put(x: Any, dtype: Any = None) -> jax.Array:
    """A host value on the default device (converted by numpy), compiling nothing."""
    return jax.device_put(np.asarray(x, dtype))


def stack_samples(samples: Sequence[MeshSample]) -> MeshSample:
    """Stack same-size samples into a batch (every array field gains a leading axis B).

    Host-side for concrete samples (numpy stacking, one transfer per field); also traceable.

    Raises:
      ValueError: ``samples`` is empty or its samples differ in node or edge slots.
    """
    samples = list(samples)
    if not samples:
        raise ValueError("samples must hold at least one MeshSample, got none")
    shapes = {tuple((x.shape for x in jax.tree.leaves(s))) for s in samples}
    defs = {jax.tree.structure(s) for s in samples}
    if len(shapes) > 1 or len(defs) > 1:
        raise ValueError("samples must share node and edge slot counts to stack; build them with "
                         "the same max_lr_nodes / max_lr_edges / max_hr_nodes / max_hr_edges")
    if checks.is_concrete(samples):  # on the host: eager jnp.stack would compile per shape
        return jax.tree.map(lambda *xs: _put(np.stack([np.asarray(x) for x in xs])), *samples)
    return jax.tree.map(lambda *xs: jnp.stack(xs), *samples)


def _check_sample(sample: Any, name: str) -> MeshSample:
    """Static shape checks of one unbatched sample (also under jit / vmap)."""
    if not isinstance(sample, MeshSample):
        raise ValueError(f"{name} must be a MeshSample, got {type(sample).__name__}")
    for side in ("lr", "hr"):
        n = getattr(sample, f"{side}_graph").num_nodes
        pos, y = getattr(sample, f"{side}_pos"), getattr(sample, f"{side}_y")
        if jnp.shape(pos) != (n, 2):
            raise ValueError(f"{name}.{side}_pos must have shape [N, 2] = ({n}, 2) (the "
                             f"{side}_graph's node slots), got {jnp.shape(pos)}")
        if jnp.shape(y) != (n,):
            raise ValueError(f"{name}.{side}_y must have shape [N] = ({n},) (the {side}_graph's "
                             f"node slots), got {jnp.shape(y)}")
    return sample
