import dataclasses
import json
import os
import subprocess
import sys
import types

import pytest

from jaxpapers import cli
from jaxpapers.core import registry


# every real paper is implemented now: the not-started case is a registered stand-in
NOT_STARTED = "unstarted_paper"


@pytest.fixture
def unstarted(monkeypatch):
    """Registers ``NOT_STARTED``, a paper without an experiment (``with_facts`` tolerates a
    paper without a TOML)."""
    paper = registry.Paper(NOT_STARTED, "A paper not started", "jaxpapers.core",
                           "experiments.unstarted_paper", registry.Status.NOT_STARTED)
    monkeypatch.setattr(registry, "PAPERS", registry.PAPERS + (paper,))
    monkeypatch.setitem(registry._BY_ID, NOT_STARTED, paper)


def _run(capsys, *argv):
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_list_json_has_all_papers(capsys, unstarted):
    code, out, _ = _run(capsys, "list", "--json")
    rows = json.loads(out)
    assert code == 0 and len(rows) == 19 + 1
    assert [r["id"] for r in rows] == list(registry.ids())
    assert all({"id", "title", "status"} <= set(r) for r in rows)
    statuses = {r["id"]: r["status"] for r in rows}
    assert statuses[NOT_STARTED] == "not implemented"
    assert statuses["layer_balancing"] == "implemented"


@pytest.mark.parametrize("argv, match", [
    (["reproduce", "nope"], "unknown paper id 'nope'"),
    (["reproduce", NOT_STARTED], "not implemented"),
    (["reproduce", "all", "--scale", "huge"], "--scale must be one of"),
    (["reproduce", "all", NOT_STARTED], "'all' cannot be combined"),
    (["reproduce", "--seed", "x", "all"], "invalid int value"),
    (["reproduce", "all", "--jobs", "0"], "--jobs must be an integer > 0"),
    (["reproduce", "all", "--jobs", "two"], "--jobs must be an integer > 0"),
    (["bench", "no_such_kernel"], "unknown kernel 'no_such_kernel'"),
    (["frobnicate"], "invalid choice"),
])
def test_bad_arguments_exit_2_with_one_line(capsys, unstarted, argv, match):
    code, out, err = _run(capsys, *argv)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("jaxpapers: error:") and match in lines[0]
    assert "Traceback" not in err + out


def _fake_experiment(monkeypatch, *, fail=False):
    """Register a tiny fake paper whose experiment lives in in-memory modules."""
    cfg = types.ModuleType("experiments.fake_paper.config")

    @dataclasses.dataclass(frozen=True)
    class Config:
        n: int

    cfg.small, cfg.full = (lambda: Config(3)), (lambda: Config(30))
    run = types.ModuleType("experiments.fake_paper.run")

    def run_fn(config, key):
        import jax

        if fail:
            raise RuntimeError("diverged")
        x = float(jax.random.uniform(key))
        return {"metrics": {"x": x, "n": config.n},
                "claims": [{"metric": "x", "ours": x, "paper": 0.5, "criterion": "x < 1",
                            "verdict": "reproduced" if x < 1 else "not reproduced"}]}

    def plot(result, out_dir):
        p = out_dir / "fake.png"
        p.write_bytes(b"\x89PNG\r\n\x1a\n")
        return [p]

    run.run, run.plot = run_fn, plot
    monkeypatch.setitem(sys.modules, "experiments.fake_paper", types.ModuleType("x"))
    monkeypatch.setitem(sys.modules, "experiments.fake_paper.config", cfg)
    monkeypatch.setitem(sys.modules, "experiments.fake_paper.run", run)
    paper = registry.Paper("fake_paper", "A fake paper", "jaxpapers.core", "experiments.fake_paper",
                           registry.Status.IMPLEMENTED)
    monkeypatch.setattr(registry, "PAPERS", registry.PAPERS + (paper,))
    monkeypatch.setitem(registry._BY_ID, "fake_paper", paper)


