"""Sandboxed evaluation of a candidate kernel: KernelFoundry's correctness ladder + a speed term.

``evaluate_source(source, task)`` scores candidate source (see :mod:`jaxpapers.evolve.tasks` for
what a candidate defines) on KernelFoundry's ladder (the paper's ``perf_score``):

====  =====================================================================================
0     syntax error (``ast.parse`` on the trusted side; nothing runs)
1     does not import, trace or lower for ``cuda`` (no valid ``cuda`` export for some shape)
2     runtime failure: no valid ``cpu`` export, or the exported program fails when run
3     output shape or dtype differs from the reference's on a seen shape
4     value mismatch on a seen shape, or any failure on a held-out shape (``failed_shape``)
5     correct on every seen and held-out shape and seed
====  =====================================================================================

``fitness = level`` below 5 and ``5 + speedup`` at 5 (the paper: perf_score + speedup), where
``speedup`` is the geometric mean over the task's GPU shapes (``Task.gpu_shapes``, exported for
``cuda`` only: too big to check in interpret mode, so their values are unchecked) of reference
time / candidate time from the roofline model of :mod:`jaxpapers.evolve.cost` on an H200
(a CPU PROXY, flagged in
``Evaluation.timing``; measured times need a GPU: :func:`time_exported`).

Trust boundary (what runs where):

* Candidate Python runs only in an export child: :func:`jaxpapers.core.sandbox.run_python` with
  the project's interpreter (bubblewrap: read-only root, private temp, hidden homes, no
  network, own PID namespace, empty environment, rlimits, a timeout that kills the tree). It
  gets the candidate and the input SHAPES only, and writes ``jax.export`` blobs.
* Inputs are drawn here from ``(task, shape, seed)``; the serialized ``cpu`` programs run in a
  second sandboxed child that holds no candidate code (StableHLO only: host callbacks cannot be
  serialized); outputs come back as ``.npy`` and are compared here with the reference computed
  here. So patched timers, patched comparison functions or expected outputs found in memory
  have nothing to hit: the reference never exists in a process where candidate code ran.
* The speed term reads the ``cuda`` blob's StableHLO and Triton IR here (no code runs).
  Limitation on a CPU machine: the ``cuda`` program cannot run here, so its VALUES are unchecked;
  a candidate whose ``cuda`` path computes something else than its checked ``cpu`` path would be
  timed for unchecked code. On a GPU, :func:`time_exported` runs the ``cuda`` blob, and a runner
  should compare its output before trusting the time.

Results are cached in-process by (source hash, task, params, shapes, seeds, limits).
"""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import io
import json
import math
import os
import re
import threading
from typing import Any, Mapping, Sequence

import numpy as np

from jaxpapers.evolve import _harness, cost, tasks as tasks_mod

__all__ = ["Evaluation", "evaluate_source", "reference_seconds", "clear_cache", "time_exported",
           "LEVELS"]

LEVELS = ("syntax", "compile", "runtime", "shape", "value", "correct")
_MAX_BLOB = 64 * 1024 * 1024
_CACHE: dict[str, "Evaluation"] = {}
_REF_SECONDS: dict[tuple, float] = {}
# CPython 3.11/3.12 can fail ast.parse run from two threads at once ("AST constructor
# recursion depth mismatch", seen here): the experiment evaluates from threads.
_AST_LOCK = threading.Lock()
_OPT_LEVEL = re.compile(r"--xla_backend_optimization_level=([0-3])(?![0-9])")


@dataclasses.dataclass(frozen=True)
class Evaluation:
    """The score of one candidate.

    Attributes:
      level: 0..5 (the ladder in the module docstring).
      correct_seen: True when every seen shape and seed matched the reference.
      failed_shape: name of the first shape that failed (seen or held-out), or None.
      fitness: ``level`` below 5, ``5 + speedup`` at 5.
      cell: (memory, compute, parallelism) descriptor levels of the source.
      message: what failed (or "ok").
      speedup: geometric-mean model speedup over the task's GPU shapes (0.0 below level 5).
      seconds: model seconds per GPU shape name (empty below level 5).
      timing: "roofline-proxy (H200 model, not measured)" or "none".
    """

    level: int
    correct_seen: bool
    failed_shape: str | None
    fitness: float
    cell: tuple[int, int, int]
    message: str
    speedup: float = 0.0
    seconds: Mapping[str, float] = dataclasses.field(default_factory=dict)
    timing: str = "none"

    def as_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["cell"] = list(self.cell)
        d["seconds"] = dict(self.seconds)
        return d


def clear_cache() -> None:
    """Forget cached evaluations and reference times."""
    _CACHE.clear()
    _REF_SECONDS.clear()


