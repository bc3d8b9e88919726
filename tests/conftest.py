"""Test configuration: 8 fake CPU devices, xdist worker count, an opt-in persistent XLA cache, fixtures.

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


def _usable_cpus() -> int:
    """CPUs this process may use: the affinity mask, capped by a cgroup-v2 CPU quota if set."""
    try:
        n = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        n = os.cpu_count() or 1
    try:
        quota, period = open("/sys/fs/cgroup/cpu.max").read().split()
        if quota != "max":
            n = min(n, max(1, int(float(quota) / float(period))))
    except (OSError, ValueError):
        pass
    return n


MAX_TEST_WORKERS = 4  # each worker holds its own compiled programs (~1-3 GiB)


def pytest_xdist_auto_num_workers(config):
    """``-n auto`` (pyproject addopts): one worker per usable CPU, at most MAX_TEST_WORKERS.

    xdist's own default asks psutil for the machine's physical cores, which ignores container CPU
    quotas; ``PYTEST_XDIST_AUTO_NUM_WORKERS`` still overrides this.
    """
    env = os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS")
    if env:
        return int(env)
    return max(1, min(_usable_cpus(), MAX_TEST_WORKERS))


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
