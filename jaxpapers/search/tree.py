"""Search tree as flat arrays, its Q-values, summaries and Q-transforms.

The tree of example ``b`` has ``N = num_simulations + 1`` node slots; simulation ``s`` creates node
``s + 1`` (node 0 is the root). Parent/child links are integer arrays, so the whole tree is one
pytree of fixed shape that jit, vmap and scan can carry (the layout of mctx, arXiv:1911.08265 App. B).
"""

from __future__ import annotations

from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np

from jaxpapers.core import pytree
from jaxpapers.core.checks import concrete

__all__ = ["Tree", "SearchSummary", "instantiate_tree", "summary", "qtransform_by_min_max",
           "qtransform_by_parent_and_siblings", "qtransform_completed_by_mix_value"]

ROOT_INDEX = 0
NO_PARENT = -1
UNVISITED = -1


@pytree.dataclass
class Tree:
    """Batched search tree (``B`` batch, ``N`` nodes, ``A`` actions).

    Attributes:
      node_visits: [B, N] int32 visit count of each node.
      raw_values: [B, N] value predicted when the node was expanded.
      node_values: [B, N] running mean of the backed-up values.
      parents: [B, N] int32 parent index (-1 at the root / unused slots).
      action_from_parent: [B, N] int32 action that led to the node (-1 at the root).
      children_index: [B, N, A] int32 child node index, -1 when not expanded.
      children_prior_logits: [B, N, A] prior logits of each node's actions.
      children_visits: [B, N, A] int32 visit counts of the edges.
      children_rewards: [B, N, A] edge rewards.
      children_discounts: [B, N, A] edge discounts.
      children_values: [B, N, A] value of the child node reached by the edge.
      embeddings: pytree of [B, N, ...] state embeddings.
      root_invalid_actions: [B, A] 1 for invalid root actions.
      extra_data: pytree of [B, ...] algorithm data (e.g. the root Gumbel draws).
    """

    node_visits: jax.Array  # [B, N]
    raw_values: jax.Array  # [B, N]
    node_values: jax.Array  # [B, N]
    parents: jax.Array  # [B, N]
    action_from_parent: jax.Array  # [B, N]
    children_index: jax.Array  # [B, N, A]
    children_prior_logits: jax.Array  # [B, N, A]
    children_visits: jax.Array  # [B, N, A]
    children_rewards: jax.Array  # [B, N, A]
    children_discounts: jax.Array  # [B, N, A]
    children_values: jax.Array  # [B, N, A]
    embeddings: Any  # [B, N, ...]
    root_invalid_actions: jax.Array  # [B, A]
    extra_data: Any  # [B, ...]

    ROOT_INDEX: ClassVar[int] = ROOT_INDEX
    NO_PARENT: ClassVar[int] = NO_PARENT
    UNVISITED: ClassVar[int] = UNVISITED

    @property
    def num_actions(self) -> int:
        return self.children_index.shape[-1]

    @property
    def num_simulations(self) -> int:
        return self.node_visits.shape[-1] - 1

    def qvalues(self, indices: jax.typing.ArrayLike) -> jax.Array:
        """Q-values ``r(s, a) + discount(s, a) v(child(s, a))`` of nodes (mctx's ``Tree.qvalues``).

        Args:
          indices: a scalar node index for an *unbatched* tree (fields ``[N, ...]``), giving [A];
            or node indices [B] for a batched tree, one per example, giving [B, A].

        Returns:
          [A] or [B, A] Q-values (0 on edges never expanded).

        >>> import jax.numpy as jnp
        >>> t = instantiate_tree(jnp.zeros((2, 3)), jnp.zeros(2), jnp.zeros((2, 1)),
        ...                      num_simulations=1, invalid_actions=jnp.zeros((2, 3)))
        >>> t = t.replace(children_rewards=t.children_rewards.at[:, 0, 1].set(1.0))
        >>> t.qvalues(jnp.zeros(2, jnp.int32)).tolist()
        [[0.0, 1.0, 0.0], [0.0, 1.0, 0.0]]
        """
        if jnp.ndim(indices):
            return jax.vmap(_unbatched_qvalues)(self, indices)
        return _unbatched_qvalues(self, indices)

    def summary(self) -> SearchSummary:
        """Root statistics of a batched tree (see :func:`summary`)."""
        return summary(self)


