"""Python function calls for untrusted (or buggy) code, run in a capped, pooled worker process.

``call_function("package.module:qualname", kwargs)`` runs one function in a worker process and
returns a frozen ``FunctionResult``: ``ok``, ``value`` (the function's return value as JSON),
``error`` and ``seconds``. It never raises for anything the function does (an exception, a
refused action, running out of memory or time, killing its worker): that is a result whose
``error`` says why. It raises ``ValueError`` for a bad argument (a target that is not
``module:qualname``, kwargs that are not a dict of JSON values, ``timeout_s <= 0``, ``memory_mb <
16``). Re-exported by ``jaxpapers.core.sandbox``.

**The worker** is the SQL worker's machinery (``jaxpapers.core._sandbox_sql``), reused: the same
``_Worker`` (started as ``python -I -c <program>`` with only ``PATH`` in its environment, ``/``
as its folder, in a session of its own; JSON lines over pipes; a hard deadline; kill, reap and
"last words"), the same pool of idle workers (``_POOL``: LRU, bounded, fork-safe, emptied by
``close_idle_workers()`` and at exit), and, inside the worker, the same ``_Watchdog`` (parent
death; here it also interrupts a call at its deadline), ``_cap_address_space`` and
``_audit_hook``. Only the worker's request loop and its extra refusals are new here; its
program is ``function_worker_source()``. In order, the worker: points fds 0 and 1 at
``/dev/null`` (the protocol keeps private copies), stops writing ``.pyc`` files, puts the
caller's ``sys_path`` (by default this process's ``sys.path``) in front of its own, starts the
watchdog, caps its address space (``RLIMIT_AS``) at its size then plus ``memory_mb +
WORKER_MARGIN_MB`` MiB, replaces a few unaudited functions by refusing stubs (below), installs
the audit hook, and only then answers calls. A call imports the target's module (so code run
at import is under the hook and the cap too), looks up the qualname, calls it with the
JSON-decoded kwargs and sends back the JSON-encoded value; importing, calling and encoding all
count against ``timeout_s``. Modules stay imported in the worker, so later calls of the same
module cost only the call and a JSON round trip.

What is enforced, per call:

* **time**: at ``timeout_s`` the watchdog sends SIGINT to the worker's main thread, whose
  handler raises an exception (a ``BaseException``, not caught by ``except Exception``) in the
  function; the result is ``"timeout: ..."`` and the worker is replaced. A function that
  ignores it (it catches ``BaseException``, is stuck in one long C call, or changed the SIGINT
  handler) gets no reply sent: ``WORKER_GRACE_S`` later this process kills the worker
  (``"timeout: ..."`` too).
* **memory**: the worker's address space may grow by ``memory_mb + WORKER_MARGIN_MB`` MiB after
  its start (imports included); an allocation beyond fails, ``"out of memory: ..."``, and the
  worker stays usable. A worker whose address space has grown by more than ``POOL_MAX_GROWTH``
  of that room is not pooled again.
* **refused** (the audit hook, ``"refused: <event> (...)"``): sockets, new processes
  (``subprocess``, ``os.system``, ``os.exec*``, ``os.posix_spawn``, ``os.fork``), opening any
  file for writing, Python-level file changes (``os.remove``, ``os.rename``, ``os.mkdir``,
  ``os.chmod`` ...), SQLite connections (SQLite writes files below Python), signals to other
  processes (``os.kill``, ``os.killpg``: the caller cannot be killed that way), changing
  resource limits, importing ``readline`` (it writes history files below Python), and native
  code through ``ctypes``: importing it works (numpy, scipy and jax do), but loading a
  library, looking up a symbol, calling a foreign function and reading or writing memory at
  an address (``from_address``, ``from_buffer``, ``string_at``, ``PyObj_FromPtr``) are refused.
  A refused import raises ``ImportError``, so code that imports something optionally carries
  on without it. Replaced by stubs that raise a refused event: ``os.mkfifo``, ``os.mknod``
  (they create files without an audit event), ``os.pidfd_open`` (signals without ``os.kill``)
  and ``_posixsubprocess.fork_exec`` (the process start under ``subprocess``); importing
  ``posix`` or ``_posixsubprocess`` afresh is refused. A refusal the function catches is
  still a refusal (nothing happened) and its result stands; an error is ``"refused: ..."``
  when the exception is the refusal or was raised while handling it.
* **imports** under the hook and the cap: the standard library, networkx, numpy and scipy
  import with the defaults (none writes a file or starts a process at import; numpy's import
  grows the address space by about 130 MiB); jax imports too but needs ``memory_mb=512``
  (about 430 MiB), else ``"ImportError: ... failed to map segment ..."``. A worker grown by
  imports past ``POOL_MAX_GROWTH`` of its room is not pooled: give such targets more
  ``memory_mb``.
* **the reply**: JSON of at most ``MAX_RESULT_BYTES`` (else ``"result too large: ..."``); a
  value that is not JSON (a set, NaN, an object) is ``"invalid result: ..."``; kwargs of at
  most ``MAX_REQUEST_BYTES`` of JSON. Each request carries a random id and the reply must
  echo it: a line the function writes itself to the protocol's pipe is skipped, and a
  garbled one ends the worker (``"worker died: ..."``), so no call can be answered with
  another call's reply.
* **death**: a worker that died (``os._exit``, a signal, a crash) is ``"worker died: ..."``,
  with how it ended and its last line of stderr; the next call gets a new one. A worker also
  ends about a second after this process has gone.

**The pool.** Workers are pooled by (``sys.executable``, ``sys_path``, ``memory_mb`` and the
fixed settings) in the SQL workers' pool, shared with them: at most ``POOL_IDLE_PER_KEY`` idle
workers per key and ``POOL_IDLE_MAX`` in all. A call takes the most recently pooled idle
worker of its key (one found dead is skipped), or starts one (about 0.1 s, plus the target's
imports at its first call); it serves one call at a time, so concurrent calls from several
threads get workers of their own. After a normal result or an exception the worker goes back
to the pool; after a timeout or its death it is ended. A call on a pooled worker costs about
0.3 ms more than in this process (a JSON round trip over pipes); a DIVE tool call about 0.5 ms.

Not enforced: an OS sandbox (no bubblewrap, seccomp, namespaces or cgroup): the worker runs as
this user and **may read every file this user can read** (and ``/proc/<pid>/environ`` of this
user's processes, this one's included) and return what it read. The audit hook sees Python-level
events only, and a determined function can get past it: C functions that raise no audit event
(e.g. ``os.setpriority``; fresh copies of the stubbed modules through ``_imp.create_builtin``),
changing the hook's state through ``gc`` or frame introspection, ``ctypes`` pointers made
from integers (``c_char_p(address).value`` reads memory without an event), or a C extension
imported by a module it uses. Isolation between calls that share a pooled worker: a function
can change module state (globals, monkeypatches), leave threads running or write to the
worker's own pipes, and later calls in that worker see it (call ``close_idle_workers()`` to
start afresh). Memory is capped as address space, not resident memory. CPU share (each busy
worker may use a core, more with threads).

>>> r = call_function("textwrap:shorten", {"text": "Hello  world, again", "width": 12})
>>> r.ok, r.value, r.error
(True, 'Hello [...]', None)
>>> call_function("json:loads", {"s": "[1,"}).error
'JSONDecodeError: Expecting value: line 1 column 4 (char 3)'
>>> call_function("os:system", {"command": "true"}).error
'refused: os.system (PermissionError: refused in the function worker: os.system)'
>>> call_function("math.gcd", {})
Traceback (most recent call last):
...
ValueError: target must be 'package.module:qualname', got 'math.gcd'
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import inspect
import json
import math
import numbers
import os
import secrets
import signal
import sys
import threading
import time
from typing import Any

from jaxpapers.core import _sandbox_sql
from jaxpapers.core._sandbox_sql import _POOL, _Deadline, _Worker, _WorkerLost, close_idle_workers
from jaxpapers.core._sandbox_sql_worker import (_audit_hook, _cap_address_space, _protocol_pipes,
                                                _Watchdog)

__all__ = ["FunctionResult", "call_function", "close_idle_workers", "function_worker_source"]

MIN_MEMORY_MB = _sandbox_sql.MIN_MEMORY_MB  # 16
WORKER_MARGIN_MB = _sandbox_sql.WORKER_MARGIN_MB  # room beyond memory_mb: the reply's copies
WORKER_GRACE_S = _sandbox_sql.WORKER_GRACE_S  # after timeout_s, the wait before a kill
WORKER_START_TIMEOUT_S = _sandbox_sql.WORKER_START_TIMEOUT_S
POOL_MAX_GROWTH = _sandbox_sql.POOL_MAX_GROWTH
MAX_RESULT_BYTES = _sandbox_sql.MAX_RESULT_BYTES  # largest reply (JSON); more is an error
MAX_REQUEST_BYTES = 16 * 2**20  # largest kwargs (JSON); more is a ValueError
ERROR_CHARS = _sandbox_sql.ERROR_CHARS  # an error message is cut to this many characters

# What the function worker refuses beyond ``_audit_hook`` (audit event names; ``os.kill`` of
# itself and ``ctypes.dlopen(None)``, which ``import ctypes`` does, are let through), the modules
# it does not import afresh (ImportError), and the unaudited functions it replaces by stubs
# that raise the audit event "<module>.<name>" (refused too).
REFUSED_EVENTS = ("os.kill", "os.killpg", "resource.setrlimit", "resource.prlimit",
                  "ctypes.dlopen", "ctypes.dlsym", "ctypes.dlsym/handle", "ctypes.call_function",
                  "ctypes.cdata", "ctypes.cdata/buffer", "ctypes.string_at", "ctypes.wstring_at",
                  "ctypes.PyObj_FromPtr")
REFUSED_IMPORTS = ("readline", "posix", "_posixsubprocess")
STUBBED = (("os", "mkfifo"), ("os", "mknod"), ("os", "pidfd_open"), ("posix", "mkfifo"),
           ("posix", "mknod"), ("posix", "pidfd_open"), ("_posixsubprocess", "fork_exec"))


@dataclasses.dataclass(frozen=True)
class FunctionResult:
    """What one ``call_function`` call produced.

    Attributes:
      ok: the function returned (``error`` is None).
      value: its return value as JSON (tuples become lists; dict keys str), or None.
      error: None on success; else ``"timeout: ..."``, ``"out of memory: ..."``, ``"refused:
        <audit event> (...)"``, ``"worker died: ..."``, ``"result too large: ..."``,
        ``"invalid result: ..."`` or ``"<ExceptionType>: message"`` (what the function, or
        importing its module, raised), cut to ``ERROR_CHARS`` characters.
      seconds: wall time of the call (getting a worker included).
    """

    ok: bool
    value: Any
    error: str | None
    seconds: float


# From here to the section "this process's side", the code runs in the worker (see
# ``function_worker_source``): it may use only the modules ``_WORKER_HEADER`` imports and the
# pieces of ``_sandbox_sql`` that ``_WORKER_CODE`` names.

class _CallTimeout(BaseException):
    """In the function worker: raised in the main thread once a call's deadline has passed."""


