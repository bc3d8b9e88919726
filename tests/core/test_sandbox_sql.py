"""jaxpapers.core.sandbox.open_readonly_sql: normal queries, limits, and attacks that must fail.

Every attack that succeeds against a plain read-only connection (SQLite ``mode=ro`` URI,
``duckdb.connect(path, read_only=True)``) is also run there, on a copy of the database in another
folder, and must succeed there: the test then shows that our defence, not the test, stops it
(exceptions are noted per case: e.g. INSTALL is not tried there, it would reach the network).
After each attack on our connection, every file in the database's folder and in the cwd (an
empty temp folder) must be byte-identical and no file may have appeared. Our connections run in
worker processes (both backends); the "worker" tests cover the address-space cap (DuckDB values
of 500 MB and more, SQLite rows of many 9 MB values, which a plain connection, run in a
separate process, builds), the hard deadline (also for one long SQLite function call), the
replacement of a dead worker, its end (garbage collection, parent death, exit), the pool of
idle workers (reuse with a fresh connection, settings, bounds, forks, cost) and the audit hook.
"""

from __future__ import annotations

import ast
import gc
import hashlib
import json
import os
import pathlib
import resource
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import threading
import time

import pytest

from jaxpapers.core import _sandbox_sql, _sandbox_sql_worker, sandbox
from jaxpapers.core.sandbox import ReadOnlySQL, SQLResult, open_readonly_sql

PEOPLE = [(i, f"person{i:02d}", i % 3, round(i * 1.5, 1)) for i in range(40)]
CITIES = [(0, "Oslo"), (1, "Lima"), (2, "Pune")]
ENDLESS = "WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM r) "


# ----------------------------------------------------------------------------- fixtures

def _make_sqlite(path: pathlib.Path) -> None:
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE people (id INTEGER PRIMARY KEY, name TEXT, city_id INTEGER, "
                "score REAL)")
    con.execute("CREATE TABLE cities (id INTEGER PRIMARY KEY, name TEXT)")
    con.executemany("INSERT INTO people VALUES (?, ?, ?, ?)", PEOPLE)
    con.executemany("INSERT INTO cities VALUES (?, ?)", CITIES)
    con.commit()
    con.close()


def _make_duckdb(path: pathlib.Path) -> None:
    duckdb = pytest.importorskip("duckdb")
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE people (id INTEGER, name VARCHAR, city_id INTEGER, score DOUBLE)")
    con.execute("CREATE TABLE cities (id INTEGER, name VARCHAR)")
    con.executemany("INSERT INTO people VALUES (?, ?, ?, ?)", PEOPLE)
    con.executemany("INSERT INTO cities VALUES (?, ?)", CITIES)
    con.close()


@pytest.fixture(scope="module")
def templates(tmp_path_factory):
    """The databases, built once; each test gets copies."""
    root = tmp_path_factory.mktemp("templates")
    _make_sqlite(root / "data.db")
    made = {"sqlite": root / "data.db"}
    try:
        _make_duckdb(root / "data.duckdb")
        _make_duckdb(root / "other.duckdb")
        made["duckdb"] = root / "data.duckdb"
    except pytest.skip.Exception:
        pass
    return root, made


@pytest.fixture(autouse=True)
def no_idle_workers():
    """Each test starts and ends with no idle pooled worker."""
    _sandbox_sql.close_idle_workers()
    yield
    _sandbox_sql.close_idle_workers()


@pytest.fixture
def env(tmp_path, templates, monkeypatch):
    """Folders: ``db`` (ours), ``naive`` (a plain connection's copy), ``cwd`` (empty, the cwd).
    Each database folder also holds ``secret.csv`` (a file SQL must not read) and, with DuckDB,
    ``other.duckdb`` (a database ATTACH could write to)."""
    root, made = templates
    dirs = {}
    for name in ("db", "naive", "cwd"):
        dirs[name] = tmp_path / name
        dirs[name].mkdir()
    for name in ("db", "naive"):
        for src in root.iterdir():
            shutil.copy(src, dirs[name] / src.name)
        (dirs[name] / "secret.csv").write_text("token\nhunter2\n")
    monkeypatch.chdir(dirs["cwd"])
    return dirs


def _backend_db(env, backend: str, folder: str = "db") -> pathlib.Path:
    if backend == "duckdb":
        pytest.importorskip("duckdb")
        return env[folder] / "data.duckdb"
    return env[folder] / "data.db"


def _snapshot(*folders: pathlib.Path) -> dict[str, str]:
    """{path: sha256 or "dir"} of everything under ``folders``."""
    out = {}
    for folder in folders:
        for p in sorted(folder.rglob("*")):
            out[str(p)] = "dir" if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def _naive(backend: str, path: pathlib.Path):
    if backend == "duckdb":
        import duckdb

        return duckdb.connect(str(path), read_only=True)
    return sqlite3.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None)


BACKENDS = ["sqlite", "duckdb"]


# ----------------------------------------------------------------------------- normal use

@pytest.mark.parametrize("backend", BACKENDS)
def test_select_join_like_count(env, backend):
    with open_readonly_sql(_backend_db(env, backend), backend=backend) as con:
        assert isinstance(con, ReadOnlySQL) and con.backend == backend
        r = con.execute("SELECT id, name, score FROM people WHERE id < 3 ORDER BY id")
        assert r.error is None and r.ok
        assert r.columns == ("id", "name", "score")
        assert r.rows == ((0, "person00", 0.0), (1, "person01", 1.5), (2, "person02", 3.0))
        assert (r.truncated, r.total_rows) == (False, 3)
        r = con.execute("SELECT c.name, count(*) AS n FROM people p JOIN cities c "
                        "ON p.city_id = c.id GROUP BY c.name ORDER BY c.name")
        assert r.rows == (("Lima", 13), ("Oslo", 14), ("Pune", 13))
        r = con.execute("SELECT count(*) AS n FROM people WHERE name LIKE 'person1%'")
        assert r.rows == ((10,),)
        assert "n\n10\n(1 row)" == r.text()


@pytest.mark.parametrize("backend", BACKENDS)
def test_truncation_and_total_rows(env, backend):
    with open_readonly_sql(_backend_db(env, backend), backend=backend, max_rows=5) as con:
        r = con.execute("SELECT id FROM people ORDER BY id")
        assert r.rows == tuple((i,) for i in range(5))
        assert (r.truncated, r.total_rows) == (True, 40)
        assert r.text().splitlines()[-1] == "... (40 rows total, first 5 shown)"
        r = con.execute("SELECT id FROM people WHERE id < 5")
        assert (len(r.rows), r.truncated, r.total_rows) == (5, False, 5)
        r = con.execute("SELECT id FROM people WHERE id < 0")
        assert (r.rows, r.truncated, r.total_rows, r.columns) == ((), False, 0, ("id",))


