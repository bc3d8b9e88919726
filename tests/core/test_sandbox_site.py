"""jaxpapers.core.sandbox in site-packages mode: jax works inside, escapes still fail.

``run_python(..., site_packages=True)`` runs this process's interpreter with its ``sys.path`` (the
venv, the project) inside the same bubblewrap sandbox. Each escape below is tried from inside
and must fail, and the host is checked afterwards. Tests that run code skip with the reason
(``sandbox.why_unavailable(site_packages=True)``) without a working bubblewrap. One run imports
jax (~1-3 s); the others do not, so the file takes about 10-15 s with ``-n0``.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time
import uuid

import numpy as np
import psutil
import pytest

import jaxpapers
import jaxpapers.core.timing
from jaxpapers.core import sandbox

ROOT = pathlib.Path(__file__).resolve().parents[2]
IS_ROOT = os.geteuid() == 0
PERF_COUNTER = time.perf_counter  # the parent's, before any sandboxed run


@pytest.fixture
def sbx(work_parent):
    """The sandbox module, or a skip saying why site-packages mode cannot run here."""
    reason = sandbox.why_unavailable(site_packages=True)
    if reason:
        pytest.skip(reason)
    yield sandbox
    assert list(work_parent.iterdir()) == [], "a work or staging folder was left behind"


def _json(result: sandbox.SandboxResult):
    assert result.status == "ok", (result.status, result.stderr[-3000:], result.message)
    return json.loads(result.stdout.strip().splitlines()[-1])


def _sha(path: pathlib.Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


JAX_PROGRAM = r"""
import json, os, sys, time
env_at_start = dict(os.environ)
import numpy as np
import jax, jax.numpy as jnp
from jax import export
from jax.experimental import pallas as pl
import jaxpapers, jaxpapers.core.timing, pallas_kernels

def f(x):
    return jnp.tanh(x) @ x.T + jnp.sum(x * x, axis=1)

def double_plus_one(x_ref, o_ref):
    o_ref[...] = x_ref[...] * 2.0 + 1.0

def g(x):
    return pl.pallas_call(double_plus_one, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                          interpret=True)(x)

x = np.load("x.npy")
y = jax.jit(f)(jnp.asarray(x))
blobs = {}
for name, fn, shape in (("f", f, x.shape), ("g", g, (8, 128))):
    exp = export.export(jax.jit(fn), platforms=("cpu",))(jax.ShapeDtypeStruct(shape, jnp.float32))
    with open(f"{name}.bin", "wb") as fh:
        fh.write(exp.serialize())
with open("f.bin", "rb") as fh:  # the round trip inside
    inside = export.deserialize(bytearray(fh.read())).call(jnp.asarray(x))

# patches that must stay in this process
time.perf_counter = lambda: 0.0
jaxpapers.__version__ = "patched"
jaxpapers.core.timing.time_fn = None
try:
    with open(jaxpapers.__file__, "a") as fh:
        fh.write("# patched\n")
    source_write = "written"
except OSError as e:
    source_write = type(e).__name__

status = {l.split(":")[0]: l.split(":")[1].split()[0] for l in open("/proc/self/status")
          if l.startswith(("VmPeak", "Threads"))}
print(json.dumps(dict(
    y=np.asarray(y).tolist(), inside=np.asarray(inside).tolist(), env=env_at_start,
    uid=os.getuid(), exe=sys.executable, prefix=sys.prefix, path=sys.path,
    backend=jax.default_backend(), jaxpapers=jaxpapers.__file__,
    pallas_kernels=pallas_kernels.__file__, source_write=source_write,
    vm_peak_kib=int(status["VmPeak"]), threads=int(status["Threads"]))))
