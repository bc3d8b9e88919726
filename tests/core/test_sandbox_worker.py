"""jaxpapers.core.sandbox.call_function: normal calls, errors, and hostile functions that must fail.

The functions live in helper modules written to a temp folder, which the worker imports from
(``sys_path``). Where a defence stops something a plain process may do (open a socket, write or
create a file, start a process, signal another process, call libc, allocate past the cap, run
code at import), the same function is also run in a plain subprocess (no sandbox) and must
succeed there: the test then shows that our defence, not the test, stops it. The worker is the
SQL workers' machinery (``_sandbox_sql``): its pool, hard deadline and parent-death watchdog are
tested here for function workers.
"""

from __future__ import annotations

import doctest
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from jaxpapers.core import _sandbox_sql, _sandbox_worker, sandbox
from jaxpapers.core.sandbox import FunctionResult, call_function

HELPER = '''
import os
import socket
import subprocess
import time


def add(a, b):
    return a + b


def echo(**kwargs):
    return kwargs


def pid():
    return os.getpid()


def nap(seconds):
    time.sleep(seconds)
    return os.getpid()


def fail(message):
    raise ValueError(message)


def open_socket():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.close()
    return "opened"


def write_file(path):
    with open(path, "w") as f:
        f.write("written")
    return "written"


def make_node(path):
    os.mknod(path)
    return "made"


def start_process():
    return subprocess.run(["true"]).returncode


def run_system():
    return os.system("true")


def signal_parent():
    os.kill(os.getppid(), 0)
    return "signalled"


def allocate(n):
    return len(bytearray(n))


def call_libc():
    import ctypes

    return ctypes.CDLL(None).getpid()


def loop_forever():
    while True:
        pass


def ignore_interrupts(seconds):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            while time.monotonic() < end:
                pass
        except BaseException:
            pass


def die():
    os._exit(7)


def exit_quietly():
    raise SystemExit(3)


def not_json():
    return {"a": {1, 2}}


def nan():
    return float("nan")


def text(n):
    return "x" * n


def forge_replies():
    fake = b'{"id": "0000000000000000", "ok": true, "value": "forged"}\\n'
    written = []
    for fd in range(3, 12):
        try:
            os.write(fd, fake)
            written.append(fd)
        except OSError:
            pass
    return written
'''

AT_IMPORT = '''
import socket

socket.socket(socket.AF_INET, socket.SOCK_STREAM).close()


def f():
    return "imported"
'''


@pytest.fixture(scope="module")
def helpers(tmp_path_factory) -> str:
    folder = tmp_path_factory.mktemp("helpers")
    (folder / "helper.py").write_text(HELPER)
    (folder / "at_import.py").write_text(AT_IMPORT)
    return str(folder)


@pytest.fixture(scope="module", autouse=True)
def no_idle_workers():
    """The module starts and ends with no idle pooled worker."""
    _sandbox_sql.close_idle_workers()
    yield
    _sandbox_sql.close_idle_workers()


def call(helpers: str, name: str, module: str = "helper", **kwargs) -> FunctionResult:
    options = {k: kwargs.pop(k) for k in ("timeout_s", "memory_mb") if k in kwargs}
    return call_function(f"{module}:{name}", kwargs, sys_path=[helpers], **options)


def value(helpers: str, name: str, **kwargs):
    r = call(helpers, name, **kwargs)
    assert r.ok and r.error is None, r.error
    return r.value


def refused(helpers: str, name: str, event: str, **kwargs) -> FunctionResult:
    r = call(helpers, name, **kwargs)
    assert not r.ok and r.value is None
    assert r.error.startswith(f"refused: {event} "), r.error
    return r


