"""Mutators: where new kernel candidates come from (hand-written variants, templates, an LLM).

Every mutator is an immutable object with two methods::

    candidate = mutator.propose(key, parent, inspirations, prompt, feedback=None)
    mutator = mutator.update(candidate)   # records what was proposed (state is explicit)

``propose`` depends only on ``key``, its arguments and the mutator's fields, so a run is
reproducible from its key (the LLM itself excepted: it gets a ``seed`` drawn from the key, which
servers may or may not honour). :class:`ScriptedMutator` and :class:`TemplateMutator` keep what
they proposed in an immutable field that ``update`` extends; :class:`LLMMutator` has no state.
Keys are used once, to seed a NumPy generator (:func:`jaxpapers.core.rng.numpy_rng`).

:class:`LLMMutator` talks to the project's one OpenAI-compatible client
(:class:`jaxpapers.agents.OpenAICompatClient`, retries 429 / 5xx); it is built only when
``JAXPAPERS_LLM_BASE_URL`` is set (:meth:`LLMMutator.from_env`). Its requests hold the task
description, the SEEN shapes, sources and feedback, and it refuses to send any string listed in
``forbidden`` (held-out shape names; ``from_env`` adds the API key).

>>> import jax
>>> m = ScriptedMutator({"a": "A = 1", "b": "B = 2"}, order="cycle")
>>> c = m.propose(jax.random.key(0), None)
>>> m = m.update(c)
>>> c.origin, m.propose(jax.random.key(1), None).origin
('scripted:a', 'scripted:b')
"""

from __future__ import annotations

import dataclasses
import importlib.resources
import itertools
import math
import os
import re
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import jax

from jaxpapers.agents import OpenAICompatClient
from jaxpapers.core import rng as _rng
from jaxpapers.evolve.prompts import (Prompt, TaskText, apply_diff, default_prompt,
                                      parse_search_replace, render)
from jaxpapers.evolve.tune import _check_key

__all__ = ["Candidate", "Mutator", "ScriptedMutator", "TemplateMutator", "LLMMutator",
           "load_variants", "extract_code"]

_FENCE = re.compile(r"^[ \t]*```[ \t]*([A-Za-z0-9_+.-]*)[^\n]*\n(.*?)^[ \t]*```", re.M | re.S)


def _freeze(items: Any, name: str) -> tuple:
    """A mapping or (name, value) pairs as a tuple of pairs (mapping order kept)."""
    try:
        pairs = tuple((str(k), v) for k, v in dict(
            items.items() if isinstance(items, Mapping) else items).items())
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a mapping or (name, value) pairs, got "
                        f"{type(items).__name__}") from None
    return pairs


@dataclasses.dataclass(frozen=True)
class Candidate:
    """A proposed kernel (a plain frozen container).

    Attributes:
      source: the complete Python source, defining ``kernel(*inputs, interpret, platform,
        **params)`` (unchecked here: a bad source scores 0 downstream).
      params: ``(name, value)`` pairs (a mapping is accepted), e.g. a template point.
      origin: which mutator made it and how, e.g. ``"scripted:tiled"``, ``"template"``,
        ``"llm:code"``, ``"llm:unparsed (...)"``.
    """

    source: str
    params: Any = ()
    origin: str = ""

    def __post_init__(self):
        if not isinstance(self.source, str):
            raise TypeError(f"Candidate source must be a str, got {type(self.source).__name__}")
        if not isinstance(self.origin, str):
            raise TypeError(f"Candidate origin must be a str, got {type(self.origin).__name__}")
        object.__setattr__(self, "params", _freeze(self.params, "Candidate params"))


class Mutator(Protocol):
    """What the search loop calls (see the module docstring)."""

    def propose(self, key: jax.Array, parent: Candidate | None,
                inspirations: Sequence[Candidate] = (), prompt: Prompt | None = None, *,
                feedback: str | None = None) -> Candidate: ...

    def update(self, candidate: Candidate) -> Mutator: ...


