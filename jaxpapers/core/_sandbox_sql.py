"""Read-only SQL for untrusted (agent-written) queries, run in a capped worker process.

``open_readonly_sql(path, backend=...)`` opens an existing database file and returns a
``ReadOnlySQL``; its ``execute(sql)`` runs one statement and returns a frozen ``SQLResult`` (it
never raises: a refused, failed or timed-out query is a result whose ``error`` says why).
Re-exported by ``jaxpapers.core.sandbox``; see its module docstring for the process sandbox
(``run``), which this module does not use.

**The worker** (both backends; Linux only). Every connection runs in a worker process started
as ``python -I -c <worker_source()>`` with only ``PATH`` in its environment, ``/`` as its
folder, in a session of its own; it never imports ``jaxpapers`` (the standard library only, and
``duckdb`` for DuckDB). The path is checked in this process first, so a missing one is never
created. Once its first connection is open, the worker caps its own address space
(``RLIMIT_AS``) at its size at that moment plus ``memory_mb + WORKER_MARGIN_MB`` MiB (core dumps
at 0 bytes): a query that needs more fails with ``"out of memory: ..."`` and the worker lives
on. Then it installs an audit hook (``sys.addaudithook``) that refuses sockets, new processes
(``subprocess.Popen``, ``os.system``, ``os.exec*``, ``os.posix_spawn``, ``os.fork``), opening
any file for writing, Python-level file changes (``os.remove``, ``os.rename``, ``os.mkdir``
and the like), and for SQLite a connection to any other database and extension loading. The
hook is defence in depth: it sees what Python code in the worker does, not the engines'
C-level file access (SQLite and DuckDB open, read and lock files without Python); what keeps
SQL away from other files is each engine's setup below. This process waits for a reply at
most ``timeout_s + WORKER_GRACE_S``: a worker that has not answered by then (stuck in one
function call that sees neither the interrupt nor the progress handler) is killed
(``"timeout: ..."``), one found dead is cleaned up (``"worker died: ..."``), and the next call
gets another worker. A reply of more than ``MAX_RESULT_BYTES`` of JSON is not sent (``"result
too large: ..."``).

**The pool.** ``close()`` (or the context exit) has the worker close its engine connection and
puts the worker, idle, in a pool of this process: at most ``POOL_IDLE_PER_KEY`` idle workers
per database and settings (backend, path, ``memory_mb`` and the rest of what a worker is
started with) and ``POOL_IDLE_MAX`` in all, the least recently used ended first.
``open_readonly_sql`` takes the most recently pooled idle worker of the same database and
settings, if any, and has it open a fresh engine connection (a new ``sqlite3`` / ``duckdb``
connection, set up as below: nothing of one connection's session reaches the next); else it
starts a worker. A worker serves one connection at a time. A worker that was killed or died
is never pooled, nor one whose address space has grown since it capped it by more than the
fraction ``POOL_MAX_GROWTH`` of ``memory_mb + WORKER_MARGIN_MB`` (memory an engine keeps
mapped after large queries: a pooled worker may have up to that much less room than a new
one, so a query near the cap may fail in one and not in the other), nor one of another
process (a forked copy of this process starts workers of its own). A connection that is
garbage-collected without ``close`` kills its worker. Idle workers end at
``close_idle_workers()``, at this process's exit (``atexit``), or, like every worker, about a
second after this process has gone (a watchdog thread in the worker checks its parent).
Opening and closing a connection with a pooled worker takes about 0.5 ms with SQLite and 30
ms with DuckDB (its connect), starting a worker about 0.05 s (SQLite) or 0.2 s (DuckDB); an
idle worker holds about 20 MB (SQLite) or 70 MB (DuckDB) of memory. A query costs about 0.5
ms more than in this process (a JSON round trip).

What is enforced, per backend:

* **SQLite** (the standard library's ``sqlite3``, in the worker): each connection opens the
  file through a ``mode=ro`` URI with ``PRAGMA query_only=1``, ``PRAGMA temp_store=MEMORY``
  (sorts and temp b-trees write no temp files) and ``PRAGMA hard_heap_limit`` of ``memory_mb``
  MiB (SQLite's whole heap in the worker); then an authorizer admits only SELECT, column
  reads, recursive CTEs and function calls, and refuses the functions ``load_extension``,
  ``readfile``, ``writefile``, ``edit``, ``fsdir`` and ``fts3_tokenizer``. Everything else is
  refused at prepare time, ``"not authorized: ..."``: every PRAGMA (so ``query_only`` cannot be
  turned off), ATTACH / DETACH, VACUUM (and VACUUM INTO), BEGIN / SAVEPOINT, CREATE / DROP /
  ALTER (temp objects too), INSERT / UPDATE / DELETE, ANALYZE, and table-valued functions such
  as ``pragma_table_info()`` and ``json_each()`` (their setup needs a schema update). Read the
  schema from ``sqlite_schema`` (``sqlite_master``) instead. Limits: no attached databases,
  values of at most ``SQLITE_MAX_LENGTH`` bytes (10 MB: ``randomblob`` or ``zeroblob`` of 500
  MB fail at once, ``"data error: string or blob too big"``; ``printf`` stops growing its text
  at the limit and returns NULL), statements of at most ``MAX_SQL_CHARS`` characters;
  extension loading off where the build has it. The value limit is per value: a row of sixty
  9 MB ``zeroblob`` values (1.5 GB in a plain connection in this process) meets the heap limit
  or the worker's cap, ``"out of memory: ..."``. A progress handler (every
  ``SQLITE_PROGRESS_STEPS`` VM steps) stops the statement once ``timeout_s`` has passed; it is
  not called inside one function call (``printf('%.*c', 2000000000, 'x')`` loops about 13 s
  in one step): there the hard deadline above kills the worker. ``mode=ro`` alone is not a
  sandbox: there, ATTACH of a new path creates and writes that file, VACUUM INTO copies the
  database out, PRAGMA writable_schema / query_only are accepted and ``randomblob(1e9)``
  allocates 1 GB (the tests run each of these against a plain ``mode=ro`` connection to show
  it).
* **DuckDB** (``duckdb``, imported only in the worker): each connection is ``duckdb.connect(
  path, read_only=True)`` with external access off (no file reads or writes by SQL:
  ``read_csv``, ``read_text``, ``glob``, ``COPY ... TO``, ``EXPORT``, ATTACH of a file,
  ``INSTALL``), extension auto-install / auto-load and community extensions off, Python
  replacement scans off (SQL cannot read the worker's variables by name), no spilling to a
  temp folder (a ``<db>.tmp`` folder would otherwise appear beside the database), one thread,
  ``memory_limit`` ``memory_mb`` MB, and the configuration locked (``SET`` / ``RESET`` /
  ``PRAGMA x=...`` fail). ``memory_limit`` covers DuckDB's buffer-managed memory (hash tables,
  sorts, aggregates) but not values built by some scalar functions, which the worker's cap
  stops: ``repeat('a', 500000000)``, ``lpad('x', 500000000, 'y')`` and ``range(500000000)``
  (500 MB to 4 GB in a plain connection, where ``repeat`` of 1.5 GB also ran 18 s past the
  interrupt) fail with ``"out of memory: ..."`` (errors of ``memory_limit`` itself stay ``"out
  of memory error: ..."``). Before running, the worker parses the text: exactly one
  statement, of type SELECT (which includes ``WITH``, ``FROM t``, ``VALUES``, ``DESCRIBE``,
  ``SHOW``, ``SUMMARIZE``), else ``"not authorized: ..."``; a watchdog thread interrupts the
  query once ``timeout_s`` has passed.
* **both**: one statement per call; the deadline (call start + ``timeout_s``) covers executing,
  fetching the first ``max_rows + 1`` rows and counting the rest (up to ``COUNT_CAP`` rows; a
  count cut by the cap or the deadline gives ``total_rows=None``, not an error); a statement
  whose first rows came only after the deadline (one long function call) is a ``"timeout:
  ..."`` too, never a result (while counting, such a call delays the reply by its length, at
  most to the hard deadline, and gives ``total_rows=None``); values come back as ``int`` /
  ``float`` / ``str`` / ``bool`` / None (bytes as hex, everything else as text); the
  connection stays usable after a timeout or an error; calls on one connection are
  serialised.

Not enforced: an OS sandbox around the workers (no bubblewrap, seccomp or cgroup): they run as
this user, what keeps SQL from files is the engines' setup above (SQLite's authorizer and
limits, DuckDB's configuration), the audit hook does not see C-level calls, and an engine bug
could reach whatever this user can. Memory is capped as address space, not as resident
memory, and is not charged to this process (memory an engine has freed may stay mapped, so
after a query that filled ``memory_limit`` a later one may meet the cap sooner: it then fails,
``"out of memory: ..."``; a worker grown that far is not pooled again, see above). A
database in WAL mode gets its ``-wal`` / ``-shm`` side files created by the SQLite reader (the
database file itself is not written). CPU share (each worker runs its query on one thread).

>>> import os, sqlite3, tempfile
>>> folder = tempfile.mkdtemp()
>>> db = os.path.join(folder, "demo.db")
>>> with sqlite3.connect(db) as c:
...     _ = c.execute("CREATE TABLE t(x INTEGER, name TEXT)")
...     _ = c.executemany("INSERT INTO t VALUES (?, ?)", [(i, f"n{i}") for i in range(40)])
>>> c.close()
>>> with open_readonly_sql(db, max_rows=2) as con:
...     print(con.execute("SELECT x, name FROM t WHERE x >= 30 ORDER BY x").text())
...     print(con.execute("DELETE FROM t").error)
x | name
30 | n30
31 | n31
... (10 rows total, first 2 shown)
not authorized: not authorized (this connection runs read-only SELECT statements only: ...)
>>> import shutil; shutil.rmtree(folder)
"""

