"""jaxpapers.graph: float64 dense references, padding, jit/vmap, CSBM statistics, bad input."""

from __future__ import annotations

import itertools
import math

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxpapers import graph as gr
from jaxpapers.core import data

# --------------------------------------------------------------------------- helpers


def padded_graph(rng, *, n_slots=12, n_real=9, e_real=30, e_slots=44, symmetric=False):
    """A Graph with real nodes scattered among padded slots, one isolated real node, multi-edges
    and self loops, padded edge slots with random ids, and a few edges with edge_mask True that
    touch a padded node (these must be ignored everywhere). Built directly, not by from_edges."""
    real_ids = np.sort(rng.choice(n_slots, n_real, replace=False))
    pad_ids = np.setdiff1d(np.arange(n_slots), real_ids)
    linked = real_ids[1:]  # real_ids[0] stays isolated
    half = e_real // 2 if symmetric else e_real
    s, r = rng.choice(linked, half), rng.choice(linked, half)
    if symmetric:
        s, r = np.concatenate([s, r]), np.concatenate([r, s])
    n_bad = 4  # mask True, but one end is a padded node
    bad_s, bad_r = rng.choice(pad_ids, n_bad), rng.choice(linked, n_bad)
    n_pad = e_slots - len(s) - n_bad
    senders = np.concatenate([s, bad_s, rng.integers(0, n_slots, n_pad)])
    receivers = np.concatenate([r, bad_r, rng.integers(0, n_slots, n_pad)])
    edge_mask = np.arange(e_slots) < len(s) + n_bad
    perm = rng.permutation(e_slots)
    node_mask = np.isin(np.arange(n_slots), real_ids)
    g = gr.Graph(jnp.asarray(senders[perm], jnp.int32), jnp.asarray(receivers[perm], jnp.int32),
                 jnp.asarray(edge_mask[perm]), jnp.asarray(node_mask), n_slots)
    return g, node_mask


def dense_adjacency(g):
    """A[r, s] = number of real edges s -> r (numpy float64)."""
    s, r = np.asarray(g.senders), np.asarray(g.receivers)
    nm = np.asarray(g.node_mask)
    real = np.asarray(g.edge_mask) & nm[s] & nm[r]
    a = np.zeros((g.num_nodes, g.num_nodes))
    np.add.at(a, (r[real], s[real]), 1.0)
    return a


def features(rng, node_mask, d=5):
    """Random features; padded rows hold NaN, which must never leak into real outputs."""
    x = rng.normal(size=(len(node_mask), d))
    x[~node_mask] = np.nan
    return x


def np_gcn(a, node_mask, x, loops):
    at = a + np.diag(node_mask.astype(float)) if loops else a
    d = at.sum(1)
    dinv = np.where(d > 0, 1.0 / np.sqrt(np.where(d > 0, d, 1.0)), 0.0)
    return (dinv[:, None] * at * dinv[None, :]) @ np.nan_to_num(x)


def np_hfe(a, node_mask, x, normalized, centered):
    x = np.where(node_mask[:, None], x, 0.0)
    raw = (x * x).sum(0)
    n = node_mask.sum()
    if centered:
        x = np.where(node_mask[:, None], x - x.sum(0) / n, 0.0)
    d = a.sum(1)
    if normalized:
        dp = np.where(d > 0, 1.0 / np.sqrt(np.where(d > 0, d, 1.0)), 0.0)
        lap = np.diag((d > 0).astype(float)) - dp[:, None] * a * dp[None, :]
    else:
        lap = np.diag(d) - a
    num, den = np.einsum("ic,ij,jc->c", x, lap, x), (x * x).sum(0)
    keep = den > (n * np.finfo(float).eps) ** 2 * raw
    return float(np.mean(num[keep] / den[keep])) if keep.any() else 0.0


def stack(trees):
    return jax.tree.map(lambda *a: jnp.stack(a), *trees)


# --------------------------------------------------------------------------- building


