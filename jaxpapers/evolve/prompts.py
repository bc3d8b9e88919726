"""KernelFoundry's evolving prompts: four editable regions, SEARCH/REPLACE edits, a prompt database.

A :class:`Prompt` holds four texts (``REGIONS``) that steer the kernel-writing LLM; :func:`render`
builds the chat messages for one kernel proposal. A meta-LLM rewrites prompts with blocks of
lines: ``<<<<<<< SEARCH [common_pitfalls]``, the exact text of the region, ``=======``, its
replacement, ``>>>>>>> REPLACE`` (:func:`parse_search_replace`, :func:`apply_search_replace`;
:func:`meta_messages` asks for them).
:class:`PromptDatabase` follows the official rules: a prompt's fitness is the best score of a
child kernel written with it (0 before any); every ``interval`` = 2 recorded children a meta step
is due, which draws ``batch`` = 2 parents among prompts with >= ``min_samples`` = 5 children; a
draw is uniform with probability ``exploration`` = 0.2, else a softmax of fitness at
``temperature`` 1; at most ``capacity`` = 50 prompts (adding to a full database evicts the one with
the lowest fitness, the oldest among ties). The official sampler also adds a usage penalty and a
bonus for little-used prompts; we leave both out (plain softmax of fitness).

Host-side Python (strings), not traced. A key is used once per draw, to seed a NumPy generator
(:func:`jaxpapers.core.rng.numpy_rng`): same key, same database, same draw. The starter texts are
ours, written for Pallas; the official release's are for SYCL / CUDA / Triton.

>>> p = default_prompt("y = relu(x @ w)")
>>> edits = parse_search_replace(
...     "<<<<<<< SEARCH [common_pitfalls]\\nfloat32\\n=======\\nfp32\\n>>>>>>> REPLACE")
>>> child = apply_search_replace(p, edits)
>>> "fp32" in child.region("common_pitfalls"), child.parent_id == p.id
(True, True)
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import numpy as np

from jaxpapers.core import rng as _rng
from jaxpapers.evolve.tune import _check_key  # one key check for the package

__all__ = ["REGIONS", "Prompt", "TaskText", "PromptDatabase", "default_prompt", "render",
           "parse_search_replace", "apply_search_replace", "apply_diff", "prompt_database",
           "record", "select", "due", "add", "meta_step", "probabilities", "meta_messages"]

REGIONS = ("optimization_philosophy", "optimization_strategies", "common_pitfalls",
           "analysis_guidance")
KERNEL_SIGNATURE = "kernel(*inputs, interpret, platform, **params)"

_START = re.compile(r"^\s*<{7} SEARCH(?:\s*\[\s*([^\]]*?)\s*\])?\s*$")
_MIDDLE = "======="
_END = re.compile(r"^\s*>{7} REPLACE\s*$")


def _content_id(regions: tuple) -> str:
    """A short id from the regions' text (equal texts, equal ids)."""
    return "p-" + hashlib.sha256(json.dumps(regions).encode()).hexdigest()[:12]


@dataclasses.dataclass(frozen=True)
class Prompt:
    """One evolvable prompt (a plain frozen container, not a pytree).

    Attributes:
      regions: ``(name, text)`` pairs, one per name of ``REGIONS`` in that order (a mapping is
        accepted and frozen to this tuple).
      id: the prompt's id (by default, :func:`default_prompt` and :func:`apply_search_replace`
        derive it from the texts).
      parent_id: the id of the prompt this one was edited from; None for a seed.
    """

    regions: Any
    id: str
    parent_id: str | None = None

    def __post_init__(self):
        items = self.regions.items() if isinstance(self.regions, Mapping) else self.regions
        try:
            items = dict(items)
        except (TypeError, ValueError):
            raise ValueError("Prompt regions must be a mapping or (name, text) pairs, got "
                             f"{type(self.regions).__name__}") from None
        if set(items) != set(REGIONS) or len(items) != len(REGIONS):
            raise ValueError(f"Prompt regions must name exactly {REGIONS}, got {tuple(items)}")
        for name, text in items.items():
            if not isinstance(text, str):
                raise TypeError(f"Prompt regions[{name!r}] must be a str, got "
                                f"{type(text).__name__}")
        if not isinstance(self.id, str) or not self.id:
            raise ValueError(f"Prompt id must be a non-empty str, got {self.id!r}")
        object.__setattr__(self, "regions", tuple((n, items[n]) for n in REGIONS))

    def region(self, name: str) -> str:
        """The text of region ``name``; ValueError for a name outside ``REGIONS``."""
        for n, text in self.regions:
            if n == name:
                return text
        raise ValueError(f"region must be one of {REGIONS}, got {name!r}")


