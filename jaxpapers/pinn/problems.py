"""PDE problems as data + residual functions, with collocation samplers and reference solutions.

Each :class:`~jaxpapers.pinn._types.Problem` holds ``residuals(u, batch)`` (per-point residuals
of every loss term, computed with the forward-mode operators) and ``sample(key, n)``. Problems:

* ``gradient_fit`` (the paper's first-order task, Sec. 4.1/5.1): on [-1, 1]^2 fit grad u to
  grad u* at interior points and u to u* on the boundary, u* = sin(2 pi w x^2 + (w/2) pi y^2).
  As in the release, the boundary points are the 4 edge projections of the interior batch.
* ``poisson``: -lap u = f on [-1, 1]^2, u* = sin(pi x) sin(pi y), u = 0 on the boundary.
* ``helmholtz``: lap u + k^2 u = q on [-1, 1]^2, u* = sin(a1 pi x) sin(a2 pi y).
* ``advection``: u_t + c u_x = 0, x in [0, 2 pi) periodic, t in [0, 1], u* = sin(x - c t).
* ``burgers``: u_t + u u_x = nu u_xx, x in [-1, 1], t in [0, 1], u0 = -sin(pi x), u(+-1) = 0;
  reference by Cole-Hopf quadrature (:func:`~jaxpapers.pinn.solvers.burgers_cole_hopf`).
* ``allen_cahn``: u_t = 1e-4 u_xx + 5 u - 5 u^3, x in [-1, 1) periodic, u0 = x^2 cos(pi x);
  reference by a split-step Fourier solver.

Time is the last input coordinate. Time-dependent samplers return interior points sorted by t,
so that ``num_chunks`` equal slices are consecutive time windows (causal weighting).

>>> import jax
>>> p = make_problem("poisson")
>>> batch = p.sample(jax.random.key(0), 64)
>>> sorted(batch), batch["interior"].shape
(['boundary', 'interior'], (64, 2))
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import jax
import jax.numpy as jnp
import numpy as np

from jaxpapers.pinn import operators as ops
from jaxpapers.pinn import solvers
from jaxpapers.pinn._types import Problem, ScalarFn

__all__ = ["PROBLEMS", "make_problem"]

PROBLEMS = ("gradient_fit", "poisson", "helmholtz", "advection", "burgers", "allen_cahn")


def _u(u: ScalarFn, x: jax.Array) -> jax.Array:
    return jax.vmap(u)(x)


def _uniform(key, n, lower, upper):
    lo, hi = jnp.asarray(lower), jnp.asarray(upper)
    return lo + (hi - lo) * jax.random.uniform(key, (n, len(lower)))


def _grid(lower, upper, n):
    axes = [np.linspace(lo, hi, n) for lo, hi in zip(lower, upper)]
    mesh = np.meshgrid(*axes, indexing="ij")
    return np.stack([m.ravel() for m in mesh], axis=-1)


def _check_batch(batch: Mapping[str, jax.Array], names, dim):
    for name in names:
        if name not in batch:
            raise ValueError(f"batch must contain {sorted(names)}, got {sorted(batch)}")
        ops.check_points(batch[name], f"batch[{name!r}]", dim)


def _square_edges(z: jax.Array) -> jax.Array:
    """The 4 edge projections of interior points z [n, 2] of [-1, 1]^2: [4n, 2]."""
    one = jnp.ones_like(z[:, 0])
    return jnp.concatenate([jnp.stack([z[:, 0], -one], -1), jnp.stack([z[:, 0], one], -1),
                            jnp.stack([-one, z[:, 1]], -1), jnp.stack([one, z[:, 1]], -1)])


def _box_problem(name, exact, residual_fn, eval_n, info):
    lower, upper = (-1.0, -1.0), (1.0, 1.0)

    def sample(key, n):
        z = _uniform(key, n, lower, upper)
        return {"interior": z, "boundary": _square_edges(z)}

    def residuals(u, batch):
        _check_batch(batch, ("interior", "boundary"), 2)
        xb = batch["boundary"]
        return {"res": residual_fn(u, batch["interior"]), "bc": _u(u, xb) - _u(exact, xb)}

    pts = _grid(lower, upper, eval_n)
    with jax.enable_x64(True):
        vals = np.asarray(jax.vmap(exact)(jnp.asarray(pts)))
    return Problem(name=name, dim=2, lower=lower, upper=upper, residuals=residuals,
                   sample=sample, eval_points=pts, eval_values=vals, exact=exact, info=info)


def _gradient_fit(omega=1.0, eval_n=100):
    def exact(z):
        return jnp.sin(2.0 * math.pi * omega * z[0] ** 2 + 0.5 * omega * math.pi * z[1] ** 2)

    def res(u, x):
        return ops.gradient(u, x) - ops.gradient(exact, x)  # [N, 2]

    return _box_problem("gradient_fit", exact, res, eval_n,
                        {"equation": "grad u = grad u*, u = u* on the boundary", "omega": omega})


def _poisson(eval_n=100):
    def exact(z):
        return jnp.sin(math.pi * z[0]) * jnp.sin(math.pi * z[1])

    def res(u, x):
        f = 2.0 * math.pi**2 * jax.vmap(exact)(x)
        return -ops.laplacian(u, x) - f

    return _box_problem("poisson", exact, res, eval_n,
                        {"equation": "-lap u = 2 pi^2 sin(pi x) sin(pi y), u = 0 on boundary"})


def _helmholtz(a1=1.0, a2=4.0, k=1.0, eval_n=100):
    def exact(z):
        return jnp.sin(a1 * math.pi * z[0]) * jnp.sin(a2 * math.pi * z[1])

    def res(u, x):
        q = (k**2 - (a1**2 + a2**2) * math.pi**2) * jax.vmap(exact)(x)
        return ops.laplacian(u, x) + k**2 * _u(u, x) - q

    return _box_problem("helmholtz", exact, res, eval_n,
                        {"equation": "lap u + k^2 u = q", "a1": a1, "a2": a2, "k": k})


def _time_sampler(lower, upper):
    def sample(key, n):
        k_in, k_ic, k_bc = jax.random.split(key, 3)
        z = _uniform(k_in, n, lower, upper)
        z = z.at[:, 1].set(jnp.sort(z[:, 1]))  # consecutive slices = time windows
        xs = _uniform(k_ic, n, lower[:1], upper[:1])[:, 0]
        ic = jnp.stack([xs, jnp.full_like(xs, lower[1])], -1)
        ts = _uniform(k_bc, n, lower[1:], upper[1:])[:, 0]
        return {"interior": z, "initial": ic,
                "left": jnp.stack([jnp.full_like(ts, lower[0]), ts], -1),
                "right": jnp.stack([jnp.full_like(ts, upper[0]), ts], -1)}

    return sample


def _time_problem(name, lower, upper, pde_res, u0, periodic, pts, vals, exact, info):
    def residuals(u, batch):
        _check_batch(batch, ("interior", "initial", "left", "right"), 2)
        ic = batch["initial"]
        out = {"res": pde_res(u, batch["interior"]), "ic": _u(u, ic) - jax.vmap(u0)(ic[:, 0])}
        ul, ur = _u(u, batch["left"]), _u(u, batch["right"])
        out["bc"] = ul - ur if periodic else jnp.concatenate([ul, ur])
        return out

    return Problem(name=name, dim=2, lower=lower, upper=upper, residuals=residuals,
                   sample=_time_sampler(lower, upper), eval_points=pts, eval_values=vals,
                   time_dependent=True, exact=exact, info=info)


def _advection(c=1.0, eval_n=100):
    lower, upper = (0.0, 0.0), (2.0 * math.pi, 1.0)

    def exact(z):
        return jnp.sin(z[0] - c * z[1])

    def pde(u, x):
        return ops.time_derivative(u, x) + c * ops.partial_derivative(u, x, (0,))

    pts = _grid(lower, upper, eval_n)
    vals = np.sin(pts[:, 0] - c * pts[:, 1])
    return _time_problem("advection", lower, upper, pde, jnp.sin, True, pts, vals, exact,
                         {"equation": "u_t + c u_x = 0, periodic", "c": c})


def _burgers(nu=0.01 / math.pi, eval_nx=128, eval_nt=51):
    lower, upper = (-1.0, 0.0), (1.0, 1.0)

    def pde(u, x):
        return (ops.time_derivative(u, x) + _u(u, x) * ops.partial_derivative(u, x, (0,))
                - nu * ops.partial_derivative(u, x, (0, 0)))

    xs, ts = np.linspace(-1, 1, eval_nx), np.linspace(0, 1, eval_nt)
    ref = solvers.burgers_cole_hopf(xs, ts, nu=nu)  # [T, X]
    X, T = np.meshgrid(xs, ts)
    pts = np.stack([X.ravel(), T.ravel()], -1)
    return _time_problem("burgers", lower, upper, pde, lambda x: -jnp.sin(math.pi * x), False,
                         pts, ref.ravel(), None,
                         {"equation": "u_t + u u_x = nu u_xx", "nu": nu,
                          "reference": "Cole-Hopf trapezoid quadrature"})


def _allen_cahn(diffusion=1e-4, reaction=5.0, eval_stride=4, dt=1e-4):
    lower, upper = (-1.0, 0.0), (1.0, 1.0)

    def pde(u, x):
        uu = _u(u, x)
        return (ops.time_derivative(u, x) - diffusion * ops.partial_derivative(u, x, (0, 0))
                - reaction * (uu - uu**3))

    xs, ts, ref = solvers.allen_cahn_split_step(512, 1.0, dt, diffusion=diffusion,
                                                reaction=reaction, save_every=int(0.01 / dt))
    xs, ref = xs[::eval_stride], ref[:, ::eval_stride]
    X, T = np.meshgrid(xs, ts)
    pts = np.stack([X.ravel(), T.ravel()], -1)
    return _time_problem("allen_cahn", lower, upper, pde, lambda x: x**2 * jnp.cos(math.pi * x),
                         True, pts, ref.ravel(), None,
                         {"equation": "u_t = D u_xx + r (u - u^3), periodic",
                          "diffusion": diffusion, "reaction": reaction,
                          "reference": "Strang split-step Fourier, 512 modes"})


_BUILDERS = {"gradient_fit": _gradient_fit, "poisson": _poisson, "helmholtz": _helmholtz,
             "advection": _advection, "burgers": _burgers, "allen_cahn": _allen_cahn}


def make_problem(name: str, **kwargs) -> Problem:
    """Build a problem by name with its parameters (e.g. ``omega`` for ``gradient_fit``).

    Raises:
      ValueError: unknown ``name``.
    """
    if name not in _BUILDERS:
        raise ValueError(f"name must be one of {PROBLEMS}, got {name!r}")
    return _BUILDERS[name](**kwargs)