class _MainThreadAlarm:
    """In the function worker: what the watchdog interrupts at a call's deadline. ``interrupt``
    sends SIGINT to the main thread; ``handler`` (its SIGINT handler) raises ``_CallTimeout``
    once while a call is armed (``state["armed"]``) and does nothing otherwise."""

    def __init__(self, state: dict):
        self.state = state
        self.ident = threading.main_thread().ident

    def interrupt(self) -> None:
        signal.pthread_kill(self.ident, signal.SIGINT)

    def handler(self, signum, frame) -> None:
        if self.state["armed"]:
            self.state["armed"] = False
            raise _CallTimeout()


def _function_hook(settings: dict, base, state: dict):
    """The function worker's audit hook: ``base`` (``_audit_hook``) plus the events in
    ``settings["refused_events"]`` and those of the stubs (``os.kill`` of itself and
    ``ctypes.dlopen(None)`` excepted), and imports of ``settings["refused_imports"]``. A refusal
    is raised as ``PermissionError`` (``ImportError`` for an import) and noted, with that
    exception, in ``state["refused"]``."""
    refused = frozenset(settings["refused_events"]) | frozenset(
        f"{module}.{name}" for module, name in settings["stubbed"])
    no_import = frozenset(settings["refused_imports"])
    me = os.getpid()
    noted = state["refused"]

    def refuse(event: str, what: str, kind=PermissionError):
        err = kind(f"refused in the function worker: {what}")
        if len(noted) < 8:
            noted.append((event, err))
        raise err

    def hook(event: str, args: tuple) -> None:
        if event == "import":
            if args and args[0] in no_import:
                refuse(f"import {args[0]}", f"importing {args[0]}", ImportError)
            return
        if event in refused:
            if args and ((event == "os.kill" and args[0] == me)  # a signal to itself
                         or (event == "ctypes.dlopen" and args[0] is None)):  # import ctypes
                return
            refuse(event, event)
        try:
            base(event, args)
        except PermissionError as err:
            refuse(event, str(err).split(": ", 1)[-1])

    return hook


