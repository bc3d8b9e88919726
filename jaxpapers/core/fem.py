"""P1 finite elements on triangle meshes, and the SuperMeshNet plate datasets (host-side numpy).

Everything here is float64 numpy on the host; nothing is jitted. The solvers (:func:`solve_laplace`,
:func:`solve_elasticity`) and post-processing (:func:`grad_magnitude`, :func:`von_mises`,
:func:`cell_to_vertex`) need only numpy and scipy. Building the plate meshes (:func:`plate_mesh`,
:func:`plate_sample`, :func:`plate_dataset`) needs scikit-fem, imported inside those functions.

Units: SI throughout, lengths in **metres** (the 250 x 500 mm plate is ``[0, 0.25] x [0, 0.5]``),
stresses and tractions in Pa. Stresses do not depend on the length unit; |grad u| scales as
1/length, which the release's per-sample min-max normalisation removes.

The plate (SuperMeshNet, ``data/fenicisx``): six holes centred at x in {80, 170} mm, y in
{150, 250, 350} mm, circles of radius 25 mm or same-area ellipses (semi-axes r1 along x, r2 =
25^2 / r1 along y). Three datasets (:data:`KINDS`):

* ``"angle"``: circular holes, bottom edge clamped, traction 100 MPa at angle theta (degrees, drawn
  from U[40, 140)) on the top edge; target: von Mises stress at the vertices. One mesh per
  resolution for all samples.
* ``"geometry"``: elliptic holes with r1 ~ U[25, 40] mm, theta = 90 degrees; target as above.
* ``"poisson"`` (alias ``"laplace"``): -Laplace(u) = 0, u = 0 on the outer edges, u = -1 on the
  holes at (80, 150), (170, 250), (80, 350) mm and +1 on the other three; r1 ~ U[25, 40] mm;
  target: |grad u| at the vertices.

Deviations from the release (which meshes with gmsh and solves with FEniCSx 0.10):

* meshes come from scikit-fem: a regular right-triangle grid of spacing ``h``, refined near the
  holes, holes cut out and their boundary nodes moved onto the curve (see :func:`plate_mesh`);
  node counts therefore differ from gmsh's.
* cell values are moved to vertices by an area-weighted average of the containing cells
  (:func:`cell_to_vertex`); the release reads one arbitrary containing cell.
* the release draws theta on the grid 40 + 0.1 n degrees; here theta ~ U[40, 140) from the seed.

Kept quirks of the release (arguments, defaults as released): the constitutive law uses
lambda = 1.25 Pa, a leftover variable (the material then behaves as nu ~ 0), and "von Mises" is
sqrt(3/2 s:s) with the 2-D deviator s = sigma - tr(sigma)/3 I_2 (see :func:`von_mises`).
"""

from __future__ import annotations

import numpy as np

from jaxpapers.core._fem_plate import (HOLE_CENTRES, HR, KINDS, LR, PLATE_HEIGHT, PLATE_WIDTH,
                                       MeshField, MeshSize, PlateDataset, PlateMesh,
                                       plate_dataset, plate_mesh, plate_sample)

__all__ = ["solve_laplace", "grad_magnitude", "solve_elasticity", "von_mises", "cell_to_vertex",
           "p1_gradients", "plate_mesh", "plate_sample", "plate_dataset", "PlateMesh",
           "MeshField", "PlateDataset", "MeshSize", "LR", "HR", "KINDS", "HOLE_CENTRES",
           "PLATE_WIDTH", "PLATE_HEIGHT", "VON_MISES_FORMULAS"]

VON_MISES_FORMULAS = ("release", "plane_stress")


