"""Differential-propagation diagnostics: input-derivative norms, per-layer differentials and
per-block Jacobian spectra (the "vanishing / exploding differentials" picture of the paper).

For a network h_l = B_l(h_{l-1}), the differential of layer l w.r.t. the input obeys the chain
rule d h_l / d x = J_l d h_{l-1} / d x with the block Jacobian J_l = d B_l / d h. Products of
J_l whose singular values sit away from 1 shrink or blow up d h_L / d x (and hence grad_x u,
lap u); the coupling block keeps them near 1 by construction (triangular J with diagonal s).

>>> import jax, jax.numpy as jnp
>>> from jaxpapers.pinn import make_network
>>> net = make_network("coupled", depth=3, width=8)
>>> params = net.init(jax.random.key(0), jnp.zeros(2))
>>> block_jacobian_singular_values(net, params, jnp.array([0.2, 0.4])).shape
(3, 8)
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from jaxpapers.pinn import networks as nets
from jaxpapers.pinn import operators as ops

__all__ = ["input_derivative_norms", "hidden_differential_norms",
           "block_jacobian_singular_values"]


def input_derivative_norms(net, params: Any, x: jax.typing.ArrayLike) -> dict[str, jax.Array]:
    """Root-mean-square input derivatives of u = net(params, .) over points x [B, d].

    Returns:
      ``{"u": rms u, "grad": rms ||grad_x u||, "laplacian": rms lap u}`` (scalars).
    """
    x = ops.check_points(x)
    u = lambda z: net.apply(params, z)
    rms = lambda a: jnp.sqrt(jnp.mean(a**2))
    g = ops.gradient(u, x)
    return {"u": rms(jax.vmap(u)(x)), "grad": jnp.sqrt(jnp.mean(jnp.sum(g**2, -1))),
            "laplacian": rms(ops.laplacian(u, x))}


def hidden_differential_norms(net, params: Any, x: jax.typing.ArrayLike) -> jax.Array:
    """RMS over points of the Frobenius norm of d h_l / d x for l = 0..depth; returns [depth+1]."""
    x = ops.check_points(x)

    def one(xi):
        jac = jax.jacfwd(lambda z: nets.hidden_states(net, params, z))(xi)  # [L+1, W, d]
        return jnp.sum(jac**2, axis=(1, 2))

    return jnp.sqrt(jnp.mean(jax.vmap(one)(x), axis=0))


def block_jacobian_singular_values(net, params: Any, x: jax.typing.ArrayLike) -> jax.Array:
    """Singular values of every block Jacobian J_l = d h_l / d h_{l-1} at one input point x [d].

    Gates (modified MLP, PirateNet) are held fixed at their values for x.

    Returns:
      [depth, W] singular values, descending per block.
    """
    x = jnp.asarray(x)
    if x.ndim != 1:
        raise ValueError(f"x must be one point of shape [d], got shape {tuple(x.shape)}")
    h, ctx = nets.embed(net, params, x)
    out = []
    for i in range(net.depth):
        f = lambda hh, i=i: nets.apply_block(net, params, i, hh, ctx)
        out.append(jnp.linalg.svd(jax.jacfwd(f)(h), compute_uv=False))
        h = f(h)
    return jnp.stack(out)
