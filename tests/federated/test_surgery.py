"""RPGrad (FedGCM), PCGrad, FedGCM grouping and the FedGCM server step (jaxpapers.federated)."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxpapers import federated as fl

# Most checks call jitted functions: one compilation per shape instead of one per eager op (eager
# float64 dispatch of every primitive costs seconds on a busy 2-core machine). Eager == jit is
# checked explicitly in the *_jit_* / *_vmap_* tests.
_rpgrad = jax.jit(fl.rpgrad)
_pcgrad = jax.jit(fl.pcgrad)


def rpgrad_loop(grads, alpha, valid):
    """Row-by-row port of the release's ``project_conflicting`` as the digest describes it."""
    grads = np.asarray(grads, np.float64)
    k = grads.shape[0]
    out = grads.copy()
    for i in range(k):
        if not valid[i]:
            continue
        partners = [j for j in range(k) if j != i and valid[j]]
        if not partners:
            continue
        gi = grads[i]
        ni = np.linalg.norm(gi)
        cos = []
        for j in partners:
            nj = np.linalg.norm(grads[j])
            cos.append(0.0 if ni == 0 or nj == 0 else float(gi @ grads[j]) / (ni * nj + 1e-8))
        e = np.exp(np.array(cos) - max(cos))
        w = e / e.sum()
        acc = np.zeros_like(gi)
        for wj, j in zip(w, partners):
            gj = grads[j].copy()
            d = float(gj @ gi)
            if d < 0 and float(gi @ gi) > 1e-6:
                gj = gj - d / float(gi @ gi) * gi
                assert abs(gj @ gi) <= 1e-10 * max(1.0, np.linalg.norm(grads[j]) * ni)
            acc += wj * gj
        out[i] = gi + alpha * acc
    return out


def _grads(key, k=6, p=9):
    g = np.array(jax.random.normal(key, (k, p), jnp.float64))
    g[1] = -0.8 * g[0] + 0.1 * g[1]  # a strong conflict
    g[2] = 0.0  # a zero row (cosines 0, never projected, never projected off)
    return g


@pytest.mark.parametrize("alpha", [0.0, 0.2, 0.5, 1.7])
def test_rpgrad_matches_loop(key, x64, alpha):
    g = _grads(key)
    valid = np.array([True, True, True, False, True, True])
    g[3] = 123.0  # an invalid (empty) group: never a partner, returned as is
    out = np.asarray(_rpgrad(g, alpha, valid=valid))
    np.testing.assert_allclose(out, rpgrad_loop(g, alpha, valid), rtol=0, atol=1e-10)
    assert np.isfinite(out).all()
    np.testing.assert_array_equal(out[3], g[3])
    all_valid = np.asarray(_rpgrad(g, alpha))
    np.testing.assert_allclose(all_valid, rpgrad_loop(g, alpha, np.ones(6, bool)), atol=1e-10)
    if alpha == 0.0:
        np.testing.assert_array_equal(all_valid, g)


def test_rpgrad_edge_cases(key, x64):
    g = _grads(key, 3, 4)
    # one group: no partner, the row comes back unchanged
    np.testing.assert_array_equal(_rpgrad(g[:1], 0.5), g[:1])
    # only one valid row, or none: unchanged, no NaN
    np.testing.assert_array_equal(_rpgrad(g, 0.5, valid=np.array([False, True, False])), g)
    np.testing.assert_array_equal(_rpgrad(g, 0.5, valid=np.zeros(3, bool)), g)
    # all rows zero
    np.testing.assert_array_equal(_rpgrad(np.zeros((3, 4)), 0.5), np.zeros((3, 4)))
    # a zero partner row adds nothing to row 0; the zero row itself receives row 0 (cos = 0,
    # nothing to project off a zero row)
    z = np.array([[1.0, 0.0], [0.0, 0.0]])
    np.testing.assert_array_equal(_rpgrad(z, 1.0), [[1.0, 0.0], [1.0, 0.0]])


def test_rpgrad_projection_never_adds_conflict(key, x64):
    """Sum_j w_ij G_j' has <., G_i> = sum over unprojected j of w_ij <G_j, G_i> >= 0."""
    for s in range(5):
        g = np.asarray(jax.random.normal(jax.random.fold_in(key, s), (5, 4), jnp.float64))
        out = np.asarray(_rpgrad(g, 1.0))
        added = out - g
        assert np.all(np.einsum("kp,kp->k", added, g) >= -1e-12)
    # two groups in conflict: the added part is exactly the partner projected off G_i: it is
    # orthogonal to G_i and equal to G_j - <G_j, G_i>/|G_i|^2 G_i
    g = np.array([[1.0, 2.0, 0.0, 0.5], [-2.0, 1.0, 3.0, 0.0]]) + np.array([[0.0], [-1.0]])
    assert g[0] @ g[1] < 0
    added = (np.asarray(_rpgrad(g, 0.3)) - g) / 0.3
    for i, j in ((0, 1), (1, 0)):
        np.testing.assert_allclose(added[i] @ g[i], 0.0, atol=1e-12)
        proj = g[j] - (g[j] @ g[i]) / (g[i] @ g[i]) * g[i]
        np.testing.assert_allclose(added[i], proj, atol=1e-12)