from __future__ import annotations

import atexit
import dataclasses
import functools
import importlib.util
import json
import math
import numbers
import os
import selectors
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import urllib.parse

# The worker's program lives in _sandbox_sql_worker (what this side also uses is imported).
from jaxpapers.core._sandbox_sql_worker import _describe_engine, _Refused, _Timeout, worker_source

__all__ = ["SQLResult", "ReadOnlySQL", "open_readonly_sql", "close_idle_workers"]

BACKENDS = ("sqlite", "duckdb")
MAX_SQL_CHARS = 100_000  # longest statement text accepted (both backends)
COUNT_CAP = 100_000  # rows counted for total_rows before giving up (total_rows=None)
COUNT_BATCH = 64  # rows fetched at a time while counting (values can be 10 MB each)
SQLITE_MAX_LENGTH = 10_000_000  # largest string or blob SQLite may build, in bytes
SQLITE_PROGRESS_STEPS = 1000  # VM steps between deadline checks
MIN_MEMORY_MB = 16
ERROR_CHARS = 2000  # an engine message is cut to this many characters
CELL_CHARS = 200  # SQLResult.text() cuts each value to this many characters

# Workers. A worker's address space may grow by memory_mb + WORKER_MARGIN_MB MiB after its
# first connection is open (about 760 MiB then with DuckDB, 90 MiB with SQLite). The margin holds
# what memory_limit (DuckDB) and hard_heap_limit (SQLite) do not count: DuckDB's buffer pool
# was measured at about 30 MB of address space above memory_limit (256 MB), and a reply is
# built as Python values, JSON text and bytes (up to 3 x MAX_RESULT_BYTES). With the default
# memory_mb=256 that is 384 MiB: a 500 MB value, or row, cannot be built.
WORKER_MARGIN_MB = 128
WORKER_GRACE_S = 3.0  # after timeout_s, how long to wait for a reply before killing the worker
WORKER_START_TIMEOUT_S = 30.0  # how long a worker may take to open the database
WORKER_EXIT_WAIT_S = 1.0  # a worker that broke off the protocol gets this long to exit by itself
MAX_RESULT_BYTES = 16 * 2**20  # largest reply (JSON) a worker sends; more is an error
_REPLY_SLACK = 2**20  # what this process reads beyond MAX_RESULT_BYTES before giving up
_STDERR_KEEP = 4096  # bytes of the worker's stderr kept, to say why it died