@pytree.dataclass
class SearchSummary:
    """Root statistics of a batched tree.

    Attributes:
      visit_counts: [B, A] root edge visit counts (float).
      visit_probs: [B, A] normalised visit counts (uniform when nothing was visited).
      value: [B] root search value.
      qvalues: [B, A] root Q-values ``r + discount * v(child)``.
    """

    visit_counts: jax.Array  # [B, A]
    visit_probs: jax.Array  # [B, A]
    value: jax.Array  # [B]
    qvalues: jax.Array  # [B, A]


def instantiate_tree(prior_logits: jax.Array, value: jax.Array, embedding: Any, *,
                     num_simulations: int, invalid_actions: jax.Array,
                     extra_data: Any = None) -> Tree:
    """An empty batched tree with ``N = num_simulations + 1`` node slots and its root filled in.

    Args:
      prior_logits: [B, A] root policy logits.
      value: [B] root value; its dtype is the dtype of every value field.
      embedding: pytree of [B, ...] root embeddings.
      num_simulations: simulations the tree has room for (static).
      invalid_actions: [B, A] 1 for invalid root actions.
      extra_data: pytree of [B, ...] stored as ``tree.extra_data``.

    Returns:
      A :class:`Tree` whose node 0 holds the root (one visit, value ``value``).

    >>> import jax.numpy as jnp
    >>> t = instantiate_tree(jnp.zeros((2, 3)), jnp.ones(2), jnp.zeros((2, 4)),
    ...                      num_simulations=5, invalid_actions=jnp.zeros((2, 3)))
    >>> t.children_index.shape, t.node_visits[:, 0].tolist(), t.embeddings.shape
    ((2, 6, 3), [1, 1], (2, 6, 4))
    """
    batch, num_actions = prior_logits.shape
    n = num_simulations + 1
    dt = value.dtype

    def node_zeros(x):
        return jnp.zeros((batch, n) + x.shape[1:], x.dtype)

    tree = Tree(
        node_visits=jnp.zeros((batch, n), jnp.int32),
        raw_values=jnp.zeros((batch, n), dt),
        node_values=jnp.zeros((batch, n), dt),
        parents=jnp.full((batch, n), NO_PARENT, jnp.int32),
        action_from_parent=jnp.full((batch, n), NO_PARENT, jnp.int32),
        children_index=jnp.full((batch, n, num_actions), UNVISITED, jnp.int32),
        children_prior_logits=jnp.zeros((batch, n, num_actions), prior_logits.dtype),
        children_visits=jnp.zeros((batch, n, num_actions), jnp.int32),
        children_rewards=jnp.zeros((batch, n, num_actions), dt),
        children_discounts=jnp.zeros((batch, n, num_actions), dt),
        children_values=jnp.zeros((batch, n, num_actions), dt),
        embeddings=jax.tree.map(node_zeros, embedding),
        root_invalid_actions=invalid_actions,
        extra_data=extra_data)
    return set_node(tree, jnp.zeros((batch,), jnp.int32), prior_logits, value, embedding)


def set_node(tree: Tree, node_index: jax.Array, prior_logits: jax.Array, value: jax.Array,
             embedding: Any) -> Tree:
    """Write a freshly evaluated node ``node_index`` [B] (one more visit; value reset to ``value``)."""
    b = jnp.arange(tree.node_values.shape[0])
    return tree.replace(
        children_prior_logits=tree.children_prior_logits.at[b, node_index].set(prior_logits),
        raw_values=tree.raw_values.at[b, node_index].set(value),
        node_values=tree.node_values.at[b, node_index].set(value),
        node_visits=tree.node_visits.at[b, node_index].add(1),
        embeddings=jax.tree.map(lambda t, s: t.at[b, node_index].set(s), tree.embeddings,
                                embedding))


