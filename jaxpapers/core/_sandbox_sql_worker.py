"""The SQL worker's program (``jaxpapers.core._sandbox_sql``): everything that runs inside the
capped worker process, kept apart from the parent's pool and connection code.

``worker_source()`` assembles the worker's program text from the source of ``_WORKER_CODE``
(so the conversion and description rules are the same code in both processes); the functions
here may use only the modules that ``_WORKER_HEADER`` imports and the engine module handed to
them. Their settings (caps, refusals, limits) come in the ``settings`` dict that the parent
builds (``_sandbox_sql._worker_settings``), never from module constants, so patching the
parent's constants in a test reaches the worker.
"""

from __future__ import annotations

import datetime
import decimal
import functools
import inspect
import json
import os
import re
import sys
import threading
import time
import uuid


class _Refused(Exception):
    """A statement refused or failed with a ready-made description: the message is the whole
    error (also raised in the DuckDB worker, and for what the worker reported)."""


class _Timeout(Exception):
    """The deadline stopped the statement before its first rows were fetched; a message, if
    any, is added to the error in parentheses."""


def _describe_engine(err: Exception) -> str:
    """``kind: message`` for a DuckDB exception, or any other (not an SQLite error)."""
    msg = str(err).strip() or type(err).__name__
    m = re.match(r"([A-Za-z][A-Za-z ]*?) Error: (.*)", msg, re.DOTALL)
    if m:  # DuckDB: "Catalog Error: Table with name x does not exist!"
        return f"{m.group(1).lower()} error: {m.group(2)}"
    return f"{_words(type(err).__name__)}: {msg}"


def _words(class_name: str) -> str:
    """``OperationalError`` -> ``operational error``; ``ParserException`` -> ``parser error``."""
    name = re.sub(r"(Exception|Error)$", "", class_name) or class_name
    return re.sub(r"(?<=[a-z])(?=[A-Z])", " ", name).lower() + " error"


def _describe_sqlite(err: Exception, refusal: str) -> str:
    """``kind: message`` for an ``sqlite3`` exception; ``refusal`` explains the authorizer."""
    msg = str(err).strip() or type(err).__name__
    if msg in ("not authorized", "authorization denied"):
        return f"not authorized: {msg} ({refusal})"
    if msg.startswith("not authorized"):  # "not authorized to use function: load_extension"
        return f"not authorized: {msg}"
    if "one statement at a time" in msg:
        return f"invalid input: {msg}"
    return f"{_words(type(err).__name__)}: {msg}"


def _value(v):
    """A database value as a Python primitive (see ``SQLResult.rows``)."""
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, (bytes, bytearray, memoryview)):
        return bytes(v).hex()
    if isinstance(v, decimal.Decimal):
        return float(v)
    if isinstance(v, (datetime.date, datetime.time)):
        return v.isoformat()
    if isinstance(v, (datetime.timedelta, uuid.UUID)):
        return str(v)
    if isinstance(v, (list, tuple, dict)):
        return json.dumps(_jsonable(v), default=str)
    return str(v)


def _jsonable(v):
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    return _value(v)


def _collect(fetchmany, max_rows: int, deadline: float, timed_out, count_cap: int,
             count_batch: int) -> tuple:
    """(rows, truncated, total_rows) from a statement's cursor. An error while fetching the
    first ``max_rows + 1`` rows propagates (``_Timeout`` when the deadline caused it), and so
    does ``_Timeout`` when they came after the deadline (one long function call, which no
    interrupt stopped); while counting further (``count_batch`` rows at a time, up to
    ``count_cap``), the deadline gives total None and any other error propagates."""
    try:
        first = fetchmany(max_rows + 1)
    except Exception:
        if timed_out():
            raise _Timeout() from None
        raise
    if time.monotonic() >= deadline:
        raise _Timeout()
    rows = tuple(tuple(_value(v) for v in row) for row in first[:max_rows])
    if len(first) <= max_rows:
        return rows, False, len(first)
    n = len(first)
    try:
        while n <= count_cap:
            if time.monotonic() >= deadline:
                return rows, True, None
            batch = fetchmany(count_batch)
            if time.monotonic() >= deadline:
                return rows, True, None
            if not batch:
                return rows, True, n
            n += len(batch)
    except Exception:
        if timed_out():
            return rows, True, None
        raise
    return rows, True, None


# ----------------------------------------------------------------------------- SQLite (worker)

def _decode_text(raw: bytes) -> str:
    return raw.decode("utf-8", "replace")


