"""Parity with mctx itself: API names and signatures, Tree fields and ``Tree.qvalues``,
``qtransform_by_min_max`` and ``stochastic_muzero_policy`` on shared random inputs.

The model functions read fixed random tables indexed by the embedding (a state id, or an
afterstate id ``state * A + action``), so both libraries see exactly the same model. Seeds derived
from names use ``zlib.crc32``.
"""

import dataclasses
import functools
import inspect
import json
import pathlib
import zlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxpapers.search as js

mctx = pytest.importorskip("mctx")

B, A, C, S, NS = 6, 4, 3, 20, 12  # batch, actions, chance outcomes, simulations, states
TOL = 1e-5


def _seed(name: str) -> int:
    return zlib.crc32(name.encode())


def _tables():
    k = jax.random.split(jax.random.key(_seed("stochastic-tables")), 8)
    return dict(
        logits=jax.random.normal(k[0], (NS, A)),
        value=jax.random.normal(k[1], (NS,)),
        chance_logits=2 * jax.random.normal(k[2], (NS, A, C)),
        afterstate_value=jax.random.normal(k[3], (NS, A)),
        next_state=jax.random.randint(k[4], (NS, A, C), 0, NS),
        reward=jax.random.normal(k[5], (NS, A, C)),
        discount=jnp.where(jax.random.uniform(k[6], (NS, A, C)) < 0.2, 0.0, 0.95),
        states=jax.random.randint(k[7], (B,), 0, NS))


def _model(lib, tables):
    """``(root, decision_fn, chance_fn, invalid_actions)`` built with ``lib``'s output classes."""
    t = tables

    def decision_fn(params, key, action, state):
        del params, key
        out = lib.DecisionRecurrentFnOutput(chance_logits=t["chance_logits"][state, action],
                                            afterstate_value=t["afterstate_value"][state, action])
        return out, state * A + action

    def chance_fn(params, key, outcome, afterstate):
        del params, key
        s, a = afterstate // A, afterstate % A
        nxt = t["next_state"][s, a, outcome]
        out = lib.ChanceRecurrentFnOutput(action_logits=t["logits"][nxt], value=t["value"][nxt],
                                          reward=t["reward"][s, a, outcome],
                                          discount=t["discount"][s, a, outcome])
        return out, nxt

    s = t["states"]
    root = lib.RootFnOutput(prior_logits=t["logits"][s], value=t["value"][s], embedding=s)
    invalid = (jnp.arange(A)[None, :] == (s % A)[:, None]).astype(jnp.float32)  # one per row
    return root, decision_fn, chance_fn, invalid


CONFIGS = {
    # everything away from the defaults: bounded Q-values (qtransform_by_min_max), a depth
    # limit, other PUCT constants, a colder temperature; with Dirichlet noise and invalid actions
    "mixed": dict(max_depth=4, pb_c_init=2.0, dirichlet_alpha=0.5, temperature=0.5,
                  qtransform="min_max"),
    # mctx's defaults (PUCT with parent/sibling normalisation, temperature 1)
    "defaults": dict(),
}


def _policy(lib, config):
    kw = dict(CONFIGS[config])
    if kw.pop("qtransform", None) == "min_max":
        kw["qtransform"] = functools.partial(lib.qtransform_by_min_max, min_value=-3.0,
                                             max_value=3.0)
    root, dfn, cfn, invalid = _model(lib, _tables())

    def run(key, root):
        return lib.stochastic_muzero_policy((), key, root, dfn, cfn, S, invalid, **kw)

    return run, root


def _two_groups(root):
    """[2, B, ...]: the roots and the roots in reverse order."""
    return jax.tree.map(lambda x: jnp.stack([x, jnp.flip(x, 0)]), root)