"""


def test_jax_computes_and_export_round_trips_and_nothing_leaks_back(sbx):
    x = np.random.default_rng(30).standard_normal((3, 5)).astype(np.float32)
    buf = io.BytesIO()
    np.save(buf, x)
    init_sha = _sha(ROOT / "jaxpapers" / "__init__.py")
    version = jaxpapers.__version__
    t_before = time.perf_counter()
    r = sbx.run_python(JAX_PROGRAM, files={"x.npy": buf.getvalue()}, site_packages=True,
                       binary_files=True, timeout_s=60.0)
    got = _json(r)

    # (1) jax.numpy computes inside (float32 vs a float64 numpy reference, 5-term sums)
    x64 = x.astype(np.float64)
    want = np.tanh(x64) @ x64.T + np.sum(x64 * x64, axis=1)
    np.testing.assert_allclose(got["y"], want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got["inside"], got["y"], rtol=1e-6, atol=1e-6)
    assert got["backend"] == "cpu" and got["uid"] == (65534 if IS_ROOT else os.getuid())
    # this process's interpreter and project, read-only
    assert got["exe"] == sys.executable and got["prefix"] == sys.prefix
    assert got["jaxpapers"] == str(ROOT / "jaxpapers" / "__init__.py")
    assert got["pallas_kernels"] == str(ROOT / "pallas_kernels" / "__init__.py")
    assert got["source_write"] != "written" and _sha(ROOT / "jaxpapers" / "__init__.py") == init_sha
    # the environment: the four variables and SITE_ENV, nothing of this process's
    assert got["env"] == {"PATH": "/usr/bin:/bin", "HOME": sbx.SANDBOX_WORK, "TMPDIR": "/tmp",
                          "LANG": "C.UTF-8", "PWD": sbx.SANDBOX_WORK, **sbx.SITE_ENV}
    # well inside the limits (measured 0.65 GiB and 16 threads on 2 cores; see the module doc)
    assert got["vm_peak_kib"] < 2 << 20 and got["threads"] < sbx.SITE_MAX_PROCESSES

    # the serialized programs come back as bytes and run here, as the numpy references say
    assert set(r.files_bytes) == {"main.py", "x.npy", "f.bin", "g.bin"}
    assert r.files_bytes["main.py"] == JAX_PROGRAM.encode() and r.message == ""
    from jax import export

    f = export.deserialize(bytearray(r.files_bytes["f.bin"]))
    np.testing.assert_allclose(np.asarray(f.call(x)), want, rtol=1e-5, atol=1e-5)
    z = np.random.default_rng(31).standard_normal((8, 128)).astype(np.float32)
    g = export.deserialize(bytearray(r.files_bytes["g.bin"]))
    np.testing.assert_array_equal(np.asarray(g.call(z)), z * np.float32(2) + np.float32(1))

    # (8) the child's patches stayed in the child
    assert time.perf_counter is PERF_COUNTER and time.perf_counter() > t_before
    assert jaxpapers.__version__ == version and callable(jaxpapers.core.timing.time_fn)


def test_escapes_fail_and_the_host_is_unchanged(sbx, httpserver, monkeypatch):
    httpserver.expect_request("/").respond_with_data("reached")
    secret = f"sk-jxp-{uuid.uuid4().hex}"
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    token = f"jxp-escape-{uuid.uuid4().hex}"
    canary = pathlib.Path.home() / f"{token}.canary"
    canary.write_text(secret)
    canary.chmod(0o644)  # world-readable: only the hiding keeps it from the sandbox
    targets = sorted({"/tmp", "/root", str(pathlib.Path.home()), tempfile.gettempdir(),
                      str(ROOT), str(ROOT / "jaxpapers"), sys.prefix, sys.base_prefix,
                      *[p for p in sys.path if p.endswith("site-packages")],
                      str(sbx.WORK_PARENT)})
    before = {d: set(os.listdir(d)) for d in targets}
    src = f"""
import json, os, socket, urllib.request
out = {{"env": dict(os.environ), "writes": {{}}}}
for d in {targets!r}:
    try:
        with open(os.path.join(d, {token!r}), "w") as f:
            f.write("escaped")
        out["writes"][d] = "written"
    except OSError as e:
        out["writes"][d] = type(e).__name__
try:
    out["canary"] = open({str(canary)!r}).read()
except OSError as e:
    out["canary"] = type(e).__name__
out["root"] = sorted(os.listdir("/root"))
out["home"] = sorted(os.listdir({str(pathlib.Path.home())!r}))
try:
    socket.create_connection(("127.0.0.1", {httpserver.port}), timeout=2).close()
    out["socket"] = "connected"
except OSError as e:
    out["socket"] = type(e).__name__
try:
    out["http"] = urllib.request.urlopen({httpserver.url_for("/")!r}, timeout=2).read().decode()
except OSError as e:
    out["http"] = type(e).__name__
out["proc"] = []
for p in os.listdir("/proc"):
    for name in ("environ", "cmdline"):
        try:
            data = open(f"/proc/{{p}}/{{name}}", "rb").read()
            out["proc"].append(data.decode("utf-8", "replace"))
        except OSError:
            pass
