"""A small byte-level decoder-only transformer (RoPE, grouped-query attention, KV cache).

Trained on the Python standard library's source and cached on first use
(``load_or_train(*small(), key=jax.random.key(0))``); the attention over the cache in
:func:`decode_step` is pluggable per layer (``attn_fn``) for sparse-attention studies.
"""

from jaxpapers.lm._types import (VOCAB_SIZE, AttnFn, AttnStateFn, KVCache, LMConfig,
                                 TrainConfig)
from jaxpapers.lm.evaluate import (bits_per_byte, bits_per_byte_decode, token_bits,
                                   unigram_bits_per_byte)
from jaxpapers.lm.model import (SHIFT_SITES, SITES, check_sparsity, collect_qkv, decode_step,
                                dense_attention, forward, init, param_count, prefill, rope,
                                site_width)
from jaxpapers.lm.training import (DEFAULT_CACHE_DIR, Preset, checkpoint_dir, checkpoint_info,
                                   corpus_tokens, heldout_bits_per_byte, heldout_windows,
                                   init_like, load_or_train, loss_fn, make_optimizer, small, tiny,
                                   train)

__all__ = [
    "VOCAB_SIZE",
    "LMConfig",
    "TrainConfig",
    "KVCache",
    "AttnFn",
    "AttnStateFn",
    "init",
    "init_like",
    "param_count",
    "forward",
    "prefill",
    "decode_step",
    "collect_qkv",
    "dense_attention",
    "rope",
    "SITES",
    "SHIFT_SITES",
    "site_width",
    "check_sparsity",
    "token_bits",
    "bits_per_byte",
    "bits_per_byte_decode",
    "unigram_bits_per_byte",
    "Preset",
    "tiny",
    "small",
    "corpus_tokens",
    "make_optimizer",
    "loss_fn",
    "train",
    "heldout_windows",
    "heldout_bits_per_byte",
    "load_or_train",
    "checkpoint_dir",
    "checkpoint_info",
    "DEFAULT_CACHE_DIR",
]
