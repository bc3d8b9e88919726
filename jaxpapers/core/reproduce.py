"""Run one paper's experiment end to end and write its report.

This is the one place in the library that loads ``experiments/`` — by name, through importlib, at
the command-line boundary — so the capability modules never depend on experiments.
An experiment package ``experiments.<id>`` provides:

* ``config.py``: ``tiny()``, ``small()`` and ``full()`` returning a frozen ``Config`` dataclass,
  and optionally ``EXTRA_SCALES = ("name", ...)``: further config functions that ``--scale``
  accepts for this paper (e.g. a sweep);
* ``run.py``: ``run(config, key) -> result`` (see :mod:`jaxpapers.core.report`) and
  ``plot(result, out_dir) -> list[pathlib.Path]`` writing at least one PNG.

Scales: ``tiny`` runs the whole pipeline in seconds (its numbers mean nothing; the default tests
run it for every implemented paper), ``small`` is minutes on a laptop CPU, ``full`` is the
paper's setting for an accelerator.
"""

from __future__ import annotations

import dataclasses
import importlib
import pathlib
import time
from typing import Any

from jaxpapers.core import registry, report

__all__ = ["SCALES", "Outcome", "NotReproducibleError", "reproduce", "load_experiment",
           "scales_of", "check_claims_quote_paper"]

SCALES = ("tiny", "small", "full")


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


def scales_of(cfg_mod: Any) -> tuple[str, ...]:
    """The config names an experiment accepts: :data:`SCALES` plus its ``EXTRA_SCALES``."""
    return SCALES + tuple(getattr(cfg_mod, "EXTRA_SCALES", ()))


def check_claims_quote_paper(pid: str, claims: list[dict[str, Any]]) -> None:
    """Every claim's ``paper`` must be one of the paper's statements in its TOML file.

    This keeps our thresholds out of the "paper" column: they belong in ``criterion``.

    Raises:
      ValueError: naming the claim whose ``paper`` is not the paper's words.
    """
    statements = registry.paper_statements(pid)
    if not statements:  # no third_party facts available (e.g. a wheel install): nothing to check
        return
    for i, c in enumerate(claims):
        if c["paper"] not in statements:
            raise ValueError(
                f"claims[{i}] ({c['metric']!r}): 'paper' must be the paper's words from "
                f"third_party/papers/{pid}.toml (registry.paper_says); got {c['paper']!r}. Our "
                "own thresholds go in 'criterion'.")


def reproduce(pid: str, *, scale: str = "small", out_dir: str | pathlib.Path = "results",
              seed: int = 0) -> Outcome:
    """Run paper ``pid``'s experiment at ``scale`` with ``jax.random.key(seed)``.

    Writes ``out_dir/<pid>/{report.md, metrics.json, config.json, *.png}``.

    Several processes (started by ``jaxpapers launch`` or a cluster scheduler): the first call
    joins them (:func:`jaxpapers.core.distributed.initialize`, a no-op in a single process);
    every process runs the experiment, only the primary plots and writes the files (the other
    processes' ``Outcome.files`` is empty).

    Raises:
      UnknownPaperError: unknown id. NotReproducibleError: not implemented.
      ValueError: bad scale, or the experiment returned a malformed result or no plot.
    """
    from jaxpapers.core import distributed

    distributed.initialize()  # before anything touches a device
    import jax

    primary = distributed.is_primary()
    paper = registry.with_facts(registry.get(pid))
    cfg_mod, run_mod = load_experiment(pid)
    if scale not in scales_of(cfg_mod):
        raise ValueError(f"scale must be one of {scales_of(cfg_mod)} for {pid}, got {scale!r}")
    config = getattr(cfg_mod, scale)()
    dest = pathlib.Path(out_dir) / pid
    if primary:
        dest.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    result = run_mod.run(config, jax.random.key(seed))
    wall = time.perf_counter() - t0
    norm = report.validate_result(result)  # fail before plotting if malformed
    check_claims_quote_paper(pid, norm["claims"])
    if not primary:  # the primary process plots and writes; the others are done
        report.write_report(dest, paper_id=pid, scale=scale, seed=seed, result=result,
                            config=config, wall_time_s=wall, title=paper.title,
                            facts=registry.paper_facts(pid))  # validates, writes nothing
        return Outcome(pid, scale, seed, wall, dest, tuple(norm["claims"]), ())
    plots = [pathlib.Path(p) for p in run_mod.plot(result, dest)]
    if not plots or not all(p.suffix == ".png" and p.is_file() for p in plots):
        raise ValueError(f"experiment {pid!r}: plot() must write at least one PNG, got {plots}")
    paths = report.write_report(dest, paper_id=pid, scale=scale, seed=seed, result=result,
                                config=config, wall_time_s=wall, plots=plots, title=paper.title,
                                facts=registry.paper_facts(pid))
    return Outcome(pid, scale, seed, wall, dest, tuple(norm["claims"]),
                   tuple(paths.values()) + tuple(plots))
