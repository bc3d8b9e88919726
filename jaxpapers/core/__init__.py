"""Shared machinery: registry, reports, training loop, checkpoints, data, sharding, processes.

Submodules are imported explicitly (``from jaxpapers.core import train``) so that importing the
registry for ``jaxpapers list`` does not pay for jax or orbax.
"""

__all__ = ["registry", "report", "reproduce", "train", "data", "sharding", "distributed", "pytree",
           "checks", "plotting", "timing", "rng", "sandbox", "cache", "fem"]
