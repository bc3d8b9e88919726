"""Text watermarks over bytes (KGW, SWEET, EWD) and the pieces of CodeTracer's policy.

* :mod:`~jaxpapers.watermark.hashing`: the exact uint32 green-list hash (``fmix32``, contexts,
  ``green_mask``, ``green_table``), shared by generation and detection.
* :mod:`~jaxpapers.watermark.detect`: the weighted z statistic (``kgw_z``; ``sweet_z`` and
  ``ewd_z`` with their weights), entropies and spike entropies.
* :mod:`~jaxpapers.watermark.bias`: logits processors (``kgw_bias``, ``sweet_bias``) and the
  promotable bytes (``printable_mask``).
* :mod:`~jaxpapers.watermark.gumbel`: ``gumbel_topk``, an exact k-hot Plackett-Luce sample with a
  relaxed top-k gradient.
* :mod:`~jaxpapers.watermark.validity`: ``line_validity``, the parse-only share of valid lines.
* :mod:`~jaxpapers.watermark.sampling`: ``generate`` (prefill + one ``lax.scan`` of decode steps
  with a logits processor; paired sampling keys) and the baseline processors ``Scheme``.
* :mod:`~jaxpapers.watermark.codetracer`: CodeTracer's policy (gate + Gumbel top-k over green
  printable bytes) and its GRPO training (reconstruction).

Defaults follow MarkLLM: ``gamma = 0.5``, ``delta = 2``, key ``15485863``, context width 1,
z threshold 4, SWEET entropy threshold 0.9 nats.
"""

from jaxpapers.watermark import codetracer
from jaxpapers.watermark.bias import kgw_bias, printable_mask, sweet_bias
from jaxpapers.watermark.detect import (SWEET_THRESHOLD, entropy, ewd_weights, ewd_z, kgw_z,
                                        spike_entropy, sweet_weights, sweet_z)
from jaxpapers.watermark.gumbel import gumbel_topk
from jaxpapers.watermark.hashing import (DEFAULT_DELTA, DEFAULT_GAMMA, DEFAULT_KEY,
                                         DEFAULT_Z_THRESHOLD, VOCAB, context_ids, fmix32,
                                         green_mask, green_table)
from jaxpapers.watermark.validity import line_validity
from jaxpapers.watermark.sampling import GenerateOutput, Scheme, generate
from jaxpapers.watermark.codetracer import CodeTracer, GRPOConfig, train_codetracer

__all__ = [
    "VOCAB",
    "DEFAULT_KEY",
    "DEFAULT_GAMMA",
    "DEFAULT_DELTA",
    "DEFAULT_Z_THRESHOLD",
    "SWEET_THRESHOLD",
    "fmix32",
    "context_ids",
    "green_mask",
    "green_table",
    "kgw_z",
    "sweet_z",
    "ewd_z",
    "entropy",
    "sweet_weights",
    "spike_entropy",
    "ewd_weights",
    "kgw_bias",
    "sweet_bias",
    "printable_mask",
    "gumbel_topk",
    "line_validity",
    "generate",
    "GenerateOutput",
    "Scheme",
    "CodeTracer",
    "GRPOConfig",
    "train_codetracer",
    "codetracer",
]
