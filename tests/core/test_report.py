import json
import math

import numpy as np
import pytest

from jaxpapers.core import report


def _result():
    return {
        "metrics": {"loss": np.float32(0.25), "acc": 0.9, "steps": 10, "diverged": float("nan")},
        "claims": [
            {"metric": "acc", "ours": 0.9, "paper": 0.95, "verdict": "not reproduced",
             "baselines": {"sgd": np.float64(0.8)}, "note": "small scale"},
            {"metric": "shape", "ours": 1.0, "paper": "unequal rates at step 1",
             "verdict": "reproduced"},
        ],
        "tables": ["| a | b |\n|---|---|\n| 1 | 2 |"],
        "data": {"curve": np.arange(3.0)},
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
                                "verdict": "not reproduced", "baselines": {"sgd": 0.8},
                                "note": "small scale"}
    assert doc["claims"][1]["paper"] == "unequal rates at step 1"
    cfg = json.loads(paths["config"].read_text())
    assert cfg["config"] == {"h": [1, 2]} and cfg["seed"] == 3
    assert {"jax", "jaxlib", "device_kind", "backend"} <= set(cfg["environment"])
    assert math.isclose(cfg["wall_time_s"], 1.5)
    md = paths["report"].read_text()
    assert "| acc | 0.9 | sgd 0.8 | 0.95 | not reproduced |" in md
    assert "| 1 | 2 |" in md and "# Demo paper" in md
    assert not list((tmp_path / "p").glob(".*tmp"))  # no temp files left behind


@pytest.mark.parametrize("mutate, match", [
    (lambda r: r.pop("metrics"), "metrics"),
    (lambda r: r["metrics"].update(bad="x"), r"metrics\['bad'\]"),
    (lambda r: r["claims"][1].update(verdict="maybe"), r"claims\[1\].verdict"),
    (lambda r: r["claims"][0].pop("ours"), r"claims\[0\] lacks the field 'ours'"),
    (lambda r: r["claims"][0].update(baselines={"x": "y"}), r"claims\[0\].baselines"),
    (lambda r: r.update(tables="not a list"), "tables"),
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
