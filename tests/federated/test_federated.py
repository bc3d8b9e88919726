"""Aggregation, sampling, local training and client mapping (jaxpapers.federated)."""

import functools

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxpapers import federated as fl


def _stack(key, c, dtype=jnp.float32):
    ka, kb = jax.random.split(key)
    return {"a": jax.random.normal(ka, (c, 3, 2), dtype), "b": jax.random.normal(kb, (c,), dtype)}


# ---------------------------------------------------------------------------------- aggregation
def test_fedavg_matches_numpy_and_normalises_weights(key, x64):
    k1, k2 = jax.random.split(key)
    stacked = _stack(k1, 5, jnp.float64)
    w = np.asarray(jax.random.uniform(k2, (5,), jnp.float64)) + 0.1
    out = fl.fedavg(stacked, w)
    p = w / w.sum()
    for name, leaf in stacked.items():
        ref = sum(p[c] * np.asarray(leaf[c]) for c in range(5))
        np.testing.assert_allclose(out[name], ref, rtol=0, atol=1e-14)
        assert out[name].dtype == jnp.float64
    scaled = fl.fedavg(stacked, 7.0 * w)  # only the ratios matter
    chex.assert_trees_all_close(scaled, out, atol=1e-14, rtol=0)
    # integer sample counts work; zero weights drop clients
    one = fl.fedavg(stacked, np.array([0, 0, 3, 0, 0]))
    chex.assert_trees_all_close(one, jax.tree.map(lambda x: x[2], stacked), atol=0, rtol=0)


def test_fedavg_jit_vmap_no_retrace(key):
    k1, k2 = jax.random.split(key)
    stacked = _stack(k1, 4)
    ws = jax.random.uniform(k2, (3, 4)) + 0.1
    chex.clear_trace_counter()
    f = jax.jit(chex.assert_max_traces(fl.fedavg, n=1))
    batched = jax.vmap(fl.fedavg, in_axes=(None, 0))(stacked, ws)
    for i in range(3):
        eager = fl.fedavg(stacked, ws[i])
        chex.assert_trees_all_close(f(stacked, ws[i]), eager, atol=1e-6, rtol=1e-6)
        chex.assert_trees_all_close(jax.tree.map(lambda x: x[i], batched), eager, atol=1e-6,
                                    rtol=1e-6)


@pytest.mark.parametrize("weights, match", [
    (np.array([1.0, -1.0, 1.0]), "weights"),
    (np.array([1.0, np.nan, 1.0]), "weights"),
    (np.array([1.0, 1.0]), r"weights must have shape \[C\] = \(3,\)"),
    (np.zeros(3), "weights must have a positive sum"),
    (np.ones((3, 1)), "weights must have"),
])
def test_fedavg_bad_weights(weights, match):
    with pytest.raises(ValueError, match=match):
        fl.fedavg({"w": jnp.ones((3, 2))}, weights)


def test_fedavg_bad_stack():
    with pytest.raises(ValueError, match="stacked_params"):
        fl.fedavg({"w": jnp.ones((3, 2)), "s": jnp.ones(())}, jnp.ones(3))


def test_grouped_average_matches_loop_with_empty_group(key, x64):
    k1, k2, k3 = jax.random.split(key, 3)
    c, k = 7, 4
    stacked = _stack(k1, c, jnp.float64)
    gid = np.array([0, 2, 0, 3, 2, 0, 3])  # group 1 is empty
    w = np.asarray(jax.random.uniform(k2, (c,), jnp.float64)) + 0.1
    w[6] = 0.0  # a zero weight client
    means, sums = fl.grouped_average(stacked, jnp.asarray(gid), w, num_groups=k)
    for name, leaf in stacked.items():
        leaf = np.asarray(leaf)
        for g in range(k):
            members = gid == g
            if members.any():
                ref = np.tensordot(w[members], leaf[members], axes=1) / w[members].sum()
            else:
                ref = np.zeros(leaf.shape[1:])
            np.testing.assert_allclose(means[name][g], ref, rtol=0, atol=1e-14)
    np.testing.assert_allclose(sums, [w[gid == g].sum() for g in range(k)], atol=1e-14)
    assert not any(np.isnan(np.asarray(x)).any() for x in jax.tree.leaves(means))
    # one group == FedAvg; jit == eager
    one, _ = jax.jit(functools.partial(fl.grouped_average, num_groups=1))(
        stacked, jnp.zeros(c, jnp.int32), w)
    chex.assert_trees_all_close(jax.tree.map(lambda x: x[0], one), fl.fedavg(stacked, w),
                                atol=1e-14, rtol=0)