class _ProgressDeadline:
    """In the SQLite worker: a connection's progress handler, which stops the running statement
    once its deadline has passed (``fired`` then says so)."""

    def __init__(self):
        self.deadline = float("inf")
        self.fired = False

    def arm(self, deadline: float) -> None:
        self.fired = False
        self.deadline = deadline

    def disarm(self) -> None:
        self.deadline = float("inf")

    def __call__(self) -> int:
        if time.monotonic() >= self.deadline:
            self.fired = True
            return 1  # abort the statement: sqlite3.OperationalError("interrupted")
        return 0


def _worker_connect(engine, settings: dict) -> tuple:
    """In the worker: a new connection of ``engine`` (the ``sqlite3`` or ``duckdb`` module) to
    the database, set up for untrusted SQL as the module docstring says; returns it and its
    ``_ProgressDeadline`` (None with DuckDB, whose deadline is the watchdog's)."""
    if settings["backend"] == "duckdb":
        conn = engine.connect(settings["path"], read_only=True, config=settings["config"])
        return conn, None
    conn = engine.connect(settings["uri"], uri=True, isolation_level=None,
                          check_same_thread=False)
    try:
        conn.text_factory = _decode_text
        if hasattr(conn, "enable_load_extension"):  # absent when built without it
            conn.enable_load_extension(False)
        for pragma in settings["pragmas"]:  # before the authorizer, which refuses every PRAGMA
            conn.execute(pragma).fetchall()
        for limit, value in settings["limits"]:
            conn.setlimit(limit, value)
        allowed = frozenset(settings["allowed_actions"])
        denied = frozenset(settings["denied_functions"])

        def authorizer(action, arg1, arg2, db_name, trigger) -> int:
            if action not in allowed:
                return engine.SQLITE_DENY
            if action == engine.SQLITE_FUNCTION and (arg2 or "").lower() in denied:
                return engine.SQLITE_DENY
            return engine.SQLITE_OK

        conn.set_authorizer(authorizer)
        progress = _ProgressDeadline()
        conn.set_progress_handler(progress, settings["progress_steps"])
        conn.execute("SELECT count(*) FROM sqlite_schema").fetchall()  # not a database?
    except BaseException:
        conn.close()
        raise
    return conn, progress


# ----------------------------------------------------------------------------- worker

# Protocol, one JSON object per line. The worker's first line is {"ready": true, "size_bytes",
# "address_space_bytes", "connection": 1} (its first connection is open) or {"startup_error":
# description, "kind": "import" | "open"}. Then one reply per request: {"op": "query", "sql",
# "max_rows", "deadline_s", "count_cap", "count_batch"} gets {"columns", "rows", "truncated",
# "total_rows", "error": null}, {"error": "kind: ..."} or {"timed_out": true}; {"op": "close"}
# closes the connection, {"closed": true}; {"op": "open"} opens a fresh one, {"opened": its
# number} or {"error": ...}. The worker ends at the end of its input.

class _Watchdog:
    """In the worker: a thread, started before the address space is capped, that interrupts the
    armed DuckDB cursor at its deadline, and ends the worker once its parent has gone (checked
    every second, also while an engine runs a function that does not see interrupts)."""

    def __init__(self):
        self.fired = False
        self._cursor = None
        self._deadline = 0.0
        self._parent = os.getppid()
        self._cond = threading.Condition()
        started = threading.Event()
        threading.Thread(target=self._loop, args=(started,), name="sql-watchdog",
                         daemon=True).start()
        started.wait()

    def arm(self, cursor, deadline: float) -> None:
        with self._cond:
            self.fired = False
            self._cursor, self._deadline = cursor, deadline
            self._cond.notify()

    def disarm(self) -> None:
        with self._cond:
            self._cursor = None

    def _loop(self, started) -> None:
        with self._cond:
            self._cond.wait(0)  # this thread's first allocations, before the cap
            started.set()
            while True:
                try:
                    self._step()
                except MemoryError:  # the query has the address space full: look again
                    pass

    def _step(self) -> None:
        """One look, with the condition's lock held."""
        if os.getppid() != self._parent:
            os._exit(1)
        left = 1.0 if self._cursor is None else self._deadline - time.monotonic()
        if left > 0:
            self._cond.wait(min(left, 1.0))
            return
        self.fired = True
        try:
            self._cursor.interrupt()
        except Exception:  # the parent's hard deadline still applies
            pass
        self._cursor = None


def _cap_address_space(extra_mb: int) -> tuple:
    """In the worker: no core dumps, and an address-space cap (soft and hard) of the current
    size (``VmSize``) plus ``extra_mb`` MiB, or lower if already lower; returns (the size, the
    cap) in bytes."""
    import resource  # POSIX only: imported where it runs

    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    size = None
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmSize:"):
                size = int(line.split()[1]) * 1024
    if size is None:
        raise OSError("/proc/self/status has no VmSize line")
    cap = size + extra_mb * 2**20
    for current in resource.getrlimit(resource.RLIMIT_AS):
        if current != resource.RLIM_INFINITY:
            cap = min(cap, current)
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    return size, cap


