"""The generated tenant and its questions: schema, determinism, graph ranges, leaks, answers."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

import pytest

from jaxpapers.benchmarks import excytin as ex
from jaxpapers.benchmarks.excytin.questions import display_value
from jaxpapers.benchmarks.excytin.world import ALERT_TABLES, SCHEMA


@pytest.fixture(scope="module")
def tenants():
    return {s: ex.generate_tenant(s) for s in (0, 1)}


@pytest.fixture(scope="module")
def questions(tenants):
    return {s: ex.make_questions(t, seed=s) for s, t in tenants.items()}


def _log_cells(tenant) -> set[str]:
    return {str(v).lower() for table, rows in tenant.tables.items() if table not in ALERT_TABLES
            for row in rows for v in row.values() if v is not None}


def _digest(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()


def test_schema_and_rows(tenants):
    t = tenants[0]
    assert len(t.tables) >= 25 and set(t.tables) == set(SCHEMA)
    for name, rows in t.tables.items():
        assert rows, name
        for row in rows:
            assert tuple(row) == SCHEMA[name]
    assert len(t.incidents) == 8
    alert_ids = {r["SystemAlertId"] for r in t.tables["SecurityAlert"]}
    mirrored = {r["VendorOriginalId"] for r in t.tables["SecurityAlert"]}
    assert {r["AlertId"] for r in t.tables["AlertInfo"]} == mirrored
    incident_alerts = [a for inc in t.incidents for a in inc.alert_ids]
    assert sorted(incident_alerts) == sorted(alert_ids)
    for row in t.tables["SecurityIncident"]:
        assert set(json.loads(row["AlertIds"])) <= alert_ids


def test_every_alert_identifier_is_in_a_log_row(tenants):
    for t in tenants.values():
        cells = _log_cells(t)
        for alert in t.tables["SecurityAlert"]:
            for e in json.loads(alert["Entities"]):
                if "$ref" in e:
                    continue
                for node_type, field, value in ex.entity_identifiers(e):
                    shown = display_value(node_type, field, value).lower()
                    assert shown in cells, (alert["AlertName"], node_type, field, value)


def test_same_seed_same_tables_other_seed_differs(tenants):
    assert _digest(ex.generate_tenant(0).tables) == _digest(tenants[0].tables)
    assert _digest(tenants[1].tables) != _digest(tenants[0].tables)


def test_tables_and_questions_identical_across_processes(tenants, questions):
    code = ("import hashlib, json; from jaxpapers.benchmarks import excytin as ex; "
            "t = ex.generate_tenant(0); q, _ = ex.make_questions(t, seed=0); "
            "print(hashlib.sha256(json.dumps([t.tables, q], sort_keys=True).encode())"
            ".hexdigest())")
    here = _digest([tenants[0].tables, questions[0][0]])
    for hash_seed in ("1", "12345"):
        env = dict(os.environ, PYTHONHASHSEED=hash_seed)
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                             text=True, check=True).stdout.strip()
        assert out == here


def test_graphs_within_the_official_ranges(questions):
    diameters = []
    for qs, info in questions.values():
        for inc in info["incidents"]:
            assert 17 <= inc["nodes"] <= 170, inc
            assert 4 <= inc["alerts"] <= 68, inc
            assert 4 <= inc["diameter"] <= 10, inc
            assert len(inc["entity_types"]) >= 3, inc
            diameters.append(inc["diameter"])
    assert max(diameters) >= 8


def test_questions_acceptance(tenants, questions):
    for s, (qs, info) in questions.items():
        assert len(qs) >= 400
        assert sum(q["path_length"] >= 3 for q in qs) / len(qs) >= 0.15
        assert ex.find_leaks(qs) == []
        cells = _log_cells(tenants[s])
        assert all(q["answer"].lower() in cells for q in qs)
        for q in qs:
            assert len(q["solution"]) == q["path_length"] == len(q["path"])
            assert f"`{q['answer']}`" in q["solution"][-1]
            assert q["path"][0] == q["start_alert"] and q["path"][-1] == q["end_alert"]
            assert q["start_values"] and q["answer"] not in q["start_values"]
        assert len({q["id"] for q in qs}) == len(qs)


def test_find_leaks_catches_a_planted_leak(questions):
    q = dict(questions[0][0][0])
    q["question"] = q["question"] + f" (hint: {q['answer'].upper()})"
    assert ex.find_leaks([q]) == [q["id"]]


def test_selection_caps_questions_per_incident(tenants):
    qs, info = ex.make_questions(tenants[0], per_incident=5, seed=0)
    assert info["selected"] <= 5 * len(tenants[0].incidents)
    counts = {}
    for q in qs:
        counts[q["incident"]] = counts.get(q["incident"], 0) + 1
    assert max(counts.values()) <= 5


@pytest.mark.parametrize("kwargs, name", [
    ({"incidents": 0}, "incidents"), ({"users": 3}, "users"), ({"hosts": 1}, "hosts"),
    ({"noise_rows": -1}, "noise_rows"), ({"kinds": ("ransomware",)}, "kinds"),
    ({"kinds": ()}, "kinds"), ({"incidents": 2.0}, "incidents")])
def test_generate_tenant_bad_input(kwargs, name):
    with pytest.raises(ValueError, match=name):
        ex.generate_tenant(0, **kwargs)


def test_bad_seed_and_per_incident(tenants):
    with pytest.raises(TypeError, match="seed"):
        ex.generate_tenant("0")
    with pytest.raises(ValueError, match="per_incident"):
        ex.make_questions(tenants[0], per_incident=0)
    with pytest.raises(ValueError, match=r"\bk\b"):
        ex.make_questions(tenants[0], k=0)
    with pytest.raises(ValueError, match="incident"):
        tenants[0].alerts(99)


def test_judge_stem_leak_is_caught():
    """An answer the judge would find in the question's own words (``lsass.exe`` in "LSASS")
    counts as a leak, not only a verbatim substring."""
    q = {"id": "x", "answer": "lsass.exe", "context": "An alert \"LSASS memory access\".",
         "question": "What file?"}
    assert ex.find_leaks([q]) == ["x"]
    q2 = dict(q, context="An alert about memory access.")
    assert ex.find_leaks([q2]) == []


def test_every_question_kind_has_a_phrase(questions):
    from jaxpapers.benchmarks.excytin.questions import KIND_PHRASES

    for qs, _ in questions.values():
        for q in qs:
            assert (q["answer_type"], q["answer_field"]) in KIND_PHRASES, q["question"]
            assert "__" not in q["question"]