@dataclasses.dataclass(frozen=True)
class TaskText:
    """What an LLM may see of a task: its description and the SEEN shapes (never held-out ones).

    Attributes:
      description: what the kernel computes, its inputs and output.
      seen_shapes: the shapes used for fitness, as text ("" when not shown).
    """

    description: str
    seen_shapes: str = ""


_STARTERS = {
    "optimization_philosophy": (
        "Write a JAX Pallas kernel for this task: {task}\n"
        "1. Correct first: match the reference on every shape, edge blocks included.\n"
        "2. Move fewer bytes: most kernels here are bandwidth-bound, so read each input once and "
        "keep reused tiles on chip.\n"
        "3. Stay simple: a clear grid with BlockSpecs that the compiler can pipeline beats "
        "clever index arithmetic."),
    "optimization_strategies": (
        "- Tile with BlockSpecs so that each program owns one output block.\n"
        "- Fuse the element-wise work around a dot into the same pallas_call.\n"
        "- Accumulate reductions in float32 across a K loop (fori_loop, or a trailing grid axis "
        "with a scratch accumulator).\n"
        "- Use a multi-axis grid for parallelism; split long reductions and combine partials.\n"
        "- Expose block sizes and warp / stage counts as keyword params with defaults."),
    "common_pitfalls": (
        "1. Blocks that do not divide the array: mask or pad the edge blocks.\n"
        "2. Summing in bfloat16 drifts: accumulate in float32 and cast once.\n"
        "3. The kernel must also run with interpret=True (CPU tests).\n"
        "4. A scratch accumulator must be initialised at the first step of its grid axis.\n"
        "5. Tiny blocks give so many programs that per-step overhead dominates."),
    "analysis_guidance": (
        "Before the code, state briefly: what is read, written and reused; bytes and flops per "
        "call; whether it is memory- or compute-bound; the grid, each operand's block shape and "
        "the loop order. Then give the code."),
}


def default_prompt(task_description: str) -> Prompt:
    """The seed prompt: our short Pallas-oriented texts, with the first line of
    ``task_description`` named in the philosophy; a content-derived id and no parent."""
    if not isinstance(task_description, str) or not task_description.strip():
        raise ValueError(f"task_description must be a non-empty str, got {task_description!r}")
    first = task_description.strip().splitlines()[0]
    regions = tuple((n, _STARTERS[n].replace("{task}", first)) for n in REGIONS)
    return Prompt(regions, _content_id(regions))


def _fenced(source: str) -> str:
    return "```python\n" + source.rstrip("\n") + "\n```"