def _audit_hook(settings: dict):
    """The worker's audit hook (``sys.addaudithook``), installed once the worker is set up: a
    function of (event, args) that raises ``PermissionError`` for sockets (every ``socket.*``
    event), new processes, opening a file for writing (a mode with w, a, x or +, or write
    flags), Python-level file changes, extension loading, and a ``sqlite3`` connection to any
    database but ``settings["uri"]`` (with DuckDB: to any). Defence in depth: the engines' own
    C-level file access raises no audit events."""
    refused = frozenset((
        "subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork",
        "os.forkpty", "os.startfile", "pty.spawn", "os.remove", "os.rename", "os.rmdir",
        "os.mkdir", "os.truncate", "os.link", "os.symlink", "os.chmod", "os.chown", "os.utime",
        "os.chflags", "sqlite3.load_extension"))
    writing = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC
    uri = settings.get("uri")

    def hook(event: str, args: tuple) -> None:
        if event == "open":
            mode = args[1] if len(args) > 1 else None
            flags = args[2] if len(args) > 2 else None
            if ((isinstance(mode, str) and any(c in mode for c in "wax+"))
                    or (isinstance(flags, int) and flags & writing)):
                raise PermissionError(f"refused in the SQL worker: opening {args[0]!r} for "
                                      f"writing")
        elif event in refused or event.startswith("socket."):
            raise PermissionError(f"refused in the SQL worker: {event}")
        elif event == "sqlite3.connect" and (uri is None or not args or args[0] != uri):
            raise PermissionError("refused in the SQL worker: sqlite3.connect to another "
                                  "database")
        elif event == "sqlite3.enable_load_extension" and len(args) > 1 and args[1]:
            raise PermissionError("refused in the SQL worker: enabling extension loading")

    return hook


def _worker_query(session: dict, request: dict, watchdog, settings: dict) -> dict:
    """In the worker: run one request on a new cursor of the open connection; the reply on
    success."""
    deadline = time.monotonic() + request["deadline_s"]
    conn, progress = session["conn"], session["progress"]
    if conn is None:
        raise _Refused("closed: the connection is closed")
    if progress is None:  # DuckDB: one statement of an allowed type, checked before running
        statements = conn.extract_statements(request["sql"])
        if len(statements) != 1:
            raise _Refused("invalid input: empty statement" if not statements else
                           f"invalid input: one statement at a time, got {len(statements)}")
        statement = statements[0]
        kind = getattr(statement.type, "name", str(statement.type))
        if kind not in settings["allowed_statements"]:
            raise _Refused(f"not authorized: {settings['refusal'].format(kind=kind)}")
        cur = conn.cursor()
        watchdog.arm(cur, deadline)
    else:  # SQLite: the authorizer refuses at prepare time, the progress handler stops it
        statement = request["sql"]
        cur = conn.cursor()
        progress.arm(deadline)
    flag = watchdog if progress is None else progress  # its .fired: the deadline stopped it
    try:
        try:
            cur.execute(statement)
        except Exception:
            if flag.fired:
                raise _Timeout() from None
            raise
        if cur.description is None and progress is not None:  # only comments or ';'
            raise _Refused("invalid input: empty statement")
        columns = [d[0] for d in cur.description or ()]
        rows, truncated, total = _collect(cur.fetchmany, request["max_rows"], deadline,
                                          lambda: flag.fired, request["count_cap"],
                                          request["count_batch"])
    finally:
        watchdog.disarm()
        if progress is not None:
            progress.disarm()
        cur.close()
    return {"columns": columns, "rows": rows, "truncated": truncated, "total_rows": total,
            "error": None}


def _worker_close(session: dict) -> None:
    """In the worker: close the open connection, if any."""
    conn, session["conn"], session["progress"] = session["conn"], None, None
    if conn is not None:
        conn.close()


def _worker_out_of_memory(err: BaseException, settings: dict) -> str:
    first = (str(err).strip().splitlines() or [type(err).__name__])[0]
    first = re.sub(r"^Out of Memory Error: ", "", first) or type(err).__name__
    return (f"out of memory: {first} (this connection's worker may grow by at most "
            f"{settings['memory_mb'] + settings['margin_mb']} MiB: memory_mb="
            f"{settings['memory_mb']} plus {settings['margin_mb']})")


def _worker_error(err: BaseException, settings: dict, engine) -> str:
    """In the worker: ``kind: message`` for an exception of the engine, or of Python."""
    if isinstance(err, MemoryError) or (
            settings["backend"] == "duckdb" and isinstance(err, engine.OutOfMemoryException)
            and re.search(r"bad.alloc|allocation failure", str(err), re.IGNORECASE)):
        return _worker_out_of_memory(err, settings)  # SQLite's heap limit is a MemoryError
    if settings["backend"] == "sqlite" and isinstance(err, (engine.Error, engine.Warning)):
        return _describe_sqlite(err, settings["refusal"])
    return _describe_engine(err)


