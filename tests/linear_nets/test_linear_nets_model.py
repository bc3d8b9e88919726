"""Model: closed-form gradients, GD steps, Haar sampling, validation."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxpapers import linear_nets as ln


@pytest.fixture(autouse=True)
def _x64():
    with jax.enable_x64(True):
        yield


@pytest.mark.parametrize("layers", [2, 3])
@pytest.mark.parametrize("n,d,h", [(7, 5, 3), (4, 6, 6), (9, 3, 5)])
def test_closed_form_gradients_match_autodiff(layers, n, d, h):
    k1, k2, k3, k4 = jax.random.split(jax.random.key(n * 100 + d * 10 + h), 4)
    params = ln.init_params(k1, d, h, layers=layers, kind="gaussian")
    if layers == 3:
        params["a"] = jax.random.normal(k4, (h, 1))
    x = jax.random.normal(k2, (n, d))
    y = jax.random.normal(k3, (n, h if layers == 2 else 1))
    ours = jax.jit(ln.gradients)(params, x, y)
    auto = jax.jit(jax.grad(ln.loss))(params, x, y)
    assert set(ours) == set(auto)
    for name in auto:
        np.testing.assert_allclose(ours[name], auto[name], rtol=0, atol=1e-12)
        assert float(jnp.max(jnp.abs(auto[name]))) > 1e-3  # a non-trivial comparison


@pytest.mark.parametrize("layers", [2, 3])
def test_population_step_equals_data_step_for_orthogonal_data(layers):
    params, data = ln.sample_problem(jax.random.key(3), 12, 6, 6, layers=layers)
    np.testing.assert_allclose(data["x"].T @ data["x"], 12 * jnp.eye(6), atol=1e-12)
    a = ln.gd_step(params, data["x"], data["y"], 40.0, 25.0)
    b = ln.population_gd_step(params, data["beta"], 40.0, 25.0)
    for name in a:
        np.testing.assert_allclose(a[name], b[name], rtol=0, atol=1e-11)
    np.testing.assert_allclose(ln.loss(params, data["x"], data["y"]),
                               ln.population_loss(params, data["beta"]), rtol=1e-12)
    # test loss is the population residual norm (twice the population loss)
    np.testing.assert_allclose(ln.test_loss(a, data["beta"]),
                               2 * ln.population_loss(a, data["beta"]), rtol=1e-12)
    if layers == 3:
        np.testing.assert_array_equal(a["a"], params["a"])  # fixed readout


def test_surrogate_is_gd_with_residual_replaced_by_minus_beta():
    # 2 layers: the surrogate update equals the GD update on a model whose output is zero.
    params, data = ln.sample_problem(jax.random.key(4), 5, 5, 5)
    s = ln.surrogate_step(params, data["beta"], 3.0, 7.0)
    r = -data["beta"]
    np.testing.assert_allclose(s["w1"], params["w1"] - 3.0 * r @ params["w2"].T / 5, atol=1e-14)
    np.testing.assert_allclose(s["w2"], params["w2"] - 7.0 * params["w1"].T @ r / 5, atol=1e-14)


def test_haar_orthonormal_and_sign_fixed():
    q = ln.haar(jax.random.key(0), 7, 4)
    np.testing.assert_allclose(q.T @ q, jnp.eye(4), atol=1e-13)
    # sign fix: R = Q^T G has a positive diagonal for the G that produced Q
    g = jax.random.normal(jax.random.key(0), (7, 4))
    assert bool(jnp.all(jnp.diagonal(q.T @ g) > 0))


def test_haar_first_entry_moments():
    # For Haar O(h), E[O_11^2] = 1/h and E[tr(O)^2] = 1; an un-fixed QR is not Haar (its
    # diagonal is biased), so this is a real check of the sign fix.
    keys = jax.random.split(jax.random.key(1), 4000)
    qs = jax.lax.map(lambda k: ln.haar(k, 4), keys)
    tr = jnp.trace(qs, axis1=1, axis2=2)
    se = float(jnp.std(tr)) / np.sqrt(4000)
    assert abs(float(jnp.mean(tr))) < 3 * se
    se2 = float(jnp.std(tr**2)) / np.sqrt(4000)
    assert abs(float(jnp.mean(tr**2)) - 1.0) < 3 * se2


def test_jit_equals_eager_and_vmap_equals_loop():
    params, data = ln.sample_problem(jax.random.key(5), 8, 8, 8, layers=3)
    eager = ln.gd_step(params, data["x"], data["y"], 2.0, 3.0)
    jitted = jax.jit(ln.gd_step)(params, data["x"], data["y"], 2.0, 3.0)
    for name in eager:
        np.testing.assert_allclose(jitted[name], eager[name], rtol=1e-13, atol=1e-14)
    rates = jnp.array([0.5, 1.0, 4.0])
    batched = jax.vmap(lambda e: ln.gd_step(params, data["x"], data["y"], e, 2 * e))(rates)
    for i, e in enumerate(rates):
        one = ln.gd_step(params, data["x"], data["y"], e, 2 * e)
        np.testing.assert_allclose(batched["w1"][i], one["w1"], rtol=1e-13, atol=1e-14)


def test_bad_inputs():
    params, data = ln.sample_problem(jax.random.key(6), 6, 4, 4)
    with pytest.raises(ValueError, match="eta1"):
        ln.gd_step(params, data["x"], data["y"], -1.0, 1.0)
    with pytest.raises(ValueError, match="eta2"):
        ln.surrogate_step(params, data["beta"], 1.0, float("nan"))
    with pytest.raises(ValueError, match="x must have shape"):
        ln.loss(params, data["x"][:, :3], data["y"])
    with pytest.raises(ValueError, match="y must have shape"):
        ln.loss(params, data["x"], data["y"][:, :1])
    with pytest.raises(ValueError, match="w2"):
        ln.forward({"w1": params["w1"], "w2": params["w2"][:3]}, data["x"])
    with pytest.raises(ValueError, match="d must be >= h"):
        ln.init_params(jax.random.key(0), 3, 4)
    with pytest.raises(ValueError, match="h must be >= 1"):
        ln.init_params(jax.random.key(0), 3, 0)
    with pytest.raises(ValueError, match="layers"):
        ln.init_params(jax.random.key(0), 3, 3, layers=4)
    with pytest.raises(ValueError, match="kind"):
        ln.init_params(jax.random.key(0), 3, 3, kind="uniform")
