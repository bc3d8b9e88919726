"""Flower integration: our ClientApp under Flower's FedAvg == vmapped local_train + fedavg.

The Flower run starts Ray (two client actors, each its own process with its own JAX), so this file
takes ~20-40 s on 2 busy cores. The loss, the data function and the constants live at module level:
Ray pickles them by reference and each actor imports this module, which keeps its compiled step
across rounds.
"""

from __future__ import annotations

import functools
import os
import re
import time

import numpy as np
import pytest

# Flower's telemetry (an HTTPS post per run) is read when flwr is first imported.
os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
pytest.importorskip("flwr")
pytest.importorskip("ray")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from jaxpapers.federated import fedavg, local_train  # noqa: E402
from jaxpapers.federated.flower import (arrays_to_params, make_client_app,  # noqa: E402
                                        make_server_app, params_to_arrays, run_simulation)

SIZES = (5, 9, 14)  # examples per client: the FedAvg weights
NUM_FEATURES = 3
NUM_ROUNDS = 2
NUM_STEPS = 4
LEARNING_RATE = 0.05
NOISE = 0.1  # weight of the key-dependent term in the loss (checks the per-client/round keys)


def _client_data(partition_id: int):
    """Client ``partition_id``'s least-squares data, unpadded, and its example count."""
    rng = np.random.default_rng(100 + partition_id)
    n = SIZES[partition_id]
    x = rng.normal(size=(n, NUM_FEATURES)).astype(np.float32)
    w_true = rng.normal(size=NUM_FEATURES).astype(np.float32) + partition_id  # heterogeneous
    y = (x @ w_true + 0.5 + 0.1 * rng.normal(size=n)).astype(np.float32)
    return {"x": x, "y": y, "mask": np.ones(n, np.float32)}, n


def _loss(params, data, key):
    """Masked mean squared error of a linear model, plus a random linear term drawn from key."""
    r = data["x"] @ params["w"] + params["b"] - data["y"]
    mse = jnp.sum(data["mask"] * r**2) / jnp.sum(data["mask"])
    return mse + NOISE * jnp.dot(jax.random.normal(key, params["w"].shape), params["w"])


def _padded_stack():
    """All clients' data padded to the largest client (mask 0 on padding), stacked: [C, N, ...]."""
    n_max = max(SIZES)

    def pad(a):
        return np.pad(a, [(0, n_max - a.shape[0])] + [(0, 0)] * (a.ndim - 1))

    datas = [_client_data(p)[0] for p in range(len(SIZES))]
    return jax.tree.map(lambda *leaves: jnp.stack([pad(a) for a in leaves]), *datas)


@jax.jit
def _vmapped_fedavg(params, key, weights):
    """NUM_ROUNDS of FedAvg with all clients in one vmapped local_train per round."""
    train = jax.vmap(functools.partial(local_train, loss_fn=_loss, num_steps=NUM_STEPS),
                     in_axes=(None, 0, 0, None))
    data = _padded_stack()
    ids = jnp.arange(len(SIZES))
    for server_round in range(1, NUM_ROUNDS + 1):
        round_key = jax.random.fold_in(key, server_round)
        # client p's key in round r: fold_in(fold_in(key, r), p), as in make_client_app
        keys = jax.vmap(lambda p, rk=round_key: jax.random.fold_in(rk, p))(ids)
        stacked, _ = train(params, data, keys, LEARNING_RATE)
        params = fedavg(stacked, weights)
    return params


def _ray_children() -> list[str]:
    """Command lines of this process's descendants that belong to Ray."""
    psutil = pytest.importorskip("psutil")
    out = []
    for child in psutil.Process().children(recursive=True):
        try:
            argv = child.cmdline()
        except psutil.Error:  # exited meanwhile
            continue
        # a ``python -c SOURCE ARGS`` child is judged by its interpreter only: its source and
        # arguments are data (a pooled sandbox worker started by another test in this process
        # carries this process's sys.path in its settings, which can name folders under ray/)
        if "-c" in argv:
            argv = argv[:argv.index("-c")]
        cmd = " ".join(argv)
        # Ray's own processes (raylet, gcs_server, "ray::" workers, files under a ray/ folder);
        # not any command line that merely contains the letters (e.g. "array" in a -c source)
        if re.search(r"(^|[\s/])(ray|raylet|gcs_server)(\s|$|\.py)|ray::|/ray/", cmd):
            out.append(cmd)
    return out


