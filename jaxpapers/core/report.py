"""Report writer: an experiment's result -> ``report.md``, ``metrics.json``, ``config.json``.

An experiment's ``run(config, key)`` returns a *result* dict::

    {"metrics": {name: number},                       # flat, JSON numbers (non-finite -> null)
     "claims": [claim(...), ...],                     # see :func:`claim`
     "data": {...},                                   # optional, JSON-able, for plots
     "tables": [markdown str, ...],                   # optional extra tables for report.md
     "timings": {name: seconds}}                      # optional wall-clock numbers

A claim keeps two things apart: ``paper`` holds the paper's own words (taken from
``third_party/papers/<id>.toml`` with :func:`jaxpapers.core.registry.paper_says`), ``criterion``
says in words what *we* tested and where we put the threshold. The verdict follows from
``passed``: ``True`` -> "reproduced", ``False`` -> "not reproduced", ``None`` -> "not comparable".

Wall-clock numbers go in ``timings``, not ``metrics``: they change from run to run, and
``metrics`` (with the claims) is what must be identical when a run is repeated.

:func:`write_report` validates it (``ValueError`` naming the offending field), then writes the three
files atomically (temporary file + ``os.replace``), so a crash never leaves a half-written report.
:func:`read_metrics` reads ``metrics.json`` back and validates it again (round trip).
In a multi-process run only the primary process writes (every process validates).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import pathlib
import platform
import sys
import tempfile
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

__all__ = [
    "VERDICTS",
    "claim",
    "verdict",
    "markdown_table",
    "validate_result",
    "write_report",
    "read_metrics",
    "claims_table",
    "console_table",
    "environment_info",
    "atomic_write_text",
    "to_jsonable",
]

VERDICTS = ("reproduced", "not reproduced", "not comparable")
CLAIM_KEYS = ("metric", "ours", "paper", "criterion", "verdict")


def verdict(passed: bool | None) -> str:
    """``True`` -> "reproduced", ``False`` -> "not reproduced", ``None`` -> "not comparable"."""
    if passed is None:
        return "not comparable"
    if not isinstance(passed, (bool, np.bool_)):
        raise TypeError(f"passed must be True, False or None, got {type(passed).__name__} "
                        f"{passed!r}")
    return "reproduced" if bool(passed) else "not reproduced"


def claim(metric: str, ours: Any, *, paper: str | float | int, criterion: str,
          passed: bool | None, baselines: Mapping[str, Any] | None = None,
          note: str = "") -> dict[str, Any]:
    """One row of a report's claims table.

    Args:
      metric: the name of our metric (a key of the result's ``metrics``, or a derived number).
      ours: our number (a Python/NumPy/JAX scalar).
      paper: the paper's words (or number) for the claim, from
        :func:`jaxpapers.core.registry.paper_says`; never our threshold.
      criterion: our test, in words: what was compared with what, and the threshold we fixed.
      passed: whether our criterion held (``None`` when the claim cannot be tested here).
      baselines: optional ``{name: number}`` shown beside ours.
      note: optional context (causes, caveats, per-seed numbers).

    Returns:
      ``{"metric", "ours", "paper", "criterion", "verdict"[, "baselines"][, "note"]}``.

    >>> claim("ratio", 0.8, paper="shorter intervals", criterion="ratio <= 0.9", passed=True)
    ... # doctest: +NORMALIZE_WHITESPACE
    {'metric': 'ratio', 'ours': 0.8, 'paper': 'shorter intervals', 'criterion': 'ratio <= 0.9',
     'verdict': 'reproduced'}
    """
    if not isinstance(metric, str) or not metric:
        raise ValueError(f"metric must be a non-empty string, got {metric!r}")
    if not isinstance(criterion, str) or not criterion.strip():
        raise ValueError(f"claim {metric!r}: criterion must say in words what we tested")
    row: dict[str, Any] = {"metric": metric, "ours": ours, "paper": paper,
                           "criterion": criterion, "verdict": verdict(passed)}
    if baselines:
        row["baselines"] = dict(baselines)
    if note:
        row["note"] = str(note)
    return row


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[Any]], *,
                   title: str = "") -> str:
    """A markdown table; numbers are formatted like the claims table (4 significant digits).

    >>> print(markdown_table(["a", "b"], [[1, 0.123456], ["x", None]]))
    | a | b |
    |---|---|
    | 1 | 0.1235 |
    | x | nan |
    """
    n = len(header)
    lines = [f"{title}\n"] if title else []
    lines += ["| " + " | ".join(map(str, header)) + " |", "|" + "---|" * n]
    for i, r in enumerate(rows):
        if len(r) != n:
            raise ValueError(f"row {i} has {len(r)} cells, the header has {n}")
        lines.append("| " + " | ".join(_fmt(_cell(v)).replace("|", "\\|") for v in r) + " |")
    return "\n".join(lines)


def _cell(v: Any) -> Any:
    if hasattr(v, "item") and getattr(v, "shape", None) == ():
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _as_number(x: Any, what: str) -> float | int | None:
    """A Python number (or None for non-finite) from a Python/numpy/jax scalar."""
    if hasattr(x, "item") and getattr(x, "shape", ()) == ():
        x = x.item()
    if isinstance(x, bool) or not _is_number(x):
        raise ValueError(f"{what} must be a real number, got {type(x).__name__}: {x!r}")
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def to_jsonable(x: Any) -> Any:
    """Convert numpy/jax arrays, tuples, dataclasses and enums into JSON-serialisable values."""
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return {f.name: to_jsonable(getattr(x, f.name)) for f in dataclasses.fields(x)}
    if isinstance(x, Mapping):
        return {str(k): to_jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [to_jsonable(v) for v in x]
    if hasattr(x, "tolist"):  # numpy / jax arrays and scalars
        return to_jsonable(x.tolist())
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, (str, int, float, bool)) or x is None:
        return x
    if hasattr(x, "value") and isinstance(getattr(x, "value"), (str, int)):  # enums
        return x.value
    raise ValueError(f"cannot serialise {type(x).__name__} to JSON: {x!r}")


def validate_result(result: Mapping[str, Any]) -> dict[str, Any]:
    """Check an experiment result and return a normalised copy (plain Python numbers).

    Raises:
      ValueError: a missing/ill-typed field, naming it (e.g. ``claims[2].verdict``).
    """
    if not isinstance(result, Mapping):
        raise ValueError(f"result must be a dict, got {type(result).__name__}")
    metrics = result.get("metrics")
    if not isinstance(metrics, Mapping) or not metrics:
        raise ValueError("result['metrics'] must be a non-empty dict of name -> number")
    norm_metrics: dict[str, float | int | None] = {}
    for name, value in metrics.items():
        if not isinstance(name, str) or not name:
            raise ValueError(f"metric names must be non-empty strings, got {name!r}")
        norm_metrics[name] = _as_number(value, f"metrics[{name!r}]")
    claims = result.get("claims", [])
    if not isinstance(claims, Sequence) or isinstance(claims, str):
        raise ValueError("result['claims'] must be a list of dicts")
    norm_claims = []
    for i, c in enumerate(claims):
        where = f"claims[{i}]"
        if not isinstance(c, Mapping):
            raise ValueError(f"{where} must be a dict")
        for field in CLAIM_KEYS:
            if field not in c:
                raise ValueError(f"{where} lacks the field {field!r}")
        if not isinstance(c["criterion"], str) or not c["criterion"].strip():
            raise ValueError(f"{where}.criterion must say in words what we tested")
        if not isinstance(c["metric"], str):
            raise ValueError(f"{where}.metric must be a string")
        if c["verdict"] not in VERDICTS:
            raise ValueError(f"{where}.verdict must be one of {VERDICTS}, got {c['verdict']!r}")
        paper = c["paper"]
        if not isinstance(paper, str):
            paper = _as_number(paper, f"{where}.paper")
        row = {"metric": c["metric"], "ours": _as_number(c["ours"], f"{where}.ours"),
               "paper": paper, "criterion": c["criterion"], "verdict": c["verdict"]}
        baselines = c.get("baselines", {})
        if not isinstance(baselines, Mapping):
            raise ValueError(f"{where}.baselines must be a dict of name -> number")
        if baselines:
            row["baselines"] = {str(k): _as_number(v, f"{where}.baselines[{k!r}]")
                                for k, v in baselines.items()}
        if c.get("note"):
            row["note"] = str(c["note"])
        norm_claims.append(row)
    tables = result.get("tables", [])
    if isinstance(tables, str) or not all(isinstance(t, str) for t in tables):
        raise ValueError("result['tables'] must be a list of markdown strings")
    timings = result.get("timings", {})
    if not isinstance(timings, Mapping):
        raise ValueError("result['timings'] must be a dict of name -> seconds")
    norm_timings = {str(k): _as_number(v, f"timings[{k!r}]") for k, v in timings.items()}
    clash = sorted(set(norm_timings) & set(norm_metrics))
    if clash:
        raise ValueError(f"names in both metrics and timings: {clash}")
    out = {"metrics": norm_metrics, "claims": norm_claims, "tables": list(tables),
           "timings": norm_timings}
    extra = set(result) - {"metrics", "claims", "tables", "timings", "data"}
    if extra:
        raise ValueError(f"result has unknown fields {sorted(extra)}; allowed: metrics, claims, "
                         "data, tables, timings")
    if "data" in result:
        out["data"] = to_jsonable(result["data"])
    return out


def atomic_write_text(path: pathlib.Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically: a temp file in the same folder, then rename."""
    path = pathlib.Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        pathlib.Path(tmp).unlink(missing_ok=True)
        raise


# Packages whose versions can change a result (recorded in config.json, shown in report.md).
RECORDED_PACKAGES = ("jax", "jaxlib", "flax", "optax", "orbax-checkpoint", "chex", "numpy",
                     "ml_dtypes", "scipy", "scikit-learn", "matplotlib", "mctx", "qwix")
# Environment variables that change XLA's numerics or threading.
RECORDED_ENV = ("XLA_FLAGS", "JAX_ENABLE_X64", "JAX_DEFAULT_MATMUL_PRECISION", "OMP_NUM_THREADS",
                "JAX_PLATFORMS", "TF_CPP_MIN_LOG_LEVEL")


def _package_versions(names: Sequence[str]) -> dict[str, str | None]:
    from importlib import metadata

    out: dict[str, str | None] = {}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def environment_info() -> dict[str, Any]:
    """What decides a result besides the code, config and seed; recorded in ``config.json``.

    Keys: ``python``, ``platform``, ``jax``, ``jaxlib``, ``backend``, ``device_kind``,
    ``device_count``, ``packages`` (name -> version or None), ``xla_flags`` (the ``XLA_FLAGS``
    environment variable, "" when unset), ``env`` (the other variables in ``RECORDED_ENV`` that
    are set), ``jax_config`` (x64, default matmul precision), ``threads`` (usable CPUs: the
    affinity mask; ``cpu_count``: the machine's), ``cpu_model``, ``machine``.
    """
    import jax
    import jaxlib

    devices = jax.devices()
    return {
        "python": platform.python_version(),
        "platform": sys.platform,
        "jax": jax.__version__,
        "jaxlib": jaxlib.__version__,
        "backend": jax.default_backend(),
        "device_kind": devices[0].device_kind if devices else "none",
        "device_count": len(devices),
        "packages": _package_versions(RECORDED_PACKAGES),
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
        "env": {k: os.environ[k] for k in RECORDED_ENV if k in os.environ and k != "XLA_FLAGS"},
        "jax_config": {"jax_enable_x64": bool(jax.config.jax_enable_x64),
                       "jax_default_matmul_precision":
                           str(jax.config.jax_default_matmul_precision)},
        "threads": _usable_cpus(),
        "cpu_count": os.cpu_count(),
        "cpu_model": _cpu_model(),
        "machine": platform.machine(),
    }


def _fmt(x: Any) -> str:
    if x is None:
        return "nan"
    if isinstance(x, str):
        return x
    if isinstance(x, bool):
        return str(x)
    if isinstance(x, int):
        return str(x)
    if x == 0 or 1e-3 <= abs(x) < 1e5:
        return f"{x:.4g}"
    return f"{x:.3e}"


def _baselines_text(row: Mapping[str, Any]) -> str:
    b = row.get("baselines") or {}
    return "; ".join(f"{k} {_fmt(v)}" for k, v in b.items()) or "-"


def claims_table(claims: Sequence[Mapping[str, Any]]) -> str:
    """Markdown table: metric | ours | baselines | the paper says | our criterion | verdict."""
    rows = [(c["metric"], c["ours"], _baselines_text(c), c["paper"], c.get("criterion", "-"),
             c["verdict"]) for c in claims]
    return markdown_table(("metric", "ours", "baselines", "the paper says", "our criterion",
                           "verdict"), rows)


def console_table(rows: Sequence[Sequence[str]], header: Sequence[str]) -> str:
    """A plain fixed-width text table for the terminal."""
    cols = [list(header)] + [list(map(str, r)) for r in rows]
    widths = [max(len(r[i]) for r in cols) for i in range(len(header))]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    out = [fmt.format(*header), fmt.format(*("-" * w for w in widths))]
    out += [fmt.format(*r) for r in cols[1:]]
    return "\n".join(out)


def write_report(out_dir: str | os.PathLike, *, paper_id: str, scale: str, seed: int,
                 result: Mapping[str, Any], config: Any, wall_time_s: float,
                 plots: Sequence[str | os.PathLike] = (), title: str = "",
                 facts: Mapping[str, Any] | None = None) -> dict[str, pathlib.Path]:
    """Validate ``result`` and write ``report.md``, ``metrics.json`` and ``config.json``.

    Args:
      out_dir: folder for this paper's files (created if missing).
      paper_id: registry id; recorded in ``metrics.json`` as ``paper``.
      scale: the config's name (``"tiny"``, ``"small"``, ``"full"`` or an experiment's extra).
      seed: the integer seed the run's key was made from.
      result: the experiment's result dict (see module docstring).
      config: the resolved experiment config (a dataclass or dict).
      wall_time_s: the run's wall time in seconds.
      plots: PNG files (already written into ``out_dir``) to link from the report.
      title: the paper's title, for the report heading.
      facts: the paper's published facts (``third_party/papers/<id>.toml``), for the citation.

    Returns:
      ``{"report": path, "metrics": path, "config": path}``.

    In a multi-process run (:mod:`jaxpapers.core.distributed`) every process validates the
    result, but only the primary process writes the files; the others return the same paths.
    """
    res = validate_result(result)
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise ValueError(f"seed must be an int, got {seed!r}")
    out = pathlib.Path(out_dir)
    paths = {"report": out / "report.md", "metrics": out / "metrics.json",
             "config": out / "config.json"}
    from jaxpapers.core.distributed import is_primary

    if not is_primary():
        return paths
    out.mkdir(parents=True, exist_ok=True)
    facts = facts or {}
    metrics_doc = {"paper": paper_id, "scale": scale, "seed": seed,
                   "metrics": res["metrics"], "claims": res["claims"],
                   "timings": res["timings"]}
    config_doc = {"paper": paper_id, "scale": scale, "seed": seed,
                  "config": to_jsonable(config), "wall_time_s": round(float(wall_time_s), 3),
                  "environment": environment_info()}
    md = [f"# {title or paper_id}: reproduction ({scale} scale)", ""]
    if facts.get("code_url"):
        md.append(f"Official code: {facts['code_url']}  ")
    if facts.get("venue"):
        md.append(f"Venue: {facts['venue']}  ")
    md += [f"Seed: {seed}; wall time: {wall_time_s:.1f} s; "
           f"backend: {config_doc['environment']['backend']} "
           f"({config_doc['environment']['device_kind']})", "",
           "## Claims", "", claims_table(res["claims"]) if res["claims"] else "(no claims)", ""]
    notes = [f"- **{c['metric']}**: {c['note']}" for c in res["claims"] if c.get("note")]
    if notes:
        md += ["### Notes", "", *notes, ""]
    for t in res["tables"]:
        md += [t, ""]
    md += ["## All metrics", "", markdown_table(("metric", "value"), list(res["metrics"].items())),
           ""]
    if res["timings"]:
        md += ["## Wall-clock timings (seconds; vary between runs)", "",
               markdown_table(("section", "seconds"), list(res["timings"].items())), ""]
    env = config_doc["environment"]
    pk = ", ".join(f"{k} {v}" for k, v in env["packages"].items() if v)
    md += ["## Environment", "",
           f"Python {env['python']} on {env['machine']} ({env['cpu_model']}); {env['threads']} "
           f"usable CPU threads of {env['cpu_count']}; backend {env['backend']} "
           f"({env['device_count']} x {env['device_kind']}).  ",
           f"Packages: {pk}.  ",
           f"XLA_FLAGS: `{env['xla_flags'] or '(unset)'}`; other settings: "
           f"{json.dumps(env['env'])}; jax config: {json.dumps(env['jax_config'])}.", ""]
    if plots:
        md += ["## Plots", ""]
        md += [f"![{pathlib.Path(p).stem}]({pathlib.Path(p).name})" for p in plots]
        md.append("")
    md += ["## Config", "", "```json", json.dumps(config_doc["config"], indent=2), "```", ""]
    atomic_write_text(paths["metrics"], json.dumps(metrics_doc, indent=2, allow_nan=False) + "\n")
    atomic_write_text(paths["config"], json.dumps(config_doc, indent=2, allow_nan=False) + "\n")
    atomic_write_text(paths["report"], "\n".join(md))
    return paths


def read_metrics(path: str | os.PathLike) -> dict[str, Any]:
    """Read and validate a ``metrics.json`` written by :func:`write_report`.

    Raises:
      ValueError: the file is not valid JSON or does not follow the metrics contract.
    """
    path = pathlib.Path(path)
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ValueError(f"{path} is not valid JSON: {e}") from e
    if not isinstance(doc, dict):
        raise ValueError(f"{path}: top level must be an object")
    for field in ("paper", "scale", "seed", "metrics", "claims"):
        if field not in doc:
            raise ValueError(f"{path}: missing field {field!r}")
    nan = lambda v: float("nan") if v is None else v  # noqa: E731 - JSON null is a non-finite
    validate_result({
        "metrics": {k: nan(v) for k, v in doc["metrics"].items()},
        "claims": [{**c, "ours": nan(c["ours"])} for c in doc["claims"]],
        "timings": {k: nan(v) for k, v in doc.get("timings", {}).items()}})
    return doc
