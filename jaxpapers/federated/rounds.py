"""Federated training rounds in one compiled call: grouped models, RPGrad or PCGrad servers.

A run is one ``lax.scan`` over rounds. In round ``r`` (of ``R``) every client starts from its
group's model, takes ``local_steps`` full-batch Adam steps (:func:`local_train`, fresh Adam) at
``lr_r = lr (1 + cos(pi r / R)) / 2`` and uploads ``g_c = (w_group - w_c) / lr_r``; the server
averages the uploads within each group (weights: the clients' ``weights``), and then

* ``server="rpgrad"``: ``w_i -= lr_r rpgrad(G, alpha)_i`` (FedGCM; ``alpha = 0``: FedAvg inside
  each group, so one group is FedAvg and one group per client is local training);
* ``server="pcgrad"``: each upload is first projected off the conflicting uploads of the other
  clients (:func:`pcgrad`, Yu et al. 2020), then averaged within its group.

After each round every client is scored with its group's new model by ``eval_fn``. Everything
but the structure (``num_rounds``, ``local_steps``, ``num_groups``, ``server``) is traced, so
methods that differ only in group ids, ``alpha`` or ``proximal_mu`` vmap into one call.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from jaxpapers.core import checks
from jaxpapers.federated.aggregate import flatten, grouped_average
from jaxpapers.federated.local import local_train
from jaxpapers.federated.surgery import fedgcm_server_step, pcgrad

__all__ = ["grouped_rounds", "cosine_lr", "SERVERS"]

SERVERS = ("rpgrad", "pcgrad")


def cosine_lr(learning_rate: ArrayLike, round_index: ArrayLike, num_rounds: int) -> jax.Array:
    """FedGCM's schedule: ``lr_r = lr (1 + cos(pi r / R)) / 2`` for round ``r`` of ``R``."""
    r = jnp.asarray(round_index, jnp.float32)
    return jnp.asarray(learning_rate, jnp.float32) * 0.5 * (1.0 + jnp.cos(jnp.pi * r / num_rounds))