def _check_args(source, task, params, seeds, shapes, holdout_shapes, timeout_s, memory_gb):
    if not isinstance(source, str):
        raise TypeError(f"source must be a str, got {type(source).__name__}")
    t = tasks_mod.get_task(task)
    params = {} if params is None else params
    if not isinstance(params, Mapping) or not all(isinstance(k, str) for k in params):
        raise TypeError("params must be a mapping of str to JSON values")
    try:
        params = json.loads(json.dumps(dict(params), sort_keys=True))
    except (TypeError, ValueError):
        raise TypeError("params must hold JSON values (ints, floats, strings, bools)") from None
    seeds = tuple(seeds)
    if not seeds or not all(isinstance(s, (int, np.integer)) and not isinstance(s, bool)
                            for s in seeds):
        raise ValueError(f"seeds must be a non-empty sequence of ints, got {seeds!r}")
    shapes = tuple(t.seen_shapes if shapes is None else shapes)
    holdout = tuple(t.holdout_shapes if holdout_shapes is None else holdout_shapes)
    if not shapes:
        raise ValueError("shapes must hold at least one shape")
    for name, group in (("shapes", shapes), ("holdout_shapes", holdout)):
        for s in group:
            try:
                t.check_shape(s)
            except (TypeError, ValueError) as e:
                raise type(e)(f"{name}: {e}") from None
    names = [s.name for s in shapes + holdout]
    if len(set(names)) != len(names):
        raise ValueError(f"shapes and holdout_shapes need distinct names, got {names}")
    if not isinstance(timeout_s, (int, float)) or not timeout_s > 0 or not math.isfinite(
            timeout_s):
        raise ValueError(f"timeout_s must be a positive number, got {timeout_s!r}")
    if not isinstance(memory_gb, (int, float)) or not 0.5 <= memory_gb <= 64:
        raise ValueError(f"memory_gb must be in [0.5, 64], got {memory_gb!r}")
    return t, params, tuple(int(s) for s in seeds), shapes, holdout


def evaluate_source(source: str, task, *, params: Mapping[str, Any] | None = None,
                    seeds: Sequence[int] = (0, 1, 2), shapes=None, holdout_shapes=None,
                    timeout_s: float = 120, memory_gb: float = 3.0) -> Evaluation:
    """Score candidate ``source`` on ``task`` (module docstring: ladder, trust boundary).

    Args:
      source: Python source defining ``kernel(*inputs, interpret, platform, **static,
        **params)``.
      task: "quantized_matmul" | "sparse_decode_attention" (or a :class:`tasks.Task`).
      params: tunable keyword arguments passed to ``kernel`` (JSON values).
      seeds: input seeds per shape (drawn here; never shown to the candidate).
      shapes: seen shapes (default: the task's), instances of the task's shape dataclass.
      holdout_shapes: shapes used only here (default: the task's held-out shapes).
      timeout_s: wall-clock limit of each sandboxed child.
      memory_gb: address-space limit of each sandboxed process.

    Returns:
      An :class:`Evaluation`.
    """
    t, params, seeds, shapes, holdout = _check_args(source, task, params, seeds, shapes,
                                                    holdout_shapes, timeout_s, memory_gb)
    key = hashlib.sha256(json.dumps(
        [source, t.name, params, seeds, [repr(s) for s in shapes], [repr(s) for s in holdout],
         timeout_s, memory_gb, _opt_level()]).encode()).hexdigest()
    if key in _CACHE:
        return _CACHE[key]
    result = _evaluate(source, t, params, seeds, shapes, holdout, t.gpu_shapes,
                       float(timeout_s), float(memory_gb))
    _CACHE[key] = result
    return result


def _opt_level() -> int | None:
    """XLA's backend optimisation level named in this process's ``XLA_FLAGS`` (the last one;
    ``--scale tiny`` sets 0), or None. The sandboxed children get it too (``spec.json``), so
    they compile the candidate's programs as this process compiles its own; the sandbox's
    environment would otherwise drop it. None: XLA's default level there as here."""
    found = _OPT_LEVEL.findall(os.environ.get("XLA_FLAGS", ""))
    return int(found[-1]) if found else None


def _cell(source: str) -> tuple[int, int, int]:
    from jaxpapers.evolve import descriptors
    return tuple(int(v) for v in descriptors.describe(source))