def _stub(event: str):
    """In the function worker: a stand-in that raises the audit event ``event`` (refused)."""

    def refused(*args, **kwargs):
        sys.audit(event, *args)
        raise PermissionError(f"refused in the function worker: {event}")

    refused.__name__ = event.rsplit(".", 1)[-1]
    return refused


def _fn_resolve(target: str):
    """In the function worker: import ``module`` of ``module:qualname`` and look it up."""
    module, _, qualname = target.partition(":")
    obj = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    if not callable(obj):
        raise TypeError(f"{target} is not callable (a {type(obj).__name__})")
    return obj


def _fn_describe(err: BaseException, state: dict, settings: dict) -> str:
    """In the function worker: the error text for ``err`` (see ``FunctionResult.error``):
    ``"refused: ..."`` when ``err`` is a refusal of the audit hook, or was raised while one was
    handled (its ``__cause__`` / ``__context__`` chain holds one)."""
    try:
        kind = type(err).__name__
        msg = str(err).strip()
    except BaseException:  # a __str__ that fails
        kind, msg = "Exception", "(its message could not be read)"
    msg = msg[:settings["error_chars"]]
    link = err
    for _ in range(16):
        for event, refusal in state["refused"]:
            if refusal is link:
                return f"refused: {event} ({kind}: {msg})"
        link = link.__cause__ or link.__context__
        if link is None:
            break
    if isinstance(err, MemoryError):
        return (f"out of memory: {msg or kind} (the function's worker may grow by at most "
                f"{settings['memory_mb'] + settings['margin_mb']} MiB: memory_mb="
                f"{settings['memory_mb']} plus {settings['margin_mb']})")
    return f"{kind}: {msg}" if msg else kind