@dataclasses.dataclass(frozen=True)
class ScriptedMutator:
    """Proposes hand-written variants: each one once before any repeats.

    ``order="random"``: a uniform draw (by ``key``) among the variants not yet proposed, then
    among all. ``order="cycle"``: the variants in the mapping's order, round and round (``key``
    unused). ``parent``, ``inspirations``, ``prompt`` and ``feedback`` are ignored.

    Args:
      variants: name -> source (e.g. from :func:`load_variants`); at least one.
      order: ``"random"`` or ``"cycle"``.
      proposed: names already proposed, in order (the state; :meth:`update` appends).
    """

    variants: Any
    order: str = "random"
    proposed: tuple = ()

    def __post_init__(self):
        variants = _freeze(self.variants, "variants")
        if not variants or not all(isinstance(s, str) for _, s in variants):
            raise ValueError("variants must map at least one name to a source str")
        if self.order not in ("random", "cycle"):
            raise ValueError(f'order must be "random" or "cycle", got {self.order!r}')
        names = {n for n, _ in variants}
        bad = [n for n in self.proposed if n not in names]
        if bad:
            raise ValueError(f"proposed names {bad} are not variants")
        object.__setattr__(self, "variants", variants)
        object.__setattr__(self, "proposed", tuple(self.proposed))

    def propose(self, key: jax.Array, parent: Candidate | None = None,
                inspirations: Sequence[Candidate] = (), prompt: Prompt | None = None, *,
                feedback: str | None = None) -> Candidate:
        """The next variant as a :class:`Candidate` with origin ``"scripted:<name>"``."""
        _check_key(key)
        names = [n for n, _ in self.variants]
        if self.order == "cycle":
            name = names[len(self.proposed) % len(names)]
        else:
            done = set(self.proposed)
            pool = [n for n in names if n not in done] or names
            name = pool[int(_rng.numpy_rng(key).integers(len(pool)))]
        return Candidate(dict(self.variants)[name], (), f"scripted:{name}")

    def update(self, candidate: Candidate) -> ScriptedMutator:
        """Records a candidate this mutator proposed; others leave it unchanged."""
        name = candidate.origin.removeprefix("scripted:")
        if not candidate.origin.startswith("scripted:") or name not in dict(self.variants):
            return self
        return dataclasses.replace(self, proposed=self.proposed + (name,))


def load_variants(task: str, *, package: str = "jaxpapers.evolve.variants") -> dict[str, str]:
    """The hand-written variants of ``task``: ``<package>/<task>/<name>.pysrc`` (or ``.py``).

    Read with ``importlib.resources``. Files whose name starts with ``_`` (``__init__.py``,
    helpers) and other suffixes (``MANIFEST.toml``) are skipped; names are sorted. (The
    ``.pysrc`` suffix keeps deliberately broken variants away from importers and linters.)

    Raises:
      ValueError: no such package or task folder, or no variant in it (the task is named).
    """
    if not isinstance(task, str) or not re.fullmatch(r"[A-Za-z0-9_.-]+", task) or ".." in task:
        raise ValueError(f"task must be a folder name, got {task!r}")
    try:
        folder = importlib.resources.files(package) / task
    except ModuleNotFoundError:
        raise ValueError(f"no variants for task {task!r}: package {package!r} not found") from None
    if not folder.is_dir():
        raise ValueError(f"no variants for task {task!r}: {package}/{task} is not a folder")
    out = {}
    for f in folder.iterdir():
        stem, dot, suffix = f.name.rpartition(".")
        if dot and suffix in ("py", "pysrc") and not f.name.startswith("_") and f.is_file():
            if stem in out:
                raise ValueError(f"task {task!r}: variant {stem!r} exists as .py and .pysrc")
            out[stem] = f.read_text(encoding="utf-8")
    if not out:
        raise ValueError(f"no variants for task {task!r}: {package}/{task} has no .pysrc file")
    return dict(sorted(out.items()))