print(json.dumps(out))
"""
    try:
        r = sbx.run_python(src, site_packages=True)
        got = _json(r)
        after = {d: set(os.listdir(d)) for d in targets}
    finally:
        canary.unlink()

    # (2) no network: the host's loopback server was never reached
    assert got["socket"] != "connected" and got["http"] != "reached"
    assert httpserver.log == []
    # (3) read-only everywhere but the private tmpfs (where writes vanish): nothing on the host
    assert after == before
    for d in (str(ROOT), str(ROOT / "jaxpapers"), sys.prefix, sys.base_prefix):
        assert got["writes"][d] != "written", d
    # (4) the caller's home stays hidden (only the interpreter's own folder is bound back) ...
    assert got["canary"] in ("FileNotFoundError", "PermissionError")
    assert canary.name not in got["home"] and canary.name not in got["root"]
    if sys.base_prefix.startswith(str(pathlib.Path.home()) + "/"):
        first = os.path.relpath(sys.base_prefix, pathlib.Path.home()).split("/")[0]
        assert sorted(set(got["home"]) - {token}) == [first]
    # ... and the parent's environment does not reach the child, nor its /proc
    assert "OPENAI_API_KEY" not in got["env"] and secret not in r.stdout + r.stderr
    assert set(got["env"]) == {"PATH", "HOME", "TMPDIR", "LANG", "PWD", *sbx.SITE_ENV}
    assert any("-I" in s and "-S" in s for s in got["proc"])  # /proc really was readable


def test_detached_fork_bomb_is_limited_and_nothing_outlives_the_call(sbx):
    marker = f"jxp{uuid.uuid4().hex[:12]}"  # 15 characters: a process name (comm)
    src = f"""
import os, time
spawned = failed = 0
for _ in range(1000):
    try:
        pid = os.fork()
    except OSError:
        failed += 1
        continue
    if pid == 0:  # detach: a new session, then a grandchild whose parent exits at once
        try:
            os.setsid()
            if os.fork() == 0:
                with open("/proc/self/comm", "w") as f:
                    f.write({marker!r})
                time.sleep(60)
                os._exit(0)
        except OSError:
            os._exit(1)
        os._exit(0)
    if os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0:
        spawned += 1
    else:
        failed += 1
alive = sum(1 for p in os.listdir("/proc") if p.isdigit()
            and open(f"/proc/{{p}}/comm").read().strip() == {marker!r})
print(spawned, failed, alive)
"""

    def survivors():
        found = []
        for p in psutil.process_iter():
            try:
                if pathlib.Path(f"/proc/{p.pid}/comm").read_text().strip() == marker:
                    found.append(p.pid)
            except (OSError, psutil.Error):
                pass
        return found

    t0 = time.monotonic()
    r = sbx.run_python(src, site_packages=True, timeout_s=30.0)
    assert r.status == "ok", (r.stderr[-2000:], r.message)
    spawned, failed, alive = map(int, r.stdout.split())
    assert failed > 0 and spawned + failed == 1000  # the limit stopped it
    assert 1 <= alive < sbx.SITE_MAX_PROCESSES
    deadline = time.monotonic() + 5.0
    while survivors() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert survivors() == [], "sandboxed processes outlived the sandbox"
    assert time.monotonic() - t0 < 30.0
    assert subprocess.run(["/bin/true"]).returncode == 0  # this machine can still fork


def test_eight_gib_allocation_fails_and_is_reported(sbx):
    src = """
import numpy as np
try:
    np.ones(1 << 30)  # 8 GiB of float64
    print("numpy allocated")
except MemoryError:
    print("numpy MemoryError")
