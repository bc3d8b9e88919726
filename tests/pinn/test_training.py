"""Training: loss weights (closed forms), convergence, no recompilation, sharded == unsharded."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxpapers import pinn
from jaxpapers.core import sharding
from jaxpapers.core import train as core_train


def test_weight_formulas(x64):
    p = jnp.array([1.0, -2.0, 0.5])
    # ||grad a|| = 2|p|, ||grad b|| = 8|p| -> mean 5|p|: weights 2.5, 0.625
    w = pinn.grad_norm_weights(lambda q: {"a": jnp.sum(q**2), "b": 4 * jnp.sum(q**2)}, p)
    np.testing.assert_allclose([w["a"], w["b"]], [2.5, 0.625], rtol=1e-12)
    # per-point residual Jacobians: ||d a_i/dq||^2 = 1, ||d b_i/dq||^2 = 9 -> weights 5, 5/9
    w = pinn.ntk_weights(lambda q: {"a": q, "b": 3 * q}, p)
    np.testing.assert_allclose([w["a"], w["b"]], [5.0, 5.0 / 9.0], rtol=1e-12)
    c = pinn.causal_weights(jnp.array([1.0, 2.0, 3.0]), 0.5)
    np.testing.assert_allclose(c, np.exp(-0.5 * np.array([0.0, 1.0, 3.0])), rtol=1e-12)


def _traced_once(monkeypatch):
    """Make the core loop's ``run_chunk`` fail on a second trace."""
    chex.clear_trace_counter()
    monkeypatch.setattr(core_train, "run_chunk", jax.jit(
        chex.assert_max_traces(core_train._chunk, n=1), static_argnums=(0, 1, 3)))


def test_training_reduces_error_and_compiles_once(key, monkeypatch):
    prob = pinn.make_problem("gradient_fit", omega=1.0, eval_n=30)
    net = pinn.make_network("coupled", depth=4, width=16)
    opt = optax.adam(3e-3)
    k_init, k_data = jax.random.split(key)
    state = pinn.init_pinn_state(net, prob, opt, k_init)
    step = pinn.make_pinn_step(net, prob, opt, weighting="grad_norm", update_every=50)
    batch_fn = lambda t: prob.sample(jax.random.fold_in(k_data, t), 64)
    err0 = float(pinn.relative_l2(net, state.params["net"], prob))
    _traced_once(monkeypatch)
    for _ in range(4):  # one compilation for all four chunks
        state, metrics = core_train.run_chunk(step, batch_fn, state, 100)
    err = float(pinn.relative_l2(net, state.params["net"], prob))
    # 400 Adam steps on a smooth target: the error must fall well below the initial ~1
    assert err < 0.3 * err0, (err0, err)
    w = state.params["weights"]
    assert set(w) == {"res", "bc"} and float(w["bc"]) != 1.0  # weights were updated


def test_sharded_equals_unsharded(x64, key, num_devices):
    prob = pinn.make_problem("poisson", eval_n=4)
    net = pinn.make_network("mlp", depth=2, width=8)
    # SGD: Adam's g / sqrt(v) would amplify rounding differences of near-zero gradients
    opt = optax.sgd(1e-3)
    k_init, k_data = jax.random.split(key)
    state = pinn.init_pinn_state(net, prob, opt, k_init)
    state = jax.tree.map(lambda a: a.astype(jnp.float64) if a.dtype == jnp.float32 else a, state)
    mesh = sharding.data_parallel_mesh(num_devices)
    plain = jax.jit(pinn.make_pinn_step(net, prob, opt))
    sharded = sharding.data_parallel_step(pinn.make_pinn_step(net, prob, opt, mesh=mesh), mesh)
    s1, s2 = state, sharding.replicate(state, mesh)
    for t in range(3):
        batch = prob.sample(jax.random.fold_in(k_data, t), 8 * num_devices)
        s1, m1 = plain(s1, batch)
        s2, m2 = sharded(s2, sharding.shard_batch(batch, mesh))
    np.testing.assert_allclose(m1["loss"], m2["loss"], rtol=1e-12)
    chex.assert_trees_all_close(s1.params, s2.params, rtol=1e-10, atol=1e-12)
    assert float(m1["loss"]) != float(m1["loss_res"])  # both terms present


def test_causal_training_step(key):
    prob = pinn.make_problem("advection", eval_n=8)
    net = pinn.make_network("mlp", depth=2, width=8)
    opt = optax.adam(1e-3)
    state, hist = pinn.train(prob, net, key, num_steps=5, batch_size=32, optimizer=opt,
                             causal_tol=1.0, num_chunks=4, weighting="ntk", progress=False)
    assert np.all(np.isfinite(hist["loss"]))
    assert np.all((hist["causal_min_weight"] > 0) & (hist["causal_min_weight"] <= 1))


def test_second_train_call_does_not_recompile(key, monkeypatch):
    """Equal step settings compare equal and the data key is traced: a second ``train`` call
    (another key, fresh step and batch objects) reuses the compiled chunk, bit for bit."""
    prob = pinn.make_problem("poisson", eval_n=4)
    net = pinn.make_network("mlp", depth=1, width=8)
    opt = optax.adam(1e-3)  # static: the same object
    kw = dict(num_steps=6, chunk_size=3, batch_size=16, optimizer=opt, progress=False)
    assert pinn.make_pinn_step(net, prob, opt) == pinn.make_pinn_step(net, prob, opt)
    _traced_once(monkeypatch)
    s1, h1 = pinn.train(prob, net, key, **kw)
    s2, h2 = pinn.train(prob, pinn.make_network("mlp", depth=1, width=8), key, **kw)
    chex.assert_trees_all_equal((s1, h1), (s2, h2))
    s3, _ = pinn.train(prob, net, jax.random.key(7), **kw)
    assert not np.array_equal(np.asarray(s3.params["net"]["params"]["lift"]["kernel"]),
                              np.asarray(s1.params["net"]["params"]["lift"]["kernel"]))


def test_bad_input(key):
    prob = pinn.make_problem("poisson", eval_n=4)
    net = pinn.make_network("mlp", depth=1, width=4)
    opt = optax.adam(1e-3)
    with pytest.raises(ValueError, match="weighting"):
        pinn.make_pinn_step(net, prob, opt, weighting="softadapt")
    with pytest.raises(ValueError, match="causal_tol"):
        pinn.make_pinn_step(net, prob, opt, causal_tol=1.0)
    with pytest.raises(ValueError, match="batch_size"):
        pinn.train(prob, net, key, num_steps=1, batch_size=0, optimizer=opt)
