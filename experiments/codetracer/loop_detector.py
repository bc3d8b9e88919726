"""A position-by-position Python detector, the way MarkLLM's KGW detector works, for timing.

MarkLLM scores a text by looping over its tokens in Python and, at each position, seeding a
generator from the previous token and drawing that position's green list again. This module does
the same with the issue's hash (NumPy over the 256 candidate bytes, a stable sort per position, no
cache across positions), so that ``run`` can report how much one jitted ``vmap`` over sequences
saves. Written for this project from the issue's formulas; it shares no code with MarkLLM.
"""

from __future__ import annotations

import math

import numpy as np

_M1, _M2 = np.uint32(0x85EBCA6B), np.uint32(0xC2B2AE35)
_GOLD, _MULT = np.uint32(0x9E3779B1), np.uint32(0x85EBCA77)


def _fmix(x: np.ndarray) -> np.ndarray:
    x = x ^ (x >> np.uint32(16))
    x = x * _M1
    x = x ^ (x >> np.uint32(13))
    x = x * _M2
    return x ^ (x >> np.uint32(16))


def green_list(key: int, context: int, gamma: float) -> np.ndarray:
    """The ``floor(256 gamma)`` bytes of smallest score for one context (ties: smaller byte)."""
    with np.errstate(over="ignore"):
        inner = _fmix(np.uint32(key) ^ (np.uint32(context) * _GOLD))
        s = _fmix(inner ^ (np.arange(256, dtype=np.uint32) * _MULT))
    return np.argsort(s, kind="stable")[:math.floor(256 * gamma)]


def kgw_z_loop(tokens, *, key: int, gamma: float, dedup: bool = True,
               length: int | None = None) -> float:
    """Width-1 (deduplicated) KGW z of one sequence, one position at a time."""
    tokens = [int(t) for t in tokens]
    length = len(tokens) if length is None else length
    gamma_e = math.floor(256 * gamma) / 256
    seen, n, green = set(), 0, 0
    for t in range(1, length):
        pair = (tokens[t - 1], tokens[t])
        if dedup:
            if pair in seen:
                continue
            seen.add(pair)
        n += 1
        green += tokens[t] in set(green_list(key, tokens[t - 1], gamma).tolist())
    if n == 0:
        return 0.0
    return (green - gamma_e * n) / math.sqrt(gamma_e * (1 - gamma_e) * n)