# ----------------------------------------------------------------------------------- checks
def _check_mesh(points, triangles) -> tuple[np.ndarray, np.ndarray]:
    """float64 [N, 2] points, int64 [T, 3] in-range non-degenerate triangles (else ValueError)."""
    p = np.asarray(points)
    if p.ndim != 2 or p.shape[1] != 2 or p.shape[0] < 3:
        raise ValueError(f"points must have shape [N, 2] with N >= 3, got shape {p.shape}")
    if p.dtype.kind not in "biuf":
        raise TypeError(f"points must be real numbers, got dtype {p.dtype}")
    p = p.astype(np.float64)
    if not np.all(np.isfinite(p)):
        raise ValueError("points holds NaN or inf values; expected finite values")
    t = np.asarray(triangles)
    if t.ndim != 2 or t.shape[1] != 3 or t.shape[0] < 1:
        raise ValueError(f"triangles must have shape [T, 3] with T >= 1, got shape {t.shape}")
    if t.dtype.kind not in "iu":
        raise TypeError(f"triangles must be integers, got dtype {t.dtype}")
    t = t.astype(np.int64)
    if t.min() < 0 or t.max() >= len(p):
        raise ValueError(f"triangles must index points in [0, {len(p)}), got indices in "
                         f"[{t.min()}, {t.max()}]")
    e1, e2 = p[t[:, 1]] - p[t[:, 0]], p[t[:, 2]] - p[t[:, 0]]
    det = np.abs(e1[:, 0] * e2[:, 1] - e1[:, 1] * e2[:, 0])
    scale = np.sum(e1 ** 2, 1) + np.sum(e2 ** 2, 1)
    if np.any(det <= 1e-12 * scale):
        raise ValueError(f"triangles holds {int(np.sum(det <= 1e-12 * scale))} degenerate "
                         f"(zero-area) triangles, e.g. row {int(np.argmax(det <= 1e-12 * scale))}")
    return p, t


def _check_nodes(name: str, nodes, num_points: int) -> np.ndarray:
    v = np.asarray(nodes)
    if v.ndim != 1:
        raise ValueError(f"{name} must have shape [K], got shape {v.shape}")
    if v.size and v.dtype.kind not in "iu":
        raise TypeError(f"{name} must be integers, got dtype {v.dtype}")
    v = v.astype(np.int64)
    if v.size and (v.min() < 0 or v.max() >= num_points):
        raise ValueError(f"{name} must index points in [0, {num_points}), got indices in "
                         f"[{v.min()}, {v.max()}]")
    return v


def _check_vertex_field(name: str, values, num_points: int) -> np.ndarray:
    v = np.asarray(values)
    if v.shape != (num_points,):
        raise ValueError(f"{name} must have shape [N] = ({num_points},), got shape {v.shape}")
    if v.dtype.kind not in "biuf":
        raise TypeError(f"{name} must be real numbers, got dtype {v.dtype}")
    if not np.all(np.isfinite(v)):
        raise ValueError(f"{name} holds NaN or inf values; expected finite values")
    return v.astype(np.float64)