def test_reproduce_writes_contract_files(capsys, monkeypatch, tmp_path):
    _fake_experiment(monkeypatch)
    code, out, _ = _run(capsys, "reproduce", "fake_paper", "--out", str(tmp_path), "--seed", "7")
    assert code == 0
    d = tmp_path / "fake_paper"
    assert {p.name for p in d.iterdir()} >= {"report.md", "metrics.json", "config.json", "fake.png"}
    doc = json.loads((d / "metrics.json").read_text())
    assert doc["paper"] == "fake_paper" and doc["seed"] == 7 and doc["scale"] == "small"
    assert doc["metrics"]["n"] == 3 and doc["claims"][0]["paper"] == 0.5
    assert "Summary" in out and "fake_paper" in out
    # same seed, same numbers
    code, _, _ = _run(capsys, "reproduce", "fake_paper", "--out", str(tmp_path / "again"),
                      "--seed", "7")
    again = json.loads((tmp_path / "again" / "fake_paper" / "metrics.json").read_text())
    assert again["metrics"] == doc["metrics"]


def test_reproduce_failure_exits_nonzero(capsys, monkeypatch, tmp_path):
    _fake_experiment(monkeypatch, fail=True)
    code, out, err = _run(capsys, "reproduce", "fake_paper", "--out", str(tmp_path))
    assert code == 1
    assert "FAILED" in out + err and "diverged" in out + err
    assert not (tmp_path / "fake_paper" / "metrics.json").exists()


@pytest.mark.skipif(os.geteuid() == 0, reason="root can write anywhere")
def test_unwritable_out_dir(capsys, monkeypatch, tmp_path):
    _fake_experiment(monkeypatch)
    ro = tmp_path / "ro"
    ro.mkdir(mode=0o500)
    code, _, err = _run(capsys, "reproduce", "fake_paper", "--out", str(ro / "sub"))
    assert code == 2 and "not writable" in err


def test_out_dir_that_is_a_file(capsys, monkeypatch, tmp_path):
    _fake_experiment(monkeypatch)
    f = tmp_path / "file"
    f.write_text("x")
    code, _, err = _run(capsys, "reproduce", "fake_paper", "--out", str(f))
    assert code == 2 and "not writable" in err and len(err.strip().splitlines()) == 1


def test_console_script_runs_in_subprocess():
    r = subprocess.run([sys.executable, "-m", "jaxpapers", "reproduce", "nope"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2
    assert r.stderr.strip().startswith("jaxpapers: error: unknown paper id")
    assert "Traceback" not in r.stderr


def test_all_runs_only_implemented_papers(monkeypatch):
    _fake_experiment(monkeypatch)
    wip = registry.Paper("wip_paper", "WIP", "jaxpapers.core", "experiments.fake_paper",
                         registry.Status.IN_PROGRESS)
    monkeypatch.setattr(registry, "PAPERS", registry.PAPERS + (wip,))
    monkeypatch.setitem(registry._BY_ID, "wip_paper", wip)
    got = cli._resolve_ids(["all"])
    assert "fake_paper" in got and "wip_paper" not in got
    assert all(registry.get(p).status is registry.Status.IMPLEMENTED for p in got)
    assert cli._resolve_ids(["wip_paper"]) == ["wip_paper"]  # runnable when named


def test_jobs_auto_is_one_per_core_for_tiny_only(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3, 4, 5}, raising=False)
    assert cli._jobs("auto", "tiny", 19) == cli._AUTO_JOBS_MAX  # capped
    assert cli._jobs("auto", "tiny", 3) == 3  # never more than the papers
    assert cli._jobs("auto", "tiny", 1) == 1
    assert cli._jobs("auto", "small", 19) == 1 and cli._jobs("auto", "full", 19) == 1
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {3})
    assert cli._jobs("auto", "tiny", 19) == 1
    assert cli._jobs("7", "small", 19) == 7


def test_workers_share_the_cores_unless_the_user_set_threads(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3, 4, 5}, raising=False)
    for k in cli._WORKER_ENV:
        monkeypatch.delenv(k, raising=False)
    assert cli._worker_environment(2) == {"XLA_PYTHON_CLIENT_PREALLOCATE": "false",
                                          "OMP_NUM_THREADS": "3"}
    assert cli._worker_environment(4)["OMP_NUM_THREADS"] == "1"  # 6 // 4
    assert cli._worker_environment(8)["OMP_NUM_THREADS"] == "1"  # never 0
    monkeypatch.setenv("OMP_NUM_THREADS", "5")
    monkeypatch.setenv("XLA_PYTHON_CLIENT_PREALLOCATE", "true")
    assert cli._worker_environment(2) == {"XLA_PYTHON_CLIENT_PREALLOCATE": "true",
                                          "OMP_NUM_THREADS": "5"}


