"""Configs for the BinaryPC experiment (frozen, JSON-serialisable)."""

from __future__ import annotations

import dataclasses

# the metric names of the contract: recall/{method}/{budget}, mass/..., bpb/{method}/6pct
CONTRACT_METHODS = ("binarypc64", "binarypc32", "simhash64", "simhash32", "magicpig",
                    "pcasign64", "quest", "oracle", "random")
EXTRA_METHODS = ("simhash64_hamming", "simhash32_hamming", "pcasign32")

TINY_SECONDS = 8  # tiny's wall time, measured: only orders `reproduce --jobs` (long first)


@dataclasses.dataclass(frozen=True)
class Config:
    """Selection quality, bits/byte and needle retrieval of sparse decode attention.

    Attributes:
      lm_preset: "small" (4 layers, Hq 4, Hk 2, D 64; trained once and cached by
        ``jaxpapers.lm``) or "tiny" (2 layers, D 16; for the test suite).
      lm_seed: seed of the LM's training (part of its cache key).
      dense_layers: leading layers kept dense (official: 2); the others are evaluated sparse.
      budgets: (name, fraction of the context) pairs; top-k size = round(fraction * context).
      methods: selectors of the selection study (see ``jaxpapers.attention.METHOD_NAMES``).
      decode_methods: selectors of the bits/byte and needle decoding (one compile each; the
        needle sequences ride in the same decoded batch).
      context: hashed keys per sequence in the selection study (part 1).
      n_queries: decode queries after the context per sequence (part 1).
      n_seqs: held-out windows in part 1.
      bpb_context: cache length (bytes) of the bits/byte study (part 2).
      bpb_decode: bytes decoded sparsely after the dense prefix (all of them force-selected,
        as the official code does with tokens decoded after the hash was built).
      bpb_seqs: held-out windows in part 2. bpb_budget: the budget name used for bits/byte.
      bpb_batch: sequences per compiled decode (memory).
      needle_seqs: needles (one per haystack; each asked under both protocols, in the same
        decoded batch and with the same prefix length as the bits/byte study).
      needle_value_len: random characters of each needle's value.
      err_fraction: BinaryPC's forced high-error share of the budget (official 0.1).
      probe_bits: BinaryPC probe quantisation (official 7).
      page_size: Quest page size (official 16).
      table_bits, num_tables: MagicPIG-style tables (MagicPIG: K = 10, L = 150).
    """

    lm_preset: str = "small"
    lm_seed: int = 0
    dense_layers: int = 2
    budgets: tuple[tuple[str, float], ...] = (("3pct", 0.03), ("6pct", 0.06),
                                              ("12pct", 0.125))
    methods: tuple[str, ...] = CONTRACT_METHODS + EXTRA_METHODS
    decode_methods: tuple[str, ...] = CONTRACT_METHODS
    context: int = 1024
    n_queries: int = 32
    n_seqs: int = 8
    bpb_context: int = 1024
    bpb_decode: int = 32
    bpb_seqs: int = 32
    bpb_budget: str = "6pct"
    bpb_batch: int = 32
    needle_seqs: int = 16
    needle_value_len: int = 6
    err_fraction: float = 0.1
    probe_bits: int = 7
    page_size: int = 16
    table_bits: int = 10
    num_tables: int = 150


def small() -> Config:
    """The small LM (trained on first use, ~5 min on 2 cores, then cached), contexts of 1K."""
    return Config()


def full() -> Config:
    """More sequences and queries at the same context (the LM's longest trained context)."""
    return Config(n_seqs=32, n_queries=64, bpb_seqs=128, bpb_decode=64, needle_seqs=64,
                  decode_methods=CONTRACT_METHODS + EXTRA_METHODS)


def tiny() -> Config:
    """Seconds once the tiny LM is cached (training it takes ~20 s): layer 1 sparse, a few
    sequences, four selectors and two sparse decoders (numbers meaningless)."""
    return Config(lm_preset="tiny", dense_layers=1, context=96, n_queries=4, n_seqs=2,
                  bpb_context=127, bpb_decode=24, bpb_seqs=2, bpb_batch=8, needle_seqs=2,
                  methods=("binarypc64", "simhash64", "oracle", "random"),
                  decode_methods=("binarypc64", "simhash64"), num_tables=4)