# The pool of idle workers (see the module docstring).
POOL_IDLE_PER_KEY = 4  # idle workers kept per database and settings
POOL_IDLE_MAX = 8  # idle workers kept in all
# A worker whose address space has grown by more than this fraction of memory_mb +
# WORKER_MARGIN_MB since it capped itself is not pooled again (it has less room left than a new
# one). Engines keep freed memory mapped: after ExCyTIn's DuckDB queries a worker had grown by 70
# to 290 MiB (resident: about 75 MB); SQLite workers by about 10 MiB.
POOL_MAX_GROWTH = 0.5
_CLOSE_TIMEOUT_S = 5.0  # how long closing a connection in its worker may take

# SQLite: what the authorizer admits; function names it refuses even so.
_SQLITE_ALLOWED_ACTIONS = frozenset((sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ,
                                     sqlite3.SQLITE_RECURSIVE, sqlite3.SQLITE_FUNCTION))
_SQLITE_DENIED_FUNCTIONS = frozenset(("load_extension", "readfile", "writefile", "edit", "fsdir",
                                      "fts3_tokenizer"))
_SQLITE_LIMITS = ((sqlite3.SQLITE_LIMIT_ATTACHED, 0),
                  (sqlite3.SQLITE_LIMIT_LENGTH, SQLITE_MAX_LENGTH),
                  (sqlite3.SQLITE_LIMIT_SQL_LENGTH, MAX_SQL_CHARS))
_SQLITE_REFUSAL = ("this connection runs read-only SELECT statements only: no PRAGMA, ATTACH, "
                   "VACUUM, transactions, CREATE/DROP or writes, no table-valued functions such "
                   "as pragma_table_info() or json_each(), no load_extension; read the schema "
                   "from sqlite_schema")
_DUCKDB_ALLOWED_STATEMENTS = frozenset(("SELECT",))  # DuckDB StatementType names
_DUCKDB_REFUSAL = ("this connection runs one SELECT statement only (SELECT, WITH, FROM, VALUES, "
                   "DESCRIBE, SHOW, SUMMARIZE); this statement's type is {kind}")


