"""REL with a language model: prompts for every task, and ``evaluate`` over an OpenAI-compatible
chat endpoint (``jaxpapers.agents.OpenAICompatClient``, shared with ExCyTIn and DIVE).

Nothing here opens a socket unless the caller passes a client; the experiment builds one only
when ``JAXPAPERS_LLM_BASE_URL`` is set (``OpenAICompatClient.from_env``). The prompts are ours
(the task statements follow the paper's task definitions; the wording is not the release's). An
*item* is a JSON-ready dict::

    {"id": str, "family": "rc" | "a1".."a4" | "b1" | "c1" | "c3", "task": a score task,
     "rc": int, "prompt": str, "answer": what score_response takes, "shots": int}

``evaluate`` sends one user message per item (temperature 0 by default), scores the reply with
:func:`jaxpapers.benchmarks.rel.score.score_response` (ours, or the release's semantics with
``official=True``), and groups accuracy by family and RC. A JSON-lines ``cache`` makes a long
run resumable: a reply already recorded for the same model, prompt and request parameters is
reused, and a failed request is not recorded (the next run asks again).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from jaxpapers.benchmarks.rel.score import score_response

__all__ = ["SYSTEM_PROMPT", "rc_items", "panel_items", "biology_items", "chemistry_items",
           "evaluate", "accuracy_by_rc"]

SYSTEM_PROMPT = ("You solve reasoning puzzles. Think step by step if you need to, then give the "
                 "final answer in exactly the format the puzzle asks for.")
FAMILIES = ("rc", "a1", "a2", "a3", "a4", "b1", "c1", "c3")
_SCORE_TASK = {"rc": "algebra", "a1": "algebra", "a2": "algebra", "a3": "algebra",
               "a4": "algebra", "b1": "biology", "c1": "chem_c1", "c3": "chem_c3"}



def _grid_text(grid: np.ndarray) -> str:
    return "\n".join(" ".join("?" if v < 0 else str(int(v)) for v in row) for row in grid)


def _candidates(values: Sequence[str]) -> str:
    return "\n".join(f"Answer {j + 1}: {v}" for j, v in enumerate(values))


def rc_items(batch: Mapping, *, modulus: int = 10, examples: Mapping | None = None,
             k: int | None = None, prefix: str = "rc") -> list[dict]:
    """Items of the RC family from :func:`~jaxpapers.benchmarks.rel.generate_rc` output.

    Each prompt shows the grid (rows of numbers, ``?`` for the query cell) and the candidates
    "Answer 1".."Answer M", and says only that every row follows one rule over Z_P that fixes
    its last number from some of the others (the rule must be inferred from the complete rows).

    Args:
      batch: ``grid`` [N, R, C], ``choices`` [N, M], ``target`` [N], ``operands`` [C - 1].
      modulus: P.
      examples: optional solved instances with the same operands (another ``generate_rc`` call
        with ``operands=batch["operands"]``): all S are shown before each question, query
        value filled in (in-context examples).
      k: the RC recorded on the items (default: ``operands.sum()``).
      prefix: id prefix.

    Returns:
      N items (family ``"rc"``, task ``"algebra"``, answer = 0-based index of the answer).
    """
    grid = np.asarray(batch["grid"])
    choices, target = np.asarray(batch["choices"]), np.asarray(batch["target"])
    if grid.ndim != 3 or choices.shape[0] != grid.shape[0] or target.shape != grid.shape[:1]:
        raise ValueError(f"batch must hold grid [N, R, C], choices [N, M] and target [N], got "
                         f"{grid.shape}, {choices.shape}, {target.shape}")
    rc = int(np.asarray(batch["operands"]).sum()) if k is None else int(k)
    shots = ""
    num_shots = 0
    if examples is not None:
        if not np.array_equal(np.asarray(examples["operands"]), np.asarray(batch["operands"])):
            raise ValueError("examples must use the batch's operands (same rule)")
        eg = np.asarray(examples["grid"]).copy()
        eg[:, -1, -1] = np.asarray(examples["answer"])
        num_shots = eg.shape[0]
        shots = "".join(f"Solved example {i + 1}:\n{_grid_text(g)}\n\n" for i, g in enumerate(eg))
    rows, cols = grid.shape[1:]
    items = []
    for i in range(grid.shape[0]):
        prompt = (
            f"Each row below has {cols} numbers in 0..{modulus - 1}. The same rule, applied to "
            f"some of the first {cols - 1} numbers of a row, gives its last number; all "
            f"arithmetic is modulo {modulus}. Infer the rule from the complete rows and find "
            "the missing number (?).\n\n" + shots
            + f"Puzzle:\n{_grid_text(grid[i])}\n\nCandidates:\n"
            + _candidates([str(int(v)) for v in choices[i]])
            + "\n\nEnd your reply with 'Answer N' for the candidate number N.")
        items.append({"id": f"{prefix}-k{rc}-s{num_shots}-{i}", "family": "rc",
                      "task": "algebra", "rc": rc, "prompt": prompt,
                      "answer": int(target[i]), "shots": num_shots})
    return items


def _matrix(m: np.ndarray) -> str:
    def cell(v):
        return str(int(v)) if float(v).is_integer() else f"{float(v):.2f}"

    return "[" + "; ".join(" ".join(cell(v) for v in row) for row in m) + "]"


def panel_items(items: Mapping, task: str, *, rc: int = 0,
                prefix: str | None = None) -> list[dict]:
    """Items of A1-A4 from ``official_items`` / ``our_items``: the context panels in order,
    then the candidates; the question asks for the panel that comes next. ``rc`` is recorded
    on the items (default 0: none assigned; our notes on the release state no RC per task)."""
    if task not in ("a1", "a2", "a3", "a4"):
        raise ValueError(f"task must be one of a1, a2, a3, a4, got {task!r}")
    ctx, ch, t = (np.asarray(items[n]) for n in ("context", "choices", "target"))
    out = []
    for i in range(ctx.shape[0]):
        panels = "\n".join(f"Panel {j + 1}: {_matrix(p)}" for j, p in enumerate(ctx[i]))
        prompt = ("The panels below follow a pattern. Which candidate is the next panel?\n\n"
                  + panels + "\n\nCandidates:\n" + _candidates([_matrix(c) for c in ch[i]])
                  + "\n\nEnd your reply with 'Answer N' for the candidate number N.")
        out.append({"id": f"{prefix or task}-{i}", "family": task, "task": "algebra",
                    "rc": int(rc), "prompt": prompt, "answer": int(t[i]), "shots": 0})
    return out


def biology_items(b1: Iterable[Mapping], *, prefix: str = "b1") -> list[dict]:
    """Items of B1 from :func:`~jaxpapers.benchmarks.rel.generate_b1`: the alignment as FASTA
    and the tree as Newick; the answer is Yes/No and, for Yes, the taxa (by name)."""
    out = []
    for i, item in enumerate(b1):
        fasta = "\n".join(f">taxon_{n}\n{s}" for n, s in item["alignment"].items())
        prompt = ("Below are a DNA alignment (FASTA) and the tree that relates the taxa "
                  "(Newick). Did some taxa that are far apart in the tree evolve identical "
                  "sequence in the same short stretches (convergent evolution), beyond what "
                  "the tree explains?\n\n" + fasta + "\n\nTree: " + item["newick"]
                  + "\n\nReply Yes or No; if Yes, list the taxa involved as taxon_N.")
        answer = {"label": item["answer"], "taxa": [str(t) for t in item["taxa"]],
                  "names": [str(n) for n in item["alignment"]]}
        out.append({"id": f"{prefix}-rc{item['rc']}-{i}", "family": "b1", "task": "biology",
                    "rc": int(item["rc"]), "prompt": prompt, "answer": answer, "shots": 0})
    return out


def chemistry_items(items: Iterable[Mapping], *, prefix: str | None = None) -> list[dict]:
    """Items of C1 / C3 from ``chem.generate_c1`` / ``chem.generate_c3``."""
    out = []
    for i, item in enumerate(items):
        if item.get("task") == "C1":
            mols = "\n".join(item["molecules"])
            prompt = ("Do all of the following molecules (SMILES) have the same molecular "
                      f"formula?\n\n{mols}\n\nEnd your reply with <Yes> or <No>.")
            fam, task, answer = "c1", "chem_c1", item["answer"]
        elif item.get("task") == "C3":
            mols = "\n".join(item["given"])
            prompt = ("The molecules below (SMILES) are some of the acyclic, saturated "
                      "constitutional isomers of one molecular formula (no rings, no double "
                      "bonds, no charges). List every other such isomer of that formula as "
                      f"SMILES, separated by commas.\n\n{mols}")
            fam, task, answer = "c3", "chem_c3", list(item["answer"])
        else:
            raise ValueError(f"items[{i}]['task'] must be 'C1' or 'C3', got {item.get('task')!r}")
        out.append({"id": f"{prefix or fam}-{item['seed']}-{i}", "family": fam, "task": task,
                    "rc": int(item["rc"]), "prompt": prompt, "answer": answer, "shots": 0})
    return out


def _check_item(i: int, item: Any) -> None:
    if not isinstance(item, Mapping):
        raise ValueError(f"items[{i}] must be a dict, got {type(item).__name__}")
    for name in ("id", "family", "task", "rc", "prompt", "answer"):
        if name not in item:
            raise ValueError(f"items[{i}] lacks {name!r}")
    if item["family"] not in FAMILIES:
        raise ValueError(f"items[{i}]['family'] must be one of {FAMILIES}, got "
                         f"{item['family']!r}")
    if not isinstance(item["prompt"], str) or not item["prompt"]:
        raise ValueError(f"items[{i}]['prompt'] must be a non-empty str")


def _cache_key(model: str, system: str, prompt: str, params: Mapping) -> str:
    text = json.dumps([model, system, prompt, sorted(params.items())], sort_keys=True,
                      default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def _read_cache(path: str) -> dict[str, str]:
    """Replies recorded in a JSON-lines cache; a torn or foreign line is skipped."""
    out: dict[str, str] = {}
    if not os.path.exists(path):
        return out
    with open(path, encoding="utf-8") as f:
        for line in f:
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue  # e.g. the last line of a run that was killed mid-write
            if isinstance(rec, dict) and isinstance(rec.get("key"), str) \
                    and isinstance(rec.get("response"), str):
                out[rec["key"]] = rec["response"]
    return out


def evaluate(client: Any, items: Sequence[Mapping], *, official: bool = False,
             system_prompt: str = SYSTEM_PROMPT, cache: str | os.PathLike | None = None,
             on_error: str = "record", progress: bool = False, temperature: float = 0.0,
             **params) -> dict[str, Any]:
    """Ask ``client`` every item and score the replies (REL's LLM evaluation).

    Args:
      client: an object with ``chat(messages, **params) -> {"content": str, ...}`` and a
        ``model`` attribute (``jaxpapers.agents.OpenAICompatClient``: retries 429/5xx).
      items: from :func:`rc_items`, :func:`panel_items`, :func:`biology_items`,
        :func:`chemistry_items`.
      official: score with the released scorers' semantics.
      system_prompt: the system message.
      cache: a JSON-lines file of replies, appended as they arrive and read first (resume).
      on_error: ``"record"`` (a request that still fails after the client's retries is
        recorded as an error and scored wrong) or ``"raise"``.
      progress: print one line per 10% of items to stderr.
      temperature, **params: request fields (``max_tokens``, ``seed``, ...).

    Returns:
      ``{"records": [{"id", "family", "rc", "shots", "response", "correct", "parsed",
      "error"}], "accuracy": {family: {rc: acc}}, "num_items", "num_errors", "num_cached"}``.
    """
    if on_error not in ("record", "raise"):
        raise ValueError(f'on_error must be "record" or "raise", got {on_error!r}')
    if not hasattr(client, "chat"):
        raise ValueError(f"client must have a chat(messages, ...) method, got "
                         f"{type(client).__name__}")
    for i, item in enumerate(items):
        _check_item(i, item)
    params = {"temperature": temperature, **params}
    model = str(getattr(client, "model", ""))
    cached = _read_cache(os.fspath(cache)) if cache is not None else {}
    sink = open(cache, "a", encoding="utf-8") if cache is not None else None
    records, errors, reused = [], 0, 0
    try:
        for i, item in enumerate(items):
            key = _cache_key(model, system_prompt, item["prompt"], params)
            response, error = cached.get(key), None
            if response is not None:
                reused += 1
            else:
                try:
                    message = client.chat([{"role": "system", "content": system_prompt},
                                           {"role": "user", "content": item["prompt"]}],
                                          **params)
                    response = message.get("content") or ""
                except Exception as err:  # LLMError after retries, or a broken client
                    if on_error == "raise":
                        raise
                    error, response = f"{type(err).__name__}: {err}", ""
                    errors += 1
                if error is None and sink is not None:
                    sink.write(json.dumps({"key": key, "id": item["id"],
                                           "response": response}) + "\n")
                    sink.flush()
            scored = score_response(item["task"], item["answer"], response, official=official)
            records.append({"id": item["id"], "family": item["family"], "rc": int(item["rc"]),
                            "shots": int(item.get("shots", 0)), "response": response,
                            "correct": bool(scored["correct"]) and error is None,
                            "parsed": scored.get("parsed"), "error": error})
            if progress and len(items) >= 10 and (i + 1) % max(1, len(items) // 10) == 0:
                print(f"rel llm: {i + 1}/{len(items)} items", file=sys.stderr, flush=True)
    finally:
        if sink is not None:
            sink.close()
    return {"records": records, "accuracy": accuracy_by_rc(records), "num_items": len(items),
            "num_errors": errors, "num_cached": reused}


def accuracy_by_rc(records: Iterable[Mapping]) -> dict[str, dict[int, float]]:
    """Mean ``correct`` per family (suffixed ``@S`` for S in-context examples) and RC."""
    groups: dict[str, dict[int, list[bool]]] = {}
    for r in records:
        fam = r["family"] + (f"@{r['shots']}" if r.get("shots") else "")
        groups.setdefault(fam, {}).setdefault(int(r["rc"]), []).append(bool(r["correct"]))
    return {f: {rc: float(np.mean(v)) for rc, v in sorted(g.items())}
            for f, g in sorted(groups.items())}
