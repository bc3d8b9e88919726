"""Deriving seeds for NumPy / scikit-learn from a JAX key, so every draw comes from the run's key.

Experiments get one ``key``; where a NumPy generator or an sklearn ``random_state`` is needed,
its seed is drawn from (a split of) that key rather than fixed in the code.

>>> import jax
>>> s = numpy_seed(jax.random.key(0))
>>> s == numpy_seed(jax.random.key(0)), 0 <= s < 2**31
(True, True)
"""

from __future__ import annotations

import jax
import numpy as np

__all__ = ["numpy_seed", "numpy_rng"]


def numpy_seed(key: jax.Array) -> int:
    """A deterministic int in ``[0, 2**31)`` drawn from ``key`` (consume the key: split first)."""
    return int(jax.random.randint(key, (), 0, 2**31 - 1, dtype=jax.numpy.int32))


def numpy_rng(key: jax.Array) -> np.random.Generator:
    """A NumPy ``Generator`` seeded from ``key``."""
    return np.random.default_rng(numpy_seed(key))
