"""Shared machinery: registry, reports, training loop, checkpoints, data, sharding.

Submodules are imported explicitly (``from jaxpapers.core import train``) so that importing the
registry for ``jaxpapers list`` does not pay for jax or orbax.
"""

__all__ = ["registry", "report", "reproduce", "train", "data", "sharding", "pytree"]
