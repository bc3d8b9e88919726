"""Tests of the medical world: one hand-checked case per tool on a small hand-built formulary,
the generated world's invariants (symmetric interactions) and the registry contract;
determinism and the shared checks are in test_worlds_common.py."""

from __future__ import annotations

import math

import pytest

from jaxpapers.benchmarks.dive.worlds import World, call_tool, domain_tools, make_world

D = "medical"


@pytest.fixture(scope="module")
def w():
    def drug(cls, rxcui, halflife, dose, limit, conditions):
        return {"class": cls, "rxcui": rxcui, "halflife": halflife, "dose": dose,
                "limit": limit, "conditions": conditions}

    drugs = {"apixaban": drug("anticoagulant", 22222, 12.0, 5.0, 10.0, ["thrombosis"]),
             "ibuprofen": drug("nsaid", 33333, 2.0, 400.0, 3200.0, ["arthritis", "pain"]),
             "sertraline": drug("ssri", 44444, 24.0, 50.0, 200.0, ["depression"]),
             "warfarin": drug("anticoagulant", 11111, 40.0, 5.0, 10.0,
                              ["atrial fibrillation", "thrombosis"])}
    interactions = {"apixaban": {},
                    "ibuprofen": {"sertraline": "minor", "warfarin": "major"},
                    "sertraline": {"ibuprofen": "minor", "warfarin": "moderate"},
                    "warfarin": {"ibuprofen": "major", "sertraline": "moderate"}}
    conditions = ["arthritis", "atrial fibrillation", "depression", "pain", "thrombosis"]
    data = {"drugs": drugs, "classes": ["anticoagulant", "nsaid", "ssri"],
            "conditions": conditions, "interactions": interactions}
    lexicon = {"drug": tuple(drugs), "drug_class": tuple(data["classes"]),
               "condition": tuple(conditions),
               "severity": ("major", "minor", "moderate", "none"),
               "rxcui": (11111, 22222, 33333, 44444), "body_weight": (60, 70, 80)}
    return World(D, 0, data, lexicon)


def ok(world, name, **args):
    good, out = call_tool(world, f"{D}.{name}", args)
    assert good, out
    return out


def err(world, name, **args):
    good, out = call_tool(world, f"{D}.{name}", args)
    assert not good and isinstance(out, str) and out
    return out


# ------------------------------------------------------------------------------ formulary

def test_get_class(w):
    assert ok(w, "get_class", drug="ibuprofen") == "nsaid"
    assert "drug" in err(w, "get_class", drug="aspirin")


def test_compare_class(w):
    assert ok(w, "compare_class", drug_a="warfarin", drug_b="apixaban") is True
    assert ok(w, "compare_class", drug_a="warfarin", drug_b="ibuprofen") is False
    assert "drug_b" in err(w, "compare_class", drug_a="warfarin", drug_b="aspirin")


def test_list_drugs(w):
    assert ok(w, "list_drugs", drug_class="anticoagulant") == ["apixaban", "warfarin"]
    assert "drug_class" in err(w, "list_drugs", drug_class="statin")


def test_count_drugs(w):
    assert ok(w, "count_drugs", drug_class="anticoagulant") == 2
    assert ok(w, "count_drugs", drug_class="ssri") == 1


def test_find_drugs(w):
    assert ok(w, "find_drugs", condition="thrombosis") == ["apixaban", "warfarin"]
    assert ok(w, "find_drugs", condition="pain") == ["ibuprofen"]
    assert "condition" in err(w, "find_drugs", condition="asthma")


def test_list_conditions(w):
    assert ok(w, "list_conditions", drug="ibuprofen") == ["arthritis", "pain"]


def test_count_conditions(w):
    assert ok(w, "count_conditions", drug="warfarin") == 2


def test_find_conditions(w):
    assert ok(w, "find_conditions", drug_class="anticoagulant") == ["atrial fibrillation",
                                                                     "thrombosis"]


def test_get_rxcui(w):
    assert ok(w, "get_rxcui", drug="sertraline") == 44444


def test_convert_rxcui(w):
    assert ok(w, "convert_rxcui", rxcui=22222) == "apixaban"
    assert "rxcui" in err(w, "convert_rxcui", rxcui=99999)
    assert "JSON type integer" in err(w, "convert_rxcui", rxcui="22222")


# --------------------------------------------------------------------------- interactions

def test_list_interactions(w):
    assert ok(w, "list_interactions", drug="warfarin") == ["ibuprofen", "sertraline"]
    assert ok(w, "list_interactions", drug="apixaban") == []


def test_count_interactions(w):
    assert ok(w, "count_interactions", drug="sertraline") == 2
    assert ok(w, "count_interactions", drug="apixaban") == 0


def test_find_interactions(w):
    assert ok(w, "find_interactions", drug="warfarin", severity="major") == ["ibuprofen"]
    assert ok(w, "find_interactions", drug="warfarin", severity="moderate") == ["ibuprofen",
                                                                                "sertraline"]
    assert ok(w, "find_interactions", drug="ibuprofen", severity="minor") == ["sertraline",
                                                                              "warfarin"]
    assert "none" in err(w, "find_interactions", drug="warfarin", severity="none")
    assert "severity" in err(w, "find_interactions", drug="warfarin", severity="severe")


def test_check_interactions(w):
    assert ok(w, "check_interactions", drug_a="warfarin", drug_b="ibuprofen") is True
    assert ok(w, "check_interactions", drug_a="apixaban", drug_b="warfarin") is False


