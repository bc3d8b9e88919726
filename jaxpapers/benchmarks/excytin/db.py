"""Write a tenant to SQLite / DuckDB and open it read-only for agents.

The paper serves each incident's logs from MySQL in docker, and the agent connects as root with
write rights. Here a tenant is one database file per layer (``alert``: every table; ``log``:
without :data:`~jaxpapers.benchmarks.excytin.world.ALERT_TABLES`, as the paper's log layer), and
agents only ever see it through :func:`open_readonly`, the project's read-only SQL sandbox
(:func:`jaxpapers.core.sandbox.open_readonly_sql`: authorizer, limits, deadline; one connection
per episode).

Files are written to a temporary name in the same folder and renamed into place, so a failure
never leaves a half-written database under the final name; an existing file is refused unless
``overwrite=True``.
"""

from __future__ import annotations

import os
import pathlib
import sqlite3
import tempfile

from jaxpapers.benchmarks.excytin.schema import (ALERT_TABLES, ENTITY_COLUMNS, INT_COLUMNS,
                                                 SCHEMA)
from jaxpapers.benchmarks.excytin.world import Tenant
from jaxpapers.core.sandbox import open_readonly_sql

__all__ = ["LAYERS", "BACKENDS", "tables_for_layer", "write_sqlite", "write_duckdb",
           "write_database", "open_readonly"]

LAYERS = ("alert", "log")
_CHUNK = 200  # rows per INSERT statement (DuckDB)
BACKENDS = ("sqlite", "duckdb")


def _check_layer(layer) -> str:
    if layer not in LAYERS:
        raise ValueError(f"layer must be one of {LAYERS}, got {layer!r}")
    return layer


def _check_backend(backend) -> str:
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    return backend


def tables_for_layer(layer: str) -> tuple[str, ...]:
    """The tables an agent sees on ``layer`` (``"alert"``: all; ``"log"``: no alert tables)."""
    _check_layer(layer)
    return tuple(t for t in SCHEMA if layer == "alert" or t not in ALERT_TABLES)


def _column_type(col: str) -> str:
    return "BIGINT" if col in INT_COLUMNS else "TEXT"


def _rows(tenant: Tenant, table: str) -> list[tuple]:
    cols = SCHEMA[table]
    return [tuple(row[c] for c in cols) for row in tenant.tables[table]]


def _prepare(path, overwrite: bool) -> tuple[pathlib.Path, str]:
    path = pathlib.Path(path)
    if path.exists() and not overwrite:
        raise FileExistsError(f"{path} exists (pass overwrite=True to replace it)")
    if not path.parent.is_dir():
        raise FileNotFoundError(f"folder {path.parent} does not exist")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    os.unlink(tmp)  # the engines create the file themselves
    return path, tmp


def _ddl(table: str) -> tuple[str, list[str]]:
    cols = ", ".join(f'"{c}" {_column_type(c)}' for c in SCHEMA[table])
    create = f'CREATE TABLE "{table}" ({cols})'
    index = [f'CREATE INDEX "ix_{table}_{c}" ON "{table}" ("{c}")'
             for c in SCHEMA[table] if c in ENTITY_COLUMNS or c == "SystemAlertId"]
    return create, index


def _write(tenant: Tenant, path, layer: str, overwrite: bool, connect, insert,
           leftovers=()) -> pathlib.Path:
    """Create the tables of ``layer`` in a temporary file beside ``path``, fill them with
    ``insert(conn, table, rows)``, then rename the file into place (removed on failure)."""
    _check_layer(layer)
    path, tmp = _prepare(path, overwrite)
    try:
        conn = connect(tmp)
        try:
            for table in tables_for_layer(layer):
                create, index = _ddl(table)
                conn.execute(create)
                insert(conn, table, _rows(tenant, table))
                for stmt in index:
                    conn.execute(stmt)
            conn.commit()
        finally:
            conn.close()
        os.replace(tmp, path)
    finally:
        for leftover in (tmp, *(tmp + suffix for suffix in leftovers)):
            if os.path.exists(leftover):
                os.unlink(leftover)
    return path


def write_sqlite(tenant: Tenant, path, *, layer: str = "alert",
                 overwrite: bool = False) -> pathlib.Path:
    """Write ``tenant``'s ``layer`` tables to a SQLite file (entity columns indexed)."""

    def insert(conn, table, rows):
        marks = ", ".join("?" * len(SCHEMA[table]))
        conn.executemany(f'INSERT INTO "{table}" VALUES ({marks})', rows)

    return _write(tenant, path, layer, overwrite, sqlite3.connect, insert)


def write_duckdb(tenant: Tenant, path, *, layer: str = "alert",
                 overwrite: bool = False) -> pathlib.Path:
    """Write ``tenant``'s ``layer`` tables to a DuckDB file (needs the ``duckdb`` package)."""
    _check_layer(layer)
    try:
        import duckdb
    except ImportError as e:  # pragma: no cover - depends on the install
        raise ImportError("write_duckdb needs the duckdb package (pip install duckdb)") from e

    def insert(conn, table, rows):
        one = "(" + ", ".join("?" * len(SCHEMA[table])) + ")"
        # multi-row statements: DuckDB's executemany pays a statement per row
        for i in range(0, len(rows), _CHUNK):
            chunk = rows[i:i + _CHUNK]
            conn.execute(f'INSERT INTO "{table}" VALUES ' + ", ".join([one] * len(chunk)),
                         [v for row in chunk for v in row])

    return _write(tenant, path, layer, overwrite, duckdb.connect, insert, leftovers=(".wal",))


def write_database(tenant: Tenant, path, *, backend: str = "sqlite", layer: str = "alert",
                   overwrite: bool = False) -> pathlib.Path:
    """:func:`write_sqlite` or :func:`write_duckdb` by ``backend``."""
    _check_backend(backend)
    writer = write_sqlite if backend == "sqlite" else write_duckdb
    return writer(tenant, path, layer=layer, overwrite=overwrite)


def open_readonly(path, *, backend: str = "sqlite", timeout_s: float = 30.0,
                  max_rows: int = 15):
    """Open a tenant database read-only in the SQL sandbox (contract).

    Returns a connection whose ``.execute(sql)`` returns a result with ``columns``, ``rows``
    (at most ``max_rows``), ``truncated`` and ``error`` and never raises; ``.close()`` ends it.
    A missing ``path`` raises ``FileNotFoundError`` and is never created; bad ``backend``,
    ``timeout_s`` <= 0 or ``max_rows`` < 1 raise ``ValueError`` naming the argument.
    """
    _check_backend(backend)
    return open_readonly_sql(path, backend=backend, timeout_s=timeout_s, max_rows=max_rows)
