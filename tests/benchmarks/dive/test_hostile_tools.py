"""DIVE tools in the sandbox: call_tool(..., sandboxed=True) against hostile tools and arguments.

Hostile tools are registered by a module written to a temp folder, which only the sandbox
worker imports (``extra_modules``): this process's registry never sees them. Each must come
back as ``(False, message)``, never a crash or an effect. Hostile arguments to the normal tools
give ``(False, ...)`` or the in-process value; and on arguments drawn from each world's lexicon
every tool of every domain gives the same result in the sandbox as in this process.
"""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from jaxpapers.benchmarks.dive.worlds import DOMAINS, call_tool, domain_tools, make_world, registry
from jaxpapers.benchmarks.dive.worlds import _core
from jaxpapers.core import _sandbox_sql, _sandbox_worker

HOSTILE = '''
import os
import socket
import subprocess

from jaxpapers.benchmarks.dive.worlds._core import arg, tool


def hostile(verb, obj, **params):
    return tool("general", verb, obj, f"{verb} {obj}", params=params, returns=arg("text"),
                kind="P", group="hostile")


@hostile("leak", "socket")
def leak_socket(world):
    socket.create_connection(("127.0.0.1", 9), timeout=1).close()
    return "leaked"


@hostile("write", "file", path=arg("text"))
def write_file(world, path):
    with open(path, "w") as f:
        f.write(str(world.data))
    return "written"


@hostile("spawn", "process")
def spawn_process(world):
    return str(subprocess.run(["true"]).returncode)


@hostile("run", "system")
def run_system(world):
    return str(os.system("true"))


@hostile("signal", "parent")
def signal_parent(world):
    os.kill(os.getppid(), 0)
    return "signalled"


@hostile("eat", "memory")
def eat_memory(world):
    return str(len(bytearray(4 << 30)))


@hostile("loop", "forever")
def loop_forever(world):
    while True:
        pass


@hostile("exit", "worker")
def exit_worker(world):
    os._exit(1)


@hostile("crash", "bug")
def crash_bug(world):
    return {1, 2}.pop() / 0
'''


@pytest.fixture(scope="module", autouse=True)
def no_idle_workers():
    _sandbox_sql.close_idle_workers()
    yield
    _sandbox_sql.close_idle_workers()


@pytest.fixture
def hostile(tmp_path, monkeypatch):
    """The hostile tools' module, importable by the worker (this process's ``sys.path``)."""
    (tmp_path / "dive_hostile_tools.py").write_text(HOSTILE)
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def sandboxed(world, name, args, **options):
    out = call_tool(world, name, args, sandboxed=True, **options)
    assert isinstance(out, tuple) and len(out) == 2 and isinstance(out[0], bool), out
    return out


def test_hostile_tools_fail_in_the_sandbox(hostile):
    world = make_world("general", 0)
    modules = ["dive_hostile_tools"]
    target = hostile / "written.txt"
    cases = [("general.leak_socket", {}, "refused: socket."),
             ("general.write_file", {"path": str(target)}, "refused: open "),
             ("general.spawn_process", {}, "refused: subprocess.Popen "),
             ("general.run_system", {}, "refused: os.system "),
             ("general.signal_parent", {}, "refused: os.kill "),
             ("general.eat_memory", {}, "out of memory: "),
             ("general.crash_bug", {}, "ZeroDivisionError: "),
             ("general.exit_worker", {}, "worker died: "),
             ("general.loop_forever", {}, "timeout: ")]
    for name, args, why in cases:
        timeout_s = 0.5 if "loop" in name else 5.0
        ok, message = sandboxed(world, name, args, extra_modules=modules, timeout_s=timeout_s)
        assert not ok and message.startswith(f"{name}: {why}"), message
    assert not target.exists()
    assert "general.leak_socket" not in registry()  # registered in the worker only
    assert call_tool(world, "general.leak_socket", {}) == (
        False, "unknown tool 'general.leak_socket'")
    ok, out = sandboxed(world, "general.get_country", {"city": world.lexicon["city"][0]},
                        extra_modules=modules)
    assert ok and out == call_tool(world, "general.get_country",
                                   {"city": world.lexicon["city"][0]})[1]