def render(prompt: Prompt, *, task: TaskText | str, parent_source: str | None,
           inspirations: Sequence[str] = (), feedback: str | None = None) -> list[dict]:
    """The chat messages asking for one new kernel: system (role, philosophy region), then user
    (task, SEEN shapes, parent and its feedback, inspirations, the other three regions, and a
    request for the whole new source in one python block defining ``KERNEL_SIGNATURE``).

    Args:
      prompt: the prompt whose regions are used.
      task: a :class:`TaskText` (or just the description). Pass seen shapes only.
      parent_source: the kernel to improve (None: write the first version).
      inspirations: sources of other kernels to learn from.
      feedback: the parent's evaluation, as text (None: not shown).

    Returns:
      ``[{"role": "system", "content": ...}, {"role": "user", "content": ...}]``.
    """
    if not isinstance(prompt, Prompt):
        raise TypeError(f"prompt must be a Prompt, got {type(prompt).__name__}")
    task = TaskText(task) if isinstance(task, str) else task
    if not isinstance(task, TaskText):
        raise TypeError(f"task must be a TaskText or str, got {type(task).__name__}")
    if isinstance(inspirations, str) or not all(isinstance(s, str) for s in inspirations):
        raise TypeError("inspirations must be a sequence of source strs")
    if parent_source is not None and not isinstance(parent_source, str):
        raise TypeError(f"parent_source must be a str or None, got {type(parent_source).__name__}")
    system = ("You are an expert in JAX and Pallas who writes fast, correct GPU and TPU kernels."
              "\n\n" + prompt.region("optimization_philosophy"))
    parts = ["## Task\n" + task.description.strip()]
    if task.seen_shapes.strip():
        parts.append("## Shapes the kernel is measured on\n" + task.seen_shapes.strip())
    if parent_source is None:
        parts.append("## Current kernel\nNone yet: write the first version.")
    else:
        parts.append("## Current kernel\n" + _fenced(parent_source))
        if feedback:
            parts.append("### Its evaluation\n" + feedback.strip())
    for i, source in enumerate(inspirations):
        parts.append(f"## Inspiration {i + 1} (another kernel for this task)\n" + _fenced(source))
    parts += ["## Optimization strategies\n" + prompt.region("optimization_strategies"),
              "## Common pitfalls\n" + prompt.region("common_pitfalls"),
              "## Analysis\n" + prompt.region("analysis_guidance"),
              "## Answer format\nReply with the complete new source file in one ```python block. "
              f"It must define `{KERNEL_SIGNATURE}`: `inputs` are the task's arrays in order, "
              "`interpret=True` runs the Pallas interpreter on CPU, `platform` names the backend "
              "to lower for ('cuda', 'tpu' or 'cpu'; may be None), and the keywords are the "
              "task's static sizes, if any, and tuning parameters with defaults."]
    return [{"role": "system", "content": system}, {"role": "user", "content": "\n\n".join(parts)}]