@dataclasses.dataclass(frozen=True)
class TemplateMutator:
    """Fills the ``{name}`` placeholders of a template source with a point of a grid.

    A point takes one value per axis of ``space`` (written with ``str(value)``); other braces
    in the source are left alone. Points not yet proposed come first (uniform by ``key``), then
    any point. Finding an unseen point walks the grid: O(grid size).

    Args:
      template: the source with placeholders; every name of ``space`` must appear.
      space: name -> candidate values (non-empty, distinct).
      seen: index tuples of points already proposed (the state; :meth:`update` adds).
    """

    template: str
    space: Any
    seen: frozenset = frozenset()

    def __post_init__(self):
        if not isinstance(self.template, str):
            raise TypeError(f"template must be a str, got {type(self.template).__name__}")
        space = tuple((n, tuple(v)) for n, v in _freeze(self.space, "space"))
        if not space:
            raise ValueError("space must have at least one axis")
        for n, values in space:
            if not values or len(values) != len(set(map(repr, values))):
                raise ValueError(f"space[{n!r}] must hold distinct values, got {values!r}")
            if "{" + n + "}" not in self.template:
                raise ValueError(f"template has no placeholder {{{n}}} for space[{n!r}]")
        object.__setattr__(self, "space", space)
        object.__setattr__(self, "seen", frozenset(self.seen))

    @property
    def size(self) -> int:
        """The number of grid points."""
        return math.prod(len(v) for _, v in self.space)

    def fill(self, point: Mapping[str, Any]) -> str:
        """The template with each ``{name}`` replaced by ``str(point[name])``."""
        names = [n for n, _ in self.space]
        pattern = re.compile(r"\{(" + "|".join(map(re.escape, names)) + r")\}")
        return pattern.sub(lambda m: str(point[m.group(1)]), self.template)

    def propose(self, key: jax.Array, parent: Candidate | None = None,
                inspirations: Sequence[Candidate] = (), prompt: Prompt | None = None, *,
                feedback: str | None = None) -> Candidate:
        """A candidate for an unseen point (any point once all were seen); origin
        ``"template"``, params = the point."""
        _check_key(key)
        gen = _rng.numpy_rng(key)
        lens = [len(v) for _, v in self.space]
        unseen = self.size - len(self.seen)
        if unseen > 0:
            r = int(gen.integers(unseen))
            idx = next(itertools.islice((p for p in itertools.product(*map(range, lens))
                                         if p not in self.seen), r, None))
        else:
            idx = tuple(int(gen.integers(n)) for n in lens)
        point = {n: v[i] for (n, v), i in zip(self.space, idx)}
        return Candidate(self.fill(point), point, "template")

    def update(self, candidate: Candidate) -> TemplateMutator:
        """Records the point of a candidate from this template; others leave it unchanged."""
        params = dict(candidate.params)
        if candidate.origin != "template" or set(params) != {n for n, _ in self.space}:
            return self
        try:
            idx = tuple(list(map(repr, v)).index(repr(params[n])) for n, v in self.space)
        except ValueError:
            return self
        return dataclasses.replace(self, seen=self.seen | {idx})


def extract_code(text: str) -> str | None:
    """The last fenced ```python (or ```py) block of ``text``, else the last untagged fenced
    block; blocks holding SEARCH/REPLACE markers are skipped. None when there is none."""
    blocks = [(m.group(1).lower(), m.group(2)) for m in _FENCE.finditer(text)
              if "<<<<<<< SEARCH" not in m.group(2)]
    for tags in (("python", "py", "python3"), ("",)):
        found = [body for tag, body in blocks if tag in tags]
        if found:
            return found[-1]
    return None


