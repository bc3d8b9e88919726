"""Containers and callable aliases of the search package (mctx field names and conventions).

Letters used in shape comments: ``B`` batch, ``A`` actions, ``N`` tree nodes (``num_simulations +
1``), ``Q`` quantiles of a distributional head, ``M`` return samples.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax

from jaxpapers.core import pytree

__all__ = ["RootFnOutput", "RecurrentFnOutput", "RiskRootFnOutput", "RiskRecurrentFnOutput",
           "PolicyOutput", "RecurrentFn", "RiskRecurrentFn", "UtilityFn", "LoopFn"]


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

    def replace(self, **kw) -> RootFnOutput:
        return dataclasses.replace(self, **kw)


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

    def replace(self, **kw) -> RecurrentFnOutput:
        return dataclasses.replace(self, **kw)


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

    def replace(self, **kw) -> RiskRootFnOutput:
        return dataclasses.replace(self, **kw)


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

    def replace(self, **kw) -> RiskRecurrentFnOutput:
        return dataclasses.replace(self, **kw)


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


# recurrent_fn(params, key, action [B], embedding [B, ...]) -> (RecurrentFnOutput, embedding)
RecurrentFn = Callable[[Any, jax.Array, jax.Array, Any], tuple[RecurrentFnOutput, Any]]
RiskRecurrentFn = Callable[[Any, jax.Array, jax.Array, Any], tuple[RiskRecurrentFnOutput, Any]]
# utility(samples [M]) -> [] scalar (unbatched)
UtilityFn = Callable[[jax.Array], jax.Array]
# loop_fn(lower, upper, body(i, carry) -> carry, carry) -> carry (jax.lax.fori_loop signature)
LoopFn = Callable[[int, int, Callable[[Any, Any], Any], Any], Any]