def _result(level, cell, message, *, correct_seen=False, failed=None, speedup=0.0,
            seconds=None) -> Evaluation:
    fitness = 5.0 + speedup if level == 5 else float(level)
    return Evaluation(level=level, correct_seen=correct_seen, failed_shape=failed,
                      fitness=fitness, cell=cell, message=message, speedup=speedup,
                      seconds=dict(seconds or {}),
                      timing="roofline-proxy (H200 model, not measured)" if level == 5
                      else "none")


def _evaluate(source, t, params, seeds, shapes, holdout, cost_shapes, timeout_s,
              memory_gb) -> Evaluation:
    cell = _cell(source)   # of the tokens before a syntax error, as the search files it
    try:
        with _AST_LOCK:
            ast.parse(source)
    except (SyntaxError, ValueError) as e:
        return _result(0, cell, f"syntax error: {e}")
    everything = shapes + holdout
    inputs0 = [tasks_mod.make_inputs(t, s, seeds[0]) for s in everything]
    cost_avals = [tasks_mod.input_avals(t, s) for s in cost_shapes]
    level = _opt_level()
    spec = {"params": params, "xla_backend_optimization_level": level, "shapes": [
        {"name": s.name, "static": t.static_kwargs(s),
         "inputs": [[list(a.shape), str(a.dtype)] for a in ins]}
        for s, ins in zip(everything, inputs0)] + [
        {"name": s.name, "static": t.static_kwargs(s), "cpu": False,
         "inputs": [[list(shp), dt] for shp, dt in avals]}
        for s, avals in zip(cost_shapes, cost_avals)]}
    files = {"candidate.py": source, "spec.json": json.dumps(spec)}
    child = _sandbox_run(_harness.EXPORT, files, timeout_s, memory_gb)
    report = _report(child)
    if report is None or report.get("import"):
        why = (report or {}).get("import") or _child_failure(child)
        return _result(1, cell, f"import failed: {why}")
    exported: dict[tuple[str, int], Any] = {}
    for plat, lvl in (("cuda", 1), ("cpu", 2)):
        for i, (s, ins) in enumerate(zip(everything, inputs0)):
            blob = child.files_bytes.get(f"{plat}_{i}.bin")
            exp, why = _load_blob(blob, plat, ins)
            if exp is None:
                rows = report.get("shapes") or []
                said = rows[i].get(plat) if i < len(rows) and isinstance(rows[i], dict) else None
                msg = f"{plat} export of {s.name} failed: {said or why}"
                if s in holdout and lvl == 2:
                    return _result(4, cell, msg, correct_seen=True, failed=s.name)
                return _result(lvl, cell, msg, failed=s.name)
            exported[(plat, i)] = (exp, blob)
    # run the cpu programs on fresh inputs in a sandboxed child without candidate code
    runs, files, expected = [], {}, []
    for i, s in enumerate(everything):
        files[f"cpu_{i}.bin"] = exported[("cpu", i)][1]
        for seed in seeds:
            ins = tasks_mod.make_inputs(t, s, seed)
            k = len(runs)
            runs.append({"blob": f"cpu_{i}.bin", "inputs": len(ins)})
            for j, a in enumerate(ins):
                files[f"in_{k}_{j}.npy"] = _npy(a)
            expected.append((i, s, seed, ins))
    files["spec.json"] = json.dumps({"runs": runs, "xla_backend_optimization_level": level})
    runner = _sandbox_run(_harness.RUN, files, timeout_s, memory_gb)
    rows = (_report(runner) or {}).get("runs") or [None] * len(runs)
    verdicts = {}
    for k, (i, s, seed, ins) in enumerate(expected):
        out = _load_npy(runner.files_bytes.get(f"out_{k}.npy"))
        if out is None:
            err = rows[k] if k < len(rows) and rows[k] else _child_failure(runner)
            verdicts.setdefault(s.name, (2, f"{s.name} (seed {seed}) failed to run: {err}"))
            continue
        ref = tasks_mod.reference_output(t, s, ins)
        if out.shape != ref.shape or out.dtype != ref.dtype:
            verdicts.setdefault(s.name, (3, f"{s.name}: output {out.shape} {out.dtype}, "
                                            f"expected {ref.shape} {ref.dtype}"))
            continue
        err = float(np.max(np.abs(out.astype(np.float64) - ref)) /
                    max(1.0, float(np.max(np.abs(ref))))) if out.size else 0.0
        if not np.isfinite(err) or err > tasks_mod.tolerance(t, s):
            verdicts.setdefault(s.name, (4, f"{s.name} (seed {seed}): relative error {err:.3g}"
                                            f" > {tasks_mod.tolerance(t, s):.3g}"))
    for s in shapes:
        if s.name in verdicts:
            lvl, msg = verdicts[s.name]
            return _result(lvl, cell, msg, failed=s.name)
    for s in holdout:
        if s.name in verdicts:
            return _result(4, cell, "held-out " + verdicts[s.name][1], correct_seen=True,
                           failed=s.name)
    seconds, ratios = {}, []
    for j, s in enumerate(cost_shapes):
        i = len(everything) + j
        exp, why = _load_blob(child.files_bytes.get(f"cuda_{i}.bin"), "cuda",
                              [np.zeros(shp, dt) for shp, dt in cost_avals[j]])
        try:
            if exp is None:
                raise ValueError(why)
            _, sec = cost.exported_cost(exp)
        except Exception as e:  # noqa: BLE001 - no readable program: no speed term
            return _result(5, cell, f"correct; no cost estimate on {s.name}: {e}",
                           correct_seen=True)
        seconds[s.name] = sec
        ratios.append(reference_seconds(t, s) / sec)
    speedup = float(np.exp(np.mean(np.log(ratios))))
    return _result(5, cell, "ok", correct_seen=True, speedup=speedup, seconds=seconds)