def _fn_call(request: dict, state: dict, settings: dict) -> str:
    """In the function worker, armed: run one call; the reply's fields after its id, as JSON
    text (``, "ok": true, "value": ...`` or ``, "error": ...``)."""
    try:
        value = _fn_resolve(request["target"])(**request["kwargs"])
    except _CallTimeout:
        raise
    except BaseException as err:  # SystemExit and KeyboardInterrupt too: the worker carries on
        return ', "error": ' + json.dumps(_fn_describe(err, state, settings))
    try:
        payload = json.dumps(value, allow_nan=False)
    except _CallTimeout:
        raise
    except MemoryError as err:
        return ', "error": ' + json.dumps(_fn_describe(err, state, settings))
    except BaseException as err:
        return ', "error": ' + json.dumps(
            f"invalid result: the function returned a value that is not JSON "
            f"({_fn_describe(err, state, settings)})")
    return ', "ok": true, "value": ' + payload


def _fn_worker_reply(line: bytes, state: dict, watchdog, alarm, settings: dict) -> bytes:
    """In the function worker: the reply line (with its newline) to one request line, ``<id>
    <JSON object>``: ``{"id", "ok": true, "value"}``, ``{"id", "error"}`` or ``{"id",
    "timed_out": true}``."""
    nonce, _, body = line.partition(b" ")
    head = '{"id": ' + json.dumps(nonce.decode("ascii", "replace"))
    tail = None
    state["refused"].clear()
    watchdog.fired = False
    try:
        try:
            request = json.loads(body)
            state["armed"] = True
            watchdog.arm(alarm, time.monotonic() + request["deadline_s"])
            tail = _fn_call(request, state, settings)
        finally:
            state["armed"] = False
            watchdog.disarm()
    except _CallTimeout:
        tail = None
    except BaseException as err:  # a request it cannot decode (MemoryError, RecursionError)
        tail = ', "error": ' + json.dumps(_fn_describe(err, state, settings))
    if tail is None or watchdog.fired:
        tail = ', "timed_out": true'
    state["refused"].clear()  # the exceptions hold the call's frames
    size = len(head) + len(tail) + 2  # ASCII: characters are bytes
    if size > settings["max_result_bytes"]:
        tail = ', "error": ' + json.dumps(
            f"result too large: the reply would take {size} bytes of JSON, more than "
            f"{settings['max_result_bytes']}")
    return (head + tail + "}\n").encode("ascii")


