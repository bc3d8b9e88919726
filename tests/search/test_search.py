"""Scalar MuZero / Gumbel MuZero search: mctx parity, backup identity, brute force, jit/vmap, errors."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxpapers.search as js
from jaxpapers.search import _search as search_lib

B, A, D, S = 64, 5, 8, 32


def _problem(key, out_cls, root_cls, batch=B, num_actions=A, discount=0.9):
    kw, ke, kl, kv = jax.random.split(key, 4)
    params = {"W": jax.random.normal(kw, (num_actions, D, D)) / np.sqrt(D),
              "P": jax.random.normal(kl, (D, num_actions)), "v": jax.random.normal(kv, (D,))}

    def rec(params, key, action, emb):
        new = jnp.tanh(jnp.einsum("bij,bj->bi", params["W"][action], emb) + 0.1)
        out = out_cls(reward=jnp.sin(3 * new[:, 0]), discount=jnp.full(action.shape, discount),
                      prior_logits=new @ params["P"], value=new @ params["v"])
        return out, new

    emb = jax.random.normal(ke, (batch, D))
    root = root_cls(prior_logits=emb @ params["P"], value=emb @ params["v"], embedding=emb)
    return params, root, rec


@pytest.mark.parametrize("policy", ["muzero_policy", "gumbel_muzero_policy"])
def test_matches_mctx(key, policy):
    mctx = pytest.importorskip("mctx")
    kp, ks = jax.random.split(key)
    kw = {"dirichlet_fraction": 0.0} if policy == "muzero_policy" else {}
    p, r, f = _problem(kp, js.RecurrentFnOutput, js.RootFnOutput)
    p2, r2, f2 = _problem(kp, mctx.RecurrentFnOutput, mctx.RootFnOutput)
    ours = jax.jit(lambda k: getattr(js, policy)(p, k, r, f, S, **kw))(ks)
    theirs = jax.jit(lambda k: getattr(mctx, policy)(p2, k, r2, f2, S, **kw))(ks)
    np.testing.assert_allclose(ours.action_weights, theirs.action_weights, atol=1e-5)
    np.testing.assert_array_equal(ours.action, theirs.action)
    np.testing.assert_array_equal(ours.search_tree.children_visits,
                                  theirs.search_tree.children_visits)
    np.testing.assert_allclose(ours.search_tree.node_values, theirs.search_tree.node_values,
                               rtol=1e-5, atol=1e-5)


def test_backup_identity_float64(key, x64):
    """N(s) v(s) = v_raw(s) + sum_a N(s,a) (r(s,a) + discount(s,a) v(child)) at every node."""
    kp, ks = jax.random.split(key)
    p, r, f = _problem(kp, js.RecurrentFnOutput, js.RootFnOutput, batch=8)
    r = jax.tree.map(lambda x: x.astype(jnp.float64), r)
    t = js.gumbel_muzero_policy(p, ks, r, f, 48).search_tree
    nv, raw, n = (np.asarray(t.node_values), np.asarray(t.raw_values), np.asarray(t.node_visits))
    ci, cv, cn = (np.asarray(t.children_index), np.asarray(t.children_values),
                  np.asarray(t.children_visits))
    rew, disc = np.asarray(t.children_rewards), np.asarray(t.children_discounts)
    assert nv.dtype == np.float64
    for b in range(nv.shape[0]):
        for s in range(nv.shape[1]):
            kids = ci[b, s] >= 0
            child_v = np.where(kids, nv[b, np.maximum(ci[b, s], 0)], 0.0)
            np.testing.assert_allclose(cv[b, s][kids], child_v[kids], rtol=1e-12)
            rhs = raw[b, s] + np.sum(cn[b, s] * (rew[b, s] + disc[b, s] * child_v))
            assert n[b, s] == 1 + cn[b, s].sum()
            np.testing.assert_allclose(n[b, s] * nv[b, s], rhs, rtol=1e-10, atol=1e-10)
    assert n[:, 0].min() == 49


def test_finds_brute_force_optimum(key):
    """Depth-3 deterministic trees, 2 actions, 0 beyond the horizon: with 64 simulations the
    greedy Gumbel policy picks the first action of the best path (found by enumeration)."""
    batch, depth = 64, 3
    rewards = jax.random.normal(key, (batch, 2 ** (depth + 1)))  # edge into heap node i

    def rec(params, k, action, node):
        child = 2 * node + 1 + action
        deep = child >= 2 ** depth - 1  # children of leaves: absorbing
        r = jnp.where(node >= 2 ** depth - 1, 0.0, params[jnp.arange(batch), child])
        return js.RecurrentFnOutput(reward=r, discount=jnp.where(deep, 0.0, 1.0),
                                    prior_logits=jnp.zeros((batch, 2)), value=jnp.zeros(batch)), \
            jnp.minimum(child, 2 ** (depth + 1) - 1)

    root = js.RootFnOutput(prior_logits=jnp.zeros((batch, 2)), value=jnp.zeros(batch),
                           embedding=jnp.zeros(batch, jnp.int32))
    out = js.gumbel_muzero_policy(rewards, jax.random.key(1), root, rec, 64, gumbel_scale=0.0)
    rw = np.asarray(rewards)
    best = []
    for b in range(batch):
        vals = {}
        for path in np.ndindex(*(2,) * depth):
            node, tot = 0, 0.0
            for a in path:
                node = 2 * node + 1 + a
                tot += rw[b, node]
            vals[path] = tot
        best.append(max(vals, key=vals.get)[0])
    agree = np.mean(np.asarray(out.action) == np.asarray(best))
    assert agree >= 0.95, agree


def test_jit_eager_vmap_and_no_recompile(key):
    p, r, f = _problem(key, js.RecurrentFnOutput, js.RootFnOutput, batch=4)
    keys = jax.random.split(jax.random.key(3), 3)
    fn = jax.jit(lambda k: js.gumbel_muzero_policy(p, k, r, f, 8).action_weights)
    eager = js.gumbel_muzero_policy(p, keys[0], r, f, 8).action_weights
    np.testing.assert_allclose(fn(keys[0]), eager, atol=1e-6)
    batched = jax.vmap(fn)(keys)
    for i in range(3):
        np.testing.assert_allclose(batched[i], fn(keys[i]), atol=1e-6)
    assert fn._cache_size() == 1  # same seed, same result: tests/test_golden.py (search case)


def test_bad_inputs(key):
    p, r, f = _problem(key, js.RecurrentFnOutput, js.RootFnOutput, batch=2)
    with pytest.raises(ValueError, match="num_simulations"):
        js.muzero_policy(p, key, r, f, 0)
    with pytest.raises(ValueError, match="invalid_actions"):
        js.gumbel_muzero_policy(p, key, r, f, 4, invalid_actions=jnp.zeros((2, A + 1)))
    bad_root = r.replace(prior_logits=r.prior_logits.at[0, 0].set(jnp.nan))
    with pytest.raises(ValueError, match="prior_logits"):
        js.gumbel_muzero_policy(p, key, bad_root, f, 4)

    def wrong_actions(params, k, action, emb):
        out, emb = f(params, k, action, emb)
        return out.replace(prior_logits=out.prior_logits[:, :-1]), emb

    with pytest.raises(ValueError, match="recurrent_fn returned prior_logits"):
        js.muzero_policy(p, key, r, wrong_actions, 4)


def test_considered_visits_table_is_sequential_halving():
    t = search_lib.considered_visits_table(4, 8)
    # 4 actions, 8 simulations: 1 round over 4, then 2 actions repeatedly
    np.testing.assert_array_equal(t[4], [0, 0, 0, 0, 1, 1, 2, 2])
    np.testing.assert_array_equal(t[1], np.arange(8))
