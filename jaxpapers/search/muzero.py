"""MuZero (PUCT) and Gumbel MuZero search policies with the mctx calling convention.

``muzero_policy`` follows arXiv:1911.08265 (App. B: PUCT selection, Dirichlet noise at the root,
acting by visit counts); ``gumbel_muzero_policy`` follows Danihelka et al., "Policy improvement by
planning with Gumbel" (ICLR 2022): Sequential Halving with Gumbel at the root (Alg. 2), the
deterministic interior rule (Eq. 14) and the policy target ``softmax(logits + sigma(q~))`` (Eq. 11).
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp

from jaxpapers.core import pytree
from jaxpapers.search import _search as search_lib
from jaxpapers.search import tree as tree_lib
from jaxpapers.search._types import PolicyOutput, RecurrentFn, RootFnOutput

__all__ = ["muzero_policy", "gumbel_muzero_policy", "GumbelMuZeroExtraData",
           "mask_invalid_actions", "add_dirichlet_noise", "act_by_visits"]


@pytree.dataclass
class GumbelMuZeroExtraData:
    """Extra tree data of Gumbel MuZero (mctx's name; read by the root selection rule).

    Attributes:
      root_gumbel: [B, A] Gumbel(0, 1) draws times ``gumbel_scale``.
    """

    root_gumbel: jax.Array  # [B, A]


def mask_invalid_actions(logits: jax.Array, invalid_actions: jax.Array | None) -> jax.Array:
    """Shift logits [B, A] to max 0 and give invalid actions the most negative finite logit.

    A finite logit keeps the softmax defined when every action is invalid (the end of a game).

    Args:
      logits: [B, A] logits.
      invalid_actions: [B, A] 1 for invalid actions, or None (then ``logits`` is returned).

    Returns:
      [B, A] masked logits.

    >>> import jax, jax.numpy as jnp
    >>> lg = mask_invalid_actions(jnp.array([[1.0, 2.0, 3.0]]), jnp.array([[0, 1, 0]]))
    >>> jax.nn.softmax(lg)[0, 1].item()
    0.0
    """
    if invalid_actions is None:
        return logits
    if jnp.shape(invalid_actions) != jnp.shape(logits):
        raise ValueError(f"invalid_actions must have the shape of the logits {jnp.shape(logits)}, "
                         f"got {jnp.shape(invalid_actions)}")
    logits = logits - jnp.max(logits, axis=-1, keepdims=True)
    return jnp.where(invalid_actions, jnp.finfo(logits.dtype).min, logits)


def _logits_from_probs(probs):
    return jnp.log(jnp.maximum(probs, jnp.finfo(probs.dtype).tiny))


def add_dirichlet_noise(key: jax.Array, prior_logits: jax.Array, invalid_actions: jax.Array | None,
                        *, dirichlet_fraction, dirichlet_alpha) -> jax.Array:
    """Root logits [B, A] of ``(1 - f) softmax(prior_logits) + f Dir(alpha)`` with invalid actions
    masked (MuZero, arXiv:1911.08265, App. C "exploration noise").

    Args:
      key: consumed.
      prior_logits: [B, A] root logits.
      invalid_actions: [B, A] or None.
      dirichlet_fraction: ``f`` in [0, 1].
      dirichlet_alpha: concentration ``alpha`` > 0.

    Returns:
      [B, A] noisy, masked logits.

    >>> import jax, jax.numpy as jnp
    >>> lg = add_dirichlet_noise(jax.random.key(0), jnp.zeros((2, 4)), None,
    ...                          dirichlet_fraction=0.0, dirichlet_alpha=0.3)
    >>> jnp.allclose(jax.nn.softmax(lg), 0.25).item()
    True
    """
    probs = jax.nn.softmax(prior_logits)
    batch, num_actions = probs.shape
    noise = jax.random.dirichlet(key, jnp.full([num_actions], dirichlet_alpha), shape=(batch,))
    noisy = (1 - dirichlet_fraction) * probs + dirichlet_fraction * noise
    return mask_invalid_actions(_logits_from_probs(noisy), invalid_actions)


def act_by_visits(key: jax.Array, visit_probs: jax.Array, temperature) -> jax.Array:
    """Sample actions [B] with probability proportional to ``visit_probs ** (1 / temperature)``.

    Args:
      key: consumed.
      visit_probs: [B, A] visit distribution.
      temperature: [] >= 0; 0 is greedy (logits divided by the smallest positive float).

    Returns:
      [B] int32 actions.

    >>> import jax, jax.numpy as jnp
    >>> act_by_visits(jax.random.key(0), jnp.array([[0.1, 0.7, 0.2]]), 0.0).tolist()
    [1]
    """
    logits = _logits_from_probs(visit_probs)
    logits = logits - jnp.max(logits, axis=-1, keepdims=True)
    logits = logits / jnp.maximum(jnp.finfo(logits.dtype).tiny, temperature)
    return jax.random.categorical(key, logits)


def muzero_policy(params: Any, key: jax.Array, root: RootFnOutput, recurrent_fn: RecurrentFn,
                  num_simulations: int, invalid_actions: jax.Array | None = None,
                  max_depth: int | None = None, loop_fn=jax.lax.fori_loop, *,
                  qtransform=tree_lib.qtransform_by_parent_and_siblings,
                  dirichlet_fraction: float = 0.25, dirichlet_alpha: float = 0.3,
                  pb_c_init: float = 1.25, pb_c_base: float = 19652.0,
                  temperature: float = 1.0) -> PolicyOutput:
    """MuZero search; acts by sampling visit counts ** (1 / temperature).

    Args:
      params: forwarded to ``recurrent_fn``.
      key: consumed (mctx's ``rng_key``, same position).
      root: :class:`RootFnOutput`, ``prior_logits`` [B, A], ``value`` [B].
      recurrent_fn: ``(params, key, action [B], embedding) -> (RecurrentFnOutput, embedding)``.
      num_simulations: simulations per search (>= 1).
      invalid_actions: [B, A] 1 for invalid root actions.
      max_depth: maximum search depth.
      loop_fn: loop over simulations.
      qtransform: Q normalisation used by PUCT.
      dirichlet_fraction: weight of the root Dirichlet noise (0 turns it off).
      dirichlet_alpha: Dirichlet concentration.
      pb_c_init, pb_c_base: PUCT constants c1, c2 (App. B, Eq. 2).
      temperature: acting temperature.

    Returns:
      :class:`PolicyOutput` with ``action`` [B], ``action_weights`` [B, A] (visit distribution).

    >>> import jax, jax.numpy as jnp
    >>> def rec(params, key, action, emb):
    ...     out = RecurrentFnOutput(reward=action.astype(jnp.float32), discount=jnp.zeros(2),
    ...                             prior_logits=jnp.zeros((2, 3)), value=jnp.zeros(2))
    ...     return out, emb
    >>> root = RootFnOutput(prior_logits=jnp.zeros((2, 3)), value=jnp.zeros(2),
    ...                     embedding=jnp.zeros((2, 1)))
    >>> out = muzero_policy(None, jax.random.key(0), root, rec, 16, dirichlet_fraction=0.0)
    >>> out.action_weights.shape, int(jnp.argmax(out.action_weights[0]))
    ((2, 3), 2)
    """
    search_lib.validate_search_inputs(root.prior_logits, root.value, num_simulations,
                                      invalid_actions, max_depth)
    key, dirichlet_key, search_key = jax.random.split(key, 3)
    root = root.replace(prior_logits=add_dirichlet_noise(
        dirichlet_key, root.prior_logits, invalid_actions, dirichlet_fraction=dirichlet_fraction,
        dirichlet_alpha=dirichlet_alpha))
    interior = functools.partial(search_lib.muzero_action_selection, pb_c_init=pb_c_init,
                                 pb_c_base=pb_c_base, qtransform=qtransform)
    root_sel = functools.partial(interior, depth=0)
    tree = search_lib.search(params, search_key, root=root, recurrent_fn=recurrent_fn,
                             root_action_selection_fn=root_sel,
                             interior_action_selection_fn=interior,
                             num_simulations=num_simulations, max_depth=max_depth,
                             invalid_actions=invalid_actions, loop_fn=loop_fn)
    weights = tree.summary().visit_probs
    action = act_by_visits(key, weights, temperature)
    return PolicyOutput(action=action, action_weights=weights, search_tree=tree)


def gumbel_root(key, root, gumbel_scale, invalid_actions):
    """Mask invalid root actions and draw the root Gumbel noise (Gumbel MuZero, Alg. 2).

    Returns ``(root, key, gumbel)`` with ``gumbel`` [B, A] scaled by ``gumbel_scale`` and the
    unused part of the key for the search.
    """
    root = root.replace(prior_logits=mask_invalid_actions(root.prior_logits, invalid_actions))
    key, gumbel_key = jax.random.split(key)
    gumbel = gumbel_scale * jax.random.gumbel(gumbel_key, root.prior_logits.shape,
                                              root.prior_logits.dtype)
    return root, key, gumbel


def gumbel_selection_fns(num_simulations, max_num_considered_actions, qtransform):
    """Root (sequential halving) and interior (deterministic) selection of Gumbel MuZero."""
    return dict(
        root_action_selection_fn=functools.partial(
            search_lib.gumbel_muzero_root_action_selection, num_simulations=num_simulations,
            max_num_considered_actions=max_num_considered_actions, qtransform=qtransform),
        interior_action_selection_fn=functools.partial(
            search_lib.gumbel_muzero_interior_action_selection, qtransform=qtransform))


def gumbel_muzero_policy(params: Any, key: jax.Array, root: RootFnOutput,
                         recurrent_fn: RecurrentFn, num_simulations: int,
                         invalid_actions: jax.Array | None = None, max_depth: int | None = None,
                         loop_fn=jax.lax.fori_loop, *,
                         qtransform=tree_lib.qtransform_completed_by_mix_value,
                         max_num_considered_actions: int = 16,
                         gumbel_scale: float = 1.0) -> PolicyOutput:
    """Gumbel MuZero search (Danihelka et al. 2022, Alg. 2).

    Acts with ``argmax_a g(a) + logits(a) + sigma(q~(a))`` among the most visited actions and
    returns ``action_weights = softmax(logits + sigma(q~))`` [B, A] as the policy target (Eq. 11).

    Args:
      params, key, root, recurrent_fn, num_simulations, invalid_actions, max_depth, loop_fn: as
        in :func:`muzero_policy`.
      qtransform: completed Q-values sigma(q~) (default: mixed-value completion, App. D).
      max_num_considered_actions: actions sampled without replacement at the root (static).
      gumbel_scale: scale of the root Gumbel noise (0: deterministic, for evaluation).

    Returns:
      :class:`PolicyOutput` with ``action`` [B], ``action_weights`` [B, A] and the tree
      (``extra_data`` holds the root Gumbel draws).

    >>> import jax, jax.numpy as jnp
    >>> def rec(params, key, action, emb):
    ...     out = RecurrentFnOutput(reward=action.astype(jnp.float32), discount=jnp.zeros(2),
    ...                             prior_logits=jnp.zeros((2, 3)), value=jnp.zeros(2))
    ...     return out, emb
    >>> root = RootFnOutput(prior_logits=jnp.zeros((2, 3)), value=jnp.zeros(2),
    ...                     embedding=jnp.zeros((2, 1)))
    >>> out = gumbel_muzero_policy(None, jax.random.key(0), root, rec, 8, gumbel_scale=0.0)
    >>> out.action.tolist()
    [2, 2]
    """
    search_lib.validate_search_inputs(root.prior_logits, root.value, num_simulations,
                                      invalid_actions, max_depth)
    root, key, gumbel = gumbel_root(key, root, gumbel_scale, invalid_actions)
    tree = search_lib.search(
        params, key, root=root, recurrent_fn=recurrent_fn,
        **gumbel_selection_fns(num_simulations, max_num_considered_actions, qtransform),
        num_simulations=num_simulations, max_depth=max_depth, invalid_actions=invalid_actions,
        extra_data=GumbelMuZeroExtraData(root_gumbel=gumbel), loop_fn=loop_fn)
    return gumbel_policy_output(tree, root.prior_logits, gumbel, invalid_actions, qtransform)


def gumbel_policy_output(tree, prior_logits, gumbel, invalid_actions, qtransform) -> PolicyOutput:
    """Final Gumbel MuZero action and policy target from a finished tree."""
    visits = tree.children_visits[:, tree_lib.ROOT_INDEX].astype(prior_logits.dtype)
    considered = jnp.max(visits, axis=-1, keepdims=True)
    q = jax.vmap(qtransform, in_axes=(0, None))(tree, tree_lib.ROOT_INDEX)
    score = search_lib.score_considered(considered, gumbel, prior_logits, q, visits)
    action = search_lib.masked_argmax(score, invalid_actions)
    weights = jax.nn.softmax(mask_invalid_actions(prior_logits + q, invalid_actions))
    return PolicyOutput(action=action, action_weights=weights, search_tree=tree)


from jaxpapers.search._types import RecurrentFnOutput  # noqa: E402,F401  (doctest namespace)
