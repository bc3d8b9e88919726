"""One sandbox for untrusted code: Python programs now, SQL engines and tools later via ``run``.

``run_python(source)`` runs a program with the system interpreter (``/usr/bin/python3 -I -S``)
inside bubblewrap (``bwrap``) and returns a frozen ``SandboxResult``; ``run(argv, files=...,
stdin=...)`` is the generic layer underneath, for any program installed on the machine (a SQL
shell, a compiler, a tool), so later runners reuse the same limits. ``run_python(source,
site_packages=True)`` runs it instead with this process's interpreter, its site-packages and the
project, so that it can ``import jax, jaxpapers, pallas_kernels`` (see "Site-packages mode").

What is enforced, per run:

* **identity**: when the caller is root, the sandbox runs as uid/gid 65534 (``nobody``) with no
  supplementary groups (``setpriv --reuid=65534 --regid=65534 --clear-groups``), so it has no
  capabilities and cannot read root's files. When the caller is not root, ``setpriv`` is skipped
  and bubblewrap runs as the caller's own uid: the program can then read whatever that user can
  read outside the hidden folders below (still read-only, still without network).
* **namespaces** (``bwrap --unshare-all --unshare-user --disable-userns``): no network (only a
  loopback of its own; the host's 127.0.0.1 is unreachable), its own pid namespace
  (it sees and signals only its own processes; all of them die with it), ipc, uts (hostname
  ``sandbox``), cgroup; no further user namespaces inside. ``--die-with-parent --new-session``.
* **file system**: the host's ``/`` read-only; a fresh ``/proc`` and a minimal read-only ``/dev``
  (null, zero, random, urandom, tty, pts); private, size-capped tmpfs over ``/tmp`` (64 MiB) and
  over ``/run``, ``/var/tmp``, ``/root``, ``/dev/shm``, the caller's home, the caller's temp dir
  and ``WORK_PARENT`` (1 MiB each), so their contents are hidden and writes there vanish with the
  sandbox. The one writable host folder is a fresh work folder (a temp dir under ``WORK_PARENT``,
  owned by the sandbox uid) mounted at ``/tmp/work``, which is the cwd and ``HOME``; it is deleted
  after the run.
* **environment**: empty (``--clearenv``; the bwrap process itself is started with only
  ``PATH``), then ``PATH=/usr/bin:/bin``, ``HOME=/tmp/work``, ``TMPDIR=/tmp``, ``LANG=C.UTF-8``.
  No file descriptors other than stdin/stdout/stderr are inherited.
* **limits** (``prlimit`` inside the sandbox, as hard limits that it cannot raise): address
  space ``memory_mb`` MiB per process; CPU seconds ``ceil(timeout_s) + 1`` per process, all its
  threads together (SIGXCPU, then SIGKILL a second later; reported as ``"timeout"``);
  ``max_processes`` processes/threads (default 32; counted inside the sandbox's own user
  namespace on Linux >= 5.14); files at most ``max_file_mb`` MiB each (default 16); 256 open
  files; no core dumps.
* **wall time**: the parent kills the whole sandbox after ``timeout_s`` seconds (status
  ``"timeout"``, ``returncode`` None).
* **output**: stdout and stderr are read as they come and kept up to ``output_limit`` bytes each
  (default 64 KiB; the rest is read and dropped, ``truncated`` says so). Small UTF-8 files left
  in the work folder come back in ``files``; with ``binary_files=True`` every regular file also
  comes back as bytes in ``files_bytes`` (at most ``FILES_MAX_COUNT`` files, ``BYTES_MAX_FILE``
  each, ``BYTES_MAX_TOTAL`` in all; ``message`` counts those left out).
* **no fallback**: without a working bubblewrap (not installed, or it cannot create namespaces
  here) the status is ``"unavailable"`` and nothing runs.

Not enforced: total disk use of the work folder (only the per-file size and open-file count are
capped); the memory of all processes together (the address-space cap is per process, and there
is no cgroup); a seccomp filter (the sandbox reaches the whole kernel system-call surface, so a
kernel bug is an escape); reading world-readable host files outside the hidden folders (e.g.
``/etc/passwd``, the repository when world-readable); CPU share (a run may use every core until
its limits stop it). By default the site packages (numpy, jax) are not importable under ``-S``;
the program gets the standard library only.

Site-packages mode (``run_python(..., site_packages=True)``): everything above holds (same
uid 65534 when the caller is root, namespaces, read-only root, hidden folders, limits, kill on
timeout), and in addition:

* **interpreter**: this process's ``sys.executable`` (a venv's ``bin/python`` included) runs
  ``-I -S -B -c <bootstrap> /tmp/work/main.py``. The bootstrap sets ``sys.path`` to this
  process's ``sys.path`` entries that exist and are visible inside (absolute only, in order:
  ``""`` is dropped, and so is e.g. a script's folder under the hidden ``/tmp``), sets
  ``sys.prefix`` / ``sys.exec_prefix`` to this process's (as ``site`` does for a venv),
  processes the ``.pth`` files of the site-packages folders among them (editable installs'
  import hooks), and runs ``main.py`` as ``__main__``. No
  ``PYTHONPATH`` or other host variable is read (``-I``, and the environment is empty anyway).
* **what it can read** (read-only, like the rest of ``/``): the venv (``sys.prefix``), every
  folder on this process's ``sys.path`` (the project root when it is there, site-packages), the
  editable installs' roots (``jaxpapers``, ``pallas_kernels``, ``experiments``: the whole
  repository is readable inside, as it already was when world-readable). Where such a folder
  lies under a hidden folder (the interpreter's real prefix ``sys.base_prefix`` under
  ``/root/.pyenv``), exactly that folder is bound read-only back into the hiding tmpfs, never
  its parent: the rest of ``/root`` stays hidden. A hidden folder itself, or one holding a hidden
  folder (``/tmp``, ``/root``, the caller's home), is never bound. As root, bubblewrap (already
  uid 65534) cannot resolve paths under root's 0700 home, so the binds are staged first: an
  ``unshare --mount`` process (root, for a few milliseconds, before ``setpriv``) bind-mounts
  each source read-only onto an empty mount point in a root-owned folder under ``WORK_PARENT``,
  in its own private mount namespace (the host's mounts never change), and bubblewrap binds
  those mount points. The files are read as uid 65534: all of the interpreter, the venv and the
  project are world-readable here (checked); a file that is not stays unreadable (an import
  fails with ``PermissionError``), nothing is copied or re-permissioned.
* **environment**: the four variables above plus ``SITE_ENV``: ``JAX_PLATFORMS=cpu``;
  ``PJRT_NPROC=1`` and ``XLA_FLAGS=--xla_cpu_multi_thread_eigen=false`` (XLA's CPU client
  otherwise sizes its thread pools by the cores: a jit + a Pallas export measured 14 threads on
  1 core and 18 on 2, ~74 expected on 16 cores; with them 14 and 16, ~44 expected on 16 cores,
  as LLVM still adds ~2 per core; programs also run single-threaded, which suits the CPU-time
  limit that counts all threads); ``OMP_NUM_THREADS`` / ``OPENBLAS_NUM_THREADS`` /
  ``MKL_NUM_THREADS=1``;
  ``MALLOC_ARENA_MAX=2`` (glibc reserves 64 MiB of address space per thread arena: without it
  the same run peaked at 1.5 GiB of address space on 2 cores, with it 0.65 GiB). JAX itself
  then sets ``TF_CPP_MIN_LOG_LEVEL`` and ``TPU_SKIP_MDS_QUERY`` in ``os.environ`` on import.
* **limits**: ``memory_mb`` defaults to ``SITE_MEMORY_MB`` (3072) and ``max_processes`` to
  ``SITE_MAX_PROCESSES`` (128; too few threads make XLA abort with ``pthread_create failed``,
  status ``"error"``, returncode 134). Measured on a busy 2-core host: the bootstrap ~0.05 s
  (``pass``; ~0.02 s by default), ``import jax`` 0.8-2.5 s (median ~1 s), a first small
  ``jax.jit`` call ~0.2 s more; a jit plus a Triton ``cuda`` export and an interpreted ``cpu``
  export of a Pallas kernel peaked at 0.65 GiB of address space (so 768 MiB already fits).

SQL is the exception: ``open_readonly_sql(path, backend="sqlite" | "duckdb")`` (from
``jaxpapers.core._sandbox_sql``, re-exported here) runs untrusted SQL outside bubblewrap, on an
existing database file, in a worker process per open connection (``python -I``, both engines;
closed connections' workers are pooled and reused with a fresh engine connection). It returns
a ``ReadOnlySQL`` whose ``execute(sql)`` gives a frozen ``SQLResult`` and never raises.
Enforced there: one SELECT statement per call (SQLite through an authorizer, ``PRAGMA
query_only`` and a ``mode=ro`` URI; DuckDB through a statement-type check and a locked
read-only configuration without external file access or extensions), so no writes, ATTACH,
VACUUM INTO, PRAGMA changes, extension loading, or (DuckDB) reading other files; a deadline of
``timeout_s`` covering execution, fetching and counting (a worker that has not answered 3 s
after the deadline, e.g. inside one long SQLite function call, is killed and replaced); at most
``max_rows`` rows returned; SQLite values of at most 10 MB and its heap at ``memory_mb`` MiB;
DuckDB's ``memory_limit``; each worker's address space capped at ``memory_mb`` + 128 MiB above
its size at start (so DuckDB's ``repeat('a', 500000000)`` and the like, or a SQLite row of
sixty 9 MB values, fail); and an audit hook in the worker refusing sockets, new processes and
opening files for writing from Python code. Not enforced: an OS sandbox around the workers
(the engines' own file access is kept in check by their setup only), and CPU share; see that
module.

Python functions are the other exception: ``call_function("package.module:qualname", kwargs,
timeout_s=..., memory_mb=..., sys_path=...)`` (from ``jaxpapers.core._sandbox_worker``,
re-exported here) calls one function with JSON kwargs in a pooled ``python -I`` worker built
from the SQL workers' machinery (same pool, hard deadline, parent-death watchdog,
address-space cap and audit hook) and returns a frozen ``FunctionResult`` (``ok``, ``value``,
``error``, ``seconds``); it never raises for what the function does. The target's module is
imported after the audit hook is installed. Enforced there: ``timeout_s`` (an interrupt, then
a kill ``WORKER_GRACE_S`` later; the worker is replaced), ``memory_mb`` (+ 128 MiB) of
address-space growth, JSON in and out (16 MiB each way), and refusals of sockets, new
processes, opening files for writing, file changes, signals to other processes and native
calls through ``ctypes``. Not enforced: reading files (the worker can read whatever this user
can), isolation between calls that share a pooled worker, and anything the Python audit hook
does not see; see that module. DIVE's tools use it through ``call_tool(..., sandboxed=True)``.

>>> r = run_python("print(6 * 7)")
>>> r.status in ("ok", "unavailable")
True
>>> r.stdout if r.status == "ok" else "42\\n"
'42\\n'
>>> run_python("pass", timeout_s=0)
Traceback (most recent call last):
...
ValueError: timeout_s must be a finite number of seconds > 0, got 0
"""