def test_grouped_average_bad_input():
    s = {"w": jnp.ones((3, 2))}
    with pytest.raises(ValueError, match="num_groups"):
        fl.grouped_average(s, jnp.zeros(3, jnp.int32), jnp.ones(3), num_groups=0)
    with pytest.raises(ValueError, match="group_ids"):
        fl.grouped_average(s, jnp.array([0, 1, 2]), jnp.ones(3), num_groups=2)
    with pytest.raises(ValueError, match="weights"):
        fl.grouped_average(s, jnp.zeros(3, jnp.int32), -jnp.ones(3), num_groups=2)


def test_fedprox_penalty_and_flatten_roundtrip(key, x64):
    k1, k2 = jax.random.split(key)
    p = jax.tree.map(lambda x: x[0], _stack(k1, 1, jnp.float64))
    a = jax.tree.map(lambda x: x[0], _stack(k2, 1, jnp.float64))
    vec, avec = fl.flatten(p), fl.flatten(a)
    assert vec.shape == (7,)
    np.testing.assert_allclose(fl.fedprox_penalty(p, a, 0.3),
                               0.15 * np.sum((np.asarray(vec) - np.asarray(avec)) ** 2),
                               rtol=1e-14)
    chex.assert_trees_all_equal(fl.unflatten_like(p, vec), p)
    stacked = _stack(k1, 3, jnp.float64)
    mat = jax.vmap(fl.flatten)(stacked)  # [K, P] and back
    back = jax.vmap(lambda v: fl.unflatten_like(p, v))(mat)
    chex.assert_trees_all_equal(back, stacked)
    with pytest.raises(ValueError, match="vec"):
        fl.unflatten_like(p, jnp.zeros(6))
    with pytest.raises(ValueError, match="mu"):
        fl.fedprox_penalty(p, a, -1.0)


# ------------------------------------------------------------------------------------- sampling
def test_sample_clients_deterministic_distinct_and_jittable(key):
    k1, k2 = jax.random.split(key)
    a, b = fl.sample_clients(k1, 20, 6), fl.sample_clients(k1, 20, 6)
    np.testing.assert_array_equal(a, b)
    assert a.dtype == jnp.int32 and a.shape == (6,)
    assert len(set(a.tolist())) == 6 and a.min() >= 0 and a.max() < 20
    assert np.all(np.diff(np.asarray(a)) > 0)
    keys = jax.random.split(k2, 50)
    many = jax.jit(jax.vmap(lambda k: fl.sample_clients(k, 20, 6)))(keys)
    np.testing.assert_array_equal(many[3], fl.sample_clients(keys[3], 20, 6))
    # each client is drawn with probability 6/20: 300 draws, 15 expected per client, and every
    # client appears (P(a given client never drawn in 50 rounds) = 0.7^50 ~ 2e-8)
    counts = np.bincount(np.asarray(many).ravel(), minlength=20)
    assert counts.min() > 0
    with pytest.raises(ValueError, match="num_sampled"):
        fl.sample_clients(key, 4, 5)
    with pytest.raises(TypeError, match="key"):
        fl.sample_clients(jax.random.PRNGKey(0), 4, 2)


