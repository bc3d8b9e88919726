"""Activation sparsity for the byte-level LM: TEAL/CATS magnitude thresholds, mean compensation,
and SPON's learned spontaneous neurons (arXiv 2512.12744) folded into biases.

The model side lives in :mod:`jaxpapers.lm` (``forward(..., sparsity=...)``); this package
calibrates thresholds, trains and absorbs shifts, and measures what a sparsity setting does.

>>> import jax, jax.numpy as jnp
>>> from jaxpapers import lm, sparsity
>>> cfg = lm.LMConfig(d_model=16, n_layers=2, n_q_heads=2, n_kv_heads=1, head_dim=8, d_ff=32,
...                   max_len=16)
>>> params = lm.init(cfg, jax.random.key(0))
>>> tokens = jax.random.randint(jax.random.key(1), (4, 16), 0, 256)
>>> sp = sparsity.calibrate(params, tokens, config=cfg, sparsity=0.5)
>>> sorted(sp["threshold"]), sp["threshold"]["attn_in"].shape
(['attn_in', 'attn_out', 'mlp_hidden', 'mlp_in'], (2,))
>>> z = sparsity.achieved_sparsity(params, tokens, config=cfg, sparsity=sp)
>>> [round(float(v), 3) for v in z["attn_in"]]
[0.5, 0.5]
"""

from jaxpapers.sparsity.calibrate import (CATS_SITES, TEAL_SITES, achieved_sparsity, calibrate,
                                          calibrate_dense, hidden_state_error, mean_compensation,
                                          site_activations, site_levels,
                                          weight_reads_skipped)
from jaxpapers.sparsity.spon import FEEDS, absorb, kl_to_dense, spon_loss, train_spon
from jaxpapers.sparsity.threshold import magnitude_threshold, quantile_index

__all__ = [
    "TEAL_SITES",
    "CATS_SITES",
    "FEEDS",
    "magnitude_threshold",
    "quantile_index",
    "site_levels",
    "calibrate",
    "calibrate_dense",
    "mean_compensation",
    "achieved_sparsity",
    "weight_reads_skipped",
    "hidden_state_error",
    "site_activations",
    "kl_to_dense",
    "spon_loss",
    "train_spon",
    "absorb",
]