def grouped_rounds(init_params: Any, data: Any, key: jax.Array, learning_rate: ArrayLike,
                   alpha: ArrayLike, proximal_mu: ArrayLike, group_ids: ArrayLike,
                   weights: ArrayLike, *, loss_fn: Callable, eval_fn: Callable,
                   num_rounds: int, local_steps: int, clip_norm: float | None = None,
                   server: str = "rpgrad") -> tuple[Any, dict]:
    """``num_rounds`` federated rounds over ``K`` group models (module docstring), one ``scan``.

    FedGCM (Alg. 1 of the paper as released): group models ``w_k``; client ``c`` trains from
    ``w_{g_c}`` and uploads ``(w_{g_c} - w_c) / lr_r``; per group the ``weights``-weighted mean
    ``G_k``; ``w_k <- w_k - lr_r rpgrad(G, alpha)_k`` over the non-empty groups.

    Args:
      init_params: pytree with leaves ``[K, ...]``: the ``K`` group models' starting point
        (``K = num_groups``; FedGCM starts every group from one initialisation).
      data: pytree with leaves ``[C, ...]``: each client's data, handed to ``loss_fn`` /
        ``eval_fn`` one client at a time.
      key: a ``jax.random.key``; consumed (per round: each client's dropout keys, PCGrad's
        orders).
      learning_rate: base client learning rate ``> 0`` (cosine-decayed over rounds; traced).
      alpha: RPGrad weight ``>= 0`` (traced; ignored by ``server="pcgrad"``).
      proximal_mu: FedProx weight ``>= 0`` of the clients' proximal term (traced; 0: FedAvg).
      group_ids: ``[C]`` int group of each client in ``[0, K)`` (traced: one compile for any
        grouping; one group = FedAvg, one group per client = local training).
      weights: ``[C]`` client weights of the within-group means (e.g. training-node counts).
      loss_fn: ``loss_fn(params, client_data, key) -> []``.
      eval_fn: ``eval_fn(params, client_data) -> {name: [] array}`` scored after every round on
        every client with its group's model.
      num_rounds, local_steps: R rounds of ``local_steps`` full-batch Adam steps (static).
      clip_norm: clients' gradient-norm clip (FedGCM: 5.0; static).
      server: ``"rpgrad"`` or ``"pcgrad"`` (static).

    Returns:
      ``(group_params, history)``: the final ``[K, ...]`` group models and ``eval_fn``'s
      outputs stacked ``[R, C]`` per name, plus ``"loss"`` ``[R, C]`` (each client's loss at its
      last local step, before that step's update; ``eval_fn`` must not return a ``"loss"``).

    >>> import jax, jax.numpy as jnp
    >>> data = {"x": jnp.arange(4.0).reshape(4, 1)}            # 4 clients, a target each
    >>> loss = lambda p, d, k: jnp.sum((p["w"] - d["x"]) ** 2)
    >>> ev = lambda p, d: {"err": jnp.abs(p["w"] - d["x"]).sum()}
    >>> init = {"w": jnp.zeros((2, 1))}                        # K = 2 groups
    >>> _, hist = grouped_rounds(init, data, jax.random.key(0), 0.5, 0.0, 0.0,
    ...                          jnp.array([0, 0, 1, 1]), jnp.ones(4), loss_fn=loss,
    ...                          eval_fn=ev, num_rounds=3, local_steps=5)
    >>> hist["err"].shape
    (3, 4)
    """
    r_total = checks.check_int("num_rounds", num_rounds, minimum=1)
    steps = checks.check_int("local_steps", local_steps, minimum=1)
    checks.check_choice("server", server, SERVERS)
    checks.check_key("key", key)
    checks.check_range("alpha", alpha, low=0.0, scalar=True)
    checks.check_range("proximal_mu", proximal_mu, low=0.0, scalar=True)
    checks.check_range("learning_rate", learning_rate, low=0.0, low_open=True, scalar=True)
    leaves = jax.tree.leaves(init_params)
    if not leaves or any(jnp.ndim(x) < 1 for x in leaves):
        raise ValueError("init_params must be a pytree of [K, ...] arrays (one set per group)")
    num_groups = int(jnp.shape(leaves[0])[0])
    g = jnp.asarray(group_ids)
    checks.check_ndim("group_ids", g, 1, "[C]")
    num_clients = g.shape[0]
    for leaf in jax.tree.leaves(data):
        if jnp.ndim(leaf) < 1 or jnp.shape(leaf)[0] != num_clients:
            raise ValueError(f"every data leaf needs a leading client axis of {num_clients} "
                             f"(group_ids' length), got shape {jnp.shape(leaf)}")
    w = jnp.asarray(weights, jnp.float32)
    if w.shape != (num_clients,):
        raise ValueError(f"weights must have shape [C] = ({num_clients},), got {w.shape}")
    gv = checks.concrete(g)
    if gv is not None and (gv.min() < 0 or gv.max() >= num_groups):
        raise ValueError(f"group_ids must lie in [0, K={num_groups}) (K from init_params)")

    train = jax.vmap(lambda p, d, k, lr: local_train(p, d, k, lr, loss_fn=loss_fn,
                                                     num_steps=steps, clip_norm=clip_norm,
                                                     proximal_mu=proximal_mu),
                     in_axes=(0, 0, 0, None))
    evaluate = jax.vmap(eval_fn)

    def one_round(carry, r):
        params, key = carry
        key, k_clients, k_server = jax.random.split(key, 3)
        lr = cosine_lr(learning_rate, r, r_total)
        start = jax.tree.map(lambda a: a[g], params)  # [C, ...]
        local, metrics = train(start, data, jax.random.split(k_clients, num_clients), lr)
        # traced learning rates are not checked: lr = 0 gives zero uploads, never 0 / 0
        safe_lr = jnp.where(lr > 0, lr, 1.0)
        upd = (jax.vmap(flatten)(start) - jax.vmap(flatten)(local)) / safe_lr  # [C, P]
        if server == "pcgrad":
            upd = pcgrad(upd, k_server)
        means, sums = grouped_average(upd, g, w, num_groups=num_groups)  # [K, P]
        valid = sums > 0
        params = fedgcm_server_step(params, means, lr,
                                    alpha if server == "rpgrad" else 0.0, valid=valid)
        scores = evaluate(jax.tree.map(lambda a: a[g], params), data)
        if "loss" in scores:
            raise ValueError("eval_fn must not return a 'loss' entry (grouped_rounds adds the "
                             "clients' training loss under that name)")
        scores["loss"] = metrics["loss"][:, -1]
        return (params, key), scores

    (params, _), history = jax.lax.scan(one_round, (init_params, key),
                                        jnp.arange(r_total, dtype=jnp.int32))
    return params, history
