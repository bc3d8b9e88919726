"""The SuperMeshNet plate: meshes (scikit-fem), samples and the cached datasets.

Public names are re-exported by :mod:`jaxpapers.core.fem`, whose docstring describes the data.
The solvers are imported from there inside the functions (``fem`` imports this module).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import pathlib
import tempfile
import warnings
from typing import NamedTuple

import numpy as np

PLATE_WIDTH, PLATE_HEIGHT = 0.25, 0.5  # m
HOLE_RADIUS = 0.025  # m; an ellipse keeps the area: r2 = HOLE_RADIUS**2 / r1
# (x, y) in m, row by row from the bottom: (80,150), (170,150), (80,250), (170,250), (80,350), ...
HOLE_CENTRES = np.array([(x, y) for y in (0.15, 0.25, 0.35) for x in (0.08, 0.17)])
POISSON_SIGNS = np.array([-1.0, 1.0, 1.0, -1.0, -1.0, 1.0])  # -1 at (80,150), (170,250), (80,350)
HOLE_CENTRES.flags.writeable = POISSON_SIGNS.flags.writeable = False
KINDS = ("angle", "geometry", "poisson")
_ALIASES = {"laplace": "poisson"}
ANGLE_RANGE = (40.0, 140.0)  # degrees, theta ~ U[40, 140)
R1_RANGE = (0.025, 0.040)  # m, r1 ~ U[25, 40] mm
_FORMAT = 1  # bump when the meshes, solvers or file layout change
_PRESNAP = 0.3  # nodes closer than this many local sizes to a hole are put on it before the cut
_MIN_QUALITY = 0.3  # boundary snapping backs off where a triangle's quality would drop below this


class MeshSize(NamedTuple):
    """Mesh resolution: grid spacing ``h`` (m), target size ``h_hole`` (m) at the holes, and
    ``band``: also refine cells within ``band`` local sizes of a hole (0: only cells it crosses)."""

    h: float
    h_hole: float
    band: float = 0.0


LR = MeshSize(0.04, 0.016)  # the release's 40 mm / 16 mm; here 40 mm / 20 mm at the holes
HR = MeshSize(0.01, 0.004)  # the release's 10 mm / 4 mm; here 10 mm / 5 mm at the holes


@dataclasses.dataclass(frozen=True)
class PlateMesh:
    """A plate mesh with its boundary node sets (all indices into ``points``; arrays sorted).

    Attributes:
      points: [N, 2] float64 vertex coordinates (m). triangles: [T, 3] int64, counter-clockwise.
      bottom, top: node indices on y = 0 and y = 0.5 m. outer: nodes on the four outer edges.
      holes: six [H_k] node arrays, one per hole in the order of :data:`HOLE_CENTRES`.
      top_edges: [B, 2] boundary edges on y = 0.5 m (for the traction).
      r1, r2: the holes' semi-axes (m) along x and y.
    """

    points: np.ndarray
    triangles: np.ndarray
    bottom: np.ndarray
    top: np.ndarray
    outer: np.ndarray
    holes: tuple[np.ndarray, ...]
    top_edges: np.ndarray
    r1: float
    r2: float


@dataclasses.dataclass(frozen=True)
class MeshField:
    """A field on a mesh: points [N, 2] float64 (m), triangles [T, 3] int64, field [N] float64."""

    points: np.ndarray
    triangles: np.ndarray
    field: np.ndarray


@dataclasses.dataclass(frozen=True)
class PlateDataset:
    """S paired samples: ``params`` [S] (theta in degrees for "angle", r1 in m otherwise) and the
    low- and high-resolution :class:`MeshField` of each (``lr[i]``, ``hr[i]``). Mesh arrays are
    read-only; samples on one mesh ("angle") share them."""

    kind: str
    params: np.ndarray
    lr: tuple[MeshField, ...]
    hr: tuple[MeshField, ...]


# ----------------------------------------------------------------------------------- meshes
def _check_size(name: str, size) -> MeshSize:
    try:
        size = MeshSize(*size)
    except TypeError as e:
        raise TypeError(f"{name} must be a MeshSize(h, h_hole, band=0.0), got {size!r}") from e
    h, h_hole, band = (float(v) for v in size)
    if not (np.isfinite(h) and 0.0 < h <= PLATE_WIDTH):
        raise ValueError(f"{name}.h must lie in (0, {PLATE_WIDTH}] m, got {h!r}")
    if not (np.isfinite(h_hole) and 0.0 < h_hole <= h):
        raise ValueError(f"{name}.h_hole must lie in (0, h], got {h_hole!r}")
    if not (np.isfinite(band) and band >= 0.0):
        raise ValueError(f"{name}.band must be >= 0, got {band!r}")
    return MeshSize(h, h_hole, band)


def _scaled_radius(p: np.ndarray, r1: float, r2: float) -> np.ndarray:
    """[..., 6] rho = sqrt((dx / r1)^2 + (dy / r2)^2) to each hole centre (rho < 1: inside)."""
    d = p[..., None, :] - HOLE_CENTRES
    return np.sqrt((d[..., 0] / r1) ** 2 + (d[..., 1] / r2) ** 2)


def _project(p: np.ndarray, r1: float, r2: float) -> tuple[np.ndarray, np.ndarray]:
    """Nearest hole of each point [P, 2] and the nearest point on that hole's ellipse.

    The nearest point on an ellipse comes from a few steps of the evolute iteration (Luc
    Maranget's / "0xfaded"'s method), accurate to round-off near the curve.
    """
    d = p[:, None, :] - HOLE_CENTRES  # [P, 6, 2]
    sign, q = np.where(d < 0, -1.0, 1.0), np.abs(d)
    ax = np.array([r1, r2])
    u = np.full(q.shape, np.sqrt(0.5))  # (cos, sin) of the ellipse parameter, first quadrant
    evo = np.array([r1 * r1 - r2 * r2, r2 * r2 - r1 * r1]) / ax
    for _ in range(6):
        e = evo * u ** 3  # evolute point
        r = np.linalg.norm(ax * u - e, axis=-1, keepdims=True)
        v = q - e
        dist = np.maximum(np.linalg.norm(v, axis=-1, keepdims=True), 1e-300)
        u = np.clip((v * r / dist + e) / ax, 0.0, 1.0)
        u /= np.maximum(np.linalg.norm(u, axis=-1, keepdims=True), 1e-300)
    foot = HOLE_CENTRES + sign * ax * u  # [P, 6, 2]
    k = np.linalg.norm(p[:, None, :] - foot, axis=-1).argmin(-1)
    return k, foot[np.arange(len(p)), k]


def _signed_distance(p: np.ndarray, r1: float, r2: float,
                     reach: float) -> tuple[np.ndarray, np.ndarray]:
    """[P] signed distance to the nearest hole boundary (< 0 inside) and [P, 2] nearest points;
    +inf (and the point itself) where the distance provably exceeds ``reach``."""
    lower = np.linalg.norm(p[:, None] - HOLE_CENTRES, axis=-1).min(1) - max(r1, r2)
    cand = np.nonzero(lower <= reach)[0]
    dist, foot = np.full(len(p), np.inf), p.copy()
    _, foot[cand] = _project(p[cand], r1, r2)
    inside = (_scaled_radius(p[cand], r1, r2) < 1.0).any(-1)
    dist[cand] = np.where(inside, -1.0, 1.0) * np.linalg.norm(p[cand] - foot[cand], axis=1)
    return dist, foot


def _quality(p: np.ndarray, t: np.ndarray) -> np.ndarray:
    """[T] signed shape quality 4 sqrt(3) area / sum(edge^2): 1 equilateral, < 0 clockwise."""
    e1, e2 = p[t[:, 1]] - p[t[:, 0]], p[t[:, 2]] - p[t[:, 0]]
    det = e1[:, 0] * e2[:, 1] - e1[:, 1] * e2[:, 0]
    sq = sum(np.sum((p[t[:, (i + 1) % 3]] - p[t[:, i]]) ** 2, 1) for i in range(3))
    return 2.0 * np.sqrt(3.0) * det / sq


def _snap(p: np.ndarray, t: np.ndarray, nodes: np.ndarray, target: np.ndarray) -> np.ndarray:
    """Move ``nodes`` towards ``target``, halving the move of every node of a triangle whose
    quality would fall below min(_MIN_QUALITY, 0.9 x its quality before) or flip (then, after
    30 halvings, giving up on those nodes), so the result is always a valid mesh."""
    p = p.copy()
    q0 = _quality(p, t)
    start, frac = p[nodes].copy(), np.ones(len(nodes))
    for i in range(60):
        p[nodes] = start + frac[:, None] * (target - start)
        bad = np.sign(q0) * _quality(p, t) < np.minimum(_MIN_QUALITY, 0.9 * np.abs(q0))
        if not bad.any():
            return p
        touched = np.zeros(len(p), bool)
        touched[t[bad].ravel()] = True
        frac[touched[nodes]] *= 0.5 if i < 30 else 0.0
    raise RuntimeError("plate_mesh: snapping nodes to the holes did not converge")  # unreachable


def plate_mesh(size: MeshSize = LR, *, r1: float = HOLE_RADIUS,
               r2: float | None = None) -> PlateMesh:
    """The 250 x 500 mm plate with six circular or elliptic holes, as a P1 triangle mesh.

    Steps (deterministic; "local size" = leg length of the right triangles):
      1. ``MeshTri.init_tensor`` on a regular grid of ceil(0.25 / h) x ceil(0.5 / h) cells
         (spacing <= h: 35.7 x 38.5 mm for h = 40 mm);
      2. L = max(0, round(log2(h / h_hole))) times ``refined(marked)``, marked = the cells a hole
         boundary crosses (or within ``band`` local sizes of it), so the local size at the holes
         is h / 2^L, the power-of-two fraction of h nearest to h_hole in log scale;
      3. nodes within 0.3 h / 2^L of a hole are moved to the nearest point on it; cells with a
         vertex strictly inside a hole, or their centroid inside, are removed with
         ``remove_elements`` (which also drops the unused nodes);
      4. the remaining hole-boundary nodes are moved to the nearest point of their ellipse.
      Each move of steps 3-4 is halved (and after 30 halvings dropped) for the nodes of any
      triangle whose shape quality 4 sqrt(3) area / sum(edge^2) would fall below
      min(0.3, 0.9 x its quality before), so no triangle inverts; a few hole nodes (<= 25% per
      hole, measured) stay off the curve, by at most ~0.55 local sizes.

    With r1 = 25 mm: :data:`LR` gives 197 nodes / 308 triangles, :data:`HR` 1596 / 2848.

    Args:
      size: :class:`MeshSize` (h, h_hole, band) in m.
      r1: hole semi-axis along x (m). r2: along y (m); default HOLE_RADIUS**2 / r1 (same area).

    Returns:
      a :class:`PlateMesh`.

    >>> m = plate_mesh(LR)
    >>> m.points.shape, m.triangles.shape, [len(h) for h in m.holes]
    ((197, 2), (308, 3), [9, 10, 9, 9, 10, 9])
    """
    from skfem import MeshTri

    h, h_hole, band = _check_size("size", size)
    r1 = float(r1)
    r2 = HOLE_RADIUS ** 2 / r1 if r2 is None else float(r2)
    if not (0.0 < r1 < 0.045 and 0.0 < r2 < 0.05):  # holes 90 mm apart in x, 100 mm in y
        raise ValueError(f"hole semi-axes must satisfy 0 < r1 < 0.045 m and 0 < r2 < 0.05 m "
                         f"(holes may not touch), got r1={r1!r}, r2={r2!r}")
    nx, ny = (int(np.ceil(length / h - 1e-9)) for length in (PLATE_WIDTH, PLATE_HEIGHT))
    mesh = MeshTri.init_tensor(np.linspace(0.0, PLATE_WIDTH, nx + 1),
                               np.linspace(0.0, PLATE_HEIGHT, ny + 1))
    local = h
    for _ in range(max(0, int(round(np.log2(h / h_hole))))):
        p, t = mesh.p.T, mesh.t.T
        dist, _ = _signed_distance(p, r1, r2, band * local)
        near = (dist[t].min(1) < band * local) & (dist[t].max(1) > -band * local)
        crossed = (dist[t].min(1) < 0) & (dist[t].max(1) >= 0)
        mesh = mesh.refined(np.nonzero(near | crossed)[0])
        local /= 2.0
    p, t = mesh.p.T.copy(), mesh.t.T.astype(np.int64)
    dist, foot = _signed_distance(p, r1, r2, _PRESNAP * local)
    close = np.nonzero(np.abs(dist) < _PRESNAP * local)[0]
    p = _snap(p, t, close, foot[close])
    inside = (_scaled_radius(p, r1, r2) < 1.0 - 1e-9).any(-1)  # snapped nodes are not inside
    cut = inside[t].any(1) | (_scaled_radius(p[t].mean(1), r1, r2) < 1.0).any(-1)
    mesh = MeshTri(np.ascontiguousarray(p.T), np.ascontiguousarray(t.T))
    mesh = mesh.remove_elements(np.nonzero(cut)[0])
    p, t = mesh.p.T.astype(np.float64), mesh.t.T.astype(np.int64)
    flip = _quality(p, t) < 0
    t[flip] = t[flip][:, [0, 2, 1]]  # counter-clockwise

    facets = mesh.facets[:, mesh.boundary_facets()].T.astype(np.int64)
    mid = p[facets].mean(1)
    tol = 1e-9 * PLATE_WIDTH
    on_bottom, on_top = np.abs(mid[:, 1]) < tol, np.abs(mid[:, 1] - PLATE_HEIGHT) < tol
    on_outer = on_bottom | on_top | (np.abs(mid[:, 0]) < tol) | \
        (np.abs(mid[:, 0] - PLATE_WIDTH) < tol)
    hole_nodes = np.unique(facets[~on_outer])
    which, target = _project(p[hole_nodes], r1, r2)
    p = _snap(p, t, hole_nodes, target)
    top_edges = np.sort(facets[on_top], axis=1)
    return PlateMesh(points=p, triangles=t, bottom=np.unique(facets[on_bottom]),
                     top=np.unique(top_edges), outer=np.unique(facets[on_outer]),
                     holes=tuple(np.sort(hole_nodes[which == k]) for k in range(6)),
                     top_edges=top_edges[np.argsort(p[top_edges[:, 0], 0])], r1=r1, r2=r2)


# ----------------------------------------------------------------------------------- samples
def _canonical_kind(kind: str) -> str:
    kind = _ALIASES.get(kind, kind)
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS + tuple(_ALIASES)}, got {kind!r}")
    return kind


def _check_param(kind: str, param: float) -> float:
    param = float(param)
    lo, hi = ANGLE_RANGE if kind == "angle" else R1_RANGE
    if not (np.isfinite(param) and (kind == "angle" or lo <= param <= hi)):
        what = "theta (degrees)" if kind == "angle" else f"r1 in [{lo}, {hi}] m"
        raise ValueError(f"param must be a finite {what}, got {param!r}")
    return param


def _fields(kind: str, mesh: PlateMesh, params: np.ndarray, phys: dict) -> np.ndarray:
    """[S, N] vertex targets on one mesh for S parameters (several only for "angle")."""
    from jaxpapers.core import fem

    p, t = mesh.points, mesh.triangles
    if kind == "poisson":
        nodes = np.concatenate((mesh.outer,) + mesh.holes)
        vals = np.concatenate([np.zeros(len(mesh.outer))] +
                              [np.full(len(h), s) for h, s in zip(mesh.holes, POISSON_SIGNS)])
        u = fem.solve_laplace(p, t, nodes, vals)
        return fem.cell_to_vertex(p, t, fem.grad_magnitude(p, t, u))[None]
    theta = np.deg2rad(params if kind == "angle" else np.full(len(params), 90.0))
    # linear in the traction: two unit solves (shared factorisation), then combine per theta
    _, unit = fem.solve_elasticity(p, t, clamped_nodes=mesh.bottom, traction_edges=mesh.top_edges,
                                   traction=phys["traction"] * np.eye(2), E=phys["E"],
                                   nu=phys["nu"], lam=phys["lam"])
    stress = np.cos(theta)[:, None, None, None] * unit[0] + \
        np.sin(theta)[:, None, None, None] * unit[1]  # [S, T, 2, 2]
    vm = fem.von_mises(stress, formula=phys["formula"])  # [S, T]
    return fem.cell_to_vertex(p, t, vm.T).T


def _physics(traction, E, nu, lam, formula) -> dict:
    from jaxpapers.core.fem import VON_MISES_FORMULAS

    if formula not in VON_MISES_FORMULAS:
        raise ValueError(f"formula must be one of {VON_MISES_FORMULAS}, got {formula!r}")
    return {"traction": float(traction), "E": float(E), "nu": float(nu),
            "lam": None if lam is None else float(lam), "formula": formula}


def plate_sample(kind: str, param: float, *, lr: MeshSize = LR, hr: MeshSize = HR,
                 traction: float = 100e6, E: float = 210e9, nu: float = 0.3,
                 lam: float | None = 1.25,
                 formula: str = "release") -> tuple[MeshField, MeshField]:
    """One paired sample of a SuperMeshNet dataset: the same problem on the LR and HR mesh.

    Args:
      kind: "angle" (param = traction angle theta in degrees; circular holes), "geometry"
        (param = r1 in m, theta = 90 degrees) or "poisson"/"laplace" (param = r1 in m).
      param: theta or r1 as above (r1 in [0.025, 0.040]).
      lr, hr: :class:`MeshSize` of the two meshes.
      traction: traction magnitude (Pa) on the top edge, t = traction (cos theta, sin theta).
      E, nu, lam: material (see ``fem.solve_elasticity``; lam = 1.25 is the release's quirk).
      formula: von Mises formula (see ``fem.von_mises``).

    Returns:
      ``(lr_field, hr_field)``, two :class:`MeshField` with the vertex target (von Mises stress
      in Pa, or |grad u| in 1/m).

    >>> lo, hi = plate_sample("angle", 90.0)
    >>> lo.field.shape, hi.field.shape, bool(1e8 < np.median(hi.field) < 1.1e8)
    ((197,), (1596,), True)
    """
    kind = _canonical_kind(kind)
    param = _check_param(kind, param)
    phys = _physics(traction, E, nu, lam, formula)
    r1 = HOLE_RADIUS if kind == "angle" else param
    out = []
    for name, size in (("lr", lr), ("hr", hr)):
        mesh = plate_mesh(_check_size(name, size), r1=r1)
        field = _fields(kind, mesh, np.array([param]), phys)[0]
        out.append(MeshField(mesh.points, mesh.triangles, field))
    return out[0], out[1]


# ----------------------------------------------------------------------------------- datasets
def _generate(kind: str, params: np.ndarray, sizes: dict, phys: dict) -> dict[str, np.ndarray]:
    """The dataset as flat arrays: per resolution, concatenated unique meshes and fields."""
    arrays = {"params": params}
    for res, size in sizes.items():
        meshes, fields, index = [], [], []
        if kind == "angle":
            mesh = plate_mesh(size)
            meshes, index = [mesh], [0] * len(params)
            fields = list(_fields(kind, mesh, params, phys))
        else:
            for i, r1 in enumerate(params):
                mesh = plate_mesh(size, r1=r1)
                meshes.append(mesh)
                index.append(i)
                fields.append(_fields(kind, mesh, np.array([r1]), phys)[0])
        arrays[f"{res}_num_points"] = np.array([len(m.points) for m in meshes], np.int64)
        arrays[f"{res}_num_triangles"] = np.array([len(m.triangles) for m in meshes], np.int64)
        arrays[f"{res}_points"] = np.concatenate([m.points for m in meshes])
        arrays[f"{res}_triangles"] = np.concatenate([m.triangles for m in meshes]).astype(np.int32)
        arrays[f"{res}_mesh_index"] = np.array(index, np.int64)
        arrays[f"{res}_field"] = np.concatenate(fields)
    return arrays


def _unpack(kind: str, arrays: dict[str, np.ndarray], num_samples: int) -> PlateDataset:
    """PlateDataset from the flat arrays; raises ValueError when they are inconsistent."""
    params = np.asarray(arrays["params"], np.float64)
    if params.shape != (num_samples,) or not np.all(np.isfinite(params)):
        raise ValueError("params has the wrong shape or non-finite values")
    out = {}
    for res in ("lr", "hr"):
        npts, ntri = arrays[f"{res}_num_points"], arrays[f"{res}_num_triangles"]
        pts, tri = arrays[f"{res}_points"], arrays[f"{res}_triangles"]
        index, field = arrays[f"{res}_mesh_index"], arrays[f"{res}_field"]
        if (npts.shape != ntri.shape or pts.shape != (npts.sum(), 2) or tri.shape != (ntri.sum(), 3)
                or index.shape != (num_samples,) or index.min() < 0 or index.max() >= len(npts)
                or field.shape != (npts[index].sum(),) or not np.all(np.isfinite(field))
                or not np.all(np.isfinite(pts))):
            raise ValueError(f"{res} arrays are inconsistent")
        meshes = []
        for a, b, c, d, n in zip(np.cumsum(npts) - npts, np.cumsum(npts), np.cumsum(ntri) - ntri,
                                 np.cumsum(ntri), npts):
            p, t = np.array(pts[a:b], np.float64), np.array(tri[c:d], np.int64)
            if t.size == 0 or t.min() < 0 or t.max() >= n:
                raise ValueError(f"{res} triangles index out of range")
            p.flags.writeable = t.flags.writeable = False
            meshes.append((p, t))
        offsets = np.cumsum(npts[index]) - npts[index]
        out[res] = tuple(MeshField(*meshes[k], np.array(field[o:o + npts[k]], np.float64))
                         for k, o in zip(index, offsets))
    return PlateDataset(kind, params, out["lr"], out["hr"])


def _fingerprint(kind, num_samples, seed, sizes, phys) -> dict:
    fp = {"format": _FORMAT, "kind": kind, "num_samples": num_samples, "seed": seed,
          "sizes": {k: list(v) for k, v in sizes.items()}, "physics": phys}
    return json.loads(json.dumps(fp, sort_keys=True))


def _read(path: pathlib.Path, fingerprint: dict, kind: str, num_samples: int) -> PlateDataset:
    with np.load(path, allow_pickle=False) as f:
        arrays = {k: f[k] for k in f.files}
    if json.loads(str(arrays.pop("fingerprint"))) != fingerprint:
        raise ValueError("stored fingerprint differs from the request")
    return _unpack(kind, arrays, num_samples)


def _write(path: pathlib.Path, arrays: dict, fingerprint: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez_compressed(f, fingerprint=np.array(json.dumps(fingerprint, sort_keys=True)),
                                **arrays)
        os.replace(tmp, path)
    except BaseException:
        pathlib.Path(tmp).unlink(missing_ok=True)
        raise


def plate_dataset(kind: str, num_samples: int, *, seed: int, lr: MeshSize = LR,
                  hr: MeshSize = HR, cache: bool = True,
                  cache_dir: str | os.PathLike | None = None, traction: float = 100e6,
                  E: float = 210e9, nu: float = 0.3, lam: float | None = 1.25,
                  formula: str = "release") -> PlateDataset:
    """A paired LR/HR SuperMeshNet dataset, deterministic from ``seed`` and cached on disk.

    Parameters are drawn by ``np.random.default_rng(seed).uniform``: theta ~ U[40, 140) degrees
    ("angle"), r1 ~ U[0.025, 0.040) m ("geometry", "poisson"). "angle" builds one mesh per
    resolution, factorises its stiffness once and solves two unit load cases (the stress is
    linear in the traction). The cache file is ``cache_dir / <sha256 of the arguments and a
    format version, 32 hex digits>.npz``, written to a temporary file and renamed into place; a
    file that cannot be read back (truncated, corrupted, other arguments) is rebuilt with a
    warning.

    Args:
      kind: "angle", "geometry" or "poisson" (alias "laplace"); see :func:`plate_sample`.
      num_samples: S >= 1.
      seed: seed of the parameter draws.
      lr, hr: :class:`MeshSize` of the two resolutions.
      cache: read and write the cache.
      cache_dir: cache folder (default ``jaxpapers.core.cache.cache_root("fem")``:
        ``$JAXPAPERS_CACHE/fem``, else ``~/.cache/jaxpapers/fem``).
      traction, E, nu, lam, formula: physics, as in :func:`plate_sample`.

    Returns:
      a :class:`PlateDataset` with S samples.

    >>> ds = plate_dataset("angle", 3, seed=0, cache=False)
    >>> ds.params.shape, ds.lr[0].points is ds.lr[2].points, ds.hr[1].field.shape
    ((3,), True, (1596,))
    """
    from jaxpapers.core import cache as cache_lib
    from jaxpapers.core import checks

    kind = _canonical_kind(kind)
    num_samples = checks.check_int("num_samples", num_samples, minimum=1)
    seed = checks.check_int("seed", seed, minimum=0)
    checks.check_bool("cache", cache)
    sizes = {"lr": _check_size("lr", lr), "hr": _check_size("hr", hr)}
    phys = _physics(traction, E, nu, lam, formula)
    fingerprint = _fingerprint(kind, num_samples, seed, sizes, phys)
    digest = hashlib.sha256(json.dumps(fingerprint, sort_keys=True).encode()).hexdigest()
    root = cache_lib.cache_root("fem") if cache_dir is None else pathlib.Path(cache_dir)
    path = root.expanduser() / f"{digest[:32]}.npz"
    if cache and path.exists():
        try:
            return _read(path, fingerprint, kind, num_samples)
        except Exception as e:  # noqa: BLE001 - any unreadable file is rebuilt
            warnings.warn(f"fem cache file {path} is unreadable ({type(e).__name__}: {e}); "
                          f"rebuilding it", stacklevel=2)
    lo, hi = ANGLE_RANGE if kind == "angle" else R1_RANGE
    params = np.random.default_rng(seed).uniform(lo, hi, size=num_samples)
    arrays = _generate(kind, params, sizes, phys)
    if cache:
        _write(path, arrays, fingerprint)
    return _unpack(kind, arrays, num_samples)
