"""Gradient surgery across clients / groups: FedGCM's RPGrad and PCGrad, and FedGCM grouping.

FedGCM (github.com/huangsuj/FedGCM) keeps one model per group of clients. Each round, each group
``i`` gets the weighted mean ``G_i`` of its clients' updates ``(w_group - w_local) / lr``; RPGrad
adds to it a softmax(cosine)-weighted sum of the other groups' updates, each projected off ``G_i``
when the two conflict (``<G_j, G_i> < 0``); then ``w_i <- w_i - lr * G~_i``.
Letters: ``K`` groups, ``C`` clients, ``P`` flat parameters.

>>> import jax.numpy as jnp
>>> G = jnp.array([[1.0, 0.0], [-1.0, 1.0]])
>>> rpgrad(G, 0.5).tolist()  # they conflict: G_1' = [0, 1] for row 0, G_0' = [.5, .5] for row 1
[[1.0, 0.5], [-0.75, 1.25]]
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from jaxpapers.core.checks import (check_finite, check_int, check_key, check_ndim, check_range)
from jaxpapers.federated.aggregate import flatten, unflatten_like

__all__ = ["rpgrad", "pcgrad", "group_clients", "fedgcm_server_step"]

_HIGHEST = jax.lax.Precision.HIGHEST  # f32 dot products in full precision on GPU / TPU too
COS_EPS = 1e-8  # cos_ij = <G_i, G_j> / (|G_i| |G_j| + COS_EPS), as in the release
PROJ_MIN_SQNORM = 1e-6  # project off G_i only when |G_i|^2 > PROJ_MIN_SQNORM (release)


def _valid_mask(valid: ArrayLike | None, k: int) -> jax.Array:
    if valid is None:
        return jnp.ones((k,), bool)
    v = jnp.asarray(valid)
    if v.shape != (k,):
        raise ValueError(f"valid must have shape [K] = ({k},), got shape {v.shape}")
    return v.astype(bool)


def rpgrad(grads: ArrayLike, alpha: ArrayLike, *, valid: ArrayLike | None = None) -> jax.Array:
    """FedGCM's RPGrad (``project_conflicting``): add the other groups' projected updates.

    For every valid row ``i`` and the valid rows ``j != i`` (its partners):
    ``cos_ij = <G_i, G_j> / (|G_i| |G_j| + 1e-8)`` (0 when a norm is 0),
    ``w_ij = softmax_j(cos_ij)`` over the partners only,
    ``G_j' = G_j - (<G_j, G_i> / |G_i|^2) G_i`` if ``<G_j, G_i> < 0`` and ``|G_i|^2 > 1e-6``,
    else ``G_j``; and ``G~_i = G_i + alpha sum_j w_ij G_j'``.

    Computed without a loop over ``K`` and without the ``[K, K, P]`` tensor of projections:
    ``sum_j w_ij G_j' = (W G)_i - (sum_j w_ij c_ij) G_i`` with ``c_ij = <G_j, G_i> / |G_i|^2``
    where the projection applies and 0 elsewhere. Invalid rows (empty groups) are returned
    unchanged and are nobody's partner; a valid row without partners is returned unchanged.

    Args:
      grads: ``[K, P]`` float group updates ``G``.
      alpha: scalar ``>= 0`` mixing weight (traceable; FedGCM's default 0.5).
      valid: optional ``[K]`` bool, True for the non-empty groups (default: all).

    Returns:
      ``[K, P]`` updates ``G~``, in ``grads``' dtype. With ``alpha = 0`` exactly ``grads``.

    Raises:
      ValueError: ``grads`` not 2-D; ``valid`` not of shape ``[K]``; (when concrete) NaN / inf
        in ``grads``, ``alpha`` negative or not a scalar.

    >>> import jax.numpy as jnp
    >>> G = jnp.array([[1.0, 0.0], [0.0, 2.0], [9.0, 9.0]])
    >>> rpgrad(G, 1.0, valid=jnp.array([True, True, False])).tolist()   # no conflict
    [[1.0, 2.0], [1.0, 2.0], [9.0, 9.0]]
    """
    g = jnp.asarray(grads)
    check_ndim("grads", g, 2, "[K, P]")
    if not jnp.issubdtype(g.dtype, jnp.floating):
        g = g.astype(jnp.result_type(float))
    check_finite("grads", g)
    check_range("alpha", alpha, low=0.0, scalar=True)
    k = g.shape[0]
    ok = _valid_mask(valid, k)

    dots = jnp.matmul(g, g.T, precision=_HIGHEST)  # [K, K] <G_i, G_j>
    sq = jnp.sum(g * g, axis=1)  # [K] |G_i|^2
    norm = jnp.sqrt(sq)
    nonzero = norm > 0
    cos = jnp.where(nonzero[:, None] & nonzero[None, :],
                    dots / (norm[:, None] * norm[None, :] + COS_EPS), 0.0)
    partner = ok[:, None] & ok[None, :] & ~jnp.eye(k, dtype=bool)  # [K, K]
    has_partner = jnp.any(partner, axis=1)  # [K]
    # masked softmax over j; rows without partners get all-zero weights (no NaN)
    top = jnp.max(jnp.where(partner, cos, -jnp.inf), axis=1, keepdims=True)
    top = jnp.where(has_partner[:, None], top, 0.0)
    e = jnp.where(partner, jnp.exp(cos - top), 0.0)
    w = e / jnp.where(has_partner, jnp.sum(e, axis=1), 1.0)[:, None]  # [K, K] w_ij
    # c_ij = <G_j, G_i> / |G_i|^2 where G_j conflicts with G_i (and |G_i|^2 > 1e-6), else 0
    project = (dots < 0) & (sq > PROJ_MIN_SQNORM)[:, None]
    c = jnp.where(project, dots / jnp.where(sq > PROJ_MIN_SQNORM, sq, 1.0)[:, None], 0.0)
    coef = jnp.sum(w * c, axis=1)  # [K]
    added = jnp.matmul(w, g, precision=_HIGHEST) - coef[:, None] * g  # sum_j w_ij G_j'
    new = g + jnp.asarray(alpha, g.dtype) * added
    return jnp.where((ok & has_partner)[:, None], new, g)


def pcgrad(grads: ArrayLike, key: jax.Array) -> jax.Array:
    """PCGrad (Yu et al. 2020, Alg. 1): project each row off the rows it conflicts with.

    For every row ``i``: ``g_i' = g_i``; for ``j`` in a random order of the other rows,
    if ``<g_i', g_j> < 0`` then ``g_i' <- g_i' - <g_i', g_j> / |g_j|^2 g_j`` (the ORIGINAL
    ``g_j``). The order of row ``i`` is ``jax.random.permutation(jax.random.split(key, C)[i], C)``
    with ``i`` itself skipped. The caller sums or averages the returned rows.

    Vectorised over ``i`` (vmap) with a ``lax.scan`` over the ``C`` positions of the order.

    Args:
      grads: ``[C, P]`` float per-client (or per-task) gradients.
      key: a typed key (consumed).

    Returns:
      ``[C, P]`` projected rows ``g'``; after the last projection step of row ``i``,
      ``<g_i', g_j> >= 0`` for that last ``j`` (up to rounding).

    Raises:
      TypeError: ``key`` is not a typed key.
      ValueError: ``grads`` not 2-D; (when concrete) NaN / inf in ``grads``.

    >>> import jax, jax.numpy as jnp
    >>> out = pcgrad(jnp.array([[1.0, 0.0], [-1.0, 1.0]]), jax.random.key(0))
    >>> out.tolist()
    [[0.5, 0.5], [0.0, 1.0]]
    """
    check_key("key", key)
    g = jnp.asarray(grads)
    check_ndim("grads", g, 2, "[C, P]")
    if not jnp.issubdtype(g.dtype, jnp.floating):
        g = g.astype(jnp.result_type(float))
    check_finite("grads", g)
    c = g.shape[0]
    sq = jnp.sum(g * g, axis=1)  # [C]
    safe_sq = jnp.where(sq > 0, sq, 1.0)
    orders = jax.vmap(lambda k: jax.random.permutation(k, c))(jax.random.split(key, c))

    def one_row(i, gi, order):
        def body(v, j):
            d = jnp.dot(v, g[j], precision=_HIGHEST)
            hit = (j != i) & (d < 0)
            v = jnp.where(hit, v - (d / safe_sq[j]) * g[j], v)
            return v, None

        return jax.lax.scan(body, gi, order)[0]

    return jax.vmap(one_row)(jnp.arange(c), g, orders)


def group_clients(stats: ArrayLike, *, num_groups: int) -> jax.Array:
    """FedGCM grouping: split the range of a per-client statistic into ``K`` equal bins.

    ``group_c = min(floor((s_c - min s) / (max s - min s + 1e-9) K), K - 1)`` (the release's
    server; ``s`` is its homophily-like statistic, over the sampled clients). The release works
    in float64; in float32 the ``1e-9`` vanishes next to a range of order 1, so a statistic that
    falls exactly on a bin edge may land one bin higher than in float64.

    Args:
      stats: ``[C]`` float per-client statistic.
      num_groups: ``K >= 1`` (static).

    Returns:
      ``[C]`` int32 group ids in ``[0, K)``.

    Raises:
      ValueError: ``num_groups < 1``; ``stats`` not 1-D or empty; (when concrete) NaN / inf.

    >>> import jax.numpy as jnp
    >>> group_clients(jnp.array([0.0, 0.2, 0.45, 0.74, 1.0]), num_groups=4).tolist()
    [0, 0, 1, 2, 3]
    """
    k = check_int("num_groups", num_groups, minimum=1)
    s = jnp.asarray(stats)
    check_ndim("stats", s, 1, "[C]")
    if s.shape[0] == 0:
        raise ValueError("stats must hold at least one client, got shape (0,)")
    if not jnp.issubdtype(s.dtype, jnp.floating):
        s = s.astype(jnp.result_type(float))
    check_finite("stats", s)
    lo, hi = jnp.min(s), jnp.max(s)
    bins = jnp.floor((s - lo) / (hi - lo + 1e-9) * k)
    return jnp.clip(bins, 0, k - 1).astype(jnp.int32)


def fedgcm_server_step(group_params: Any, group_grads: ArrayLike, lr: ArrayLike,
                       alpha: ArrayLike, *, valid: ArrayLike | None = None) -> Any:
    """FedGCM server update of the ``K`` group models: ``w_i <- w_i - lr * rpgrad(G, alpha)_i``.

    ``G_i`` is group ``i``'s weighted mean client update ``(w_i - w_local) / lr`` flattened
    (e.g. ``jax.vmap(flatten)`` of :func:`~jaxpapers.federated.grouped_average` of the client
    updates). With ``alpha = 0`` this is FedAvg inside each group. Invalid (empty) groups keep
    their parameters.

    Args:
      group_params: pytree with leaves ``[K, ...]`` (one parameter set per group).
      group_grads: ``[K, P]`` flat updates, ``P`` the size of one parameter set in
        :func:`~jaxpapers.federated.flatten` order.
      lr: scalar server step (FedGCM: the round's cosine-decayed client learning rate).
      alpha: scalar RPGrad weight ``>= 0``.
      valid: optional ``[K]`` bool, the non-empty groups (default: all).

    Returns:
      the new group parameters, like ``group_params``.

    Raises:
      ValueError: as :func:`rpgrad`; ``group_grads`` not ``[K, P]`` for these parameters.

    >>> import jax.numpy as jnp
    >>> params = {"w": jnp.ones((2, 3))}                      # K = 2 groups, P = 3
    >>> new = fedgcm_server_step(params, jnp.ones((2, 3)), 0.5, 0.0)
    >>> new["w"].tolist()
    [[0.5, 0.5, 0.5], [0.5, 0.5, 0.5]]
    """
    leaves = jax.tree.leaves(group_params)
    if not leaves:
        raise ValueError("group_params must hold at least one array leaf")
    k = np.shape(leaves[0])[0] if np.ndim(leaves[0]) else None
    for leaf in leaves:
        if np.ndim(leaf) == 0 or np.shape(leaf)[0] != k:
            raise ValueError(f"every group_params leaf needs the same leading group axis, got "
                             f"shapes {[np.shape(x) for x in leaves]}")
    flat = jax.vmap(flatten)(group_params)  # [K, P]
    g = jnp.asarray(group_grads)
    if g.shape != flat.shape:
        raise ValueError(f"group_grads must have shape [K, P] = {flat.shape}, got {g.shape}")
    check_range("lr", lr, low=0.0, scalar=True)
    ok = _valid_mask(valid, k)
    tilde = rpgrad(g, alpha, valid=ok)
    new_flat = jnp.where(ok[:, None], flat - jnp.asarray(lr, flat.dtype) * tilde.astype(flat.dtype),
                         flat)
    template = jax.tree.map(lambda x: x[0], group_params)
    return jax.vmap(lambda v: unflatten_like(template, v))(new_flat)