def test_hostile_arguments_never_crash():
    world = make_world("general", 0)
    city = world.lexicon["city"][0]
    cases = [
        ("general.get_country", {"city": "x" * 10**7}),  # 10 MB: sent, an unknown city
        ("general.get_country", {"city": "x" * (20 << 20)}),  # more than MAX_REQUEST_BYTES
        ("general.get_country", {"city": 12}), ("general.get_country", {"city": None}),
        ("general.get_country", {"city": [city]}), ("general.get_country", {"city": {}}),
        ("general.get_country", {"city": "\ud800\x00" + city}),
        ("general.get_country", {}), ("general.get_country", {"city": city, "x": 1}),
        ("general.get_country", [city]), ("general.get_country", "city"),
        ("general.no_such_tool", {}), ("bio.get_gene", {"gene": city}),
        ("general.compute_total", {"values": [1] * 10**7}),  # 30 MB of JSON: not sent
        ("general.compute_total", {"values": [0.5] * 10**6}),  # 5 MB: sent
        ("general.compute_total", {"values": [1, "2"]}),
        ("general.compute_total", {"values": [[1]] * 3}),
        ("general.compute_total", {"values": [1e308, 1e308]}),
        ("general.compute_total", {"values": {1, 2}}),
        ("general.compute_total", {"values": float("nan")}),
        ("general.round_number", {"value": 1.5, "digits": 10**100}),
        ("general.round_number", {"value": 1e308, "digits": -(10**9)}),
        ("general.add_days", {"date": "2026-01-01", "days": 10**18}),
        ("general.round_time", {"time": "99:99", "step": 0}),
        ("general.find_workday", {"date": "9999-12-31", "days": 3650}),
    ]
    deep = []
    for _ in range(10_000):
        deep = [deep]
    cases.append(("general.compute_total", {"values": deep}))
    results = {}
    for i, (name, args) in enumerate(cases):
        ok, out = results[i] = sandboxed(world, name, args)
        if ok:  # the value this process computes (a tool's bug would raise here)
            assert call_tool(world, name, args) == (True, out), name
        else:
            assert isinstance(out, str) and out, name
    assert results[0][1].startswith("general.get_country: city 'xxx")
    assert "MAX_REQUEST_BYTES" in results[1][1] and "MAX_REQUEST_BYTES" in results[13][1]
    assert results[14] == (True, 5e5)
    assert "JSON-able" in results[18][1] and "JSON-able" in results[19][1]
    assert "JSON-able" in results[len(cases) - 1][1]  # nested too deeply to send


def _args(world, spec, variant: int) -> dict:
    """Arguments for ``spec`` from the world's lexicon (a fixed value for types it lacks)."""
    out = {}
    for i, (key, schema) in enumerate(spec.parameters["properties"].items()):
        k = variant + i
        values = list(world.lexicon.get(schema["x-type"], ()))
        if "enum" in schema:
            values = [v for v in values if v in schema["enum"]] or list(schema["enum"])
        if schema["type"] == "array":
            out[key] = values[k:k + 3] if values else [1.5, 2.0 + variant, 3.25]
        elif values:
            out[key] = values[k % len(values)]
        else:
            out[key] = {"integer": 3 + variant, "number": 2.5 + variant, "boolean": True,
                        "string": "ATGGCCATTGTAATGGGCCGC"[variant:]}.get(schema["type"])
    return out


def test_sandboxed_and_in_process_results_agree():
    calls = 0
    for domain in DOMAINS:
        world = make_world(domain, 0)
        for name, t in domain_tools(domain).items():
            for variant in range(2):
                args = _args(world, t.spec, variant)
                assert sandboxed(world, name, args) == call_tool(world, name, args), (name,
                                                                                      args)
                calls += 1
    assert calls == 2 * sum(len(domain_tools(d)) for d in DOMAINS) > 300


def test_worlds_are_cached_per_worker():
    assert _core._run_tool("general", 3, "general.no_such_tool", {}) == [
        False, "unknown tool 'general.no_such_tool'"]
    world = _core._WORKER_WORLDS[("general", 3)]
    _core._run_tool("general", 3, "general.no_such_tool", {})
    assert _core._WORKER_WORLDS[("general", 3)] is world
    for seed in range(100, 100 + _core._WORKER_WORLDS_MAX):
        _core._run_tool("general", seed, "general.no_such_tool", {})
    assert len(_core._WORKER_WORLDS) == _core._WORKER_WORLDS_MAX
    assert ("general", 3) not in _core._WORKER_WORLDS
    _core._WORKER_WORLDS.clear()


def test_bad_options_raise():
    world = make_world("general", 0)
    for timeout_s in (0, -1, float("nan"), True):
        with pytest.raises(ValueError, match="timeout_s"):
            call_tool(world, "general.get_country", {"city": "x"}, sandboxed=True,
                      timeout_s=timeout_s)
    with pytest.raises(TypeError, match="extra_modules"):
        call_tool(world, "general.get_country", {"city": "x"}, sandboxed=True,
                  extra_modules="dive_hostile_tools")


def test_the_default_path_stays_in_process():
    code = ("import sys, time; from jaxpapers.benchmarks.dive.worlds import call_tool, "
            "make_world; w = make_world('general', 0); c = w.lexicon['city'][0]; "
            "t = time.perf_counter(); [call_tool(w, 'general.get_country', {'city': c}) "
            "for _ in range(1000)]; print((time.perf_counter() - t) / 1000, "
            "'jaxpapers.core._sandbox_worker' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    seconds, imported = out.stdout.split()
    assert imported == "False", out.stderr
    assert float(seconds) < 0.01
    world = make_world("general", 0)
    args = {"city": world.lexicon["city"][0]}
    sandboxed(world, "general.get_country", args)
    start = time.perf_counter()
    for _ in range(20):
        assert sandboxed(world, "general.get_country", args) == call_tool(
            world, "general.get_country", args)
    assert (time.perf_counter() - start) / 20 < 0.05  # a pooled worker: about 0.5 ms a call
    assert _sandbox_worker.MAX_REQUEST_BYTES == 16 << 20
