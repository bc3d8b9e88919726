"""Pieces of experiments/fedgcm: the karate-club smoke test, Spearman, the best-round metric."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from experiments.fedgcm import config as fc
from experiments.fedgcm import run as fr
from jaxpapers import federated as fl
from jaxpapers import graph as gr
from jaxpapers.core import data as core_data


def _karate_clients(num_clients=3, seed=0):
    """networkx's karate club cut into Louvain communities, one client each, padded alike."""
    import networkx as nx

    s, r, n, attrs = core_data.networkx_graph("karate_club")
    g = nx.Graph()
    g.add_edges_from(zip(s.tolist(), r.tolist()))
    comms = sorted(nx.community.louvain_communities(g, seed=seed), key=min)
    while len(comms) > num_clients:  # merge the two smallest
        comms = sorted(comms, key=len)
        comms = sorted([comms[0] | comms[1]] + comms[2:], key=min)
    n_max = max(len(c) for c in comms)
    e_max = max(sum(1 for a, b in zip(s, r) if a in c and b in c) for c in comms)
    y_all = np.asarray(attrs["club"], np.int32)
    deg = np.bincount(s, minlength=n).astype(np.float32)
    clients = []
    for c in comms:
        nodes = sorted(c)
        idx = {v: i for i, v in enumerate(nodes)}
        es = [(idx[a], idx[b]) for a, b in zip(s.tolist(), r.tolist()) if a in c and b in c]
        mask = np.zeros(n_max, bool)
        mask[:len(nodes)] = True
        graph = gr.from_edges(np.array([e[0] for e in es], np.int32),
                              np.array([e[1] for e in es], np.int32), num_nodes=n_max,
                              max_edges=e_max, node_mask=mask)
        x = np.zeros((n_max, 2), np.float32)
        x[:len(nodes), 0] = deg[nodes] / deg.max()
        x[:len(nodes), 1] = 1.0
        y = np.zeros(n_max, np.int32)
        y[:len(nodes)] = y_all[nodes]
        train = mask & (np.arange(n_max) % 2 == 0)
        test = mask & ~train
        clients.append({"graph": graph, "x": x, "y": y, "train": train, "val": test,
                        "test": test})
    return jax.tree.map(lambda *a: jnp.stack([jnp.asarray(v) for v in a]), *clients), comms


def test_karate_club_in_three_louvain_clients_three_rounds():
    data, comms = _karate_clients()
    assert len(comms) == 3 and sum(len(c) for c in comms) == 34
    stats = fr.statistics(data, jax.random.key(0), fc.tiny())
    assert np.all(np.isfinite(stats["norm"])) and np.all(np.isfinite(stats["official"]))
    groups = fl.group_clients(jnp.asarray(stats["norm"]), num_groups=2)
    params = fr.init_model(jax.random.key(1), 2, 8, 2)
    init = jax.tree.map(lambda a: jnp.broadcast_to(a, (2,) + a.shape), params)
    import functools
    loss = functools.partial(fr._loss, dropout=0.3)
    out = []
    for _ in range(2):  # deterministic
        p, hist = fl.grouped_rounds(init, data, jax.random.key(2), 0.01, 0.5, 0.0, groups,
                                    jnp.sum(data["train"], 1).astype(jnp.float32),
                                    loss_fn=loss, eval_fn=fr._evaluate, num_rounds=3,
                                    local_steps=5, clip_norm=5.0)
        out.append(hist)
    assert out[0]["test"].shape == (3, 3)
    np.testing.assert_array_equal(out[0]["test"], out[1]["test"])
    n_test = np.asarray(jnp.sum(data["test"], 1))
    assert np.all(np.asarray(out[0]["test"]) <= n_test) and np.all(np.isfinite(out[0]["loss"]))


def test_spearman_matches_scipy():
    stats = pytest.importorskip("scipy.stats")
    r = np.random.default_rng(0)
    a = r.integers(0, 5, 20).astype(float)  # ties
    b = a + r.normal(size=20)
    assert abs(fr.spearman(a, b) - stats.spearmanr(a, b).statistic) < 1e-12
    assert fr.spearman(np.arange(5), -np.arange(5)) == pytest.approx(-1.0)


def test_best_round_picks_validation_then_reports_test():
    cfg = fc.tiny()
    data = {"val": jnp.ones((2, 10), bool), "test": jnp.ones((2, 5), bool)}
    hist = {"val": np.array([[5, 5], [9, 8], [9, 8]]), "test": np.array([[1, 1], [2, 5], [5, 5]])}
    acc, acc_low, per_client, r = fr._best_round(hist, data, cfg, np.array([True, False]))
    assert r == 1 and acc == pytest.approx(0.7) and acc_low == pytest.approx(0.4)
    np.testing.assert_allclose(per_client, [0.4, 1.0])