def test_workers_are_pinned_to_disjoint_groups_of_cores(monkeypatch):
    import multiprocessing

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3, 4, 5}, raising=False)
    monkeypatch.setattr(os, "sched_setaffinity", lambda pid, cpus: None, raising=False)
    assert cli._core_groups(2) == [(0, 2, 4), (1, 3, 5)]
    assert cli._core_groups(4) == [(0, 4), (1, 5), (2,), (3,)]
    assert cli._core_groups(8) == [(i,) for i in range(6)]  # never an empty group
    pinned = []
    monkeypatch.setattr(os, "sched_setaffinity", lambda pid, cpus: pinned.append((pid, cpus)))
    counter = multiprocessing.get_context("spawn").Value("i", 0)
    for _ in range(3):  # a third worker (one replaced after a crash) wraps around
        cli._start_worker(counter, cli._core_groups(2))
    assert pinned == [(0, (0, 2, 4)), (0, (1, 3, 5)), (0, (0, 2, 4))]

    def refuse(pid, cpus):
        raise PermissionError("not allowed here")

    monkeypatch.setattr(os, "sched_setaffinity", refuse)
    cli._start_worker(counter, cli._core_groups(2))  # unpinned, no error: pinning only helps
    monkeypatch.delattr(os, "sched_setaffinity")  # e.g. macOS: no pinning
    assert cli._core_groups(2) is None
    cli._start_worker(counter, None)


def test_cost_order_starts_long_papers_first(monkeypatch):
    _fake_experiment(monkeypatch)
    hints = {"rsa_cp": 3.0, "vtbench": 40.0, "fake_paper": None}  # fake: no hint, may be long
    for pid, s in hints.items():
        mod = sys.modules.get(f"{registry.get(pid).experiment}.config")
        if mod is None:
            mod = __import__(f"{registry.get(pid).experiment}.config", fromlist=["x"])
        if s is None:
            monkeypatch.delattr(mod, "TINY_SECONDS", raising=False)
        else:
            monkeypatch.setattr(mod, "TINY_SECONDS", s, raising=False)
    assert cli._cost_order(["rsa_cp", "vtbench", "fake_paper"], "tiny") == [
        "fake_paper", "vtbench", "rsa_cp"]
    assert cli._cost_order(["fake_paper", "rsa_cp", "vtbench"], "small") == [
        "fake_paper", "rsa_cp", "vtbench"]


def test_tiny_sets_a_fast_xla_level_for_its_runs_only(capsys, monkeypatch, tmp_path):
    """Before jax's backends exist, tiny adds the O0 flag (a user's level wins); the caller's
    environment comes back afterwards."""
    from jax._src import xla_bridge

    _fake_experiment(monkeypatch)
    sys.modules["experiments.fake_paper.config"].tiny = sys.modules[
        "experiments.fake_paper.config"].small
    seen = []
    real = cli._reproduce_and_report
    monkeypatch.setattr(cli, "_reproduce_and_report",
                        lambda *a: seen.append(os.environ.get("XLA_FLAGS")) or real(*a))
    monkeypatch.setattr(xla_bridge, "backends_are_initialized", lambda: False)
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false")
    code, _, _ = _run(capsys, "reproduce", "fake_paper", "--scale", "tiny", "--out",
                      str(tmp_path / "a"))
    assert code == 0
    assert seen[-1] == "--xla_cpu_multi_thread_eigen=false " + cli.TINY_XLA_FLAG
    assert os.environ["XLA_FLAGS"] == "--xla_cpu_multi_thread_eigen=false"  # given back
    monkeypatch.setenv("XLA_FLAGS", "--xla_backend_optimization_level=2")  # the user's choice
    _run(capsys, "reproduce", "fake_paper", "--scale", "tiny", "--out", str(tmp_path / "b"))
    assert seen[-1] == "--xla_backend_optimization_level=2"
    monkeypatch.delenv("XLA_FLAGS")
    _run(capsys, "reproduce", "fake_paper", "--scale", "small", "--out", str(tmp_path / "c"))
    assert seen[-1] is None and "XLA_FLAGS" not in os.environ
    monkeypatch.setattr(xla_bridge, "backends_are_initialized", lambda: True)  # too late
    _run(capsys, "reproduce", "fake_paper", "--scale", "tiny", "--out", str(tmp_path / "d"))
    assert seen[-1] is None and "XLA_FLAGS" not in os.environ