def test_get_severity(w):
    assert ok(w, "get_severity", drug_a="sertraline", drug_b="warfarin") == "moderate"
    assert ok(w, "get_severity", drug_a="warfarin", drug_b="sertraline") == "moderate"
    assert ok(w, "get_severity", drug_a="apixaban", drug_b="ibuprofen") == "none"
    assert "drug_a" in err(w, "get_severity", drug_a="aspirin", drug_b="warfarin")


def test_compare_severity(w):
    assert ok(w, "compare_severity", severity_a="minor", severity_b="major") == "major"
    assert ok(w, "compare_severity", severity_a="none", severity_b="none") == "none"
    assert "severity_b" in err(w, "compare_severity", severity_a="minor", severity_b="mild")


def test_convert_severity(w):
    assert [ok(w, "convert_severity", severity=s)
            for s in ("none", "minor", "moderate", "major")] == [0, 1, 2, 3]


# ------------------------------------------------------------------------ pharmacokinetics

def test_get_halflife(w):
    assert ok(w, "get_halflife", drug="sertraline") == 24.0


def test_compare_halflife(w):
    assert ok(w, "compare_halflife", drug_a="warfarin", drug_b="ibuprofen") == 38.0


def test_convert_halflife(w):
    assert ok(w, "convert_halflife", halflife=24.0) == round(math.log(2) / 24, 6)
    assert "halflife" in err(w, "convert_halflife", halflife=0)


def test_compute_clearance(w):
    assert ok(w, "compute_clearance", halflife=24.0) == 0.5
    assert ok(w, "compute_clearance", halflife=12) == 0.75
    assert ok(w, "compute_clearance", halflife=8.0) == 0.875
    assert "halflife" in err(w, "compute_clearance", halflife=-1.0)


def test_get_clearance(w):
    assert ok(w, "get_clearance", drug="sertraline") == 0.5
    assert ok(w, "get_clearance", drug="warfarin") == round(1 - math.exp(-math.log(2) * 0.6), 6)


# ---------------------------------------------------------------------------------- dosing

def test_get_dose(w):
    assert ok(w, "get_dose", drug="ibuprofen") == 400.0


def test_get_limit(w):
    assert ok(w, "get_limit", drug="warfarin") == 10.0


def test_compute_dose(w):
    assert ok(w, "compute_dose", drug="sertraline", body_weight=84) == 60.0
    assert ok(w, "compute_dose", drug="warfarin", body_weight=210.0) == 10.0  # 15 mg, capped
    assert "body_weight" in err(w, "compute_dose", drug="warfarin", body_weight=0)
    assert "body_weight" in err(w, "compute_dose", drug="warfarin", body_weight=301)


def test_check_dose(w):
    assert ok(w, "check_dose", drug="ibuprofen", dose=3200) is True
    assert ok(w, "check_dose", drug="ibuprofen", dose=3200.5) is False
    assert "dose" in err(w, "check_dose", drug="ibuprofen", dose=0)


def test_compute_limit(w):
    assert ok(w, "compute_limit", drug="ibuprofen", dose=400) == 8
    assert ok(w, "compute_limit", drug="ibuprofen", dose=600.0) == 5
    assert ok(w, "compute_limit", drug="warfarin", dose=2.5) == 4
    assert ok(w, "compute_limit", drug="sertraline", dose=300.0) == 0


def test_convert_dose(w):
    assert ok(w, "convert_dose", dose=400.0, body_weight=80) == 5.0


def test_bad_calls(w):
    assert "JSON type string" in err(w, "get_class", drug=3)
    assert "JSON type number" in err(w, "convert_dose", dose="400", body_weight=80)
    assert "JSON type number" in err(w, "convert_dose", dose=True, body_weight=80)
    assert "unknown" in err(w, "get_dose", drug="warfarin", weight=70)
    assert "too small" in err(w, "compute_limit", drug="ibuprofen", dose=1e-320)
    assert "non-finite" in err(w, "convert_halflife", halflife=1e-320)


# ------------------------------------------------------------------ registry and generated world

def test_registry_size_and_kinds():
    """Names, words and argument types: test_worlds_common.py."""
    kinds = [t.spec.kind for t in domain_tools(D).values()]
    assert len(kinds) >= 21 and kinds.count("R") >= 5 and kinds.count("P") >= 4


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_generated_world(seed):
    wd = make_world(D, seed)
    drugs, inter = wd.data["drugs"], wd.data["interactions"]
    assert len(drugs) == 30 and list(drugs) == sorted(drugs)
    assert len(wd.data["classes"]) == 8
    assert {r["class"] for r in drugs.values()} == set(wd.data["classes"])
    assert 8 <= len(wd.data["conditions"]) <= 14
    assert len({r["rxcui"] for r in drugs.values()}) == 30
    for d, r in drugs.items():
        assert r["halflife"] > 0 and 0 < r["dose"] <= r["limit"]
        assert 1 <= len(r["conditions"]) <= 3 and r["conditions"] == sorted(r["conditions"])
        assert d not in inter[d] and list(inter[d]) == sorted(inter[d])
        for other, sev in inter[d].items():
            assert inter[other][d] == sev and sev in ("minor", "moderate", "major")
    assert sum(len(v) for v in inter.values()) // 2 >= 20
    for k, v in wd.lexicon.items():
        assert list(v) == sorted(v), k
