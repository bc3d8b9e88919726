"""Stochastic MuZero search with the mctx calling convention.

Stochastic MuZero (Antonoglou et al., "Planning in Stochastic Environments with a Learned Model",
ICLR 2022) splits every transition in two: a *decision node* (a state ``s``) takes an action ``a``
to an *afterstate* ``as`` with no reward (``decision_recurrent_fn``), and the *chance node* ``as``
takes a chance outcome ``c`` to the next state with the transition's reward and discount
(``chance_recurrent_fn``). Values back up through both, so ``Q(s, a) = V(as)`` and
``Q(as, c) = r + gamma V(s')``.

The two node kinds live in one ordinary search tree whose nodes have ``A + C`` edges: the first
``A`` are the actions of a decision node, the last ``C`` the outcomes of a chance node, and the
unused part of each node's prior is ``-inf``. Each node's embedding is a
:class:`StochasticRecurrentState` that says which kind it is. So the generic
:func:`jaxpapers.search.search` (simulate / expand / backward) runs unchanged with

* one recurrent function that evaluates both model functions and keeps, per example, the output
  of the kind of node being expanded (each example uses one of the two, so the key passed to
  both is still consumed once per example);
* a selection rule that applies PUCT (MuZero, arXiv:1911.08265, App. B) to the action part at
  decision nodes, and at chance nodes picks ``argmax_c sigma(c | as) / (N(as, c) + 1)``, a
  deterministic rule that visits the outcomes in proportion to their prior probabilities.

Same algorithm, keys and results as mctx's ``stochastic_muzero_policy``; ``max_depth`` counts both
kinds of edges. The returned tree keeps the action part of the edge fields (``[B, N, A]``).
Differences that leave the results unchanged: the model functions are checked on shapes alone
(``jax.eval_shape``) instead of an extra ``decision_recurrent_fn`` call at the root (whose
afterstate embedding is never read, so it is zeros here), and the index a model function gets for
the node kind whose output is discarded is clipped into its range.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp

from jaxpapers.search import _search as search_lib
from jaxpapers.search import muzero as muzero_lib
from jaxpapers.search import tree as tree_lib
from jaxpapers.search._types import (ChanceRecurrentFn, DecisionRecurrentFn, PolicyOutput,
                                     RecurrentFnOutput, RootFnOutput, StochasticRecurrentState)
from jaxpapers.search._types import (  # noqa: F401  (doctest namespace)
    ChanceRecurrentFnOutput, DecisionRecurrentFnOutput)
from jaxpapers.search.tree import Tree

__all__ = ["stochastic_muzero_policy", "chance_selection"]

_DECISION_FIELDS = ("chance_logits", "afterstate_value")
_CHANCE_FIELDS = ("action_logits", "value", "reward", "discount")

_EDGE_FIELDS = ("children_index", "children_prior_logits", "children_visits", "children_rewards",
                "children_discounts", "children_values", "root_invalid_actions")


def _edge_view(tree: Tree, num_actions: int, decision: bool) -> Tree:
    """The tree restricted to the action edges (``decision``) or to the chance edges."""
    part = (lambda x: x[..., :num_actions]) if decision else (lambda x: x[..., num_actions:])
    return tree.replace(**{f: part(getattr(tree, f)) for f in _EDGE_FIELDS})


def chance_selection(tree: Tree, node_index: jax.typing.ArrayLike) -> jax.Array:
    """Outcome [] int32 chosen at a chance node: ``argmax_c sigma(c) / (N(c) + 1)`` (unbatched).

    Args:
      tree: *unbatched* tree whose edge fields hold the chance outcomes ([N, C]).
      node_index: [] the chance node.

    Returns:
      [] int32 index of the outcome in ``0..C-1``.

    >>> import jax.numpy as jnp
    >>> t = tree_lib.instantiate_tree(jnp.log(jnp.array([[0.5, 0.3, 0.2]])), jnp.zeros(1),
    ...                               jnp.zeros((1, 1)), num_simulations=1,
    ...                               invalid_actions=jnp.zeros((1, 3)))
    >>> t = t.replace(children_visits=t.children_visits.at[0, 0].set(jnp.array([2, 0, 0])))
    >>> int(chance_selection(jax.tree.map(lambda x: x[0], t), 0))  # 0.5 / 3 < 0.3 / 1
    1
    """
    probs = jax.nn.softmax(tree.children_prior_logits[node_index])
    return jnp.argmax(probs / (tree.children_visits[node_index] + 1), axis=-1).astype(jnp.int32)


def _check_shape(fn_name: str, field: str, x, want: tuple) -> None:
    if tuple(jnp.shape(x)) != tuple(want):
        raise ValueError(f"{fn_name} returned {field} of shape {tuple(jnp.shape(x))}; "
                         f"expected {tuple(want)}")


def _check_decision(out, batch: int, num_chance: int | None = None) -> int:
    logits = out.chance_logits
    if jnp.ndim(logits) != 2 or jnp.shape(logits)[0] != batch or jnp.shape(logits)[1] < 1:
        raise ValueError(f"decision_recurrent_fn returned chance_logits of shape "
                         f"{tuple(jnp.shape(logits))}; expected [B, C] with B={batch}, C >= 1")
    if num_chance is not None:
        _check_shape("decision_recurrent_fn", "chance_logits", logits, (batch, num_chance))
    _check_shape("decision_recurrent_fn", "afterstate_value", out.afterstate_value, (batch,))
    return jnp.shape(logits)[1]


def _check_chance(out, batch: int, num_actions: int) -> None:
    _check_shape("chance_recurrent_fn", "action_logits", out.action_logits,
                 (batch, num_actions))
    for field in ("value", "reward", "discount"):
        _check_shape("chance_recurrent_fn", field, getattr(out, field), (batch,))


def _check_same_embedding(fn_name: str, what: str, emb: Any, like: Any) -> None:
    if jax.tree.structure(emb) != jax.tree.structure(like):
        raise ValueError(f"{fn_name} returned a {what} with pytree structure "
                         f"{jax.tree.structure(emb)}; expected {jax.tree.structure(like)}")
    for e, w in zip(jax.tree.leaves(emb), jax.tree.leaves(like)):
        if tuple(jnp.shape(e)) != tuple(jnp.shape(w)):
            raise ValueError(f"{fn_name} returned a {what} leaf of shape "
                             f"{tuple(jnp.shape(e))}; expected {tuple(jnp.shape(w))}")


def _probe(params, key, root: RootFnOutput, decision_recurrent_fn: DecisionRecurrentFn,
           chance_recurrent_fn: ChanceRecurrentFn) -> tuple[int, Any]:
    """Check both model functions on shapes alone (``jax.eval_shape``: no compute, no key use).

    Returns ``(C, afterstate_shapes)``.
    """
    batch, num_actions = root.prior_logits.shape
    index = jnp.zeros((batch,), jnp.int32)

    def decide(k, emb):
        return decision_recurrent_fn(params, k, index, emb)

    out, afterstate = search_lib.unpack_fn_output(
        "decision_recurrent_fn", jax.eval_shape(decide, key, root.embedding), _DECISION_FIELDS)
    num_chance = _check_decision(out, batch)

    def chance(k, aemb):
        return chance_recurrent_fn(params, k, index, aemb)

    out, state = search_lib.unpack_fn_output(
        "chance_recurrent_fn", jax.eval_shape(chance, key, afterstate), _CHANCE_FIELDS)
    _check_chance(out, batch, num_actions)
    _check_same_embedding("chance_recurrent_fn", "state embedding", state, root.embedding)
    return num_chance, afterstate


def _combined_recurrent_fn(decision_recurrent_fn: DecisionRecurrentFn,
                           chance_recurrent_fn: ChanceRecurrentFn, num_actions: int,
                           num_chance: int):
    """A ``recurrent_fn`` over ``A + C`` edges that expands decision and chance nodes alike.

    Edge ``e`` is the action ``e`` at a decision node and the outcome ``e - A`` at a chance node;
    each model function also sees the other kind's index (clipped into its range) and its
    output for those examples is discarded.
    """

    def recurrent_fn(params, key, edge, state: StochasticRecurrentState):
        batch = state.is_decision_node.shape[0]
        action = jnp.clip(edge, 0, num_actions - 1)
        outcome = jnp.clip(edge - num_actions, 0, num_chance - 1)
        dec, afterstate = search_lib.unpack_fn_output(
            "decision_recurrent_fn",
            decision_recurrent_fn(params, key, action, state.state_embedding), _DECISION_FIELDS)
        _check_decision(dec, batch, num_chance)
        _check_same_embedding("decision_recurrent_fn", "afterstate embedding", afterstate,
                              state.afterstate_embedding)
        chn, next_state = search_lib.unpack_fn_output(
            "chance_recurrent_fn",
            chance_recurrent_fn(params, key, outcome, state.afterstate_embedding), _CHANCE_FIELDS)
        _check_chance(chn, batch, num_actions)
        _check_same_embedding("chance_recurrent_fn", "state embedding", next_state,
                              state.state_embedding)
        cl, al = dec.chance_logits, chn.action_logits
        # a decision node's children are chance nodes (prior over the C outcomes), and back
        logits_if_decision = jnp.concatenate(
            [jnp.full((batch, num_actions), -jnp.inf, cl.dtype), cl], axis=-1)
        logits_if_chance = jnp.concatenate(
            [al, jnp.full((batch, num_chance), -jnp.inf, al.dtype)], axis=-1)
        is_decision = state.is_decision_node
        value = dec.afterstate_value
        out = RecurrentFnOutput(
            reward=jnp.where(is_decision, jnp.zeros_like(value), chn.reward),
            discount=jnp.where(is_decision, jnp.ones_like(value), chn.discount),
            prior_logits=jnp.where(is_decision[:, None], logits_if_decision, logits_if_chance),
            value=jnp.where(is_decision, value, chn.value))
        new_state = StochasticRecurrentState(state_embedding=next_state,
                                             afterstate_embedding=afterstate,
                                             is_decision_node=jnp.logical_not(is_decision))
        return out, new_state

    return recurrent_fn


def stochastic_muzero_policy(
        params: Any, key: jax.Array, root: RootFnOutput,
        decision_recurrent_fn: DecisionRecurrentFn, chance_recurrent_fn: ChanceRecurrentFn,
        num_simulations: int, invalid_actions: jax.Array | None = None,
        max_depth: int | None = None, loop_fn=jax.lax.fori_loop, *,
        qtransform=tree_lib.qtransform_by_parent_and_siblings,
        dirichlet_fraction: float = 0.25, dirichlet_alpha: float = 0.3,
        pb_c_init: float = 1.25, pb_c_base: float = 19652.0,
        temperature: float = 1.0) -> PolicyOutput:
    """Stochastic MuZero search; acts by sampling visit counts ** (1 / temperature).

    Args:
      params: forwarded to both model functions.
      key: consumed (mctx's ``rng_key``, same position).
      root: :class:`RootFnOutput`: ``prior_logits`` [B, A], ``value`` [B], ``embedding`` (a
        state embedding, pytree of [B, ...]).
      decision_recurrent_fn: ``(params, key, action [B], state_embedding) ->
        (DecisionRecurrentFnOutput, afterstate_embedding)`` with ``chance_logits`` [B, C] and
        ``afterstate_value`` [B].
      chance_recurrent_fn: ``(params, key, chance_outcome [B], afterstate_embedding) ->
        (ChanceRecurrentFnOutput, state_embedding)`` with ``action_logits`` [B, A] and
        ``value``, ``reward``, ``discount`` [B]; the state embedding is shaped like the root's.
      num_simulations: simulations (>= 1); each expands one decision or one chance node.
      invalid_actions: [B, A] 1 for invalid root actions.
      max_depth: maximum number of edges (decision and chance) from the root.
      loop_fn: loop over simulations (``jax.lax.fori_loop`` signature).
      qtransform: Q normalisation of PUCT at decision nodes.
      dirichlet_fraction: weight of the root Dirichlet noise (0 turns it off).
      dirichlet_alpha: Dirichlet concentration.
      pb_c_init, pb_c_base: PUCT constants c1, c2.
      temperature: acting temperature (0: most visited action).

    Returns:
      :class:`PolicyOutput` with ``action`` [B], ``action_weights`` [B, A] (root visit
      distribution) and the tree; its edge fields keep the actions ([B, N, A]) and its
      ``embeddings`` are :class:`StochasticRecurrentState`.

    Raises:
      TypeError: a model function does not return ``(output, embedding)`` with the fields above,
        or ``num_simulations`` / ``max_depth`` is not an int.
      ValueError: shapes disagree (named), or ``num_simulations`` < 1.

    >>> import jax, jax.numpy as jnp
    >>> def decide(params, key, action, emb):  # afterstate = the action; two equally likely dice
    ...     return DecisionRecurrentFnOutput(chance_logits=jnp.zeros((2, 2)),
    ...                                      afterstate_value=jnp.zeros(2)), action
    >>> def chance(params, key, outcome, action):  # reward action + outcome, then the end
    ...     return ChanceRecurrentFnOutput(action_logits=jnp.zeros((2, 3)), value=jnp.zeros(2),
    ...                                    reward=(action + outcome).astype(jnp.float32),
    ...                                    discount=jnp.zeros(2)), jnp.zeros(2, jnp.int32)
    >>> root = RootFnOutput(prior_logits=jnp.zeros((2, 3)), value=jnp.zeros(2),
    ...                     embedding=jnp.zeros(2, jnp.int32))
    >>> out = stochastic_muzero_policy(None, jax.random.key(0), root, decide, chance, 64,
    ...                                dirichlet_fraction=0.0, temperature=0.0)
    >>> out.action.tolist(), out.action_weights.shape  # E[reward] = action + 0.5
    ([2, 2], (2, 3))
    """
    search_lib.validate_search_inputs(root.prior_logits, root.value, num_simulations,
                                      invalid_actions, max_depth)
    batch, num_actions = root.prior_logits.shape
    num_chance, afterstate = _probe(params, key, root, decision_recurrent_fn, chance_recurrent_fn)
    key, dirichlet_key, search_key = jax.random.split(key, 3)
    logits = muzero_lib.add_dirichlet_noise(
        dirichlet_key, root.prior_logits, invalid_actions, dirichlet_fraction=dirichlet_fraction,
        dirichlet_alpha=dirichlet_alpha)
    # the root is a decision node: no chance edges; its afterstate embedding is never read
    state = StochasticRecurrentState(
        state_embedding=root.embedding,
        afterstate_embedding=jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), afterstate),
        is_decision_node=jnp.ones((batch,), bool))
    root = RootFnOutput(
        prior_logits=jnp.concatenate(
            [logits, jnp.full((batch, num_chance), -jnp.inf, logits.dtype)], axis=-1),
        value=root.value, embedding=state)
    if invalid_actions is not None:
        invalid_actions = jnp.concatenate(
            [invalid_actions, jnp.zeros((batch, num_chance), jnp.asarray(invalid_actions).dtype)],
            axis=-1)
    decide = functools.partial(search_lib.muzero_action_selection, pb_c_init=pb_c_init,
                               pb_c_base=pb_c_base, qtransform=qtransform)

    def root_selection(k, t, node):
        return decide(k, _edge_view(t, num_actions, True), node, 0)

    def interior_selection(k, t, node, depth):
        action = decide(k, _edge_view(t, num_actions, True), node, depth)
        outcome = chance_selection(_edge_view(t, num_actions, False), node) + num_actions
        return jnp.where(t.embeddings.is_decision_node[node], action, outcome)

    tree = search_lib.search(
        params, search_key, root=root,
        recurrent_fn=_combined_recurrent_fn(decision_recurrent_fn, chance_recurrent_fn,
                                            num_actions, num_chance),
        root_action_selection_fn=root_selection, interior_action_selection_fn=interior_selection,
        num_simulations=num_simulations, max_depth=max_depth, invalid_actions=invalid_actions,
        loop_fn=loop_fn)
    tree = _edge_view(tree, num_actions, True)
    weights = tree.summary().visit_probs
    return PolicyOutput(action=muzero_lib.act_by_visits(key, weights, temperature),
                        action_weights=weights, search_tree=tree)
