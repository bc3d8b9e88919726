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
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxpapers.search import tree as tree_lib
from jaxpapers.search._types import RecurrentFn, RootFnOutput
from jaxpapers.search.tree import ROOT_INDEX, UNVISITED, Tree

__all__ = ["search", "simulate", "expand", "backward", "muzero_action_selection",
           "gumbel_muzero_root_action_selection", "gumbel_muzero_interior_action_selection",
           "masked_argmax", "validate_search_inputs"]

# (key, tree, node_index) -> action [] ; (key, tree, node_index, depth) -> action []
RootSelectionFn = Callable[[jax.Array, Tree, jax.Array], jax.Array]
InteriorSelectionFn = Callable[[jax.Array, Tree, jax.Array, jax.Array], jax.Array]


def _is_concrete(x) -> bool:
    return not isinstance(x, jax.core.Tracer)


def validate_search_inputs(prior_logits, value, num_simulations, invalid_actions,
                           max_depth=None, *, value_ndim: int = 1) -> None:
    """Raise ``ValueError`` naming the argument for bad search inputs (shapes; NaN when concrete)."""
    if not isinstance(num_simulations, (int, np.integer)) or num_simulations < 1:
        raise ValueError(f"num_simulations must be an int >= 1, got {num_simulations!r}")
    if max_depth is not None and (not isinstance(max_depth, (int, np.integer)) or max_depth < 1):
        raise ValueError(f"max_depth must be None or an int >= 1, got {max_depth!r}")
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
    if _is_concrete(prior_logits) and np.isnan(np.asarray(prior_logits)).any():
        raise ValueError("root.prior_logits contains NaN")
    if _is_concrete(value) and np.isnan(np.asarray(value)).any():
        raise ValueError("root.value contains NaN")


def masked_argmax(to_argmax: jax.Array, invalid_actions: jax.Array | None) -> jax.Array:
    """Argmax over valid actions (action 0 when all are invalid)."""
    if invalid_actions is not None:
        to_argmax = jnp.where(invalid_actions, -jnp.inf, to_argmax)
    return jnp.argmax(to_argmax, axis=-1).astype(jnp.int32)


def muzero_action_selection(key: jax.Array, tree: Tree, node_index: jax.Array, depth: jax.Array,
                            *, pb_c_init: float = 1.25, pb_c_base: float = 19652.0,
                            qtransform=tree_lib.qtransform_by_parent_and_siblings) -> jax.Array:
    """PUCT rule of MuZero (arXiv:1911.08265, App. B, Eq. 2) on an *unbatched* tree.

    ``argmax_a Q~(s, a) + P(s, a) sqrt(N(s)) / (1 + N(s, a)) (c1 + log((N(s) + c2 + 1) / c2))``
    plus ``1e-7 * U(0, 1)`` noise to break ties; invalid root actions are masked at depth 0.
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

    ``tree.extra_data.root_gumbel`` [A] holds the Gumbel draws of this example.
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

    ``key`` is consumed by ``recurrent_fn``.
    """
    batch = tree.node_values.shape[0]
    b = jnp.arange(batch)
    emb = jax.tree.map(lambda x: x[b, parent_index], tree.embeddings)
    out, emb = recurrent_fn(params, key, action, emb)
    _check_recurrent_output(out, batch, tree.num_actions, value_shape=(batch,))
    tree = tree_lib.set_node(tree, next_node_index, out.prior_logits, out.value, emb)
    return tree.replace(
        children_index=tree.children_index.at[b, parent_index, action].set(next_node_index),
        children_rewards=tree.children_rewards.at[b, parent_index, action].set(out.reward),
        children_discounts=tree.children_discounts.at[b, parent_index, action].set(out.discount),
        parents=tree.parents.at[b, next_node_index].set(parent_index),
        action_from_parent=tree.action_from_parent.at[b, next_node_index].set(action))


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
