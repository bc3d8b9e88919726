"""Test configuration: 8 fake CPU devices, xdist worker count, an opt-in persistent XLA cache, fixtures.

jax configuration happens here (never at library import time), before any test touches a device.
"""

from __future__ import annotations

import gc
import os
import warnings

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


# Each compiled XLA:CPU program keeps about three memory mappings (code, read-only data, data)
# for as long as a jit cache holds it. A test worker that runs a few hundred files compiles tens
# of thousands of programs and reached Linux's default limit of 65,530 mappings per process
# (``vm.max_map_count``) after ~20 minutes: the next ``mmap`` in an LLVM compile failed and the
# worker died with SIGSEGV in whichever test was compiling (measured: 64,355 mappings at the end
# of the suite). So the caches are cleared after each test file (xdist's ``--dist loadfile`` keeps
# a file on one worker): programs shared inside a file stay cached, and a worker's mappings stay
# at one file's worth.
MAP_WARN_FRACTION = 0.5


def _memory_mappings() -> int | None:
    try:
        with open("/proc/self/maps", "rb") as f:
            return sum(1 for _ in f)
    except OSError:  # not Linux
        return None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
    """After the last test of a file (its module fixtures torn down): drop every compiled
    program (``jax.clear_caches``) so one worker's mappings never pile up across files."""
    yield
    if nextitem is None or nextitem.path != item.path:
        jax.clear_caches()
        gc.collect()
        n = _memory_mappings()
        limit = _max_map_count()
        if n is not None and limit and n > MAP_WARN_FRACTION * limit:
            warnings.warn(f"{n} memory mappings after {item.path.name} (limit {limit}): "
                          "something outside jax's caches is holding compiled programs")


def _max_map_count() -> int | None:
    try:
        with open("/proc/sys/vm/max_map_count") as f:
            return int(f.read())
    except (OSError, ValueError):
        return None


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
