"""jaxpapers.core.sandbox: statuses, limits, and escape attempts that must stay contained.

Tests that run code need a working bubblewrap (Debian: ``apt-get install bubblewrap``; ``.ci/run``
installs it) and skip with the reason without it; the argument checks and the "unavailable" path
always run. As root (as in CI) the sandbox runs as uid 65534, which these tests check.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid

import pytest

from jaxpapers.core import sandbox

ROOT = pathlib.Path(__file__).resolve().parents[2]
IS_ROOT = os.geteuid() == 0


@pytest.fixture
def sbx(work_parent):
    """The sandbox module, or a skip saying why it cannot run here; checks no work folder stays."""
    reason = sandbox.why_unavailable()
    if reason:
        pytest.skip(reason)
    yield sandbox
    assert list(work_parent.iterdir()) == [], "a work folder was left behind"


def _json(result: sandbox.SandboxResult):
    assert result.status == "ok", (result.status, result.stderr, result.message)
    return json.loads(result.stdout)


def test_ok_error_and_exit_statuses(sbx):
    r = sbx.run_python("import sys\nprint('out')\nprint('err', file=sys.stderr)")
    assert (r.status, r.returncode, r.stdout, r.stderr, r.message) == ("ok", 0, "out\n", "err\n",
                                                                        "")
    assert r.ok and not r.truncated and 0.0 < r.wall_s < 5.0

    r = sbx.run_python("print('before')\nraise ValueError('boom')")
    assert (r.status, r.returncode, r.stdout) == ("error", 1, "before\n")
    assert "ValueError: boom" in r.stderr and 'File "/tmp/work/main.py"' in r.stderr

    r = sbx.run_python("import sys\nsys.exit(7)")
    assert (r.status, r.returncode) == ("error", 7)

    r = sbx.run_python("def f(:\n    pass")
    assert r.status == "error" and "SyntaxError" in r.stderr

    r = sbx.run_python("import os, signal\nos.kill(os.getpid(), signal.SIGTERM)")
    assert (r.status, r.returncode) == ("error", 128 + signal.SIGTERM)  # a signal N: 128 + N

    # the CPU-seconds limit kills with SIGXCPU, which is reported as a timeout
    r = sbx.run_python("import os, signal\nos.kill(os.getpid(), signal.SIGXCPU)")
    assert (r.status, r.returncode) == ("timeout", 128 + signal.SIGXCPU) and "CPU time" in r.message


def test_identity_isolation_files_and_stdin(sbx):
    src = """
import json, os, socket, sys
data = open("data/in.txt").read().split()
try:
    open("/etc/shadow").read()
    shadow = "read"
except OSError as e:
    shadow = type(e).__name__
try:
    import numpy
    numpy_ok = True
except ImportError:
    numpy_ok = False
open("out.txt", "w").write("hello")
print(json.dumps(dict(
    uid=os.getuid(), euid=os.geteuid(), gid=os.getgid(), groups=os.getgroups(), cwd=os.getcwd(),
    pid=os.getpid(), pids=sorted(int(p) for p in os.listdir("/proc") if p.isdigit()),
    host=socket.gethostname(), exe=sys.executable, isolated=sys.flags.isolated,
    no_site=sys.flags.no_site, tmp=os.listdir("/tmp"), root=os.listdir("/root"), shadow=shadow,
    numpy=numpy_ok, total=sum(map(int, data)) + int(sys.stdin.read()))))
"""
    r = sbx.run_python(src, files={"data/in.txt": "3 4"}, stdin="5")
    got = _json(r)
    uid = 65534 if IS_ROOT else os.getuid()
    assert (got["uid"], got["euid"]) == (uid, uid)
    if IS_ROOT:
        assert got["gid"] == 65534 and got["groups"] == [] and got["shadow"] == "PermissionError"
    assert got["cwd"] == sandbox.SANDBOX_WORK and got["tmp"] == ["work"] and got["root"] == []
    # its own pid namespace: bwrap's init is pid 1, the program a small pid, nothing else visible
    assert got["pid"] <= 3 and max(got["pids"]) <= 3
    assert got["host"] == "sandbox" and got["exe"] == "/usr/bin/python3"
    assert got["isolated"] == 1 and got["no_site"] == 1 and got["numpy"] is False
    assert got["total"] == 12
    assert r.files == {"data/in.txt": "3 4", "main.py": src, "out.txt": "hello"}


def test_wall_clock_timeout_kills_the_program(sbx):
    t0 = time.monotonic()
    r = sbx.run_python("print('started', flush=True)\nwhile True:\n    pass", timeout_s=1.0)
    assert (r.status, r.returncode, r.stdout) == ("timeout", None, "started\n")
    assert 1.0 <= r.wall_s < 4.0 and time.monotonic() - t0 < 6.0
    assert "wall-clock" in r.message

    r = sbx.run_python("import time\ntime.sleep(60)", timeout_s=0.5)  # idle: only the wall clock
    assert (r.status, r.returncode) == ("timeout", None) and 0.5 <= r.wall_s < 3.0


def test_output_is_truncated(sbx):
    r = sbx.run_python("import sys\nsys.stdout.write('x' * 200000)\nsys.stderr.write('y' * 10)")
    assert r.status == "ok" and r.truncated and r.stdout == "x" * sbx.OUTPUT_LIMIT
    assert r.stderr == "y" * 10 and "stdout truncated" in r.message

    # an endless flood is read and dropped, never held in memory
    r = sbx.run_python("import sys\nwhile True:\n    sys.stdout.write('z' * 65536)", timeout_s=1.0)
    assert r.status == "timeout" and r.stdout == "z" * sbx.OUTPUT_LIMIT

    r = sbx.run([sbx.PYTHON, "-c", "print('abcdef')"], output_limit=3)
    assert (r.status, r.stdout, r.truncated) == ("ok", "abc", True)


def test_writes_outside_the_work_folder_are_contained(sbx):
    token = f"jxp-escape-{uuid.uuid4().hex}"
    targets = sorted({"/tmp", "/root", "/etc", "/usr", "/var/tmp", "/dev", "/dev/shm",
                      str(pathlib.Path.home()), tempfile.gettempdir(), str(ROOT),
                      str(ROOT / "jaxpapers" / "core"), str(sbx.WORK_PARENT)})
    src = f"""
