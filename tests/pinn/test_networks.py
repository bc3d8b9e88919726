"""Networks: shapes, jit/vmap, coupling-block Jacobian determinants and spectra, bad input."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxpapers import pinn


@pytest.mark.parametrize("arch", pinn.ARCHITECTURES)
def test_shapes_jit_vmap(key, arch):
    k_net, k_x = jax.random.split(key)
    net = pinn.make_network(arch, depth=3, width=8, weight_fact=(0.5, 0.1))
    params = jax.jit(net.init)(k_net, jnp.zeros(2))
    x = jax.random.normal(k_x, (3, 2))
    single = jax.jit(net.apply)
    loop = np.stack([single(params, xi) for xi in x])
    np.testing.assert_allclose(jax.jit(jax.vmap(net.apply, (None, 0)))(params, x), loop,
                               rtol=1e-5, atol=1e-6)
    assert pinn.hidden_states(net, params, x[0]).shape == (4, 8)
    # the blocks' parameters are stacked on a leading depth axis (scanned)
    leaves = jax.tree.leaves(params["params"]["blocks"])
    assert all(leaf.shape[0] == 3 for leaf in leaves)


def test_weight_factorisation_is_g_times_v(key):
    d = pinn.Dense(5, weight_fact=(0.5, 0.1))
    p = d.init(key, jnp.zeros(3))
    f = p["params"]["kernel"]
    x = jnp.arange(3.0)
    np.testing.assert_allclose(d.apply(p, x), x @ (f["g"] * f["v"]) + p["params"]["bias"],
                               rtol=1e-6)
    # g = exp(0.5 + 0.1 N): all of them within exp(0.5 +- 0.6) with overwhelming probability
    assert np.all((np.asarray(f["g"]) > np.exp(-0.1)) & (np.asarray(f["g"]) < np.exp(1.1)))


def _perturb_layernorm_scales(params, key):
    def f(path, leaf):
        if "norm" in jax.tree_util.keystr(path) and "scale" in jax.tree_util.keystr(path):
            return leaf * jnp.exp(jax.random.normal(jax.random.fold_in(key, leaf.size),
                                                    leaf.shape))
        return leaf
    return jax.tree_util.tree_map_with_path(f, params)


@pytest.mark.parametrize("affine", [False, True])
def test_coupling_log_det(x64, key, affine):
    k_net, k_h, k_s = jax.random.split(key, 3)
    net = pinn.make_network("coupled", depth=4, width=10, affine=affine)
    params = net.init(k_net, jnp.zeros(2))
    if affine:  # at init the LayerNorm output sums to 0 -> log det 0; perturb its scales
        params = _perturb_layernorm_scales(params, k_s)

    @jax.jit
    def both(params, h):
        out = []
        for i in range(4):
            jac = jax.jacfwd(lambda z, i=i: pinn.apply_block(net, params, i, z))(h[i])
            out.append((jnp.linalg.slogdet(jac)[1], pinn.block_log_det(net, params, i, h[i])))
        return out

    hs = jax.random.normal(k_h, (4, 10))
    for logabs, analytic in both(params, hs):
        np.testing.assert_allclose(logabs, analytic, atol=1e-10)
        if affine:
            assert abs(float(analytic)) > 1e-3  # the affine case is really tested
        else:
            assert abs(float(logabs)) < 1e-10


def test_additive_zero_shift_is_permutation(x64, key):
    # additive coupling with zero-initialised shift: each block is a permutation at init
    net0 = pinn.make_network("coupled", depth=3, width=8, affine=False, zero_init_shift=True)
    p0 = net0.init(key, jnp.zeros(2))
    sv0 = jax.jit(lambda p, x: pinn.block_jacobian_singular_values(net0, p, x))(
        p0, jnp.array([0.3, -0.2]))
    assert sv0.shape == (3, 8)
    np.testing.assert_allclose(sv0, 1.0, atol=1e-12)
    h = jnp.arange(8.0)
    perm = net0.permutations()[1]
    np.testing.assert_allclose(pinn.apply_block(net0, p0, 1, h), h[perm], atol=1e-12)


def test_pirate_blocks_are_identity_at_init(x64, key):
    net = pinn.make_network("pirate", depth=3, width=8)
    params = net.init(key, jnp.zeros(2))
    hs = pinn.hidden_states(net, params, jnp.array([0.1, 0.7]))
    np.testing.assert_allclose(hs[1:], jnp.broadcast_to(hs[0], hs[1:].shape), atol=1e-14)


def test_bad_input():
    with pytest.raises(ValueError, match="depth"):
        pinn.make_network("mlp", depth=0, width=8)
    with pytest.raises(ValueError, match="width"):
        pinn.make_network("coupled", depth=2, width=7)
    with pytest.raises(ValueError, match="arch"):
        pinn.make_network("transformer", depth=2, width=8)
    with pytest.raises(ValueError, match="only apply"):
        pinn.make_network("mlp", depth=2, width=8, affine=False)
    with pytest.raises(ValueError, match="unroll"):
        pinn.make_network("mlp", depth=2, width=8, unroll=0)


@pytest.mark.parametrize("arch", ["mlp", pytest.param("coupled", marks=pytest.mark.slow)])
def test_unrolled_scan_is_the_same_network(x64, key, arch):
    """``unroll`` changes only how the depth loop is compiled: same parameters, same values
    and same Laplacian (the bench's speed-up is not bought with a different function)."""
    k_net, k_x = jax.random.split(key)
    scanned = pinn.make_network(arch, depth=5, width=8, weight_fact=(0.5, 0.1))
    unrolled = pinn.make_network(arch, depth=5, width=8, weight_fact=(0.5, 0.1), unroll=5)
    params = scanned.init(k_net, jnp.zeros(2))
    assert (jax.tree.map(jnp.shape, unrolled.init(k_net, jnp.zeros(2)))
            == jax.tree.map(jnp.shape, params))
    x = jax.random.normal(k_x, (4, 2))
    lap = lambda n: pinn.laplacian(lambda z: n.apply(params, z), x)
    np.testing.assert_allclose(lap(unrolled), lap(scanned), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(jax.vmap(lambda z: unrolled.apply(params, z))(x),
                               jax.vmap(lambda z: scanned.apply(params, z))(x), rtol=1e-12)