@dataclasses.dataclass(frozen=True)
class SQLResult:
    """What one ``ReadOnlySQL.execute`` call produced.

    Attributes:
      columns: the result's column names (empty on error).
      rows: at most ``max_rows`` rows, each a tuple of ``int`` / ``float`` / ``str`` / ``bool`` /
        None (bytes as hex text; dates, decimals as floats, lists and the like as text).
      truncated: the query produced more than ``max_rows`` rows.
      total_rows: how many rows it produced, when counted; None when counting stopped at
        ``COUNT_CAP`` rows or at the deadline (and on error).
      error: None on success; ``"timeout: ..."`` when the deadline stopped it; otherwise the
        reason prefixed by its kind, e.g. ``"not authorized: ..."``, ``"invalid input: ..."``,
        ``"operational error: no such table: x"``, ``"parser error: ..."``, ``"out of memory:
        ..."`` (the worker's address-space cap, or SQLite's heap limit), ``"result too large:
        ..."``, ``"worker died: ..."``; with DuckDB also ``"out of memory error: ..."`` (its
        ``memory_limit``).
      seconds: wall time of the call.

    >>> r = SQLResult(("a", "b"), ((1, "x"), (None, "y\\nz")), False, 2, None, 0.01)
    >>> print(r.text())
    a | b
    1 | x
    NULL | y\\nz
    (2 rows)
    >>> SQLResult((), (), False, None, "timeout: stopped", 0.5).text()
    'Error: timeout: stopped'
    """

    columns: tuple[str, ...]
    rows: tuple[tuple, ...]
    truncated: bool
    total_rows: int | None
    error: str | None
    seconds: float

    @property
    def ok(self) -> bool:
        return self.error is None

    def text(self) -> str:
        """A compact plain-text rendering for an agent: a header line, one line per row (values
        joined by `` | ``, None as ``NULL``, newlines escaped, each cut to ``CELL_CHARS``), then a
        count line; or ``"Error: ..."``."""
        if self.error is not None:
            return f"Error: {self.error}"
        if not self.columns:
            return "(no result columns)"
        lines = [" | ".join(_cell(c) for c in self.columns)]
        lines += [" | ".join(_cell(v) for v in row) for row in self.rows]
        shown = len(self.rows)
        if not self.truncated:
            lines.append(f"({shown} row{'' if shown == 1 else 's'})")
        elif self.total_rows is not None:
            lines.append(f"... ({self.total_rows} rows total, first {shown} shown)")
        else:
            lines.append(f"... (more than {shown} rows; not all counted, first {shown} shown)")
        return "\n".join(lines)


def _cell(value) -> str:
    s = "NULL" if value is None else str(value)
    s = s.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")
    return s if len(s) <= CELL_CHARS else s[:CELL_CHARS - 3] + "..."


class ReadOnlySQL:
    """A read-only connection for untrusted SQL, in a worker process; made by
    ``open_readonly_sql``.

    ``execute(sql)`` never raises; ``close()`` is idempotent; usable as a context manager.
    Attributes: ``backend``, ``path`` (absolute), ``timeout_s``, ``max_rows``, ``memory_mb``.
    """

    def __init__(self, engine, *, backend: str, path: str, timeout_s: float, max_rows: int,
                 memory_mb: int):
        self._engine = engine
        self._lock = threading.Lock()
        self.backend = backend
        self.path = path
        self.timeout_s = timeout_s
        self.max_rows = max_rows
        self.memory_mb = memory_mb

    def __repr__(self) -> str:
        state = "closed" if self._engine is None else "open"
        return (f"ReadOnlySQL(backend={self.backend!r}, path={self.path!r}, "
                f"timeout_s={self.timeout_s}, max_rows={self.max_rows}, {state})")

    def __enter__(self) -> ReadOnlySQL:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def closed(self) -> bool:
        return self._engine is None

    def execute(self, sql: str) -> SQLResult:
        """Run one read-only statement; see the module docstring for what is refused.

        Returns:
          A ``SQLResult`` with at most ``max_rows`` rows; its ``error`` is set (and nothing is
          raised) for a bad argument, a refused or failing statement, a closed connection, or
          a timeout.
        """
        start = time.monotonic()
        try:
            with self._lock:
                if self._engine is None:
                    raise _Refused("closed: the connection is closed")
                if not isinstance(sql, str):
                    raise _Refused(f"invalid input: sql must be a str, got {type(sql).__name__}")
                if len(sql) > MAX_SQL_CHARS:
                    raise _Refused(f"invalid input: the statement has {len(sql)} characters, "
                                   f"more than {MAX_SQL_CHARS}")
                if not sql.strip():
                    raise _Refused("invalid input: empty statement")
                try:
                    sql.encode("utf-8")
                except UnicodeEncodeError as err:
                    raise _Refused(f"invalid input: sql is not encodable as UTF-8 ({err})"
                                   ) from None
                columns, rows, truncated, total = self._engine.run(
                    sql, start + self.timeout_s, self.max_rows)
        except _Refused as err:
            return _failed(str(err), start)
        except _Timeout as err:
            note = f" ({err})" if str(err) else ""
            return _failed(f"timeout: the query ran past timeout_s={self.timeout_s:g} s and was "
                           f"stopped after {time.monotonic() - start:.2f} s{note}", start)
        except Exception as err:  # the engine's own errors, and anything unforeseen
            return _failed(_describe_engine(err), start)
        return SQLResult(columns, rows, truncated, total, None, time.monotonic() - start)

    def close(self) -> None:
        """Close the connection (idempotent); later ``execute`` calls return an error result.
        Its worker closes the engine connection and goes back to the pool of idle workers, or
        is ended (killed and reaped) when it may not be pooled; see the module docstring."""
        with self._lock:
            engine, self._engine = self._engine, None
        if engine is not None:
            engine.close()