def test_from_edges_padding_masks_and_edits():
    g = gr.from_edges(np.array([0, 1, 2, 3]), [1, 2, 0, 0], num_nodes=5, max_edges=7,
                      node_mask=jnp.array([True, True, True, False, True]))
    assert g.senders.dtype == jnp.int32 and g.senders.shape == (7,) and g.num_nodes == 5
    # the edge 3 -> 0 touches a padded node: masked off like the padding
    assert g.edge_mask.tolist() == [True, True, True, False, False, False, False]
    a = np.asarray(gr.to_dense(g))
    want = np.zeros((5, 5))
    want[1, 0] = want[2, 1] = want[0, 2] = 1.0
    np.testing.assert_array_equal(a, want)
    np.testing.assert_array_equal(gr.degree(g), want.sum(1))
    np.testing.assert_array_equal(gr.degree(g, direction="out"), want.sum(0))
    sg = gr.symmetrize(g)
    assert sg.senders.shape == (14,)
    np.testing.assert_array_equal(gr.to_dense(sg), want + want.T)
    lg = gr.add_self_loops(g)
    assert lg.senders.shape == (12,)
    np.testing.assert_array_equal(gr.to_dense(lg), want + np.diag([1.0, 1, 1, 0, 1]))
    x = np.arange(10.0).reshape(5, 2)
    np.testing.assert_array_equal(gr.sum_aggregate(g, x), want @ x)


@pytest.mark.parametrize("kwargs, match", [
    (dict(senders=[0, 3], receivers=[1, 0], num_nodes=3), "senders .*>= num_nodes"),
    (dict(senders=[0, 1], receivers=[1, 5], num_nodes=3), "receivers .*>= num_nodes"),
    (dict(senders=[0, -1], receivers=[1, 0], num_nodes=3), "senders must be >= 0"),
    (dict(senders=[[0, 1]], receivers=[1, 0], num_nodes=3), "senders must be a 1-D"),
    (dict(senders=[0.0, 1.0], receivers=[1, 0], num_nodes=3), "senders must hold integer"),
    (dict(senders=[0, 1], receivers=[1, 0, 2], num_nodes=3), "senders and receivers"),
    (dict(senders=[0], receivers=[0], num_nodes=0), "num_nodes"),
    (dict(senders=[0, 1], receivers=[1, 0], num_nodes=3, max_edges=1), "max_edges"),
    (dict(senders=[0], receivers=[1], num_nodes=3, node_mask=[True, False]), "node_mask"),
])
def test_from_edges_bad_input(kwargs, match):
    s, r = kwargs.pop("senders"), kwargs.pop("receivers")
    with pytest.raises(ValueError, match=match):
        gr.from_edges(s, r, **kwargs)


def test_other_bad_input(key):
    g = gr.from_edges([0, 1], [1, 2], num_nodes=3)
    with pytest.raises(ValueError, match="x must have shape"):
        gr.gcn_propagate(g, jnp.ones((4, 2)))
    with pytest.raises(ValueError, match="unbatched"):
        gr.mean_aggregate(stack([g, g]), jnp.ones((3, 2)))
    with pytest.raises(ValueError, match="direction"):
        gr.degree(g, direction="both")
    with pytest.raises(ValueError, match="key"):
        gr.high_frequency_energy(g, jnp.ones((3, 4)), normalized=True, centered=True,
                                 feature_fraction=0.5)
    with pytest.raises(ValueError, match="feature_fraction"):
        gr.high_frequency_energy(g, jnp.ones((3, 4)), normalized=True, centered=True,
                                 feature_fraction=0.0, key=key)
    with pytest.raises(ValueError, match="k must be <= 2"):
        gr.knn_interpolate(jnp.ones((2, 1)), jnp.zeros((2, 3)), jnp.zeros((4, 3)), k=3)
    with pytest.raises(ValueError, match="homophily"):
        gr.csbm(key, num_nodes=20, num_classes=2, num_features=2, homophily=1.5, mean_degree=2.0)
    with pytest.raises(ValueError, match="mean_degree"):
        gr.csbm(key, num_nodes=20, num_classes=2, num_features=2, homophily=0.9, mean_degree=12.0)
    with pytest.raises(ValueError, match="name must be one of .*karate_club"):
        data.networkx_graph("karate")


