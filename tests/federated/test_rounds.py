"""grouped_rounds: FedAvg, local training and FedGCM's server as one scan, against plain loops."""

import functools

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxpapers import federated as fl

C, D, R, STEPS, LR = 4, 3, 3, 2, 0.1


def _loss(params, data, key):
    noise = 0.01 * jax.random.normal(key, data["t"].shape)  # uses the key: order matters
    return jnp.sum((data["x"] @ params["w"] + params["b"] - data["t"] - noise) ** 2)


def _eval(params, data):
    return {"err": jnp.sum((data["x"] @ params["w"] + params["b"] - data["t"]) ** 2)}


def _data(key):
    kx, kt = jax.random.split(key)
    return {"x": jax.random.normal(kx, (C, 5, D)), "t": jax.random.normal(kt, (C, 5))}


def _init(k):
    return {"w": jnp.zeros((k, D)), "b": jnp.zeros((k,))}


def _reference(init, data, key, group_ids, weights, alpha, mu=0.0):
    """Round by round in Python: local_train per client, per-group means, fedgcm_server_step."""
    params = init
    k = jax.tree.leaves(init)[0].shape[0]
    hist = []
    for r in range(R):
        key, k_clients, _ = jax.random.split(key, 3)
        lr = LR * 0.5 * (1 + np.cos(np.pi * r / R))
        keys = jax.random.split(k_clients, C)
        uploads = []
        for c in range(C):
            start = jax.tree.map(lambda a: a[group_ids[c]], params)
            cd = jax.tree.map(lambda a: a[c], data)
            local, _ = fl.local_train(start, cd, keys[c], lr, loss_fn=_loss, num_steps=STEPS,
                                      proximal_mu=mu)
            uploads.append((fl.flatten(start) - fl.flatten(local)) / lr)
        uploads = jnp.stack(uploads)
        means, sums = fl.grouped_average(uploads, jnp.asarray(group_ids), weights, num_groups=k)
        params = fl.fedgcm_server_step(params, means, lr, alpha, valid=sums > 0)
        hist.append([float(_eval(jax.tree.map(lambda a: a[group_ids[c]], params),
                                 jax.tree.map(lambda a: a[c], data))["err"]) for c in range(C)])
    return params, np.array(hist)


@pytest.mark.parametrize("groups,alpha", [((0, 1, 2, 3), 0.0), ((0, 0, 1, 2), 0.7)])
def test_equals_round_by_round_loop(key, groups, alpha):
    data = _data(key)
    w = jnp.array([1.0, 2.0, 3.0, 4.0])
    k = max(groups) + 1 if alpha == 0.0 else 4  # K = 4 with an empty group
    run_key = jax.random.key(7)
    params, hist = fl.grouped_rounds(_init(k), data, run_key, LR, alpha, 0.0,
                                     jnp.asarray(groups), w, loss_fn=_loss, eval_fn=_eval,
                                     num_rounds=R, local_steps=STEPS)
    ref_params, ref_hist = _reference(_init(k), data, run_key, np.asarray(groups), w, alpha)
    chex.assert_trees_all_close(params, ref_params, atol=1e-5, rtol=1e-5)
    np.testing.assert_allclose(hist["err"], ref_hist, rtol=1e-4, atol=1e-5)
    assert hist["loss"].shape == (R, C)


def test_one_group_is_fedavg_of_the_local_models(key):
    """K = 1: after each round the model is the weighted mean of the clients' local models."""
    data = _data(key)
    w = jnp.array([1.0, 0.0, 2.0, 5.0])
    run_key = jax.random.key(3)
    params, _ = fl.grouped_rounds(_init(1), data, run_key, LR, 0.5, 0.0,
                                  jnp.zeros(C, jnp.int32), w, loss_fn=_loss, eval_fn=_eval,
                                  num_rounds=R, local_steps=STEPS)
    model = jax.tree.map(lambda a: a[0], _init(1))
    k = run_key
    for r in range(R):
        k, k_clients, _ = jax.random.split(k, 3)
        lr = LR * 0.5 * (1 + np.cos(np.pi * r / R))
        locals_ = [fl.local_train(model, jax.tree.map(lambda a: a[c], data), kc, lr,
                                  loss_fn=_loss, num_steps=STEPS)[0]
                   for c, kc in enumerate(jax.random.split(k_clients, C))]
        model = fl.fedavg(jax.tree.map(lambda *a: jnp.stack(a), *locals_), w)
    chex.assert_trees_all_close(jax.tree.map(lambda a: a[0], params), model, atol=1e-5,
                                rtol=1e-5)