def _failed(error: str, start: float) -> SQLResult:
    if len(error) > ERROR_CHARS:
        error = error[:ERROR_CHARS - 3] + "..."
    return SQLResult((), (), False, None, error, time.monotonic() - start)


# ----------------------------------------------------------------------------- this process's side

def _duckdb_config(memory_mb: int) -> dict:
    return {
        "enable_external_access": False,
        "autoload_known_extensions": False,
        "autoinstall_known_extensions": False,
        "allow_community_extensions": False,
        "allow_unsigned_extensions": False,
        "allow_persistent_secrets": False,
        "python_enable_replacements": False,
        "python_scan_all_frames": False,
        "temp_directory": "",
        "threads": 1,
        "memory_limit": f"{memory_mb}MB",
        "lock_configuration": True,  # last: nothing can be changed after it
    }


@functools.cache
def _duckdb_home() -> str:
    """The folder this process would import ``duckdb`` from (without importing it)."""
    spec = importlib.util.find_spec("duckdb")
    if spec is None or not spec.origin:
        raise ImportError("the duckdb backend needs the duckdb package (pip install duckdb)")
    return os.path.dirname(os.path.dirname(spec.origin))


def _worker_settings(backend: str, path: str, memory_mb: int) -> dict:
    """What a worker for ``path`` is started with (JSON; with ``sys.executable`` also its pool
    key): everything but the per-query values."""
    settings = {"backend": backend, "path": path, "memory_mb": memory_mb,
                "margin_mb": WORKER_MARGIN_MB, "max_result_bytes": MAX_RESULT_BYTES}
    if backend == "duckdb":
        settings.update(duckdb_home=_duckdb_home(), config=_duckdb_config(memory_mb),
                        allowed_statements=sorted(_DUCKDB_ALLOWED_STATEMENTS),
                        refusal=_DUCKDB_REFUSAL)
        return settings
    settings.update(uri="file:" + urllib.parse.quote(path) + "?mode=ro",
                    pragmas=["PRAGMA query_only = 1", "PRAGMA temp_store = MEMORY",
                             f"PRAGMA hard_heap_limit = {memory_mb * 2**20}"],
                    limits=[list(pair) for pair in _SQLITE_LIMITS],
                    allowed_actions=sorted(_SQLITE_ALLOWED_ACTIONS),
                    denied_functions=sorted(_SQLITE_DENIED_FUNCTIONS),
                    progress_steps=SQLITE_PROGRESS_STEPS, refusal=_SQLITE_REFUSAL)
    return settings


def _pool_key(settings: dict) -> str:
    return json.dumps([sys.executable, settings], sort_keys=True)


class _WorkerLost(Exception):
    """The worker died, or broke the protocol; the message says how."""


class _Deadline(Exception):
    """No reply by the hard deadline."""