# --------------------------------------------------------------------------- dense references


@pytest.mark.parametrize("seed", [0, 1])
def test_propagation_matches_dense_float64(x64, seed):
    rng = np.random.default_rng(seed)
    g, node_mask = padded_graph(rng)
    a = dense_adjacency(g)
    x = features(rng, node_mask)
    np.testing.assert_array_equal(gr.to_dense(g), a)
    for loops in (True, False):
        got = np.asarray(gr.gcn_propagate(g, x, add_self_loops=loops))
        np.testing.assert_allclose(got, np_gcn(a, node_mask, x, loops), rtol=0, atol=1e-10)
    deg = a.sum(1, keepdims=True)
    want_mean = a @ np.nan_to_num(x) / np.maximum(deg, 1.0)
    np.testing.assert_allclose(gr.mean_aggregate(g, x), want_mean, rtol=0, atol=1e-10)
    np.testing.assert_allclose(gr.sum_aggregate(g, x), a @ np.nan_to_num(x), rtol=0, atol=1e-10)


@pytest.mark.parametrize("normalized, centered", list(itertools.product([False, True], repeat=2)))
def test_high_frequency_energy_matches_dense_float64(x64, normalized, centered):
    rng = np.random.default_rng(7)
    g, node_mask = padded_graph(rng, symmetric=True)
    for graph in (g, gr.add_self_loops(g)):
        a = dense_adjacency(graph)
        assert np.array_equal(a, a.T)
        x = features(rng, node_mask, d=6)
        got = float(gr.high_frequency_energy(graph, x, normalized=normalized, centered=centered))
        want = np_hfe(a, node_mask, x, normalized, centered)
        assert abs(got - want) <= 1e-10, (got, want)
        assert 0.0 < got <= (2.0 if normalized else 2.0 * a.sum(1).max())


def test_high_frequency_energy_skips_empty_columns_and_samples_columns(x64, key):
    rng = np.random.default_rng(3)
    g, node_mask = padded_graph(rng, symmetric=True)
    a = dense_adjacency(g)
    col = features(rng, node_mask, d=1)
    const = np.where(node_mask, 0.1, np.nan)[:, None]  # centring leaves rounding noise only
    x = np.concatenate([col, np.zeros_like(col), const], axis=1)
    hfe = lambda x, **kw: float(gr.high_frequency_energy(g, x, **kw))
    for normalized in (False, True):
        assert hfe(x, normalized=normalized, centered=True) == pytest.approx(
            hfe(col, normalized=normalized, centered=True), abs=1e-12)
        assert hfe(np.zeros_like(x), normalized=normalized, centered=False) == 0.0
    # D - A annihilates constants on each component: the uncentred constant column scores 0
    assert hfe(x, normalized=False, centered=False) == pytest.approx(
        np_hfe(a, node_mask, x, False, False), abs=1e-12)
    # feature_fraction 0.5 of 6 columns: the mean over some 3-subset of the column quotients
    x = features(rng, node_mask, d=6)
    q = [np_hfe(a, node_mask, x[:, [c]], True, True) for c in range(6)]
    means = [np.mean([q[c] for c in sub]) for sub in itertools.combinations(range(6), 3)]
    f = jax.jit(jax.vmap(lambda k: gr.high_frequency_energy(
        g, x, normalized=True, centered=True, feature_fraction=0.5, key=k)))
    got = np.asarray(f(jax.random.split(key, 6)))
    for v in got:
        assert np.min(np.abs(np.asarray(means) - v)) <= 1e-10
    assert len(np.unique(np.round(got, 12))) > 1  # different keys pick different columns