@dataclasses.dataclass(frozen=True)
class LLMMutator:
    """Asks a chat model for a new kernel (KernelFoundry's main mutation).

    ``propose`` renders the prompt (:func:`jaxpapers.evolve.prompts.render`; ``prompt=None``:
    the default prompt), calls ``client.chat`` once, and reads the reply: the last fenced python
    block (:func:`extract_code`) -> origin ``"llm:code"``; else SEARCH/REPLACE blocks applied to
    the parent source (regions ignored) -> ``"llm:diff"``; else the raw reply as the source
    (it scores 0 downstream) with origin ``"llm:unparsed (<why>)"``.

    Args:
      client: an ``OpenAICompatClient`` or any object with its ``chat(messages, **params)``.
      task_description: what the kernel computes.
      seen_shapes_text: the shapes used for fitness, as text. Never the held-out shapes.
      model: sent as the request's ``model`` when given (else the client's).
      temperature: the sampling temperature sent with each request.
      forbidden: strings that must never be sent (held-out shape names, secrets); a request
        containing one raises ValueError before anything is sent.
      send_seed: send ``seed`` drawn from the key (servers that support it become repeatable).
      params: further request fields (``max_tokens``, ...), a mapping or pairs.

    Raises (propose):
      LLMError: the endpoint still failing after the client's retries.
    """

    client: Any
    _: dataclasses.KW_ONLY
    task_description: str
    seen_shapes_text: str = ""
    model: str | None = None
    temperature: float = 0.7
    forbidden: tuple = ()
    send_seed: bool = True
    params: Any = ()

    def __post_init__(self):
        if not callable(getattr(self.client, "chat", None)):
            raise ValueError("client must have a chat(messages, **params) method, got "
                             f"{type(self.client).__name__}")
        for name in ("task_description", "seen_shapes_text"):
            if not isinstance(getattr(self, name), str):
                raise TypeError(f"{name} must be a str, got {type(getattr(self, name)).__name__}")
        if not self.task_description.strip():
            raise ValueError("task_description must be non-empty")
        forbidden = (self.forbidden,) if isinstance(self.forbidden, str) else self.forbidden
        if not all(isinstance(s, str) and s for s in forbidden):
            raise ValueError("forbidden must be a sequence of non-empty strs")
        object.__setattr__(self, "forbidden", tuple(forbidden))
        object.__setattr__(self, "params", _freeze(self.params, "params"))

    def __repr__(self) -> str:  # never shows the forbidden strings (they may hold a key)
        return (f"LLMMutator(client={self.client!r}, model={self.model!r}, "
                f"temperature={self.temperature!r}, forbidden=<{len(self.forbidden)} strs>)")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, *, task_description: str,
                 seen_shapes_text: str = "", client_kwargs: Mapping | None = None,
                 **kwargs) -> LLMMutator | None:
        """An :class:`LLMMutator` over ``OpenAICompatClient.from_env(environ)``, or None when
        ``JAXPAPERS_LLM_BASE_URL`` is unset (the default: no LLM). The API key, when set, is
        added to ``forbidden``; ``kwargs`` go to the constructor."""
        environ = os.environ if environ is None else environ
        client = OpenAICompatClient.from_env(environ, **dict(client_kwargs or {}))
        if client is None:
            return None
        forbidden = tuple(kwargs.pop("forbidden", ()))
        api_key = (environ.get("JAXPAPERS_LLM_API_KEY") or "").strip()
        if api_key:
            forbidden += (api_key,)
        return cls(client, task_description=task_description, seen_shapes_text=seen_shapes_text,
                   forbidden=forbidden, **kwargs)

    def messages(self, parent: Candidate | None, inspirations: Sequence[Candidate] = (),
                 prompt: Prompt | None = None, *, feedback: str | None = None) -> list[dict]:
        """The chat messages :meth:`propose` sends (checked against ``forbidden``)."""
        prompt = default_prompt(self.task_description) if prompt is None else prompt
        messages = render(prompt, task=TaskText(self.task_description, self.seen_shapes_text),
                          parent_source=None if parent is None else parent.source,
                          inspirations=[c.source for c in inspirations], feedback=feedback)
        text = "\n".join(m["content"] for m in messages)
        for i, s in enumerate(self.forbidden):
            if s in text:
                raise ValueError(f"the request would contain forbidden[{i}] (a held-out shape "
                                 "or a secret); it was not sent")
        return messages

    def propose(self, key: jax.Array, parent: Candidate | None = None,
                inspirations: Sequence[Candidate] = (), prompt: Prompt | None = None, *,
                feedback: str | None = None) -> Candidate:
        """One chat request and its parsed reply (see the class docstring)."""
        _check_key(key)
        messages = self.messages(parent, inspirations, prompt, feedback=feedback)
        request = dict(self.params)
        request["temperature"] = self.temperature
        if self.model is not None:
            request["model"] = self.model
        if self.send_seed:
            request["seed"] = _rng.numpy_seed(key)
        reply = self.client.chat(messages, **request).get("content") or ""
        code = extract_code(reply)
        if code is not None:
            return Candidate(code, (), "llm:code")
        try:
            edits = parse_search_replace(reply)
            if not edits:
                raise ValueError("no code block and no SEARCH/REPLACE block")
            if parent is None:
                raise ValueError("a diff but no parent source")
            return Candidate(apply_diff(parent.source, edits), (), "llm:diff")
        except ValueError as err:
            return Candidate(reply, (), f"llm:unparsed ({err})")

    def update(self, candidate: Candidate) -> LLMMutator:
        """No state: returns ``self``."""
        return self