from __future__ import annotations

import dataclasses
import functools
import math
import numbers
import os
import selectors
import shutil
import signal
import stat
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from typing import Literal

from jaxpapers.core import _sandbox_site
from jaxpapers.core._sandbox_site import Site as _Site
from jaxpapers.core._sandbox_sql import ReadOnlySQL, SQLResult, open_readonly_sql
from jaxpapers.core._sandbox_worker import FunctionResult, call_function

__all__ = ["SandboxResult", "run_python", "run", "available", "why_unavailable",
           "open_readonly_sql", "ReadOnlySQL", "SQLResult", "call_function", "FunctionResult"]

# Programs the sandbox is built from (module-level so a test, or a machine with another layout,
# can point them elsewhere). They are looked up at call time.
BWRAP = "/usr/bin/bwrap"
SETPRIV = "/usr/bin/setpriv"
PRLIMIT = "/usr/bin/prlimit"
PYTHON = "/usr/bin/python3"  # the system interpreter: a venv under root's home is unreachable
UNSHARE = "/usr/bin/unshare"  # site-packages mode as root: binds staged in a private mount ns
MOUNT = "/usr/bin/mount"
SH = "/bin/sh"
WORK_PARENT: str | None = None  # where work folders are made; None: tempfile.gettempdir()

