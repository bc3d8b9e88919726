"""Server-side aggregation over stacked client parameters: FedAvg, per-group means, FedProx.

Clients are the leading axis of every leaf: ``stacked_params`` holds ``C`` parameter sets as one
pytree whose leaves are ``[C, ...]``. Letters: ``C`` clients, ``K`` groups, ``P`` flat parameters.

The surgery functions (:mod:`jaxpapers.federated.surgery`) work on flat ``[K, P]`` matrices;
:func:`flatten` / :func:`unflatten_like` convert one parameter set, ``jax.vmap(flatten)`` a stack.

>>> import jax.numpy as jnp
>>> stacked = {"w": jnp.array([[1.0, 2.0], [3.0, 6.0]])}           # C = 2 clients
>>> fedavg(stacked, jnp.array([1.0, 3.0]))["w"].tolist()            # 0.25 * c0 + 0.75 * c1
[2.5, 5.0]
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree
from jax.typing import ArrayLike

from jaxpapers.core.checks import check_int, check_ndim, check_range, concrete

__all__ = ["fedavg", "grouped_average", "fedprox_penalty", "flatten", "unflatten_like"]


def _leading_dims(name: str, tree: Any, count: int, what: str) -> None:
    """Every leaf of ``tree`` has a leading axis of length ``count`` (static check)."""
    for path, leaf in jax.tree_util.tree_leaves_with_path(tree):
        shape = np.shape(leaf)
        if len(shape) == 0 or shape[0] != count:
            raise ValueError(f"{name} leaf {jax.tree_util.keystr(path)} has shape {shape}; "
                             f"expected a leading {what} axis of length {count}")


def _client_weights(weights: ArrayLike, num_clients: int | None, *, allow_zero_sum: bool):
    """``weights`` as a float ``[C]`` array, with the value checks run when it is concrete."""
    w = jnp.asarray(weights)
    check_ndim("weights", w, 1, "[C]")
    if num_clients is not None and w.shape[0] != num_clients:
        raise ValueError(f"weights must have shape [C] = ({num_clients},) to match the client "
                         f"axis, got shape {w.shape}")
    if not jnp.issubdtype(w.dtype, jnp.floating):
        w = w.astype(jnp.result_type(float))
    check_range("weights", w, low=0.0)  # negative, NaN or inf -> ValueError
    v = concrete(w)
    if not allow_zero_sum and v is not None and v.size and float(v.sum()) == 0.0:
        raise ValueError("weights must have a positive sum, got all zeros")
    return w


def _leaf_dtype(x: jax.Array, w: jax.Array):
    """The dtype an average of ``x`` is computed in: ``x``'s own when floating."""
    return x.dtype if jnp.issubdtype(x.dtype, jnp.inexact) else w.dtype


def fedavg(stacked_params: Any, weights: ArrayLike) -> Any:
    """Weighted mean of every leaf over the leading client axis (FedAvg server step).

    ``w = sum_c (n_c / sum_c' n_c') w_c`` (McMahan et al. 2017, Alg. 1, "w_{t+1} <- sum_k
    n_k / n w^k_{t+1}"). The mean is an elementwise weighted sum (no matmul), so it is exact to
    rounding on every backend.

    Args:
      stacked_params: pytree of arrays ``[C, ...]`` (client axis first).
      weights: ``[C]`` non-negative client weights (e.g. sample counts); divided by their sum.

    Returns:
      a pytree like one client's parameters (leaves ``[...]``), each leaf in its own float dtype.

    Raises:
      ValueError: ``weights`` not 1-D, not of length ``C``, or (when concrete) negative, NaN,
        inf or all zero; a leaf of ``stacked_params`` without a leading axis of length ``C``.

    >>> import jax.numpy as jnp
    >>> fedavg({"b": jnp.array([0.0, 1.0, 2.0])}, jnp.array([1, 1, 2]))["b"].tolist()
    1.25
    """
    leaves = jax.tree.leaves(stacked_params)
    first = np.shape(leaves[0]) if leaves else ()
    w = _client_weights(weights, first[0] if first else None, allow_zero_sum=False)
    _leading_dims("stacked_params", stacked_params, w.shape[0], "client")
    w = w / jnp.sum(w)

    def mean(x):
        x = jnp.asarray(x)
        dt = _leaf_dtype(x, w)
        wx = w.astype(dt).reshape((-1,) + (1,) * (x.ndim - 1))
        return jnp.sum(wx * x.astype(dt), axis=0)

    return jax.tree.map(mean, stacked_params)