def _components(num_points: int, t: np.ndarray) -> np.ndarray:
    """[N] connected-component label of each vertex (edges of the triangles)."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    i, j = t[:, [0, 1, 2]].ravel(), t[:, [1, 2, 0]].ravel()
    graph = coo_matrix((np.ones(len(i)), (i, j)), shape=(num_points, num_points))
    return connected_components(graph, directed=False)[1]


def _require_fixed(name: str, fixed: np.ndarray, num_points: int, t: np.ndarray,
                   at_least: int) -> None:
    """Each connected part of the mesh holds >= ``at_least`` distinct fixed nodes, else singular."""
    unused = num_points - len(np.unique(t))
    if unused:
        raise ValueError(f"points holds {unused} vertices in no triangle (their rows of the "
                         f"system would be empty); remove them")
    labels = _components(num_points, t)
    counts = np.bincount(labels[np.unique(fixed)], minlength=labels.max() + 1)
    short = np.nonzero(counts < at_least)[0]
    if short.size:
        raise ValueError(f"{name}: {short.size} connected part(s) of the mesh hold fewer than "
                         f"{at_least} of them, so the system is singular")


# ----------------------------------------------------------------------------------- P1 basics
def p1_gradients(points, triangles) -> tuple[np.ndarray, np.ndarray]:
    """Areas and constant gradients of the P1 hat functions on each triangle.

    With J = [p1 - p0, p2 - p0] the barycentric coordinates are lambda_{1,2} = J^{-1} (x - p0),
    lambda_0 = 1 - lambda_1 - lambda_2, so grad lambda_{1,2} are the rows of J^{-1}.

    Args:
      points: [N, 2] float vertex coordinates.
      triangles: [T, 3] int vertex indices (either orientation).

    Returns:
      ``(area, grads)``: [T] areas (positive) and [T, 3, 2] gradients, ``grads[t, i]`` being
      grad lambda_i on triangle t.

    >>> area, g = p1_gradients(np.array([[0., 0.], [1., 0.], [0., 1.]]), np.array([[0, 1, 2]]))
    >>> area.tolist(), (g[0] + 0.0).tolist()
    ([0.5], [[-1.0, -1.0], [1.0, 0.0], [0.0, 1.0]])
    """
    p, t = _check_mesh(points, triangles)
    return _gradients(p, t)


def _gradients(p: np.ndarray, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    jac = np.stack([p[t[:, 1]] - p[t[:, 0]], p[t[:, 2]] - p[t[:, 0]]], axis=-1)  # [T, 2, 2]
    det = jac[:, 0, 0] * jac[:, 1, 1] - jac[:, 0, 1] * jac[:, 1, 0]
    inv = np.stack([np.stack([jac[:, 1, 1], -jac[:, 0, 1]], -1),
                    np.stack([-jac[:, 1, 0], jac[:, 0, 0]], -1)], 1) / det[:, None, None]
    grads = np.concatenate([-inv.sum(1, keepdims=True), inv], axis=1)  # [T, 3, 2]
    return 0.5 * np.abs(det), grads


def _assemble(local: np.ndarray, dofs: np.ndarray, size: int):
    """Sum [T, D, D] element matrices into a CSR [size, size] matrix at element dofs [T, D]."""
    from scipy.sparse import coo_matrix

    rows = np.broadcast_to(dofs[:, :, None], local.shape).ravel()
    cols = np.broadcast_to(dofs[:, None, :], local.shape).ravel()
    return coo_matrix((local.ravel(), (rows, cols)), shape=(size, size)).tocsr()


# ----------------------------------------------------------------------------------- Laplace
def solve_laplace(points, triangles, dirichlet_nodes, dirichlet_values) -> np.ndarray:
    """P1 finite-element solution of -Laplace(u) = 0 with Dirichlet values at given nodes.

    Finds u in the P1 space with u = g at ``dirichlet_nodes`` and
    sum_t area_t grad u . grad phi_i = 0 for every other node i (homogeneous Neumann elsewhere).

    Args:
      points: [N, 2] float vertex coordinates.
      triangles: [T, 3] int vertex indices in [0, N).
      dirichlet_nodes: [K] int node indices (repeats allowed only with equal values).
      dirichlet_values: [K] float values g, or a scalar used for all K nodes.

    Returns:
      [N] float64 nodal values of u.

    >>> pts = np.array([[0., 0.], [1., 0.], [1., 1.], [0., 1.], [.5, .5]])
    >>> tri = np.array([[0, 1, 4], [1, 2, 4], [2, 3, 4], [3, 0, 4]])
    >>> u = solve_laplace(pts, tri, np.array([0, 1, 2, 3]), np.array([0., 1., 2., 1.]))
    >>> float(np.round(u[4], 12))  # u = x + y is discretely harmonic
    1.0
    """
    p, t = _check_mesh(points, triangles)
    n = len(p)
    nodes = _check_nodes("dirichlet_nodes", dirichlet_nodes, n)
    vals = np.asarray(dirichlet_values)
    if vals.ndim == 0:
        vals = np.full(len(nodes), vals)
    if vals.shape != nodes.shape:
        raise ValueError(f"dirichlet_values must be a scalar or have the shape of dirichlet_nodes "
                         f"{nodes.shape}, got shape {vals.shape}")
    if vals.dtype.kind not in "biuf":
        raise TypeError(f"dirichlet_values must be real numbers, got dtype {vals.dtype}")
    vals = vals.astype(np.float64)
    if not np.all(np.isfinite(vals)):
        raise ValueError("dirichlet_values holds NaN or inf values; expected finite values")
    if nodes.size == 0:
        raise ValueError("dirichlet_nodes must not be empty (the pure Neumann problem is singular)")
    order = np.argsort(nodes, kind="stable")
    nodes, vals = nodes[order], vals[order]
    first = np.r_[True, nodes[1:] != nodes[:-1]]
    if np.any(vals[~first] != vals[np.cumsum(first)[~first] - 1]):
        raise ValueError("dirichlet_nodes repeats a node with different dirichlet_values")
    nodes, vals = nodes[first], vals[first]
    _require_fixed("dirichlet_nodes", nodes, n, t, 1)
    area, g = _gradients(p, t)
    stiff = _assemble(area[:, None, None] * np.einsum("tia,tja->tij", g, g), t, n)
    return _solve_constrained(stiff, nodes, vals, np.zeros(n))


def _solve_constrained(stiff, fixed: np.ndarray, fixed_vals: np.ndarray, load: np.ndarray):
    """Solve K u = f with u[fixed] = fixed_vals; ``load`` is [D] or [D, K] (several right sides)."""
    from scipy.sparse.linalg import splu

    size = stiff.shape[0]
    free = np.setdiff1d(np.arange(size), fixed)
    u = np.zeros((size,) + load.shape[1:])
    u[fixed] = fixed_vals.reshape((len(fixed),) + (1,) * (load.ndim - 1))
    if free.size:
        k_ff = stiff[free][:, free].tocsc()
        rhs = load[free] - stiff[free][:, fixed] @ u[fixed]
        u[free] = splu(k_ff).solve(rhs)
    return u


def grad_magnitude(points, triangles, u) -> np.ndarray:
    """Per-cell |grad u| of a P1 field (constant on each triangle).

    Args:
      points: [N, 2]. triangles: [T, 3]. u: [N] nodal values.

    Returns:
      [T] float64 |sum_i u_i grad lambda_i| on each triangle.

    >>> pts = np.array([[0., 0.], [1., 0.], [0., 1.]])
    >>> grad_magnitude(pts, np.array([[0, 1, 2]]), 3 * pts[:, 0] + 4 * pts[:, 1]).tolist()
    [5.0]
    """
    p, t = _check_mesh(points, triangles)
    u = _check_vertex_field("u", u, len(p))
    _, g = _gradients(p, t)
    return np.linalg.norm(np.einsum("ti,tia->ta", u[t], g), axis=-1)


# ----------------------------------------------------------------------------------- elasticity
def solve_elasticity(points, triangles, *, clamped_nodes, traction_edges, traction,
                     E: float = 210e9, nu: float = 0.3,
                     lam: float | None = 1.25) -> tuple[np.ndarray, np.ndarray]:
    """Plane linear elasticity with P1 elements: clamped nodes, a uniform traction on some edges.

    Finds u with u = 0 at ``clamped_nodes`` and
    sum_t area_t sigma(u) : eps(v) = sum_{edges e} |e| traction . (v_a + v_b) / 2 for all v, where
    eps(u) = (grad u + grad u^T) / 2 and sigma = lam tr(eps) I_2 + 2 mu eps, mu = E / (2 (1 + nu)).

    ``lam`` defaults to the release's 1.25 Pa (a leftover variable ``beta`` in the FEniCSx
    notebooks; the Lame lambda they compute is unused), which makes the material behave as
    nu ~ 0 (lam / mu ~ 1.5e-11). ``lam=None`` uses the plane-strain Lame constant
    E nu / ((1 + nu) (1 - 2 nu)).

    Args:
      points: [N, 2] vertex coordinates (m).
      triangles: [T, 3] vertex indices.
      clamped_nodes: [C] node indices with u = 0 (both components).
      traction_edges: [B, 2] boundary edges (node pairs) carrying the traction.
      traction: [2] traction vector (Pa), or [K, 2] for K load cases sharing one factorisation.
      E: Young's modulus (Pa). nu: Poisson's ratio in [0, 0.5); it enters through mu (and
        through lam when ``lam`` is None).
      lam: first Lame parameter (Pa), or None (see above).

    Returns:
      ``(displacement, stress)``: [N, 2] nodal displacements (m) and [T, 2, 2] per-cell stress
      (Pa); with a [K, 2] traction, [K, N, 2] and [K, T, 2, 2].

    >>> pts = np.array([[0., 0.], [1., 0.], [1., 1.], [0., 1.]])
    >>> u, s = solve_elasticity(pts, np.array([[0, 1, 2], [0, 2, 3]]), clamped_nodes=[0, 1],
    ...                         traction_edges=np.array([[2, 3]]), traction=[0., 1e6], lam=0.0)
    >>> (np.round(s / 1e6, 9) + 0.0).tolist()  # uniaxial: sigma_yy = traction in every cell
    [[[0.0, 0.0], [0.0, 1.0]], [[0.0, 0.0], [0.0, 1.0]]]
    """
    p, t = _check_mesh(points, triangles)
    n = len(p)
    clamped = np.unique(_check_nodes("clamped_nodes", clamped_nodes, n))
    edges = np.asarray(traction_edges)
    if edges.ndim != 2 or edges.shape[1] != 2:
        raise ValueError(f"traction_edges must have shape [B, 2], got shape {edges.shape}")
    edges = _check_nodes("traction_edges", edges.ravel(), n).reshape(-1, 2)
    trac = np.asarray(traction)
    if trac.shape[-1:] != (2,) or trac.ndim not in (1, 2):
        raise ValueError(f"traction must have shape [2] or [K, 2], got shape {trac.shape}")
    if trac.dtype.kind not in "biuf" or not np.all(np.isfinite(trac)):
        raise ValueError("traction must hold finite real numbers")
    for name, value, low in (("E", E, 0.0), ("nu", nu, None)):
        if not np.isfinite(value) or (low is not None and value <= low):
            raise ValueError(f"{name} must be finite{' and > 0' if low is not None else ''}, "
                             f"got {value!r}")
    if not -1.0 < nu < 0.5:
        raise ValueError(f"nu must lie in (-1, 0.5), got {nu!r}")
    mu = E / (2.0 * (1.0 + nu))
    lam = E * nu / ((1.0 + nu) * (1.0 - 2.0 * nu)) if lam is None else float(lam)
    if not np.isfinite(lam):
        raise ValueError(f"lam must be finite or None, got {lam!r}")
    if clamped.size == 0:
        raise ValueError("clamped_nodes must not be empty (the problem is singular)")
    _require_fixed("clamped_nodes", clamped, n, t, 2)

    area, g = _gradients(p, t)
    bmat = np.zeros((len(t), 3, 6))  # Voigt [eps_xx, eps_yy, 2 eps_xy] from dofs (x0, y0, x1, ...)
    bmat[:, 0, 0::2], bmat[:, 1, 1::2] = g[:, :, 0], g[:, :, 1]
    bmat[:, 2, 0::2], bmat[:, 2, 1::2] = g[:, :, 1], g[:, :, 0]
    dmat = np.array([[lam + 2 * mu, lam, 0.0], [lam, lam + 2 * mu, 0.0], [0.0, 0.0, mu]])
    local = area[:, None, None] * np.einsum("tki,kl,tlj->tij", bmat, dmat, bmat)
    dofs = np.stack([2 * t, 2 * t + 1], -1).reshape(-1, 6)
    stiff = _assemble(local, dofs, 2 * n)

    cases = np.atleast_2d(trac).astype(np.float64)  # [K, 2]
    length = np.linalg.norm(p[edges[:, 1]] - p[edges[:, 0]], axis=1)
    load = np.zeros((2 * n, len(cases)))
    for c in range(2):
        w = np.repeat(0.5 * length, 2)  # each end node carries half the edge
        np.add.at(load, 2 * edges.ravel() + c, w[:, None] * cases[None, :, c])
    fixed = np.sort(np.concatenate([2 * clamped, 2 * clamped + 1]))
    u = _solve_constrained(stiff, fixed, np.zeros(len(fixed)), load)  # [2N, K]
    disp = u.T.reshape(len(cases), n, 2)
    grad_u = np.einsum("ktia,tib->ktab", disp[:, t], g)  # [K, T, 2, 2], d u_a / d x_b
    eps = 0.5 * (grad_u + np.swapaxes(grad_u, -1, -2))
    stress = 2.0 * mu * eps + lam * np.trace(eps, axis1=-2, axis2=-1)[..., None, None] * np.eye(2)
    return (disp[0], stress[0]) if trac.ndim == 1 else (disp, stress)


def von_mises(stress, *, formula: str = "release") -> np.ndarray:
    """Von Mises equivalent stress of 2-D stress tensors.

    ``formula="release"`` (SuperMeshNet's): sqrt(3/2 s:s) with s = sigma - tr(sigma)/3 I_2, the
    deviator taken with a 3 in a 2-D trace; under uniaxial stress diag(a, 0) this equals
    sqrt(5/6) |a|, not |a|. ``formula="plane_stress"``: the standard plane-stress value
    sqrt(s_xx^2 - s_xx s_yy + s_yy^2 + 3 s_xy^2) (sigma_zz = 0), equal to |a| under uniaxial stress.

    Args:
      stress: [..., 2, 2] stress tensors (symmetric).
      formula: one of :data:`VON_MISES_FORMULAS`.

    Returns:
      [...] float64 von Mises stresses.

    >>> sigma = np.diag([6.0, 0.0])  # uniaxial
    >>> float(von_mises(sigma) ** 2), float(von_mises(sigma, formula="plane_stress"))
    (30.0, 6.0)
    """
    if formula not in VON_MISES_FORMULAS:
        raise ValueError(f"formula must be one of {VON_MISES_FORMULAS}, got {formula!r}")
    s = np.asarray(stress)
    if s.shape[-2:] != (2, 2):
        raise ValueError(f"stress must have shape [..., 2, 2], got shape {s.shape}")
    if s.dtype.kind not in "biuf" or not np.all(np.isfinite(s)):
        raise ValueError("stress must hold finite real numbers")
    s = s.astype(np.float64)
    sxx, syy, sxy = s[..., 0, 0], s[..., 1, 1], 0.5 * (s[..., 0, 1] + s[..., 1, 0])
    if formula == "plane_stress":
        return np.sqrt(sxx ** 2 - sxx * syy + syy ** 2 + 3.0 * sxy ** 2)
    dev = s - (sxx + syy)[..., None, None] / 3.0 * np.eye(2)
    return np.sqrt(1.5 * np.sum(dev ** 2, axis=(-2, -1)))


def cell_to_vertex(points, triangles, cell_values) -> np.ndarray:
    """Area-weighted average, at each vertex, of the values of the cells containing it.

    v_i = sum_{t ∋ i} area_t c_t / sum_{t ∋ i} area_t. Exact for a constant; for a linear field
    sampled at centroids it is exact at a vertex whose patch is point-symmetric about it (the
    area-weighted mean of the centroids is then the vertex). The release instead reads one
    arbitrary containing cell.

    Args:
      points: [N, 2]. triangles: [T, 3]; every vertex must belong to a triangle.
      cell_values: [T] or [T, ...] per-cell values.

    Returns:
      [N] (or [N, ...]) float64 vertex values.

    >>> pts = np.array([[0., 0.], [1., 0.], [1., 1.], [0., 1.]])
    >>> cell_to_vertex(pts, np.array([[0, 1, 2], [0, 2, 3]]), np.array([1.0, 3.0])).tolist()
    [2.0, 1.0, 2.0, 3.0]
    """
    p, t = _check_mesh(points, triangles)
    c = np.asarray(cell_values)
    if c.ndim < 1 or c.shape[0] != len(t):
        raise ValueError(f"cell_values must have shape [T, ...] with T = {len(t)}, got shape "
                         f"{c.shape}")
    if c.dtype.kind not in "biuf" or not np.all(np.isfinite(c)):
        raise ValueError("cell_values must hold finite real numbers")
    from scipy.sparse import coo_matrix

    area, _ = _gradients(p, t)
    weights = coo_matrix((np.repeat(area, 3), (t.ravel(), np.repeat(np.arange(len(t)), 3))),
                         shape=(len(p), len(t))).tocsr()
    total = np.asarray(weights.sum(axis=1)).ravel()
    if np.any(total == 0):
        raise ValueError(f"points holds {int(np.sum(total == 0))} vertices in no triangle")
    flat = c.reshape(len(t), -1).astype(np.float64)
    return (np.asarray(weights @ flat) / total[:, None]).reshape((len(p),) + c.shape[1:])