@pytest.mark.parametrize("backend", BACKENDS)
def test_count_cap_gives_no_total(env, backend, monkeypatch):
    monkeypatch.setattr(_sandbox_sql, "COUNT_CAP", 100)
    with open_readonly_sql(_backend_db(env, backend), backend=backend, max_rows=3) as con:
        r = con.execute("SELECT a.id FROM people a, people b")  # 1600 rows
        assert r.error is None and r.truncated and r.total_rows is None
        assert "not all counted" in r.text()


@pytest.mark.parametrize("backend", BACKENDS)
def test_deadline_covers_counting(env, backend, monkeypatch):
    """Endless rows: the first ones come at once, counting runs into the deadline: no error,
    no total, and the call ends near timeout_s."""
    monkeypatch.setattr(_sandbox_sql, "COUNT_CAP", 10**12)
    with open_readonly_sql(_backend_db(env, backend), backend=backend, timeout_s=0.5) as con:
        t0 = time.monotonic()
        r = con.execute(ENDLESS + "SELECT i FROM r")
        assert time.monotonic() - t0 < 2.0
        assert r.error is None and r.truncated and r.total_rows is None
        assert r.rows[:2] == ((1,), (2,))


@pytest.mark.parametrize("backend", BACKENDS)
def test_errors_are_results(env, backend):
    with open_readonly_sql(_backend_db(env, backend), backend=backend) as con:
        r = con.execute("SELEC * FROM people")
        assert r.error and "syntax error" in r.error and r.rows == () and r.columns == ()
        assert r.text().startswith("Error: ")
        r = con.execute("SELECT * FROM no_such_table")
        assert r.error and "no_such_table" in r.error
        for bad in (None, 42, b"SELECT 1", ["SELECT 1"]):
            r = con.execute(bad)
            assert r.error.startswith("invalid input: sql must be a str"), r.error
        for empty in ("   ", ";", "-- only a comment"):
            assert con.execute(empty).error == "invalid input: empty statement", empty
        assert con.execute("SELECT '\ud800'").error.startswith("invalid input: sql is not")
        too_long = "SELECT 1" + " " * _sandbox_sql.MAX_SQL_CHARS
        assert con.execute(too_long).error.startswith("invalid input:")
        assert con.execute("SELECT 1 AS x;").rows == ((1,),)  # one statement, with its ';'


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("sql", ["SELECT 1; SELECT 2", "SELECT 1; DROP TABLE people",
                                 "SELECT 1; ATTACH 'x.db' AS x"])
def test_multiple_statements_refused(env, backend, sql):
    db = _backend_db(env, backend)
    before = _snapshot(env["db"], env["cwd"])
    with open_readonly_sql(db, backend=backend) as con:
        r = con.execute(sql)
        assert r.error and r.error.startswith("invalid input:"), r.error
        assert "one statement" in r.error
        assert con.execute("SELECT count(*) FROM people").rows == ((40,),)
    assert _snapshot(env["db"], env["cwd"]) == before


@pytest.mark.parametrize("backend", BACKENDS)
def test_values_become_primitives(env, backend):
    sql = ("SELECT x'00ff10' AS b, NULL AS n, 2.5 AS f, 'é' AS s" if backend == "sqlite" else
           "SELECT '\\x00\\xFF\\x10'::BLOB AS b, NULL AS n, 2.5::DOUBLE AS f, 'é' AS s, "
           "DATE '2020-01-02' AS d, [1, 2] AS l, 1.25::DECIMAL(5, 2) AS dec")
    with open_readonly_sql(_backend_db(env, backend), backend=backend) as con:
        r = con.execute(sql)
        assert r.error is None, r.error
        assert r.rows[0][:4] == ("00ff10", None, 2.5, "é")
        if backend == "duckdb":
            assert r.rows[0][4:] == ("2020-01-02", "[1, 2]", 1.25)


def test_sqlite_invalid_utf8_text_is_replaced(env):
    with open_readonly_sql(_backend_db(env, "sqlite")) as con:
        r = con.execute("SELECT CAST(x'61ff62' AS TEXT) AS t")
        assert r.rows == (("a\ufffdb",),)


def test_sqlite_schema_is_readable_pragma_functions_are_not(env):
    with open_readonly_sql(_backend_db(env, "sqlite")) as con:
        r = con.execute("SELECT name FROM sqlite_schema WHERE type = 'table' ORDER BY name")
        assert r.rows == (("cities",), ("people",))
        r = con.execute("SELECT sql FROM sqlite_master WHERE name = 'people'")
        assert "CREATE TABLE people" in r.rows[0][0]
        assert con.execute("SELECT * FROM pragma_table_info('people')").error.startswith(
            "not authorized")


def test_duckdb_describe_and_information_schema(env):
    with open_readonly_sql(_backend_db(env, "duckdb"), backend="duckdb") as con:
        r = con.execute("DESCRIBE people")
        assert [row[0] for row in r.rows] == ["id", "name", "city_id", "score"]
        r = con.execute("SELECT table_name FROM information_schema.tables ORDER BY 1")
        assert r.rows == (("cities",), ("people",))


@pytest.mark.parametrize("backend", BACKENDS)
def test_close_is_idempotent_and_later_calls_fail(env, backend):
    con = open_readonly_sql(_backend_db(env, backend), backend=backend)
    assert con.execute("SELECT 1 AS x").rows == ((1,),)
    con.close()
    con.close()
    assert con.closed
    r = con.execute("SELECT 1")
    assert isinstance(r, SQLResult) and r.error == "closed: the connection is closed"
    with open_readonly_sql(_backend_db(env, backend), backend=backend) as con2:
        pass
    assert con2.closed


def test_result_text_rendering():
    r = SQLResult(("a",), (("x" * 500,),), True, None, None, 0.0)
    line = r.text().splitlines()[1]
    assert len(line) == _sandbox_sql.CELL_CHARS and line.endswith("...")
    assert SQLResult(("a",), (), False, 0, None, 0.0).text() == "a\n(0 rows)"
    assert SQLResult((), (), False, None, "x: y", 0.0).text() == "Error: x: y"


def test_reexported_from_sandbox():
    for name in ("open_readonly_sql", "ReadOnlySQL", "SQLResult"):
        assert name in sandbox.__all__ and getattr(sandbox, name) is getattr(_sandbox_sql, name)


# ----------------------------------------------------------------------------- arguments

@pytest.mark.parametrize("kwargs, name", [
    ({"backend": "postgres"}, "backend"), ({"backend": "SQLite"}, "backend"),
    ({"max_rows": 0}, "max_rows"), ({"max_rows": 2.5}, "max_rows"),
    ({"max_rows": True}, "max_rows"), ({"max_rows": "5"}, "max_rows"),
    ({"timeout_s": 0}, "timeout_s"), ({"timeout_s": -1.0}, "timeout_s"),
    ({"timeout_s": float("nan")}, "timeout_s"), ({"timeout_s": float("inf")}, "timeout_s"),
    ({"timeout_s": "1"}, "timeout_s"), ({"memory_mb": 15}, "memory_mb"),
    ({"memory_mb": 64.0}, "memory_mb"),
])
def test_bad_arguments(env, kwargs, name):
    with pytest.raises(ValueError, match=name):
        open_readonly_sql(env["db"] / "data.db", **kwargs)