def parse_search_replace(text: str) -> list[tuple[str | None, str, str]]:
    """The SEARCH/REPLACE blocks of a reply, in order.

    A block is a line ``<<<<<<< SEARCH`` (optionally followed by ``[region]``), the search lines,
    a line ``=======``, the replacement lines and a line ``>>>>>>> REPLACE``. Lines outside
    blocks (prose, code fences) are ignored; inner lines are kept verbatim.

    Args:
      text: the reply.

    Returns:
      ``[(region or None, search, replace), ...]`` (empty when the text has no block).

    Raises:
      ValueError: a block without ``=======`` or ``>>>>>>> REPLACE``, or an empty search text.
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    blocks, state, region, search, replace = [], None, None, [], []
    for line in text.splitlines():
        start = _START.match(line)
        if state is None:
            if start:
                state, region, search, replace = "search", start.group(1) or None, [], []
        elif state == "search":
            if line.strip() == _MIDDLE:
                state = "replace"
            elif start or _END.match(line):
                raise ValueError(f"SEARCH block {len(blocks) + 1} has no '=======' line")
            else:
                search.append(line)
        else:
            if _END.match(line):
                if not "".join(search).strip():
                    raise ValueError(f"SEARCH block {len(blocks) + 1} has an empty search text")
                blocks.append((region, "\n".join(search), "\n".join(replace)))
                state = None
            elif start:
                raise ValueError(f"SEARCH block {len(blocks) + 1} has no '>>>>>>> REPLACE' line")
            else:
                replace.append(line)
    if state is not None:
        missing = "'======='" if state == "search" else "'>>>>>>> REPLACE'"
        raise ValueError(f"SEARCH block {len(blocks) + 1} has no {missing} line")
    return blocks


def _check_edits(edits: Any) -> list:
    if isinstance(edits, str) or not isinstance(edits, Sequence) or not all(
            isinstance(e, tuple) and len(e) == 3 and all(isinstance(t, str) for t in e[1:])
            for e in edits):
        raise TypeError(f"edits must be (region, search, replace) triples, got {edits!r:.80}")
    return list(edits)


def apply_diff(source: str, edits: Sequence[tuple]) -> str:
    """``source`` after SEARCH/REPLACE edits, in order, each replacing the first exact
    occurrence of its search text (region labels ignored). A search text that is not there:
    ValueError naming the edit."""
    for i, (_, search, replace) in enumerate(_check_edits(edits)):
        if search not in source:
            raise ValueError(f"edit {i + 1}: SEARCH text not found in the source: "
                             f"{search[:80]!r}")
        source = source.replace(search, replace, 1)
    return source


def apply_search_replace(prompt: Prompt, edits: Sequence[tuple], *,
                         id: str | None = None) -> Prompt:
    """The child prompt (``parent_id = prompt.id``; ``id`` default: from its texts) after
    ``edits`` (``(region or None, search, replace)`` from :func:`parse_search_replace`).

    Edits apply in order, each to the first exact occurrence of its search text in its region;
    an edit without a region applies to the first region (``REGIONS`` order) holding the text
    (the official rule). An unknown region or a search text not found in its region raises
    ValueError naming both.
    """
    texts = dict(prompt.regions)
    for i, (region, search, replace) in enumerate(_check_edits(edits)):
        if region is None:
            region = next((n for n in REGIONS if search in texts[n]), None)
            if region is None:
                raise ValueError(f"edit {i + 1}: SEARCH text not found in any region: "
                                 f"{search[:80]!r}")
        elif region not in texts:
            raise ValueError(f"edit {i + 1}: unknown region {region!r}; expected one of "
                             f"{REGIONS}")
        if search not in texts[region]:
            raise ValueError(f"edit {i + 1}: SEARCH text not found in region {region!r}: "
                             f"{search[:80]!r}")
        texts[region] = texts[region].replace(search, replace, 1)
    regions = tuple((n, texts[n]) for n in REGIONS)
    return Prompt(regions, _content_id(regions) if id is None else id, parent_id=prompt.id)


# ------------------------------------------------------------------------------- the database


@dataclasses.dataclass(frozen=True)
class PromptDatabase:
    """The prompts under meta-evolution and their statistics (a plain frozen container).

    Build one with :func:`prompt_database`; update it with :func:`record`, :func:`add` and
    :func:`meta_step`, which return new databases. P below is the number of prompts.

    Attributes:
      prompts: the prompts, oldest first. [P]
      fitness: per prompt, the best child score recorded (0.0 before any, never below 0). [P]
      samples: per prompt, how many child scores were recorded. [P]
      since_meta: child scores recorded since the last meta step.
      interval, batch, min_samples, exploration, temperature, capacity: the rules (module doc).
    """

    prompts: tuple
    fitness: tuple
    samples: tuple
    since_meta: int = 0
    interval: int = 2
    batch: int = 2
    min_samples: int = 5
    exploration: float = 0.2
    temperature: float = 1.0
    capacity: int = 50

    def index(self, prompt_id: str) -> int:
        """The position of the prompt with id ``prompt_id``; ValueError naming it if absent."""
        for i, p in enumerate(self.prompts):
            if p.id == prompt_id:
                return i
        raise ValueError(f"prompt_id {prompt_id!r} is not in the database")


def _int_at_least(name: str, value: Any, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
        raise ValueError(f"{name} must be an int >= {low}, got {value!r}")
    return int(value)


def prompt_database(seed: Prompt, *, interval: int = 2, batch: int = 2, min_samples: int = 5,
                    exploration: float = 0.2, temperature: float = 1.0,
                    capacity: int = 50) -> PromptDatabase:
    """A database holding ``seed`` (fitness 0, no samples) with the given rules.

    >>> db = prompt_database(default_prompt("y = x + 1"))
    >>> db = record(db, db.prompts[0].id, 3.5)
    >>> db.fitness, db.samples, due(db)
    ((3.5,), (1,), False)
    """
    if not isinstance(seed, Prompt):
        raise TypeError(f"seed must be a Prompt, got {type(seed).__name__}")
    if not (isinstance(exploration, (int, float)) and 0.0 <= exploration <= 1.0):
        raise ValueError(f"exploration must be in [0, 1], got {exploration!r}")
    if not (isinstance(temperature, (int, float)) and temperature > 0):
        raise ValueError(f"temperature must be > 0, got {temperature!r}")
    return PromptDatabase((seed,), (0.0,), (0,), 0, _int_at_least("interval", interval, 1),
                          _int_at_least("batch", batch, 1),
                          _int_at_least("min_samples", min_samples, 0), float(exploration),
                          float(temperature), _int_at_least("capacity", capacity, 1))


def _check_db(db: Any) -> None:
    if not isinstance(db, PromptDatabase):
        raise TypeError(f"db must be a PromptDatabase, got {type(db).__name__}")


def record(db: PromptDatabase, prompt_id: str, child_score: float) -> PromptDatabase:
    """Records one child written with prompt ``prompt_id``: fitness = max(fitness, score),
    its sample count and ``since_meta`` grow by one."""
    _check_db(db)
    if isinstance(child_score, bool) or not isinstance(child_score, (int, float, np.number)) \
            or not math.isfinite(child_score):
        raise ValueError(f"child_score must be a finite number, got {child_score!r}")
    i = db.index(prompt_id)
    fitness = list(db.fitness)
    fitness[i] = max(fitness[i], float(child_score))
    samples = list(db.samples)
    samples[i] += 1
    return dataclasses.replace(db, fitness=tuple(fitness), samples=tuple(samples),
                               since_meta=db.since_meta + 1)


def due(db: PromptDatabase) -> bool:
    """Whether a meta step is due: ``since_meta >= interval`` child scores since the last."""
    _check_db(db)
    return db.since_meta >= db.interval


def _softmax(fitness: np.ndarray, temperature: float) -> np.ndarray:
    z = np.asarray(fitness, np.float64) / temperature
    e = np.exp(z - z.max())
    return e / e.sum()


def probabilities(db: PromptDatabase) -> np.ndarray:
    """The chance :func:`select` draws each prompt: ``exploration / P + (1 - exploration) *
    softmax(fitness / temperature)``. float64 [P]."""
    _check_db(db)
    n = len(db.prompts)
    return db.exploration / n + (1.0 - db.exploration) * _softmax(db.fitness, db.temperature)


def _draw(gen: np.random.Generator, fitness: Sequence[float], exploration: float,
          temperature: float) -> int:
    """One index: uniform with probability ``exploration``, else by softmax of fitness."""
    n = len(fitness)
    if gen.random() < exploration:
        return int(gen.integers(n))
    return int(gen.choice(n, p=_softmax(fitness, temperature)))


def select(db: PromptDatabase, key: jax.Array) -> Prompt:
    """The prompt for the next child (distribution: :func:`probabilities`); ``key`` used once."""
    _check_db(db)
    _check_key(key)
    gen = _rng.numpy_rng(key)
    return db.prompts[_draw(gen, db.fitness, db.exploration, db.temperature)]


def meta_step(db: PromptDatabase, key: jax.Array) -> tuple[tuple[Prompt, ...], PromptDatabase]:
    """Starts a meta step: draws the parents to edit and resets ``since_meta`` to 0.

    ``batch`` independent draws (with replacement, as the official loop) among the prompts with
    at least ``min_samples`` recorded children, each uniform with probability ``exploration``,
    else by softmax of fitness. No eligible prompt: no parents (the counter is reset anyway).

    Returns:
      ``(parents, db)``; edit each parent (:func:`meta_messages`, :func:`parse_search_replace`,
      :func:`apply_search_replace`) and :func:`add` the children.
    """
    _check_db(db)
    _check_key(key)
    eligible = [i for i, s in enumerate(db.samples) if s >= db.min_samples]
    parents = ()
    if eligible:
        gen = _rng.numpy_rng(key)
        fit = [db.fitness[i] for i in eligible]
        parents = tuple(db.prompts[eligible[_draw(gen, fit, db.exploration, db.temperature)]]
                        for _ in range(db.batch))
    return parents, dataclasses.replace(db, since_meta=0)


def add(db: PromptDatabase, prompt: Prompt) -> PromptDatabase:
    """Adds ``prompt`` with fitness 0 and no samples.

    A prompt whose id or texts are already present is not added (the database is returned
    unchanged). When the database holds ``capacity`` prompts, the one with the lowest fitness
    (the oldest among ties) is evicted first; the new prompt always enters.
    """
    _check_db(db)
    if not isinstance(prompt, Prompt):
        raise TypeError(f"prompt must be a Prompt, got {type(prompt).__name__}")
    if any(p.id == prompt.id or p.regions == prompt.regions for p in db.prompts):
        return db
    prompts, fitness, samples = list(db.prompts), list(db.fitness), list(db.samples)
    if len(prompts) >= db.capacity:
        worst = int(np.argmin(fitness))  # first minimum = oldest among ties
        del prompts[worst], fitness[worst], samples[worst]
    return dataclasses.replace(db, prompts=tuple(prompts) + (prompt,),
                               fitness=tuple(fitness) + (0.0,), samples=tuple(samples) + (0,))


_META_SYSTEM = (
    "You improve the instructions given to an LLM that writes JAX Pallas kernels. The "
    "instructions have four regions: optimization_philosophy (mindset and priorities), "
    "optimization_strategies (concrete techniques), common_pitfalls (mistakes to avoid) and "
    "analysis_guidance (what to work out before coding).\n\n"
    "Reply with one or more edit blocks, each exactly:\n"
    "<<<<<<< SEARCH [region_name]\n"
    "text copied verbatim from that region\n"
    "=======\n"
    "the new text\n"
    ">>>>>>> REPLACE\n\n"
    "region_name is one of the four names above. The SEARCH text must be an exact substring of "
    "that region (to rewrite a region, copy all of it). Keep advice specific and actionable: "
    "tie each change to a failure or slowness seen in the results.")


def meta_messages(prompt: Prompt, history: Sequence[tuple[float, str]]) -> list[dict]:
    """The chat messages asking a meta-LLM for SEARCH/REPLACE edits of ``prompt``.

    Args:
      prompt: the parent prompt; its four regions are shown as ``[name]`` sections.
      history: ``(score, text)`` per child written with it (text: its source or evaluation
        note, with seen shapes only). The scores are listed (the last 20) and the best child's
        text is shown (cut to 4000 characters).

    Returns:
      ``[{"role": "system", ...}, {"role": "user", ...}]``.
    """
    if not isinstance(prompt, Prompt):
        raise TypeError(f"prompt must be a Prompt, got {type(prompt).__name__}")
    history = list(history)
    for i, h in enumerate(history):
        if not (isinstance(h, tuple) and len(h) == 2 and isinstance(h[1], str)
                and isinstance(h[0], (int, float, np.number))):
            raise TypeError(f"history[{i}] must be (score, text), got {h!r}")
    sections = "\n\n".join(f"[{n}]\n{t}" for n, t in prompt.regions)
    parts = ["## Current instructions\n" + sections]
    if history:
        scores = ", ".join(f"{float(s):.3g}" for s, _ in history[-20:])
        best_score, best_text = max(history, key=lambda h: h[0])
        parts += [f"## Results\n{len(history)} kernels were written with these instructions. "
                  f"Scores (0 syntax error, 1 no compile, 2 runtime error, 3 wrong shape, "
                  f"4 wrong values, 5 correct, plus the speedup), last {min(len(history), 20)}: "
                  f"{scores}.",
                  f"## Best kernel (score {float(best_score):.3g})\n{best_text[:4000]}"]
    else:
        parts.append("## Results\nNo kernels were written with these instructions yet.")
    parts.append("Propose 1 to 3 edits that would make the next kernels more correct or faster.")
    return [{"role": "system", "content": _META_SYSTEM},
            {"role": "user", "content": "\n\n".join(parts)}]
