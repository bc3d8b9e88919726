"""Pieces of ``experiments/codetracer`` that the report's numbers rest on."""

from __future__ import annotations

import numpy as np

from experiments.codetracer import loop_detector
from experiments.codetracer.run import auroc
from jaxpapers import watermark as wm
from tests.watermark import _reference as ref


def test_loop_detector_matches_kgw_z_and_the_reference():
    r = np.random.default_rng(0)
    for _ in range(8):
        toks = r.integers(0, 256, 40)
        toks[10:20] = toks[0]  # repeated pairs: dedup matters
        key = int(r.integers(0, 2 ** 32))
        for dedup in (False, True):
            z_loop = loop_detector.kgw_z_loop(toks, key=key, gamma=0.5, dedup=dedup, length=33)
            z_ref = ref.kgw_z(toks, key=key, gamma=0.5, dedup=dedup, length=33)
            z_jax = float(wm.kgw_z(toks, key=key, gamma=0.5, dedup=dedup, length=33))
            assert abs(z_loop - z_ref) < 1e-12
            assert abs(z_jax - z_ref) < 1e-4
    green = loop_detector.green_list(123, 65, 0.25)
    assert sorted(green.tolist()) == sorted(ref.green_set(123, 0.25, 65))


def test_auroc_matches_pairwise_definition():
    r = np.random.default_rng(1)
    pos = r.integers(0, 5, 30).astype(float)  # many ties
    neg = r.integers(0, 4, 40).astype(float)
    pairs = (pos[:, None] > neg[None]).mean() + 0.5 * (pos[:, None] == neg[None]).mean()
    assert abs(auroc(pos, neg) - pairs) < 1e-12
    assert auroc(np.ones(3), np.zeros(3)) == 1.0
