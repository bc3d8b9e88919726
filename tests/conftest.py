"""Test configuration: 8 fake CPU devices, an opt-in persistent compilation cache, fixtures, `slow`.

jax configuration happens here (never at library import time), before any test touches a device.
"""

from __future__ import annotations

import os

import jax
import pytest

NUM_FAKE_DEVICES = 8

jax.config.update("jax_num_cpu_devices", NUM_FAKE_DEVICES)
# The persistent XLA cache is opt-in (JAXPAPERS_XLA_CACHE=DIR, e.g. a temp dir, for fast reruns):
# a fresh-clone CI run on jax 0.10.2 once crashed with SIGSEGV inside the cache *write* of an
# eagerly compiled scan after ~20 minutes of tests (jax/_src/compilation_cache.py
# put_executable_and_time); the same test passes alone. Without a cache dir that path never runs.
_cache = os.environ.get("JAXPAPERS_XLA_CACHE")
if _cache:
    jax.config.update("jax_compilation_cache_dir", _cache)
    # only programs that took >= 0.5 s to compile are worth writing
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
