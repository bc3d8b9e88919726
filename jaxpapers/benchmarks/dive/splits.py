"""Held-out tools and narrow toolsets for DIVE's diversity-vs-quantity comparison.

Held-out tools are new verb / object *pairs* of seen words: a tool may be held out only if its
verb and its object each still occur in some training tool of its domain. The narrow arm offers
one fixed toolset per domain, chosen from training tools to cover every verb and object word of
that domain's held-out tools (so failing on them is not by construction), padded to ``size``.
"""

from __future__ import annotations

import random
import zlib

from jaxpapers.benchmarks.dive.worlds import DOMAINS, domain_tools

__all__ = ["heldout_split", "narrow_toolsets"]


def heldout_split(fraction: float = 0.2, *, seed: int = 0) -> tuple[list[str], list[str]]:
    """``(train tools, held-out tools)``: about ``fraction`` of each domain's tools held out."""
    if not 0 < fraction < 1:
        raise ValueError(f"fraction must be in (0, 1), got {fraction!r}")
    train_all, held_all = [], []
    for domain in DOMAINS:
        tools = domain_tools(domain)
        names = sorted(tools)
        rng = random.Random(zlib.crc32(f"heldout:{domain}:{seed}".encode()))
        rng.shuffle(names)
        want = max(1, round(fraction * len(names)))
        held: list[str] = []
        for name in names:
            if len(held) == want:
                break
            spec = tools[name].spec
            rest = [tools[n].spec for n in tools if n != name and n not in held]
            if any(r.verb == spec.verb for r in rest) and any(r.obj == spec.obj for r in rest):
                held.append(name)
        held_all += sorted(held)
        train_all += sorted(n for n in tools if n not in held)
    return train_all, held_all


def narrow_toolsets(train: list[str], heldout: list[str], *, size: int = 15,
                    seed: int = 0) -> dict[str, list[str]]:
    """One fixed toolset per domain (greedy word cover of the held-out words, then padding)."""
    out = {}
    for domain in DOMAINS:
        tools = domain_tools(domain)
        pool = sorted(n for n in train if n in tools)
        words = {w for n in heldout if n in tools for w in (tools[n].spec.verb, tools[n].spec.obj)}
        chosen: list[str] = []
        while words and len(chosen) < size:
            best = max(pool, key=lambda n: (len(words & {tools[n].spec.verb, tools[n].spec.obj}),
                                            n not in chosen, n))
            gain = words & {tools[best].spec.verb, tools[best].spec.obj}
            if not gain or best in chosen:
                break
            chosen.append(best)
            words -= gain
        rng = random.Random(zlib.crc32(f"narrow:{domain}:{seed}".encode()))
        rest = [n for n in pool if n not in chosen]
        rng.shuffle(rest)
        chosen += rest[: max(0, size - len(chosen))]
        out[domain] = sorted(chosen)
    return out