import json, os
token, out = {token!r}, {{}}
for d in {targets!r}:
    try:
        with open(os.path.join(d, token), "w") as f:
            f.write("escaped")
        out[d] = "written"
    except OSError as e:
        out[d] = type(e).__name__
for what, fn in (("remove README", lambda: os.remove({str(ROOT / "README.md")!r})),
                 ("mkdir repo", lambda: os.mkdir({str(ROOT / token)!r})),
                 ("symlink etc", lambda: os.symlink("/tmp/x", "/etc/" + token))):
    try:
        fn()
        out[what] = "done"
    except OSError as e:
        out[what] = type(e).__name__
open("inside.txt", "w").write("fine")
print(json.dumps(out))
"""
    got = _json(sbx.run_python(src))
    for d in targets:
        assert not (pathlib.Path(d) / token).exists(), f"the sandbox wrote into {d}"
    for d in ("/etc", "/usr", "/dev", str(ROOT), str(ROOT / "jaxpapers" / "core")):
        assert got[d] != "written", d  # read-only; the hidden folders are private tmpfs
    assert got["remove README"] != "done" and (ROOT / "README.md").exists()
    assert got["mkdir repo"] != "done" and got["symlink etc"] != "done"


def test_environment_is_not_inherited(sbx, monkeypatch):
    secret = f"jxp-secret-{uuid.uuid4().hex}"
    monkeypatch.setenv("JAXPAPERS_SANDBOX_SECRET", secret)
    src = """
import json, os
seen = []
for p in os.listdir("/proc"):
    for name in ("environ", "cmdline"):
        try:
            seen.append(open(f"/proc/{p}/{name}", "rb").read().decode("utf-8", "replace"))
        except OSError:
            pass
print(json.dumps({"env": dict(os.environ), "proc": seen}))
"""
    r = sbx.run_python(src)
    got = _json(r)
    assert secret not in r.stdout and secret not in r.stderr
    assert set(got["env"]) <= {"PATH", "HOME", "TMPDIR", "LANG", "LC_CTYPE", "PWD"}
    assert got["env"]["PATH"] == "/usr/bin:/bin" and got["env"]["HOME"] == sandbox.SANDBOX_WORK
    assert any("/usr/bin/python3" in s for s in got["proc"])  # /proc really was readable


def test_no_network(sbx):
    with socket.create_server(("127.0.0.1", 0)) as server:
        server.settimeout(0.3)
        port = server.getsockname()[1]
        src = f"""
import json, socket
out = {{}}
for name, addr in (("loopback", ("127.0.0.1", {port})), ("outside", ("192.0.2.1", 80))):
    s = socket.socket()
    s.settimeout(2)
    try:
        s.connect(addr)
        out[name] = "connected"
    except OSError as e:
        out[name] = type(e).__name__ + ": " + str(e)
try:
    socket.getaddrinfo("example.com", 80)
    out["dns"] = "resolved"
except OSError as e:
    out["dns"] = type(e).__name__
print(json.dumps(out))
"""
        got = _json(sbx.run_python(src))
        with pytest.raises(TimeoutError):
            server.accept()  # nothing reached the test's server
    assert "connected" not in got["loopback"] and "connected" not in got["outside"]
    assert got["dns"] != "resolved"


def test_memory_limit(sbx):
    r = sbx.run_python("b = bytearray(3 * 1024 ** 3)\nprint('allocated')", memory_mb=256)
    assert (r.status, r.returncode, r.stdout) == ("error", 1, "")
    assert "MemoryError" in r.stderr

    # below the limit, memory is really usable (every page touched)
    r = sbx.run_python("b = bytearray(64 * 1024 ** 2)\nb[::4096] = b'x' * len(b[::4096])\n"
                       "print(b.count(b'x'))", memory_mb=256)
    assert (r.status, r.stdout) == ("ok", f"{64 * 1024 ** 2 // 4096}\n")


def test_fork_bomb_is_limited_and_nothing_survives(sbx):
    marker = f"jxp-fork-{uuid.uuid4().hex}"
    src = """