SANDBOX_UID = 65534  # nobody / nogroup: used when the caller is root
SANDBOX_WORK = "/tmp/work"  # the work folder as the program sees it (cwd and HOME)
SANDBOX_PATH = "/usr/bin:/bin"
OUTPUT_LIMIT = 64 * 1024  # bytes kept of stdout and of stderr
MAX_PROCESSES = 32
MAX_FILE_MB = 16
MAX_OPEN_FILES = 256
TMP_MB = 64  # the private /tmp
HIDDEN_MB = 1  # each tmpfs that hides a host folder
FILES_MAX_COUNT = 64  # SandboxResult.files: at most this many files ...
FILES_MAX_BYTES = 64 * 1024  # ... each at most this long, UTF-8 text, regular, not linked
BYTES_MAX_FILE = 8 << 20  # SandboxResult.files_bytes (binary_files=True): per file ...
BYTES_MAX_TOTAL = 32 << 20  # ... and all together

# run_python(..., site_packages=True): this process's interpreter, its sys.path, and these
# defaults (used where the caller passes None); see the module docstring.
SITE_MEMORY_MB = 3072  # import jax + a jit / a Pallas lowering need ~1.3-1.8 GiB of address space
SITE_MAX_PROCESSES = 128  # XLA's thread pools grow with the host's cores
SITE_ENV = {
    "JAX_PLATFORMS": "cpu",  # no accelerator devices exist inside
    "PJRT_NPROC": "1",  # XLA's CPU client sizes its thread pools by this (else by the cores)
    "XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false",  # matmuls etc. on the calling thread
    "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
    "MALLOC_ARENA_MAX": "2",  # glibc reserves 64 MiB of address space per extra malloc arena
}

Status = Literal["ok", "error", "timeout", "unavailable"]
_NEVER_HIDE = ("/usr", "/bin", "/sbin", "/lib", "/lib64", "/etc", "/proc", "/dev", "/sys")


