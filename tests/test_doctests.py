"""Run the ``>>>`` examples of the public modules as doctests."""

import doctest
import importlib

import pytest

MODULES = [
    "jaxpapers.core.train",
    "jaxpapers.linear_nets.theory",
    "jaxpapers.quant.quantize",
    "pallas_kernels.quantized_matmul.ops",
    "pallas_kernels.binary_hash_attention.ops",
    "pallas_kernels.binary_hash_attention.reference",
    *(f"jaxpapers.conformal.{m}" for m in ("split", "rsacp", "scores", "references", "sklearn")),
    *(f"jaxpapers.pinn.{m}" for m in ("operators", "networks", "problems", "solvers",
                                      "diagnostics", "training")),
    *(f"jaxpapers.search.{m}" for m in ("muzero", "distributional", "risk")),
    *(f"jaxpapers.bandits.{m}" for m in ("b_slateglincb", "env", "flatten", "glm", "random_policy",
                                         "rs_slateglincb", "runner", "slate_glm_ofu",
                                         "slate_glm_ts")),
    *(f"jaxpapers.lm.{m}" for m in ("model", "evaluate", "training")),
    *(f"jaxpapers.attention.{m}" for m in ("binarypc", "baselines", "sparse")),
    *(f"jaxpapers.diffusion.{m}" for m in ("schedules", "samplers", "qsched", "training")),
]


@pytest.mark.parametrize("name", MODULES)
def test_doctests(name):
    mod = importlib.import_module(name)
    res = doctest.testmod(mod, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert res.attempted > 0, f"{name} has no doctest examples"
    assert res.failed == 0