def _ids(indices, mask, n):
    """Client id of every sample from (indices, mask); -1 if unassigned, -2 if assigned twice."""
    out = np.full(n, -1)
    for c in range(indices.shape[0]):
        for i in indices[c][mask[c]]:
            out[i] = c if out[i] == -1 else -2
    return out


def test_dirichlet_partition(key):
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 5, 600)
    k1, k2 = jax.random.split(key)
    idx, mask = fl.dirichlet_partition(k1, labels, num_clients=8, alpha=0.3, min_size=10)
    idx2, mask2 = fl.dirichlet_partition(k1, labels, num_clients=8, alpha=0.3, min_size=10)
    np.testing.assert_array_equal(idx, idx2)
    np.testing.assert_array_equal(mask, mask2)
    assert idx.dtype == np.int32 and mask.dtype == bool and idx.shape == mask.shape
    assert idx.shape[0] == 8 and idx.shape[1] == mask.sum(1).max()
    part = _ids(idx, mask, 600)
    assert part.min() >= 0  # every index in exactly one client
    sizes = np.bincount(part, minlength=8)
    assert sizes.sum() == 600 and sizes.min() >= 10
    assert not np.array_equal(idx, fl.dirichlet_partition(k2, labels, num_clients=8, alpha=0.3,
                                                          min_size=10)[0])

    def skew(alpha):  # mean over clients of the share of their largest class
        shares = []
        for s in range(5):
            p = _ids(*fl.dirichlet_partition(jax.random.key(s), labels, num_clients=8,
                                             alpha=alpha, min_size=5), 600)
            for c in range(8):
                y = labels[p == c]
                shares.append(np.bincount(y, minlength=5).max() / max(len(y), 1))
        return np.mean(shares)

    # alpha -> infinity gives IID clients (largest share ~ 1/5 + noise); alpha = 0.1 gives nearly
    # one class per client (largest share near 1)
    assert skew(0.1) > 0.6 > 0.35 > skew(1000.0)
    with pytest.raises(ValueError, match="alpha"):
        fl.dirichlet_partition(key, labels, num_clients=8, alpha=0.0)
    with pytest.raises(ValueError, match="alpha"):
        fl.dirichlet_partition(key, labels, num_clients=8, alpha=-1.0)
    with pytest.raises(ValueError, match="min_size"):
        fl.dirichlet_partition(key, labels, num_clients=8, alpha=0.5, min_size=100)
    with pytest.raises(ValueError, match="labels"):
        fl.dirichlet_partition(key, labels.reshape(2, -1), num_clients=8, alpha=0.5)


def test_dirichlet_partition_large_alpha_matches_the_global_label_distribution(key):
    """alpha = 1e4: the proportions are ~1/C, so each client gets ~n_y / C of every class up to
    the cut rounding (+-1 per class): per-client TV to the global distribution <= 0.05."""
    labels = np.random.default_rng(1).integers(0, 10, 5000)
    idx, mask = fl.dirichlet_partition(key, labels, num_clients=10, alpha=1e4)
    glob = np.bincount(labels, minlength=10) / labels.size
    for c in range(10):
        y = labels[idx[c][mask[c]]]
        tv = 0.5 * np.abs(np.bincount(y, minlength=10) / y.size - glob).sum()
        assert tv <= 0.05, (c, tv)


# ------------------------------------------------------------------------------ local training
def _problem(key, n=24, d=3):
    kx, kw = jax.random.split(key)
    x = jax.random.normal(kx, (n, d))
    y = x @ jax.random.normal(kw, (d,)) + 0.5
    return {"x": x, "y": y}


def _dropout_lsq(params, data, key):
    """Least squares with a per-step random row mask (exercises the per-step keys)."""
    keep = jax.random.bernoulli(key, 0.75, data["y"].shape)
    r = data["x"] @ params["w"] + params["b"] - data["y"]
    return jnp.sum(keep * r**2) / data["y"].shape[0]