@dataclasses.dataclass(frozen=True)
class SandboxResult:
    """What a sandboxed run produced.

    Attributes:
      status: ``"ok"`` (exit status 0), ``"error"`` (any other exit, including being killed by a
        signal or failing to start inside the sandbox), ``"timeout"`` (wall time or CPU time ran
        out) or ``"unavailable"`` (no working bubblewrap; nothing ran).
      returncode: the program's exit status; ``128 + N`` when signal N killed it (as a shell
        reports it); None on a wall-clock timeout or when unavailable.
      stdout, stderr: the first ``output_limit`` bytes of each, decoded as UTF-8 (bad bytes
        replaced).
      wall_s: seconds from start to the end of the sandbox (0.0 when unavailable).
      files: the small UTF-8 text files left in the work folder, ``{relative path: text}``
        (regular files only, never followed links; at most ``FILES_MAX_COUNT`` files of at most
        ``FILES_MAX_BYTES`` bytes; for ``run_python`` this includes ``main.py``).
      truncated: stdout or stderr was longer than ``output_limit``.
      message: why it is unavailable, what limit stopped it, or what was truncated; else "".
      files_bytes: with ``binary_files=True`` only (else empty), every regular, not linked file
        left in the work folder as raw bytes, ``{relative path: bytes}``, text or not (at most
        ``FILES_MAX_COUNT`` files of at most ``BYTES_MAX_FILE`` bytes, ``BYTES_MAX_TOTAL`` in all,
        in path order; ``message`` says how many were left out).
    """

    status: Status
    returncode: int | None
    stdout: str
    stderr: str
    wall_s: float = 0.0
    files: Mapping[str, str] = dataclasses.field(default_factory=dict)
    truncated: bool = False
    message: str = ""
    files_bytes: Mapping[str, bytes] = dataclasses.field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def run_python(source: str, *, timeout_s: float = 5.0, memory_mb: int | None = None,
               files: Mapping[str, str | bytes] | None = None,
               stdin: str | bytes | None = None, site_packages: bool = False,
               max_processes: int | None = None, binary_files: bool = False) -> SandboxResult:
    """Run the Python program ``source`` in the sandbox (see the module docstring for the limits).

    The program is written to ``main.py`` in a fresh work folder. By default it runs as
    ``/usr/bin/python3 -I -S main.py`` (isolated mode: no ``PYTHON*`` variables, no user or site
    packages, the script's folder not on ``sys.path``; the standard library only).

    With ``site_packages=True`` it runs with this process's interpreter (``sys.executable``) as
    ``python -I -S -B -c <bootstrap> main.py``: the bootstrap sets ``sys.path`` to the entries of
    this process's ``sys.path`` that exist (absolute paths only, in order), processes the ``.pth``
    files of its site-packages folders (so editable installs' import hooks work), then runs
    ``/tmp/work/main.py`` as ``__main__``. So ``import jax, jaxpapers, pallas_kernels`` work,
    read-only; the environment gets ``SITE_ENV`` (CPU-only JAX, one-thread BLAS) on top of the
    usual four variables. See "Site-packages mode" in the module docstring.

    Args:
      source: the program text.
      timeout_s: wall-clock limit in seconds (> 0, finite); CPU time per process is capped at
        ``ceil(timeout_s) + 1`` seconds. ``import jax`` alone takes about 1-2 s of it.
      memory_mb: address-space limit per process in MiB (int >= 16; the interpreter itself needs
        about 30 MiB, so very small values make it fail to start, status ``"error"``). None: 512,
        or ``SITE_MEMORY_MB`` (3072) with ``site_packages``.
      files: extra files to put in the work folder first, ``{relative path: text or bytes}``.
      stdin: text or bytes for the program's standard input (empty when None).
      site_packages: run with this process's interpreter, ``sys.path`` and site-packages (see
        above) instead of the system interpreter's standard library.
      max_processes: processes and threads the sandbox may hold at once (int >= 2). None:
        ``MAX_PROCESSES`` (32), or ``SITE_MAX_PROCESSES`` (128) with ``site_packages``.
      binary_files: also return the work folder's files as bytes in ``files_bytes``.

    Returns:
      A ``SandboxResult``; status ``"unavailable"`` (and nothing run) without bubblewrap, or in
      site-packages mode when this interpreter cannot be run in the sandbox (the message says
      why).

    Raises:
      TypeError / ValueError: a bad argument (the message names it).

    >>> r = run_python("import sys; sys.exit(3)")
    >>> (r.status, r.returncode) if r.status != "unavailable" else ("error", 3)
    ('error', 3)
    """
    if not isinstance(source, str):
        raise TypeError(f"source must be a str, got {type(source).__name__}")
    site_packages = _check_flag("site_packages", site_packages)
    files = dict(_check_files(files))
    if "main.py" in files:
        raise ValueError("files must not contain 'main.py': run_python writes the program there")
    files["main.py"] = source
    if memory_mb is None:
        memory_mb = SITE_MEMORY_MB if site_packages else 512
    if max_processes is None:
        max_processes = SITE_MAX_PROCESSES if site_packages else MAX_PROCESSES
    if not site_packages:
        return run([PYTHON, "-I", "-S", "main.py"], files=files, stdin=stdin,
                   timeout_s=timeout_s, memory_mb=memory_mb, max_processes=max_processes,
                   binary_files=binary_files)
    _, files, limits = _checked(None, files, stdin, timeout_s, memory_mb, max_processes,
                                MAX_FILE_MB, OUTPUT_LIMIT, binary_files)
    site = _site_setup()
    if isinstance(site, str):
        return SandboxResult("unavailable", None, "", "", message=site)
    reason = _why_unavailable(site)
    if reason:
        return SandboxResult("unavailable", None, "", "", message=reason)
    return _run_sandboxed(site.argv("main.py", SANDBOX_WORK), files, stdin, *limits, binds=site.binds,
                          env=SITE_ENV)


def run(argv: Sequence[str], *, files: Mapping[str, str | bytes] | None = None,
        stdin: str | bytes | None = None, timeout_s: float = 5.0, memory_mb: int = 512,
        max_processes: int = MAX_PROCESSES, max_file_mb: int = MAX_FILE_MB,
        output_limit: int = OUTPUT_LIMIT, binary_files: bool = False) -> SandboxResult:
    """Run the command ``argv`` in the sandbox, in a fresh work folder holding ``files``.

    The generic layer under ``run_python``, for any program installed on the host (it is looked up
    on ``PATH=/usr/bin:/bin`` inside the sandbox; an absolute path is clearer). Same limits and
    guarantees as described in the module docstring.

    Args:
      argv: the command and its arguments (a non-empty list or tuple of str).
      files: files to create in the work folder before the run, ``{relative path: text or
        bytes}`` (sub-folders are created; no absolute paths, no ``..``).
      stdin: text or bytes for standard input (empty when None).
      timeout_s: wall-clock limit in seconds (> 0, finite).
      memory_mb: address-space limit per process in MiB (int >= 16).
      max_processes: processes and threads the sandbox may hold at once (int >= 2).
      max_file_mb: largest file the program may write, in MiB (int >= 1).
      output_limit: bytes of stdout and of stderr kept (int >= 0).
      binary_files: also return the work folder's files as bytes in ``files_bytes`` (capped at
        ``BYTES_MAX_FILE`` per file and ``BYTES_MAX_TOTAL`` in all).

    Returns:
      A ``SandboxResult``.

    >>> r = run(["/bin/cat", "note.txt"], files={"note.txt": "hello"})
    >>> r.stdout if r.status == "ok" else "hello"
    'hello'
    """
    argv, files, limits = _checked(argv, files, stdin, timeout_s, memory_mb, max_processes,
                                   max_file_mb, output_limit, binary_files)
    reason = why_unavailable()
    if reason:
        return SandboxResult("unavailable", None, "", "", message=reason)
    return _run_sandboxed(argv, files, stdin, *limits)


