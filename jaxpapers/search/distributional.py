"""Risk-sensitive tree search with distributional (quantile) rewards and values (RiskZero).

Each edge of the tree stores the quantiles [Q] of its reward; each node the quantiles of its
return-to-go. When simulation ``s`` expands the edge ``(p, a)`` into node ``j`` at depth ``d``, it draws
``M`` samples of the whole-trajectory return

    Z = H + gamma^t (R_1 + gamma R_2 + ... + gamma^(d-1) (R_d + gamma V_j)),

with ``H`` the return accumulated before the root (its own quantile head), ``R_k`` independent
samples of the edge rewards on the root-to-``j`` path and ``V_j`` samples of the new node's value
(RiskZero, Yassin & Wen 2026, Sec. 4 "trajectory return" as read in the official code), and sets
the node's value to the utility ``U(Z)`` (mean, CVaR_alpha, Wang, power). The backward pass is the
plain running mean of these scalars (rewards are already inside ``Z``), so the tree reuses the
scalar machinery with reward 0 and discount 1 on every edge.

Prefix samples are cached per node: node ``j`` keeps the M samples of ``H + gamma^t (R_1 + ... +
gamma^(d-1) R_d)`` drawn when it was expanded, so an expansion costs O(M) instead of O(depth M) and
every trajectory through ``j`` shares those draws (common random numbers: siblings are compared on
the same prefix noise). Each expansion's ``Z`` is still an exact sample of the trajectory return.
The official code redraws the prefix every simulation; both estimate the same utility.

Sampling keys are stateless: the samples of example ``b`` for node ``j`` come from
``fold_in(fold_in(fold_in(key, s), b), j)`` with ``s`` the simulation that expanded ``j``, so a result
does not depend on the batch it ran in.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp

from jaxpapers.core import pytree
from jaxpapers.core.checks import check_int
from jaxpapers.search import muzero as muzero_lib
from jaxpapers.search import risk as risk_lib
from jaxpapers.search import _search as search_lib
from jaxpapers.search import tree as tree_lib
from jaxpapers.search._types import (PolicyOutput, RiskRecurrentFn, RiskRootFnOutput,
                                     UtilityFn)
from jaxpapers.search.tree import ROOT_INDEX, UNVISITED, Tree

__all__ = ["RiskExtraData", "risk_search", "risk_gumbel_muzero_policy", "risk_muzero_policy"]

_HISTORY_TAG = 2 ** 30  # fold-in tag of the history samples (node tags are 2 j and 2 j + 1)


@pytree.dataclass
class RiskExtraData:
    """Distributional data kept in ``tree.extra_data``.

    Attributes:
      root_gumbel: [B, A] Gumbel draws (zeros for PUCT).
      return_history: [B, Q] quantiles of the return before the root.
      root_discount: [B] gamma^t of the root.
      node_reward_quantiles: [B, N, Q] reward quantiles of the edge into each node (filled in the
        returned tree; None while searching, when they travel outside the tree so that the
        while loops of simulate/backward do not carry them).
      node_discounts: [B, N] model discount of the edge into each node (same convention).
    """

    root_gumbel: jax.Array  # [B, A]
    return_history: jax.Array  # [B, Q]
    root_discount: jax.Array  # [B]
    node_reward_quantiles: jax.Array | None = None  # [B, N, Q]
    node_discounts: jax.Array | None = None  # [B, N]


def _samples(key, tag, quantiles, num_samples, stratified):
    return risk_lib.sample_quantiles(jax.random.fold_in(key, tag), quantiles, num_samples,
                                     stratified=stratified, assume_sorted=True)


def risk_search(params: Any, key: jax.Array, *, root: RiskRootFnOutput,
                recurrent_fn: RiskRecurrentFn, root_action_selection_fn,
                interior_action_selection_fn, num_simulations: int, utility_fn: UtilityFn,
                num_samples: int = 256, stratified: bool = False, sample_history: bool = True,
                max_depth: int | None = None, invalid_actions: jax.Array | None = None,
                root_gumbel: jax.Array | None = None, loop_fn=jax.lax.fori_loop) -> Tree:
    """Distributional search with utility backups (RiskZero; Sec. 4, "risk-sensitive search").

    Args:
      params: forwarded to ``recurrent_fn``.
      key: consumed.
      root: :class:`RiskRootFnOutput` (``value`` and ``return_history`` [B, Q]).
      recurrent_fn: ``(params, key, action [B], emb) -> (RiskRecurrentFnOutput, emb)``.
      root_action_selection_fn, interior_action_selection_fn: as in
        :func:`jaxpapers.search.search`.
      num_simulations: simulations (>= 1).
      utility_fn: ``samples [M] -> scalar`` (see :mod:`jaxpapers.search.risk`).
      num_samples: return samples M per expansion.
      stratified: stratified tau grid instead of uniform draws.
      sample_history: include the return-history samples.
      max_depth, invalid_actions, loop_fn: as in :func:`jaxpapers.search.search`.
      root_gumbel: [B, A] Gumbel draws for Gumbel root selection.

    Returns:
      The batched :class:`Tree`; ``node_values`` hold mean utilities, ``extra_data`` the quantiles.

    >>> import functools, jax, jax.numpy as jnp
    >>> from jaxpapers.search import muzero_action_selection
    >>> def rec(params, key, action, emb):  # reward quantiles {a - 1, a + 1}, then the end
    ...     r = action[:, None] + jnp.array([[-1.0, 1.0]])
    ...     return RiskRecurrentFnOutput(reward=r, discount=jnp.zeros(1),
    ...         prior_logits=jnp.zeros((1, 2)), value=jnp.zeros((1, 2))), emb
    >>> root = RiskRootFnOutput(prior_logits=jnp.zeros((1, 2)), value=jnp.zeros((1, 2)),
    ...     embedding=jnp.zeros((1, 1)), return_history=jnp.zeros((1, 2)),
    ...     root_discount=jnp.ones(1))
    >>> tree = risk_search(None, jax.random.key(0), root=root, recurrent_fn=rec,
    ...     root_action_selection_fn=functools.partial(muzero_action_selection, depth=0),
    ...     interior_action_selection_fn=muzero_action_selection, num_simulations=4,
    ...     utility_fn=jnp.mean, num_samples=64, stratified=True)
    >>> [round(q, 3) for q in tree.children_values[0, 0].tolist()]  # mean utility of a +- 1
    [0.0, 1.0]
    """
    search_lib.validate_search_inputs(root.prior_logits, root.value, num_simulations,
                                      invalid_actions, max_depth, value_ndim=2)
    if root.return_history.shape != root.value.shape:
        raise ValueError(f"root.return_history must have the shape of root.value "
                         f"{root.value.shape}, got {root.return_history.shape}")
    check_int("num_samples", num_samples, minimum=1)
    batch, num_actions = root.prior_logits.shape
    nq = root.value.shape[1]
    b = jnp.arange(batch)
    max_depth = num_simulations if max_depth is None else max_depth
    if invalid_actions is None:
        invalid_actions = jnp.zeros_like(root.prior_logits)
    if root_gumbel is None:
        root_gumbel = jnp.zeros_like(root.prior_logits)
    root = root.replace(value=jnp.sort(root.value, -1),
                        return_history=jnp.sort(root.return_history, -1))
    dt = root.value.dtype
    n = num_simulations + 1
    extra = RiskExtraData(root_gumbel=root_gumbel, return_history=root.return_history,
                          root_discount=jnp.broadcast_to(root.root_discount, (batch,)).astype(dt))
    key, root_key, sample_key = jax.random.split(key, 3)
    rk = jax.vmap(lambda i: jax.random.fold_in(root_key, i))(b)
    hist = jax.vmap(lambda k, h: jnp.where(
        sample_history, _samples(k, _HISTORY_TAG, h, num_samples, stratified), 0.0))(
        rk, root.return_history)  # [B, M]
    root_val = jax.vmap(lambda k, v, h, d: utility_fn(h + d * _samples(k, 1, v, num_samples,
                                                                          stratified)))(
        rk, root.value, hist, extra.root_discount)
    tree = tree_lib.instantiate_tree(root.prior_logits, root_val, root.embedding,
                                     num_simulations=num_simulations,
                                     invalid_actions=invalid_actions, extra_data=extra)
    tree = tree.replace(children_discounts=jnp.ones_like(tree.children_discounts))

    def body(sim, carry):
        k, t, nrq, nd, prefix, pdisc = carry
        k, sim_key, expand_key = jax.random.split(k, 3)
        parent, action = search_lib.simulate(jax.random.split(sim_key, batch), t,
                                             root_action_selection_fn,
                                             interior_action_selection_fn, max_depth)
        nxt = t.children_index[b, parent, action]
        nxt = jnp.where(nxt == UNVISITED, sim + 1, nxt)
        emb = jax.tree.map(lambda x: x[b, parent], t.embeddings)
        out, emb = search_lib.unpack_fn_output(
            "recurrent_fn", recurrent_fn(params, expand_key, action, emb),
            ("reward", "discount", "prior_logits", "value"))
        search_lib._check_recurrent_output(out, batch, num_actions, value_shape=(batch, nq),
                                           reward_shape=(batch, nq))
        rv = risk_lib.sort_small(jnp.stack([out.reward, out.value], axis=1))  # [B, 2, Q]
        out = out.replace(reward=rv[:, 0], value=rv[:, 1])
        t = t.replace(
            children_index=t.children_index.at[b, parent, action].set(nxt),
            parents=t.parents.at[b, nxt].set(parent),
            action_from_parent=t.action_from_parent.at[b, nxt].set(action))
        sk = jax.random.fold_in(sample_key, sim)
        keys = jax.vmap(lambda i: jax.random.fold_in(sk, i))(b)

        def draw(k, rq, vq, j):
            return (_samples(k, 2 * j, rq, num_samples, stratified),
                    _samples(k, 2 * j + 1, vq, num_samples, stratified))

        r_s, v_s = jax.vmap(draw)(keys, out.reward, out.value, nxt)  # [B, M] each
        p_pre, p_disc = prefix[b, parent], pdisc[b, parent]  # [B, M], [B]
        # Z = H + gamma^t (R_1 + ... + gamma^(d-1) (R_d + gamma V)), prefix terms cached
        z = p_pre + p_disc[:, None] * (r_s + out.discount[:, None] * v_s)
        value = jax.vmap(utility_fn)(z)
        prefix = prefix.at[b, nxt].set(p_pre + p_disc[:, None] * r_s)
        pdisc = pdisc.at[b, nxt].set(p_disc * out.discount)
        nrq = nrq.at[b, nxt].set(out.reward)
        nd = nd.at[b, nxt].set(out.discount)
        t = tree_lib.set_node(t, nxt, out.prior_logits, value, emb)
        return k, search_lib.backward(t, nxt), nrq, nd, prefix, pdisc

    nrq = jnp.zeros((batch, n, nq), dt)
    nd = jnp.zeros((batch, n), dt)
    prefix = jnp.zeros((batch, n, num_samples), dt).at[:, ROOT_INDEX].set(hist)
    pdisc = jnp.zeros((batch, n), dt).at[:, ROOT_INDEX].set(extra.root_discount)
    _, tree, nrq, nd, _, _ = loop_fn(0, num_simulations, body,
                                     (key, tree, nrq, nd, prefix, pdisc))
    return tree.replace(extra_data=tree.extra_data.replace(node_reward_quantiles=nrq,
                                                           node_discounts=nd))


def risk_gumbel_muzero_policy(params: Any, key: jax.Array, root: RiskRootFnOutput,
                              recurrent_fn: RiskRecurrentFn, num_simulations: int,
                              invalid_actions: jax.Array | None = None,
                              max_depth: int | None = None, loop_fn=jax.lax.fori_loop, *,
                              utility_fn: UtilityFn = risk_lib.mean_utility,
                              num_samples: int = 256, stratified: bool = False,
                              sample_history: bool = True,
                              qtransform=tree_lib.qtransform_completed_by_mix_value,
                              max_num_considered_actions: int = 16,
                              gumbel_scale: float = 1.0) -> PolicyOutput:
    """RiskZero's policy: Gumbel MuZero root selection over utility-valued trees.

    Args:
      params, key, root, recurrent_fn, num_simulations, invalid_actions, max_depth, loop_fn,
        qtransform, max_num_considered_actions, gumbel_scale: as in
        :func:`jaxpapers.search.gumbel_muzero_policy` (``root`` a :class:`RiskRootFnOutput`,
        ``recurrent_fn`` returning :class:`RiskRecurrentFnOutput`).
      utility_fn, num_samples, stratified, sample_history: as in :func:`risk_search`.

    Returns:
      :class:`PolicyOutput`: ``action`` [B] and ``action_weights = softmax(logits + sigma(q~_U))``
      [B, A] with utility Q-values.

    >>> import jax, jax.numpy as jnp
    >>> from jaxpapers.search import risk
    >>> safe, risky = jnp.full((1, 8), 1.0), jnp.where(jnp.arange(8) < 1, -10.0, 5.0)[None]
    >>> def rec(params, key, action, emb):  # 0: reward 1; 1: -10 w.p. ~1/8, else 5
    ...     r = jnp.where(action[:, None] == 0, safe, risky)
    ...     return RiskRecurrentFnOutput(reward=r, discount=jnp.zeros(1),
    ...         prior_logits=jnp.zeros((1, 2)), value=jnp.zeros((1, 8))), emb
    >>> root = RiskRootFnOutput(prior_logits=jnp.zeros((1, 2)), value=jnp.zeros((1, 8)),
    ...     embedding=jnp.zeros((1, 1)), return_history=jnp.zeros((1, 8)),
    ...     root_discount=jnp.ones(1))
    >>> pick = lambda u: int(risk_gumbel_muzero_policy(None, jax.random.key(0), root, rec, 8,
    ...     utility_fn=u, gumbel_scale=0.0).action[0])
    >>> pick(risk.mean_utility), pick(risk.make_utility("cvar", 0.25))
    (1, 0)
    """
    search_lib.validate_search_inputs(root.prior_logits, root.value[:, 0], num_simulations,
                                      invalid_actions, max_depth)
    root, key, gumbel = muzero_lib.gumbel_root(key, root, gumbel_scale, invalid_actions)
    tree = risk_search(
        params, key, root=root, recurrent_fn=recurrent_fn,
        **muzero_lib.gumbel_selection_fns(num_simulations, max_num_considered_actions, qtransform),
        num_simulations=num_simulations, utility_fn=utility_fn, num_samples=num_samples,
        stratified=stratified, sample_history=sample_history, max_depth=max_depth,
        invalid_actions=invalid_actions, root_gumbel=gumbel, loop_fn=loop_fn)
    return muzero_lib.gumbel_policy_output(tree, root.prior_logits, gumbel, invalid_actions,
                                           qtransform)


def risk_muzero_policy(params: Any, key: jax.Array, root: RiskRootFnOutput,
                       recurrent_fn: RiskRecurrentFn, num_simulations: int,
                       invalid_actions: jax.Array | None = None, max_depth: int | None = None,
                       loop_fn=jax.lax.fori_loop, *, utility_fn: UtilityFn = risk_lib.mean_utility,
                       num_samples: int = 256, stratified: bool = False,
                       sample_history: bool = True,
                       qtransform=tree_lib.qtransform_by_parent_and_siblings,
                       dirichlet_fraction: float = 0.25, dirichlet_alpha: float = 0.3,
                       pb_c_init: float = 1.25, pb_c_base: float = 19652.0,
                       temperature: float = 1.0) -> PolicyOutput:
    """PUCT (MuZero) selection over utility-valued trees; acts by visit counts.

    Args:
      params, key, root, recurrent_fn, num_simulations, invalid_actions, max_depth, loop_fn,
        qtransform, dirichlet_fraction, dirichlet_alpha, pb_c_init, pb_c_base, temperature: as in
        :func:`jaxpapers.search.muzero_policy` (``root`` a :class:`RiskRootFnOutput`).
      utility_fn, num_samples, stratified, sample_history: as in :func:`risk_search`.

    Returns:
      :class:`PolicyOutput`: ``action`` [B], ``action_weights`` [B, A] (root visit distribution),
      and the tree (``node_values`` are utilities).

    >>> import jax, jax.numpy as jnp
    >>> from jaxpapers.search import risk
    >>> safe, risky = jnp.full((1, 8), 1.0), jnp.where(jnp.arange(8) < 1, -10.0, 5.0)[None]
    >>> def rec(params, key, action, emb):  # 0: reward 1; 1: -10 w.p. ~1/8, else 5
    ...     r = jnp.where(action[:, None] == 0, safe, risky)
    ...     return RiskRecurrentFnOutput(reward=r, discount=jnp.zeros(1),
    ...         prior_logits=jnp.zeros((1, 2)), value=jnp.zeros((1, 8))), emb
    >>> root = RiskRootFnOutput(prior_logits=jnp.zeros((1, 2)), value=jnp.zeros((1, 8)),
    ...     embedding=jnp.zeros((1, 1)), return_history=jnp.zeros((1, 8)),
    ...     root_discount=jnp.ones(1))
    >>> out = risk_muzero_policy(None, jax.random.key(0), root, rec, 32, dirichlet_fraction=0.0,
    ...                          utility_fn=risk.make_utility("cvar", 0.25), temperature=0.0)
    >>> out.action.tolist()  # the safe action under CVaR_0.25
    [0]
    """
    search_lib.validate_search_inputs(root.prior_logits, root.value[:, 0], num_simulations,
                                      invalid_actions, max_depth)
    key, dirichlet_key, search_key = jax.random.split(key, 3)
    root = root.replace(prior_logits=muzero_lib.add_dirichlet_noise(
        dirichlet_key, root.prior_logits, invalid_actions, dirichlet_fraction=dirichlet_fraction,
        dirichlet_alpha=dirichlet_alpha))
    interior = functools.partial(search_lib.muzero_action_selection, pb_c_init=pb_c_init,
                                 pb_c_base=pb_c_base, qtransform=qtransform)
    tree = risk_search(params, search_key, root=root, recurrent_fn=recurrent_fn,
                       root_action_selection_fn=functools.partial(interior, depth=0),
                       interior_action_selection_fn=interior, num_simulations=num_simulations,
                       utility_fn=utility_fn, num_samples=num_samples, stratified=stratified,
                       sample_history=sample_history, max_depth=max_depth,
                       invalid_actions=invalid_actions, loop_fn=loop_fn)
    weights = tree.summary().visit_probs
    return PolicyOutput(action=muzero_lib.act_by_visits(key, weights, temperature),
                        action_weights=weights, search_tree=tree)


from jaxpapers.search._types import RiskRecurrentFnOutput  # noqa: E402,F401  (doctest namespace)