@pytest.mark.parametrize("clip_norm", [None, 0.5])
def test_local_train_equals_optax_loop(key, clip_norm):
    k1, k2 = jax.random.split(key)
    data = _problem(k1)
    params = {"w": jnp.zeros(3), "b": jnp.zeros(())}
    lr, steps = 0.05, 6
    out, metrics = jax.jit(functools.partial(fl.local_train, loss_fn=_dropout_lsq,
                                             num_steps=steps, clip_norm=clip_norm))(
        params, data, k2, lr)
    tx = optax.adam(lr)
    if clip_norm is not None:
        tx = optax.chain(optax.clip_by_global_norm(clip_norm), tx)
    p, state, losses = params, tx.init(params), []
    for k in jax.random.split(k2, steps):
        loss, g = jax.value_and_grad(_dropout_lsq)(p, data, k)
        updates, state = tx.update(g, state, p)
        p = optax.apply_updates(p, updates)
        losses.append(loss)
    chex.assert_trees_all_close(out, p, atol=1e-6, rtol=1e-6)
    np.testing.assert_allclose(metrics["loss"], losses, rtol=1e-6)
    assert float(metrics["loss"][-1]) < float(metrics["loss"][0])


def test_local_train_lr_does_not_recompile(key):
    k1, k2 = jax.random.split(key)
    data = _problem(k1)
    params = {"w": jnp.zeros(3), "b": jnp.zeros(())}
    chex.clear_trace_counter()

    @jax.jit
    @chex.assert_max_traces(n=1)
    def f(params, data, key, lr):
        return fl.local_train(params, data, key, lr, loss_fn=_dropout_lsq, num_steps=3,
                              clip_norm=5.0)

    for lr in (0.1, 0.01):  # a cosine schedule's next round: same trace, the new rate is used
        out, _ = f(params, data, k2, lr)
        ref, _ = fl.local_train(params, data, k2, lr, loss_fn=_dropout_lsq, num_steps=3,
                                clip_norm=5.0)
        chex.assert_trees_all_close(out, ref, atol=1e-6, rtol=1e-6)
        # Adam moves each coordinate by at most ~lr per step: 3 steps from 0 stay within 3 lr
        assert 0 < np.abs(np.asarray(out["w"])).max() <= 3 * lr * (1 + 1e-5)


def test_proximal_term_pulls_toward_anchor(key, x64):
    params = {"w": jnp.array([1.0, -2.0, 0.5])}
    anchor = {"w": jnp.array([0.0, 0.0, 3.0])}
    zero_loss = lambda p, d, k: 0.0 * jnp.sum(p["w"])  # noqa: E731
    lr = 0.01

    def run(mu, steps):
        return fl.local_train(params, None, key, lr, loss_fn=zero_loss, num_steps=steps,
                              proximal_mu=mu, anchor=anchor)[0]["w"]

    # only the proximal gradient mu (w - anchor) acts: Adam's first step is lr * sign toward it
    # (|m_hat / sqrt(v_hat)| = |g| / (|g| + 1e-8))
    d = np.asarray(params["w"] - anchor["w"])
    np.testing.assert_allclose(run(2.0, 1), params["w"] - lr * np.sign(d), atol=1e-8)
    np.testing.assert_array_equal(run(0.0, 1), params["w"])  # mu = 0: no pull at all
    # mu traced (vmapped): a larger mu keeps the data loss's minimiser closer to the anchor
    data = {"x": jnp.eye(3), "y": jnp.array([5.0, 5.0, 5.0])}
    lsq = lambda p, d, k: jnp.sum((d["x"] @ p["w"] - d["y"]) ** 2)  # noqa: E731
    mus = jnp.array([0.0, 1.0, 10.0])
    ws = jax.jit(jax.vmap(lambda mu: fl.local_train(params, data, key, 0.1, loss_fn=lsq,
                                                    num_steps=200, proximal_mu=mu,
                                                    anchor=anchor)[0]["w"]))(mus)
    dist = np.linalg.norm(np.asarray(ws) - np.asarray(anchor["w"]), axis=1)
    assert dist[0] > dist[1] > dist[2]
    # the minimiser of |w - y|^2 + mu/2 |w - a|^2 is (2 y + mu a) / (2 + mu)
    np.testing.assert_allclose(ws[2], (2 * 5.0 + 10.0 * anchor["w"]) / 12.0, atol=1e-2)