def grouped_average(stacked: Any, group_ids: ArrayLike, weights: ArrayLike, *,
                    num_groups: int) -> tuple[Any, jax.Array]:
    """Per-group weighted means of stacked client parameters (FedGCM: one model per group).

    ``m_k = sum_{c: g_c = k} n_c w_c / sum_{c: g_c = k} n_c`` via ``segment_sum``; a group with
    no client (or zero total weight) gets zeros and weight 0, never NaN.

    Args:
      stacked: pytree of arrays ``[C, ...]``.
      group_ids: ``[C]`` int group of each client, in ``[0, num_groups)``.
      weights: ``[C]`` non-negative client weights (zeros allowed: e.g. unsampled clients).
      num_groups: ``K >= 1`` (static).

    Returns:
      ``(means, sums)``: ``means`` a pytree with leaves ``[K, ...]``; ``sums`` the ``[K]`` total
      weight of each group (``sums > 0`` marks the non-empty groups).

    Raises:
      ValueError: ``num_groups < 1``; ``group_ids`` / ``weights`` not of shape ``[C]``;
        (when concrete) a group id out of range or a negative / NaN weight.

    >>> import jax.numpy as jnp
    >>> m, s = grouped_average({"w": jnp.array([1.0, 3.0, 5.0])}, jnp.array([0, 0, 2]),
    ...                        jnp.array([1.0, 1.0, 2.0]), num_groups=3)
    >>> m["w"].tolist(), s.tolist()
    ([2.0, 0.0, 5.0], [2.0, 0.0, 2.0])
    """
    k = check_int("num_groups", num_groups, minimum=1)
    g = jnp.asarray(group_ids)
    check_ndim("group_ids", g, 1, "[C]")
    if not jnp.issubdtype(g.dtype, jnp.integer):
        raise ValueError(f"group_ids must hold integers, got dtype {g.dtype}")
    gv = concrete(g)
    if gv is not None and gv.size and (gv.min() < 0 or gv.max() >= k):
        raise ValueError(f"group_ids must lie in [0, {k}), got values in "
                         f"[{int(gv.min())}, {int(gv.max())}]")
    w = _client_weights(weights, g.shape[0], allow_zero_sum=True)
    _leading_dims("stacked", stacked, g.shape[0], "client")
    sums = jax.ops.segment_sum(w, g, num_segments=k)  # [K]
    safe = jnp.where(sums > 0, sums, 1)

    def mean(x):
        x = jnp.asarray(x)
        dt = _leaf_dtype(x, w)
        wx = w.astype(dt).reshape((-1,) + (1,) * (x.ndim - 1))
        total = jax.ops.segment_sum(wx * x.astype(dt), g, num_segments=k)  # [K, ...]
        return total / safe.astype(dt).reshape((-1,) + (1,) * (x.ndim - 1))

    return jax.tree.map(mean, stacked), sums


def fedprox_penalty(params: Any, anchor: Any, mu: ArrayLike) -> jax.Array:
    """FedProx proximal term ``mu / 2 * ||params - anchor||^2`` summed over all leaves.

    Li et al. 2020 (FedProx), Eq. (2): ``h_k(w; w^t) = F_k(w) + mu/2 ||w - w^t||^2``.

    Args:
      params: a parameter pytree.
      anchor: a pytree of the same structure (the round's global / group model).
      mu: scalar ``>= 0`` (traceable).

    Returns:
      a scalar.

    >>> import jax.numpy as jnp
    >>> float(fedprox_penalty({"w": jnp.array([1.0, 2.0])}, {"w": jnp.zeros(2)}, 0.5))
    1.25
    """
    check_range("mu", mu, low=0.0, scalar=True)
    sq = jax.tree.map(lambda a, b: jnp.sum(jnp.square(a - b)), params, anchor)
    total = sum(jax.tree.leaves(sq), jnp.zeros(()))
    return 0.5 * jnp.asarray(mu) * total


def flatten(params: Any) -> jax.Array:
    """One parameter pytree as a flat vector ``[P]`` (``ravel_pytree`` order and dtype).

    Use ``jax.vmap(flatten)(stacked)`` for a ``[K, P]`` matrix of stacked parameter sets.

    >>> import jax.numpy as jnp
    >>> flatten({"a": jnp.ones((2, 2)), "b": jnp.zeros(3)}).shape
    (7,)
    """
    return ravel_pytree(params)[0]


def unflatten_like(template: Any, vec: ArrayLike) -> Any:
    """The inverse of :func:`flatten`: ``vec`` ``[P]`` reshaped into ``template``'s structure.

    Leaves get ``template``'s shapes and dtypes; only the structure of ``template`` is used, so
    it may be traced. ``jax.vmap(lambda v: unflatten_like(template, v))`` undoes a stack.

    Raises:
      ValueError: ``vec`` is not a vector of ``template``'s total size ``P``.

    >>> import jax.numpy as jnp
    >>> t = {"a": jnp.ones((2, 2)), "b": jnp.zeros(3)}
    >>> unflatten_like(t, jnp.arange(7.0))["b"].tolist()
    [4.0, 5.0, 6.0]
    """
    flat, unravel = ravel_pytree(template)
    if np.shape(vec) != flat.shape:
        raise ValueError(f"vec must have shape [P] = {flat.shape} to match template, "
                         f"got {np.shape(vec)}")
    return unravel(jnp.asarray(vec).astype(flat.dtype))
