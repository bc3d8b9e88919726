"""The long-horizon script: runs the named algorithms, ratios to OFU, clear errors."""

import math

import pytest

from experiments.slate_glm import horizon


@pytest.mark.slow  # ~25-55 s: a script test (the experiment's pipeline runs in the tiny runs)
def test_rows_and_ratios():
    rows = horizon.horizon_table(80, 2, ("slate_glm_ofu", "random"))
    assert [(r["setting"][:2], r["algo"]) for r in rows] == [
        ("s1", "slate_glm_ofu"), ("s1", "random"), ("s2", "slate_glm_ofu"), ("s2", "random")]
    for r in rows:
        assert 0 <= r["R_T10"] <= r["R_T4"] <= r["R_T"]  # cumulative regret is non-decreasing
        assert math.isclose(r["ratio_to_ofu"] * [q for q in rows if q["setting"] == r["setting"]
                                                 and q["algo"] == "slate_glm_ofu"][0]["R_T"],
                            r["R_T"], rel_tol=1e-12)
    assert rows[1]["R_T"] > rows[0]["R_T"]  # random is worse than OFU even at T = 80


@pytest.mark.parametrize("kw, msg", [({"num_rounds": 10}, "num_rounds"),
                                     ({"num_seeds": 1}, "num_seeds"),
                                     ({"algos": ("nope",)}, "algos")])
def test_bad_arguments(kw, msg):
    args = {"num_rounds": 80, "num_seeds": 2, "algos": ("random",)} | kw
    with pytest.raises(ValueError, match=msg):
        horizon.horizon_table(**args)