def test_knn_interpolate_matches_brute_force(x64):
    rng = np.random.default_rng(5)
    s, t, k = 20, 7, 4
    pos_src, pos_dst = rng.normal(size=(s, 2)), rng.normal(size=(t, 2))
    pos_dst[0] = pos_src[3]  # an exact hit: weight 1e16 on source 3
    x = rng.normal(size=(s, 3))
    mask = rng.random(s) < 0.75
    mask[3] = True
    x[~mask] = np.nan

    def brute(mask, k):
        out = np.zeros((t, 3))
        for i in range(t):
            d2 = ((pos_src - pos_dst[i]) ** 2).sum(1)
            idx = [j for j in np.argsort(d2, kind="stable") if mask[j]][:k]
            w = 1.0 / np.maximum(d2[idx], 1e-16)
            out[i] = (w[:, None] * x[idx]).sum(0) / w.sum()
        return out

    got = gr.knn_interpolate(x, pos_src, pos_dst, k=k, src_mask=jnp.asarray(mask))
    np.testing.assert_allclose(got, brute(mask, k), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got[0], x[3], rtol=1e-12)
    few = np.zeros(s, bool)
    few[[1, 3, 8]] = True  # fewer real sources than k: only they count
    x[[1, 8]] = rng.normal(size=(2, 3))
    got = gr.knn_interpolate(x, pos_src, pos_dst, k=k, src_mask=jnp.asarray(few))
    np.testing.assert_allclose(got, brute(few, k), rtol=1e-12, atol=1e-12)
    none = gr.knn_interpolate(x, pos_src, pos_dst, k=k, src_mask=jnp.zeros(s, bool))
    np.testing.assert_array_equal(none, 0.0)


# --------------------------------------------------------------------------- jit / vmap