@functools.lru_cache(maxsize=None)
def _outputs(config):
    """``(ours_fn, roots, keys, ours, theirs)`` on two groups of B roots with two keys: ours is
    ``jit(vmap(policy))`` over the groups (one call), mctx's is jitted and called per group."""
    keys = jax.random.split(jax.random.key(_seed(config)), 2)
    ours, root = _policy(js, config)
    theirs, root_m = _policy(mctx, config)
    roots, roots_m = _two_groups(root), _two_groups(root_m)
    theirs = jax.jit(theirs)
    m = [theirs(keys[g], jax.tree.map(lambda x: x[g], roots_m)) for g in range(2)]
    ours = jax.jit(jax.vmap(ours))
    out = ours(keys, roots)
    return ours, roots, keys, [jax.tree.map(lambda x: x[g], out) for g in range(2)], m


@pytest.mark.parametrize("config", ["mixed", pytest.param("defaults", marks=pytest.mark.slow)])
def test_stochastic_muzero_matches_mctx(config):
    """Equal actions, weights and trees; ours runs vmapped over groups of batches, mctx per group
    (so this is also vmap == loop)."""
    _, _, _, outs, theirs = _outputs(config)
    for ours, theirs in zip(outs, theirs):
        _assert_same_search(ours, theirs)


def _assert_same_search(ours, theirs):
    np.testing.assert_array_equal(ours.action, theirs.action)
    np.testing.assert_allclose(ours.action_weights, theirs.action_weights, atol=TOL)
    t, m = ours.search_tree, theirs.search_tree
    assert t.children_visits.shape == m.children_visits.shape == (B, S + 1, A)
    np.testing.assert_array_equal(t.children_visits[:, 0], m.children_visits[:, 0])
    np.testing.assert_allclose(t.node_values[:, 0], m.node_values[:, 0], atol=TOL, rtol=TOL)
    # the whole tree: topology, counts, values, node kinds, and the meaningful embeddings
    for f in ("node_visits", "parents", "action_from_parent", "children_index",
              "children_visits", "root_invalid_actions"):
        np.testing.assert_array_equal(getattr(t, f), getattr(m, f), err_msg=f)
    for f in ("raw_values", "node_values", "children_values", "children_rewards",
              "children_discounts", "children_prior_logits"):
        np.testing.assert_allclose(getattr(t, f), getattr(m, f), atol=TOL, rtol=TOL, err_msg=f)
    dec = np.asarray(t.embeddings.is_decision_node)
    np.testing.assert_array_equal(dec, m.embeddings.is_decision_node)
    used = np.asarray(t.node_visits) > 0
    np.testing.assert_array_equal(np.where(used & dec, t.embeddings.state_embedding, -1),
                                  np.where(used & dec, m.embeddings.state_embedding, -1))
    np.testing.assert_array_equal(np.where(used & ~dec, t.embeddings.afterstate_embedding, -1),
                                  np.where(used & ~dec, m.embeddings.afterstate_embedding, -1))
    # chance nodes were expanded, and states below them were reached
    assert (~dec & used).any() and (np.asarray(t.parents) > 0).any()


def test_stochastic_jit_no_recompile_and_deterministic():
    fn, roots, keys, outs, _ = _outputs("mixed")
    other = fn(jax.random.split(jax.random.key(_seed("other keys")), 2), roots)
    assert fn._cache_size() == 1  # new keys, same shapes: no recompilation
    assert not np.array_equal(other.action_weights, jnp.stack([o.action_weights for o in outs]))
    again = fn(keys, roots)  # same key, same inputs: bit for bit
    for g in range(2):
        np.testing.assert_array_equal(again.action_weights[g], outs[g].action_weights)
        np.testing.assert_array_equal(again.search_tree.node_values[g],
                                      outs[g].search_tree.node_values)


def _as_mctx_tree(tree):
    return mctx.Tree(**{f.name: getattr(tree, f.name) for f in dataclasses.fields(js.Tree)})


