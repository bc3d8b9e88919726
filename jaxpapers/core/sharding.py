"""Data-parallel sharding helpers: a mesh over the local devices and sharded train steps.

``jax.make_mesh`` makes *Explicit* axes by default on recent jax; :func:`data_parallel_mesh` asks
for ``Auto`` axes (unless told otherwise), so that ordinary jitted code takes ``NamedSharding``
inputs and XLA propagates the shardings. The mesh is always an argument: nothing here picks one
behind the caller's back.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

__all__ = ["data_parallel_mesh", "shard_batch", "replicate", "data_parallel_step"]


def data_parallel_mesh(num_devices: int | None = None, *, axis_name: str = "data",
                       axis_type: AxisType = AxisType.Auto) -> jax.sharding.Mesh:
    """A 1-D mesh over the first ``num_devices`` local devices (all by default)."""
    available = len(jax.devices())
    n = available if num_devices is None else num_devices
    if not isinstance(n, int) or not 1 <= n <= available:
        raise ValueError(f"num_devices must be an int in [1, {available}], got {num_devices!r}")
    return jax.make_mesh((n,), (axis_name,), axis_types=(axis_type,),
                         devices=jax.devices()[:n])


def shard_batch(batch: Any, mesh: jax.sharding.Mesh, *, axis_name: str | None = None) -> Any:
    """Place every leaf of ``batch`` split along its leading axis over ``axis_name``.

    Raises:
      ValueError: a leaf's leading dimension is not divisible by the axis size.
    """
    axis = axis_name or mesh.axis_names[0]
    size = mesh.shape[axis]

    def put(path, x):
        if x.ndim == 0 or x.shape[0] % size:
            raise ValueError(f"batch leaf {jax.tree_util.keystr(path)} has shape {x.shape}: its "
                             f"leading dimension must be divisible by the {size} devices of "
                             f"mesh axis {axis!r}")
        return jax.device_put(x, NamedSharding(mesh, P(axis)))

    return jax.tree_util.tree_map_with_path(put, batch)


def replicate(tree: Any, mesh: jax.sharding.Mesh) -> Any:
    """Place every leaf of ``tree`` fully replicated on ``mesh``."""
    return jax.device_put(tree, NamedSharding(mesh, P()))


def data_parallel_step(step_fn: Callable[[Any, Any], tuple[Any, Any]],
                       mesh: jax.sharding.Mesh) -> Callable[[Any, Any], tuple[Any, Any]]:
    """Jit ``step_fn(state, batch) -> (state, metrics)`` for replicated state, sharded batch.

    Call it with ``replicate(state, mesh)`` and ``shard_batch(batch, mesh)``; the gradient
    all-reduce is inserted by XLA. The returned state and metrics are replicated.
    """
    rep = NamedSharding(mesh, P())
    return jax.jit(step_fn, out_shardings=(rep, rep))
