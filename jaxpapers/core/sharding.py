"""Data-parallel sharding helpers: a mesh over every process's devices and sharded train steps.

``jax.make_mesh`` makes *Explicit* axes by default on recent jax; :func:`data_parallel_mesh` asks
for ``Auto`` axes (unless told otherwise), so that ordinary jitted code takes ``NamedSharding``
inputs and XLA propagates the shardings. The mesh is always an argument: nothing here picks one
behind the caller's back.

Several processes (see :mod:`jaxpapers.core.distributed`): the mesh spans the devices of every
process, in process order; each process hands :func:`shard_batch` only its own rows of the global
batch (``batch[process_slice(n)]``) and gets back global arrays; :func:`replicate` and
:func:`data_parallel_step` are the same calls as in one process (every process passes the same
values to :func:`replicate`). With one process everything is as before.

>>> import jax, jax.numpy as jnp
>>> mesh = data_parallel_mesh(2)
>>> x = shard_batch({"x": jnp.arange(8.0).reshape(4, 2)}, mesh)["x"]   # this process's rows
>>> x.shape, len(x.sharding.device_set)
((4, 2), 2)
>>> w = replicate(jnp.ones(2), mesh)
>>> step = data_parallel_step(lambda w, b: (w, jnp.sum(b @ w)), mesh)
>>> float(step(w, x)[1])
28.0
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import numpy as np
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

__all__ = ["data_parallel_mesh", "shard_batch", "replicate", "data_parallel_step"]


def data_parallel_mesh(num_devices: int | None = None, *, axis_name: str = "data",
                       axis_type: AxisType = AxisType.Auto) -> jax.sharding.Mesh:
    """A 1-D mesh over the devices of every process (all of them by default).

    Args:
      num_devices: mesh size. One process: its first ``num_devices`` devices. Several
        processes: a multiple of the process count; each process contributes its first
        ``num_devices // process_count`` local devices.
      axis_name: the mesh axis name.
      axis_type: ``AxisType.Auto`` (default) lets XLA propagate shardings.

    Returns:
      a ``jax.sharding.Mesh`` with one axis of size ``num_devices``; with several processes the
      devices are in process order (process 0's first), matching
      :func:`jaxpapers.core.distributed.process_slice`.

    Raises:
      ValueError: ``num_devices`` out of range, or not a multiple of the process count.
    """
    devices = jax.devices()
    available, processes = len(devices), jax.process_count()
    n = available if num_devices is None else num_devices
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= available:
        raise ValueError(f"num_devices must be an int in [1, {available}], got {num_devices!r}")
    if processes == 1:
        return jax.make_mesh((n,), (axis_name,), axis_types=(axis_type,), devices=devices[:n])
    if n % processes:
        raise ValueError(f"num_devices must be a multiple of the {processes} processes, got {n}")
    per_process = n // processes
    by_process: dict[int, list] = {}
    for d in devices:  # keep jax's order within each process
        by_process.setdefault(d.process_index, []).append(d)
    if any(len(v) < per_process for v in by_process.values()):
        raise ValueError(f"num_devices={n} needs {per_process} devices on each of the "
                         f"{processes} processes; some have fewer "
                         f"({ {p: len(v) for p, v in sorted(by_process.items())} })")
    # jax.sharding.Mesh, not jax.make_mesh: make_mesh may reorder devices by physical topology,
    # and process_slice needs each process's devices to form one contiguous block.
    ordered = [d for p in sorted(by_process) for d in by_process[p][:per_process]]
    return jax.sharding.Mesh(np.array(ordered), (axis_name,), axis_types=(axis_type,))


def _local_shards(mesh: jax.sharding.Mesh, axis: str) -> int:
    """How many positions along ``axis`` hold devices of this process."""
    me = jax.process_index()
    where = mesh.axis_names.index(axis)
    coords = {idx[where] for idx in np.ndindex(mesh.devices.shape)
              if mesh.devices[idx].process_index == me}
    return len(coords)


def shard_batch(batch: Any, mesh: jax.sharding.Mesh, *, axis_name: str | None = None) -> Any:
    """Split every leaf of this process's ``batch`` along its leading axis over ``axis_name``.

    One process: the batch is the global batch; its leaves are placed on the mesh
    (``device_put``). Several processes: each passes its own rows (``batch[process_slice(n)]``,
    the same number on every process) and gets global arrays of ``process_count`` times as many
    rows (``jax.make_array_from_process_local_data``); row block ``p`` is process ``p``'s.

    Args:
      batch: pytree of arrays ``[B_local, ...]`` (host or device arrays).
      mesh: e.g. from :func:`data_parallel_mesh`.
      axis_name: the mesh axis to split over (default: the mesh's first axis).

    Returns:
      the same pytree of global ``jax.Array`` ``[B_global, ...]`` sharded over ``axis_name``.

    Raises:
      ValueError: a leaf's leading dimension is not divisible by the number of devices of this
        process along the axis.
    """
    axis = axis_name or mesh.axis_names[0]
    if axis not in mesh.axis_names:
        raise ValueError(f"axis_name must be one of the mesh axes {mesh.axis_names}, got {axis!r}")
    sharding = NamedSharding(mesh, P(axis))
    if jax.process_count() == 1:
        size = mesh.shape[axis]

        def put(path, x):
            if np.ndim(x) == 0 or np.shape(x)[0] % size:
                raise ValueError(f"batch leaf {jax.tree_util.keystr(path)} has shape "
                                 f"{np.shape(x)}: its leading dimension must be divisible by the "
                                 f"{size} devices of mesh axis {axis!r}")
            return jax.device_put(x, sharding)

        return jax.tree_util.tree_map_with_path(put, batch)
    local = _local_shards(mesh, axis)
    if local == 0:
        raise ValueError(f"process {jax.process_index()} has no device in the mesh: a "
                         "multi-process mesh must span every process (data_parallel_mesh())")

    def assemble(path, x):
        if isinstance(x, jax.Array) and not x.is_fully_addressable:  # already global
            if x.sharding.is_equivalent_to(sharding, x.ndim):
                return x
            raise ValueError(f"batch leaf {jax.tree_util.keystr(path)} is already a global "
                             f"array with sharding {x.sharding}; pass this process's rows")
        if np.ndim(x) == 0 or np.shape(x)[0] % local:
            raise ValueError(f"batch leaf {jax.tree_util.keystr(path)} has shape "
                             f"{np.shape(x)}: this process's rows must be divisible by its "
                             f"{local} devices of mesh axis {axis!r}")
        return jax.make_array_from_process_local_data(sharding, np.asarray(x))

    return jax.tree_util.tree_map_with_path(assemble, batch)


def replicate(tree: Any, mesh: jax.sharding.Mesh) -> Any:
    """Place every leaf of ``tree`` fully replicated on ``mesh``.

    With several processes every process must pass the same values (e.g. parameters initialised
    from the same key; jax checks it); each keeps the copies on its own devices. Leaves that
    live on this process's devices only, and typed PRNG keys, go through the host.
    """
    sharding = NamedSharding(mesh, P())
    if jax.process_count() == 1:
        return jax.device_put(tree, sharding)

    def put(x):
        if isinstance(x, jax.Array) and jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
            # jax places key arrays across processes only as their raw data
            return jax.random.wrap_key_data(put(jax.random.key_data(x)),
                                            impl=jax.random.key_impl(x))
        if isinstance(x, jax.Array) and x.is_fully_addressable and x.committed:
            x = np.asarray(x)  # committed to a local device: device_put cannot move it across
        return jax.device_put(x, sharding)

    return jax.tree.map(put, tree)


def data_parallel_step(step_fn: Callable[[Any, Any], tuple[Any, Any]],
                       mesh: jax.sharding.Mesh) -> Callable[[Any, Any], tuple[Any, Any]]:
    """Jit ``step_fn(state, batch) -> (state, metrics)`` for replicated state, sharded batch.

    Call it with ``replicate(state, mesh)`` and ``shard_batch(batch, mesh)``; the gradient
    all-reduce is inserted by XLA. The returned state and metrics are replicated.
    """
    rep = NamedSharding(mesh, P())
    return jax.jit(step_fn, out_shardings=(rep, rep))