def test_local_train_bad_input(key):
    loss = lambda p, d, k: jnp.sum(p**2)  # noqa: E731
    with pytest.raises(ValueError, match="num_steps"):
        fl.local_train(jnp.ones(2), None, key, 0.1, loss_fn=loss, num_steps=0)
    with pytest.raises(ValueError, match="learning_rate"):
        fl.local_train(jnp.ones(2), None, key, -0.1, loss_fn=loss, num_steps=1)
    with pytest.raises(ValueError, match="clip_norm"):
        fl.local_train(jnp.ones(2), None, key, 0.1, loss_fn=loss, num_steps=1, clip_norm=0.0)
    with pytest.raises(ValueError, match="proximal_mu"):
        fl.local_train(jnp.ones(2), None, key, 0.1, loss_fn=loss, num_steps=1, proximal_mu=-1.0)
    with pytest.raises(ValueError, match="anchor"):
        fl.local_train(jnp.ones(2), None, key, 0.1, loss_fn=loss, num_steps=1,
                       proximal_mu=1.0, anchor={"w": jnp.ones(2)})


# ----------------------------------------------------------------------------------- client_map
def _clients(key, c):
    kp, kd, kk = jax.random.split(key, 3)
    data = jax.vmap(_problem)(jax.random.split(kd, c))
    params = {"w": 0.1 * jax.random.normal(kp, (c, 3)), "b": jnp.zeros((c,))}
    return params, data, jax.random.split(kk, c)


def _train(p, d, k, lr):
    return fl.local_train(p, d, k, lr, loss_fn=_dropout_lsq, num_steps=3, clip_norm=5.0)


def test_client_map_vmap_equals_loop(key):
    params, data, keys = _clients(key, 3)
    out, m = jax.jit(fl.client_map(_train, in_axes=(0, 0, 0, None)))(params, data, keys, 0.05)
    assert m["loss"].shape == (3, 3)
    for c in range(3):
        one = jax.tree.map(lambda x: x[c], (params, data, keys))
        ref, _ = _train(*one, 0.05)
        chex.assert_trees_all_close(jax.tree.map(lambda x: x[c], out), ref, atol=1e-6,
                                    rtol=1e-6)


def test_client_map_sharded_equals_vmapped(key, num_devices):
    mesh = jax.make_mesh((num_devices,), ("clients",),
                         axis_types=(jax.sharding.AxisType.Auto,))
    params, data, keys = _clients(key, 2 * num_devices)
    plain = jax.jit(fl.client_map(_train, in_axes=(0, 0, 0, None)))(params, data, keys, 0.05)
    sharded_fn = jax.jit(fl.client_map(_train, mesh=mesh, in_axes=(0, 0, 0, None)))
    sharded = sharded_fn(params, data, keys, 0.05)
    chex.assert_trees_all_close(sharded, plain, atol=1e-6, rtol=1e-6)
    assert len(sharded[0]["w"].sharding.device_set) == num_devices
    # all arguments mapped (in_axes=0), learning rate per client
    lrs = jnp.full((2 * num_devices,), 0.05)
    again = fl.client_map(_train, mesh=mesh)(params, data, keys, lrs)
    chex.assert_trees_all_close(again, plain, atol=1e-6, rtol=1e-6)
    odd = jax.tree.map(lambda x: x[:num_devices + 1], (params, data, keys))
    with pytest.raises(ValueError, match="divisible"):
        fl.client_map(_train, mesh=mesh, in_axes=(0, 0, 0, None))(*odd, 0.05)
    with pytest.raises(ValueError, match="axis_name"):
        fl.client_map(_train, mesh=mesh, axis_name="data")
