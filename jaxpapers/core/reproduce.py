"""Run one paper's experiment end to end and write its report.

This is the one place in the library that loads ``experiments/`` — by name, through importlib, at
the command-line boundary — so the capability modules never depend on experiments.
An experiment package ``experiments.<id>`` provides:

* ``config.py``: ``small() -> Config`` and ``full() -> Config`` (frozen dataclasses);
* ``run.py``: ``run(config, key) -> result`` (see :mod:`jaxpapers.core.report`) and
  ``plot(result, out_dir) -> list[pathlib.Path]`` writing at least one PNG.
"""

from __future__ import annotations

import dataclasses
import importlib
import pathlib
import time
from typing import Any

from jaxpapers.core import registry, report

__all__ = ["SCALES", "Outcome", "NotReproducibleError", "reproduce", "load_experiment"]

SCALES = ("small", "full")


class NotReproducibleError(RuntimeError):
    """The paper is registered but has no working experiment yet."""


@dataclasses.dataclass(frozen=True)
class Outcome:
    """What one ``reproduce`` call produced."""

    paper: str
    scale: str
    seed: int
    wall_time_s: float
    out_dir: pathlib.Path
    claims: tuple[dict[str, Any], ...]
    files: tuple[pathlib.Path, ...]


def load_experiment(pid: str) -> tuple[Any, Any]:
    """Import ``experiments.<pid>.config`` and ``experiments.<pid>.run``."""
    paper = registry.get(pid)
    if not paper.reproducible:
        raise NotReproducibleError(
            f"paper {pid!r} is {paper.status.value}: there is no reproduction to run yet")
    try:
        cfg_mod = importlib.import_module(f"{paper.experiment}.config")
        run_mod = importlib.import_module(f"{paper.experiment}.run")
    except ModuleNotFoundError as e:
        raise NotReproducibleError(
            f"experiment package {paper.experiment!r} cannot be imported ({e}); install the "
            "project from its checkout (pip install -e .)") from e
    return cfg_mod, run_mod


def reproduce(pid: str, *, scale: str = "small", out_dir: str | pathlib.Path = "results",
              seed: int = 0) -> Outcome:
    """Run paper ``pid``'s experiment at ``scale`` with ``jax.random.key(seed)``.

    Writes ``out_dir/<pid>/{report.md, metrics.json, config.json, *.png}``.

    Raises:
      UnknownPaperError: unknown id. NotReproducibleError: not implemented.
      ValueError: bad scale, or the experiment returned a malformed result or no plot.
    """
    import jax

    if scale not in SCALES:
        raise ValueError(f"scale must be one of {SCALES}, got {scale!r}")
    paper = registry.with_facts(registry.get(pid))
    cfg_mod, run_mod = load_experiment(pid)
    config = getattr(cfg_mod, scale)()
    dest = pathlib.Path(out_dir) / pid
    dest.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    result = run_mod.run(config, jax.random.key(seed))
    wall = time.perf_counter() - t0
    norm = report.validate_result(result)  # fail before plotting if malformed
    plots = [pathlib.Path(p) for p in run_mod.plot(result, dest)]
    if not plots or not all(p.suffix == ".png" and p.is_file() for p in plots):
        raise ValueError(f"experiment {pid!r}: plot() must write at least one PNG, got {plots}")
    paths = report.write_report(dest, paper_id=pid, scale=scale, seed=seed, result=result,
                                config=config, wall_time_s=wall, plots=plots, title=paper.title,
                                facts=registry.paper_facts(pid))
    return Outcome(pid, scale, seed, wall, dest, tuple(norm["claims"]),
                   tuple(paths.values()) + tuple(plots))