def test_rpgrad_jit_vmap_no_retrace(key):
    gs = jax.random.normal(key, (4, 5, 7))
    alphas = jnp.array([0.0, 0.2, 0.5, 1.0])
    valid = jnp.array([[True] * 5, [True, False, True, True, True], [False] * 5, [True] * 5])
    chex.clear_trace_counter()

    @jax.jit
    @chex.assert_max_traces(n=1)
    def f(g, a, v):
        return fl.rpgrad(g, a, valid=v)

    batched = jax.vmap(f)(gs, alphas, valid)  # vmap of the jitted function: its own trace
    for b in range(4):
        eager = fl.rpgrad(gs[b], alphas[b], valid=valid[b])
        ref = rpgrad_loop(np.asarray(gs[b]), float(alphas[b]), np.asarray(valid[b]))
        np.testing.assert_allclose(eager, ref, atol=1e-5)
        np.testing.assert_allclose(batched[b], eager, atol=1e-6, rtol=1e-6)
    chex.clear_trace_counter()
    for b in range(4):  # new values, same shapes: one trace
        np.testing.assert_allclose(f(gs[b], alphas[b], valid[b]),
                                   fl.rpgrad(gs[b], alphas[b], valid=valid[b]), atol=1e-6,
                                   rtol=1e-6)


def test_rpgrad_bad_input():
    g = jnp.ones((3, 2))
    with pytest.raises(ValueError, match="alpha"):
        fl.rpgrad(g, -0.1)
    with pytest.raises(ValueError, match="grads"):
        fl.rpgrad(jnp.ones(3), 0.5)
    with pytest.raises(ValueError, match="grads"):
        fl.rpgrad(g.at[0, 0].set(jnp.nan), 0.5)
    with pytest.raises(ValueError, match="valid"):
        fl.rpgrad(g, 0.5, valid=jnp.ones(2, bool))


def pcgrad_loop(grads, orders):
    grads = np.asarray(grads, np.float64)
    out = grads.copy()
    for i in range(len(grads)):
        v = grads[i].copy()
        for j in orders[i]:
            if j == i:
                continue
            d = v @ grads[j]
            if d < 0:
                v = v - d / (grads[j] @ grads[j]) * grads[j]
        out[i] = v
    return out


def test_pcgrad_matches_loop_and_property(key, x64):
    k1, k2 = jax.random.split(key)
    g = np.array(jax.random.normal(k1, (6, 5), jnp.float64))
    g[3] = 0.0  # a zero row: no projection off it, and it stays zero
    out = np.asarray(_pcgrad(g, k2))
    orders = [np.asarray(jax.random.permutation(k, 6)) for k in jax.random.split(k2, 6)]
    np.testing.assert_allclose(out, pcgrad_loop(g, orders), rtol=0, atol=1e-12)
    for i in range(6):  # after the last projection, no conflict with that row remains
        last = [j for j in orders[i] if j != i][-1]
        assert out[i] @ g[last] >= -1e-12
    np.testing.assert_array_equal(out[3], 0.0)
    # two tasks: each projected gradient is orthogonal to, or agrees with, the other task
    two = np.array([[1.0, 0.5], [-1.0, 1.0]])
    o2 = np.asarray(_pcgrad(two, k2))
    assert o2[0] @ two[1] >= -1e-12 and o2[1] @ two[0] >= -1e-12
    np.testing.assert_allclose(o2[0], two[0] - (two[0] @ two[1]) / 2.0 * two[1], atol=1e-12)


def test_pcgrad_vmap_and_bad_input(key):
    k1, k2 = jax.random.split(key)
    gs = jax.random.normal(k1, (3, 4, 5))
    keys = jax.random.split(k2, 3)
    batched = jax.jit(jax.vmap(fl.pcgrad))(gs, keys)
    for b in range(3):  # jit(vmap) == eager loop
        np.testing.assert_allclose(batched[b], fl.pcgrad(gs[b], keys[b]), atol=1e-6, rtol=1e-6)
    with pytest.raises(ValueError, match="grads"):
        fl.pcgrad(jnp.ones(3), k1)
    with pytest.raises(TypeError, match="key"):
        fl.pcgrad(jnp.ones((2, 3)), jax.random.PRNGKey(0))