def test_tree_fields_qvalues_and_qtransforms_match_mctx():
    assert ([f.name for f in dataclasses.fields(js.Tree)]
            == [f.name for f in dataclasses.fields(mctx.Tree)])
    assert (js.Tree.ROOT_INDEX, js.Tree.NO_PARENT, js.Tree.UNVISITED) == (
        mctx.Tree.ROOT_INDEX, mctx.Tree.NO_PARENT, mctx.Tree.UNVISITED)
    tree = _outputs("mixed")[3][0].search_tree
    mtree = _as_mctx_tree(tree)
    n = tree.num_simulations + 1
    idx = jax.random.randint(jax.random.key(_seed("qvalues")), (B,), 0, n)
    np.testing.assert_allclose(tree.qvalues(idx), mtree.qvalues(idx), atol=1e-6)
    one, mone = jax.tree.map(lambda x: x[2], tree), jax.tree.map(lambda x: x[2], mtree)
    np.testing.assert_allclose(one.qvalues(3), mone.qvalues(3), atol=1e-6)
    np.testing.assert_allclose(tree.summary().qvalues, mtree.summary().qvalues, atol=1e-6)
    np.testing.assert_allclose(tree.summary().visit_probs, mtree.summary().visit_probs)

    names = {"qtransform_by_min_max": dict(min_value=-2.0, max_value=2.5),
             "qtransform_by_parent_and_siblings": {},
             "qtransform_completed_by_mix_value": dict(value_scale=0.3)}

    @jax.jit
    def every_node(tree, mtree):  # [B, N, A] per transform: all examples, all nodes
        def at(qtransform, t):
            return jax.vmap(jax.vmap(qtransform, (None, 0)), (0, None))(t, jnp.arange(n))
        out = {}
        for name, kw in names.items():
            ours = functools.partial(getattr(js, name), **kw)
            theirs = functools.partial(getattr(mctx, name), **kw)
            # mctx's transforms also run on our Tree (they need only its fields and `qvalues`)
            out[name] = (at(ours, tree), at(theirs, mtree), at(theirs, tree))
        return out

    for name, (ours, theirs, theirs_on_ours) in every_node(tree, mtree).items():
        np.testing.assert_allclose(ours, theirs, atol=1e-6, err_msg=name)
        np.testing.assert_allclose(theirs_on_ours, theirs, atol=1e-6, err_msg=name)
        assert np.isfinite(np.asarray(ours)).all()


def _params(fn):
    return {name: (p.kind, p.default) for name, p in inspect.signature(fn).parameters.items()}


@pytest.mark.parametrize("policy", ["muzero_policy", "gumbel_muzero_policy",
                                    "stochastic_muzero_policy"])
def test_policy_signatures_match_mctx(policy):
    """Same parameters, order, kinds and defaults as mctx; the key is ``key`` (mctx's
    ``rng_key``)."""
    ours, theirs = _params(getattr(js, policy)), _params(getattr(mctx, policy))
    theirs = {("key" if k == "rng_key" else k): v for k, v in theirs.items()}
    assert list(ours) == list(theirs)
    for name, (kind, default) in theirs.items():
        assert ours[name][0] == kind, name
        if name == "qtransform":
            assert ours[name][1].__name__ == default.__name__
        elif default is not inspect.Parameter.empty:
            assert ours[name][1] == default, name
    assert set(mctx.__all__) <= set(js.__all__)
    for cls in ("RootFnOutput", "RecurrentFnOutput", "DecisionRecurrentFnOutput",
                "ChanceRecurrentFnOutput", "PolicyOutput", "GumbelMuZeroExtraData"):
        assert ([f.name for f in dataclasses.fields(getattr(js, cls))]
                == [f.name for f in dataclasses.fields(getattr(mctx, cls))]), cls


