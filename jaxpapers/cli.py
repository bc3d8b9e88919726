"""The ``jaxpapers`` command: list papers, reproduce experiments, benchmark kernels, launch.

Exit codes: 0 success; 1 a reproduction or benchmark failed while running; 2 bad arguments
(unknown id, bad scale, unwritable output folder, paper not implemented), always with a one-line
message and no traceback. ``launch`` exits 1 when a process fails and 124 when the processes
run past ``--timeout``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import pathlib
import sys
import tempfile
import time
import traceback

from jaxpapers.core import registry

__all__ = ["main"]


# --jobs auto: tiny runs are compile-bound and single-threaded for most of their time, so one
# paper per core; larger scales use every core within one paper and run one after another.
_AUTO_JOBS_MAX = 4
# XLA flag --scale tiny adds when the user's XLA_FLAGS do not set it: tiny runs are compilation
# (numbers meaningless), and XLA:CPU's backend optimisation level 0 compiles faster (measured
# 2026-12-02, `reproduce all --scale tiny --jobs 2` on 2 cores: 350 s -> 266 s)
TINY_XLA_FLAG = "--xla_backend_optimization_level=0"


class _UsageError(Exception):
    """A bad command line: reported on one line, exit code 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit 2 (argparse prints usage + message)
        raise _UsageError(message)


def _build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="jaxpapers",
        description="JAX implementations and reproductions of ICML 2026 papers.",
        epilog="Examples:\n  jaxpapers list\n  jaxpapers reproduce layer_balancing --scale small "
               "--out results\n  jaxpapers reproduce all --scale small\n  jaxpapers bench "
               "quantized_matmul",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", metavar="{list,reproduce,bench,launch}",
                           parser_class=_Parser)
    lp = sub.add_parser("list", help="list every paper, its module, experiment and status")
    fmt = lp.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true", help="print the registry as JSON")
    fmt.add_argument("--markdown", action="store_true",
                     help="print the status table used in README.md")
    rp = sub.add_parser(
        "reproduce", help="run paper experiments and write reports",
        description="Run experiments and write DIR/<id>/{report.md,metrics.json,config.json,*.png}."
                    " 'all' means every paper whose status is 'implemented'; papers 'in progress'"
                    " run when named.")
    rp.add_argument("ids", nargs="+", metavar="ID", help="paper ids (see 'jaxpapers list') or 'all'")
    rp.add_argument("--scale", default="small",
                    help="tiny (seconds: the whole pipeline, numbers meaningless), small (minutes "
                         "on a CPU, default) or full (the paper's settings; meant for a GPU/TPU); "
                         "some papers accept extra named configs (their README lists them)")
    rp.add_argument("--out", default="results", metavar="DIR", help="output folder (default: results)")
    rp.add_argument("--seed", default=0, type=int, metavar="N", help="integer seed (default: 0)")
    rp.add_argument("--jobs", default="auto", metavar="N",
                    help="papers run at once, in that many worker processes, each pinned to "
                         "its share of the cores; 1: one after another in this process; auto "
                         f"(default): one per usable CPU core, at most {_AUTO_JOBS_MAX}, for "
                         "--scale tiny, else 1")
    bp = sub.add_parser("bench", help="time a Pallas kernel against its jnp reference")
    bp.add_argument("kernel", help="kernel name (see 'jaxpapers bench --list')", nargs="?")
    bp.add_argument("--list", action="store_true", help="list the kernels that can be benchmarked")
    la = sub.add_parser(
        "launch", help="run N local processes of a command on JAX's distributed runtime",
        description="Start N processes of COMMAND on this machine with JAXPAPERS_COORDINATOR, "
                    "JAXPAPERS_NUM_PROCESSES and JAXPAPERS_PROCESS_ID set (read by "
                    "jaxpapers.core.distributed.initialize), prefix each output line with the "
                    "process id, and stop all of them when one fails or --timeout passes. On a "
                    "cluster, start one process per host with the scheduler instead.",
        epilog="Example: jaxpapers launch -n 2 -- python -m jaxpapers.lm --steps 200")
    la.add_argument("-n", "--num-processes", dest="num_processes", required=True, metavar="N",
                    help="number of processes (>= 1)")
    la.add_argument("--port", default=None, metavar="P",
                    help="coordinator port on 127.0.0.1 (default: a free one)")
    la.add_argument("--timeout", default=None, metavar="S",
                    help="stop every process and exit 124 after S seconds (default: no limit)")
    la.add_argument("program", nargs=argparse.REMAINDER, metavar="-- COMMAND ...",
                    help="the program to run in every process, after '--'")
    return p


