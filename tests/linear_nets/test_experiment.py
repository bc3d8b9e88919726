"""The layer-balancing experiment on a tiny config: direction of the paper's claims."""

import jax

from experiments.layer_balancing import config, run


def test_tiny_run_shows_the_claims():
    result = run.run(config.tiny(), jax.random.key(0))
    m = result["metrics"]
    # step 1: equal rates are a local maximum, the optimum puts the whole budget on one layer
    assert m["midpoint_is_max_step1_frac"] == 1.0
    for alpha in (1.25, 1.5):
        assert m[f"optimal_split_step1_h512_a{alpha}"] in (0.0, 1.0)
        # step 2: equal rates are optimal
        assert abs(m[f"optimal_split_step2_h512_a{alpha}"] - 0.5) < 1e-6
        assert m[f"midpoint_curvature_step2_h512_a{alpha}"] > 0
    assert m["midpoint_is_min_step2_frac"] == 1.0
    # the official one-step formula is rejected by Monte Carlo, the corrected one is not
    assert m["official_onestep_formula_max_z"] > 5
    assert m["corrected_onestep_formula_max_z"] < 3
    verdicts = {c["metric"]: c["verdict"] for c in result["claims"]}
    assert verdicts["official_onestep_formula_max_z"] == "not reproduced"
    assert verdicts["midpoint_is_max_step1_frac"] == "reproduced"