def _worker_reply(session: dict, line: bytes, watchdog, settings: dict, engine) -> bytes:
    """In the worker: the reply line (with its newline) to one request line."""
    reply = None
    try:
        try:
            request = json.loads(line)
            op = request.get("op")
            if op == "open":
                _worker_close(session)
                session["conn"], session["progress"] = _worker_connect(engine, settings)
                session["number"] += 1
                reply = {"opened": session["number"]}
            elif op == "close":
                _worker_close(session)
                reply = {"closed": True}
            else:
                reply = _worker_query(session, request, watchdog, settings)
        except _Refused as err:
            reply = {"error": str(err)}
        except _Timeout:
            reply = {"timed_out": True}
        data = json.dumps(reply).encode("ascii") + b"\n"
    except Exception as err:  # MemoryError too
        reply = None
        data = json.dumps({"error": _worker_error(err, settings, engine)}).encode("ascii") + b"\n"
    reply = None
    if len(data) > settings["max_result_bytes"]:
        data = json.dumps({"error": (
            f"result too large: the reply would take {len(data)} bytes of JSON, more than "
            f"{settings['max_result_bytes']}; select fewer rows or shorter values, e.g. "
            f"substr(x, 1, 1000)")}).encode("ascii") + b"\n"
    return data


def _protocol_pipes() -> tuple:
    """In a worker: the protocol gets private copies of fds 0 and 1 (returned as binary files:
    requests, replies), which then point at /dev/null, so nothing an engine or Python prints
    there can garble it; no ``.pyc`` is written (an import under the audit hook must not)."""
    requests = os.fdopen(os.dup(0), "rb")
    replies = os.fdopen(os.dup(1), "wb")
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)
    sys.dont_write_bytecode = True
    return requests, replies


def _worker_main(settings: dict) -> None:
    """The worker process: open the first connection, cap the address space, install the audit
    hook, answer requests."""
    requests, replies = _protocol_pipes()

    def send(message: dict) -> None:
        replies.write(json.dumps(message).encode("ascii") + b"\n")
        replies.flush()

    try:
        if settings["backend"] == "duckdb":
            if settings["duckdb_home"] not in sys.path:  # e.g. the user site, which -I leaves out
                sys.path.append(settings["duckdb_home"])
            import duckdb as engine
        else:
            import sqlite3 as engine
    except ImportError as err:
        send({"startup_error": str(err), "kind": "import"})
        return
    session = {"conn": None, "progress": None, "number": 1}
    try:
        session["conn"], session["progress"] = _worker_connect(engine, settings)
    except Exception as err:
        send({"startup_error": _worker_error(err, settings, engine), "kind": "open"})
        return
    watchdog = _Watchdog()
    try:
        size, cap = _cap_address_space(settings["memory_mb"] + settings["margin_mb"])
    except (OSError, ValueError) as err:
        send({"startup_error": f"cannot cap the worker's address space: {err}", "kind": "open"})
        return
    sys.addaudithook(_audit_hook(settings))
    send({"ready": True, "size_bytes": size, "address_space_bytes": cap, "connection": 1})
    for line in requests:
        replies.write(_worker_reply(session, line, watchdog, settings, engine))
        replies.flush()


_WORKER_HEADER = ("from __future__ import annotations\n"
                  "import datetime, decimal, json, os, re, sys, threading, time, uuid\n")
_WORKER_CODE = (_Refused, _Timeout, _describe_engine, _words, _describe_sqlite, _value,
                _jsonable, _collect, _decode_text, _ProgressDeadline, _worker_connect,
                _Watchdog, _cap_address_space, _audit_hook, _worker_query, _worker_close,
                _worker_out_of_memory, _worker_error, _worker_reply, _protocol_pipes, _worker_main)
_WORKER_CALL = "_worker_main(json.loads(sys.argv[1]))\n"


@functools.cache
def worker_source(main: bool = True) -> str:
    """The worker's program: ``_WORKER_HEADER``, the source of ``_WORKER_CODE`` (the conversion
    and description rules are the same code as in this process) and, with ``main``, a call of
    ``_worker_main`` with the settings in ``sys.argv[1]`` (JSON). It imports the standard
    library and, for DuckDB, ``duckdb`` only."""
    parts = [_WORKER_HEADER] + [inspect.getsource(obj) for obj in _WORKER_CODE]
    if main:
        parts.append(_WORKER_CALL)
    return "\n\n".join(parts)