def _cmd_list(args) -> int:
    papers = [registry.with_facts(p) for p in registry.PAPERS]
    if args.json:
        print(json.dumps([p.as_dict() for p in papers], indent=2))
        return 0
    if args.markdown:
        print(markdown_status_table())
        return 0
    from jaxpapers.core.report import console_table

    short = lambda t: t if len(t) <= 64 else t[:61] + "..."  # full titles: --json / --markdown
    rows = [(p.id, p.status.value, p.capability, short(p.title)) for p in papers]
    print(console_table(rows, ("id", "status", "module", "title")))
    done = sum(p.status is registry.Status.IMPLEMENTED for p in papers)
    wip = sum(p.status is registry.Status.IN_PROGRESS for p in papers)
    print(f"\n{done} of {len(papers)} papers implemented, {wip} in progress "
          "(runnable by id; their issues are open).")
    return 0


def markdown_status_table() -> str:
    """The README's paper table, generated from the registry (a test keeps README in sync)."""
    lines = ["| id | paper | module | experiment | status |", "|---|---|---|---|---|"]
    for p in map(registry.with_facts, registry.PAPERS):
        exp = f"`{p.experiment.replace('.', '/')}/`" if p.reproducible else "-"
        lines.append(f"| `{p.id}` | {p.title} | `{p.capability}` | {exp} | {p.status.value} |")
    return "\n".join(lines)


def _check_writable(out: pathlib.Path) -> None:
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=out, prefix=".jaxpapers-write-test"):
            pass
    except OSError as e:
        raise _UsageError(f"output folder {str(out)!r} is not writable: {e.strerror or e}") from None


def _resolve_ids(ids: list[str]) -> list[str]:
    if "all" in ids:
        if len(ids) > 1:
            raise _UsageError("'all' cannot be combined with other ids")
        return [p.id for p in registry.PAPERS if p.status is registry.Status.IMPLEMENTED]
    out = []
    for pid in ids:
        try:
            paper = registry.get(pid)
        except registry.UnknownPaperError as e:
            raise _UsageError(str(e)) from None
        if not paper.reproducible:
            raise _UsageError(f"paper {pid!r} is {paper.status.value}: no reproduction to run yet "
                              f"(see 'jaxpapers list')")
        if pid not in out:
            out.append(pid)
    return out


def _config_module(pid: str):
    """``experiments.<pid>.config``, or None where it cannot be imported (the run reports why)."""
    import importlib

    try:
        return importlib.import_module(f"{registry.get(pid).experiment}.config")
    except ModuleNotFoundError:
        return None


def _check_extra_scale(pids: list[str], scale: str) -> None:
    """A scale outside tiny/small/full must be an ``EXTRA_SCALES`` entry of every named paper."""
    from jaxpapers.core.reproduce import SCALES

    for pid in pids:
        extra = tuple(getattr(_config_module(pid), "EXTRA_SCALES", ()))
        if scale not in extra:
            raise _UsageError(f"--scale must be one of {', '.join(SCALES + extra)} for {pid}, "
                              f"got {scale!r}")


