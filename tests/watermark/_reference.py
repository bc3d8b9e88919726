"""Watermark references written from the issue's formulas: Python ints for the hash, float64 NumPy.

Independent of ``jaxpapers.watermark``: loops over positions, a sort for each green list.
"""

from __future__ import annotations

import functools
import itertools
import math

import numpy as np

MASK32 = 0xFFFFFFFF


def fmix(x: int) -> int:
    x ^= x >> 16
    x = (x * 0x85EBCA6B) & MASK32
    x ^= x >> 13
    x = (x * 0xC2B2AE35) & MASK32
    return x ^ (x >> 16)


def score(key: int, c: int, v: int) -> int:
    inner = fmix(key ^ ((c * 0x9E3779B1) & MASK32))
    return fmix(inner ^ ((v * 0x85EBCA77) & MASK32))


@functools.lru_cache(maxsize=None)
def green_order(key: int, c: int, vocab: int = 256) -> tuple[int, ...]:
    """Tokens sorted by (score, token): the green list is a prefix of this order."""
    return tuple(sorted(range(vocab), key=lambda v: (score(key, c, v), v)))


def num_green(gamma: float, vocab: int = 256) -> int:
    return math.floor(gamma * vocab)


def green_set(key: int, gamma: float, c: int, vocab: int = 256) -> frozenset[int]:
    return frozenset(green_order(key, c, vocab)[:num_green(gamma, vocab)])


def context(tokens, t: int, h: int) -> int:
    return sum(int(tokens[t - i]) * 256 ** (i - 1) for i in range(1, h + 1))


def green_flags(tokens, key: int, gamma: float, h: int) -> list[int]:
    """g_t for t in [h, T) (positions t < h get -1)."""
    out = [-1] * min(h, len(tokens))
    for t in range(h, len(tokens)):
        out.append(int(int(tokens[t]) in green_set(key, gamma, context(tokens, t, h))))
    return out


def kgw_z(tokens, *, key, gamma, weights=None, dedup=False, length=None, h=1) -> float:
    """The issue's z, one position at a time."""
    n = len(tokens)
    length = n if length is None else length
    w = np.ones(n) if weights is None else np.asarray(weights, np.float64)
    gamma_e = num_green(gamma) / 256
    seen = set()
    sum_w = sum_w2 = sum_wg = 0.0
    for t in range(h, length):
        if not w[t] > 0:
            continue
        c = context(tokens, t, h)
        x = int(tokens[t])
        if dedup:
            if (c, x) in seen:
                continue
            seen.add((c, x))
        g = 1.0 if x in green_set(key, gamma, c) else 0.0
        sum_w += w[t]
        sum_w2 += w[t] ** 2
        sum_wg += w[t] * g
    if sum_w2 == 0:
        return 0.0
    return (sum_wg - gamma_e * sum_w) / math.sqrt(gamma_e * (1 - gamma_e) * sum_w2)


# ----------------------------------------------------------------------------- MarkLLM formulas

def softmax(logits):
    z = np.asarray(logits, np.float64)
    z = np.exp(z - z.max(-1, keepdims=True))
    return z / z.sum(-1, keepdims=True)


def entropy(logits):
    p = softmax(logits)
    return -np.sum(np.where(p > 0, p * np.log(np.where(p > 0, p, 1.0)), 0.0), axis=-1)


def sweet_z(tokens, entropies, *, key, gamma, threshold=0.9, h=1) -> float:
    """MarkLLM SWEET: score only positions whose entropy exceeds the threshold."""
    flags = green_flags(tokens, key, gamma, h)
    kept = [t for t in range(h, len(tokens)) if entropies[t] > threshold]
    n = len(kept)
    if n == 0:
        return 0.0
    green = sum(flags[t] for t in kept)
    return (green - gamma * n) / math.sqrt(n * gamma * (1 - gamma))


def spike_entropy(logits, gamma, delta):
    p = softmax(logits)
    zeta = (1 - gamma) * (math.exp(delta) - 1) / (1 - gamma + gamma * math.exp(delta))
    return np.sum(p / (1 + zeta * p), axis=-1)


def ewd_z(tokens, spike, *, key, gamma, h=1) -> float:
    """MarkLLM EWD: weights SE - min SE over the scored positions, weighted z."""
    flags = np.array(green_flags(tokens, key, gamma, h)[h:], np.float64)
    se = np.asarray(spike, np.float64)[h:]
    w = se - se.min()
    if np.sum(w ** 2) == 0:
        return 0.0
    return (np.sum(w * flags) - gamma * np.sum(w)) / math.sqrt(gamma * (1 - gamma) * np.sum(w ** 2))


# ----------------------------------------------------------------------------- Plackett-Luce

def plackett_luce_inclusion(logits, k: int, allowed=None) -> np.ndarray:
    """P(v in the first k draws without replacement from softmax(logits) over the allowed entries),
    summed over every ordered k-tuple."""
    v = len(logits)
    allowed = np.ones(v, bool) if allowed is None else np.asarray(allowed, bool)
    p = np.where(allowed, np.exp(np.asarray(logits, np.float64) - np.max(logits)), 0.0)
    p = p / p.sum()
    incl = np.zeros(v)
    for tup in itertools.permutations(np.flatnonzero(allowed).tolist(), k):
        prob, left = 1.0, 1.0
        for i in tup:
            prob *= p[i] / left
            left -= p[i]
        for i in tup:
            incl[i] += prob
    return incl