def _plain(helpers: str, calls: list) -> list:
    """Run helper calls ``[name, kwargs]`` in a plain subprocess (no sandbox): their values."""
    code = ("import json, sys; sys.path.insert(0, sys.argv[1]); import helper; "
            "print(json.dumps([getattr(helper, n)(**k) for n, k in json.loads(sys.argv[2])]))")
    out = subprocess.run([sys.executable, "-c", code, helpers, json.dumps(calls)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def _gone(pid: int, within_s: float = 5.0) -> bool:
    """The process ``pid`` has ended within ``within_s``: it is gone, or a zombie whose threads
    have all exited (so that its parent can reap it)."""
    end = time.monotonic() + within_s
    while time.monotonic() < end:
        try:
            with open(f"/proc/{pid}/stat") as f:
                zombie = f.read().rsplit(")", 1)[1].split()[0] == "Z"
            if zombie and len(os.listdir(f"/proc/{pid}/task")) <= 1:
                return True
        except FileNotFoundError:
            return True
        time.sleep(0.02)
    return False


# ----------------------------------------------------------------------------- normal calls

def test_a_function_returns_its_value(helpers):
    assert value(helpers, "add", a=2, b=3) == 5
    assert value(helpers, "add", a="jax", b="papers") == "jaxpapers"
    nested = {"t": [1, 2.5, None, True], "d": {"k": "\u00e9\ud83d"}}
    assert value(helpers, "echo", **nested) == nested
    assert value(helpers, "add", a=[1], b=[2]) == [1, 2]
    r = call_function("textwrap:shorten", {"text": "a b c d e f g", "width": 7})
    assert r == FunctionResult(True, "a [...]", None, r.seconds) and r.seconds > 0
    assert sandbox.call_function is call_function and "call_function" in sandbox.__all__


def test_the_module_docstring_examples():
    assert doctest.testmod(_sandbox_worker).failed == 0


def test_an_exception_is_an_error_and_the_worker_stays(helpers):
    pid = value(helpers, "pid")
    r = call(helpers, "fail", message="boom")
    assert (r.ok, r.value, r.error) == (False, None, "ValueError: boom")
    r = call(helpers, "add", a=1)
    assert r.error.startswith("TypeError: add() missing 1 required positional argument")
    assert call(helpers, "exit_quietly").error == "SystemExit: 3"
    assert call(helpers, "missing").error == "AttributeError: module 'helper' has no attribute " \
                                             "'missing'"
    assert call(helpers, "f", module="no_such_module").error == (
        "ModuleNotFoundError: No module named 'no_such_module'")
    assert value(helpers, "pid") == pid


def test_results_that_are_not_json_or_too_large(helpers, monkeypatch):
    assert call(helpers, "not_json").error.startswith(
        "invalid result: the function returned a value that is not JSON (TypeError: Object of "
        "type set")
    assert call(helpers, "nan").error.startswith("invalid result:")
    monkeypatch.setattr(_sandbox_worker, "MAX_RESULT_BYTES", 1000)
    assert value(helpers, "text", n=900) == "x" * 900
    assert call(helpers, "text", n=1000).error.startswith(
        "result too large: the reply would take 10")


def test_bad_arguments_raise_value_error(helpers):
    cases = [
        (("helper.add", {}), {}, "target"), (("helper:", {}), {}, "target"),
        (("helper:1x", {}), {}, "target"), ((None, {}), {}, "target"),
        (("a..b:f", {}), {}, "target"),
        (("helper:add", [1, 2]), {}, "kwargs"), (("helper:add", {1: 2}), {}, "kwargs"),
        (("helper:add", {"a": {1, 2}}), {}, "kwargs"), (("helper:add", {"a": object()}), {},
                                                       "kwargs"),
        (("helper:add", {"a": float("nan")}), {}, "kwargs"),
        (("helper:add", {}), {"timeout_s": 0}, "timeout_s"),
        (("helper:add", {}), {"timeout_s": -1.0}, "timeout_s"),
        (("helper:add", {}), {"timeout_s": float("inf")}, "timeout_s"),
        (("helper:add", {}), {"timeout_s": True}, "timeout_s"),
        (("helper:add", {}), {"timeout_s": "1"}, "timeout_s"),
        (("helper:add", {}), {"memory_mb": 15}, "memory_mb"),
        (("helper:add", {}), {"memory_mb": 64.0}, "memory_mb"),
        (("helper:add", {}), {"memory_mb": True}, "memory_mb"),
        (("helper:add", {}), {"sys_path": helpers}, "sys_path"),
        (("helper:add", {}), {"sys_path": [1]}, "sys_path"),
    ]
    for args, options, word in cases:
        with pytest.raises(ValueError, match=word):
            call_function(*args, **options)
    deep = []
    for _ in range(100_000):
        deep = [deep]
    with pytest.raises(ValueError, match="kwargs"):
        call_function("helper:add", {"a": deep})
    with pytest.raises(ValueError, match="MAX_REQUEST_BYTES"):
        call_function("helper:text", {"n": "x" * _sandbox_worker.MAX_REQUEST_BYTES})


# ----------------------------------------------------------------------------- refused

def test_hostile_functions_are_refused(helpers, tmp_path):
    pid = value(helpers, "pid")
    refused(helpers, "open_socket", "socket.__new__")
    target = tmp_path / "written.txt"
    r = refused(helpers, "write_file", "open", path=str(target))
    assert "for writing" in r.error and not target.exists()
    node = tmp_path / "node"
    refused(helpers, "make_node", "os.mknod", path=str(node))
    assert not node.exists()
    refused(helpers, "start_process", "subprocess.Popen")
    refused(helpers, "run_system", "os.system")
    refused(helpers, "signal_parent", "os.kill")
    refused(helpers, "call_libc", "ctypes.dlsym")
    assert value(helpers, "pid") == pid  # a refusal leaves the worker usable
    assert list(tmp_path.iterdir()) == []


def test_module_level_code_is_refused_at_import(helpers):
    r = refused(helpers, "f", "socket.__new__", module="at_import")
    assert "PermissionError" in r.error
    assert value(helpers, "add", a=1, b=1) == 2


def test_a_plain_process_does_what_the_worker_refuses(helpers, tmp_path):
    """Each defence above can fail: without the sandbox the same functions succeed."""
    target, node = tmp_path / "written.txt", tmp_path / "node"
    calls = [["open_socket", {}], ["write_file", {"path": str(target)}],
             ["make_node", {"path": str(node)}], ["start_process", {}], ["run_system", {}],
             ["signal_parent", {}], ["call_libc", {}]]
    out = _plain(helpers, calls)
    assert out[:6] == ["opened", "written", "made", 0, 0, "signalled"]
    assert isinstance(out[6], int) and out[6] > 0
    assert target.read_text() == "written" and node.exists()
    code = f"import sys; sys.path.insert(0, {helpers!r}); import at_import; print(at_import.f())"
    plain = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert plain.stdout.strip() == "imported", plain.stderr


def test_out_of_memory_keeps_the_worker(helpers):
    pid = value(helpers, "pid")
    r = call(helpers, "allocate", n=4 << 30)
    assert r.error.startswith("out of memory: MemoryError (the function's worker may grow by at "
                              "most 384 MiB: memory_mb=256 plus 128)"), r.error
    assert value(helpers, "pid") == pid
    # The cap, not the machine, stops it: 192 MiB fail with memory_mb=16 (144 MiB of room) and
    # work in a plain process (bytearray touches every page: 4 GiB would take seconds there).
    assert call(helpers, "allocate", n=192 << 20, memory_mb=16).error.startswith(
        "out of memory: ")
    assert _plain(helpers, [["allocate", {"n": 192 << 20}]]) == [192 << 20]
    assert value(helpers, "allocate", n=1 << 20, memory_mb=16) == 1 << 20


def test_an_endless_loop_times_out_and_the_worker_is_replaced(helpers):
    pid = value(helpers, "pid")
    r = call(helpers, "loop_forever", timeout_s=0.5)
    assert r.error.startswith("timeout: the call ran past timeout_s=0.5 s"), r.error
    assert 0.5 <= r.seconds < 0.5 + _sandbox_worker.WORKER_GRACE_S
    assert _gone(pid)
    assert value(helpers, "add", a=1, b=2) == 3
    assert value(helpers, "pid") != pid


def test_a_function_that_ignores_the_interrupt_is_killed(helpers, monkeypatch):
    monkeypatch.setattr(_sandbox_worker, "WORKER_GRACE_S", 0.5)
    pid = value(helpers, "pid")
    r = call(helpers, "ignore_interrupts", seconds=60, timeout_s=0.3)
    assert r.error.startswith("timeout: no reply 0.5 s after timeout_s=0.3 s"), r.error
    assert 0.8 <= r.seconds < 2.0
    assert _gone(pid)
    assert value(helpers, "add", a=1, b=2) == 3


# ----------------------------------------------------------------------------- the worker

def test_workers_are_pooled_by_sys_path_and_memory(helpers):
    pid = value(helpers, "pid")
    assert value(helpers, "pid") == pid
    assert pid in _sandbox_sql._POOL.pids()
    other = value(helpers, "pid", memory_mb=128)
    assert other != pid
    r = call_function("helper:pid", {}, sys_path=[helpers, "/nonexistent"])
    assert r.ok and r.value not in (pid, other)
    assert value(helpers, "pid") == pid


def test_concurrent_calls_get_workers_of_their_own(helpers):
    pids = []
    threads = [threading.Thread(target=lambda: pids.append(value(helpers, "nap", seconds=0.3)))
               for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(pids)) == 2


def test_a_killed_or_dead_worker_is_replaced(helpers):
    pid = value(helpers, "pid")
    os.kill(pid, signal.SIGKILL)  # while idle, in the pool
    assert _gone(pid)
    new = value(helpers, "pid")
    assert new != pid
    r = call(helpers, "die")
    assert r.error.startswith("worker died: "), r.error
    assert "exited with status 7" in r.error and _gone(new)
    assert value(helpers, "add", a=2, b=2) == 4


def test_forged_reply_lines_are_skipped(helpers, monkeypatch):
    assert value(helpers, "forge_replies")  # it wrote a line to the reply pipe: skipped
    assert value(helpers, "add", a=3, b=4) == 7
    # Without the id check the forged line is taken for the reply, and the next call gets the
    # forging call's real reply.
    monkeypatch.setattr(_sandbox_worker._FunctionWorker, "call",
                        lambda self, line, nonce, deadline: self._read_reply(line, deadline))
    assert value(helpers, "forge_replies") == "forged"
    assert value(helpers, "add", a=3, b=4) != 7
    _sandbox_sql.close_idle_workers()  # that worker is out of step


def test_a_busy_worker_ends_when_its_parent_dies(helpers):
    """Its watchdog ends it (an idle one also sees its requests pipe close)."""
    code = textwrap.dedent(f"""
        import os, threading, time
        from jaxpapers.core.sandbox import call_function
        pid = call_function("helper:pid", {{}}, sys_path=[{helpers!r}]).value
        threading.Thread(target=call_function, args=("helper:loop_forever", {{}}),
                         kwargs={{"sys_path": [{helpers!r}], "timeout_s": 60}}).start()
        time.sleep(0.3)
        print(pid, flush=True)
        os._exit(0)  # no atexit, no kill: the busy worker is left to its watchdog
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60)
    pid = int(out.stdout)
    assert not _gone(pid, within_s=0.1)  # still looping
    assert _gone(pid, within_s=5.0)


def test_the_worker_program_reuses_the_sql_workers_code():
    source = _sandbox_worker.function_worker_source()
    for name in ("class _Watchdog", "def _cap_address_space", "def _audit_hook"):
        assert source.count(name) == 1
        assert name in _sandbox_sql.worker_source()
    assert issubclass(_sandbox_worker._FunctionWorker, _sandbox_sql._Worker)
    assert _sandbox_worker.close_idle_workers is _sandbox_sql.close_idle_workers
    compile(source, "<function worker>", "exec")
    assert "import jaxpapers" not in source and "from jaxpapers" not in source