@pytest.mark.parametrize("backend", BACKENDS)
def test_missing_path_is_never_created(env, backend):
    if backend == "duckdb":
        pytest.importorskip("duckdb")
    missing = env["db"] / f"missing.{backend}"
    with pytest.raises(FileNotFoundError):
        open_readonly_sql(missing, backend=backend)
    with pytest.raises(FileNotFoundError):
        open_readonly_sql("missing.db", backend=backend)  # relative: the cwd
    assert not missing.exists() and not (env["cwd"] / "missing.db").exists()
    assert list(env["cwd"].iterdir()) == []
    with pytest.raises(IsADirectoryError):
        open_readonly_sql(env["db"], backend=backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_not_a_database(env, backend):
    if backend == "duckdb":
        pytest.importorskip("duckdb")
    before = _snapshot(env["db"])
    with pytest.raises(OSError, match="cannot open"):
        open_readonly_sql(env["db"] / "secret.csv", backend=backend)
    assert _snapshot(env["db"]) == before


# ----------------------------------------------------------------------------- attacks: SQLite

def _created(name):
    def check(naive, folder, cwd):
        assert (folder / name).exists() or (cwd / name).exists()
    return check


def _vacuum_copy(naive, folder, cwd):
    copy = sqlite3.connect(folder / "copy.db")
    assert copy.execute("SELECT count(*) FROM people").fetchone() == (40,)
    copy.close()


def _pragma_is(name, value):
    def check(naive, folder, cwd):
        assert naive.execute(f"PRAGMA {name}").fetchone() == (value,)
    return check


def _temp_table(naive, folder, cwd):
    assert naive.execute("SELECT count(*) FROM temp.t").fetchone() == (40,)


def _value_is(value):
    def check(naive, folder, cwd, result):
        assert result == [(value,)]
    return check


# (id, sql, expected start of our error, naive check or None, naive sql if not the same).
# A naive check of None: the plain mode=ro connection refuses it too (noted per case).
SQLITE_ATTACKS = [
    ("insert", "INSERT INTO people VALUES (99, 'x', 0, 0.0)", "not authorized", None, None),
    ("update", "UPDATE people SET score = 0", "not authorized", None, None),
    ("delete", "DELETE FROM people", "not authorized", None, None),
    ("create", "CREATE TABLE evil (x)", "not authorized", None, None),
    ("drop", "DROP TABLE people", "not authorized", None, None),
    ("create_temp", "CREATE TEMP TABLE t AS SELECT * FROM people", "not authorized",
     _temp_table, None),
    ("attach_new_cwd", "ATTACH DATABASE 'evil.db' AS e", "not authorized",
     _created("evil.db"), None),
    ("attach_new_folder", "ATTACH DATABASE '{folder}/evil.db' AS e", "not authorized",
     _created("evil.db"), None),
    ("vacuum_into", "VACUUM INTO '{folder}/copy.db'", "not authorized", _vacuum_copy, None),
    ("vacuum", "VACUUM", "not authorized", None, None),
    ("writable_schema", "PRAGMA writable_schema = 1", "not authorized",
     _pragma_is("writable_schema", 1), None),
    ("query_only_off", "PRAGMA query_only = 0", "not authorized", _pragma_is("query_only", 0),
     None),
    ("journal_mode", "PRAGMA journal_mode = OFF", "not authorized",
     _pragma_is("journal_mode", "off"), None),
    ("begin", "BEGIN IMMEDIATE", "not authorized", None, None),
    ("load_extension", "SELECT load_extension('/nonexistent/evil')",
     "not authorized: not authorized to use function",
     None, None),  # plain connections refuse it too (extension loading is off by default)
    ("readfile", "SELECT readfile('/etc/passwd')", "operational error: no such function",
     None, None),  # the fileio extension is not in Python's SQLite; checked: not available
    # 500 MB values: refused before allocating. The plain connection builds a 50 MB random blob
    # (kept small for time) and a 500 MB zero blob: both above our 10 MB limit.
    ("randomblob", "SELECT length(randomblob(500000000))", "data error: string or blob too big",
     _value_is(50_000_000), "SELECT length(randomblob(50000000))"),
    ("zeroblob", "SELECT length(zeroblob(500000000))", "data error: string or blob too big",
     _value_is(500_000_000), None),
]


@pytest.mark.parametrize("case", SQLITE_ATTACKS, ids=[c[0] for c in SQLITE_ATTACKS])
def test_sqlite_attack(env, case):
    _, sql, expected, naive_check, naive_sql = case
    db = env["db"] / "data.db"
    before = _snapshot(env["db"], env["cwd"])
    with open_readonly_sql(db) as con:
        r = con.execute(sql.format(folder=env["db"]))
        assert r.error is not None and r.error.startswith(expected), r.error
        assert con.execute("SELECT count(*) FROM people").rows == ((40,),)  # still usable
        assert con.execute("PRAGMA query_only").error.startswith("not authorized")
    assert _snapshot(env["db"], env["cwd"]) == before
    assert list(env["cwd"].iterdir()) == []

    naive = _naive("sqlite", env["naive"] / "data.db")
    try:
        if naive_check is None:
            return
        if case[0] == "query_only_off":
            naive.execute("PRAGMA query_only = 1")
        q = (naive_sql or sql).format(folder=env["naive"])
        result = naive.execute(q).fetchall()  # the attack works on a plain mode=ro connection
        if naive_check.__code__.co_argcount == 4:
            naive_check(naive, env["naive"], env["cwd"], result)
        else:
            naive_check(naive, env["naive"], env["cwd"])
    finally:
        naive.close()


def test_sqlite_limits_are_ours():
    """The 10 MB value limit and no ATTACH are our settings, not SQLite's defaults."""
    plain = sqlite3.connect(":memory:")
    assert plain.getlimit(sqlite3.SQLITE_LIMIT_LENGTH) >= 100 * _sandbox_sql.SQLITE_MAX_LENGTH
    assert plain.getlimit(sqlite3.SQLITE_LIMIT_ATTACHED) >= 1
    plain.close()


# ----------------------------------------------------------------------------- attacks: DuckDB

def _duck_rows(sql):
    def check(naive, folder, cwd, result):
        assert naive.execute(sql).fetchall() == result
    return check


def _duck_value(value):
    def check(naive, folder, cwd, result):
        assert result == [(value,)]
    return check


def _duck_created(name):
    def check(naive, folder, cwd, result):
        assert (folder / name).exists()
    return check


def _duck_setting(name, value):
    def check(naive, folder, cwd, result):
        assert naive.execute(f"SELECT current_setting('{name}')").fetchone() == (value,)
    return check


def _duck_other_written(naive, folder, cwd, result):
    naive.execute("CREATE TABLE o.evil AS SELECT 1 AS x")  # writes into another file
    naive.execute("DETACH o")
    import duckdb

    other = duckdb.connect(str(folder / "other.duckdb"), read_only=True)
    assert other.execute("SELECT x FROM evil").fetchall() == [(1,)]
    other.close()


DUCKDB_ATTACKS = [
    ("insert", "INSERT INTO people VALUES (99, 'x', 0, 0.0)", "not authorized", None, None),
    ("update", "UPDATE people SET score = 0", "not authorized", None, None),
    ("delete", "DELETE FROM people", "not authorized", None, None),
    ("create", "CREATE TABLE evil (x INTEGER)", "not authorized", None, None),
    ("drop", "DROP TABLE people", "not authorized", None, None),
    ("create_temp", "CREATE TEMP TABLE t AS SELECT * FROM people", "not authorized",
     _duck_rows("SELECT count(*) FROM t"), None),
    ("attach", "ATTACH '{folder}/other.duckdb' AS o (READ_ONLY false)", "not authorized",
     _duck_other_written, None),
    ("copy_to", "COPY people TO '{folder}/out.csv'", "not authorized",
     _duck_created("out.csv"), None),
    ("copy_select_to", "COPY (SELECT * FROM people) TO 'out.parquet'", "not authorized",
     None, None),  # covered by copy_to
    ("export", "EXPORT DATABASE '{folder}/exported'", "not authorized",
     _duck_created("exported"), None),
    ("set_threads", "SET threads = 7", "not authorized", _duck_setting("threads", 7), None),
    ("pragma_memory", "PRAGMA memory_limit = '10GB'", "not authorized",
     _duck_setting("memory_limit", "9.3 GiB"), None),
    ("set_external_access", "SET enable_external_access = true", "not authorized", None,
     None),  # a plain connection may not turn it back on either, once off
    ("install", "INSTALL httpfs", "not authorized", None,
     None),  # not run on the plain connection: it would reach for the network
    ("load", "LOAD httpfs", "not authorized", None, None),  # not installed here
    ("checkpoint", "CHECKPOINT", "not authorized", None, None),
    ("read_csv", "SELECT * FROM read_csv('{folder}/secret.csv')", "permission error",
     _duck_value("hunter2"), None),
    ("read_text", "SELECT content FROM read_text('{folder}/secret.csv')", "permission error",
     _duck_value("token\nhunter2\n"), None),
    ("replacement_scan_file", "SELECT * FROM '{folder}/secret.csv'", "permission error",
     _duck_value("hunter2"), None),
    ("glob", "SELECT count(*) FROM glob('{folder}/*')", "permission error",
     _duck_value(4), None),
    ("read_blob_system", "SELECT size FROM read_blob('/etc/hostname')", "permission error",
     None, None),  # same defence as read_text
]


@pytest.mark.parametrize("case", DUCKDB_ATTACKS, ids=[c[0] for c in DUCKDB_ATTACKS])
def test_duckdb_attack(env, case):
    _, sql, expected, naive_check, naive_sql = case
    db = _backend_db(env, "duckdb")
    before = _snapshot(env["db"], env["cwd"])
    with open_readonly_sql(db, backend="duckdb") as con:
        r = con.execute(sql.format(folder=env["db"]))
        assert r.error is not None and r.error.startswith(expected), r.error
        assert con.execute("SELECT count(*) FROM people").rows == ((40,),)  # still usable
    assert _snapshot(env["db"], env["cwd"]) == before
    assert list(env["cwd"].iterdir()) == []
    if naive_check is None:
        return
    naive = _naive("duckdb", env["naive"] / "data.duckdb")
    try:
        result = naive.execute((naive_sql or sql).format(folder=env["naive"])).fetchall()
        naive_check(naive, env["naive"], env["cwd"], result)
    finally:
        naive.close()


def test_duckdb_settings_are_locked_and_replacement_scans_off(env):
    np = pytest.importorskip("numpy")
    host_array = np.arange(3)  # read by name, from this frame, by DuckDB's replacement scan
    naive = _naive("duckdb", env["naive"] / "data.duckdb")
    try:
        assert naive.execute("SELECT count(*) FROM host_array").fetchall() == [(len(host_array),)]
    finally:
        naive.close()
    with open_readonly_sql(_backend_db(env, "duckdb"), backend="duckdb", memory_mb=128) as con:
        r = con.execute("SELECT current_setting('python_enable_replacements'), "
                        "current_setting('enable_external_access'), "
                        "current_setting('lock_configuration'), current_setting('threads'), "
                        "current_setting('memory_limit'), current_setting('temp_directory')")
        assert r.rows == ((False, False, True, 1, "122.0 MiB", ""),), r.rows
        assert con.execute("SELECT count(*) FROM host_array").error.startswith("catalog error")


def _peak_rss_reset() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _peak_rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return 0.0


def test_duckdb_memory_limit_stops_an_aggregate_bomb(env):
    """A 20-million-element list (160 MB of data) is cut by memory_limit=64 MB at once; the
    plain connection builds it."""
    bomb = "SELECT sum(len(l)) FROM (SELECT list(range) AS l FROM range(20000000))"
    before = _snapshot(env["db"], env["cwd"])
    with open_readonly_sql(_backend_db(env, "duckdb"), backend="duckdb", memory_mb=64) as con:
        can_measure = _peak_rss_reset()
        base = _peak_rss_mb()
        r = con.execute(bomb)
        grown = _peak_rss_mb() - base
        assert r.error and r.error.startswith("out of memory error"), r.error
        if can_measure:
            assert grown < 64 + 64, f"the process grew by {grown:.0f} MB"
        assert con.execute("SELECT count(*) FROM people").rows == ((40,),)
    assert _snapshot(env["db"], env["cwd"]) == before
    naive = _naive("duckdb", env["naive"] / "data.duckdb")
    try:
        assert naive.execute(bomb).fetchall() == [(20_000_000,)]
    finally:
        naive.close()


def test_duckdb_no_spill_files(env):
    """A sort larger than memory_limit fails instead of spilling to ``<db>.tmp`` beside it."""
    before = _snapshot(env["db"], env["cwd"])
    with open_readonly_sql(_backend_db(env, "duckdb"), backend="duckdb", memory_mb=32) as con:
        r = con.execute("SELECT max(x) FROM (SELECT range AS x, range::VARCHAR AS s "
                        "FROM range(3000000) ORDER BY random())")
        assert r.error and r.error.startswith("out of memory error"), r.error
    assert _snapshot(env["db"], env["cwd"]) == before


# ----------------------------------------------------------------------------- DuckDB worker

# Scalar functions whose values DuckDB builds outside memory_limit: 500 MB (repeat, lpad), 4 GB
# (range) in a plain connection. The first is also run on a plain connection: ten characters
# at a time, it builds its 500 MB there in about a third of the time of repeat('a', 500000000).
HUGE_VALUES = [("repeat", "SELECT length(repeat('0123456789', 50000000)) AS n"),
               ("repeat_1", "SELECT length(repeat('a', 500000000)) AS n"),
               ("lpad", "SELECT length(lpad('x', 500000000, 'y')) AS n"),
               ("range", "SELECT len(range(500000000)) AS n")]

# Runs one query on a plain read-only DuckDB connection; prints [value, its ru_maxrss in KiB].
NAIVE_SCRIPT = """
import json, resource, sys
import duckdb
con = duckdb.connect(sys.argv[1], read_only=True)
value = con.execute(sys.argv[2]).fetchone()[0]
print(json.dumps([value, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss]))
"""


def _max_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def _reaped(pid: int) -> bool:
    """``pid`` is neither running nor a zombie (it has been waited for)."""
    return not os.path.exists(f"/proc/{pid}")


def test_duckdb_huge_scalar_values_stay_in_the_capped_worker(env, monkeypatch):
    """repeat / lpad / range of 500 MB and more: an error result, this process does not grow,
    no file changes. lpad builds its value slowly, one character at a time (seconds before
    the cap stops it): with timeout_s=0.5 its worker is killed at the hard deadline (the grace
    is shortened for time) unless the cap stopped it first. A plain connection, in a separate
    process (so that this one does not grow), builds the first 500 MB string."""
    monkeypatch.setattr(_sandbox_sql, "WORKER_GRACE_S", 0.5)
    naive = subprocess.Popen([sys.executable, "-c", NAIVE_SCRIPT,
                              str(env["naive"] / "data.duckdb"), HUGE_VALUES[0][1]],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        before = _snapshot(env["db"], env["cwd"])
        rss_before = _max_rss_mb()
        can_measure = _peak_rss_reset()
        base = _peak_rss_mb()
        with open_readonly_sql(_backend_db(env, "duckdb"), backend="duckdb",
                               timeout_s=0.5) as con:
            assert con.memory_mb == 256  # the default: the worker may grow by 256 + 128 MiB
            for name, sql in HUGE_VALUES:
                t0 = time.monotonic()
                r = con.execute(sql)
                assert r.error is not None, (name, r.rows)
                if name == "lpad" and r.error.startswith("timeout:"):
                    # usually one uninterruptible call: the worker is killed at the deadline +
                    # grace; on a slow, loaded machine DuckDB sometimes stops it itself first
                    # (seen 2026-12-03: "stopped after 0.95 s"). Either way it is bounded.
                    assert time.monotonic() - t0 < 1.0 + 1.0, r.error
                else:
                    assert r.error.startswith("out of memory: "), (name, r.error)
                    assert "384 MiB" in r.error
                assert con.execute("SELECT count(*) FROM people").rows == ((40,),)
        grown = _max_rss_mb() - rss_before
        assert grown < 100, f"this process's ru_maxrss grew by {grown:.0f} MB"
        if can_measure:
            assert _peak_rss_mb() - base < 100
        assert _snapshot(env["db"], env["cwd"]) == before
        assert list(env["cwd"].iterdir()) == []
        out, err = naive.communicate(timeout=120)
    finally:
        if naive.poll() is None:  # only when something above failed
            naive.kill()
            naive.communicate()
    assert naive.returncode == 0, err
    value, naive_rss_kib = json.loads(out)
    assert value == 500_000_000
    assert naive_rss_kib >= 500 * 1024, f"the plain connection peaked at {naive_rss_kib} KiB"


# ----------------------------------------------------------------------------- SQLite worker

# Rows of sixty values of about 9 MB each, every one under SQLite's 10 MB value limit: 540 MB a
# row (in a plain connection also the same again as Python values). The group_concat calls
# differ by separator, so SQLite cannot merge them into one.
_NINE_MB = ("WITH RECURSIVE r(i, s) AS (SELECT 1, printf('%.*c', 1000000, 'x') UNION ALL "
            "SELECT i + 1, s FROM r WHERE i < 9) ")
SQLITE_ROW_BOMBS = [
    ("zeroblob", "SELECT " + ", ".join(f"zeroblob(9000000) AS c{i}" for i in range(60))),
    ("randomblob", "SELECT " + ", ".join(f"randomblob(9000000) AS c{i}" for i in range(60))),
    ("group_concat", _NINE_MB + "SELECT "
     + ", ".join(f"group_concat(s, '{i}') AS g{i}" for i in range(60)) + " FROM r"),
]
# One value growing toward 1 GB (a recursive CTE of a thousand 1 MB strings): too big at 10 MB.
SQLITE_GROWING = ("WITH RECURSIVE r(i, s) AS (SELECT 1, printf('%.*c', 1000000, 'x') UNION ALL "
                  "SELECT i + 1, s FROM r WHERE i < 1000) SELECT length(group_concat(s)) FROM r")

# Runs one query on a plain mode=ro SQLite connection; prints [the row's total length, its
# ru_maxrss in KiB].
SQLITE_NAIVE_SCRIPT = """
import json, resource, sqlite3, sys
con = sqlite3.connect(f"file:{sys.argv[1]}?mode=ro", uri=True)
row = con.execute(sys.argv[2]).fetchone()
print(json.dumps([sum(len(v) for v in row), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss]))
"""


def test_sqlite_row_bombs_stay_in_the_capped_worker(env):
    """Rows of many 9 MB values, and a value growing toward 1 GB: an error result (out of
    memory, or too big), this process does not grow, no file changes, the connection stays
    usable. Plain connections, each in a separate process, build such rows (>= 500 MB; not
    the randomblob one, for time: it is the zeroblob row with random bytes)."""
    db = _backend_db(env, "sqlite")
    naive = {name: subprocess.Popen([sys.executable, "-c", SQLITE_NAIVE_SCRIPT,
                                     str(env["naive"] / "data.db"), sql],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for name, sql in SQLITE_ROW_BOMBS if name != "randomblob"}
    try:
        before = _snapshot(env["db"], env["cwd"])
        rss_before = _max_rss_mb()
        with open_readonly_sql(db, max_rows=1) as con:
            pid = con._engine.pid
            for name, sql in SQLITE_ROW_BOMBS + [("growing", SQLITE_GROWING)]:
                r = con.execute(sql)
                assert r.error is not None, (name, r.columns)
                if name == "growing":
                    assert r.error.startswith("data error: string or blob too big"), r.error
                else:
                    assert r.error.startswith("out of memory: "), (name, r.error)
                    assert "384 MiB" in r.error
                assert con.execute("SELECT count(*) FROM people").rows == ((40,),)
                assert con._engine.pid == pid  # not killed: the worker lives on
        grown = _max_rss_mb() - rss_before
        assert grown < 100, f"this process's ru_maxrss grew by {grown:.0f} MB"
        assert _snapshot(env["db"], env["cwd"]) == before
        assert list(env["cwd"].iterdir()) == []
        outs = {name: proc.communicate(timeout=120) for name, proc in naive.items()}
    finally:
        for proc in naive.values():
            if proc.poll() is None:  # only when something above failed
                proc.kill()
                proc.communicate()
    for name, (out, err) in outs.items():
        assert naive[name].returncode == 0, (name, err)
        size, naive_rss_kib = json.loads(out)
        assert size >= 540_000_000, (name, size)
        assert naive_rss_kib >= 500 * 1024, (name, naive_rss_kib)  # KiB


def test_sqlite_long_function_call_is_stopped(env, monkeypatch):
    """printf of 2e9 characters loops about 13 s inside one call (its text capped at 10 MB;
    no progress-handler call): the worker is killed at timeout_s + WORKER_GRACE_S (shortened
    for time) with a timeout error, and the next call runs on another worker."""
    monkeypatch.setattr(_sandbox_sql, "WORKER_GRACE_S", 0.5)
    with open_readonly_sql(_backend_db(env, "sqlite"), timeout_s=1) as con:
        pid = con._engine.pid
        t0 = time.monotonic()
        r = con.execute("SELECT length(printf('%.*c', 2000000000, 'x')) AS n")
        wall = time.monotonic() - t0
        assert r.error is not None, r.rows
        assert r.error.startswith(("timeout: ", "out of memory: ")), r.error
        assert wall < 1 + 0.5 + 1.0, wall
        killed = "worker was killed" in r.error
        assert _reaped(pid) == killed
        assert con.execute("SELECT count(*) FROM people").rows == ((40,),)
        assert (con._engine.pid != pid) == killed


def test_sqlite_result_after_the_deadline_is_a_timeout(env, monkeypatch):
    """One function call that no progress handler stops runs past timeout_s (a quarter of
    what it takes in a plain connection) but ends before the hard deadline: a timeout, not
    a result, and the worker lives on."""
    sql = "SELECT length(printf('%.*c', 50000000, 'x')) AS n"
    naive = _naive("sqlite", env["naive"] / "data.db")
    try:
        naive.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, _sandbox_sql.SQLITE_MAX_LENGTH)
        t0 = time.monotonic()
        assert naive.execute(sql).fetchall() == [(None,)]  # a result, after all that time
        took = time.monotonic() - t0
    finally:
        naive.close()
    monkeypatch.setattr(_sandbox_sql, "WORKER_GRACE_S", 10 * took + 5.0)
    with open_readonly_sql(_backend_db(env, "sqlite"), timeout_s=took / 4) as con:
        pid = con._engine.pid
        r = con.execute(sql)
        assert r.error is not None and r.error.startswith("timeout: "), (r.error, r.rows)
        assert "killed" not in r.error and con._engine.pid == pid
        assert con.execute("SELECT count(*) FROM people").rows == ((40,),)


# ----------------------------------------------------------------------------- workers

@pytest.mark.parametrize("backend", BACKENDS)
def test_worker_process(env, backend):
    """Its own session, ``/`` as cwd, PATH only in its environment, no core dumps, the address
    space capped at what it reported; the program imports no jaxpapers module."""
    with open_readonly_sql(_backend_db(env, backend), backend=backend, memory_mb=64) as con:
        worker = con._engine
        pid = worker.pid
        assert pid != os.getpid() and os.getsid(pid) == pid
        assert os.readlink(f"/proc/{pid}/cwd") == "/"
        with open(f"/proc/{pid}/environ", "rb") as f:
            names = [item.split(b"=", 1)[0] for item in f.read().split(b"\0") if item]
        assert set(names) <= {b"PATH", b"LC_CTYPE"}, names  # LC_CTYPE: Python's C-locale fix
        with open(f"/proc/{pid}/limits") as f:
            limits = {line[:26].strip(): line[26:].split() for line in f}
        assert limits["Max core file size"][:2] == ["0", "0"]
        cap = worker.address_space_bytes
        assert limits["Max address space"][:2] == [str(cap), str(cap)]
        with open(f"/proc/{pid}/status") as f:
            size = next(int(line.split()[1]) for line in f if line.startswith("VmSize:")) * 1024
        at_cap = worker._worker.size_bytes  # its size when it capped itself
        assert cap == at_cap + (64 + _sandbox_sql.WORKER_MARGIN_MB) * 2**20
        assert abs(size - at_cap) < 16 * 2**20 and size < cap
        assert con.execute("SELECT count(*) FROM people").rows == ((40,),)
    assert _sandbox_sql._POOL.pids() == [pid]  # idle, in the pool
    assert _sandbox_sql.close_idle_workers() == 1 and _reaped(pid)
    tree = ast.parse(_sandbox_sql.worker_source())
    imported = {alias.name.split(".")[0] for node in ast.walk(tree)
                if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(tree)
                 if isinstance(node, ast.ImportFrom)}
    assert imported <= set(sys.stdlib_module_names) | {"duckdb"}, imported


@pytest.mark.parametrize("backend", BACKENDS)
def test_worker_is_pooled_on_close_and_reaped_on_collection(env, backend):
    db = _backend_db(env, backend)
    con = open_readonly_sql(db, backend=backend)
    pid = con._engine.pid
    con.close()
    assert not _reaped(pid) and _sandbox_sql._POOL.pids() == [pid]
    con = open_readonly_sql(db, backend=backend)
    assert con._engine.pid == pid and _sandbox_sql._POOL.pids() == []
    del con  # dropped without close: its worker is killed, not pooled
    gc.collect()
    assert _reaped(pid) and _sandbox_sql._POOL.pids() == []


ORPHAN_SCRIPT = """
import sys, time
from jaxpapers.core.sandbox import open_readonly_sql
con = open_readonly_sql(sys.argv[1], backend=sys.argv[2])
print(con._engine.pid, flush=True)
time.sleep(60)
"""


@pytest.mark.parametrize("backend", BACKENDS)
def test_worker_ends_with_its_parent(env, backend):
    """A process killed with its connection open leaves no worker running."""
    parent = subprocess.Popen(
        [sys.executable, "-c", ORPHAN_SCRIPT, str(_backend_db(env, backend)), backend],
        stdout=subprocess.PIPE, text=True)
    try:
        pid = int(parent.stdout.readline())
    finally:
        parent.kill()
        parent.wait()
        parent.stdout.close()
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            break
        if state in ("Z", "X"):  # ended; waiting for its new parent (maybe pid 1) to reap it
            break
        time.sleep(0.05)
    else:
        pytest.fail(f"the worker {pid} still runs 5 s after its parent was killed")


@pytest.mark.parametrize("backend", BACKENDS)
def test_killed_worker_is_replaced_and_not_pooled(env, backend):
    """A worker killed from outside: the next call says so, the one after runs on a new one;
    only that one is pooled on close."""
    with open_readonly_sql(_backend_db(env, backend), backend=backend) as con:
        pid = con._engine.pid
        os.kill(pid, signal.SIGKILL)
        r = con.execute("SELECT count(*) FROM people")
        assert r.error and r.error.startswith("worker died: "), r.error
        assert "SIGKILL" in r.error
        assert _reaped(pid)
        r = con.execute("SELECT count(*) FROM people")
        assert r.error is None and r.rows == ((40,),)
        new = con._engine.pid
        assert new not in (None, pid)
    assert _sandbox_sql._POOL.pids() == [new]


@pytest.mark.parametrize("backend", BACKENDS)
def test_unresponsive_worker_is_killed_at_the_hard_deadline(env, backend, monkeypatch):
    """A worker that does not answer (stopped here; in real life a function that does not see
    the interrupt) is killed at timeout_s + WORKER_GRACE_S (shortened for time); the next call
    runs on a new worker, and the killed one is never pooled."""
    monkeypatch.setattr(_sandbox_sql, "WORKER_GRACE_S", 0.5)
    with open_readonly_sql(_backend_db(env, backend), backend=backend, timeout_s=0.3) as con:
        pid = con._engine.pid
        os.kill(pid, signal.SIGSTOP)
        t0 = time.monotonic()
        r = con.execute(ENDLESS + "SELECT count(*) FROM r")
        wall = time.monotonic() - t0
        assert r.error and r.error.startswith("timeout: "), r.error
        assert "worker was killed" in r.error
        assert 0.8 <= wall < 0.8 + 1.0, wall
        assert _reaped(pid)
        r = con.execute("SELECT count(*) FROM people")
        assert r.error is None and r.rows == ((40,),)
    assert pid not in _sandbox_sql._POOL.pids()


def test_duckdb_connections_are_separate(env):
    """Each open connection is its own process: other settings on the same file, and a plain
    connection in this process, do not clash."""
    db = _backend_db(env, "duckdb")
    naive = _naive("duckdb", db)
    try:
        with (open_readonly_sql(db, backend="duckdb", memory_mb=64) as small,
              open_readonly_sql(db, backend="duckdb", memory_mb=128) as large):
            assert small._engine.pid != large._engine.pid
            sql = "SELECT current_setting('memory_limit') AS m"
            assert small.execute(sql).rows == (("61.0 MiB",),)
            assert large.execute(sql).rows == (("122.0 MiB",),)
            assert naive.execute("SELECT count(*) FROM people").fetchall() == [(40,)]
    finally:
        naive.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_result_too_large(env, backend, monkeypatch):
    monkeypatch.setattr(_sandbox_sql, "MAX_RESULT_BYTES", 10_000)
    big, small = (("printf('%.*c', 20000, 'a')", "printf('%.*c', 2000, 'a')")
                  if backend == "sqlite" else ("repeat('a', 20000)", "repeat('a', 2000)"))
    with open_readonly_sql(_backend_db(env, backend), backend=backend) as con:
        r = con.execute(f"SELECT {big} AS s")
        assert r.error and r.error.startswith("result too large: "), r.error
        assert con.execute(f"SELECT {small} AS s").rows == (("a" * 2000,),)


# ----------------------------------------------------------------------------- pool

@pytest.mark.parametrize("backend", BACKENDS)
def test_pool_reuses_a_worker_with_a_fresh_connection(env, backend):
    """Reopening after close takes the idle worker (same process) and has it open a new
    engine connection (the next number); while it is taken, another open starts another."""
    db = _backend_db(env, backend)
    con = open_readonly_sql(db, backend=backend)
    pid, number = con._engine.pid, con._engine.connection
    assert number == 1
    con.close()
    with open_readonly_sql(db, backend=backend) as again:
        assert (again._engine.pid, again._engine.connection) == (pid, number + 1)
        assert again.execute("SELECT count(*) FROM people").rows == ((40,),)
        with open_readonly_sql(db, backend=backend) as other:
            other_pid = other._engine.pid
            assert other_pid != pid and other._engine.connection == 1
    assert sorted(_sandbox_sql._POOL.pids()) == sorted([pid, other_pid])
    assert _sandbox_sql.close_idle_workers() == 2
    assert _reaped(pid) and _reaped(other_pid)


def test_pool_keys_and_bounds(env, monkeypatch):
    """Another memory_mb, or another file, gets another worker; at most POOL_IDLE_PER_KEY idle
    workers per key and POOL_IDLE_MAX in all stay, the least recently pooled are ended."""
    db = _backend_db(env, "sqlite")
    other_db = env["db"] / "other.db"
    shutil.copy(db, other_db)
    with open_readonly_sql(db, memory_mb=64) as con:
        small = con._engine.pid
    with open_readonly_sql(db, memory_mb=128) as con:
        large = con._engine.pid
    with open_readonly_sql(other_db, memory_mb=64) as con:
        other = con._engine.pid
    assert len({small, large, other}) == 3
    with open_readonly_sql(db, memory_mb=64) as con:
        assert con._engine.pid == small
    assert _sandbox_sql.close_idle_workers() == 3
    cons = [open_readonly_sql(db) for _ in range(6)]
    pids = [c._engine.pid for c in cons]
    for c in cons:
        c.close()
    assert _sandbox_sql._POOL.pids() == pids[2:]
    assert _reaped(pids[0]) and _reaped(pids[1])
    monkeypatch.setattr(_sandbox_sql, "POOL_IDLE_MAX", 2)
    with open_readonly_sql(other_db) as con:
        newest = con._engine.pid
    assert _sandbox_sql._POOL.pids() == [pids[5], newest]
    assert all(_reaped(pid) for pid in pids[:5])


def test_pool_ends_a_grown_worker(env, monkeypatch):
    """A worker whose address space grew by more than POOL_MAX_GROWTH (here: by anything, or
    shrank by less than its room) is ended on close, not pooled."""
    monkeypatch.setattr(_sandbox_sql, "POOL_MAX_GROWTH", -1.0)
    with open_readonly_sql(_backend_db(env, "sqlite")) as con:
        pid = con._engine.pid
    assert _reaped(pid) and _sandbox_sql._POOL.pids() == []


def test_pool_skips_a_worker_that_died_while_idle(env):
    db = _backend_db(env, "sqlite")
    with open_readonly_sql(db) as con:
        pid = con._engine.pid
    os.kill(pid, signal.SIGKILL)
    with open_readonly_sql(db) as con:
        assert con._engine.pid != pid
        assert con.execute("SELECT count(*) FROM people").rows == ((40,),)
    assert _reaped(pid)


def test_forked_child_uses_workers_of_its_own(env):
    """After a fork, neither the parent's idle worker nor an open connection's worker is used
    by the child (it starts its own); the parent's go on serving the parent."""
    db = _backend_db(env, "sqlite")
    with open_readonly_sql(db) as con:
        idle = con._engine.pid
    con = open_readonly_sql(db)
    assert con._engine.pid == idle
    busy = open_readonly_sql(db)
    busy_pid = busy._engine.pid
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # the child: report the workers it got, then leave without pytest's cleanup
        try:
            con.close()
            with open_readonly_sql(db) as mine:
                got = [mine._engine.pid, mine.execute("SELECT count(*) FROM people").rows[0][0]]
            got += [busy.execute("SELECT count(*) FROM people").rows[0][0], busy._engine.pid]
            busy.close()
            _sandbox_sql.close_idle_workers()
            os.write(write, json.dumps(got).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as f:
        got = json.loads(f.read() or "null")
    os.waitpid(child, 0)
    assert got is not None and got[1] == got[2] == 40
    assert got[0] not in (idle, busy_pid) and got[3] not in (idle, busy_pid)
    assert (con._engine.pid, busy._engine.pid) == (idle, busy_pid) and not _reaped(idle)
    assert con.execute("SELECT count(*) FROM people").rows == ((40,),)
    assert busy.execute("SELECT count(*) FROM people").rows == ((40,),)
    con.close()
    busy.close()
    assert sorted(_sandbox_sql._POOL.pids()) == sorted([idle, busy_pid])


ATEXIT_SCRIPT = """
import sys
from jaxpapers.core.sandbox import open_readonly_sql
con = open_readonly_sql(sys.argv[1])
print(con._engine.pid, flush=True)
con.close()
"""


def test_idle_workers_end_at_exit(env):
    """A process that exits normally ends (and reaps) its idle workers: none is left to find
    out by itself, a second later, that its parent has gone."""
    done = subprocess.run([sys.executable, "-c", ATEXIT_SCRIPT, str(_backend_db(env, "sqlite"))],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert _reaped(int(done.stdout))


def test_pooled_open_is_cheap(env):
    """Opening and closing with a pooled SQLite worker costs about a millisecond, against
    about 0.05 s for a new worker."""
    db = _backend_db(env, "sqlite")
    t0 = time.perf_counter()
    with open_readonly_sql(db):
        cold = time.perf_counter() - t0
    times = []
    for _ in range(30):
        t0 = time.perf_counter()
        open_readonly_sql(db).close()
        times.append(time.perf_counter() - t0)
    pooled = statistics.median(times)
    assert pooled < 0.02 and pooled < cold / 5, (pooled, cold)
    assert len(_sandbox_sql._POOL.pids()) == 1


# ----------------------------------------------------------------------------- audit hook

# The worker's definitions (not its main), then its audit hook installed, then attempts.
AUDIT_TAIL = """
import json, os, socket, sqlite3, subprocess, sys
folder, uri = sys.argv[1], sys.argv[2]
sys.addaudithook(_audit_hook({"uri": uri}))


def attempt(action):
    try:
        action()
    except PermissionError as err:
        return "refused: " + str(err)
    return "allowed"


def fork():
    if os.fork() == 0:
        os._exit(0)


def inside(name):
    return os.path.join(folder, name)


tries = {
    "socket": lambda: socket.socket().close(),
    "socketpair": lambda: socket.socketpair(),
    "getaddrinfo": lambda: socket.getaddrinfo("localhost", 80),
    "open_w": lambda: open(inside("new.txt"), "w").close(),
    "open_a": lambda: open(inside("secret.csv"), "a").close(),
    "open_x": lambda: open(inside("new.txt"), "xb").close(),
    "open_r_plus": lambda: open(inside("secret.csv"), "r+").close(),
    "os_open_write": lambda: os.close(os.open(inside("new.txt"), os.O_WRONLY | os.O_CREAT)),
    "popen": lambda: subprocess.run(["true"]),
    "system": lambda: os.system("true"),
    "exec": lambda: os.execv("/bin/true", ["true"]),
    "posix_spawn": lambda: os.posix_spawn("/bin/true", ["true"], {}),
    "fork": fork,
    "remove": lambda: os.remove(inside("secret.csv")),
    "rename": lambda: os.rename(inside("secret.csv"), inside("moved.csv")),
    "sqlite_other": lambda: sqlite3.connect(inside("evil.db")).close(),
    "read": lambda: open(inside("secret.csv")).read(),
    "os_open_read": lambda: os.close(os.open(inside("secret.csv"), os.O_RDONLY)),
    "sqlite_ours": lambda: sqlite3.connect(uri, uri=True).close(),
}
print(json.dumps({name: attempt(action) for name, action in tries.items()}))
"""


def test_audit_hook_refuses_sockets_processes_and_writes(env):
    """The hook function of the worker's program, installed in a separate process the same
    way: sockets, processes, writes and other databases are refused; reads are not."""
    folder = env["db"]
    uri = _sandbox_sql._worker_settings("sqlite", str(folder / "data.db"), 64)["uri"]
    before = _snapshot(folder, env["cwd"])
    done = subprocess.run(
        [sys.executable, "-I", "-c", _sandbox_sql.worker_source(main=False) + AUDIT_TAIL,
         str(folder), uri], capture_output=True, text=True, timeout=60, cwd="/")
    assert done.returncode == 0, done.stderr
    results = json.loads(done.stdout)
    allowed = {"read", "os_open_read", "sqlite_ours"}
    for name, outcome in results.items():
        if name in allowed:
            assert outcome == "allowed", (name, outcome)
        else:
            assert outcome.startswith("refused: refused in the SQL worker"), (name, outcome)
    assert _snapshot(folder, env["cwd"]) == before


def test_audit_hook_is_installed_after_setup():
    """In the worker's main: the hook is added after the first connection is open and the
    address space capped, before the first reply (and so before any SQL runs)."""
    tree = ast.parse(_sandbox_sql.worker_source())
    main = next(node for node in tree.body
                if isinstance(node, ast.FunctionDef) and node.name == "_worker_main")
    lines = {}
    for node in ast.walk(main):
        if isinstance(node, ast.Call):
            lines.setdefault(ast.unparse(node.func), node.lineno)
        if isinstance(node, ast.For):
            lines.setdefault("for", node.lineno)
    assert (lines["_worker_connect"] < lines["_cap_address_space"] < lines["sys.addaudithook"]
            < lines["for"])
    hook = next(node for node in ast.walk(main) if isinstance(node, ast.Call)
                and ast.unparse(node.func) == "sys.addaudithook")
    assert ast.unparse(hook.args[0]) == "_audit_hook(settings)"
    assert _sandbox_sql.worker_source().endswith(_sandbox_sql_worker._WORKER_CALL)


# ----------------------------------------------------------------------------- timeouts

def _naive_runs_past(backend: str, path: pathlib.Path, sql: str, seconds: float) -> float:
    """Run ``sql`` on a plain connection, interrupted after ``seconds``; return the time it
    ran (it must still have been running: no timeout of its own)."""
    naive = _naive(backend, path)
    timer = threading.Timer(seconds, naive.interrupt)
    t0 = time.monotonic()
    timer.start()
    try:
        with pytest.raises(Exception, match="(?i)interrupt"):
            naive.execute(sql).fetchall()
        return time.monotonic() - t0
    finally:
        timer.cancel()
        naive.close()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("sql", [ENDLESS + "SELECT count(*) FROM r",
                                 ENDLESS + "SELECT i FROM r WHERE i < 0"],
                         ids=["count", "no_rows"])
def test_timeout(env, backend, sql):
    db = _backend_db(env, backend)
    before = _snapshot(env["db"], env["cwd"])
    with open_readonly_sql(db, backend=backend, timeout_s=0.5) as con:
        t0 = time.monotonic()
        r = con.execute(sql)
        wall = time.monotonic() - t0
        assert r.error and r.error.startswith("timeout:"), r.error
        assert 0.45 <= wall < 2.0 and r.seconds < 2.0
        ok = con.execute("SELECT count(*) FROM people")  # usable right after
        assert ok.error is None and ok.rows == ((40,),)
    assert _snapshot(env["db"], env["cwd"]) == before
    assert _naive_runs_past(backend, _backend_db(env, backend, "naive"), sql, 0.7) >= 0.7
