"""One timing helper for experiments and benchmarks: named wall-clock sections and op timings.

Wall-clock numbers differ from run to run, so a result keeps them apart from its metrics: an
experiment returns them under ``result["timings"]`` (written to ``metrics.json`` under
``"timings"``), and the determinism checks compare everything else.

>>> sw = Stopwatch()
>>> with sw("work"):
...     _ = sum(range(1000))
>>> sorted(sw.seconds) == ["work"] and sw.seconds["work"] >= 0.0
True
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["Stopwatch", "time_fn", "block"]


def block(x: Any) -> Any:
    """``jax.block_until_ready`` on every array leaf of ``x`` (a no-op for plain Python)."""
    import jax

    return jax.block_until_ready(x)


class Stopwatch:
    """Accumulates wall-clock seconds per name: ``with sw("train"): ...``; ``sw.seconds``."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextlib.contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - t0

    def total(self) -> float:
        return float(sum(self.seconds.values()))


def time_fn(fn: Callable[..., Any], *args: Any, repeats: int = 5, warmup: int = 1,
            **kwargs: Any) -> float:
    """Median wall-clock seconds of ``fn(*args, **kwargs)``, waiting for its results each time.

    ``warmup`` calls run first (compilation), then ``repeats`` timed calls.

    >>> time_fn(lambda: sum(range(10)), repeats=3) >= 0.0
    True
    """
    if repeats < 1 or warmup < 0:
        raise ValueError(f"repeats must be >= 1 and warmup >= 0, got {repeats}, {warmup}")
    for _ in range(warmup):
        block(fn(*args, **kwargs))
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        block(fn(*args, **kwargs))
        times.append(time.perf_counter() - t0)
    return float(statistics.median(times))
