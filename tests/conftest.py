"""Test configuration: 8 fake CPU devices, a persistent compilation cache, fixtures, `slow` mark.

jax configuration happens here (never at library import time), before any test touches a device.
"""

from __future__ import annotations

import os
import pathlib
import tempfile

import jax
import pytest

NUM_FAKE_DEVICES = 8

jax.config.update("jax_num_cpu_devices", NUM_FAKE_DEVICES)
_cache = os.environ.get("JAXPAPERS_XLA_CACHE",
                        str(pathlib.Path(tempfile.gettempdir()) / "jaxpapers-xla-cache"))
jax.config.update("jax_compilation_cache_dir", _cache)
# Only programs that took >= 0.5 s to compile are written to the persistent cache: the eager
# per-op compiles are not worth it, and a CI run once crashed (SIGSEGV) inside the cache write of
# one such tiny program after ~20 minutes of tests.
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)
jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)


@pytest.fixture
def key():
    """A fresh ``jax.random.key(0)`` per test (consume it; split for more)."""
    return jax.random.key(0)


@pytest.fixture
def x64():
    """Run the test with float64 enabled (``jax.enable_x64`` context)."""
    with jax.enable_x64(True):
        yield


@pytest.fixture(scope="session")
def num_devices():
    n = len(jax.devices())
    if n < 2:
        pytest.skip("needs several (fake) devices")
    return n