def _unbatched_qvalues(tree: Tree, node_index: jax.Array) -> jax.Array:
    """Q-values ``r(s, a) + discount(s, a) * v(child)`` [A] of one node of an *unbatched* tree."""
    if tree.children_discounts.ndim != 2:
        raise ValueError(f"a scalar node index needs an unbatched tree (children fields [N, A]); "
                         f"got children_discounts of shape {tree.children_discounts.shape}")
    return (tree.children_rewards[node_index]
            + tree.children_discounts[node_index] * tree.children_values[node_index])


def summary(tree: Tree) -> SearchSummary:
    """Root statistics of a batched tree (mctx's ``Tree.summary``).

    Args:
      tree: batched tree (fields [B, N, ...]).

    Returns:
      :class:`SearchSummary` with root ``visit_counts`` [B, A] (float), ``visit_probs`` [B, A]
      (uniform when the root has no visited edge), ``value`` [B] and ``qvalues`` [B, A].

    >>> import jax.numpy as jnp
    >>> t = instantiate_tree(jnp.zeros((1, 2)), jnp.full(1, 0.5), jnp.zeros((1, 1)),
    ...                      num_simulations=3, invalid_actions=jnp.zeros((1, 2)))
    >>> t = t.replace(children_visits=t.children_visits.at[0, 0].set(jnp.array([3, 1])))
    >>> s = summary(t)
    >>> s.visit_probs.tolist(), s.value.tolist()
    ([[0.75, 0.25]], [0.5])
    """
    value = tree.node_values[:, ROOT_INDEX]
    q = tree.qvalues(jnp.full(value.shape, ROOT_INDEX, jnp.int32))
    counts = tree.children_visits[:, ROOT_INDEX].astype(value.dtype)
    total = jnp.sum(counts, axis=-1, keepdims=True)
    probs = counts / jnp.maximum(total, 1)
    probs = jnp.where(total > 0, probs, 1 / tree.num_actions)
    return SearchSummary(visit_counts=counts, visit_probs=probs, value=value, qvalues=q)


def _check_node_index(node_index) -> None:
    if jnp.ndim(node_index) != 0:
        raise ValueError(f"node_index must be a scalar node index of an unbatched tree (vmap the "
                         f"Q-transform over the batch), got shape {jnp.shape(node_index)}")


def _example_tree() -> Tree:
    """Unbatched 3-action tree used by the examples: edges 0, 1 visited with Q 0.5 and -1."""
    t = instantiate_tree(jnp.zeros((1, 3)), jnp.zeros(1), jnp.zeros((1, 1)), num_simulations=2,
                         invalid_actions=jnp.zeros((1, 3)))
    t = t.replace(children_rewards=t.children_rewards.at[0, 0, :2].set(jnp.array([0.5, -1.0])),
                  children_visits=t.children_visits.at[0, 0, :2].set(1))
    return jax.tree.map(lambda x: x[0], t)


def qtransform_by_min_max(tree: Tree, node_index: jax.typing.ArrayLike, *,
                          min_value: jax.typing.ArrayLike,
                          max_value: jax.typing.ArrayLike) -> jax.Array:
    """Q-values [A] normalised by given bounds: ``(q - min_value) / (max_value - min_value)``.

    mctx's ``qtransform_by_min_max`` (same keywords and semantics): unvisited actions get
    ``min_value``, hence 0 after the normalisation. Use it when the range of the returns is known
    (e.g. [-1, 1] in two-player games), through ``functools.partial``.

    Args:
      tree: *unbatched* tree (fields [N, ...]).
      node_index: [] index of the node whose edges are scored.
      min_value: [] lowest possible Q-value.
      max_value: [] highest possible Q-value (> ``min_value``).

    Returns:
      [A] normalised Q-values.

    >>> q = qtransform_by_min_max(_example_tree(), 0, min_value=-1.0, max_value=1.0)
    >>> q.tolist()
    [0.75, 0.0, 0.0]
    """
    _check_node_index(node_index)
    lo, hi = concrete(min_value), concrete(max_value)
    if lo is not None and hi is not None and not bool(np.all(hi > lo)):
        raise ValueError(f"max_value must be greater than min_value, got min_value={lo.tolist()}, "
                         f"max_value={hi.tolist()}")
    q = tree.qvalues(node_index)
    visits = tree.children_visits[node_index]
    completed = jnp.where(visits > 0, q, min_value)
    return (completed - min_value) / (max_value - min_value)


