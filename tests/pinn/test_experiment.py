"""The coupling-PINN experiment on its tiny config: the deep plain MLP fails, the coupling net
of the same depth fits the target (the direction of the paper's claim, with numbers)."""

import jax
import numpy as np
import pytest

from experiments.coupling_pinn import config, run
from jaxpapers.core.report import validate_result


# the direction needs more than config.tiny() (which only runs the pipeline)
DIRECTIONS = config.Config(archs=("mlp", "coupled"), depths=(16,), steps=200, batch_size=32,
                           eval_n=30, deriv_depths=(16,), deriv_points=16, time_archs=())


@pytest.mark.slow  # ~50 s on 2 cores (two compiles of depth-16 training steps)
def test_tiny_run_direction(tmp_path):
    res = run.run(DIRECTIONS, jax.random.key(0))
    validate_result(res)
    m = res["metrics"]
    for name in ("rel_l2/mlp/depth16", "rel_l2/coupled/depth16", "deriv_norm_init/mlp/depth16",
                 "deriv_norm_init/coupled/depth16"):
        assert name in m and np.isfinite(m[name]), name
    # deep plain tanh MLP: stuck near the trivial error of 1; coupling net: several times lower
    assert m["rel_l2/mlp/depth16"] > 0.3, m
    assert m["rel_l2/coupled/depth16"] < 0.3 * m["rel_l2/mlp/depth16"], m
    # vanishing differentials of the plain MLP at init vs the coupling net
    assert m["deriv_norm_init/mlp/depth16"] < m["deriv_norm_init/coupled/depth16"]
    paths = run.plot(res, tmp_path)
    assert paths and all(p.stat().st_size > 1000 for p in paths)
