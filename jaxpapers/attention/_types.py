"""Per-layer selection states of the sparse decode-attention methods.

Every state describes one example (unbatched) and one layer; vmap over batch and stack over
layers at the boundary. Letters: ``Hk`` key/value heads, ``S`` cache slots, ``D`` head
dimension, ``NB`` code bits, ``W = NB // 32`` packed words, ``E`` force-selected tokens,
``P`` pages. ``hash_length`` is the number of leading slots the state was built on; slots at
or past it are the tokens decoded after the hash (their codes are not in the state).
"""

from __future__ import annotations

import jax

from jaxpapers.core import pytree

__all__ = ["BinaryPCState", "SignCodeState", "QuestState", "OracleState", "RandomState",
           "SIGN_CODE_MODES"]

SIGN_CODE_MODES = ("asymmetric", "hamming", "tables")


@pytree.dataclass
class BinaryPCState:
    """BinaryPC hash of one layer: K ~ U V with U in {+-1}^{S x NB}.

    Attributes:
      proj: [Hk, NB, D] f32, V (one row per bit; the fit's ``v_b``).
      codes: [Hk, S, W] uint32, U packed (bit j of word w is 1 iff u_{32 w + j} = +1).
      forced: [Hk, E] int32, slots with the largest reconstruction error ||k - k^||, always
        selected (-1 marks an unused entry).
      hash_length: [] int32.
      probe_bits: static, magnitude bits of the quantised probe (7: [-127, 127]); 0 = exact.
    """

    proj: jax.Array  # [Hk, NB, D]
    codes: jax.Array  # [Hk, S, W]
    forced: jax.Array  # [Hk, E]
    hash_length: jax.Array  # []
    probe_bits: int = pytree.static_field(default=7)


@pytree.dataclass
class SignCodeState:
    """Sign codes u = sign((k - offset) . proj_b) of random (SimHash), principal (PCA-sign) or
    table-grouped (MagicPIG-style) hyperplanes.

    Attributes:
      proj: [Hk, NB, D] f32 hyperplanes (PCA-sign: principal directions, each times the mean
        |projection| of the keys on it).
      offset: [Hk, D] f32 subtracted before hashing (PCA-sign: the key mean; else zeros).
      codes: [Hk, S, W] uint32 packed codes, same layout as :class:`BinaryPCState`.
      hash_length: [] int32.
      mode: static; "asymmetric" (sum_b u_b (q . proj_b)), "hamming" (sum_b u_b sign(q . proj_b),
        i.e. NB - 2 Hamming distance) or "tables" (collisions over NB / table_bits tables).
      table_bits: static, bits per table in "tables" mode.
    """

    proj: jax.Array  # [Hk, NB, D]
    offset: jax.Array  # [Hk, D]
    codes: jax.Array  # [Hk, S, W]
    hash_length: jax.Array  # []
    mode: str = pytree.static_field(default="asymmetric")
    table_bits: int = pytree.static_field(default=10)


@pytree.dataclass
class QuestState:
    """Quest page summaries: per-channel min and max of the keys of each page.

    Attributes:
      kmin: [Hk, P, D] f32. kmax: [Hk, P, D] f32 (pages past hash_length hold +-inf).
      hash_length: [] int32.
      page_size: static, tokens per page.
    """

    kmin: jax.Array  # [Hk, P, D]
    kmax: jax.Array  # [Hk, P, D]
    hash_length: jax.Array  # []
    page_size: int = pytree.static_field(default=16)


@pytree.dataclass
class OracleState:
    """Exact top-k by q . k (the upper bound of any top-k selector).

    Attributes:
      hash_length: [] int32.
    """

    hash_length: jax.Array  # []


@pytree.dataclass
class RandomState:
    """Uniformly random tokens (fixed when the state is built).

    Attributes:
      noise: [Hk, S] f32 random priorities.
      hash_length: [] int32.
    """

    noise: jax.Array  # [Hk, S]
    hash_length: jax.Array  # []
