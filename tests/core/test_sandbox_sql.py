"""jaxpapers.core.sandbox.open_readonly_sql: normal queries, limits, and attacks that must fail.

Every attack that succeeds against a plain read-only connection (SQLite ``mode=ro`` URI,
``duckdb.connect(path, read_only=True)``) is also run there, on a copy of the database in another
folder, and must succeed there: the test then shows that our defence, not the test, stops it
(exceptions are noted per case: e.g. INSTALL is not tried there, it would reach the network).
After each attack on our connection, every file in the database's folder and in the cwd (an
empty temp folder) must be byte-identical and no file may have appeared. Our DuckDB connections
run in a worker process each; the "DuckDB worker" tests cover its address-space cap (values of
500 MB and more, which a plain connection, run in a separate process, builds), its hard
deadline, its replacement after it died, and its end (close, garbage collection, parent death).
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
import subprocess
import sys
import threading
import time

import pytest

from jaxpapers.core import _sandbox_sql, sandbox
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
                    assert "worker was killed" in r.error and time.monotonic() - t0 < 1.0 + 1.0
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


def test_duckdb_worker_process(env):
    """Its own session, ``/`` as cwd, PATH only in its environment, no core dumps, the address
    space capped at what it reported; the program imports no jaxpapers module."""
    with open_readonly_sql(_backend_db(env, "duckdb"), backend="duckdb", memory_mb=64) as con:
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
        assert size < cap <= size + (64 + _sandbox_sql.WORKER_MARGIN_MB) * 2**20
        assert con.execute("SELECT count(*) FROM people").rows == ((40,),)
    assert _reaped(pid)
    tree = ast.parse(_sandbox_sql.worker_source())
    imported = {alias.name.split(".")[0] for node in ast.walk(tree)
                if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(tree)
                 if isinstance(node, ast.ImportFrom)}
    assert imported <= set(sys.stdlib_module_names) | {"duckdb"}, imported


def test_duckdb_worker_is_reaped_on_close_and_collection(env):
    db = _backend_db(env, "duckdb")
    con = open_readonly_sql(db, backend="duckdb")
    pid = con._engine.pid
    con.close()
    assert _reaped(pid)
    con = open_readonly_sql(db, backend="duckdb")
    pid = con._engine.pid
    del con
    gc.collect()
    assert _reaped(pid)


ORPHAN_SCRIPT = """
import sys, time
from jaxpapers.core.sandbox import open_readonly_sql
con = open_readonly_sql(sys.argv[1], backend="duckdb")
print(con._engine.pid, flush=True)
time.sleep(60)
"""


def test_duckdb_worker_ends_with_its_parent(env):
    """A process killed with its connection open leaves no worker running."""
    parent = subprocess.Popen(
        [sys.executable, "-c", ORPHAN_SCRIPT, str(_backend_db(env, "duckdb"))],
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


def test_duckdb_killed_worker_is_replaced(env):
    """A worker killed from outside: the next call says so, the one after runs on a new one."""
    with open_readonly_sql(_backend_db(env, "duckdb"), backend="duckdb") as con:
        pid = con._engine.pid
        os.kill(pid, signal.SIGKILL)
        r = con.execute("SELECT count(*) FROM people")
        assert r.error and r.error.startswith("worker died: "), r.error
        assert "SIGKILL" in r.error
        assert _reaped(pid)
        r = con.execute("SELECT count(*) FROM people")
        assert r.error is None and r.rows == ((40,),)
        assert con._engine.pid not in (None, pid)


def test_duckdb_unresponsive_worker_is_killed_at_the_hard_deadline(env, monkeypatch):
    """A worker that does not answer (stopped here; in real life a function that does not see
    the interrupt) is killed at timeout_s + WORKER_GRACE_S (shortened for time); the next call
    runs on a new worker."""
    monkeypatch.setattr(_sandbox_sql, "WORKER_GRACE_S", 0.5)
    with open_readonly_sql(_backend_db(env, "duckdb"), backend="duckdb", timeout_s=0.3) as con:
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


def test_duckdb_connections_are_separate(env):
    """Each connection is its own process: other settings on the same file, and a plain
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


def test_duckdb_result_too_large(env, monkeypatch):
    monkeypatch.setattr(_sandbox_sql, "MAX_RESULT_BYTES", 10_000)
    with open_readonly_sql(_backend_db(env, "duckdb"), backend="duckdb") as con:
        r = con.execute("SELECT repeat('a', 20000) AS s")
        assert r.error and r.error.startswith("result too large: "), r.error
        assert con.execute("SELECT repeat('a', 2000) AS s").rows == (("a" * 2000,),)


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
