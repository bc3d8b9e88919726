"""Scoring LLM replies on REL's tasks: ours, and the released scorers' semantics (``official``).

The released scorers have quirks that change results (measured on the released code, see
``../shared/papers/rel.md``):

- algebra: the *first* "Answer N" (else the first digit 1-8); nothing parseable counts as
  Answer 1;
- biology: ``'yes' in text`` / ``'no' in text`` on the lower-cased reply (so "nodes", "not" and
  "cannot" read as *no*; both present = unparsed = wrong); taxa are every integer in the reply
  (or ``taxon_N``); a "yes" is correct when *any* gold taxon is named; the gold taxa are stored
  as positions in the string-sorted list of taxon names while the prompt shows the names;
- chemistry C1: the first ``<Yes>`` / ``<No>`` tag; C3: the exact set of canonical SMILES.

Ours: the *last* "Answer N" and an unparseable reply is wrong; whole-word yes / no (the first
one; none = wrong); taxa by name, correct only for the exact set (precision, recall and F1 kept);
C1 the last tag, else a whole-word yes / no; C3 exact set of canonical SMILES (our subset's
canonical form, :func:`jaxpapers.benchmarks.rel.chem.canonical_smiles`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["score_response", "TASKS", "parse_choice", "parse_yes_no", "set_scores"]

TASKS = ("algebra", "biology", "chem_c1", "chem_c3")
_ANSWER = re.compile(r"answer\s*[:#]?\s*\(?([1-9]\d*)\)?", re.I)


def parse_choice(response: str, *, official: bool = False) -> int | None:
    """The 0-based candidate a reply names ("Answer N" is 1-based); None if none (ours).

    Official: the first "Answer N", else the first digit 1-8, else candidate 0."""
    found = _ANSWER.findall(response)
    if official:
        if found:
            return int(found[0]) - 1
        digit = re.search(r"[1-8]", response)
        return int(digit.group(0)) - 1 if digit else 0
    return int(found[-1]) - 1 if found else None


def parse_yes_no(response: str, *, official: bool = False) -> str | None:
    """"Yes", "No" or None. Official: substring tests on the lower-cased reply (both or neither:
    None); ours: the first whole-word yes or no."""
    if official:
        text = response.lower()
        yes, no = "yes" in text, "no" in text
        return None if yes == no else ("Yes" if yes else "No")
    m = re.search(r"\b(yes|no)\b", response, re.I)
    return None if m is None else m.group(1).capitalize()


def set_scores(predicted: Sequence, gold: Sequence) -> dict[str, float]:
    """Precision, recall and F1 of a predicted set against the gold set (empty-vs-empty = 1)."""
    p, g = set(predicted), set(gold)
    if not p and not g:
        return {"precision": 1.0, "recall": 1.0, "f1": 1.0}
    tp = len(p & g)
    prec = tp / len(p) if p else 0.0
    rec = tp / len(g) if g else 0.0
    f1 = 2 * prec * rec / (prec + rec) if prec + rec else 0.0
    return {"precision": prec, "recall": rec, "f1": f1}


def _taxa_named(response: str, names: Sequence[str]) -> list[str]:
    """Taxon names the reply mentions as whole tokens (``taxon_5``, ``taxon 5`` or ``5``)."""
    out = []
    for name in names:
        pat = r"(?<![\w.])(?:taxon[_ ]?)?" + re.escape(str(name)) + r"(?![\w.])"
        if re.search(pat, response, re.I):
            out.append(str(name))
    return out


def _biology(answer: Mapping, response: str, official: bool) -> dict[str, Any]:
    label = answer.get("label")
    if label not in ("Yes", "No"):
        raise ValueError(f"answer['label'] must be 'Yes' or 'No', got {label!r}")
    gold = [str(t) for t in answer.get("taxa", [])]
    said = parse_yes_no(response, official=official)
    if official:
        names = sorted(str(n) for n in answer.get("names", gold))  # released: sorted as strings
        gold_idx = {names.index(t) for t in gold if t in names}
        ints = [int(x) for x in re.findall(r"taxon_(\d+)", response)] or \
            [int(x) for x in re.findall(r"\d+", response)]
        if said == "Yes":
            correct = label == "Yes" and bool(gold_idx & set(ints))
        elif said == "No":
            correct = label == "No" and not ints
        else:
            correct = False
        return {"correct": bool(correct), "parsed": said, "taxa": ints}
    named = _taxa_named(response, answer.get("names", gold)) if said == "Yes" else []
    scores = set_scores(named, gold if label == "Yes" else [])
    correct = said == label and (label == "No" or set(named) == set(gold))
    return {"correct": bool(correct), "parsed": said, "taxa": named, **scores}


def _smiles_in(response: str) -> list[str]:
    from jaxpapers.benchmarks.rel.chem import canonical_smiles

    out = []
    for tok in re.split(r"[\s,;]+", response):
        tok = tok.strip("`'\".[]{}<>")
        if not tok or not re.fullmatch(r"[A-Za-z()\-]+", tok):
            continue
        try:
            out.append(canonical_smiles(tok))
        except ValueError:
            continue
    return out


def score_response(task: str, answer: Any, response: str, *, official: bool = False) -> dict:
    """Score one reply (contract).

    Args:
      task: one of ``"algebra"``, ``"biology"``, ``"chem_c1"``, ``"chem_c3"``.
      answer: algebra: the 0-based index of the correct candidate (int); biology:
        ``{"label": "Yes"|"No", "taxa": [names], "names": [all taxon names]}`` (taxa by name, as
        the prompt shows them); chem_c1: ``"Yes"|"No"``; chem_c3: the missing isomers (SMILES).
      response: the model's reply.
      official: reproduce the released scorer's semantics (see the module docstring).

    Returns:
      dict with ``correct`` (bool), ``parsed`` (what was read), and for set answers
      ``precision``, ``recall``, ``f1``.

    >>> score_response("algebra", 2, "Reasoning... Answer 1. No wait: Answer 3")["correct"]
    True
    >>> score_response("algebra", 2, "Reasoning... Answer 1. No wait: Answer 3",
    ...                official=True)["correct"]
    False
    """
    if task not in TASKS:
        raise ValueError(f"task must be one of {TASKS}, got {task!r}")
    if not isinstance(response, str):
        raise ValueError(f"response must be a str, got {type(response).__name__}")
    if task == "algebra":
        if isinstance(answer, bool) or not isinstance(answer, int) or answer < 0:
            raise ValueError(f"answer must be a 0-based candidate index, got {answer!r}")
        choice = parse_choice(response, official=official)
        return {"correct": choice == answer, "parsed": choice}
    if task == "biology":
        if not isinstance(answer, Mapping):
            raise ValueError(f"answer must be a dict with label and taxa, got {answer!r}")
        return _biology(answer, response, official)
    if task == "chem_c1":
        if answer not in ("Yes", "No"):
            raise ValueError(f"answer must be 'Yes' or 'No', got {answer!r}")
        tags = re.findall(r"<(yes|no)>", response, re.I)
        if official:
            said = tags[0].capitalize() if tags else None
        else:
            said = tags[-1].capitalize() if tags else parse_yes_no(response)
        return {"correct": said == answer, "parsed": said}
    # chem_c3
    from jaxpapers.benchmarks.rel.chem import canonical_smiles

    if isinstance(answer, str) or not isinstance(answer, Sequence):
        raise ValueError(f"answer must be a list of SMILES, got {answer!r}")
    gold = [canonical_smiles(s) for s in answer]
    named = _smiles_in(response)
    scores = set_scores(named, gold)
    return {"correct": set(named) == set(gold), "parsed": sorted(set(named)), **scores}
