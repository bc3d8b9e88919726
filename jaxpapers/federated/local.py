"""Client-side training: a few full-batch Adam steps on one client, mapped over many clients.

:func:`local_train` is written for one client (unbatched); :func:`client_map` maps it over the
leading client axis with ``jax.vmap``, or, given a mesh, with ``jax.shard_map`` (each device runs
the vmap over its own clients).

>>> import jax, jax.numpy as jnp
>>> loss = lambda w, d, k: jnp.mean((d["x"] @ w - d["y"]) ** 2)
>>> data = {"x": jnp.eye(2), "y": jnp.array([1.0, -1.0])}
>>> w, m = local_train(jnp.zeros(2), data, jax.random.key(0), 0.1, loss_fn=loss, num_steps=3)
>>> m["loss"].shape, bool(m["loss"][-1] < m["loss"][0])
((3,), True)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import PartitionSpec as P
from jax.typing import ArrayLike

from jaxpapers.core.checks import check_int, check_key, check_range, concrete
from jaxpapers.federated.aggregate import fedprox_penalty

__all__ = ["local_train", "client_map"]

LossFn = Callable[[Any, Any, jax.Array], jax.Array]


def local_train(params: Any, data: Any, key: jax.Array, learning_rate: ArrayLike, *,
                loss_fn: LossFn, num_steps: int, clip_norm: float | None = None,
                proximal_mu: ArrayLike = 0.0, anchor: Any = None) -> tuple[Any, dict]:
    """Run ``num_steps`` full-batch Adam steps on one client (unbatched) from a fresh Adam state.

    Each step ``t`` (FedAvg ClientUpdate, McMahan et al. 2017, Alg. 1, with Adam as in FedGCM's
    release: a new optimiser every round):
    ``g = grad_w [loss_fn(w, data, k_t) + mu/2 ||w - anchor||^2]`` (FedProx, Li et al. 2020,
    Eq. 2; the term is left out when ``proximal_mu`` is a concrete 0),
    ``g <- g * min(1, clip_norm / ||g||)`` when ``clip_norm`` is given,
    ``w <- w - learning_rate * adam(g)`` (``optax.scale_by_adam`` defaults). The step computes
    the same products as ``optax.chain(optax.clip_by_global_norm(clip_norm),
    optax.adam(learning_rate))``, but ``learning_rate`` is an ordinary (traceable) argument, so a
    learning-rate schedule over rounds does not recompile. Step ``t`` gets
    ``jax.random.split(key, num_steps)[t]``.

    Args:
      params: one client's parameter pytree.
      data: the client's full batch (any pytree ``loss_fn`` understands).
      key: a typed key (consumed); split into one key per step for ``loss_fn`` (dropout).
      learning_rate: scalar step size ``>= 0`` (traceable).
      loss_fn: ``loss_fn(params, data, key) -> scalar`` (static).
      num_steps: number of local steps ``>= 1`` (static).
      clip_norm: global gradient-norm clip ``> 0``, or None for no clipping (traceable).
      proximal_mu: FedProx ``mu >= 0`` (traceable; a concrete 0 skips the term).
      anchor: FedProx anchor pytree (default: the starting ``params``).

    Returns:
      ``(new_params, metrics)``: ``new_params`` like ``params``; ``metrics["loss"]`` the
      ``[num_steps]`` values of ``loss_fn`` (without the proximal term) before each step.

    Raises:
      TypeError: ``key`` is not a typed key; ``num_steps`` is not an int.
      ValueError: ``num_steps < 1``; (when concrete) ``learning_rate`` / ``proximal_mu`` negative
        or ``clip_norm <= 0``; ``anchor`` of a different tree structure than ``params``.

    >>> import jax, jax.numpy as jnp
    >>> loss = lambda w, d, k: jnp.sum((w - d) ** 2)
    >>> w, m = local_train(jnp.zeros(2), jnp.ones(2), jax.random.key(0), 0.5, loss_fn=loss,
    ...                    num_steps=2, proximal_mu=1.0)
    >>> [round(v, 3) for v in w.tolist()], [round(v, 3) for v in m["loss"].tolist()]
    ([0.915, 0.915], [2.0, 0.5])
    """
    check_key("key", key)
    steps = check_int("num_steps", num_steps, minimum=1)
    check_range("learning_rate", learning_rate, low=0.0, scalar=True)
    if clip_norm is not None:
        check_range("clip_norm", clip_norm, low=0.0, low_open=True, scalar=True)
    check_range("proximal_mu", proximal_mu, low=0.0, scalar=True)
    mu_value = concrete(proximal_mu)
    use_prox = mu_value is None or float(mu_value) > 0.0
    if anchor is None:
        anchor = params
    elif jax.tree.structure(anchor) != jax.tree.structure(params):
        raise ValueError(f"anchor must have the tree structure of params "
                         f"{jax.tree.structure(params)}, got {jax.tree.structure(anchor)}")
    anchor = jax.lax.stop_gradient(anchor)

    tx = optax.scale_by_adam()
    if clip_norm is not None:
        tx = optax.chain(optax.clip_by_global_norm(clip_norm), tx)

    def objective(w, k):
        loss = loss_fn(w, data, k)
        total = loss + fedprox_penalty(w, anchor, proximal_mu) if use_prox else loss
        return total, loss

    def step(carry, k):
        w, opt_state = carry
        (_, loss), grads = jax.value_and_grad(objective, has_aux=True)(w, k)
        updates, opt_state = tx.update(grads, opt_state, w)
        # u * (-lr): the same product optax.adam(lr)'s scale_by_learning_rate computes
        updates = jax.tree.map(lambda u: u * -jnp.asarray(learning_rate, u.dtype), updates)
        return (optax.apply_updates(w, updates), opt_state), loss

    keys = jax.random.split(key, steps)
    (new_params, _), losses = jax.lax.scan(step, (params, tx.init(params)), keys)
    return new_params, {"loss": losses}


def client_map(fn: Callable, *, mesh: jax.sharding.Mesh | None = None,
               axis_name: str = "clients", in_axes: int | None | tuple = 0) -> Callable:
    """Map ``fn`` (written for one client) over the leading client axis of its arguments.

    Without a mesh this is ``jax.vmap(fn, in_axes=in_axes)``. With a mesh it is
    ``jax.shard_map`` over ``axis_name`` (``in_specs`` ``P(axis_name)`` for mapped arguments,
    ``P()`` for broadcast ones; ``out_specs`` ``P(axis_name)``), inside which each device runs
    the vmap over its local block of clients; no collective is involved, so the result equals
    the vmapped one. Call the result eagerly or under ``jax.jit``.

    Args:
      fn: a function of positional arguments (pytrees) for one client.
      mesh: optional mesh whose axis ``axis_name`` splits the clients.
      axis_name: the mesh axis of the clients.
      in_axes: ``0`` (every argument has a leading client axis, the default) or a tuple with
        ``0`` / ``None`` per positional argument (``None``: the same value for every client,
        e.g. a learning rate).

    Returns:
      the mapped function; every output leaf has a leading client axis ``[C, ...]``.

    Raises:
      ValueError: ``axis_name`` not in the mesh; ``in_axes`` entries other than 0 / None; at
        call time, mapped arguments without a common leading size divisible by the axis size.

    >>> import jax, jax.numpy as jnp
    >>> mesh = jax.make_mesh((1,), ("clients",), axis_types=(jax.sharding.AxisType.Auto,))
    >>> f = client_map(lambda w, lr: w - lr * w, mesh=mesh, in_axes=(0, None))
    >>> f(jnp.arange(4.0), 0.5).tolist()
    [0.0, 0.5, 1.0, 1.5]
    """
    axes_given = in_axes if isinstance(in_axes, tuple) else None
    for ax in (axes_given if axes_given is not None else (in_axes,)):
        if ax is not None and not (isinstance(ax, int) and not isinstance(ax, bool) and ax == 0):
            raise ValueError(f"in_axes must be 0, None or a tuple of 0 / None, got {in_axes!r}")
    mapped = jax.vmap(fn, in_axes=in_axes)
    if mesh is None:
        return mapped
    if axis_name not in mesh.axis_names:
        raise ValueError(f"axis_name must be one of the mesh axes {mesh.axis_names}, "
                         f"got {axis_name!r}")
    size = mesh.shape[axis_name]

    def sharded(*args):
        axes = axes_given if axes_given is not None else (in_axes,) * len(args)
        if len(axes) != len(args):
            raise ValueError(f"in_axes has {len(axes)} entries for {len(args)} arguments")
        leading = {np.shape(leaf)[0] if np.ndim(leaf) else None
                   for arg, ax in zip(args, axes) if ax == 0
                   for leaf in jax.tree.leaves(arg)}
        if len(leading) > 1 or None in leading:
            raise ValueError(f"every mapped argument leaf needs the same leading client axis, "
                             f"got leading sizes {sorted(map(str, leading))}")
        if leading and next(iter(leading)) % size:
            raise ValueError(f"the number of clients ({next(iter(leading))}) must be divisible "
                             f"by the size {size} of mesh axis {axis_name!r}")
        specs = tuple(P(axis_name) if ax == 0 else P() for ax in axes)
        return jax.shard_map(mapped, mesh=mesh, in_specs=specs, out_specs=P(axis_name))(*args)

    return sharded