def _random_batch(rng, b, n=10, e=24):
    graphs, xs = [], []
    for _ in range(b):
        m = int(rng.integers(8, e // 2))
        s, r = rng.integers(0, n - 2, m), rng.integers(0, n - 2, m)
        node_mask = np.arange(n) < n - int(rng.integers(0, 3))
        g = gr.symmetrize(gr.from_edges(s, r, num_nodes=n, max_edges=e // 2,
                                        node_mask=node_mask))
        graphs.append(g)
        xs.append(jnp.asarray(rng.normal(size=(n, 4)), jnp.float32))
    return graphs, xs


def _all_ops(g, x):
    return (gr.gcn_propagate(g, x), gr.mean_aggregate(g, x), gr.sum_aggregate(g, x),
            gr.degree(g), gr.edge_homophily(g, (x[:, 0] > 0).astype(jnp.int32)),
            gr.high_frequency_energy(gr.add_self_loops(g), x, normalized=True, centered=True),
            gr.high_frequency_energy(g, x, normalized=False, centered=False))


def test_jit_equals_eager_vmap_equals_loop_no_recompile():
    rng = np.random.default_rng(0)
    graphs, xs = _random_batch(rng, 3)
    chex.clear_trace_counter()
    f = jax.jit(jax.vmap(chex.assert_max_traces(_all_ops, n=1)))
    batched = f(stack(graphs), jnp.stack(xs))
    single = jax.jit(_all_ops)
    for i, (g, x) in enumerate(zip(graphs, xs)):
        jitted = single(g, x)
        chex.assert_trees_all_close(jitted, jax.tree.map(lambda v: v[i], batched), rtol=1e-6,
                                    atol=1e-6)
        if i == 0:
            chex.assert_trees_all_close(_all_ops(g, x), jitted, rtol=1e-6, atol=1e-6)
    graphs2, xs2 = _random_batch(rng, 3)  # new edges, masks and features; same shapes
    again = f(stack(graphs2), jnp.stack(xs2))
    assert not np.allclose(again[0], batched[0])


def test_mpnn_block_masks_jit_vmap(key):
    rng = np.random.default_rng(1)
    n, e, f_in, f_e, hidden = 7, 12, 3, 2, 8
    s, r = rng.integers(0, n, e), rng.integers(0, n, e)
    x = jnp.asarray(rng.normal(size=(n, f_in)), jnp.float32)
    ef = jnp.asarray(rng.normal(size=(e, f_e)), jnp.float32)
    g0 = gr.from_edges(s, r, num_nodes=n)
    block = gr.MPNNBlock(hidden=hidden, center_nodes=True, center_messages=True, layer_norm=True)
    params = jax.jit(block.init)(key, g0, x, ef)  # eager Flax init compiles op by op: slow
    apply = jax.jit(block.apply)
    x0, e0 = block.apply(params, g0, x, ef)  # eager
    assert x0.shape == (n, hidden) and e0.shape == (e, hidden)
    np.testing.assert_allclose(np.mean(np.asarray(x0), 0), 0.0, atol=1e-5)  # centred nodes

    # the same graph padded to 10 nodes / 18 edge slots, garbage in every padded slot, and one
    # edge with edge_mask True into a padded node: real outputs must not move (jitted == eager)
    n1, e1 = 10, 18
    g1 = gr.Graph(jnp.asarray(np.concatenate([s, [8, 0, 9, 9, 7, 1]]), jnp.int32),
                  jnp.asarray(np.concatenate([r, [0, 9, 9, 3, 8, 2]]), jnp.int32),
                  jnp.asarray(np.arange(e1) < e + 2),
                  jnp.asarray(np.arange(n1) < n), n1)
    x1 = jnp.concatenate([x, 1e3 * jnp.ones((n1 - n, f_in))])
    e1f = jnp.concatenate([ef, -1e3 * jnp.ones((e1 - e, f_e))])
    x1_out, e1_out = apply(params, g1, x1, e1f)
    np.testing.assert_allclose(x1_out[:n], x0, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(e1_out[:e], e0, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(x1_out[n:], 0.0)
    np.testing.assert_array_equal(e1_out[e:], 0.0)

    # vmap over a batch of padded graphs == loop
    g2 = g1.replace(senders=g1.senders[::-1], receivers=g1.receivers[::-1])
    xs, es = jnp.stack([x1, x1[::-1] * 0.5]), jnp.stack([e1f, e1f[::-1]])
    vout = jax.jit(jax.vmap(block.apply, in_axes=(None, 0, 0, 0)))(params, stack([g1, g2]), xs,
                                                                     es)
    for i, g in enumerate((g1, g2)):
        chex.assert_trees_all_close(jax.tree.map(lambda v: v[i], vout),
                                    apply(params, g, xs[i], es[i]), rtol=1e-5, atol=1e-5)


def test_mpnn_block_center_aggregate_matches_numpy_float64(x64, key):
    """center_aggregate centres the summed messages over real nodes (SuperMeshNet's ib_e), not
    the messages over edges; padding (a padded node, an edge into it, padded edge slots) is
    ignored."""
    rng = np.random.default_rng(2)
    n, e, f_in, hidden = 6, 14, 3, 5
    s, r = rng.integers(0, n - 1, e), rng.integers(0, n - 1, e)  # node n - 1 is padding
    s[-1], r[-1] = 0, n - 1  # a real-masked edge into the padded node: ignored
    s[-2], r[-2] = 1, 2  # a padded edge slot
    g = gr.Graph(jnp.asarray(s, jnp.int32), jnp.asarray(r, jnp.int32),
                 jnp.asarray(np.arange(e) != e - 2), jnp.asarray(np.arange(n) < n - 1), n)
    x = rng.normal(size=(n, f_in))
    x[-1] = 1e3
    block = gr.MPNNBlock(hidden=hidden, num_layers=2, center_aggregate=True,
                         activation=jax.nn.relu)
    params = jax.jit(block.init)(key, g, x)
    got, _ = jax.jit(block.apply)(params, g, x)
    p = jax.tree.map(np.asarray, params["params"])

    def mlp(q, v):
        v = np.maximum(v @ q["Dense_0"]["kernel"] + q["Dense_0"]["bias"], 0.0)
        return v @ q["Dense_1"]["kernel"] + q["Dense_1"]["bias"]

    real = np.arange(e) < e - 2
    xr = x[:n - 1]
    m = mlp(p["edge_mlp"], np.concatenate([xr[s[real]], xr[r[real]]], 1))
    agg = np.zeros((n - 1, hidden))
    np.add.at(agg, r[real], m)
    agg -= agg.mean(0)  # over real nodes, after the sum
    want = mlp(p["node_mlp"], np.concatenate([xr, agg], 1)) + xr @ p["node_skip"]["kernel"]
    np.testing.assert_allclose(got[:n - 1], want, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(got[n - 1], 0.0)
    # not the same as centring the messages over edges (in-degrees differ), and off by default
    other = gr.MPNNBlock(hidden=hidden, num_layers=2, center_messages=True,
                         activation=jax.nn.relu)
    assert not np.allclose(jax.jit(other.apply)(params, g, x)[0], got)
    plain = gr.MPNNBlock(hidden=hidden, num_layers=2, activation=jax.nn.relu)
    agg0 = np.zeros((n - 1, hidden))
    np.add.at(agg0, r[real], m)
    want0 = mlp(p["node_mlp"], np.concatenate([xr, agg0], 1)) + xr @ p["node_skip"]["kernel"]
    np.testing.assert_allclose(jax.jit(plain.apply)(params, g, x)[0][:n - 1], want0, rtol=1e-12,
                               atol=1e-12)


# --------------------------------------------------------------------------- CSBM


def test_csbm_statistics_and_determinism(key):
    n, c, d, k = 600, 3, 4, 8.0
    means = jax.random.normal(jax.random.key(1), (c, d))
    sample = jax.jit(lambda key, h: gr.csbm(key, num_nodes=n, num_classes=c, num_features=d,
                                            homophily=h, mean_degree=k, class_means=means))
    for h in (0.7, 0.2):
        g, x, y = sample(key, h)
        s, r, m = (np.asarray(v) for v in (g.senders, g.receivers, g.edge_mask))
        s, r = s[m], r[m]
        pairs = set(zip(s.tolist(), r.tolist()))
        assert len(pairs) == len(s)  # no duplicates
        assert pairs == set(zip(r.tolist(), s.tolist()))  # symmetric
        assert not np.any(s == r)  # no self loops
        # M undirected edges: a sum of independent Bernoullis, mean N k / 2 (C divides N),
        # variance below the mean; the same-class share is a binomial share of M
        num_pairs = len(s) // 2
        sd_deg = 2.0 * math.sqrt(n * k / 2) / n
        assert abs(2 * num_pairs / n - k) <= 4 * sd_deg
        hom = float(gr.edge_homophily(g, y))
        assert abs(hom - h) <= 4 * math.sqrt(h * (1 - h) / num_pairs)
        assert np.bincount(np.asarray(y), minlength=c).tolist() == [n // c] * c  # balanced
        # features: class means plus unit noise; 200 rows per class
        for cls in range(c):
            got = np.asarray(x)[np.asarray(y) == cls].mean(0)
            np.testing.assert_array_less(np.abs(got - np.asarray(means[cls])),
                                         4.5 / math.sqrt(n / c))
    chex.assert_trees_all_equal(sample(key, 0.2), (g, x, y))  # same key, same graph
    # vmap over keys and homophily == loop (eager sampling runs in the doctest: compiling it op
    # by op here would cost more than the rest of this test)
    keys, hs = jax.random.split(key, 2), jnp.array([0.7, 0.2])
    batched = jax.jit(jax.vmap(sample))(keys, hs)
    for i in range(2):
        one = sample(keys[i], hs[i])
        chex.assert_trees_all_equal(jax.tree.map(lambda v: v[i], batched[0]), one[0])
        chex.assert_trees_all_close(jax.tree.map(lambda v: v[i], batched[1:]), one[1:],
                                    rtol=1e-6, atol=1e-6)


# --------------------------------------------------------------------------- networkx


def test_networkx_karate_club():
    s, r, n, attrs = data.networkx_graph("karate_club")
    assert n == 34 and len(s) == 156 and s.dtype == np.int32
    assert set(zip(s.tolist(), r.tolist())) == set(zip(r.tolist(), s.tolist()))
    assert len({(min(a, b), max(a, b)) for a, b in zip(s, r)}) == 78
    club = attrs["club"]
    assert club.shape == (34,) and np.bincount(club).tolist() == [17, 17]
    assert club[0] == 0 and club[33] == 1  # Mr. Hi's and the officer's own nodes
    g = gr.from_edges(s, r, num_nodes=n)
    deg = np.asarray(gr.degree(g))
    assert deg[0] == 16 and deg[33] == 17 and deg.sum() == 156
    assert 0.5 < float(gr.edge_homophily(g, club)) < 1.0
