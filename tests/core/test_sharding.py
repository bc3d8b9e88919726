import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxpapers.core import sharding, train


def _setup(key, batch_size=32):
    kx, kw = jax.random.split(key)
    x = jax.random.normal(kx, (batch_size, 6))
    y = jnp.sin(x.sum(-1))
    params = {"w1": 0.3 * jax.random.normal(kw, (6, 16)), "w2": jnp.zeros((16,))}

    def loss_fn(p, batch, key):
        del key
        h = jnp.tanh(batch["x"] @ p["w1"])
        return jnp.mean((h @ p["w2"] - batch["y"]) ** 2)

    return params, {"x": x, "y": y}, loss_fn


def test_sharded_step_matches_unsharded(key, num_devices):
    params, batch, loss_fn = _setup(key)
    opt = optax.adam(1e-2)
    step = train.make_train_step(loss_fn, opt)
    state = train.init_train_state(params, opt, jax.random.key(1))
    mesh = sharding.data_parallel_mesh()
    assert mesh.shape["data"] == num_devices
    sharded_step = sharding.data_parallel_step(step, mesh)
    s_ref, s_sh = state, sharding.replicate(state, mesh)
    xb = sharding.shard_batch(batch, mesh)
    assert len(xb["x"].sharding.device_set) == num_devices  # really split over devices
    unsharded_step = jax.jit(step)
    for _ in range(3):
        s_ref, m_ref = unsharded_step(s_ref, batch)
        s_sh, m_sh = sharded_step(s_sh, xb)
    for a, b in zip(jax.tree.leaves(s_ref.params), jax.tree.leaves(s_sh.params)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(float(m_ref["loss"]), float(m_sh["loss"]), rtol=1e-5)
    assert s_sh.params["w1"].sharding.is_fully_replicated


def test_shard_batch_rejects_indivisible(key, num_devices):
    _, batch, _ = _setup(key, batch_size=num_devices + 1)
    mesh = sharding.data_parallel_mesh()
    with pytest.raises(ValueError, match=r"\['x'\].*divisible"):
        sharding.shard_batch(batch, mesh)


def test_mesh_rejects_bad_device_count():
    with pytest.raises(ValueError, match="num_devices"):
        sharding.data_parallel_mesh(len(jax.devices()) + 1)


def test_one_process_mesh_and_batch_are_as_before(key, num_devices):
    """With one process: the mesh is the first devices in jax's order, shard_batch is a
    device_put split over them (the global batch is the process's batch)."""
    mesh = sharding.data_parallel_mesh(2)
    assert list(mesh.devices.flat) == jax.devices()[:2]
    _, batch, _ = _setup(key, batch_size=8)
    xb = sharding.shard_batch(batch, mesh)
    np.testing.assert_array_equal(np.asarray(xb["x"]), np.asarray(batch["x"]))
    assert [s.data.shape for s in xb["x"].addressable_shards] == [(4, 6), (4, 6)]
    with pytest.raises(ValueError, match="axis_name must be one of the mesh axes"):
        sharding.shard_batch(batch, mesh, axis_name="model")


def test_replicate_keeps_values_and_key_arrays(key, num_devices):
    mesh = sharding.data_parallel_mesh()
    tree = {"w": jnp.arange(3.0), "k": jax.random.split(key, 2)}
    rep = sharding.replicate(tree, mesh)
    assert rep["w"].sharding.is_fully_replicated and len(rep["w"].sharding.device_set) == num_devices
    np.testing.assert_array_equal(np.asarray(rep["w"]), np.arange(3.0))
    np.testing.assert_array_equal(jax.random.key_data(rep["k"]), jax.random.key_data(tree["k"]))