@pytest.mark.slow  # two more compilations
def test_stochastic_with_one_sure_outcome_is_muzero():
    """mctx's own check (policies_test.py), on its inputs: with zero rewards and one certain
    chance outcome, 2 n stochastic simulations act like n MuZero simulations."""
    logits = jnp.array([[-1.0, 0.0, 2.0, 3.0], [0.0, 2.0, 5.0, -4.0]])
    root = js.RootFnOutput(prior_logits=logits, value=jnp.array([1.0, 0.0]),
                           embedding=jnp.zeros((2, 4)))
    rewards = jnp.zeros_like(logits)
    invalid = jnp.array([[0.0, 0.0, 0.0, 1.0], [1.0, 0.0, 1.0, 0.0]])

    def recurrent_fn(params, key, action, emb):
        r = rewards[jnp.arange(2), action]
        return js.RecurrentFnOutput(reward=r, discount=jnp.zeros(2),
                                    prior_logits=jnp.zeros_like(rewards), value=jnp.zeros(2)), emb

    def decision_fn(params, key, action, emb):
        sure = jnp.full((2, 5), -jnp.inf).at[:, 0].set(1.0)
        return js.DecisionRecurrentFnOutput(chance_logits=sure, afterstate_value=jnp.zeros(2)), \
            (action, emb)

    def chance_fn(params, key, outcome, afterstate):
        action, emb = afterstate
        r = rewards[jnp.arange(2), action]
        return js.ChanceRecurrentFnOutput(action_logits=jnp.zeros_like(rewards),
                                          value=jnp.zeros(2), reward=r,
                                          discount=jnp.zeros(2)), emb

    key = jax.random.PRNGKey(0)
    mz = js.muzero_policy((), key, root, recurrent_fn, 10, invalid, dirichlet_fraction=0.0)
    smz = js.stochastic_muzero_policy((), key, root, decision_fn, chance_fn, 20, invalid,
                                      dirichlet_fraction=0.0)
    np.testing.assert_array_equal(smz.action, mz.action)
    np.testing.assert_allclose(smz.action_weights, mz.action_weights)


def test_bad_inputs():
    root, dfn, cfn, invalid = _model(js, _tables())
    key = jax.random.key(0)
    pol = functools.partial(js.stochastic_muzero_policy, (), key, root)
    with pytest.raises(ValueError, match="num_simulations must be >= 1"):
        pol(dfn, cfn, 0)
    with pytest.raises(TypeError, match="num_simulations must be an int"):
        pol(dfn, cfn, True)
    with pytest.raises(TypeError, match="max_depth must be an int"):
        pol(dfn, cfn, 4, max_depth=2.0)
    with pytest.raises(ValueError, match="invalid_actions"):
        pol(dfn, cfn, 4, invalid[:, :-1])
    with pytest.raises(TypeError, match="decision_recurrent_fn must return a pair"):
        pol(lambda *a: (*dfn(*a), None), cfn, 4)
    with pytest.raises(TypeError, match="decision_recurrent_fn must return an output with"):
        pol(lambda p, k, a, e: (js.RecurrentFnOutput(
            reward=jnp.zeros(B), discount=jnp.zeros(B), prior_logits=jnp.zeros((B, A)),
            value=jnp.zeros(B)), e), cfn, 4)
    with pytest.raises(ValueError, match="decision_recurrent_fn returned afterstate_value"):
        pol(lambda *a: (dfn(*a)[0].replace(afterstate_value=jnp.zeros((B, 1))), dfn(*a)[1]),
            cfn, 4)
    with pytest.raises(TypeError, match="chance_recurrent_fn must return a pair"):
        pol(dfn, lambda *a: cfn(*a)[0], 4)
    with pytest.raises(ValueError, match="chance_recurrent_fn returned action_logits"):
        pol(dfn, lambda *a: (cfn(*a)[0].replace(action_logits=jnp.zeros((B, A + 1))),
                             cfn(*a)[1]), 4)
    with pytest.raises(ValueError, match="chance_recurrent_fn returned a state embedding"):
        pol(dfn, lambda *a: (cfn(*a)[0], cfn(*a)[1][:, None]), 4)
    with pytest.raises(ValueError, match="root.prior_logits"):
        js.stochastic_muzero_policy((), key, root.replace(prior_logits=root.prior_logits[0]),
                                    dfn, cfn, 4)
    # the plain policies name their recurrent_fn too
    mroot = js.RootFnOutput(prior_logits=root.prior_logits, value=root.value,
                            embedding=jnp.zeros((B, 2)))
    with pytest.raises(TypeError, match="recurrent_fn must return a pair"):
        jax.jit(lambda k: js.muzero_policy((), k, mroot, lambda p, k, a, e: js.RecurrentFnOutput(
            reward=jnp.zeros(B), discount=jnp.zeros(B), prior_logits=jnp.zeros((B, A)),
            value=jnp.zeros(B)), 4))(key)
    tree = _outputs("mixed")[3][0].search_tree
    one = jax.tree.map(lambda x: x[0], tree)
    with pytest.raises(ValueError, match="node_index must be a scalar"):
        js.qtransform_by_min_max(one, jnp.zeros(2, jnp.int32), min_value=0.0, max_value=1.0)
    with pytest.raises(ValueError, match="max_value must be greater than min_value"):
        js.qtransform_by_min_max(one, 0, min_value=1.0, max_value=1.0)
    with pytest.raises(ValueError, match="unbatched tree"):
        tree.qvalues(0)


