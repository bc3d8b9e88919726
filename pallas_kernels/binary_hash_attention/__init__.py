"""BinaryPC binary-hash sparse attention: Pallas kernels + pure-jnp references.

Public ops (``implementation="auto"|"xla"|"pallas"``, ``interpret=None``, block sizes):

* :func:`hash_scores` -- asymmetric scores ``scale * sum_b u_b probe_b`` of packed binary key
  codes against an int8 probe, max-reduced over each GQA group.
* :func:`sparse_decode_attention` -- decode attention over selected tokens or pages (online
  softmax, float32 accumulation); in-kernel gather on GPU, scalar-prefetch index maps on TPU.

Formats: see :mod:`pallas_kernels.binary_hash_attention.reference`.
"""

from pallas_kernels.binary_hash_attention.kernel import AttentionBlockSizes, ScoreBlockSizes
from pallas_kernels.binary_hash_attention.ops import (GATHERS, IMPLEMENTATIONS, hash_scores,
                                                      sparse_decode_attention)
from pallas_kernels.binary_hash_attention.reference import (entry_limits, hash_scores_reference,
                                                            pack_codes, quantize_probe,
                                                            sparse_decode_attention_reference,
                                                            unpack_codes)

__all__ = ["AttentionBlockSizes", "ScoreBlockSizes", "GATHERS", "IMPLEMENTATIONS", "hash_scores",
           "sparse_decode_attention", "hash_scores_reference", "sparse_decode_attention_reference",
           "pack_codes", "unpack_codes", "quantize_probe", "entry_limits"]
