"""Forward-mode operators vs closed forms and vs jax.grad / jax.hessian (float64)."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxpapers import pinn


def f_closed(z):
    return jnp.sin(z[0]) * jnp.exp(z[1]) * z[2] ** 2


def test_closed_forms(x64, key):
    x = jax.random.normal(key, (7, 3))
    a, b, c = (np.asarray(x[:, i]) for i in range(3))
    grad = np.stack([np.cos(a) * np.exp(b) * c**2, np.sin(a) * np.exp(b) * c**2,
                     2 * np.sin(a) * np.exp(b) * c], -1)
    np.testing.assert_allclose(pinn.gradient(f_closed, x), grad, rtol=1e-13, atol=1e-13)
    lap = np.exp(b) * (-np.sin(a) * c**2 + np.sin(a) * c**2 + 2 * np.sin(a))
    np.testing.assert_allclose(pinn.laplacian(f_closed, x), lap, rtol=1e-12, atol=1e-12)
    # u_{x0 x1 x2} = cos(a) e^b 2c ; time derivative = last coordinate
    np.testing.assert_allclose(pinn.partial_derivative(f_closed, x, (0, 1, 2)),
                               2 * np.cos(a) * np.exp(b) * c, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(pinn.time_derivative(f_closed, x, order=2),
                               2 * np.sin(a) * np.exp(b), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(pinn.directional_derivative(f_closed, x, jnp.ones(3)),
                               grad.sum(-1), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("arch", ["mlp", "coupled"])
def test_against_reverse_mode_and_hessian(x64, key, arch):
    k_net, k_x = jax.random.split(key)
    net = pinn.make_network(arch, depth=3, width=8)
    params = net.init(k_net, jnp.zeros(2))
    x = jax.random.uniform(k_x, (9, 2), minval=-1, maxval=1)

    @jax.jit
    def both(params, x):
        u = lambda z: net.apply(params, z)
        ours = (pinn.gradient(u, x), pinn.laplacian(u, x), pinn.partial_derivative(u, x, (0, 1)),
                pinn.partial_derivative(u, x, (1, 0, 0)))
        hess = jax.vmap(jax.hessian(u))(x)  # [B, 2, 2]
        third = jax.vmap(jax.jacfwd(jax.jacfwd(jax.jacfwd(u))))(x)
        ref = (jax.vmap(jax.grad(u))(x), jnp.trace(hess, axis1=1, axis2=2), hess[:, 0, 1],
               third[:, 1, 0, 0])
        return ours, ref

    ours, ref = both(params, x)
    chex.assert_trees_all_close(ours, ref, rtol=0, atol=1e-12)
    assert float(jnp.max(jnp.abs(ref[1]))) > 1e-3  # a non-trivial Laplacian


def test_jit_vmap_and_no_recompile(key):
    net = pinn.make_network("mlp", depth=2, width=8)
    keys = jax.random.split(key, 3)
    ps = jax.vmap(lambda k: net.init(k, jnp.zeros(2)))(keys)
    x = jax.random.normal(keys[0], (5, 2))
    lap = lambda p, x: pinn.laplacian(lambda z: net.apply(p, z), x)
    chex.clear_trace_counter()
    jitted = jax.jit(chex.assert_max_traces(lap, n=1))
    p0 = jax.tree.map(lambda a: a[0], ps)
    np.testing.assert_allclose(jitted(p0, x), lap(p0, x), rtol=1e-5, atol=1e-5)
    loop = np.stack([lap(jax.tree.map(lambda a, i=i: a[i], ps), x) for i in range(3)])
    np.testing.assert_allclose(jax.vmap(lap, (0, None))(ps, x), loop, rtol=1e-5, atol=1e-5)
    jitted(p0, x + 1.0)  # new values: no retrace


def test_bad_input():
    f = lambda z: jnp.sum(z**2)
    with pytest.raises(ValueError, match="x must have shape"):
        pinn.laplacian(f, jnp.ones(3))
    with pytest.raises(ValueError, match="x holds NaN"):
        pinn.gradient(f, jnp.array([[0.0, jnp.nan]]))
    with pytest.raises(ValueError, match="axes"):
        pinn.partial_derivative(f, jnp.ones((2, 2)), (2,))
    with pytest.raises(ValueError, match="order"):
        pinn.time_derivative(f, jnp.ones((2, 2)), order=0)