import os, sys, time
n = 0
for _ in range(300):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        time.sleep(60)
        os._exit(0)
    n += 1
print(n)
"""

    def survivors():
        found = []
        for p in os.listdir("/proc"):
            try:
                if marker in open(f"/proc/{p}/cmdline", "rb").read().decode(errors="replace"):
                    found.append(int(p))
            except (OSError, ValueError):
                pass
        return found

    argv = [sbx.PYTHON, "-I", "-S", "main.py", marker]  # the marker names its processes
    r = sbx.run(argv, files={"main.py": src}, timeout_s=20.0)
    assert r.status == "ok", (r.stderr, r.message)
    assert 1 <= int(r.stdout) < sbx.MAX_PROCESSES  # bwrap's init and the program count too
    r = sbx.run(argv, files={"main.py": src}, timeout_s=20.0, max_processes=8)
    assert r.status == "ok" and 1 <= int(r.stdout) < 8

    deadline = time.monotonic() + 5.0
    while survivors() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert survivors() == [], "sandboxed processes outlived the sandbox"
    assert subprocess.run(["/bin/true"]).returncode == 0  # this machine can still fork


def test_links_and_special_files_are_not_read_back(sbx):
    src = f"""
import os
os.symlink("/etc/passwd", "passwd.txt")
os.symlink("/etc", "etc")
os.mkfifo("fifo")
os.mkdir("sub")
open("sub/ok.txt", "w").write("fine")
open("big.txt", "w").write("a" * {sbx.FILES_MAX_BYTES + 1})
open("bytes.bin", "wb").write(bytes([255, 254]))
os.mkdir("locked")
open("locked/x", "w").write("x")
os.chmod("locked", 0)
"""
    r = sbx.run_python(src)
    assert r.status == "ok", r.stderr
    # (root still lists the locked folder, another uid cannot: leave it out of the comparison)
    files = {k: v for k, v in r.files.items() if not k.startswith("locked/")}
    assert files == {"main.py": src, "sub/ok.txt": "fine"}
    # the fixture checks that the work folder, the locked folder included, was removed


def test_unavailable_without_bubblewrap(monkeypatch, tmp_path):
    ran = tmp_path / "ran"
    src = f"open({str(ran)!r}, 'w').write('ran unsandboxed')"
    monkeypatch.setattr(sandbox, "BWRAP", str(tmp_path / "no-such-bwrap"))
    r = sandbox.run_python(src)
    assert (r.status, r.returncode, r.stdout, r.stderr) == ("unavailable", None, "", "")
    assert "bubblewrap not found" in r.message and not ran.exists()
    assert not sandbox.available() and "bubblewrap" in sandbox.why_unavailable()

    # a bwrap that cannot create namespaces (as on a locked-down host): unavailable, not run
    fake_dir = pathlib.Path(tempfile.mkdtemp(prefix="jaxpapers-fake-bwrap-"))
    try:
        fake_dir.chmod(0o755)
        fake = fake_dir / "bwrap"
        fake.write_text("#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\n"
                        "exit 1\n")
        fake.chmod(0o755)
        monkeypatch.setattr(sandbox, "BWRAP", str(fake))
        r = sandbox.run_python(src)
        assert (r.status, r.returncode) == ("unavailable", None) and not ran.exists()
        assert "unavailable" in r.message
    finally:
        shutil.rmtree(fake_dir)


def test_bad_arguments_are_rejected_before_anything_runs():
    with pytest.raises(TypeError, match="source"):
        sandbox.run_python(b"print(1)")
    for bad in (0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="timeout_s"):
            sandbox.run_python("pass", timeout_s=bad)
    for bad in ("1", True, None):
        with pytest.raises(TypeError, match="timeout_s"):
            sandbox.run_python("pass", timeout_s=bad)
    with pytest.raises(ValueError, match="memory_mb"):
        sandbox.run_python("pass", memory_mb=8)
    for bad in (512.0, True, "512"):
        with pytest.raises(TypeError, match="memory_mb"):
            sandbox.run_python("pass", memory_mb=bad)
    with pytest.raises(ValueError, match="main.py"):
        sandbox.run_python("pass", files={"main.py": ""})
    with pytest.raises(ValueError, match="argv"):
        sandbox.run([])
    with pytest.raises(TypeError, match="argv"):
        sandbox.run("/bin/true")
    for name in ("../x", "/etc/x", "a/../b", ""):
        with pytest.raises(ValueError, match="files"):
            sandbox.run(["/bin/true"], files={name: ""})
    with pytest.raises(TypeError, match="files"):
        sandbox.run(["/bin/true"], files={"a": 1})
    with pytest.raises(TypeError, match="stdin"):
        sandbox.run(["/bin/true"], stdin=1)
    with pytest.raises(ValueError, match="max_processes"):
        sandbox.run(["/bin/true"], max_processes=1)
