"""Read-only SQL for untrusted (agent-written) queries: SQLite in this process, DuckDB in a worker.

``open_readonly_sql(path, backend=...)`` opens an existing database file and returns a
``ReadOnlySQL``; its ``execute(sql)`` runs one statement and returns a frozen ``SQLResult`` (it
never raises: a refused, failed or timed-out query is a result whose ``error`` says why).
Re-exported by ``jaxpapers.core.sandbox``; see its module docstring for the process sandbox
(``run``), which this module does not use.

What is enforced, per backend:

* **SQLite** (the standard library's ``sqlite3``, in this process): the file is opened through a
  ``mode=ro`` URI (its existence checked first, so a missing path is never created) with
  ``PRAGMA query_only=1``; then an authorizer admits only SELECT, column reads, recursive CTEs
  and function calls, and refuses the functions ``load_extension``, ``readfile``, ``writefile``,
  ``edit``, ``fsdir`` and ``fts3_tokenizer``. Everything else is refused at prepare time, ``"not
  authorized: ..."``: every PRAGMA (so ``query_only`` cannot be turned off), ATTACH / DETACH,
  VACUUM (and VACUUM INTO), BEGIN / SAVEPOINT, CREATE / DROP / ALTER (temp objects too), INSERT /
  UPDATE / DELETE, ANALYZE, and table-valued functions such as ``pragma_table_info()`` and
  ``json_each()`` (their setup needs a schema update). Read the schema from ``sqlite_schema``
  (``sqlite_master``) instead. Limits: no attached databases, values of at most
  ``SQLITE_MAX_LENGTH`` bytes (10 MB: ``randomblob`` or ``zeroblob`` of 500 MB fail at once;
  ``printf`` stops growing its text at the limit and returns NULL), statements of at most
  ``MAX_SQL_CHARS`` characters; extension loading off where the build has it. A progress handler
  (every ``SQLITE_PROGRESS_STEPS`` VM steps) stops the statement once ``timeout_s`` has passed.
  ``mode=ro`` alone is not a sandbox: there, ATTACH of a new path creates and writes that file,
  VACUUM INTO copies the database out, PRAGMA writable_schema / query_only are accepted and
  ``randomblob(1e9)`` allocates 1 GB (the tests run each of these against a plain ``mode=ro``
  connection to show it).
* **DuckDB** (``duckdb``, imported only in the worker): each connection has its own worker
  process (Linux only), started as ``python -I -c <worker_source()>`` with only ``PATH`` in its
  environment, ``/`` as its folder, in a session of its own; it never imports ``jaxpapers``.
  The worker opens the file with ``duckdb.connect(path, read_only=True)`` (the path is checked
  in this process first, so a missing one is never created), with external access off (no file
  reads or writes by SQL: ``read_csv``, ``read_text``, ``glob``, ``COPY ... TO``, ``EXPORT``,
  ATTACH of a file, ``INSTALL``), extension auto-install / auto-load and community extensions
  off, Python replacement scans off (SQL cannot read the worker's variables by name), no
  spilling to a temp folder (a ``<db>.tmp`` folder would otherwise appear beside the database),
  one thread, ``memory_limit`` ``memory_mb`` MB, and the configuration locked (``SET`` /
  ``RESET`` / ``PRAGMA x=...`` fail). Then it caps its own address space (``RLIMIT_AS``) at its
  size at that moment plus ``memory_mb + WORKER_MARGIN_MB`` MiB, and core dumps at 0 bytes:
  ``memory_limit`` covers DuckDB's buffer-managed memory (hash tables, sorts, aggregates) but not
  values built by some scalar functions, which the cap stops: ``repeat('a', 500000000)``,
  ``lpad('x', 500000000, 'y')`` and ``range(500000000)`` (500 MB to 4 GB in a plain connection,
  where ``repeat`` of 1.5 GB also ran 18 s past the interrupt) fail with ``"out of memory: ..."``
  and the worker lives on (errors of ``memory_limit`` itself stay ``"out of memory error:
  ..."``). Before running, the worker parses the text: exactly one statement, of type SELECT
  (which includes ``WITH``, ``FROM t``, ``VALUES``, ``DESCRIBE``, ``SHOW``, ``SUMMARIZE``),
  else ``"not authorized: ..."``; a watchdog thread interrupts the query once
  ``timeout_s`` has passed. This process waits for the reply at most ``timeout_s +
  WORKER_GRACE_S``: a worker that has not answered by then (stuck in a function that does not
  see the interrupt) is killed (``"timeout: ..."``), one found dead is cleaned up (``"worker
  died: ..."``), and the next call starts a new worker. A reply of more than
  ``MAX_RESULT_BYTES`` of JSON is not sent (``"result too large: ..."``). A worker ends with its
  connection (``close``, the context exit, or garbage collection: killed and reaped) or, at the
  latest, about a second after this process has gone. Starting one takes about 0.2 s; an idle
  one holds about 70 MB.
* **both**: one statement per call; the deadline (call start + ``timeout_s``) covers executing,
  fetching the first ``max_rows + 1`` rows and counting the rest (up to ``COUNT_CAP`` rows; a
  count cut by the cap or the deadline gives ``total_rows=None``, not an error); values come back
  as ``int`` / ``float`` / ``str`` / ``bool`` / None (bytes as hex, everything else as text); the
  connection stays usable after a timeout or an error; calls on one connection are serialised.

Not enforced: for SQLite, the memory of this process (there is no per-connection heap cap, only
the 10 MB value limit; a row may hold many such values, and its sorter may use temp files; run
the query in a child process, e.g. through ``sandbox.run``, where this matters), the deadline
inside one SQLite function call (``printf('%.*c', 2000000000, 'x')`` loops about 13 s with its
memory capped at 10 MB, then returns NULL; the deadline is checked between VM steps), temp-file
disk use by its sorter (bounded by the deadline only), and a database in WAL mode gets its
``-wal`` / ``-shm`` side files created by the reader (the database file itself is not written).
For DuckDB: the worker runs as this user without an OS sandbox (no bubblewrap, seccomp or
cgroup): what keeps SQL from files is DuckDB's own configuration above, and a DuckDB bug could
reach whatever this user can; its memory is capped as address space, not as resident memory,
and is not charged to this process (memory DuckDB has freed stays mapped, so after a query
that filled ``memory_limit`` a later one may meet the cap sooner: it then fails, ``"out of
memory: ..."``). For both: CPU share (SQLite runs on the calling thread, DuckDB on one thread
of its worker).

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

import dataclasses
import datetime
import decimal
import functools
import importlib.util
import inspect
import json
import math
import numbers
import os
import re
import selectors
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import urllib.parse
import uuid

__all__ = ["SQLResult", "ReadOnlySQL", "open_readonly_sql"]

BACKENDS = ("sqlite", "duckdb")
MAX_SQL_CHARS = 100_000  # longest statement text accepted (both backends)
COUNT_CAP = 100_000  # rows counted for total_rows before giving up (total_rows=None)
COUNT_BATCH = 64  # rows fetched at a time while counting (values can be 10 MB each)
SQLITE_MAX_LENGTH = 10_000_000  # largest string or blob SQLite may build, in bytes
SQLITE_PROGRESS_STEPS = 1000  # VM steps between deadline checks
MIN_MEMORY_MB = 16
ERROR_CHARS = 2000  # an engine message is cut to this many characters
CELL_CHARS = 200  # SQLResult.text() cuts each value to this many characters

# DuckDB worker. Its address space may grow by memory_mb + WORKER_MARGIN_MB MiB after opening
# the database (about 700 MB then). The margin holds what memory_limit does not count: DuckDB's
# buffer pool was measured at about 30 MB of address space above memory_limit (256 MB), and a
# reply is built as Python values, JSON text and bytes (up to 3 x MAX_RESULT_BYTES). With the
# default memory_mb=256 that is 384 MiB: a 500 MB value cannot be built.
WORKER_MARGIN_MB = 128
WORKER_GRACE_S = 3.0  # after timeout_s, how long to wait for a reply before killing the worker
WORKER_START_TIMEOUT_S = 30.0  # how long a worker may take to open the database
WORKER_EXIT_WAIT_S = 1.0  # a worker that broke off the protocol gets this long to exit by itself
MAX_RESULT_BYTES = 16 * 2**20  # largest reply (JSON) a worker sends; more is an error
_REPLY_SLACK = 2**20  # what this process reads beyond MAX_RESULT_BYTES before giving up
_STDERR_KEEP = 4096  # bytes of the worker's stderr kept, to say why it died

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
        ``"operational error: no such table: x"``, ``"parser error: ..."``; with DuckDB also
        ``"out of memory: ..."`` (its worker's address-space cap), ``"out of memory error:
        ..."`` (DuckDB's ``memory_limit``), ``"result too large: ..."`` and ``"worker died:
        ..."``.
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


class _Refused(Exception):
    """A statement refused or failed with a ready-made description: the message is the whole
    error (also raised in the DuckDB worker, and for what the worker reported)."""


class _Timeout(Exception):
    """The deadline stopped the statement before its first rows were fetched; a message, if
    any, is added to the error in parentheses."""


class ReadOnlySQL:
    """A read-only connection for untrusted SQL; made by ``open_readonly_sql``.

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
            return _failed(_describe(err), start)
        return SQLResult(columns, rows, truncated, total, None, time.monotonic() - start)

    def close(self) -> None:
        """Close the connection (idempotent); later ``execute`` calls return an error result.
        With DuckDB this also ends (kills and reaps) its worker process."""
        with self._lock:
            engine, self._engine = self._engine, None
        if engine is not None:
            engine.close()