def available(*, site_packages: bool = False) -> bool:
    """True when bubblewrap is installed and can start a sandbox here (probed once per setup);
    with ``site_packages``, when ``run_python(..., site_packages=True)`` can run."""
    return not why_unavailable(site_packages=site_packages)


_PROBED: set[tuple] = set()  # setups whose probe succeeded; failures are probed again next time


def why_unavailable(*, site_packages: bool = False) -> str:
    """"" when the sandbox works; else one sentence saying why not (for status "unavailable").

    Checks that the programs exist, then runs a tiny Python program in a real sandbox; a success
    is remembered for the current ``BWRAP`` / ``PYTHON`` / ``WORK_PARENT`` / uid. With
    ``site_packages``, the same for this process's interpreter with its ``sys.path`` (the
    bootstrap of ``run_python(..., site_packages=True)``; ``PYTHON`` is then not needed).
    """
    if site_packages:
        site = _site_setup()
        return site if isinstance(site, str) else _why_unavailable(site)
    return _why_unavailable(None)


def _why_unavailable(site: _Site | None) -> str:
    root = os.geteuid() == 0
    needed = [("bubblewrap", BWRAP), ("prlimit (util-linux)", PRLIMIT)]
    if site is None:
        needed.append(("python3", PYTHON))
    if root:
        needed.append(("setpriv (util-linux)", SETPRIV))
    if root and site is not None and site.binds:
        needed += [("unshare (util-linux)", UNSHARE), ("mount (util-linux)", MOUNT), ("sh", SH)]
    for what, path in needed:
        if not (os.path.isfile(path) and os.access(path, os.X_OK)):
            hint = " (Debian: apt-get install bubblewrap)" if what == "bubblewrap" else ""
            return f"sandbox unavailable: {what} not found at {path}{hint}"
    if site is None:
        setup: tuple = (BWRAP, SETPRIV, PRLIMIT, PYTHON, WORK_PARENT, os.geteuid())
        argv, files = [PYTHON, "-I", "-S", "-c", "print(6 * 7)"], {}
        memory_mb, max_processes = 256, MAX_PROCESSES
    else:
        setup = (BWRAP, SETPRIV, PRLIMIT, UNSHARE, MOUNT, SH, site, WORK_PARENT, os.geteuid())
        argv, files = site.argv("probe.py", SANDBOX_WORK), {"probe.py": "print(6 * 7)"}
        memory_mb, max_processes = SITE_MEMORY_MB, SITE_MAX_PROCESSES
    if setup in _PROBED:
        return ""
    probe = _run_sandboxed(argv, files, None, 20.0, memory_mb, max_processes, 1, 4096, False,
                           binds=() if site is None else site.binds,
                           env=None if site is None else SITE_ENV)
    if probe.status == "ok" and probe.stdout.strip() == "42":
        _PROBED.add(setup)
        return ""
    detail = (probe.stderr.strip() or probe.message or f"status {probe.status}")[-500:]
    what = "" if site is None else f" with this interpreter ({site.python})"
    return (f"sandbox unavailable: bubblewrap at {BWRAP} could not start a sandbox{what} here: "
            f"{detail}")


# ----------------------------------------------------------------------------- site packages
# (the interpreter, sys.path and binds are worked out in _sandbox_site.py)

def _site_setup() -> _Site | str:
    """The ``_Site`` for this process now, or why its interpreter cannot be used."""
    covered = _covered_dirs()
    protected = {os.path.realpath(c) for c in _hide_candidates()} | set(covered) | {"/"}
    return _sandbox_site.site_setup(covered, protected)


def _covered_dirs() -> list[str]:
    return _hidden_dirs() + ["/tmp", "/dev/shm"]


# ----------------------------------------------------------------------------- argument checks

def _check_timeout(timeout_s) -> float:
    if not isinstance(timeout_s, numbers.Real) or isinstance(timeout_s, bool):
        raise TypeError(f"timeout_s must be a number of seconds, got {type(timeout_s).__name__} "
                        f"{timeout_s!r}")
    t = float(timeout_s)
    if not (math.isfinite(t) and t > 0):
        raise ValueError(f"timeout_s must be a finite number of seconds > 0, got {timeout_s!r}")
    return t


