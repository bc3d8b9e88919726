"""Batched MuZero-style tree search: simulate, expand, backward (mctx calling convention).

One simulation (arXiv:1911.08265, App. B): *simulate* descends from the root with an action
selection rule until it picks an edge that was never expanded (or hits ``max_depth``); *expand*
calls ``recurrent_fn`` once for the whole batch on those edges and writes the new node into slot
``sim + 1``; *backward* walks back to the root updating running means
``Q(s, a) <- (N Q + G) / (N + 1)`` with ``G = r + discount * G_child`` (Eq. 4 of the paper).

Differences from mctx's implementation that keep the same results: the root step of *simulate* is
taken outside the while loop (mctx switches root/interior rules with a ``lax.cond`` that becomes a
select evaluating both under vmap), and *backward* is a batched while loop that scatters into the
``B`` touched entries instead of a vmapped while loop (whose batched predicate makes every
iteration select over the whole ``[B, N, A]`` tree). The random keys are split exactly like mctx's,
so the same inputs give the same trees.

A private module: the package exports :func:`search`; the policies import the building blocks.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxpapers.core.checks import check_int, concrete
from jaxpapers.search import tree as tree_lib
from jaxpapers.search._types import InteriorActionSelectionFn, RecurrentFn, RootFnOutput
from jaxpapers.search._types import RootActionSelectionFn as RootSelectionFn
from jaxpapers.search.tree import ROOT_INDEX, UNVISITED, Tree

__all__ = ["search", "simulate", "expand", "backward", "muzero_action_selection",
           "gumbel_muzero_root_action_selection", "gumbel_muzero_interior_action_selection",
           "masked_argmax", "validate_search_inputs"]

InteriorSelectionFn = InteriorActionSelectionFn


def validate_search_inputs(prior_logits, value, num_simulations, invalid_actions,
                           max_depth=None, *, value_ndim: int = 1) -> None:
    """Raise an error naming the argument for bad search inputs.

    ``TypeError`` when ``num_simulations`` / ``max_depth`` are not ints (bools are not ints);
    ``ValueError`` for values below 1, mismatched shapes, and NaN in concrete root arrays
    (``-inf`` logits are allowed: they mask actions).

    Args:
      prior_logits: [B, A] root logits.
      value: [B] (or [B, Q] with ``value_ndim=2``) root values.
      num_simulations: int >= 1.
      invalid_actions: [B, A] or None.
      max_depth: int >= 1 or None.
      value_ndim: 1 for scalar values, 2 for quantiles.

    >>> import jax.numpy as jnp
    >>> validate_search_inputs(jnp.zeros((2, 3)), jnp.zeros(2), 0, None)
    Traceback (most recent call last):
    ...
    ValueError: num_simulations must be >= 1, got 0
    """
    check_int("num_simulations", num_simulations, minimum=1)
    if max_depth is not None:
        check_int("max_depth", max_depth, minimum=1)
    if prior_logits.ndim != 2:
        raise ValueError(f"root.prior_logits must be [B, A], got shape {prior_logits.shape}")
    batch = prior_logits.shape[0]
    if value.ndim != value_ndim or value.shape[0] != batch:
        want = "[B]" if value_ndim == 1 else "[B, Q]"
        raise ValueError(f"root.value must be {want} with B={batch}, got shape {value.shape}")
    if invalid_actions is not None and invalid_actions.shape != prior_logits.shape:
        raise ValueError(f"invalid_actions must have the shape of root.prior_logits "
                         f"{prior_logits.shape}, got {invalid_actions.shape}")
    # numpy, not jnp: inside a trace a jnp op on a concrete array would give a tracer
    for name, x in (("root.prior_logits", prior_logits), ("root.value", value)):
        v = concrete(x)
        if v is not None and np.isnan(v).any():
            raise ValueError(f"{name} contains NaN")


def masked_argmax(to_argmax: jax.Array, invalid_actions: jax.Array | None) -> jax.Array:
    """Argmax over valid actions (action 0 when all are invalid).

    Args:
      to_argmax: [..., A] scores.
      invalid_actions: [..., A] 1 for invalid actions, or None.

    Returns:
      [...] int32 actions.

    >>> import jax.numpy as jnp
    >>> masked_argmax(jnp.array([[1.0, 3.0, 2.0]]), jnp.array([[0, 1, 0]])).tolist()
    [2]
    """
    if invalid_actions is not None:
        to_argmax = jnp.where(invalid_actions, -jnp.inf, to_argmax)
    return jnp.argmax(to_argmax, axis=-1).astype(jnp.int32)


def muzero_action_selection(key: jax.Array, tree: Tree, node_index: jax.Array, depth: jax.Array,
                            *, pb_c_init: float = 1.25, pb_c_base: float = 19652.0,
                            qtransform=tree_lib.qtransform_by_parent_and_siblings) -> jax.Array:
    """PUCT rule of MuZero (arXiv:1911.08265, App. B, Eq. 2) on an *unbatched* tree.

    ``argmax_a Q~(s, a) + P(s, a) sqrt(N(s)) / (1 + N(s, a)) (c1 + log((N(s) + c2 + 1) / c2))``
    plus ``1e-7 * U(0, 1)`` noise to break ties; invalid root actions are masked at depth 0.

    Args:
      key: consumed (tie-breaking noise).
      tree: *unbatched* tree (fields [N, ...]).
      node_index: [] node to act from.
      depth: [] its depth (0 at the root, where invalid actions are masked).
      pb_c_init, pb_c_base: the constants c1, c2.
      qtransform: ``(tree, node_index) -> [A]`` normalised Q-values Q~.

    Returns:
      [] int32 action.

    >>> import jax, jax.numpy as jnp
    >>> from jaxpapers.search import GumbelMuZeroExtraData
    >>> from jaxpapers.search.tree import instantiate_tree
    >>> t = instantiate_tree(jnp.array([[0.0, 2.0, 1.0]]), jnp.zeros(1), jnp.zeros((1, 1)),
    ...                      num_simulations=4, invalid_actions=jnp.array([[0.0, 1.0, 0.0]]),
    ...                      extra_data=GumbelMuZeroExtraData(root_gumbel=jnp.zeros((1, 3))))
    >>> one = jax.tree.map(lambda x: x[0], t)  # unbatched
    >>> [int(muzero_action_selection(jax.random.key(0), one, 0, d)) for d in (0, 1)]
    [2, 1]
    """
    visits = tree.children_visits[node_index]
    n = tree.node_visits[node_index]
    pb_c = pb_c_init + jnp.log((n + pb_c_base + 1.0) / pb_c_base)
    probs = jax.nn.softmax(tree.children_prior_logits[node_index])
    policy_score = jnp.sqrt(n) * pb_c * probs / (visits + 1)
    value_score = qtransform(tree, node_index)
    noise = 1e-7 * jax.random.uniform(key, (tree.num_actions,))
    return masked_argmax(value_score + policy_score + noise,
                         tree.root_invalid_actions * (depth == 0))


def considered_visits_table(max_num_considered_actions: int, num_simulations: int) -> np.ndarray:
    """[max_considered + 1, num_simulations] int32: visit count Sequential Halving targets next.

    Row ``m`` is the sequence for ``m`` considered actions (Danihelka et al. 2022, Alg. 2): phases
    of ``max(1, floor(n / (ceil(log2 m) * k)))`` rounds over the ``k`` surviving actions, halving
    ``k`` (down to 2) after each phase.
    """
    rows = []
    for m in range(max_num_considered_actions + 1):
        if m <= 1:
            rows.append(list(range(num_simulations)))
            continue
        log2m = int(np.ceil(np.log2(m)))
        seq: list[int] = []
        visits = [0] * m
        k = m
        while len(seq) < num_simulations:
            rounds = max(1, int(num_simulations / (log2m * k)))
            for _ in range(rounds):
                seq.extend(visits[:k])
                for i in range(k):
                    visits[i] += 1
            k = max(2, k // 2)
        rows.append(seq[:num_simulations])
    return np.asarray(rows, np.int32)


def score_considered(considered_visit, gumbel, logits, qvalues, visit_counts):
    """``g + logits + sigma(q)`` for actions whose visit count equals ``considered_visit``, else -inf."""
    logits = logits - jnp.max(logits, axis=-1, keepdims=True)
    penalty = jnp.where(visit_counts == considered_visit, 0.0, -jnp.inf)
    return jnp.maximum(-1e9, gumbel + logits + qvalues) + penalty


def gumbel_muzero_root_action_selection(
        key: jax.Array, tree: Tree, node_index: jax.Array, *, num_simulations: int,
        max_num_considered_actions: int,
        qtransform=tree_lib.qtransform_completed_by_mix_value) -> jax.Array:
    """Sequential Halving with Gumbel at the root (Danihelka et al. 2022, Alg. 2, line 5-9).

    Among the actions whose visit count is the one Sequential Halving asks for next, picks
    ``argmax_a g(a) + logits(a) + sigma(q~(a))``.

    Args:
      key: unused (the rule is deterministic given the Gumbel draws).
      tree: *unbatched* tree; ``tree.extra_data.root_gumbel`` [A] holds this example's draws.
      node_index: [] the root.
      num_simulations: the search's simulation budget (static).
      max_num_considered_actions: actions sampled without replacement (static).
      qtransform: completed Q-values sigma(q~).

    Returns:
      [] int32 action.

    >>> import jax, jax.numpy as jnp
    >>> from jaxpapers.search import GumbelMuZeroExtraData
    >>> from jaxpapers.search.tree import instantiate_tree
    >>> t = instantiate_tree(jnp.array([[0.0, 2.0, 1.0]]), jnp.zeros(1), jnp.zeros((1, 1)),
    ...                      num_simulations=4, invalid_actions=jnp.array([[0.0, 1.0, 0.0]]),
    ...                      extra_data=GumbelMuZeroExtraData(root_gumbel=jnp.zeros((1, 3))))
    >>> one = jax.tree.map(lambda x: x[0], t)  # unbatched
    >>> int(gumbel_muzero_root_action_selection(jax.random.key(0), one, 0, num_simulations=4,
    ...                                          max_num_considered_actions=2))
    2
    """
    del key
    visits = tree.children_visits[node_index]
    logits = tree.children_prior_logits[node_index]
    q = qtransform(tree, node_index)
    table = jnp.asarray(considered_visits_table(max_num_considered_actions, num_simulations))
    num_valid = jnp.sum(1 - tree.root_invalid_actions, axis=-1).astype(jnp.int32)
    num_considered = jnp.minimum(max_num_considered_actions, num_valid)
    considered = table[num_considered, jnp.sum(visits, -1)]
    score = score_considered(considered, tree.extra_data.root_gumbel, logits, q, visits)
    return masked_argmax(score, tree.root_invalid_actions)


def gumbel_muzero_interior_action_selection(
        key: jax.Array, tree: Tree, node_index: jax.Array, depth: jax.Array, *,
        qtransform=tree_lib.qtransform_completed_by_mix_value) -> jax.Array:
    """Deterministic interior selection of Gumbel MuZero (Danihelka et al. 2022, Eq. 14).

    ``argmax_a pi'(a) - N(a) / (1 + sum_b N(b))`` with ``pi' = softmax(logits + sigma(q~))``.

    Args:
      key: unused.
      tree: *unbatched* tree.
      node_index: [] node to act from.
      depth: [] unused (no masking below the root).
      qtransform: completed Q-values sigma(q~).

    Returns:
      [] int32 action.

    >>> import jax, jax.numpy as jnp
    >>> from jaxpapers.search import GumbelMuZeroExtraData
    >>> from jaxpapers.search.tree import instantiate_tree
    >>> t = instantiate_tree(jnp.array([[0.0, 2.0, 1.0]]), jnp.zeros(1), jnp.zeros((1, 1)),
    ...                      num_simulations=4, invalid_actions=jnp.array([[0.0, 1.0, 0.0]]),
    ...                      extra_data=GumbelMuZeroExtraData(root_gumbel=jnp.zeros((1, 3))))
    >>> one = jax.tree.map(lambda x: x[0], t)  # unbatched
    >>> int(gumbel_muzero_interior_action_selection(jax.random.key(0), one, 0, 1))
    1
    """
    del key, depth
    visits = tree.children_visits[node_index]
    probs = jax.nn.softmax(tree.children_prior_logits[node_index] + qtransform(tree, node_index))
    score = probs - visits / (1 + jnp.sum(visits, axis=-1, keepdims=True))
    return jnp.argmax(score, axis=-1).astype(jnp.int32)


class _SimState(NamedTuple):
    key: jax.Array
    node_index: jax.Array  # []
    action: jax.Array  # []
    next_node_index: jax.Array  # []
    depth: jax.Array  # []
    is_continuing: jax.Array  # [] bool


def simulate(keys: jax.Array, tree: Tree, root_action_selection_fn: RootSelectionFn,
             interior_action_selection_fn: InteriorSelectionFn,
             max_depth: int) -> tuple[jax.Array, jax.Array]:
    """Descend every tree of the batch to an unexpanded edge (Alg.: MuZero App. B, "Selection").

    Args:
      keys: [B] keys, consumed.
      tree: batched tree.
      root_action_selection_fn: ``(key, tree, node) -> action`` on an unbatched tree.
      interior_action_selection_fn: ``(key, tree, node, depth) -> action``.
      max_depth: maximum number of edges from the root.

    Returns:
      ``(parent_index [B], action [B])``: the edge to expand.
    """

    def one(key, t):
        key, sel_key = jax.random.split(key)
        root = jnp.asarray(ROOT_INDEX, jnp.int32)
        action = root_action_selection_fn(sel_key, t, root)
        nxt = t.children_index[root, action]
        depth = jnp.ones((), t.children_prior_logits.dtype)
        state = _SimState(key, root, action, nxt, depth,
                          jnp.logical_and(nxt != UNVISITED, depth < max_depth))

        def body(s: _SimState) -> _SimState:
            node = s.next_node_index
            k, sel = jax.random.split(s.key)
            a = interior_action_selection_fn(sel, t, node, s.depth)
            nn = t.children_index[node, a]
            d = s.depth + 1
            return _SimState(k, node, a, nn, d, jnp.logical_and(nn != UNVISITED, d < max_depth))

        end = jax.lax.while_loop(lambda s: s.is_continuing, body, state)
        return end.node_index, end.action

    return jax.vmap(one)(keys, tree)


def expand(params: Any, key: jax.Array, tree: Tree, recurrent_fn: RecurrentFn,
           parent_index: jax.Array, action: jax.Array, next_node_index: jax.Array) -> Tree:
    """Evaluate ``recurrent_fn`` on the edges ``(parent_index, action)`` [B] and write the child.

    Args:
      params: forwarded to ``recurrent_fn``.
      key: consumed by ``recurrent_fn``.
      tree: batched tree.
      recurrent_fn: ``(params, key, action [B], embedding) -> (RecurrentFnOutput, embedding)``.
      parent_index: [B] node expanded from.
      action: [B] edge expanded.
      next_node_index: [B] slot of the new node (an existing node when ``max_depth`` was hit).

    Returns:
      The tree with the child's prior, value, embedding and the edge's reward and discount.

    Raises:
      TypeError: ``recurrent_fn`` does not return ``(output, embedding)``.
      ValueError: its output or embedding has the wrong shape.
    """
    batch = tree.node_values.shape[0]
    b = jnp.arange(batch)
    emb = jax.tree.map(lambda x: x[b, parent_index], tree.embeddings)
    out, emb = unpack_fn_output("recurrent_fn", recurrent_fn(params, key, action, emb),
                                ("reward", "discount", "prior_logits", "value"))
    _check_recurrent_output(out, batch, tree.num_actions, value_shape=(batch,))
    check_embedding("recurrent_fn", emb, tree.embeddings, leading=1)
    tree = tree_lib.set_node(tree, next_node_index, out.prior_logits, out.value, emb)
    return tree.replace(
        children_index=tree.children_index.at[b, parent_index, action].set(next_node_index),
        children_rewards=tree.children_rewards.at[b, parent_index, action].set(out.reward),
        children_discounts=tree.children_discounts.at[b, parent_index, action].set(out.discount),
        parents=tree.parents.at[b, next_node_index].set(parent_index),
        action_from_parent=tree.action_from_parent.at[b, next_node_index].set(action))


def unpack_fn_output(name: str, result: Any, fields: tuple[str, ...]) -> tuple[Any, Any]:
    """``(output, embedding)`` of a model function, or a ``TypeError`` naming it.

    The output must have the attributes ``fields`` (any class does: ours or mctx's).
    """
    if not isinstance(result, (tuple, list)) or len(result) != 2:
        got = (f"a {type(result).__name__} of length {len(result)}"
               if isinstance(result, (tuple, list)) else type(result).__name__)
        raise TypeError(f"{name} must return a pair (output, embedding), got {got}")
    out, emb = result
    missing = [f for f in fields if not hasattr(out, f)]
    if missing:
        raise TypeError(f"{name} must return an output with fields {fields}; "
                        f"{type(out).__name__} lacks {tuple(missing)}")
    return out, emb


def check_embedding(name: str, emb: Any, stored: Any, *, leading: int) -> None:
    """``emb`` has the pytree structure of ``stored`` and, leaf by leaf, its shape without the
    node axis (``stored`` leaves are [B, N, ...], ``emb`` leaves [B, ...]); dtypes are cast."""
    if jax.tree.structure(emb) != jax.tree.structure(stored):
        raise ValueError(f"{name} returned an embedding with pytree structure "
                         f"{jax.tree.structure(emb)}; expected that of the root embedding, "
                         f"{jax.tree.structure(stored)}")
    for e, s in zip(jax.tree.leaves(emb), jax.tree.leaves(stored)):
        want = s.shape[:leading] + s.shape[leading + 1:]
        if tuple(e.shape) != tuple(want):
            raise ValueError(f"{name} returned an embedding leaf of shape {tuple(e.shape)}; "
                             f"expected {tuple(want)} like the root embedding")


def _check_recurrent_output(out, batch, num_actions, *, value_shape, reward_shape=None):
    if out.prior_logits.shape != (batch, num_actions):
        raise ValueError(f"recurrent_fn returned prior_logits of shape {out.prior_logits.shape}; "
                         f"expected {(batch, num_actions)} (the root's action count)")
    if out.value.shape != value_shape:
        raise ValueError(f"recurrent_fn returned value of shape {out.value.shape}; "
                         f"expected {value_shape}")
    reward_shape = reward_shape or (batch,)
    if out.reward.shape != reward_shape or out.discount.shape != (batch,):
        raise ValueError(f"recurrent_fn returned reward {out.reward.shape} / discount "
                         f"{out.discount.shape}; expected {reward_shape} / {(batch,)}")


def backward(tree: Tree, leaf_index: jax.Array) -> Tree:
    """Back up from ``leaf_index`` [B] to the root (MuZero App. B, "Backup", Eq. 4).

    At each step up: ``G <- r(p, a) + discount(p, a) G``; ``v(p) <- (N(p) v(p) + G) / (N(p) + 1)``;
    ``N(p) += 1``; ``N(p, a) += 1``; ``children_values[p, a] <- v(child)``.

    Args:
      tree: batched tree.
      leaf_index: [B] the nodes just expanded.

    Returns:
      The updated tree.
    """
    b = jnp.arange(tree.node_values.shape[0])
    leaf_index = leaf_index.astype(jnp.int32)

    def body(carry):
        t, g, idx = carry
        active = idx != ROOT_INDEX
        p = jnp.where(active, t.parents[b, idx], ROOT_INDEX)
        a = jnp.where(active, t.action_from_parent[b, idx], 0)
        count = t.node_visits[b, p]
        g_new = t.children_rewards[b, p, a] + t.children_discounts[b, p, a] * g
        v_old = t.node_values[b, p]
        v_new = (v_old * count + g_new) / (count + 1.0)
        cv_old = t.children_values[b, p, a]
        cn_old = t.children_visits[b, p, a]
        t = t.replace(
            node_values=t.node_values.at[b, p].set(jnp.where(active, v_new, v_old)),
            node_visits=t.node_visits.at[b, p].set(count + active.astype(jnp.int32)),
            children_values=t.children_values.at[b, p, a].set(
                jnp.where(active, t.node_values[b, idx], cv_old)),
            children_visits=t.children_visits.at[b, p, a].set(
                cn_old + active.astype(jnp.int32)))
        return t, jnp.where(active, g_new, g), p

    init = (tree, tree.node_values[b, leaf_index], leaf_index)
    tree, _, _ = jax.lax.while_loop(lambda c: jnp.any(c[2] != ROOT_INDEX), body, init)
    return tree


def search(params: Any, key: jax.Array, *, root: RootFnOutput, recurrent_fn: RecurrentFn,
           root_action_selection_fn: RootSelectionFn,
           interior_action_selection_fn: InteriorSelectionFn, num_simulations: int,
           max_depth: int | None = None, invalid_actions: jax.Array | None = None,
           extra_data: Any = None, loop_fn=jax.lax.fori_loop) -> Tree:
    """Run ``num_simulations`` simulate/expand/backward steps on a batch of roots.

    Args:
      params: forwarded to ``recurrent_fn``.
      key: consumed.
      root: :class:`RootFnOutput` with ``prior_logits`` [B, A], ``value`` [B], ``embedding``.
      recurrent_fn: ``(params, key, action [B], embedding) -> (RecurrentFnOutput, embedding)``.
      root_action_selection_fn: rule at the root ``(key, tree, node) -> action`` (unbatched).
      interior_action_selection_fn: rule below the root ``(key, tree, node, depth) -> action``.
      num_simulations: number of simulations (static, >= 1).
      max_depth: maximum edges from the root (default ``num_simulations``).
      invalid_actions: [B, A] 1 where a root action is invalid.
      extra_data: pytree of [B, ...] stored in ``tree.extra_data``.
      loop_fn: ``jax.lax.fori_loop``-compatible loop over simulations.

    Returns:
      The final batched :class:`Tree` (``N = num_simulations + 1`` node slots).

    >>> import functools, jax, jax.numpy as jnp
    >>> from jaxpapers.search import RecurrentFnOutput, RootFnOutput
    >>> def rec(params, key, action, emb):  # reward = action index, then the episode ends
    ...     return RecurrentFnOutput(reward=action.astype(jnp.float32), discount=jnp.zeros(2),
    ...                              prior_logits=jnp.zeros((2, 3)), value=jnp.zeros(2)), emb
    >>> root = RootFnOutput(prior_logits=jnp.zeros((2, 3)), value=jnp.zeros(2),
    ...                     embedding=jnp.zeros((2, 1)))
    >>> tree = search(None, jax.random.key(0), root=root, recurrent_fn=rec,
    ...               root_action_selection_fn=functools.partial(muzero_action_selection, depth=0),
    ...               interior_action_selection_fn=muzero_action_selection, num_simulations=8)
    >>> tree.node_visits[:, 0].tolist(), tree.children_index.shape  # [B, N, A]
    ([9, 9], (2, 9, 3))
    """
    validate_search_inputs(root.prior_logits, root.value, num_simulations, invalid_actions,
                           max_depth)
    batch = root.value.shape[0]
    b = jnp.arange(batch)
    max_depth = num_simulations if max_depth is None else max_depth
    if invalid_actions is None:
        invalid_actions = jnp.zeros_like(root.prior_logits)
    tree = tree_lib.instantiate_tree(root.prior_logits, root.value, root.embedding,
                                     num_simulations=num_simulations,
                                     invalid_actions=invalid_actions, extra_data=extra_data)

    def body(sim, carry):
        k, t = carry
        k, sim_key, expand_key = jax.random.split(k, 3)
        parent, action = simulate(jax.random.split(sim_key, batch), t, root_action_selection_fn,
                                  interior_action_selection_fn, max_depth)
        nxt = t.children_index[b, parent, action]
        nxt = jnp.where(nxt == UNVISITED, sim + 1, nxt)
        t = expand(params, expand_key, t, recurrent_fn, parent, action, nxt)
        return k, backward(t, nxt)

    _, tree = loop_fn(0, num_simulations, body, (key, tree))
    return tree