def _failed(error: str, start: float) -> SQLResult:
    if len(error) > ERROR_CHARS:
        error = error[:ERROR_CHARS - 3] + "..."
    return SQLResult((), (), False, None, error, time.monotonic() - start)


def _describe(err: Exception) -> str:
    """``kind: message`` for an engine's exception."""
    msg = str(err).strip() or type(err).__name__
    if isinstance(err, sqlite3.Error) or isinstance(err, sqlite3.Warning):
        if msg in ("not authorized", "authorization denied"):
            return f"not authorized: {msg} ({_SQLITE_REFUSAL})"
        if msg.startswith("not authorized"):  # "not authorized to use function: load_extension"
            return f"not authorized: {msg}"
        if "one statement at a time" in msg:
            return f"invalid input: {msg}"
        return f"{_words(type(err).__name__)}: {msg}"
    return _describe_engine(err)


# From here to the SQLite section, the functions also run in the DuckDB worker (as do
# ``_Refused``, ``_Timeout`` and the worker's own code; see ``worker_source``): they may use
# only the modules that ``_WORKER_HEADER`` imports.

def _describe_engine(err: Exception) -> str:
    """``kind: message`` for a DuckDB (or any non-SQLite) exception."""
    msg = str(err).strip() or type(err).__name__
    m = re.match(r"([A-Za-z][A-Za-z ]*?) Error: (.*)", msg, re.DOTALL)
    if m:  # DuckDB: "Catalog Error: Table with name x does not exist!"
        return f"{m.group(1).lower()} error: {m.group(2)}"
    return f"{_words(type(err).__name__)}: {msg}"