def _checked(argv, files, stdin, timeout_s, memory_mb, max_processes, max_file_mb, output_limit,
             binary_files) -> tuple[list[str] | None, dict[str, str | bytes], tuple]:
    """Every argument of ``run`` checked: (argv, files, the limits ``_run_sandboxed`` takes).

    ``argv`` None (``run_python``, which builds its own) is passed through unchecked."""
    argv = None if argv is None else _check_argv(argv)
    files = _check_files(files)
    if stdin is not None and not isinstance(stdin, (str, bytes)):
        raise TypeError(f"stdin must be str, bytes or None, got {type(stdin).__name__}")
    limits = (_check_timeout(timeout_s), _check_count("memory_mb", memory_mb, 16),
              _check_count("max_processes", max_processes, 2),
              _check_count("max_file_mb", max_file_mb, 1),
              _check_count("output_limit", output_limit, 0),
              _check_flag("binary_files", binary_files))
    return argv, files, limits


def _check_flag(name: str, value) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, got {type(value).__name__} {value!r}")
    return value


def _check_count(name: str, value, minimum: int) -> int:
    from jaxpapers.core.checks import check_int  # lazily: importing checks imports jax

    return check_int(name, value, minimum=minimum)


def _check_argv(argv) -> list[str]:
    if isinstance(argv, (str, bytes)) or not isinstance(argv, Sequence):
        raise TypeError(f"argv must be a list or tuple of str, got {type(argv).__name__}")
    if not argv:
        raise ValueError("argv must name a command, got an empty sequence")
    for a in argv:
        if not isinstance(a, str):
            raise TypeError(f"argv entries must be str, got {type(a).__name__} {a!r}")
        if "\0" in a:
            raise ValueError(f"argv entries must not contain NUL characters, got {a!r}")
    return list(argv)


def _check_files(files) -> dict[str, str | bytes]:
    if files is None:
        return {}
    if not isinstance(files, Mapping):
        raise TypeError(f"files must be a mapping of relative path to text, got "
                        f"{type(files).__name__}")
    out = {}
    for name, content in files.items():
        if not isinstance(name, str):
            raise TypeError(f"files keys must be str paths, got {type(name).__name__} {name!r}")
        parts = name.split("/")
        if (not name or name.startswith("/") or "\0" in name
                or any(p in ("", ".", "..") for p in parts)):
            raise ValueError(f"files keys must be plain relative paths (no '/', '..' or '.' "
                             f"parts, not absolute), got {name!r}")
        if not isinstance(content, (str, bytes)):
            raise TypeError(f"files[{name!r}] must be str or bytes, got "
                            f"{type(content).__name__}")
        out[name] = content
    return out


# ----------------------------------------------------------------------------- the sandbox

@functools.lru_cache(maxsize=8)
def _bwrap_options(bwrap: str) -> frozenset[str]:
    """Options ``bwrap`` knows among the optional ones (--disable-userns is bwrap >= 0.8)."""
    try:
        text = subprocess.run([bwrap, "--help"], capture_output=True, text=True, timeout=10,
                              env={"PATH": SANDBOX_PATH}).stdout
    except (OSError, subprocess.SubprocessError):
        return frozenset()
    return frozenset(opt for opt in ("--disable-userns", "--size") if opt in text)


def _hide_candidates() -> list[str]:
    return ["/tmp", "/var/tmp", "/run", "/root", os.path.expanduser("~"), tempfile.gettempdir(),
            os.environ.get("TMPDIR") or "/tmp", WORK_PARENT or "/tmp"]


def _hidden_dirs() -> list[str]:
    """Host folders covered by an empty tmpfs: temp dirs, /run, the caller's home, WORK_PARENT."""
    seen: list[str] = []
    for c in sorted({os.path.realpath(c) for c in _hide_candidates()}, key=len):
        if c == "/" or not os.path.isdir(c):
            continue
        if any(c == p or p.startswith(c + "/") for p in _NEVER_HIDE):
            continue  # hiding it would hide the interpreter or the system
        if any(c.startswith(s + "/") for s in seen):
            continue  # already under a hidden folder
        seen.append(c)
    return seen