def test_flower_fedavg_equals_vmapped_fedavg(key):
    import ray

    init = {"b": jnp.zeros((), jnp.float32), "w": jnp.zeros(NUM_FEATURES, jnp.float32)}
    weights = jnp.asarray(SIZES, jnp.float32)
    expected = _vmapped_fedavg(init, key, weights)

    results = []
    client = make_client_app(_client_data, template=init, key=key, loss_fn=_loss,
                             num_steps=NUM_STEPS, learning_rate=LEARNING_RATE)
    server = make_server_app(init, num_rounds=NUM_ROUNDS, num_clients=len(SIZES),
                             on_result=results.append)
    run_simulation(client, server, num_clients=len(SIZES))

    assert len(results) == 1
    got = results[0]
    assert jax.tree.structure(got) == jax.tree.structure(init)
    for g, e in zip(jax.tree.leaves(got), jax.tree.leaves(expected)):
        assert g.dtype == e.dtype == jnp.float32
        # float32: the two paths differ only in summation order (vmapped vs per-client matmuls,
        # padded rows, Flower's arrival-order sum): a few ulp of O(1) values, far below 1e-6
        np.testing.assert_allclose(np.asarray(g), np.asarray(e), rtol=0, atol=1e-6)

    # the comparison can tell the weighting and the keys apart: equal weights or a wrong key
    # move the result by far more than the tolerance
    unweighted = _vmapped_fedavg(init, key, jnp.ones(len(SIZES)))
    other_key = _vmapped_fedavg(init, jax.random.fold_in(key, 7), weights)
    for alt in (unweighted, other_key):
        diff = max(float(jnp.max(jnp.abs(a - e)))
                   for a, e in zip(jax.tree.leaves(alt), jax.tree.leaves(expected)))
        assert diff > 1e-3
    # and training did something: the global model moved away from zeros
    assert float(jnp.abs(got["b"])) > 1e-2

    # Flower shut Ray down and no Ray process outlives the run
    assert not ray.is_initialized()
    deadline = time.monotonic() + 15.0
    while (left := _ray_children()) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not left, left


def test_bad_arguments_and_wire_format(key):
    init = {"b": jnp.zeros(()), "w": jnp.arange(3.0)}
    arrays = params_to_arrays(init)
    assert [a.shape for a in arrays] == [(), (3,)]  # jax.tree_util leaf order: b, w
    back = arrays_to_params(init, [a + 1 for a in arrays])
    np.testing.assert_array_equal(np.asarray(back["w"]), [1.0, 2.0, 3.0])

    with pytest.raises(ValueError, match="bfloat16"):
        params_to_arrays({"w": jnp.ones(2, jnp.bfloat16)})
    with pytest.raises(ValueError, match=r"leaf \['w'\] must have shape \(3,\)"):
        arrays_to_params(init, [arrays[0], np.zeros(4)])
    with pytest.raises(ValueError, match="one array per template leaf"):
        arrays_to_params(init, arrays[:1])
    with pytest.raises(ValueError, match="num_rounds"):
        make_server_app(init, num_rounds=0, num_clients=3)
    with pytest.raises(ValueError, match="fraction_train"):
        make_server_app(init, num_rounds=1, num_clients=3, fraction_train=0.0)
    with pytest.raises(ValueError, match="learning_rate"):
        make_client_app(_client_data, template=init, key=key, loss_fn=_loss, num_steps=1,
                        learning_rate=-1.0)
    with pytest.raises(ValueError, match="loss_fn"):
        make_client_app(_client_data, template=init, key=key, loss_fn=None, num_steps=1,
                        learning_rate=0.1)
    server = make_server_app(init, num_rounds=1, num_clients=3)
    with pytest.raises(ValueError, match=r"num_clients \(3\)"):
        run_simulation(None, server, num_clients=2)  # would otherwise wait forever for a node