def test_vmap_over_methods_equals_loop_and_compiles_once(key):
    data = _data(key)
    w = jnp.ones(C)
    run = jax.jit(functools.partial(fl.grouped_rounds, loss_fn=_loss, eval_fn=_eval,
                                    num_rounds=R, local_steps=STEPS))
    gids = jnp.array([[0, 0, 0, 0], [0, 1, 2, 3], [0, 0, 1, 1]])
    alphas = jnp.array([0.0, 0.0, 0.5])
    mus = jnp.array([0.0, 0.01, 0.0])
    batched = jax.vmap(run, in_axes=(None, None, None, None, 0, 0, 0, None))
    pb, hb = batched(_init(C), data, jax.random.key(1), LR, alphas, mus, gids, w)
    for i in range(3):
        pi, hi = run(_init(C), data, jax.random.key(1), LR, alphas[i], mus[i], gids[i], w)
        chex.assert_trees_all_close(jax.tree.map(lambda a: a[i], pb), pi, atol=1e-5, rtol=1e-5)
    n = run._cache_size()
    run(_init(C), data, jax.random.key(2), 0.05, jnp.float32(0.3), jnp.float32(0.0), gids[0], w)
    assert run._cache_size() == n


def test_pcgrad_server_equals_projected_mean_by_hand(key):
    """K = 1: each round the model moves by lr times the weighted mean of PCGrad-projected
    uploads; and with two clients the step never opposes either client's upload."""
    data = _data(key)
    w = jnp.array([1.0, 2.0, 0.5, 1.0])
    run_key = jax.random.key(5)
    params, _ = fl.grouped_rounds(_init(1), data, run_key, LR, 0.0, 0.0,
                                  jnp.zeros(C, jnp.int32), w, loss_fn=_loss, eval_fn=_eval,
                                  num_rounds=R, local_steps=STEPS, server="pcgrad")
    model = jax.tree.map(lambda a: a[0], _init(1))
    k = run_key
    for r in range(R):
        k, k_clients, k_server = jax.random.split(k, 3)
        lr = LR * 0.5 * (1 + np.cos(np.pi * r / R))
        locals_ = [fl.local_train(model, jax.tree.map(lambda a: a[c], data), kc, lr,
                                  loss_fn=_loss, num_steps=STEPS)[0]
                   for c, kc in enumerate(jax.random.split(k_clients, C))]
        up = jnp.stack([(fl.flatten(model) - fl.flatten(p)) / lr for p in locals_])
        proj = np.asarray(fl.pcgrad(up, k_server))
        mean = (np.asarray(w)[:, None] * proj).sum(0) / float(w.sum())
        model = fl.unflatten_like(model, fl.flatten(model) - lr * jnp.asarray(mean))
    chex.assert_trees_all_close(jax.tree.map(lambda a: a[0], params), model, atol=1e-5,
                                rtol=1e-5)
    g = jnp.array([[1.0, 0.0], [-1.0, 1.0]])  # conflicting uploads
    step = np.asarray(fl.pcgrad(g, jax.random.key(0))).mean(0)
    assert np.all(np.asarray(g) @ step >= -1e-6)


def test_pcgrad_server_projects_client_updates(key):
    data = _data(key)
    w = jnp.ones(C)
    p_pc, h_pc = fl.grouped_rounds(_init(1), data, jax.random.key(4), LR, 0.0, 0.0,
                                   jnp.zeros(C, jnp.int32), w, loss_fn=_loss, eval_fn=_eval,
                                   num_rounds=R, local_steps=STEPS, server="pcgrad")
    p_avg, _ = fl.grouped_rounds(_init(1), data, jax.random.key(4), LR, 0.0, 0.0,
                                 jnp.zeros(C, jnp.int32), w, loss_fn=_loss, eval_fn=_eval,
                                 num_rounds=R, local_steps=STEPS)
    assert np.all(np.isfinite(h_pc["err"]))
    assert not np.allclose(np.asarray(p_pc["w"]), np.asarray(p_avg["w"]))


@pytest.mark.parametrize("kw,match", [
    (dict(server="adam"), "server"),
    (dict(group_ids=jnp.array([0, 0, 5, 0])), "group_ids"),
    (dict(weights=jnp.ones(3)), "weights"),
    (dict(alpha=-1.0), "alpha"),
    (dict(num_rounds=0), "num_rounds"),
])
def test_bad_input(key, kw, match):
    args = dict(init_params=_init(2), data=_data(key), key=jax.random.key(0),
                learning_rate=LR, alpha=0.0, proximal_mu=0.0, group_ids=jnp.zeros(C, jnp.int32),
                weights=jnp.ones(C), loss_fn=_loss, eval_fn=_eval, num_rounds=2, local_steps=1)
    args.update(kw)
    with pytest.raises(ValueError, match=match):
        fl.grouped_rounds(**args)
