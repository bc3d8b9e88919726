"""Problems: manufactured residuals vanish for the exact solutions; own reference solvers."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxpapers import pinn


@pytest.mark.parametrize("name,kw", [("gradient_fit", {"omega": 2.0, "eval_n": 8}),
                                     ("poisson", {"eval_n": 8}), ("helmholtz", {"eval_n": 8}),
                                     ("advection", {"c": 2.0, "eval_n": 8})])
def test_exact_solution_has_zero_residual(x64, key, name, kw):
    prob = pinn.make_problem(name, **kw)
    batch = prob.sample(key, 32)
    res = jax.jit(lambda b: prob.residuals(prob.exact, b))(batch)
    for term, r in res.items():
        assert float(jnp.max(jnp.abs(r))) < 1e-10, term
    # and a wrong function does not: the residual really measures something
    wrong = lambda z: prob.exact(z) + 0.1 * z[0] ** 2 * z[1]
    bad = prob.residuals(wrong, batch)
    assert max(float(jnp.max(jnp.abs(r))) for r in bad.values()) > 1e-2
    for k, v in batch.items():  # points lie in the domain
        assert np.all(np.asarray(v) >= np.asarray(prob.lower) - 1e-12), k
        assert np.all(np.asarray(v) <= np.asarray(prob.upper) + 1e-12), k


def test_time_sampler_sorted(key):
    prob = pinn.make_problem("advection", eval_n=4)
    t = np.asarray(prob.sample(key, 64)["interior"][:, 1])
    assert np.all(np.diff(t) >= 0)


def test_burgers_reference_solves_the_pde():
    nu = 0.01 / math.pi
    x = np.linspace(-1, 1, 401)
    t = np.array([0.2 - 1e-4, 0.2, 0.2 + 1e-4])
    u = pinn.burgers_cole_hopf(x, t, nu=nu)
    dx = x[1] - x[0]
    ut = (u[2] - u[0]) / 2e-4
    ux = (u[1, 2:] - u[1, :-2]) / (2 * dx)
    uxx = (u[1, 2:] - 2 * u[1, 1:-1] + u[1, :-2]) / dx**2
    r = ut[1:-1] + u[1, 1:-1] * ux - nu * uxx
    # smooth at t = 0.2 (the shock forms at t ~ 1/pi); FD truncation error ~ dx^2 |u_xxx|
    assert np.max(np.abs(r)) < 1e-2 * np.max(np.abs(ut))
    assert np.max(np.abs(u[:, [0, -1]])) < 1e-10  # u(+-1, t) = 0
    np.testing.assert_allclose(pinn.burgers_cole_hopf(x, np.array([1e-8]), nu=nu)[0],
                               -np.sin(np.pi * x), atol=1e-3)


def test_allen_cahn_solver_second_order():
    sols = [pinn.allen_cahn_split_step(128, 0.2, dt, save_every=round(0.2 / dt))[2][-1]
            for dt in (2e-3, 1e-3, 5e-4)]
    e1 = np.max(np.abs(sols[0] - sols[1]))
    e2 = np.max(np.abs(sols[1] - sols[2]))
    assert 3.0 < e1 / e2 < 5.0  # Strang splitting: error ~ dt^2, ratio 4


def test_bad_input(key):
    with pytest.raises(ValueError, match="name"):
        pinn.make_problem("navier_stokes")
    prob = pinn.make_problem("poisson", eval_n=4)
    batch = prob.sample(key, 8)
    batch["interior"] = batch["interior"].at[0, 0].set(jnp.nan)
    with pytest.raises(ValueError, match=r"batch\['interior'\] holds NaN"):
        prob.residuals(prob.exact, batch)
    with pytest.raises(ValueError, match="batch must contain"):
        prob.residuals(prob.exact, {"interior": prob.sample(key, 8)["interior"]})