def _command(argv: list[str], host_work: str, timeout_s: float, memory_mb: int,
             max_processes: int, max_file_mb: int, binds: Sequence[tuple[str, str]] = (),
             env: Mapping[str, str] | None = None) -> list[str]:
    opts = _bwrap_options(BWRAP)
    cmd = [SETPRIV, f"--reuid={SANDBOX_UID}", f"--regid={SANDBOX_UID}", "--clear-groups", "--"] \
        if os.geteuid() == 0 else []
    cmd += [BWRAP, "--unshare-all"]
    if "--disable-userns" in opts:
        cmd += ["--unshare-user", "--disable-userns"]
    cmd += ["--die-with-parent", "--new-session", "--hostname", "sandbox",
            "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    hidden = _hidden_dirs()
    if "/tmp" not in hidden:  # /tmp is missing on the host: bwrap fails, status "unavailable"
        hidden.insert(0, "/tmp")
    for d in hidden + ["/dev/shm"]:
        mb = TMP_MB if d == "/tmp" else HIDDEN_MB
        cmd += (["--size", str(mb << 20)] if "--size" in opts else []) + ["--tmpfs", d]
    for src, dest in binds:  # read-only holes in the hidden folders (site-packages mode)
        cmd += ["--ro-bind", src, dest]
    cmd += ["--remount-ro", "/dev", "--bind", host_work, SANDBOX_WORK, "--chdir", SANDBOX_WORK,
            "--clearenv", "--setenv", "PATH", SANDBOX_PATH, "--setenv", "HOME", SANDBOX_WORK,
            "--setenv", "TMPDIR", "/tmp", "--setenv", "LANG", "C.UTF-8"]
    for name, value in (env or {}).items():
        cmd += ["--setenv", name, value]
    cmd.append("--")
    cpu = math.ceil(timeout_s) + 1
    cmd += [PRLIMIT, f"--as={memory_mb << 20}", f"--cpu={cpu}:{cpu + 1}",
            f"--nproc={max_processes}", f"--fsize={max_file_mb << 20}", "--core=0",
            f"--nofile={MAX_OPEN_FILES}", "--"]
    return cmd + argv


_STAGE_SCRIPT = """\
set -e
n=$1
shift
while [ "$n" -gt 0 ]; do
    {mount} --no-mtab --bind "$1" "$2"
    {mount} --no-mtab -o remount,bind,ro "$2"
    shift 2
    n=$((n - 1))
done
exec "$@"
"""


def _stage_binds(binds: Sequence[tuple[str, str]]) -> tuple[str, list[str], list[tuple[str, str]]]:
    """As root: make the bind sources reachable by the sandbox uid, which bubblewrap runs as.

    Sources under root's 0700 home cannot be resolved by uid 65534, so each is bind-mounted
    (read-only) onto an empty mount point in a fresh root-owned folder under ``WORK_PARENT``,
    inside a private mount namespace made by ``unshare --mount`` (the host's mounts never
    change), which then execs ``setpriv`` and bubblewrap; bubblewrap binds the mount points.

    Returns (stage folder, the command prefix, the binds bubblewrap is given).
    """
    stage = tempfile.mkdtemp(prefix="jaxpapers-sandbox-site-", dir=WORK_PARENT or None)
    try:
        os.chmod(stage, 0o755)
        args: list[str] = []
        staged = []
        for i, (src, dest) in enumerate(binds):
            point = os.path.join(stage, str(i))
            if os.path.isdir(src):
                os.mkdir(point, 0o755)
            else:
                os.close(os.open(point, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
            args += [src, point]
            staged.append((point, dest))
    except BaseException:
        _remove_stage(stage)
        raise
    prefix = [UNSHARE, "--mount", "--propagation", "private", "--", SH, "-c",
              _STAGE_SCRIPT.format(mount=MOUNT), "sh", str(len(binds)), *args]
    return stage, prefix, staged


def _remove_stage(stage: str) -> None:
    """Delete a staging folder without ever recursing: were a bind still mounted on one of its
    mount points (it never is outside the private namespace), rmdir / unlink fail instead of
    deleting the interpreter behind it."""
    try:
        names = os.listdir(stage)
    except OSError:
        return
    for n in names:
        point = os.path.join(stage, n)
        try:
            if os.path.isdir(point) and not os.path.islink(point):
                os.rmdir(point)
            else:
                os.unlink(point)
        except OSError:
            pass
    try:
        os.rmdir(stage)
    except OSError:
        pass


def _make_work_dir(files: Mapping[str, str | bytes]) -> str:
    parent = WORK_PARENT or tempfile.gettempdir()
    work = tempfile.mkdtemp(prefix="jaxpapers-sandbox-", dir=parent)
    root = os.geteuid() == 0
    try:
        for name, content in files.items():
            path = os.path.join(work, *name.split("/"))
            os.makedirs(os.path.dirname(path), exist_ok=True)
            data = content.encode() if isinstance(content, str) else content
            with open(path, "wb") as f:
                f.write(data)
        if root:  # hand the folder and what is in it to the sandbox uid
            for dirpath, dirnames, filenames in os.walk(work):
                for n in [*dirnames, *filenames]:
                    os.chown(os.path.join(dirpath, n), SANDBOX_UID, SANDBOX_UID)
            os.chown(work, SANDBOX_UID, SANDBOX_UID)
    except BaseException:
        _remove(work)
        raise
    return work


def _run_sandboxed(argv, files, stdin, timeout_s, memory_mb, max_processes, max_file_mb,
                   output_limit, binary_files, *, binds=(), env=None) -> SandboxResult:
    work = _make_work_dir(files)
    proc = None
    result_bytes: dict[str, bytes] = {}
    skipped = 0
    stage = None
    try:
        prefix: list[str] = []
        if binds and os.geteuid() == 0:
            stage, prefix, binds = _stage_binds(binds)
        cmd = prefix + _command(argv, work, timeout_s, memory_mb, max_processes, max_file_mb,
                                binds, env)
        with tempfile.TemporaryFile() as stdin_file:
            if stdin:
                stdin_file.write(stdin.encode() if isinstance(stdin, str) else stdin)
                stdin_file.seek(0)
            t0 = time.monotonic()
            # only PATH reaches bwrap: the sandbox's pid 1 is a bwrap process whose original
            # environment would otherwise be readable in /proc/1/environ
            try:
                proc = subprocess.Popen(cmd, stdin=stdin_file, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, cwd="/",
                                        env={"PATH": SANDBOX_PATH}, start_new_session=True)
            except OSError as e:
                return SandboxResult("unavailable", None, "", "",
                                     message=f"sandbox unavailable: cannot start {cmd[0]}: {e}")
        out, err, timed_out = _collect(proc, t0 + timeout_s, output_limit)
        wall_s = time.monotonic() - t0
        returncode = None if timed_out else proc.returncode
        result_files = _read_files(work)
        if binary_files:
            result_bytes, skipped = _read_files_bytes(work)
    finally:
        if proc is not None and proc.returncode is None:
            _kill(proc)
        _remove(work)
        if stage is not None:
            _remove_stage(stage)

    notes = []
    if timed_out:
        status: Status = "timeout"
        notes.append(f"killed after the wall-clock limit of {timeout_s:g} s")
    elif returncode == 128 + signal.SIGXCPU:
        status = "timeout"
        notes.append(f"CPU time limit of {math.ceil(timeout_s) + 1} s per process (SIGXCPU)")
    else:
        status = "ok" if returncode == 0 else "error"
    truncated = len(out) > output_limit or len(err) > output_limit
    for name, data in (("stdout", out), ("stderr", err)):
        if len(data) > output_limit:
            notes.append(f"{name} truncated to its first {output_limit} bytes")
    if skipped:
        notes.append(f"files_bytes left out {skipped} file(s) over its caps (count, size)")
    return SandboxResult(status, returncode, _decode(out[:output_limit]),
                         _decode(err[:output_limit]), wall_s=wall_s, files=result_files,
                         truncated=truncated, message="; ".join(notes), files_bytes=result_bytes)


def _collect(proc: subprocess.Popen, deadline: float, limit: int) -> tuple[bytes, bytes, bool]:
    """Read stdout/stderr until both close or the deadline passes; keep ``limit + 1`` bytes each.

    Returns (stdout, stderr, timed_out); the caller cuts each to ``limit`` (one byte more is kept
    to know that something was cut). On the deadline the sandbox is killed.
    """
    out_fd, err_fd = proc.stdout.fileno(), proc.stderr.fileno()
    bufs = {out_fd: bytearray(), err_fd: bytearray()}
    timed_out = False
    with selectors.DefaultSelector() as sel:
        for fd in bufs:
            sel.register(fd, selectors.EVENT_READ)
        while sel.get_map():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                timed_out = True
                break
            for key, _ in sel.select(remaining):
                chunk = os.read(key.fd, 65536)
                if not chunk:
                    sel.unregister(key.fd)
                    continue
                buf = bufs[key.fd]
                if len(buf) <= limit:
                    buf += chunk[:limit + 1 - len(buf)]
    if not timed_out:
        try:  # both pipes closed: the sandbox is ending (a little grace for its exit status)
            proc.wait(timeout=max(0.2, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            timed_out = True
    if timed_out:
        _kill(proc)
    proc.stdout.close()
    proc.stderr.close()
    return bytes(bufs[out_fd]), bytes(bufs[err_fd]), timed_out


def _kill(proc: subprocess.Popen) -> None:
    """SIGKILL the outer bwrap's process group; --die-with-parent and the pid namespace take
    every process inside down with it."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:  # pragma: no cover - a process that survives SIGKILL
        pass


def _decode(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


def _regular_files(work: str):
    """Yield ``(relative path, open fd, stat)`` of each regular, not linked file in ``work``
    (sorted; links and special files are never opened); the fd is closed after the caller's
    turn."""
    for dirpath, dirnames, filenames in os.walk(work):  # does not follow links to folders
        dirnames.sort()
        for n in sorted(filenames):
            path = os.path.join(dirpath, n)
            try:
                fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
            except OSError:
                continue  # a symlink (ELOOP), or unreadable
            try:
                st = os.fstat(fd)
                if stat.S_ISREG(st.st_mode) and st.st_nlink == 1:
                    yield os.path.relpath(path, work).replace(os.sep, "/"), fd, st
            finally:
                os.close(fd)


def _read_files(work: str) -> dict[str, str]:
    """Small UTF-8 regular files in ``work``; links and special files are never opened."""
    found: dict[str, str] = {}
    for rel, fd, st in _regular_files(work):
        if len(found) >= FILES_MAX_COUNT:
            break
        if st.st_size > FILES_MAX_BYTES:
            continue
        try:
            found[rel] = os.read(fd, FILES_MAX_BYTES + 1).decode("utf-8")
        except UnicodeDecodeError:
            continue
    return found


def _read_files_bytes(work: str) -> tuple[dict[str, bytes], int]:
    """Regular, not linked files in ``work`` as bytes, within the caps; and how many were not."""
    found: dict[str, bytes] = {}
    total = skipped = 0
    for rel, fd, st in _regular_files(work):
        if (len(found) >= FILES_MAX_COUNT or st.st_size > BYTES_MAX_FILE
                or total + st.st_size > BYTES_MAX_TOTAL):
            skipped += 1
            continue
        chunks, size = [], 0
        while size <= st.st_size:  # never more than its size at fstat (+1 to see growth)
            chunk = os.read(fd, st.st_size + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > st.st_size:  # still being written (a surviving writer): not returned
            skipped += 1
            continue
        found[rel] = b"".join(chunks)
        total += size
    return found, skipped


def _remove(work: str) -> None:
    """Delete the work folder; retried briefly, since killed processes may still be exiting."""
    for _ in range(50):
        if not os.path.lexists(work):
            return
        if os.geteuid() != 0:
            _make_removable(work)
        try:
            shutil.rmtree(work)
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.02)
    shutil.rmtree(work, ignore_errors=True)


def _make_removable(work: str) -> None:
    """Without root, a program may leave folders without write or search permission: fix them
    (never through a symlink, which could point outside)."""
    try:
        os.chmod(work, 0o700)
    except OSError:
        return
    for dirpath, dirnames, _ in os.walk(work):
        for d in dirnames:
            p = os.path.join(dirpath, d)
            if not os.path.islink(p):
                try:
                    os.chmod(p, 0o700)
                except OSError:
                    pass
