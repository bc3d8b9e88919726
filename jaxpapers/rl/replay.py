"""A replay buffer as a pytree: a ring of static capacity C, pure add and sample.

Works for any pytree of transitions (a :class:`Transition` or a dict); every leaf gets a leading
[C] axis. ``add`` writes a batch of B rows at ``ptr, ptr + 1, ...`` modulo C (the oldest rows are
overwritten once full); ``sample`` draws uniformly with replacement from the ``size`` filled rows.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from jaxpapers.core import checks, pytree

__all__ = ["Transition", "ReplayBuffer", "replay_init", "replay_add", "replay_sample"]


@pytree.dataclass
class Transition:
    """One step (leaves may carry leading batch axes [...]).

    Attributes:
      obs: [..., O]; action: [..., A] in [-1, 1]; reward: [...]; next_obs: [..., O];
      done: [...] float32 terminal flag (1 = no bootstrap; time-limit truncation is 0).
    """

    obs: jax.Array
    action: jax.Array
    reward: jax.Array
    next_obs: jax.Array
    done: jax.Array


@pytree.dataclass
class ReplayBuffer:
    """Ring buffer. ``data``: pytree with leading [C]; ``ptr``: [] int32 next row to write;
    ``size``: [] int32 rows filled (<= C)."""

    data: Any
    ptr: jax.Array
    size: jax.Array

    @property
    def capacity(self) -> int:
        return jax.tree.leaves(self.data)[0].shape[0]


def replay_init(example: Any, capacity: int) -> ReplayBuffer:
    """An empty buffer whose rows look like ``example`` (one unbatched transition).

    >>> import jax.numpy as jnp
    >>> buf = replay_init({"x": jnp.zeros(2)}, capacity=4)
    >>> buf.capacity, buf.data["x"].shape, int(buf.size)
    (4, (4, 2), 0)
    """
    capacity = checks.check_int("capacity", capacity, minimum=1)
    data = jax.tree.map(lambda x: jnp.zeros((capacity,) + jnp.shape(x), jnp.asarray(x).dtype),
                        example)
    return ReplayBuffer(data, jnp.zeros((), jnp.int32), jnp.zeros((), jnp.int32))


def replay_add(buffer: ReplayBuffer, batch: Any) -> ReplayBuffer:
    """Write the B rows of ``batch`` (leading [B] on every leaf) at the ring's pointer.

    Raises:
      ValueError: B > capacity (rows would overwrite each other in one call), leaves of
        different leading sizes, or NaN / inf values (checked when concrete, e.g. on the host;
        the message names the field, e.g. ``batch.reward``).
    """
    cap = buffer.capacity
    sizes = {jnp.shape(x)[0] for x in jax.tree.leaves(batch)}
    if len(sizes) != 1:
        raise ValueError(f"batch leaves must share one leading size, got {sorted(sizes)}")
    b = sizes.pop()
    for path, leaf in jax.tree_util.tree_leaves_with_path(batch):
        checks.check_finite("batch" + jax.tree_util.keystr(path), leaf)
    if b > cap:
        raise ValueError(f"batch of {b} rows exceeds the buffer capacity {cap}")
    idx = (buffer.ptr + jnp.arange(b, dtype=jnp.int32)) % cap
    data = jax.tree.map(lambda d, x: d.at[idx].set(jnp.asarray(x, d.dtype)), buffer.data, batch)
    return ReplayBuffer(data, ((buffer.ptr + b) % cap).astype(jnp.int32),
                        jnp.minimum(buffer.size + b, cap).astype(jnp.int32))


def replay_sample(buffer: ReplayBuffer, key: jax.Array, batch_size: int) -> Any:
    """``batch_size`` rows drawn uniformly with replacement from the filled rows (an empty
    buffer returns copies of row 0).

    Raises:
      ValueError: ``batch_size`` > capacity (a buffer too small for the batch).
    """
    batch_size = checks.check_int("batch_size", batch_size, minimum=1)
    if batch_size > buffer.capacity:
        raise ValueError(f"batch_size {batch_size} exceeds the buffer capacity "
                         f"{buffer.capacity}: capacity must be >= batch_size")
    idx = jax.random.randint(key, (batch_size,), 0, jnp.maximum(buffer.size, 1))
    return jax.tree.map(lambda d: d[idx], buffer.data)
