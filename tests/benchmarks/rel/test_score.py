"""REL scorers: one crafted reply per quirk of the released scorers, ours beside them."""

from __future__ import annotations

import pytest

from jaxpapers.benchmarks.rel.score import score_response


def test_algebra_first_vs_last_answer_and_unparseable():
    r = "I first thought Answer 2, but checking again: Answer 5"
    assert score_response("algebra", 4, r)["correct"]
    assert not score_response("algebra", 4, r, official=True)["correct"]
    # nothing parseable: the release counts it as Answer 1, ours as wrong
    assert score_response("algebra", 0, "I cannot tell.", official=True)["correct"]
    assert not score_response("algebra", 0, "I cannot tell.")["correct"]
    # the release falls back to the first digit 1-8
    assert score_response("algebra", 2, "Option 3 fits.", official=True)["correct"]
    assert not score_response("algebra", 2, "Option 3 fits.")["correct"]


BIO = {"label": "Yes", "taxa": ["16", "37", "5", "19"],
       "names": [str(i) for i in range(1, 41)]}


def test_biology_substring_yes_no():
    r = "Yes. The nodes 16, 37, 5 and 19 share the blocks."
    ours = score_response("biology", BIO, r)
    assert ours["correct"] and ours["f1"] == 1.0
    # "nodes" contains "no": the release reads yes AND no -> unparsed -> wrong
    assert not score_response("biology", BIO, r, official=True)["correct"]
    no = {"label": "No", "taxa": [], "names": BIO["names"]}
    assert score_response("biology", no, "There is not enough evidence.", official=True)[
        "correct"]  # "not" reads as no in the release
    assert not score_response("biology", no, "There is not enough evidence.")["correct"]
    assert score_response("biology", no, "No convergence.")["correct"]


def test_biology_any_overlap_and_sorted_index_gold():
    one = "Yes: taxa 16 only."
    assert not score_response("biology", BIO, one)["correct"]  # ours: exact set
    assert score_response("biology", BIO, one)["recall"] == 0.25
    # the release stores gold as positions in the string-sorted names: naming exactly the gold
    # taxa by name scores wrong, naming their sorted positions scores right
    names = sorted(BIO["names"])
    idx = [names.index(t) for t in BIO["taxa"]]
    exact = "Yes: " + ", ".join(BIO["taxa"])
    assert not score_response("biology", BIO, exact, official=True)["correct"]
    by_index = "Yes: " + ", ".join(str(i) for i in idx[:1])
    assert score_response("biology", BIO, by_index, official=True)["correct"]


def test_chemistry():
    assert score_response("chem_c1", "No", "<Yes> hmm, actually <No>")["correct"]
    assert not score_response("chem_c1", "No", "<Yes> hmm, actually <No>", official=True)[
        "correct"]
    assert score_response("chem_c1", "Yes", "yes, all share C4H10O")["correct"]
    gold = ["CCCO", "CC(C)O"]
    r = score_response("chem_c3", gold, "Missing: OCCC, C(C)(C)O and CCOC")
    assert not r["correct"] and r["recall"] == 1.0 and abs(r["precision"] - 2 / 3) < 1e-12
    assert score_response("chem_c3", gold, "OC(C)C\nCCCO")["correct"]


@pytest.mark.parametrize("task, answer, name", [
    ("algebra", -1, "answer"), ("algebra", "3", "answer"), ("biology", "Yes", "answer"),
    ("biology", {"label": "maybe"}, "label"), ("chem_c1", "yes", "answer"),
    ("chem_c3", "CCO", "answer"), ("physics", 1, "task")])
def test_bad_input(task, answer, name):
    with pytest.raises(ValueError, match=name):
        score_response(task, answer, "Answer 1")