def _fn_worker_main(settings: dict) -> None:
    """The function worker process: set up (see the module docstring), answer calls."""
    requests, replies = _protocol_pipes()
    sys.path[:] = settings["sys_path"] + [p for p in sys.path if p not in settings["sys_path"]]

    def send(message: dict) -> None:
        replies.write(json.dumps(message).encode("ascii") + b"\n")
        replies.flush()

    state = {"armed": False, "refused": []}
    alarm = _MainThreadAlarm(state)
    signal.signal(signal.SIGINT, alarm.handler)
    watchdog = _Watchdog()
    try:
        size, cap = _cap_address_space(settings["memory_mb"] + settings["margin_mb"])
    except (OSError, ValueError) as err:
        send({"startup_error": f"cannot cap the worker's address space: {err}"})
        return
    for module, name in settings["stubbed"]:
        module = importlib.import_module(module)
        if hasattr(module, name):
            setattr(module, name, _stub(f"{module.__name__}.{name}"))
    sys.addaudithook(_function_hook(settings, _audit_hook(settings), state))
    send({"ready": True, "size_bytes": size, "address_space_bytes": cap})
    for line in requests:
        replies.write(_fn_worker_reply(line.rstrip(b"\n"), state, watchdog, alarm, settings))
        replies.flush()


_WORKER_HEADER = ("from __future__ import annotations\n"
                  "import importlib, json, os, signal, sys, threading, time\n")
_WORKER_CODE = (_Watchdog, _cap_address_space, _audit_hook, _protocol_pipes, _CallTimeout,
                _MainThreadAlarm, _function_hook, _stub, _fn_resolve, _fn_describe, _fn_call,
                _fn_worker_reply, _fn_worker_main)
_WORKER_CALL = "_fn_worker_main(json.loads(sys.argv[1]))\n"


@functools.cache
def function_worker_source(main: bool = True) -> str:
    """The function worker's program: ``_WORKER_HEADER``, the source of ``_WORKER_CODE`` (the
    SQL worker's watchdog, cap and audit hook, then the function worker's own code) and, with
    ``main``, a call of ``_fn_worker_main`` with the settings in ``sys.argv[1]`` (JSON)."""
    parts = [_WORKER_HEADER] + [inspect.getsource(obj) for obj in _WORKER_CODE]
    if main:
        parts.append(_WORKER_CALL)
    return "\n\n".join(parts)


# ----------------------------------------------------------------------------- this process's side