def test_group_clients(key, x64):
    s = np.asarray(jax.random.uniform(key, (20,), jnp.float64)) * 3.0 - 1.0
    for k in (1, 2, 4, 7):
        ref = np.minimum(np.floor((s - s.min()) / (s.max() - s.min() + 1e-9) * k), k - 1)
        out = fl.group_clients(s, num_groups=k)
        np.testing.assert_array_equal(out, ref.astype(np.int32))
        assert out.dtype == jnp.int32
    assert int(fl.group_clients(s, num_groups=4)[np.argmax(s)]) == 3  # max -> the last group
    np.testing.assert_array_equal(fl.group_clients(np.full(5, 0.3), num_groups=4), 0)
    np.testing.assert_array_equal(jax.jit(lambda x: fl.group_clients(x, num_groups=4))(s),
                                  fl.group_clients(s, num_groups=4))
    with pytest.raises(ValueError, match="num_groups"):
        fl.group_clients(s, num_groups=0)
    with pytest.raises(TypeError, match="num_groups"):
        fl.group_clients(s, num_groups=2.0)
    with pytest.raises(ValueError, match="stats"):
        fl.group_clients(np.array([0.0, np.nan]), num_groups=2)


def _local_models(key, c):
    k1, k2 = jax.random.split(key)
    return {"w": jax.random.normal(k1, (c, 3, 2), jnp.float64),
            "b": jax.random.normal(k2, (c, 2), jnp.float64)}


def test_fedgcm_alpha0_one_group_is_fedavg(key, x64):
    k1, k2 = jax.random.split(key)
    c, lr = 5, 0.037
    w_local = _local_models(k1, c)
    w = jax.tree.map(lambda x: x[0], _local_models(k2, 1))
    n = jnp.array([30.0, 12.0, 50.0, 7.0, 21.0])  # node counts

    @jax.jit
    def server(w, w_local, n, lr, alpha):
        updates = jax.tree.map(lambda g, l: (g[None] - l) / lr, w, w_local)  # (w - w_local)/lr
        G = fl.flatten(fl.fedavg(updates, n))[None]  # [1, P]
        new = fl.fedgcm_server_step(jax.tree.map(lambda x: x[None], w), G, lr, alpha)
        return jax.tree.map(lambda x: x[0], new)

    new = server(w, w_local, n, lr, 0.0)
    chex.assert_trees_all_close(new, fl.fedavg(w_local, n), atol=1e-12, rtol=0)
    # alpha does not matter with a single group (no partner)
    chex.assert_trees_all_equal(server(w, w_local, n, lr, 0.9), new)


def test_fedgcm_server_step_groups(key, x64):
    k1, k2 = jax.random.split(key)
    c, k, lr = 6, 3, 0.05
    w_local = _local_models(k1, c)
    w_groups = _local_models(k2, k)
    gid = jnp.array([0, 2, 0, 2, 0, 2])  # group 1 empty
    n = jnp.arange(1.0, 7.0)

    @jax.jit
    def server(w_groups, w_local, alpha):
        w_of_client = jax.tree.map(lambda g: g[gid], w_groups)
        updates = jax.tree.map(lambda g, l: (g - l) / lr, w_of_client, w_local)
        mean_upd, sums = fl.grouped_average(updates, gid, n, num_groups=k)
        G = jax.vmap(fl.flatten)(mean_upd)
        new = fl.fedgcm_server_step(w_groups, G, lr, alpha, valid=sums > 0)
        return new, G, sums > 0, fl.grouped_average(w_local, gid, n, num_groups=k)[0]

    # alpha = 0: FedAvg inside each group; the empty group keeps its parameters
    new, G, valid, avg = server(w_groups, w_local, 0.0)
    np.testing.assert_array_equal(valid, [True, False, True])
    for g in (0, 2):
        chex.assert_trees_all_close(jax.tree.map(lambda x: x[g], new),
                                    jax.tree.map(lambda x: x[g], avg), atol=1e-12, rtol=0)
    chex.assert_trees_all_equal(jax.tree.map(lambda x: x[1], new),
                                jax.tree.map(lambda x: x[1], w_groups))
    # alpha > 0: w - lr * rpgrad (loop reference); eager == jit
    flat_groups = np.stack([np.asarray(fl.flatten(jax.tree.map(lambda x: x[g], w_groups)))
                            for g in range(k)])
    for alpha in (0.2, 0.5):
        out = server(w_groups, w_local, alpha)[0]
        ref = flat_groups - lr * rpgrad_loop(np.asarray(G), alpha, np.asarray(valid))
        ref[1] = flat_groups[1]
        np.testing.assert_allclose(jax.vmap(fl.flatten)(out), ref, atol=1e-12)
    eager = fl.fedgcm_server_step(w_groups, G, lr, 0.5, valid=valid)
    chex.assert_trees_all_close(eager, out, atol=1e-12, rtol=0)
    with pytest.raises(ValueError, match="group_grads"):
        fl.fedgcm_server_step(w_groups, G[:, :-1], lr, 0.5)