def qtransform_by_parent_and_siblings(tree: Tree, node_index: jax.typing.ArrayLike, *,
                                      epsilon: float = 1e-8) -> jax.Array:
    """Q-values [A] min-max normalised over the node value and visited siblings (unbatched tree).

    Unvisited actions get 0 (the minimum). MuZero's normalisation (arXiv:1911.08265, App. B).

    Args:
      tree: *unbatched* tree (fields [N, ...]).
      node_index: [] node index.
      epsilon: smallest denominator.

    Returns:
      [A] Q-values in [0, 1].

    >>> qtransform_by_parent_and_siblings(_example_tree(), 0).tolist()  # v(node) = 0
    [1.0, 0.0, 0.0]
    """
    _check_node_index(node_index)
    q = tree.qvalues(node_index)
    visits = tree.children_visits[node_index]
    v = tree.node_values[node_index]
    safe = jnp.where(visits > 0, q, v)
    lo = jnp.minimum(v, jnp.min(safe, axis=-1))
    hi = jnp.maximum(v, jnp.max(safe, axis=-1))
    completed = jnp.where(visits > 0, q, lo)
    return (completed - lo) / jnp.maximum(hi - lo, epsilon)


def qtransform_completed_by_mix_value(tree: Tree, node_index: jax.Array, *,
                                      value_scale: float = 0.1, maxvisit_init: float = 50.0,
                                      rescale_values: bool = True, use_mixed_value: bool = True,
                                      epsilon: float = 1e-8) -> jax.Array:
    """Completed, rescaled Q-values [A] of Gumbel MuZero (Danihelka et al. 2022, App. D, Eq. 33).

    Unvisited actions get the mixed value ``(v_raw + sum_b N(b) * sum_{visited} pi q / sum pi) /
    (1 + sum_b N(b))``; the result is scaled by ``(maxvisit_init + max_b N(b)) * value_scale``.

    Args:
      tree: *unbatched* tree (fields [N, ...]).
      node_index: [] node index.
      value_scale: scale of the completed Q-values.
      maxvisit_init: offset added to the largest visit count in the scale.
      rescale_values: min-max rescale the completed Q-values to [0, 1] first.
      use_mixed_value: complete with the mixed value (else with the raw value).
      epsilon: smallest denominator of the rescaling.

    Returns:
      [A] completed, scaled Q-values.

    >>> q = qtransform_completed_by_mix_value(_example_tree(), 0)  # mixed value -1/6
    >>> [round(x, 4) for x in q.tolist()]
    [5.1, 0.0, 2.8333]
    """
    _check_node_index(node_index)
    q = tree.qvalues(node_index)
    visits = tree.children_visits[node_index]
    raw = tree.raw_values[node_index]
    probs = jax.nn.softmax(tree.children_prior_logits[node_index])
    if use_mixed_value:
        n_sum = jnp.sum(visits, axis=-1)
        probs = jnp.maximum(jnp.finfo(probs.dtype).tiny, probs)
        visited = visits > 0
        p_sum = jnp.sum(jnp.where(visited, probs, 0.0), axis=-1)
        wq = jnp.sum(jnp.where(visited, probs * q / jnp.where(visited, p_sum, 1.0), 0.0), axis=-1)
        value = (raw + n_sum * wq) / (n_sum + 1)
    else:
        value = raw
    completed = jnp.where(visits > 0, q, value)
    if rescale_values:
        lo = jnp.min(completed, axis=-1, keepdims=True)
        hi = jnp.max(completed, axis=-1, keepdims=True)
        completed = (completed - lo) / jnp.maximum(hi - lo, epsilon)
    return (maxvisit_init + jnp.max(visits, axis=-1)) * value_scale * completed