class _FunctionWorker(_Worker):
    """This process's side of one function worker: ``_Worker`` (pipes, hard deadline, end and
    its "last words") started with ``function_worker_source()``; ``call`` skips reply lines
    that do not carry its request's id."""

    def _start(self) -> None:
        """Start the worker and read its first line; raises OSError when it does not start."""
        self.name = "function"  # _Worker.__init__ names workers after their SQL backend
        first = self._spawn(function_worker_source(), "start")
        if not first.get("ready"):
            self.end()
            raise OSError(f"the function worker did not start: {first.get('startup_error')}")
        self.size_bytes = first.get("size_bytes")
        self.address_space_bytes = first.get("address_space_bytes")

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def call(self, line: bytes, nonce: str, deadline: float) -> dict:
        """Send one request line, return the reply with id ``nonce``. Raises ``_WorkerLost`` or
        ``_Deadline``."""
        if self._proc is None:
            raise _WorkerLost("it was ended")
        reply = self._read_reply(line, deadline)
        while reply.get("id") != nonce:  # a line the function wrote itself
            reply = self._read_reply(b"", deadline)
        return reply


def _settings(sys_path: list[str], memory_mb: int) -> dict:
    """What a function worker is started with (JSON; with ``sys.executable`` its pool key)."""
    return {"backend": "function", "sys_path": sys_path, "memory_mb": memory_mb,
            "margin_mb": WORKER_MARGIN_MB, "max_result_bytes": MAX_RESULT_BYTES,
            "error_chars": ERROR_CHARS, "refused_events": list(REFUSED_EVENTS),
            "refused_imports": list(REFUSED_IMPORTS), "stubbed": [list(s) for s in STUBBED]}


def _checkout(settings: dict) -> _FunctionWorker:
    """The pool's most recently pooled live idle worker with these settings, or a new one."""
    key = _sandbox_sql._pool_key(settings)
    while (worker := _POOL.take(key)) is not None:
        if isinstance(worker, _FunctionWorker) and worker.alive():
            return worker
        worker.end()  # it died while idle
    return _FunctionWorker(settings)


def _release(worker: _FunctionWorker) -> None:
    """Pool ``worker`` after a call, or end it when it may not be pooled (see the module
    docstring)."""
    if worker.ended or worker.owner != os.getpid():
        worker.end()
        return
    size = worker.vm_bytes()
    room = (worker.settings["memory_mb"] + worker.settings["margin_mb"]) * 2**20
    if size is None or worker.size_bytes is None or size > worker.size_bytes + (
            POOL_MAX_GROWTH * room):
        worker.end()
        return
    _POOL.put(worker)


def _check_target(target) -> str:
    if isinstance(target, str):
        module, sep, qualname = target.partition(":")
        if sep and all(p.isidentifier() for p in module.split(".") + qualname.split(".")):
            return target
    raise ValueError(f"target must be 'package.module:qualname', got {target!r}")


def _check_timeout(timeout_s) -> float:
    if (isinstance(timeout_s, bool) or not isinstance(timeout_s, numbers.Real)
            or not (math.isfinite(timeout_s) and timeout_s > 0)):
        raise ValueError(f"timeout_s must be a finite number of seconds > 0, got {timeout_s!r}")
    return float(timeout_s)


def _check_memory(memory_mb) -> int:
    if (isinstance(memory_mb, bool) or not isinstance(memory_mb, numbers.Integral)
            or memory_mb < MIN_MEMORY_MB):
        raise ValueError(f"memory_mb must be an int >= {MIN_MEMORY_MB}, got {memory_mb!r}")
    return int(memory_mb)


def _check_sys_path(sys_path) -> list[str]:
    """``sys_path`` (None: this process's ``sys.path`` now) as absolute folders."""
    if sys_path is None:
        entries = [p for p in sys.path if isinstance(p, str)]
    elif isinstance(sys_path, (list, tuple)) and all(isinstance(p, str) for p in sys_path):
        entries = list(sys_path)
    else:
        raise ValueError(f"sys_path must be None or a list of str folders, got {sys_path!r}")
    if any("\0" in p for p in entries):
        raise ValueError("sys_path entries must not contain NUL characters")
    out = []
    for p in entries:
        p = os.path.abspath(p) if p else os.getcwd()
        if p not in out:
            out.append(p)
    return out