_MCTX_TREES = pathlib.Path(mctx.__file__).parent / "_src" / "tests" / "test_data"


@pytest.mark.slow  # a compiled search each; minutes on a busy 2-core machine
@pytest.mark.parametrize("name", ["muzero_tree", "muzero_qtransform_tree", "gumbel_muzero_tree",
                                  "gumbel_muzero_reward_tree"])
def test_reproduces_mctx_reference_trees(name):
    """mctx's stored reference trees (``mctx/_src/tests/test_data``), reproduced with our policies
    and mctx's model (random embeddings used as keys; legacy, non-partitionable threefry)."""
    path = _MCTX_TREES / f"{name}.json"
    if not path.exists():
        pytest.skip("mctx's test data is not installed")
    data = json.loads(path.read_text())
    cfg = dict(data["algorithm_config"])
    qtransform = functools.partial(getattr(js, cfg.pop("qtransform")),
                                   **cfg.pop("qtransform_kwargs", {}))
    num_actions = len(data["tree"]["child_stats"])
    num_simulations = data["tree"]["visit"] - 1
    discount, zero_reward = data["env_config"]["discount"], data["env_config"]["zero_reward"]

    def predict(key):
        kp, kv, kr = jax.random.split(key, 3)
        return (jax.random.normal(kp, (num_actions,)),
                jax.random.uniform(kv, (), minval=-1.0, maxval=1.0),
                jax.random.uniform(kr, (), minval=-1.0, maxval=1.0))

    def recurrent_fn(params, key, action, emb):
        emb = jax.vmap(lambda k, a: jax.random.split(k, num_actions)[a])(emb, action)
        logits, value, reward = jax.vmap(predict)(emb)
        reward = jnp.zeros_like(reward) if zero_reward else reward
        return js.RecurrentFnOutput(reward=reward, discount=jnp.full_like(reward, discount),
                                    prior_logits=logits, value=value), emb

    with jax.threefry_partitionable(False):
        k0 = jax.random.PRNGKey(0)
        emb = jnp.stack([k0] + [jax.random.fold_in(k0, i) for i in (1, 2)])
        logits, value, _ = jax.vmap(predict)(emb)
        root = js.RootFnOutput(prior_logits=logits, value=value, embedding=emb)
        invalid = np.zeros((3, num_actions))
        invalid[1, 1:] = 1
        invalid[2, 2:] = 1
        policy = getattr(js, f"{data['algorithm']}_policy")
        tree = jax.jit(lambda k: policy((), k, root, recurrent_fn, num_simulations,
                                        jnp.asarray(invalid), qtransform=qtransform,
                                        **cfg).search_tree)(jax.random.PRNGKey(1))
    probs = jax.nn.softmax(tree.children_prior_logits, axis=-1)

    def node(i, prior, action=None, reward=None):
        out = {"prior": prior, "visit": int(tree.node_visits[0, i]),
               "value_view": float(tree.node_values[0, i]),
               "raw_value_view": float(tree.raw_values[0, i]), "evaluation_index": i,
               "child_stats": []}
        if action is not None:
            out["action"], out["reward"] = action, reward
        for a in range(num_actions):
            c = int(tree.children_index[0, i, a])
            p = float(probs[0, i, a])
            out["child_stats"].append(
                node(c, p, a, float(tree.children_rewards[0, i, a])) if c >= 0
                else {"prior": p, "child_stats": [], "action": a})
        return out

    jax.tree.map(lambda x, y: np.testing.assert_allclose(x, y, atol=1e-3),
                 data["tree"], node(0, 1.0))