class _Worker:
    """This process's side of one worker process: start it, exchange lines, end it. An ended
    worker stays ended (its connection gets another one)."""

    def __init__(self, settings: dict):
        self.settings = settings
        self.key = _pool_key(settings)
        self.name = "DuckDB" if settings["backend"] == "duckdb" else "SQLite"
        self.owner = os.getpid()  # the process that started it (not a forked copy)
        self._proc = None
        self._reply = bytearray()  # read from the worker, not yet a whole line
        self._stderr = bytearray()  # the end of what the worker wrote to stderr
        self.size_bytes = None  # its address-space size when it capped it
        self.address_space_bytes = None  # the cap
        self.connection = None  # the number of its first connection
        self._start()

    @property
    def pid(self) -> int | None:
        """The worker's process id (None once ended)."""
        return None if self._proc is None else self._proc.pid

    @property
    def ended(self) -> bool:
        return self._proc is None

    def _spawn(self, source: str, opening: str) -> dict:
        """Start ``python -I -c source settings`` and return its first reply (``opening``:
        what the worker was doing when it missed the start deadline, for the message)."""
        if not sys.executable:
            raise OSError(f"no Python interpreter to start the {self.name} worker with "
                          f"(sys.executable is empty)")
        self._proc = subprocess.Popen(
            [sys.executable, "-I", "-c", source, json.dumps(self.settings)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            close_fds=True, cwd="/", env={"PATH": os.environ.get("PATH", os.defpath)},
            start_new_session=True)
        try:
            for pipe in (self._proc.stdin, self._proc.stdout, self._proc.stderr):
                os.set_blocking(pipe.fileno(), False)
            return self._read_reply(b"", time.monotonic() + WORKER_START_TIMEOUT_S)
        except _Deadline:
            self.end()
            raise OSError(f"the {self.name} worker did not {opening} within "
                          f"{WORKER_START_TIMEOUT_S:g} s") from None
        except _WorkerLost as err:
            raise OSError(f"the {self.name} worker did not start: {self.end(str(err))}"
                          ) from None
        except BaseException:
            self.end()
            raise

    def _start(self) -> None:
        """Start the worker and read its first line. Raises ImportError (no duckdb there),
        ``_Refused`` (the engine cannot open the file; the message describes it) or OSError
        (no worker)."""
        first = self._spawn(worker_source(), "open the database")
        if first.get("ready"):
            self.size_bytes = first.get("size_bytes")
            self.address_space_bytes = first.get("address_space_bytes")
            self.connection = first.get("connection")
            return
        self.end()
        error = str(first.get("startup_error"))
        if first.get("kind") == "import":
            raise ImportError(f"the {self.name} worker cannot import its engine: {error}")
        raise _Refused(error)

    def request(self, message: dict, deadline: float) -> dict:
        """Send ``message``, return the reply. Raises ``_WorkerLost`` or ``_Deadline``."""
        if self._proc is None:
            raise _WorkerLost("it was ended")
        return self._read_reply(json.dumps(message).encode("ascii") + b"\n", deadline)

    def vm_bytes(self) -> int | None:
        """The worker's address-space size now (``VmSize``), or None if unknown."""
        try:
            with open(f"/proc/{self._proc.pid}/status") as f:
                for line in f:
                    if line.startswith("VmSize:"):
                        return int(line.split()[1]) * 1024
        except (AttributeError, OSError, ValueError):
            pass
        return None

    def _read_reply(self, request: bytes, deadline: float) -> dict:
        """Write ``request`` to the worker and return its next line, decoded. Raises
        ``_WorkerLost`` or ``_Deadline`` (``deadline`` passed)."""
        proc = self._proc
        todo = memoryview(request)
        with selectors.DefaultSelector() as sel:
            sel.register(proc.stdout, selectors.EVENT_READ)
            sel.register(proc.stderr, selectors.EVENT_READ)
            if todo:
                sel.register(proc.stdin, selectors.EVENT_WRITE)
            while True:
                end = self._reply.find(b"\n")
                if end >= 0:
                    line = bytes(self._reply[:end])
                    del self._reply[:end + 1]
                    break
                if len(self._reply) > MAX_RESULT_BYTES + _REPLY_SLACK:
                    raise _WorkerLost(f"it sent a reply longer than "
                                      f"{MAX_RESULT_BYTES + _REPLY_SLACK} bytes")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise _Deadline()
                for key, _ in sel.select(left):
                    try:
                        if key.fileobj is proc.stdin:
                            todo = todo[os.write(key.fd, todo[:2**16]):]
                            if not todo:
                                sel.unregister(proc.stdin)
                            continue
                        data = os.read(key.fd, 2**16)
                    except BlockingIOError:
                        continue
                    except OSError as err:  # BrokenPipeError: it is gone
                        raise _WorkerLost(f"its pipe failed ({err})") from None
                    if key.fileobj is proc.stderr:
                        if not data:
                            sel.unregister(proc.stderr)
                        self._stderr += data
                        del self._stderr[:-_STDERR_KEEP]
                    elif data:
                        self._reply += data
                    else:
                        raise _WorkerLost("it closed its output")
        try:
            reply = json.loads(line)
        except ValueError:
            raise _WorkerLost(f"it sent an unreadable line ({line[:80]!r})") from None
        if not isinstance(reply, dict):
            raise _WorkerLost(f"it sent {type(reply).__name__}, not an object")
        return reply

    def end(self, trouble: str | None = None) -> str:
        """Kill the worker (its process group), reap it and close its pipes; returns how it
        ended. With ``trouble`` (what went wrong), it first gets ``WORKER_EXIT_WAIT_S`` to exit
        by itself, and its last line of stderr joins the answer."""
        proc, self._proc = self._proc, None
        if proc is None:
            return trouble or "no worker"
        if self.owner != os.getpid():  # a forked copy: the worker is the original's to end
            for pipe in (proc.stdin, proc.stdout, proc.stderr):
                try:
                    pipe.close()
                except OSError:
                    pass
            return trouble or "left to the process that started it"
        if trouble is not None:
            try:
                proc.wait(WORKER_EXIT_WAIT_S)
            except subprocess.TimeoutExpired:
                pass
        if proc.returncode is None:  # not reaped yet, so its pid is still its own
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # start_new_session: group id = pid
            except OSError:
                pass
            try:
                proc.kill()
            except OSError:
                pass
        proc.wait()
        try:
            while tail := os.read(proc.stderr.fileno(), 2**16):
                self._stderr += tail
                del self._stderr[:-_STDERR_KEEP]
        except OSError:
            pass
        for pipe in (proc.stdin, proc.stdout, proc.stderr):
            try:
                pipe.close()
            except OSError:
                pass
        rc = proc.returncode
        if rc < 0:
            try:
                how = f"killed by signal {-rc} ({signal.Signals(-rc).name})"
            except ValueError:
                how = f"killed by signal {-rc}"
        else:
            how = f"exited with status {rc}"
        lines = bytes(self._stderr).decode("utf-8", "replace").strip().splitlines()
        last = f"; its last words: {lines[-1][-300:]}" if lines else ""
        return f"{trouble}: the {self.name} worker {how}{last}" if trouble else how

    def __del__(self):
        try:
            self.end()
        except Exception:  # interpreter shutdown
            pass


class _IdlePool:
    """This process's idle workers, least recently pooled first (see the module docstring)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._idle: list[_Worker] = []
        self._pid = os.getpid()

    def _check_process(self) -> None:
        """With the lock held: in a forked copy of the process that pooled them, forget the
        workers (closing only this copy's pipes; they stay its parent's)."""
        if self._pid != os.getpid():
            stale, self._idle, self._pid = self._idle, [], os.getpid()
            for worker in stale:
                worker.end()

    def after_fork_in_child(self) -> None:
        self._lock = threading.Lock()  # a thread that held it is not in the child
        with self._lock:
            self._check_process()

    def take(self, key: str) -> _Worker | None:
        """The most recently pooled idle worker with pool key ``key``, out of the pool."""
        with self._lock:
            self._check_process()
            for i in range(len(self._idle) - 1, -1, -1):
                if self._idle[i].key == key:
                    return self._idle.pop(i)
        return None

    def put(self, worker: _Worker) -> None:
        """Pool ``worker``; end the least recently pooled ones beyond the bounds."""
        ended = []
        with self._lock:
            self._check_process()
            if worker.owner != self._pid:
                ended.append(worker)
            else:
                self._idle.append(worker)
                same = [w for w in self._idle if w.key == worker.key]
                for old in same[:max(0, len(same) - POOL_IDLE_PER_KEY)]:
                    self._idle.remove(old)
                    ended.append(old)
                while len(self._idle) > max(0, POOL_IDLE_MAX):
                    ended.append(self._idle.pop(0))
        for old in ended:
            old.end()

    def pids(self) -> list[int]:
        """The idle workers' process ids, least recently pooled first."""
        with self._lock:
            self._check_process()
            return [w.pid for w in self._idle]

    def clear(self) -> int:
        with self._lock:
            self._check_process()
            idle, self._idle = self._idle, []
        for worker in idle:
            worker.end()
        return len(idle)


_POOL = _IdlePool()
os.register_at_fork(after_in_child=_POOL.after_fork_in_child)


def close_idle_workers() -> int:
    """End (kill and reap) this process's idle pooled workers; returns how many. Workers of
    open connections are left alone. Also runs at this process's exit (``atexit``)."""
    return _POOL.clear()


atexit.register(close_idle_workers)


def _checkout(settings: dict) -> tuple[_Worker, int]:
    """A worker for ``settings`` with a fresh connection open, and that connection's number:
    the pool's most recently pooled idle worker with these settings, or else a new one."""
    key = _pool_key(settings)
    while (worker := _POOL.take(key)) is not None:
        try:
            reply = worker.request({"op": "open"}, time.monotonic() + WORKER_START_TIMEOUT_S)
        except (_WorkerLost, _Deadline):  # it died while idle: try the next one
            worker.end()
            continue
        except BaseException:
            worker.end()
            raise
        number = reply.get("opened")
        if isinstance(number, int) and not isinstance(number, bool):
            return worker, number
        worker.end()  # it cannot open the database (now): a new worker says why, or opens it
        break
    worker = _Worker(settings)
    return worker, worker.connection


def _release(worker: _Worker) -> None:
    """Have ``worker`` close its connection and pool it, or end it (see the module
    docstring)."""
    if worker.ended or worker.owner != os.getpid():
        worker.end()
        return
    try:
        reply = worker.request({"op": "close"}, time.monotonic() + _CLOSE_TIMEOUT_S)
    except (_WorkerLost, _Deadline):
        worker.end()
        return
    except BaseException:
        worker.end()
        raise
    size = worker.vm_bytes()
    room = (worker.settings["memory_mb"] + worker.settings["margin_mb"]) * 2**20
    if (reply.get("closed") is not True or size is None or worker.size_bytes is None
            or size > worker.size_bytes + POOL_MAX_GROWTH * room):
        worker.end()
        return
    _POOL.put(worker)


class _WorkerEngine:
    """A connection's side: a worker with one fresh engine connection open in it (see
    ``_checkout``); a call after one that killed the worker, or found it dead, gets another
    worker first (with a fresh connection)."""

    def __init__(self, settings: dict):
        self._settings = settings
        self._name = "DuckDB" if settings["backend"] == "duckdb" else "SQLite"
        self._worker, self.connection = _checkout(settings)

    @property
    def pid(self) -> int | None:
        """The worker's process id (None between a kill and the next call)."""
        return None if self._worker is None else self._worker.pid

    @property
    def address_space_bytes(self) -> int | None:
        return None if self._worker is None else self._worker.address_space_bytes

    def _drop(self, trouble: str | None = None) -> str:
        """End the worker; returns how it ended (see ``_Worker.end``)."""
        worker, self._worker = self._worker, None
        return (trouble or "no worker") if worker is None else worker.end(trouble)

    def run(self, sql: str, deadline: float, max_rows: int) -> tuple:
        if self._worker is not None and self._worker.owner != os.getpid():  # a forked copy
            self._drop()
        if self._worker is None:
            began = time.monotonic()
            try:
                self._worker, self.connection = _checkout(self._settings)
            except Exception as err:
                raise _Refused(f"worker died: a new {self._name} worker did not start: {err}"
                               ) from None
            deadline += time.monotonic() - began  # getting it does not count as query time
        request = {"op": "query", "sql": sql, "max_rows": max_rows,
                   "deadline_s": max(0.0, deadline - time.monotonic()),
                   "count_cap": COUNT_CAP, "count_batch": COUNT_BATCH}
        try:
            reply = self._worker.request(request, deadline + WORKER_GRACE_S)
        except _Deadline:
            self._drop()
            raise _Timeout(f"no reply {WORKER_GRACE_S:g} s after the deadline: the {self._name} "
                           f"worker was killed, the next call gets another one") from None
        except _WorkerLost as err:
            raise _Refused(f"worker died: {self._drop(str(err))}; the next call gets another "
                           f"{self._name} worker") from None
        except BaseException:  # e.g. KeyboardInterrupt: the reply would come out of step
            self._drop()
            raise
        if reply.get("timed_out"):
            raise _Timeout()
        if reply.get("error") is not None:
            raise _Refused(str(reply["error"]))
        return (tuple(reply["columns"]), tuple(tuple(row) for row in reply["rows"]),
                bool(reply["truncated"]), reply["total_rows"])

    def close(self) -> None:
        worker, self._worker = self._worker, None
        if worker is not None:
            _release(worker)


# ----------------------------------------------------------------------------- opening

def open_readonly_sql(path, *, backend: str = "sqlite", timeout_s: float = 30.0,
                      max_rows: int = 15, memory_mb: int = 256) -> ReadOnlySQL:
    """Open the existing database file ``path`` read-only for untrusted SQL.

    Args:
      path: a database file (str or path-like); it must exist and is never created.
      backend: ``"sqlite"`` or ``"duckdb"``.
      timeout_s: seconds each ``execute`` call may take, fetching and counting included (finite,
        > 0).
      max_rows: rows returned per call (int >= 1); more are counted, up to ``COUNT_CAP``.
      memory_mb: with ``WORKER_MARGIN_MB``, the MiB the worker's address space may grow by
        (int >= 16); also DuckDB's ``memory_limit`` in MB, or SQLite's ``hard_heap_limit`` in
        MiB.

    Returns:
      A ``ReadOnlySQL`` (close it, or use it as a context manager: that returns its worker to
      the pool of idle workers).

    Raises:
      ValueError: a bad argument (the message names it).
      FileNotFoundError: ``path`` does not exist; IsADirectoryError: it is a folder.
      OSError: the engine cannot open it (not a database of that backend), or a worker process
        cannot start or cannot cap its memory.
      ImportError: DuckDB is not installed (DuckDB only).
    """
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, numbers.Real):
        raise ValueError(f"timeout_s must be a finite number of seconds > 0, got {timeout_s!r}")
    timeout_s = float(timeout_s)
    if not (math.isfinite(timeout_s) and timeout_s > 0):
        raise ValueError(f"timeout_s must be a finite number of seconds > 0, got {timeout_s!r}")
    if isinstance(max_rows, bool) or not isinstance(max_rows, numbers.Integral) or max_rows < 1:
        raise ValueError(f"max_rows must be an int >= 1, got {max_rows!r}")
    if (isinstance(memory_mb, bool) or not isinstance(memory_mb, numbers.Integral)
            or memory_mb < MIN_MEMORY_MB):
        raise ValueError(f"memory_mb must be an int >= {MIN_MEMORY_MB}, got {memory_mb!r}")
    try:
        path = os.path.abspath(os.fspath(path))
    except TypeError:
        raise ValueError(f"path must be a str or path-like, got {type(path).__name__}") from None
    if not isinstance(path, str):
        raise ValueError(f"path must be a str path, got {path!r}")
    if not os.path.exists(path):
        raise FileNotFoundError(f"no database at {path!r} (it is never created)")
    if os.path.isdir(path):
        raise IsADirectoryError(f"{path!r} is a folder, not a database file")
    try:
        engine = _WorkerEngine(_worker_settings(backend, path, int(memory_mb)))
    except ImportError:
        raise
    except _Refused as err:  # the worker's description
        raise OSError(f"cannot open {path!r} as a read-only {backend} database: {err}"
                      ) from None
    except Exception as err:
        raise OSError(f"cannot open {path!r} as a read-only {backend} database: "
                      f"{_describe_engine(err)}") from err
    return ReadOnlySQL(engine, backend=backend, path=path, timeout_s=timeout_s,
                       max_rows=int(max_rows), memory_mb=int(memory_mb))
