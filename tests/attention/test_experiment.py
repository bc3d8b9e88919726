"""The BinaryPC experiment on tiny configs: result shape, and the claims' directions."""

from __future__ import annotations

import dataclasses

import jax
import pytest

from experiments.binarypc import config, run

# the directions need more than config.tiny() (which only runs the pipeline)
DIRECTIONS = config.Config(
    lm_preset="tiny", dense_layers=1, context=96, n_queries=16, n_seqs=4, bpb_context=127,
    bpb_decode=24, bpb_seqs=8, bpb_batch=16, needle_seqs=4,
    methods=("binarypc64", "simhash64", "simhash64_hamming", "quest", "oracle", "random"),
    decode_methods=("binarypc64", "simhash64", "quest", "oracle", "random"), num_tables=30)
FAST = dataclasses.replace(DIRECTIONS, methods=("binarypc64", "simhash64", "oracle",
                                                    "random"),
                           decode_methods=("binarypc64",),
                           n_seqs=2, bpb_seqs=4, needle_seqs=2)


@pytest.mark.slow  # ~25-120 s cold (trains the tiny LM); the method-level tests cover ordering
def test_fast_tiny_run_orders_the_methods(tmp_path):
    res = run.run(FAST, jax.random.key(0))
    m = res["metrics"]
    for b in ("3pct", "6pct", "12pct"):
        # the oracle bounds every selector's captured mass; a hash beats random picks
        assert m[f"mass/oracle/{b}"] >= m[f"mass/binarypc64/{b}"] - 1e-6
        assert m[f"recall/binarypc64/{b}"] > 2 * m[f"recall/random/{b}"]
    # the paper's direction at equal bits (measured on tiny: ~0.36 vs ~0.30 at 3%)
    assert m["recall/binarypc64/3pct"] > m["recall/simhash64/3pct"]
    # mass grows with the budget
    assert m["mass/binarypc64/3pct"] < m["mass/binarypc64/6pct"] < m["mass/binarypc64/12pct"]
    # sparse decoding keeps bits/byte near dense on tiny (measured within 1%)
    assert abs(m["bpb/binarypc64/6pct"] / m["bpb/dense"] - 1) < 0.03
    assert {c["metric"].split("/")[0] for c in res["claims"]} == {"recall_ratio", "mass_ratio",
                                                                   "bpb_rel"}
    from jaxpapers.core.report import validate_result

    validate_result(res)
    paths = run.plot(res, tmp_path)
    assert paths and all(p.suffix == ".png" and p.stat().st_size > 0 for p in paths)


@pytest.mark.slow
def test_tiny_config_reports_every_metric():
    res = run.run(DIRECTIONS, jax.random.key(0))
    m = res["metrics"]
    for meth in DIRECTIONS.methods:
        for b in ("3pct", "6pct", "12pct"):
            assert 0.0 <= m[f"recall/{meth}/{b}"] <= 1.0
    for meth in DIRECTIONS.decode_methods:
        assert m[f"bpb/{meth}/6pct"] > 0
    assert m["recall/oracle/12pct"] >= m["recall/quest/12pct"]
