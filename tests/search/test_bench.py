"""The search benchmark runs end to end (one repeat) and times every policy."""

import pytest

from experiments.riskzero import bench


@pytest.mark.slow  # ~40-60 s: compiles every policy of the benchmark script
def test_bench_times_every_policy(capsys):
    times = bench.main(["--repeats", "1"])
    ours = [n for n in times if n.startswith("ours")]
    assert len(ours) == 4 and all(t > 0 for t in times.values())
    out = capsys.readouterr().out
    assert "| ours CVaR muzero (PUCT) search (M=256) |" in out