def _words(class_name: str) -> str:
    """``OperationalError`` -> ``operational error``; ``ParserException`` -> ``parser error``."""
    name = re.sub(r"(Exception|Error)$", "", class_name) or class_name
    return re.sub(r"(?<=[a-z])(?=[A-Z])", " ", name).lower() + " error"


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
    first ``max_rows + 1`` rows propagates (``_Timeout`` when the deadline caused it); while
    counting further (``count_batch`` rows at a time, up to ``count_cap``), a deadline stop
    gives total None and any other error propagates."""
    try:
        first = fetchmany(max_rows + 1)
    except Exception:
        if timed_out():
            raise _Timeout() from None
        raise
    rows = tuple(tuple(_value(v) for v in row) for row in first[:max_rows])
    if len(first) <= max_rows:
        return rows, False, len(first)
    n = len(first)
    try:
        while n <= count_cap:
            if time.monotonic() >= deadline:
                return rows, True, None
            batch = fetchmany(count_batch)
            if not batch:
                return rows, True, n
            n += len(batch)
    except Exception:
        if timed_out():
            return rows, True, None
        raise
    return rows, True, None


# ----------------------------------------------------------------------------- SQLite

def _sqlite_authorizer(action, arg1, arg2, db_name, trigger) -> int:
    if action not in _SQLITE_ALLOWED_ACTIONS:
        return sqlite3.SQLITE_DENY
    if action == sqlite3.SQLITE_FUNCTION and (arg2 or "").lower() in _SQLITE_DENIED_FUNCTIONS:
        return sqlite3.SQLITE_DENY
    return sqlite3.SQLITE_OK


def _decode_text(raw: bytes) -> str:
    return raw.decode("utf-8", "replace")


class _SQLiteEngine:
    def __init__(self, path: str):
        self._deadline = math.inf
        self._timed_out = False
        uri = "file:" + urllib.parse.quote(path) + "?mode=ro"
        conn = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)
        try:
            conn.text_factory = _decode_text
            if hasattr(conn, "enable_load_extension"):  # absent when built without it
                conn.enable_load_extension(False)
            # before the authorizer, which refuses every PRAGMA from then on
            conn.execute("PRAGMA query_only = 1")
            for limit, value in _SQLITE_LIMITS:
                conn.setlimit(limit, value)
            conn.set_authorizer(_sqlite_authorizer)
            conn.set_progress_handler(self._progress, SQLITE_PROGRESS_STEPS)
            conn.execute("SELECT count(*) FROM sqlite_schema").fetchall()  # not a database?
        except BaseException:
            conn.close()
            raise
        self._conn = conn

    def _progress(self) -> int:
        if time.monotonic() >= self._deadline:
            self._timed_out = True
            return 1  # abort the statement: sqlite3.OperationalError("interrupted")
        return 0

    def run(self, sql: str, deadline: float, max_rows: int) -> tuple:
        self._timed_out = False
        self._deadline = deadline
        cur = None
        try:
            try:
                cur = self._conn.execute(sql)
            except Exception:
                if self._timed_out:
                    raise _Timeout() from None
                raise
            if cur.description is None:  # only comments or ';' (nothing else passes the authorizer)
                raise _Refused("invalid input: empty statement")
            columns = tuple(d[0] for d in cur.description)
            rows, truncated, total = _collect(cur.fetchmany, max_rows, deadline,
                                              lambda: self._timed_out, COUNT_CAP, COUNT_BATCH)
            return columns, rows, truncated, total
        finally:
            self._deadline = math.inf
            if cur is not None:
                cur.close()

    def close(self) -> None:
        self._conn.close()


# ----------------------------------------------------------------------------- DuckDB

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


# The worker's side. Protocol, one JSON object per line: the worker's first line is
# {"ready": true, "address_space_bytes": cap} or {"startup_error": description, "kind": "import"
# | "open"}; then for each request {"sql", "max_rows", "deadline_s", "count_cap", "count_batch"}
# one reply {"columns", "rows", "truncated", "total_rows", "error": null} or {"error": "kind:
# ..."} or {"timed_out": true}. The worker ends at the end of its input.

class _Watchdog:
    """In the worker: a thread, started before the address space is capped, that interrupts the
    armed cursor at its deadline, and ends the worker once its parent has gone (checked every
    second, also while DuckDB runs a function that does not see interrupts)."""

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
                if os.getppid() != self._parent:
                    os._exit(1)
                left = 1.0 if self._cursor is None else self._deadline - time.monotonic()
                if left > 0:
                    self._cond.wait(min(left, 1.0))
                    continue
                self.fired = True
                try:
                    self._cursor.interrupt()
                except Exception:  # the parent's hard deadline still applies
                    pass
                self._cursor = None


def _cap_address_space(extra_mb: int) -> int:
    """In the worker: no core dumps, and an address-space cap (soft and hard) of the current
    size (``VmSize``) plus ``extra_mb`` MiB, or lower if already lower; returns it in bytes."""
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
    return cap


def _worker_query(conn, request: dict, watchdog, settings: dict) -> dict:
    """In the worker: run one request on a new cursor of ``conn``; the reply on success."""
    deadline = time.monotonic() + request["deadline_s"]
    statements = conn.extract_statements(request["sql"])
    if len(statements) != 1:
        raise _Refused("invalid input: empty statement" if not statements else
                       f"invalid input: one statement at a time, got {len(statements)}")
    stmt = statements[0]
    kind = getattr(stmt.type, "name", str(stmt.type))
    if kind not in settings["allowed_statements"]:
        raise _Refused(f"not authorized: {settings['refusal'].format(kind=kind)}")
    cur = conn.cursor()
    watchdog.arm(cur, deadline)
    try:
        try:
            cur.execute(stmt)
        except Exception:
            if watchdog.fired:
                raise _Timeout() from None
            raise
        columns = [d[0] for d in cur.description or ()]
        rows, truncated, total = _collect(cur.fetchmany, request["max_rows"], deadline,
                                          lambda: watchdog.fired, request["count_cap"],
                                          request["count_batch"])
    finally:
        watchdog.disarm()
        cur.close()
    return {"columns": columns, "rows": rows, "truncated": truncated, "total_rows": total,
            "error": None}


def _worker_out_of_memory(err: BaseException, settings: dict) -> str:
    first = (str(err).strip().splitlines() or [type(err).__name__])[0]
    first = re.sub(r"^Out of Memory Error: ", "", first) or type(err).__name__
    return (f"out of memory: {first} (this connection's worker may grow by at most "
            f"{settings['memory_mb'] + settings['margin_mb']} MiB: memory_mb="
            f"{settings['memory_mb']} plus {settings['margin_mb']})")


def _worker_reply(conn, line: bytes, watchdog, settings: dict, duckdb) -> bytes:
    """In the worker: the reply line (with its newline) to one request line."""
    reply = None
    try:
        try:
            reply = _worker_query(conn, json.loads(line), watchdog, settings)
        except _Refused as err:
            reply = {"error": str(err)}
        except _Timeout:
            reply = {"timed_out": True}
        data = json.dumps(reply).encode("ascii") + b"\n"
    except Exception as err:  # MemoryError too
        reply = None
        capped = isinstance(err, MemoryError) or (
            isinstance(err, duckdb.OutOfMemoryException)
            and re.search(r"bad.alloc|allocation failure", str(err), re.IGNORECASE))
        error = _worker_out_of_memory(err, settings) if capped else _describe_engine(err)
        data = json.dumps({"error": error}).encode("ascii") + b"\n"
    reply = None
    if len(data) > settings["max_result_bytes"]:
        data = json.dumps({"error": (
            f"result too large: the reply would take {len(data)} bytes of JSON, more than "
            f"{settings['max_result_bytes']}; select fewer rows or shorter values, e.g. "
            f"left(x, 1000)")}).encode("ascii") + b"\n"
    return data


def _worker_main(settings: dict) -> None:
    """The DuckDB worker process: open the database, cap the address space, answer requests."""
    # The protocol gets private copies of fds 0 and 1, which then point at /dev/null: nothing
    # DuckDB or Python may print there can garble it.
    requests = os.fdopen(os.dup(0), "rb")
    replies = os.fdopen(os.dup(1), "wb")
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)

    def send(message: dict) -> None:
        replies.write(json.dumps(message).encode("ascii") + b"\n")
        replies.flush()

    if settings["duckdb_home"] not in sys.path:  # e.g. the user site, which -I leaves out
        sys.path.append(settings["duckdb_home"])
    try:
        import duckdb
    except ImportError as err:
        send({"startup_error": str(err), "kind": "import"})
        return
    try:
        conn = duckdb.connect(settings["path"], read_only=True, config=settings["config"])
    except Exception as err:
        send({"startup_error": _describe_engine(err), "kind": "open"})
        return
    watchdog = _Watchdog()
    try:
        cap = _cap_address_space(settings["memory_mb"] + settings["margin_mb"])
    except (OSError, ValueError) as err:
        send({"startup_error": f"cannot cap the worker's address space: {err}", "kind": "open"})
        return
    send({"ready": True, "address_space_bytes": cap})
    for line in requests:
        replies.write(_worker_reply(conn, line, watchdog, settings, duckdb))
        replies.flush()


_WORKER_HEADER = ("from __future__ import annotations\n"
                  "import datetime, decimal, json, os, re, sys, threading, time, uuid\n")
_WORKER_CODE = (_Refused, _Timeout, _describe_engine, _words, _value, _jsonable, _collect,
                _Watchdog, _cap_address_space, _worker_query, _worker_out_of_memory,
                _worker_reply, _worker_main)


@functools.cache
def worker_source() -> str:
    """The DuckDB worker's program: ``_WORKER_HEADER``, the source of ``_WORKER_CODE`` (the
    conversion and description rules are the same code as in this process) and a call of
    ``_worker_main`` with the settings in ``sys.argv[1]`` (JSON). It imports the standard
    library and ``duckdb`` only."""
    parts = [_WORKER_HEADER] + [inspect.getsource(obj) for obj in _WORKER_CODE]
    parts.append("_worker_main(json.loads(sys.argv[1]))\n")
    return "\n\n".join(parts)


def _duckdb_home() -> str:
    """The folder this process would import ``duckdb`` from (without importing it)."""
    spec = importlib.util.find_spec("duckdb")
    if spec is None or not spec.origin:
        raise ImportError("the duckdb backend needs the duckdb package (pip install duckdb)")
    return os.path.dirname(os.path.dirname(spec.origin))


class _WorkerLost(Exception):
    """The worker died, or broke the protocol; the message says how."""


class _Deadline(Exception):
    """No reply by the hard deadline."""


class _DuckDBWorker:
    """This process's side of one connection's DuckDB worker (see the module docstring); a call
    after one that killed the worker, or found it dead, starts a new worker first."""

    def __init__(self, path: str, memory_mb: int):
        self._path = path
        self._memory_mb = memory_mb
        self._proc = None
        self._owner = os.getpid()  # the process that started the worker (not a forked copy)
        self._reply = bytearray()  # read from the worker, not yet a whole line
        self._stderr = bytearray()  # the end of what the worker wrote to stderr
        self.address_space_bytes = None
        self._start()

    @property
    def pid(self) -> int | None:
        """The worker's process id (None between a kill and the next call)."""
        return None if self._proc is None else self._proc.pid

    def _start(self) -> None:
        """Start a worker and read its first line. Raises ImportError (no duckdb there),
        ``_Refused`` (DuckDB cannot open the file; the message describes it) or OSError (no
        worker)."""
        settings = {"path": self._path, "duckdb_home": _duckdb_home(),
                    "config": _duckdb_config(self._memory_mb),
                    "memory_mb": self._memory_mb, "margin_mb": WORKER_MARGIN_MB,
                    "allowed_statements": sorted(_DUCKDB_ALLOWED_STATEMENTS),
                    "refusal": _DUCKDB_REFUSAL, "max_result_bytes": MAX_RESULT_BYTES}
        if not sys.executable:
            raise OSError("no Python interpreter to start the DuckDB worker with "
                          "(sys.executable is empty)")
        self._reply.clear()
        self._stderr.clear()
        self._owner = os.getpid()
        self._proc = subprocess.Popen(
            [sys.executable, "-I", "-c", worker_source(), json.dumps(settings)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            close_fds=True, cwd="/", env={"PATH": os.environ.get("PATH", os.defpath)},
            start_new_session=True)
        try:
            for pipe in (self._proc.stdin, self._proc.stdout, self._proc.stderr):
                os.set_blocking(pipe.fileno(), False)
            first = self._read_reply(b"", time.monotonic() + WORKER_START_TIMEOUT_S)
        except _Deadline:
            self._end()
            raise OSError(f"the DuckDB worker did not open the database within "
                          f"{WORKER_START_TIMEOUT_S:g} s") from None
        except _WorkerLost as err:
            raise OSError(f"the DuckDB worker did not start: {self._end(str(err))}") from None
        except BaseException:
            self._end()
            raise
        if first.get("ready"):
            self.address_space_bytes = first.get("address_space_bytes")
            return
        self._end()
        error = str(first.get("startup_error"))
        if first.get("kind") == "import":
            raise ImportError(f"the DuckDB worker cannot import duckdb: {error}")
        raise _Refused(error)

    def run(self, sql: str, deadline: float, max_rows: int) -> tuple:
        if self._owner != os.getpid():  # in a forked copy of this process: a worker of its own
            self._end()
        if self._proc is None:
            began = time.monotonic()
            try:
                self._start()
            except Exception as err:
                raise _Refused(f"worker died: a new DuckDB worker did not start: {err}") from None
            deadline += time.monotonic() - began  # starting it does not count as query time
        request = json.dumps({"sql": sql, "max_rows": max_rows,
                              "deadline_s": max(0.0, deadline - time.monotonic()),
                              "count_cap": COUNT_CAP, "count_batch": COUNT_BATCH})
        try:
            reply = self._read_reply(request.encode("ascii") + b"\n", deadline + WORKER_GRACE_S)
        except _Deadline:
            self._end()
            raise _Timeout(f"no reply {WORKER_GRACE_S:g} s after the deadline: the DuckDB "
                           f"worker was killed, the next call starts a new one") from None
        except _WorkerLost as err:
            raise _Refused(f"worker died: {self._end(str(err))}; the next call starts a new "
                           f"DuckDB worker") from None
        except BaseException:  # e.g. KeyboardInterrupt: the reply would come out of step
            self._end()
            raise
        if reply.get("timed_out"):
            raise _Timeout()
        if reply.get("error") is not None:
            raise _Refused(str(reply["error"]))
        return (tuple(reply["columns"]), tuple(tuple(row) for row in reply["rows"]),
                bool(reply["truncated"]), reply["total_rows"])

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

    def _end(self, trouble: str | None = None) -> str:
        """Kill the worker (its process group), reap it and close its pipes; returns how it
        ended. With ``trouble`` (what went wrong), it first gets ``WORKER_EXIT_WAIT_S`` to exit
        by itself, and its last line of stderr joins the answer."""
        proc, self._proc = self._proc, None
        if proc is None:
            return trouble or "no worker"
        if self._owner != os.getpid():  # a forked copy: the worker is the original's to end
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
        return f"{trouble}: the DuckDB worker {how}{last}" if trouble else how

    def close(self) -> None:
        self._end()

    def __del__(self):
        try:
            self._end()
        except Exception:  # interpreter shutdown
            pass


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
      memory_mb: DuckDB's ``memory_limit`` in MB (int >= 16), and with ``WORKER_MARGIN_MB`` the
        MiB its worker's address space may grow by; checked but unused for SQLite (which has no
        per-connection memory cap; see the module docstring).

    Returns:
      A ``ReadOnlySQL`` (close it, or use it as a context manager; with DuckDB, that ends its
      worker process).

    Raises:
      ValueError: a bad argument (the message names it).
      FileNotFoundError: ``path`` does not exist; IsADirectoryError: it is a folder.
      OSError: the engine cannot open it (not a database of that backend; for DuckDB, also a
        worker process that cannot start or cannot cap its memory).
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
        engine = (_SQLiteEngine(path) if backend == "sqlite" else
                  _DuckDBWorker(path, int(memory_mb)))
    except ImportError:
        raise
    except _Refused as err:  # the DuckDB worker's description
        raise OSError(f"cannot open {path!r} as a read-only {backend} database: {err}"
                      ) from None
    except Exception as err:
        raise OSError(f"cannot open {path!r} as a read-only {backend} database: "
                      f"{_describe(err)}") from err
    return ReadOnlySQL(engine, backend=backend, path=path, timeout_s=timeout_s,
                       max_rows=int(max_rows), memory_mb=int(memory_mb))