b = bytearray(8 << 30)
print("allocated")
"""
    rss = psutil.Process().memory_info().rss
    r = sbx.run_python(src, site_packages=True, timeout_s=20.0)
    assert (r.status, r.returncode, r.stdout) == ("error", 1, "numpy MemoryError\n")
    assert "MemoryError" in r.stderr
    assert psutil.Process().memory_info().rss < rss + (256 << 20)  # nothing landed here


def test_busy_loop_is_killed_at_the_timeout(sbx):
    t0 = time.monotonic()
    r = sbx.run_python("print('started', flush=True)\nwhile True:\n    pass", site_packages=True,
                       timeout_s=1.5)
    elapsed = time.monotonic() - t0
    assert (r.status, r.returncode, r.stdout) == ("timeout", None, "started\n")
    assert 1.5 <= r.wall_s and elapsed < 1.5 + 10.0 and "wall-clock" in r.message


@pytest.mark.slow  # ~5-8 s: an import of jax, then the loop
def test_busy_loop_with_xla_threads_running_is_killed_at_the_timeout(sbx):
    src = ("import jax.numpy as jnp\njnp.ones(3).block_until_ready()\n"
           "print('started', flush=True)\nwhile True:\n    pass")
    t0 = time.monotonic()
    r = sbx.run_python(src, site_packages=True, timeout_s=8.0)
    assert (r.status, r.returncode, r.stdout) == ("timeout", None, "started\n"), r.stderr[-2000:]
    assert time.monotonic() - t0 < 8.0 + 10.0


def test_binary_files_are_returned_within_the_caps(sbx, monkeypatch):
    # the default (standard-library) mode and run() get binary outputs the same way
    monkeypatch.setattr(sandbox, "BYTES_MAX_FILE", 1000)
    src = """
open("blob.bin", "wb").write(bytes(range(256)) * 3)
open("text.txt", "w").write("hello")
open("big.bin", "wb").write(b"x" * 1001)
import os
os.symlink("/etc/passwd", "link")
"""
    r = sbx.run_python(src, binary_files=True)
    assert r.status == "ok", r.stderr
    assert r.files_bytes == {"blob.bin": bytes(range(256)) * 3, "text.txt": b"hello",
                             "main.py": src.encode()}
    assert "blob.bin" not in r.files and r.files["text.txt"] == "hello"  # files: text only
    assert "left out 1 file" in r.message
    assert sbx.run_python("pass").files_bytes == {}  # opt-in only

    data = bytes(range(256))
    r = sbx.run(["/bin/cp", "in.bin", "out.bin"], files={"in.bin": data}, binary_files=True)
    assert r.status == "ok" and r.files_bytes["out.bin"] == data
    assert base64.b64encode(r.files_bytes["out.bin"]) == base64.b64encode(data)


def test_bad_arguments_of_the_new_options():
    with pytest.raises(TypeError, match="site_packages"):
        sandbox.run_python("pass", site_packages="yes")
    with pytest.raises(TypeError, match="binary_files"):
        sandbox.run_python("pass", binary_files=1)
    with pytest.raises(TypeError, match="binary_files"):
        sandbox.run(["/bin/true"], binary_files=None)
    with pytest.raises(ValueError, match="max_processes"):
        sandbox.run_python("pass", site_packages=True, max_processes=1)
    with pytest.raises(TypeError, match="memory_mb"):
        sandbox.run_python("pass", site_packages=True, memory_mb=3072.0)


def test_unavailable_runs_nothing(monkeypatch, tmp_path):
    ran = tmp_path / "ran"
    src = f"open({str(ran)!r}, 'w').write('ran unsandboxed')"
    monkeypatch.setattr(sandbox, "BWRAP", str(tmp_path / "no-such-bwrap"))
    r = sandbox.run_python(src, site_packages=True)
    assert (r.status, r.returncode) == ("unavailable", None) and "bubblewrap" in r.message
    assert not sandbox.available(site_packages=True) and not ran.exists()
    monkeypatch.undo()
    monkeypatch.setattr(sys, "executable", "")  # an embedded interpreter: no path to run
    r = sandbox.run_python(src, site_packages=True)
    assert r.status == "unavailable" and "sys.executable" in r.message and not ran.exists()
    assert "sys.executable" in sandbox.why_unavailable(site_packages=True)


def test_hidden_folders_are_never_bound_whole():
    site = sandbox._site_setup()
    if isinstance(site, str):
        pytest.skip(site)
    home = os.path.realpath(pathlib.Path.home())
    for src, dest in site.binds:
        for hidden in ("/", "/tmp", "/root", home, os.path.realpath(tempfile.gettempdir())):
            assert dest != hidden and not hidden.startswith(dest + "/"), (dest, hidden)
        assert os.path.exists(src) and os.path.isabs(dest)
    # every kept sys.path entry exists here, and the script's folder under /tmp is not kept
    assert all(os.path.isabs(p) and os.path.exists(p) for p in site.path)
    assert not any(p == "/tmp" or p.startswith("/tmp/") for p in site.path)
