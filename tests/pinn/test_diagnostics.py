"""Diagnostics: derivative norms against hand-written chain rules."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxpapers import pinn


def test_first_layer_differential_closed_form(x64, key):
    net = pinn.make_network("mlp", depth=2, width=6)
    params = net.init(key, jnp.zeros(2))
    x = jax.random.uniform(key, (5, 2), minval=-1, maxval=1)
    w = params["params"]["lift"]["kernel"]
    b = params["params"]["lift"]["bias"]
    h0 = jnp.tanh(x @ w + b)  # dh0/dx = diag(1 - h0^2) W^T
    fro2 = jnp.sum((1 - h0**2) ** 2 * jnp.sum(w**2, axis=0), axis=1)
    norms = jax.jit(lambda p, x: pinn.hidden_differential_norms(net, p, x))(params, x)
    assert norms.shape == (3,)
    np.testing.assert_allclose(norms[0], jnp.sqrt(jnp.mean(fro2)), rtol=1e-12)


def test_input_derivative_norms_match_autodiff(x64, key):
    net = pinn.make_network("coupled", depth=3, width=8)
    params = net.init(key, jnp.zeros(2))
    x = jax.random.uniform(key, (6, 2), minval=-1, maxval=1)
    got = jax.jit(lambda p, x: pinn.input_derivative_norms(net, p, x))(params, x)
    u = lambda z: net.apply(params, z)
    g = jax.vmap(jax.grad(u))(x)
    lap = jnp.trace(jax.vmap(jax.hessian(u))(x), axis1=1, axis2=2)
    np.testing.assert_allclose(got["grad"], jnp.sqrt(jnp.mean(jnp.sum(g**2, 1))), rtol=1e-12)
    np.testing.assert_allclose(got["laplacian"], jnp.sqrt(jnp.mean(lap**2)), rtol=1e-12)


def test_block_singular_values_chain(x64, key):
    # the product of block Jacobians is the Jacobian of h_L w.r.t. h_0: compare spectral norms
    net = pinn.make_network("resnet", depth=3, width=6)
    params = net.init(key, jnp.zeros(2))
    x = jnp.array([0.2, -0.5])
    sv = pinn.block_jacobian_singular_values(net, params, x)
    h0, _ = pinn.embed(net, params, x)
    full = jax.jacfwd(lambda h: pinn.apply_block(net, params, 2, pinn.apply_block(
        net, params, 1, pinn.apply_block(net, params, 0, h))))(h0)
    top = jnp.linalg.svd(full, compute_uv=False)[0]
    assert top <= float(jnp.prod(sv[:, 0])) * (1 + 1e-12)  # ||J3 J2 J1|| <= prod ||Ji||
    assert np.all(np.diff(np.asarray(sv), axis=1) <= 1e-12)  # descending


def test_bad_input(key):
    net = pinn.make_network("mlp", depth=1, width=4)
    params = net.init(key, jnp.zeros(2))
    with pytest.raises(ValueError, match="x must be one point"):
        pinn.block_jacobian_singular_values(net, params, jnp.zeros((2, 2)))
    with pytest.raises(ValueError, match="x holds NaN"):
        pinn.input_derivative_norms(net, params, jnp.array([[jnp.nan, 0.0]]))