def reference_seconds(task, shape) -> float:
    """Roofline-model seconds of the task's jitted reference on ``shape`` (cuda export; cached)."""
    import jax
    from jax import export
    t = tasks_mod.get_task(task)
    t.check_shape(shape)
    key = (t.name, repr(shape))
    if key not in _REF_SECONDS:
        avals = [jax.ShapeDtypeStruct(shp, dt) for shp, dt in tasks_mod.input_avals(t, shape)]
        fn = jax.jit(lambda *a: tasks_mod.reference_jax(t, shape, a))
        exp = export.export(fn, platforms=("cuda",))(*avals)
        _REF_SECONDS[key] = cost.exported_cost(exp)[1]
    return _REF_SECONDS[key]


def time_exported(blob: bytes, inputs, *, repeats: int = 20) -> float:
    """Median seconds of a serialized program on this process's accelerator (GPU only).

    Untested on this project's CPU machines; compare its output with the reference first.
    """
    import jax
    from jax import export
    if jax.default_backend() != "gpu":
        raise ValueError("time_exported needs a GPU backend")
    from pallas_kernels._common import time_fn
    exp = export.deserialize(bytearray(blob))
    args = [jax.device_put(a) for a in inputs]
    return time_fn(exp.call, [args], repeats=repeats) * 1e-6


# ----------------------------------------------------------------------------- helpers


def _npy(a: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, np.asarray(a), allow_pickle=False)
    return buf.getvalue()


def _load_npy(data: bytes | None) -> np.ndarray | None:
    if not data:
        return None
    try:
        return np.load(io.BytesIO(data), allow_pickle=False)
    except Exception:  # noqa: BLE001 - a malformed file is a failed run
        return None


def _load_blob(blob: bytes | None, platform: str, inputs) -> tuple[Any, str]:
    """Deserialize and check a blob: its platform and input avals must be what we asked."""
    from jax import export
    if not blob:
        return None, "no program written"
    if len(blob) > _MAX_BLOB:
        return None, f"program of {len(blob)} bytes is over the {_MAX_BLOB} byte cap"
    try:
        exp = export.deserialize(bytearray(blob))
    except Exception as e:  # noqa: BLE001 - any malformed blob is a failure of the candidate
        return None, f"unreadable program ({type(e).__name__})"
    if tuple(exp.platforms) != (platform,):
        return None, f"program lowered for {exp.platforms}, not ({platform!r},)"
    want = [(tuple(a.shape), np.dtype(a.dtype)) for a in inputs]
    got = [(tuple(a.shape), np.dtype(a.dtype)) for a in exp.in_avals]
    if want != got or len(exp.out_avals) != 1:
        return None, f"program signature {got} -> {len(exp.out_avals)} outputs, expected {want}"
    return exp, ""


def _report(child) -> dict | None:
    text = child.stdout or ""
    at = text.rfind(_harness.MARK)
    if at < 0:
        return None
    try:
        obj = json.loads(text[at + len(_harness.MARK):].splitlines()[0])
    except (ValueError, IndexError):
        return None
    return obj if isinstance(obj, dict) else None


def _child_failure(child) -> str:
    tail = (child.stderr or "").strip().splitlines()[-3:]
    return f"child {child.status}: " + (" | ".join(tail)[-400:] or child.message or "no output")


def _sandbox_run(program: str, files: Mapping[str, str | bytes], timeout_s: float,
                 memory_gb: float):
    from jaxpapers.core import sandbox
    return sandbox.run_python(program, files=files, timeout_s=timeout_s,
                              memory_mb=int(memory_gb * 1024), site_packages=True,
                              binary_files=True)
