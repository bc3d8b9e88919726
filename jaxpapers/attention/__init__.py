"""Sparse / hashed decode attention: BinaryPC and its baselines as pure functions.

Everything is unbatched (one example, one layer, all kv heads) and vmaps at the boundary;
``make_attn_fn`` / ``make_attn_state_fn`` adapt a method to ``jaxpapers.lm``'s decode loop.
"""

from jaxpapers.attention._types import (BinaryPCState, OracleState, QuestState, RandomState,
                                        SignCodeState)
from jaxpapers.attention.baselines import (magicpig_build, oracle_build, pcasign_build,
                                           quest_build, random_build, simhash_build)
from jaxpapers.attention.binarypc import (binarypc_build, binarypc_encode, binarypc_fit,
                                          binarypc_scores, code_scores, fit_codes, pack_codes,
                                          quantize_probe, reconstruction_error, unpack_codes)
from jaxpapers.attention.sparse import (METHOD_NAMES, attend, build_state, decode_step,
                                        dense_attention, forced_slots, make_attn_fn,
                                        make_attn_state_fn, num_forced_for, select,
                                        selection_quality, token_scores)

__all__ = [
    "BinaryPCState", "SignCodeState", "QuestState", "OracleState", "RandomState",
    "binarypc_fit", "binarypc_scores", "fit_codes", "binarypc_encode", "binarypc_build",
    "pack_codes", "unpack_codes", "quantize_probe", "code_scores", "reconstruction_error",
    "simhash_build", "pcasign_build", "magicpig_build", "quest_build", "oracle_build",
    "random_build",
    "dense_attention", "token_scores", "forced_slots", "select", "attend", "decode_step",
    "selection_quality", "build_state", "METHOD_NAMES", "num_forced_for", "make_attn_fn",
    "make_attn_state_fn",
]
