"""Risk-sensitive distributional search: reduction to scalar search, exact CVaR choices."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxpapers.search as js
from jaxpapers.search import risk


def _scalar_and_risk(key, batch=16, num_actions=3, nq=4, dim=6):
    kw, ke, kl, kv = jax.random.split(key, 4)
    W = jax.random.normal(kw, (num_actions, dim, dim)) / np.sqrt(dim)
    P = jax.random.normal(kl, (dim, num_actions))
    v = jax.random.normal(kv, (dim,))

    def step(action, emb):
        new = jnp.tanh(jnp.einsum("bij,bj->bi", W[action], emb) + 0.1)
        return new, jnp.sin(3 * new[:, 0]), new @ P, new @ v

    def rec(params, k, action, emb):
        new, r, logits, val = step(action, emb)
        return js.RecurrentFnOutput(reward=r, discount=jnp.full(r.shape, 0.9), prior_logits=logits,
                                    value=val), new

    def rec_q(params, k, action, emb):  # point-mass quantiles of the same model
        new, r, logits, val = step(action, emb)
        rep = lambda x: jnp.repeat(x[:, None], nq, 1)
        return js.RiskRecurrentFnOutput(reward=rep(r), discount=jnp.full(r.shape, 0.9),
                                        prior_logits=logits, value=rep(val)), new

    emb = jax.random.normal(ke, (batch, dim))
    root = js.RootFnOutput(prior_logits=emb @ P, value=emb @ v, embedding=emb)
    root_q = js.RiskRootFnOutput(prior_logits=emb @ P,
                                 value=jnp.repeat((emb @ v)[:, None], nq, 1), embedding=emb,
                                 return_history=jnp.zeros((batch, nq)),
                                 root_discount=jnp.ones(batch))
    return root, rec, root_q, rec_q


@pytest.mark.parametrize("kind", [pytest.param("gumbel", marks=pytest.mark.slow), "muzero"])
def test_mean_utility_on_point_masses_equals_scalar_search(key, x64, kind):
    """Degenerate quantiles + mean utility: Q_risk(s, a) = r + gamma v(child) of the scalar tree."""
    k1, k2 = jax.random.split(key)
    root, rec, root_q, rec_q = _scalar_and_risk(k1)
    cast = lambda t: jax.tree.map(lambda x: x.astype(jnp.float64)
                                  if jnp.issubdtype(x.dtype, jnp.floating) else x, t)
    root, root_q = cast(root), cast(root_q)
    if kind == "gumbel":
        a = js.gumbel_muzero_policy(None, k2, root, rec, 24)
        b = js.risk_gumbel_muzero_policy(None, k2, root_q, rec_q, 24, num_samples=8)
    else:
        a = js.muzero_policy(None, k2, root, rec, 24, dirichlet_fraction=0.0)
        b = js.risk_muzero_policy(None, k2, root_q, rec_q, 24, num_samples=8,
                                  dirichlet_fraction=0.0)
    np.testing.assert_array_equal(a.search_tree.children_visits, b.search_tree.children_visits)
    np.testing.assert_allclose(a.action_weights, b.action_weights, atol=1e-9)
    np.testing.assert_allclose(a.search_tree.summary().qvalues,
                               b.search_tree.children_values[:, 0], atol=1e-9)
    np.testing.assert_allclose(a.search_tree.node_values[:, 0], b.search_tree.node_values[:, 0],
                               atol=1e-9)


def _bandit(nq=16):
    tau = (np.arange(nq) + 0.5) / nq
    safe = np.full(nq, 1.0)
    risky = np.where(tau < 0.2, -20.0, 6.0)  # quantile function of a two-point law

    def rec(params, k, action, emb):
        b = action.shape[0]
        r = jnp.where(action[:, None] == 0, jnp.asarray(safe), jnp.asarray(risky))
        return js.RiskRecurrentFnOutput(reward=r, discount=jnp.zeros(b),
                                        prior_logits=jnp.zeros((b, 2)),
                                        value=jnp.zeros((b, nq))), emb

    root = js.RiskRootFnOutput(prior_logits=jnp.zeros((4, 2)), value=jnp.zeros((4, nq)),
                               embedding=jnp.zeros((4, 1)), return_history=jnp.zeros((4, nq)),
                               root_discount=jnp.ones(4))
    return rec, root, tau, safe, risky


def test_cvar_and_mean_choose_differently_with_exact_values(key):
    rec, root, tau, safe, risky = _bandit()
    m = 4096
    util = risk.make_utility("cvar", 0.25)
    out_c = js.risk_gumbel_muzero_policy(None, key, root, rec, 8, utility_fn=util,
                                         num_samples=m, stratified=True, gumbel_scale=0.0)
    out_m = js.risk_gumbel_muzero_policy(None, key, root, rec, 8, num_samples=m,
                                         stratified=True, gumbel_scale=0.0)
    assert np.all(np.asarray(out_c.action) == 0) and np.all(np.asarray(out_m.action) == 1)
    # Q(risky) is the utility of the linearly interpolated quantile function (quadrature ref.)
    u = (np.arange(200_000) + 0.5) / 200_000
    x = np.interp(u, tau, risky)
    cv_ref = np.sort(x)[: len(x) // 4].mean()
    q_c = np.asarray(out_c.search_tree.children_values[:, 0, 1])
    q_m = np.asarray(out_m.search_tree.children_values[:, 0, 1])
    np.testing.assert_allclose(q_c, cv_ref, atol=0.05)   # stratified: O(1/M) error
    np.testing.assert_allclose(q_m, x.mean(), atol=0.02)
    np.testing.assert_allclose(np.asarray(out_c.search_tree.children_values[:, 0, 0]), 1.0)


def test_history_shifts_and_jit_vmap(key):
    rec, root, *_ = _bandit()
    util = risk.make_utility("cvar", 0.25)
    f = jax.jit(lambda k, r: js.risk_gumbel_muzero_policy(None, k, r, rec, 8, utility_fn=util,
                                                          num_samples=256).search_tree)
    t0 = f(key, root)
    t1 = f(key, root.replace(return_history=root.return_history + 5.0))
    # CVaR is translation equivariant; a point-mass history shifts every utility by exactly 5
    np.testing.assert_allclose(t1.node_values, t0.node_values + 5.0 * (t0.node_visits > 0),
                               atol=1e-4)
    assert f._cache_size() == 1
    keys = jax.random.split(key, 3)
    vm = jax.vmap(lambda k: f(k, root).node_values)(keys)
    for i in range(3):
        np.testing.assert_array_equal(vm[i], f(keys[i], root).node_values)


def test_bad_inputs(key):
    rec, root, *_ = _bandit()
    with pytest.raises(ValueError, match="num_simulations"):
        js.risk_gumbel_muzero_policy(None, key, root, rec, 0)
    with pytest.raises(ValueError, match="return_history"):
        js.risk_gumbel_muzero_policy(None, key, root.replace(return_history=jnp.zeros((4, 3))),
                                     rec, 4)
    with pytest.raises(ValueError, match="alpha"):
        js.risk_gumbel_muzero_policy(None, key, root, rec, 4,
                                     utility_fn=risk.make_utility("cvar", 1.5))
    with pytest.raises(ValueError, match="prior_logits"):
        js.risk_gumbel_muzero_policy(
            None, key, root.replace(prior_logits=root.prior_logits.at[1, 1].set(jnp.nan)), rec, 4)