def _reproduce_one(pid: str, scale: str, out: str, seed: int) -> dict:
    """One paper's reproduction; never raises (a worker process's task under ``--jobs``)."""
    from jaxpapers.core.reproduce import reproduce

    t0 = time.perf_counter()
    try:
        res = reproduce(pid, scale=scale, out_dir=pathlib.Path(out), seed=seed)
    except Exception as e:  # reported, and the other papers go on
        return {"pid": pid, "ok": False, "seconds": time.perf_counter() - t0,
                "error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()}
    return {"pid": pid, "ok": True, "seconds": res.wall_time_s, "claims": res.claims,
            "out_dir": str(res.out_dir)}


def _reproduce_in_worker(pid: str, scale: str, out: str, seed: int) -> dict:
    """:func:`_reproduce_one` in a process that goes on to other papers (this one under
    ``--jobs 1``, or a ``--jobs`` worker)."""
    try:
        return _reproduce_one(pid, scale, out, seed)
    finally:
        import jax

        # drop the finished paper's compiled programs, or their memory mappings (about three
        # per program) pile up towards the kernel's per-process limit (vm.max_map_count,
        # 65,530 by default)
        jax.clear_caches()


def _jobs(text: str, scale: str, n_papers: int) -> int:
    """``--jobs``: a positive int, or ``auto`` (one per usable core, at most _AUTO_JOBS_MAX, for
    tiny; else 1)."""
    if text != "auto":
        return _positive(text, "--jobs")
    if scale != "tiny" or n_papers == 1:
        return 1
    return max(1, min(_usable_cores(), _AUTO_JOBS_MAX, n_papers))


def _usable_cores() -> int:
    if hasattr(os, "sched_getaffinity"):  # not on macOS
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def _tiny_xla_flags() -> None:
    """Add :data:`TINY_XLA_FLAG` to ``XLA_FLAGS`` unless the user chose an optimisation level.

    Must run before jax creates its backends (XLA reads the flags once); spawned ``--jobs``
    workers inherit the environment. ``config.json`` of every report records ``XLA_FLAGS``.
    """
    flags = os.environ.get("XLA_FLAGS", "")
    if "xla_backend_optimization_level" in flags:
        return
    if "jax" in sys.modules:
        from jax._src import xla_bridge

        if xla_bridge.backends_are_initialized():  # too late to change (an in-process caller)
            return
    os.environ["XLA_FLAGS"] = f"{flags} {TINY_XLA_FLAG}".strip()


def _cost_order(pids: list[str], scale: str) -> list[str]:
    """``pids`` with the longest expected runs first (``--jobs`` > 1: a long paper started last
    would run alone at the end). Uses each experiment config's ``TINY_SECONDS`` (a measured
    hint, only for this ordering); a paper without one may be long, so it goes first."""
    if scale != "tiny":
        return list(pids)
    cost = {pid: float(getattr(_config_module(pid), "TINY_SECONDS", math.inf)) for pid in pids}
    return sorted(pids, key=lambda p: -cost[p])  # stable: ties keep the registry order


_WORKER_ENV = ("XLA_PYTHON_CLIENT_PREALLOCATE", "OMP_NUM_THREADS")


def _worker_environment(jobs: int) -> dict[str, str]:
    """The :data:`_WORKER_ENV` settings of ``jobs`` > 1 worker processes; a value the user set
    wins."""
    want = {
        # several processes on one accelerator: each takes memory as it needs it instead of
        # preallocating most of it (jax's default)
        "XLA_PYTHON_CLIENT_PREALLOCATE": "false",
        # the workers share the cores: OpenMP / OpenBLAS pools sized for the whole machine in
        # every worker spin against each other (sklearn's HistGradientBoosting in vtbench's tiny
        # run, 2026-12-03: 0.6 s alone, 6.9 s beside another worker on 2 cores). A BLAS-threaded
        # fit that stops at a tolerance may land elsewhere (qsched's alignment scorer: sklearn's
        # LogisticRegression, <= 1.3e-3 relative; see experiments/qsched/README.md)
        "OMP_NUM_THREADS": str(max(1, _usable_cores() // jobs)),
    }
    return {k: os.environ.get(k, v) for k, v in want.items()}


def _core_groups(jobs: int) -> list[tuple[int, ...]] | None:
    """The usable cores dealt into ``min(jobs, cores)`` disjoint groups, one per ``--jobs``
    worker (None where the platform cannot pin a process, e.g. macOS)."""
    if not hasattr(os, "sched_setaffinity"):
        return None
    cores = sorted(os.sched_getaffinity(0))
    n = min(jobs, len(cores))
    return [tuple(cores[i::n]) for i in range(n)]


def _start_worker(counter, groups: list[tuple[int, ...]] | None) -> None:
    """``--jobs`` worker initialiser: pin this worker to the next group of cores.

    Measured 2026-12-03 on 2 cores (`reproduce all --scale tiny`): unpinned workers each start
    XLA's and the experiments' thread pools for the whole machine and spin against each other
    (182-221 s, 320-390 s of CPU, run to run); one core each, 155 s and 278 s of CPU. XLA sizes
    its pool from the affinity mask, so a pinned worker computes like a machine of that many
    cores (the few thread-dependent metrics are listed in tests/core/test_tiny_runs.py)."""
    with counter.get_lock():
        i = counter.value
        counter.value += 1
    if groups:
        try:
            os.sched_setaffinity(0, groups[i % len(groups)])
        except OSError:  # a sandbox that forbids it: run unpinned (only slower)
            pass


def _run_papers(pids: list[str], args, jobs: int):
    """Yields each paper's :func:`_reproduce_one` result as it finishes."""
    if jobs == 1 or len(pids) == 1:
        for pid in pids:
            yield _reproduce_in_worker(pid, args.scale, args.out, args.seed)
        return
    import concurrent.futures
    import multiprocessing

    workers = min(jobs, len(pids))
    os.environ.update(_worker_environment(workers))  # inherited by the spawned workers
    ctx = multiprocessing.get_context("spawn")
    # spawned workers, each running papers one after another like the ``--jobs 1`` loop above
    # (jax, matplotlib and the core imported once per worker, not once per paper: about 1-2 s
    # of a tiny run each), dropping each paper's compiled programs when it is done
    with concurrent.futures.ProcessPoolExecutor(
            max_workers=workers, mp_context=ctx, initializer=_start_worker,
            initargs=(ctx.Value("i", 0), _core_groups(workers))) as ex:
        futures = [ex.submit(_reproduce_in_worker, pid, args.scale, args.out, args.seed)
                   for pid in _cost_order(pids, args.scale)]
        for f in concurrent.futures.as_completed(futures):
            yield f.result()


def _cmd_reproduce(args) -> int:
    from jaxpapers.core.reproduce import SCALES

    pids = _resolve_ids(args.ids)
    if not pids:
        raise _UsageError("no implemented papers to reproduce")
    if args.scale not in SCALES:
        _check_extra_scale(pids, args.scale)
    jobs = _jobs(args.jobs, args.scale, len(pids))
    out = pathlib.Path(args.out)
    _check_writable(out)
    # the settings below are for this command's runs only: an in-process caller (a test, a
    # notebook) gets its environment back, so later subprocesses of its own do not inherit them
    saved = {k: os.environ.get(k) for k in ("XLA_FLAGS", *_WORKER_ENV)}
    try:
        if args.scale == "tiny":
            _tiny_xla_flags()
        return _reproduce_and_report(pids, args, jobs)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _reproduce_and_report(pids: list[str], args, jobs: int) -> int:
    from jaxpapers.core.report import claims_table, console_table
    from tqdm.auto import tqdm

    rows, failed = {}, 0
    bar = tqdm(total=len(pids), desc="papers", unit="paper", disable=None)
    for r in _run_papers(pids, args, jobs):
        pid = r["pid"]
        bar.update(1)
        if not r["ok"]:  # report and go on with the next paper
            failed += 1
            tqdm.write(f"[{pid}] FAILED after {r['seconds']:.1f} s: {r['error']}")
            if os.environ.get("JAXPAPERS_DEBUG"):
                tqdm.write(r["traceback"])
            rows[pid] = (pid, "failed", f"{r['seconds']:.1f}", "-", "-")
            continue
        tqdm.write(f"\n== {pid} ({args.scale}, seed {args.seed}): {r['seconds']:.1f} s ==")
        tqdm.write(claims_table(r["claims"]))
        tqdm.write(f"report: {pathlib.Path(r['out_dir']) / 'report.md'}")
        n_rep = sum(c["verdict"] == "reproduced" for c in r["claims"])
        rows[pid] = (pid, "ok", f"{r['seconds']:.1f}", f"{n_rep}/{len(r['claims'])}",
                     r["out_dir"])
    bar.close()
    print("\nSummary")
    print(console_table([rows[p] for p in pids],
                        ("paper", "run", "seconds", "claims reproduced", "output")))
    return 1 if failed else 0


def _cmd_bench(args) -> int:
    import pallas_kernels

    available = pallas_kernels.benchmarks()
    if args.list or not args.kernel:
        print("\n".join(available) if available else "no kernels yet")
        return 0
    if args.kernel not in available:
        raise _UsageError(f"unknown kernel {args.kernel!r}; available: "
                          f"{', '.join(available) or 'none yet'}")
    return int(pallas_kernels.run_benchmark(args.kernel) or 0)


def _positive(text: str, flag: str, kind=int, *, maximum=None):
    """``kind(text)`` if it is > 0 (and <= maximum), else a one-line usage error naming ``flag``."""
    try:
        value = kind(text)
    except (TypeError, ValueError):
        value = None
    if value is None or not value > 0 or (maximum and value > maximum):  # NaN fails "> 0"
        bound = f" in 1..{maximum}" if maximum else " > 0"
        raise _UsageError(f"{flag} must be a{'n integer' if kind is int else ' number'}{bound}, "
                          f"got {text!r}")
    return value


def _free_port(host: str) -> int:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _check_port_free(host: str, port: int) -> None:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError as e:
            raise _UsageError(f"--port {port} is in use on {host} ({e.strerror or e}); pick "
                              "another or leave --port out for a free one") from None


def _stop(procs, grace_s: float = 3.0) -> None:
    """SIGTERM each process group still running, then SIGKILL after ``grace_s`` seconds.

    (jax's runtime may catch SIGTERM as a preemption notice, so SIGKILL is the sure stop.)
    """
    import signal

    alive = [p for p in procs if p.poll() is None]
    for p in alive:
        try:
            os.killpg(p.pid, signal.SIGTERM)
        except (ProcessLookupError, PermissionError):
            pass
    deadline = time.monotonic() + grace_s
    for p in alive:
        try:
            p.wait(timeout=max(0.0, deadline - time.monotonic()))
        except Exception:  # noqa: BLE001 - subprocess.TimeoutExpired
            pass
    for p in alive:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            p.wait()


def _cmd_launch(args) -> int:
    import subprocess
    import threading

    from jaxpapers.core.distributed import COORDINATOR_ENV, NUM_PROCESSES_ENV, PROCESS_ID_ENV

    n = _positive(args.num_processes, "-n")
    timeout = None if args.timeout is None else _positive(args.timeout, "--timeout", float)
    command = list(args.program)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise _UsageError("no command to launch: put it after '--', e.g. "
                          "jaxpapers launch -n 2 -- python train.py")
    have = os.environ.get(NUM_PROCESSES_ENV)
    if have is not None and have.strip() != str(n):  # e.g. a launch inside a launched process
        raise _UsageError(f"{NUM_PROCESSES_ENV}={have!r} in the environment does not match "
                          f"-n {n}; unset it (launch sets it for each process)")
    host = "127.0.0.1"
    if args.port is None:
        port = _free_port(host)
    else:
        port = _positive(args.port, "--port", maximum=65535)
        _check_port_free(host, port)
    lock = threading.Lock()

    def pump(stream, out, rank):
        for raw in iter(stream.readline, b""):
            line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
            with lock:
                out.write(f"[{rank}] {line}\n")
                out.flush()
        stream.close()

    procs, threads = [], []
    started = time.monotonic()
    try:
        for rank in range(n):
            env = {**os.environ, COORDINATOR_ENV: f"{host}:{port}", NUM_PROCESSES_ENV: str(n),
                   PROCESS_ID_ENV: str(rank), "PYTHONUNBUFFERED": "1"}
            try:
                p = subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     start_new_session=True)  # own group: stop its children too
            except OSError as e:
                _stop(procs)
                raise _UsageError(f"cannot start {command[0]!r}: {e.strerror or e}") from None
            procs.append(p)
            for stream, out in ((p.stdout, sys.stdout), (p.stderr, sys.stderr)):
                t = threading.Thread(target=pump, args=(stream, out, rank), daemon=True)
                t.start()
                threads.append(t)
        exits: list[tuple[int, int]] = []  # (rank, exit code) in the order the processes end

        def watch(p, rank):
            rc = p.wait()
            with lock:
                exits.append((rank, rc))

        for rank, p in enumerate(procs):
            threading.Thread(target=watch, args=(p, rank), daemon=True).start()
        failed, code = None, 0
        while True:
            with lock:
                bad = [(r, c) for r, c in exits if c != 0]
                done = len(exits) == n
            if bad:
                # peers that fail with it (a collective broken by its exit) end within moments;
                # wait briefly so that the message names them all, in the order they ended
                time.sleep(0.3)
                with lock:
                    failed, code = [(r, c) for r, c in exits if c != 0], 1
                break
            if done:
                break
            if timeout is not None and time.monotonic() - started > timeout:
                code = 124
                break
            time.sleep(0.05)
        running = sum(p.poll() is None for p in procs)
        _stop(procs)
    except KeyboardInterrupt:
        _stop(procs)
        raise
    for t in threads:
        t.join(timeout=5)
    if failed is not None:
        what = ", ".join(f"process {rank} " + (f"was killed by signal {-rc}" if rc < 0 else
                                               f"exited with code {rc}") for rank, rc in failed)
        print(f"jaxpapers: launch: {what}; stopped {running} other process(es)", file=sys.stderr)
    elif code == 124:
        print(f"jaxpapers: launch: timed out after {timeout:g} s; stopped {running} "
              "process(es)", file=sys.stderr)
    return code


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``jaxpapers`` console script; returns the exit code."""
    parser = _build_parser()
    try:
        args = parser.parse_args(argv)
        if args.command is None:
            parser.print_help()
            return 2
        return {"list": _cmd_list, "reproduce": _cmd_reproduce, "bench": _cmd_bench,
                "launch": _cmd_launch}[args.command](args)
    except _UsageError as e:
        print(f"jaxpapers: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("jaxpapers: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # e.g. `jaxpapers list | head`: the reader left; stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
