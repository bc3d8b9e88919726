"""Several processes on JAX's distributed runtime (gloo on CPU), started by ``jaxpapers launch``.

The multi-process runs happen in subprocesses (tests/core/_distributed_worker.py), each with its
own jax configuration (1 CPU device per process; the 1-process reference has 2 fake devices):
the pytest process has 8 fake devices and has long since started its backend. The runs start
together in one module fixture (in parallel, to keep the wall time down); the tests read their
outputs. Every run trains the same global batch of 16 rows.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

from jaxpapers import cli
from jaxpapers.core import distributed

WORKER = str(pathlib.Path(__file__).with_name("_distributed_worker.py"))
LAUNCH = [sys.executable, "-m", "jaxpapers", "launch"]
FAIL_TIMEOUT_S = 90  # --timeout of the run in which one process fails


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JAXPAPERS_")}
    env["JAX_PLATFORMS"] = "cpu"
    flags = [f for f in env.get("XLA_FLAGS", "").split()
             if not f.startswith("--xla_force_host_platform_device_count")]
    env["XLA_FLAGS"] = " ".join(flags)
    return env


class _Run:
    """A subprocess started now; ``.wait()`` returns (returncode, stdout, stderr, seconds)."""

    def __init__(self, argv, timeout=180):
        self.argv, self.timeout, self.t0 = argv, timeout, time.monotonic()
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, env=_env(), cwd=pathlib.Path(WORKER).parents[2])
        self.result = None

    def wait(self):
        if self.result is None:
            try:
                out, err = self.proc.communicate(timeout=self.timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                out, err = self.proc.communicate()
            self.result = (self.proc.returncode, out, err, time.monotonic() - self.t0)
        return self.result

    def check(self):
        rc, out, err, _ = self.wait()
        assert rc == 0, f"{' '.join(self.argv)} exited {rc}\n{out}\n{err[-4000:]}"
        return out, err


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("distributed")
    train = [sys.executable, WORKER, "train"]
    started = time.monotonic()
    r = {
        # 2 processes x 1 device: 4 steps, checkpoint at step 4
        "two": _Run(LAUNCH + ["-n", "2", "--timeout", "150", "--"] + train + [
            "--out", str(tmp / "two"), "--stops", "4", "--ckpt", str(tmp / "ckpt_two"),
            "--every", "4", "--check-local-state"]),
        # the reference: 1 process x 2 fake devices, 8 steps without a break
        "one": _Run(train + ["--out", str(tmp / "one"), "--stops", "4,8", "--devices", "2",
                             "--ckpt", str(tmp / "ckpt_one"), "--every", "4"]),
        # process 1 raises after 3 steps (checkpoints every 2 steps, a report at the end) while
        # process 0 hangs outside any collective: launch must stop it
        "fail": _Run(LAUNCH + ["-n", "2", "--timeout", str(FAIL_TIMEOUT_S), "--"] + train + [
            "--out", str(tmp / "fail"), "--stops", "6", "--ckpt", str(tmp / "ckpt_fail"),
            "--every", "2", "--fail-rank", "1", "--fail-after", "3", "--hang-rank", "0",
            "--report", str(tmp / "fail_report")]),
        # the same, but process 0 goes on into the next collective, which breaks
        "fail_collective": _Run(LAUNCH + ["-n", "2", "--timeout", str(FAIL_TIMEOUT_S), "--"]
                                + train + ["--out", str(tmp / "fail_collective"), "--stops", "6",
                                           "--ckpt", str(tmp / "ckpt_fail_collective"),
                                           "--every", "2", "--fail-rank", "1", "--fail-after",
                                           "3", "--report", str(tmp / "fail_collective_report")]),
        # reproduce a fake paper on 2 processes
        "reproduce": _Run(LAUNCH + ["-n", "2", "--timeout", "150", "--", sys.executable, WORKER,
                                    "reproduce", "--out", str(tmp / "reproduce")]),
    }
    r["two"].wait()
    # 1 process x 2 devices resumes the 2-process checkpoint of step 4 and runs to step 8
    r["resumed"] = _Run(train + ["--out", str(tmp / "resumed"), "--stops", "8", "--devices", "2",
                                 "--ckpt", str(tmp / "ckpt_two"), "--every", "4"])
    for run in r.values():
        run.wait()
    r["wall_s"] = time.monotonic() - started
    r["tmp"] = tmp
    return r


def _load(path):
    with np.load(path) as f:
        return {k: f[k] for k in f.files}


def test_two_processes_equal_one_process_with_two_devices(runs):
    out, _ = runs["two"].check()
    runs["one"].check()
    tmp = runs["tmp"]
    r0, r1 = _load(tmp / "two" / "rank0.npz"), _load(tmp / "two" / "rank1.npz")
    one = _load(tmp / "one" / "rank0.npz")
    meta0, meta_one = json.loads(str(r0["meta"])), json.loads(str(one["meta"]))
    assert (meta0["num_processes"], meta0["devices"], meta0["data_devices"]) == (2, 2, 2)
    assert (meta_one["num_processes"], meta_one["devices"], meta_one["data_devices"]) == (1, 2, 2)
    # every process holds the same history and parameters
    for k in ("loss@4", "w1@4", "w2@4"):
        np.testing.assert_array_equal(r0[k], r1[k])
    # ... equal to the one-process run on the same global batch
    for k in ("w1@4", "w2@4", "loss@4"):
        np.testing.assert_allclose(r0[k], one[k], rtol=1e-6, atol=0, err_msg=k)
    assert r0["loss@4"][-1] < 0.9 * r0["loss@4"][0]  # it trained
    # launch prefixes each process's lines with its id; a local state is refused by fit
    assert "[0] process 0 of 2 done" in out and "[1] process 1 of 2 done" in out
    assert "[1] local state rejected" in out


def test_checkpoint_of_two_processes_resumes_in_one_bit_for_bit(runs):
    runs["two"].check()
    runs["resumed"].check()
    tmp = runs["tmp"]
    resumed, one = _load(tmp / "resumed" / "rank0.npz"), _load(tmp / "one" / "rank0.npz")
    for k in ("w1@8", "w2@8", "loss@8"):
        np.testing.assert_array_equal(resumed[k], one[k], err_msg=k)
    assert one["loss@8"].shape == (8,)
    assert sorted(p.name for p in (tmp / "ckpt_two").iterdir()) == ["4", "8"]
    assert not np.array_equal(resumed["w1@8"], _load(tmp / "two" / "rank0.npz")["w1@4"])


# launch's last line: process 1 failed; process 0 hung (stopped by launch), or failed on its own
# when its collective with process 1 broke (then nothing was left to stop)
LAST_LINE = {
    "fail": r"jaxpapers: launch: process 1 exited with code 1; stopped 1 other process\(es\)",
    "fail_collective": r"jaxpapers: launch: (process 0 exited with code 1, )?process 1 exited "
                       r"with code 1(, process 0 exited with code 1)?; stopped [01] other "
                       r"process\(es\)",
}


@pytest.mark.parametrize("name", ["fail", "fail_collective"])
def test_a_failing_process_stops_the_job_and_leaves_nothing_partial(runs, name):
    rc, out, err, seconds = runs[name].wait()
    tmp = runs["tmp"]
    assert rc == 1, (out, err[-3000:])
    assert seconds < FAIL_TIMEOUT_S
    assert "[1] RuntimeError: process 1 fails after 3 steps" in err, err[-3000:]
    last = err.strip().splitlines()[-1]
    assert re.fullmatch(LAST_LINE[name], last), last
    assert "done" not in out  # neither process finished
    assert ("[0] process 0 hangs" in out) == (name == "fail")
    # only committed checkpoints, none past the failure, no unfinished orbax folder
    ckpt = tmp / f"ckpt_{name}"
    names = sorted(p.name for p in ckpt.iterdir())
    assert names and all(n.isdigit() and int(n) <= 3 for n in names), names
    assert all((ckpt / n / "commit_success.txt").is_file() for n in names)
    assert not (tmp / f"{name}_report").exists()
    assert not list((tmp / name).glob("*.npz"))


def test_two_process_reproduce_writes_each_file_once(runs):
    out, _ = runs["reproduce"].check()
    tmp = runs["tmp"] / "reproduce"
    writes = (tmp / "writes.log").read_text().split("\n")
    writes = sorted(w for w in writes if w)
    assert writes == ["0 config.json", "0 fake.png", "0 metrics.json", "0 report.md"], writes
    doc = json.loads((tmp / "results" / "fake_paper" / "metrics.json").read_text())
    assert doc["metrics"]["processes"] == 2
    assert "[0] Summary" in out


def test_multiprocess_runs_wall_time(runs):
    """The whole fixture (4 launches in parallel, then the resume) stays well under a minute."""
    print(f"multi-process fixture wall time: {runs['wall_s']:.1f} s; "
          + ", ".join(f"{k} {v.wait()[3]:.1f} s" for k, v in runs.items() if isinstance(v, _Run)))
    assert runs["wall_s"] < 120


# ------------------------------------------------------------------------- launch, no jax

def _launch(capfd, *argv):
    t0 = time.monotonic()
    code = cli.main(["launch", *argv])
    out, err = capfd.readouterr()
    return code, out, err, time.monotonic() - t0


def test_launch_sets_the_variables_and_prefixes_lines(capfd, monkeypatch):
    monkeypatch.delenv(distributed.NUM_PROCESSES_ENV, raising=False)
    prog = ("import os, sys; e = os.environ; print(e['JAXPAPERS_PROCESS_ID'], "
            "e['JAXPAPERS_NUM_PROCESSES'], e['JAXPAPERS_COORDINATOR']); print('to stderr', "
            "file=sys.stderr)")
    code, out, err, _ = _launch(capfd, "-n", "3", "--", sys.executable, "-c", prog)
    assert code == 0, err
    lines = sorted(out.strip().splitlines())
    assert [ln.split()[:3] for ln in lines] == [["[0]", "0", "3"], ["[1]", "1", "3"],
                                               ["[2]", "2", "3"]]
    assert len({ln.split()[3] for ln in lines}) == 1  # one coordinator address for all
    assert lines[0].split()[3].startswith("127.0.0.1:")
    assert sorted(err.strip().splitlines()) == [f"[{i}] to stderr" for i in range(3)]


def test_launch_stops_the_others_when_one_fails(capfd):
    prog = ("import os, sys, time; r = int(os.environ['JAXPAPERS_PROCESS_ID']); "
            "time.sleep(0.3); sys.exit(3) if r == 1 else time.sleep(120)")
    code, _, err, seconds = _launch(capfd, "-n", "2", "--", sys.executable, "-c", prog)
    assert code == 1 and seconds < 20
    assert err.strip().splitlines()[-1] == ("jaxpapers: launch: process 1 exited with code 3; "
                                            "stopped 1 other process(es)")


def test_launch_stops_a_hang_at_the_timeout(capfd):
    code, _, err, seconds = _launch(capfd, "-n", "2", "--timeout", "1", "--", sys.executable,
                                    "-c", "import time; time.sleep(120)")
    assert code == 124 and seconds < 20
    assert "timed out after 1 s; stopped 2 process(es)" in err


@pytest.fixture
def busy_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


@pytest.mark.parametrize("argv, env, match", [
    (["-n", "0", "--", "true"], None, "-n must be an integer > 0, got '0'"),
    (["-n", "two", "--", "true"], None, "-n must be an integer > 0"),
    (["-n", "2", "--timeout", "0", "--", "true"], None, "--timeout must be a number > 0"),
    (["-n", "2", "--port", "70000", "--", "true"], None, "--port must be an integer in 1..65535"),
    (["-n", "2", "--port", "BUSY", "--", "true"], None, "is in use"),
    (["-n", "2", "--", "true"], "3", "JAXPAPERS_NUM_PROCESSES='3' in the environment does not "
                                     "match -n 2"),
    (["-n", "2"], None, "no command to launch"),
    (["-n", "2", "--", "/no/such/program"], None, "cannot start '/no/such/program'"),
])
def test_launch_bad_input_exits_2_with_one_line(capfd, monkeypatch, busy_port, argv, env, match):
    argv = [str(busy_port) if a == "BUSY" else a for a in argv]
    if env is None:
        monkeypatch.delenv(distributed.NUM_PROCESSES_ENV, raising=False)
    else:
        monkeypatch.setenv(distributed.NUM_PROCESSES_ENV, env)
    code, out, err, _ = _launch(capfd, *argv)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("jaxpapers: error:") and match in lines[0], err
    assert "Traceback" not in err + out


# ------------------------------------------------------------------- distributed, in-process

def test_process_slice_covers_each_row_once():
    for count in (1, 2, 3, 4):
        n = 12
        rows = np.concatenate([np.arange(n)[distributed.process_slice(n, index=i, count=count)]
                               for i in range(count)])
        np.testing.assert_array_equal(rows, np.arange(n))
    assert distributed.process_slice(5) == slice(0, 5)  # this (single) process: every row


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(n=10, index=0, count=3), ValueError, "n=10 rows cannot be split evenly over 3"),
    (dict(n=8, index=2, count=2), ValueError, "index must be < count=2"),
    (dict(n=True, index=0, count=1), TypeError, "n must be an int"),
    (dict(n=-2, index=0, count=1), ValueError, "n must be an integer >= 0"),
])
def test_process_slice_bad_input(kwargs, error, match):
    with pytest.raises(error, match=match):
        distributed.process_slice(kwargs.pop("n"), **kwargs)


@pytest.fixture
def clean_env(monkeypatch):
    for var in (distributed.COORDINATOR_ENV, distributed.NUM_PROCESSES_ENV,
                distributed.PROCESS_ID_ENV):
        monkeypatch.delenv(var, raising=False)
    return monkeypatch


def test_initialize_without_settings_is_a_single_process(clean_env):
    info = distributed.initialize()
    assert info == distributed.ProcessInfo(0, 1, None, "single process")
    assert distributed.is_primary()


@pytest.mark.parametrize("env, kwargs, match", [
    ({"JAXPAPERS_NUM_PROCESSES": "two", "JAXPAPERS_PROCESS_ID": "0",
      "JAXPAPERS_COORDINATOR": "127.0.0.1:1234"}, {},
     "environment variable JAXPAPERS_NUM_PROCESSES must be an integer >= 1, got 'two'"),
    ({"JAXPAPERS_NUM_PROCESSES": "2", "JAXPAPERS_PROCESS_ID": "2",
      "JAXPAPERS_COORDINATOR": "127.0.0.1:1234"}, {},
     "environment variable JAXPAPERS_PROCESS_ID=2 must be smaller than environment variable "
     "JAXPAPERS_NUM_PROCESSES=2"),
    ({"JAXPAPERS_NUM_PROCESSES": "2"}, {}, "coordinator_address \\(or JAXPAPERS_COORDINATOR\\), "
     "process_id \\(or JAXPAPERS_PROCESS_ID\\) not set"),
    ({"JAXPAPERS_COORDINATOR": "localhost"}, {}, "JAXPAPERS_COORDINATOR must be 'host:port'"),
    ({}, dict(coordinator_address="h:1", num_processes=0, process_id=0),
     "num_processes must be an integer >= 1"),
    ({}, dict(timeout_s=0), "timeout_s must be an integer >= 1"),
])
def test_initialize_bad_settings_name_the_variable(clean_env, env, kwargs, match):
    for k, v in env.items():
        clean_env.setenv(k, v)
    with pytest.raises(ValueError, match=match):
        distributed.initialize(**kwargs)


@pytest.mark.slow
def test_lm_trainer_on_two_processes_matches_one(tmp_path):
    """The documented command (fewer steps): the byte LM on 2 processes x 1 device trains like
    1 process x 2 devices (the windows are drawn in the compiled step: same global batch)."""
    lm = ["-m", "jaxpapers.lm", "--steps", "6", "--batch-size", "8"]
    two = _Run(LAUNCH + ["-n", "2", "--timeout", "300", "--", sys.executable] + lm
               + ["--metrics-json", str(tmp_path / "two.json")], timeout=320)
    env = _env()
    env["XLA_FLAGS"] = (env["XLA_FLAGS"] + " --xla_force_host_platform_device_count=2").strip()
    one = subprocess.run([sys.executable] + lm + ["--metrics-json", str(tmp_path / "one.json")],
                         capture_output=True, text=True, env=env, timeout=300)
    assert one.returncode == 0, one.stderr[-3000:]
    out, _ = two.check()
    a, b = (json.loads((tmp_path / f"{n}.json").read_text()) for n in ("two", "one"))
    assert (a["num_processes"], a["devices"], b["num_processes"], b["devices"]) == (2, 2, 1, 2)
    np.testing.assert_allclose(a["loss"], b["loss"], rtol=1e-5)
    np.testing.assert_allclose(a["heldout_bpb"], b["heldout_bpb"], rtol=1e-5)
    assert "[0] 2 process(es), 2 device(s)" in out and "[1] 2 process(es)" not in out
