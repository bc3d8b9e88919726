import json
import math

import numpy as np
import pytest

from jaxpapers.core import report


def _result():
    return {
        "metrics": {"loss": np.float32(0.25), "acc": 0.9, "steps": 10, "diverged": float("nan")},
        "claims": [
            report.claim("acc", 0.9, paper=0.95, criterion="acc >= 0.93", passed=np.bool_(False),
                         baselines={"sgd": np.float64(0.8)}, note="small scale"),
            report.claim("shape", 1.0, paper="unequal rates at step 1",
                         criterion="midpoint is a maximum in every case", passed=True),
        ],
        "tables": ["| a | b |\n|---|---|\n| 1 | 2 |"],
        "data": {"curve": np.arange(3.0)},
        "timings": {"train": 1.25},
    }


def test_round_trip(tmp_path):
    paths = report.write_report(tmp_path / "p", paper_id="demo", scale="small", seed=3,
                                result=_result(), config={"h": (1, 2)}, wall_time_s=1.5,
                                title="Demo paper")
    doc = report.read_metrics(paths["metrics"])
    assert doc["paper"] == "demo" and doc["scale"] == "small" and doc["seed"] == 3
    assert doc["metrics"]["loss"] == 0.25 and doc["metrics"]["steps"] == 10
    assert doc["metrics"]["diverged"] is None  # non-finite stored as null, never as NaN text
    assert doc["claims"][0] == {"metric": "acc", "ours": 0.9, "paper": 0.95,
                                "criterion": "acc >= 0.93", "verdict": "not reproduced",
                                "baselines": {"sgd": 0.8}, "note": "small scale"}
    assert doc["claims"][1]["paper"] == "unequal rates at step 1"
    assert doc["claims"][1]["verdict"] == "reproduced"
    assert doc["timings"] == {"train": 1.25} and "train" not in doc["metrics"]
    cfg = json.loads(paths["config"].read_text())
    assert cfg["config"] == {"h": [1, 2]} and cfg["seed"] == 3
    assert {"jax", "jaxlib", "device_kind", "backend"} <= set(cfg["environment"])
    assert math.isclose(cfg["wall_time_s"], 1.5)
    md = paths["report"].read_text()
    assert "| acc | 0.9 | sgd 0.8 | 0.95 | acc >= 0.93 | not reproduced |" in md
    assert "| train | 1.25 |" in md and "## Environment" in md
    assert "| 1 | 2 |" in md and "# Demo paper" in md
    assert not list((tmp_path / "p").glob(".*tmp"))  # no temp files left behind


@pytest.mark.parametrize("mutate, match", [
    (lambda r: r.pop("metrics"), "metrics"),
    (lambda r: r["metrics"].update(bad="x"), r"metrics\['bad'\]"),
    (lambda r: r["claims"][1].update(verdict="maybe"), r"claims\[1\].verdict"),
    (lambda r: r["claims"][0].pop("ours"), r"claims\[0\] lacks the field 'ours'"),
    (lambda r: r["claims"][0].update(baselines={"x": "y"}), r"claims\[0\].baselines"),
    (lambda r: r.update(tables="not a list"), "tables"),
    (lambda r: r["claims"][0].pop("criterion"), r"claims\[0\] lacks the field 'criterion'"),
    (lambda r: r["claims"][0].update(criterion="  "), r"claims\[0\].criterion"),
    (lambda r: r["timings"].update(loss=1.0), "both metrics and timings"),
    (lambda r: r.update(extra=1), "unknown fields"),
])
def test_malformed_result_names_field_and_writes_nothing(tmp_path, mutate, match):
    r = _result()
    mutate(r)
    with pytest.raises(ValueError, match=match):
        report.write_report(tmp_path, paper_id="demo", scale="small", seed=0, result=r,
                            config={}, wall_time_s=0.0)
    assert not list(tmp_path.iterdir())


def test_failed_write_keeps_previous_file(tmp_path, monkeypatch):
    target = tmp_path / "metrics.json"
    report.atomic_write_text(target, "old")

    def boom(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(report.os, "replace", boom)
    with pytest.raises(OSError):
        report.atomic_write_text(target, "new")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["metrics.json"]


def test_read_metrics_rejects_malformed_file(tmp_path):
    bad = tmp_path / "metrics.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        report.read_metrics(bad)
    bad.write_text(json.dumps({"paper": "x", "scale": "small", "seed": 0, "metrics": {}}))
    with pytest.raises(ValueError, match="claims"):
        report.read_metrics(bad)


def test_environment_records_what_decides_a_result(monkeypatch):
    """config.json's environment: package versions, XLA flags, threads, CPU (issue 17)."""
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false")
    env = report.environment_info()
    for k in ("packages", "xla_flags", "threads", "cpu_model", "cpu_count", "jax_config", "env"):
        assert k in env, k
    for name in ("jax", "jaxlib", "flax", "optax", "orbax-checkpoint", "numpy", "ml_dtypes",
                 "scipy", "scikit-learn"):
        assert env["packages"][name], name  # installed, so a version string
    import jax
    assert env["packages"]["jax"] == jax.__version__
    assert env["xla_flags"] == "--xla_cpu_multi_thread_eigen=false"
    assert isinstance(env["threads"], int) and env["threads"] >= 1


def test_claim_verdicts_and_errors():
    assert report.claim("m", 1, paper="p", criterion="c", passed=True)["verdict"] == "reproduced"
    assert report.claim("m", 1, paper="p", criterion="c", passed=False)["verdict"] == \
        "not reproduced"
    assert report.claim("m", 1, paper="p", criterion="c", passed=None)["verdict"] == \
        "not comparable"
    with pytest.raises(TypeError, match="passed"):
        report.claim("m", 1, paper="p", criterion="c", passed=1)
    with pytest.raises(ValueError, match="criterion"):
        report.claim("m", 1, paper="p", criterion="", passed=True)


def test_markdown_table_formats_and_checks_width():
    t = report.markdown_table(["a", "b"], [[1, float("inf")], ["x|y", 1234567.0]], title="T")
    assert t.splitlines() == ["T", "", "| a | b |", "|---|---|", "| 1 | nan |",
                              "| x\\|y | 1.235e+06 |"]
    with pytest.raises(ValueError, match="row 0 has 1 cells"):
        report.markdown_table(["a", "b"], [[1]])


def test_claims_must_quote_the_paper():
    """A claim whose 'paper' is not one of the paper's statements (third_party TOML) is refused:
    our thresholds go in 'criterion'."""
    from jaxpapers.core import registry
    from jaxpapers.core.reproduce import check_claims_quote_paper

    good = report.claim("x", 1.0, paper=registry.paper_says("rsa_cp", "coverage_guarantee"),
                        criterion="c", passed=True)
    check_claims_quote_paper("rsa_cp", [good])
    bad = dict(good, paper=">= 0.85 (our threshold)")
    with pytest.raises(ValueError, match=r"claims\[1\].*'paper' must be the paper's words"):
        check_claims_quote_paper("rsa_cp", [good, bad])
    with pytest.raises(KeyError, match="no claim 'nope'"):
        registry.paper_says("rsa_cp", "nope")