def _encode_kwargs(kwargs) -> bytes:
    if not isinstance(kwargs, dict):
        raise ValueError(f"kwargs must be a dict of JSON values, got {type(kwargs).__name__}")
    for key in kwargs:
        if not isinstance(key, str):
            raise ValueError(f"kwargs keys must be str, got {key!r}")
    try:
        text = json.dumps(kwargs, allow_nan=False)
    except (TypeError, ValueError, RecursionError) as err:
        raise ValueError(f"kwargs must be JSON-able (no NaN or inf), got one that is not: "
                         f"{err}") from None
    if len(text) > MAX_REQUEST_BYTES:
        raise ValueError(f"kwargs take {len(text)} bytes of JSON, more than MAX_REQUEST_BYTES="
                         f"{MAX_REQUEST_BYTES}")
    return text.encode("ascii")


def _result(start: float, value=None, error: str | None = None) -> FunctionResult:
    if error is not None and len(error) > ERROR_CHARS:
        error = error[:ERROR_CHARS - 3] + "..."
    return FunctionResult(error is None, value if error is None else None, error,
                          time.monotonic() - start)


def call_function(target: str, kwargs: dict, *, timeout_s: float = 5.0, memory_mb: int = 256,
                  sys_path: list[str] | None = None) -> FunctionResult:
    """Call ``target(**kwargs)`` in a pooled worker process (see the module docstring).

    Args:
      target: ``"package.module:qualname"`` (``qualname`` may be dotted: ``"m:Class.method"``).
      kwargs: the keyword arguments, a dict of JSON values (str keys; at most
        ``MAX_REQUEST_BYTES`` of JSON); the function gets them JSON-decoded.
      timeout_s: seconds the call may take in the worker, importing the module included
        (finite, > 0); a worker that has not answered ``WORKER_GRACE_S`` later is killed.
      memory_mb: with ``WORKER_MARGIN_MB``, the MiB the worker's address space may grow by
        (int >= 16).
      sys_path: folders to import from, in front of the worker's own ``sys.path`` (the
        interpreter's standard library and site-packages); None: this process's ``sys.path``.

    Returns:
      A ``FunctionResult``; never raises for what the function does.

    Raises:
      ValueError: a bad argument (the message names it).
    """
    target = _check_target(target)
    timeout_s = _check_timeout(timeout_s)
    settings = _settings(_check_sys_path(sys_path), _check_memory(memory_mb))
    payload = _encode_kwargs(kwargs)
    start = time.monotonic()
    try:
        worker = _checkout(settings)
    except Exception as err:
        return _result(start, error=f"worker died: a new function worker did not start: {err}")
    nonce = secrets.token_hex(8)
    line = b"".join((nonce.encode("ascii"), b' {"target": ', json.dumps(target).encode("ascii"),
                     b', "deadline_s": ', repr(timeout_s).encode("ascii"), b', "kwargs": ',
                     payload, b"}\n"))
    began = time.monotonic()
    try:
        reply = worker.call(line, nonce, began + timeout_s + WORKER_GRACE_S)
    except _Deadline:
        worker.end()
        return _result(start, error=f"timeout: no reply {WORKER_GRACE_S:g} s after timeout_s="
                                    f"{timeout_s:g} s: the worker was killed, the next call "
                                    f"gets another one")
    except _WorkerLost as err:
        return _result(start, error=f"worker died: {worker.end(str(err))}; the next call gets "
                                    f"another worker")
    except BaseException:  # e.g. KeyboardInterrupt: its reply would come out of step
        worker.end()
        raise
    if reply.get("timed_out"):
        worker.end()
        return _result(start, error=f"timeout: the call ran past timeout_s={timeout_s:g} s and "
                                    f"was stopped after {time.monotonic() - began:.2f} s; its "
                                    f"worker was replaced")
    _release(worker)
    if reply.get("ok") is True:
        return _result(start, value=reply.get("value"))
    return _result(start, error=str(reply.get("error")))
