"""Containers and callable aliases of the search package (mctx field names and conventions).

Letters used in shape comments: ``B`` batch, ``A`` actions, ``N`` tree nodes (``num_simulations +
1``), ``Q`` quantiles of a distributional head, ``M`` return samples, ``C`` chance outcomes of
Stochastic MuZero.

Every class has ``replace(**changes)`` (from :func:`jaxpapers.core.pytree.dataclass`):

>>> import jax.numpy as jnp
>>> out = RecurrentFnOutput(reward=jnp.zeros(2), discount=jnp.ones(2),
...                         prior_logits=jnp.zeros((2, 3)), value=jnp.zeros(2))
>>> out.replace(value=jnp.ones(2)).value.tolist()
[1.0, 1.0]
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax

from jaxpapers.core import pytree

__all__ = ["RootFnOutput", "RecurrentFnOutput", "RiskRootFnOutput", "RiskRecurrentFnOutput",
           "PolicyOutput", "DecisionRecurrentFnOutput", "ChanceRecurrentFnOutput",
           "StochasticRecurrentState", "RecurrentState", "RecurrentFn", "RiskRecurrentFn",
           "DecisionRecurrentFn", "ChanceRecurrentFn", "RootActionSelectionFn",
           "InteriorActionSelectionFn", "UtilityFn", "LoopFn"]


@pytree.dataclass
class RootFnOutput:
    """Output of the representation + prediction functions at the search root.

    Attributes:
      prior_logits: [B, A] policy logits at the root.
      value: [B] value estimate of the root.
      embedding: pytree of [B, ...] state embeddings.
    """

    prior_logits: jax.Array  # [B, A]
    value: jax.Array  # [B]
    embedding: Any  # [B, ...]


@pytree.dataclass
class RecurrentFnOutput:
    """Output of ``recurrent_fn`` for one expanded edge (MuZero dynamics + prediction).

    Attributes:
      reward: [B] reward of the transition.
      discount: [B] discount applied to the value of the next node (0 at terminal states).
      prior_logits: [B, A] policy logits at the next node.
      value: [B] value estimate of the next node.
    """

    reward: jax.Array  # [B]
    discount: jax.Array  # [B]
    prior_logits: jax.Array  # [B, A]
    value: jax.Array  # [B]


@pytree.dataclass
class RiskRootFnOutput:
    """Root output of a distributional (RiskZero) model.

    Attributes:
      prior_logits: [B, A] policy logits.
      value: [B, Q] quantiles (at tau_i = (2i + 1) / 2Q) of the return-to-go from the root.
      embedding: pytree of [B, ...] state embeddings.
      return_history: [B, Q] quantiles of the (discounted) return accumulated before the root.
      root_discount: [B] gamma^t, the discount of the root's time step relative to the episode start
        (multiplies the return-to-go samples).
    """

    prior_logits: jax.Array  # [B, A]
    value: jax.Array  # [B, Q]
    embedding: Any  # [B, ...]
    return_history: jax.Array  # [B, Q]
    root_discount: jax.Array  # [B]


@pytree.dataclass
class RiskRecurrentFnOutput:
    """Distributional ``recurrent_fn`` output.

    Attributes:
      reward: [B, Q] quantiles of the transition's reward.
      discount: [B] discount applied after the reward (0 at terminal states).
      prior_logits: [B, A] policy logits at the next node.
      value: [B, Q] quantiles of the return-to-go from the next node.
    """

    reward: jax.Array  # [B, Q]
    discount: jax.Array  # [B]
    prior_logits: jax.Array  # [B, A]
    value: jax.Array  # [B, Q]


@pytree.dataclass
class PolicyOutput:
    """Result of a search policy.

    Attributes:
      action: [B] int32 proposed action.
      action_weights: [B, A] policy target (visit distribution, or softmax of completed Q for
        Gumbel MuZero).
      search_tree: the final :class:`~jaxpapers.search.tree.Tree`.
    """

    action: jax.Array  # [B]
    action_weights: jax.Array  # [B, A]
    search_tree: Any


@pytree.dataclass
class DecisionRecurrentFnOutput:
    """Output of ``decision_recurrent_fn`` (Stochastic MuZero): a state and an action lead to an
    afterstate, with no reward and no discount on that edge (Antonoglou et al. 2022, Sec. 4).

    Attributes:
      chance_logits: [B, C] logits of the chance outcomes at the afterstate, sigma(c | as).
      afterstate_value: [B] value Q(s, a) = V(as) of the afterstate.
    """

    chance_logits: jax.Array  # [B, C]
    afterstate_value: jax.Array  # [B]


@pytree.dataclass
class ChanceRecurrentFnOutput:
    """Output of ``chance_recurrent_fn`` (Stochastic MuZero): an afterstate and a chance outcome
    lead to the next state, with the transition's reward and discount.

    Attributes:
      action_logits: [B, A] policy logits at the next state.
      value: [B] value of the next state.
      reward: [B] reward of the transition.
      discount: [B] discount applied to the next state's value (0 at terminal states).
    """

    action_logits: jax.Array  # [B, A]
    value: jax.Array  # [B]
    reward: jax.Array  # [B]
    discount: jax.Array  # [B]


@pytree.dataclass
class StochasticRecurrentState:
    """Embedding of a node of a Stochastic MuZero tree (decision node or chance node).

    Attributes:
      state_embedding: pytree of [B, ...] state embeddings (meaningful at decision nodes).
      afterstate_embedding: pytree of [B, ...] afterstate embeddings (meaningful at chance nodes).
      is_decision_node: [B] bool, True at decision nodes (states), False at chance nodes.
    """

    state_embedding: Any  # [B, ...]
    afterstate_embedding: Any  # [B, ...]
    is_decision_node: jax.Array  # [B]


# a pytree of [B, ...] arrays: whatever the model functions pass between nodes
RecurrentState = Any
# recurrent_fn(params, key, action [B], embedding [B, ...]) -> (RecurrentFnOutput, embedding)
RecurrentFn = Callable[[Any, jax.Array, jax.Array, RecurrentState],
                       tuple[RecurrentFnOutput, RecurrentState]]
RiskRecurrentFn = Callable[[Any, jax.Array, jax.Array, Any], tuple[RiskRecurrentFnOutput, Any]]
# decision_recurrent_fn(params, key, action [B], state_embedding) ->
#     (DecisionRecurrentFnOutput, afterstate_embedding)
DecisionRecurrentFn = Callable[[Any, jax.Array, jax.Array, Any],
                               tuple[DecisionRecurrentFnOutput, Any]]
# chance_recurrent_fn(params, key, chance_outcome [B], afterstate_embedding) ->
#     (ChanceRecurrentFnOutput, state_embedding)
ChanceRecurrentFn = Callable[[Any, jax.Array, jax.Array, Any], tuple[ChanceRecurrentFnOutput, Any]]
# selection rules on an *unbatched* tree: (key, tree, node_index []) -> action [] at the root,
# (key, tree, node_index [], depth []) -> action [] below it
RootActionSelectionFn = Callable[[jax.Array, Any, jax.Array], jax.Array]
InteriorActionSelectionFn = Callable[[jax.Array, Any, jax.Array, jax.Array], jax.Array]
# utility(samples [M]) -> [] scalar (unbatched)
UtilityFn = Callable[[jax.Array], jax.Array]
# loop_fn(lower, upper, body(i, carry) -> carry, carry) -> carry (jax.lax.fori_loop signature)
LoopFn = Callable[[int, int, Callable[[Any, Any], Any], Any], Any]
