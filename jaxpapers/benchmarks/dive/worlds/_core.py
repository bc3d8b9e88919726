"""Typed tool worlds: the registry every DIVE domain module fills.

DIVE's tools are live web APIs (Tushare, RxNav, OpenAlex, NCBI ...) and Biopython functions; its
tasks are synthesised by LLMs calling them. Offline, each domain is a *world* built from
``(domain, world_seed)`` (a gene catalogue, a market with seeded prices, a citation graph, a drug
formulary, units and calendars) and its tools are pure, typed functions of ``(world, args)``.

* :class:`ToolSpec`: name (``"<domain>.<verb>_<object>"``), domain, description, JSON-schema
  ``parameters`` and ``returns`` whose properties carry a semantic type under ``"x-type"``
  (``"gene"``, ``"dna"``, ``"ticker"``, ``"date"``, ``"number"``, ...; arrays carry the element's
  type), ``kind`` ``"R"`` (retrieval: reads the world) or ``"P"`` (processing: a function of its
  arguments only), ``group`` (a family of related tools), and the ``verb`` / ``obj`` words the
  question writer paraphrases and held-out splits recombine.
* :func:`tool`: the decorator a domain module registers each tool with.
* :class:`World`: ``domain``, ``seed``, ``data`` (the domain's tables, plain JSON-able values) and
  ``lexicon`` (semantic type -> the values of that type that exist in the world: what a solver
  may name, and where an explorer draws seed arguments).
* :func:`call_tool`: validates the arguments against the spec (JSON types), runs the tool and
  returns ``(ok, value_or_error)``; a tool signals a bad argument (an unknown gene, an empty
  series) with :class:`ToolError`. Outputs are JSON values with floats rounded to
  ``FLOAT_DIGITS`` digits, so they compare and serialise identically everywhere.

Determinism: a world's RNG is ``random.Random`` seeded from ``zlib.crc32`` of the domain and the
seed (never ``hash()``); tools iterate in sorted order.
"""

from __future__ import annotations

import dataclasses
import json
import math
import random
import zlib
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["FLOAT_DIGITS", "DOMAINS", "ToolSpec", "Tool", "World", "ToolError", "tool", "arg",
           "registry", "domain_tools", "world_rng", "call_tool", "canonical", "register_world",
           "make_world", "dumps"]

FLOAT_DIGITS = 6
DOMAINS = ("bio", "finance", "academic", "medical", "general")
_JSON_TYPES = ("string", "integer", "number", "boolean", "array", "object")


class ToolError(ValueError):
    """A tool was called with an argument that names nothing in its world, or is out of range."""


@dataclasses.dataclass(frozen=True)
class ToolSpec:
    """What an agent (or the synthesiser) knows of a tool. See the module docstring."""

    name: str
    domain: str
    description: str
    parameters: Mapping[str, Any]
    returns: Mapping[str, Any]
    kind: str
    group: str
    verb: str
    obj: str

    def openai(self) -> dict:
        """The OpenAI function-tool dict (``jaxpapers.agents.tool_spec`` shape)."""
        return {"type": "function", "function": {"name": self.name,
                                                 "description": self.description,
                                                 "parameters": dict(self.parameters)}}

    def arg_types(self) -> dict[str, str]:
        """Parameter name -> semantic type (``x-type``), in declaration order."""
        return {k: v["x-type"] for k, v in self.parameters["properties"].items()}

    @property
    def return_type(self) -> str:
        return self.returns["x-type"]


@dataclasses.dataclass(frozen=True)
class Tool:
    spec: ToolSpec
    fn: Callable[..., Any]


@dataclasses.dataclass(frozen=True)
class World:
    """A domain's world. ``data`` and ``lexicon`` hold JSON-able values only."""

    domain: str
    seed: int
    data: Mapping[str, Any]
    lexicon: Mapping[str, tuple]


_REGISTRY: dict[str, Tool] = {}
_WORLD_BUILDERS: dict[str, Callable[[random.Random], tuple[dict, dict]]] = {}


def arg(xtype: str, json_type: str = "string", description: str = "", *,
        items: str | None = None, enum: tuple | None = None) -> dict:
    """One JSON-schema property with its semantic type (``items``: JSON type of array items)."""
    if json_type not in _JSON_TYPES:
        raise ValueError(f"json_type must be one of {_JSON_TYPES}, got {json_type!r}")
    out: dict[str, Any] = {"type": json_type, "x-type": xtype}
    if description:
        out["description"] = description
    if json_type == "array":
        out["items"] = {"type": items or "string"}
    if enum is not None:
        out["enum"] = list(enum)
    return out


def tool(domain: str, verb: str, obj: str, description: str, *, params: Mapping[str, dict],
         returns: dict, kind: str, group: str):
    """Register ``fn(world, **args)`` as ``"<domain>.<verb>_<obj>"`` (decorator)."""
    if domain not in DOMAINS:
        raise ValueError(f"domain must be one of {DOMAINS}, got {domain!r}")
    if kind not in ("R", "P"):
        raise ValueError(f"kind must be 'R' or 'P', got {kind!r}")
    for name, p in {**params, "<returns>": returns}.items():
        if "x-type" not in p or p.get("type") not in _JSON_TYPES:
            raise ValueError(f"{domain}.{verb}_{obj}: {name} needs a JSON type and an x-type")
    name = f"{domain}.{verb}_{obj}"

    def register(fn):
        if name in _REGISTRY:
            raise ValueError(f"tool {name!r} is registered twice")
        spec = ToolSpec(name=name, domain=domain, description=description,
                        parameters={"type": "object", "properties": dict(params),
                                    "required": list(params), "additionalProperties": False},
                        returns=dict(returns), kind=kind, group=group, verb=verb, obj=obj)
        _REGISTRY[name] = Tool(spec, fn)
        return fn

    return register


def register_world(domain: str):
    """Register ``build(rng) -> (data, lexicon)`` as the world builder of ``domain``."""

    def register(build):
        _WORLD_BUILDERS[domain] = build
        return build

    return register


def _load_domains() -> None:
    """Import every domain module present (each registers its tools and world builder)."""
    import importlib

    for domain in DOMAINS:
        name = f"jaxpapers.benchmarks.dive.worlds.{domain}"
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name != name:
                raise


def registry() -> dict[str, Tool]:
    """Every registered tool, by name (sorted)."""
    _load_domains()
    return {k: _REGISTRY[k] for k in sorted(_REGISTRY)}


def domain_tools(domain: str) -> dict[str, Tool]:
    """The tools of one domain, by name (sorted)."""
    if domain not in DOMAINS:
        raise ValueError(f"domain must be one of {DOMAINS}, got {domain!r}")
    return {k: t for k, t in registry().items() if t.spec.domain == domain}


def world_rng(domain: str, seed: int) -> random.Random:
    """The RNG a world is built from: ``random.Random(crc32(domain) * 1_000_003 + seed)``."""
    return random.Random(zlib.crc32(domain.encode()) * 1_000_003 + int(seed))


def make_world(domain: str, world_seed: int) -> World:
    """Build the world of ``domain`` from ``world_seed`` (same seed, same world)."""
    _load_domains()
    if domain not in _WORLD_BUILDERS:
        raise ValueError(f"domain must be one of {sorted(_WORLD_BUILDERS)}, got {domain!r}")
    if isinstance(world_seed, bool) or not isinstance(world_seed, int):
        raise TypeError(f"world_seed must be an int, got {type(world_seed).__name__}")
    data, lexicon = _WORLD_BUILDERS[domain](world_rng(domain, world_seed))
    lexicon = {k: tuple(v) for k, v in sorted(lexicon.items())}
    return World(domain, world_seed, data, lexicon)


def canonical(value: Any) -> Any:
    """``value`` as a JSON value with floats rounded to ``FLOAT_DIGITS`` digits (tuples become
    lists; NaN / inf are errors: a tool must not return them)."""
    if isinstance(value, bool) or value is None or isinstance(value, (int, str)):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ToolError(f"non-finite result {value}")
        r = round(value, FLOAT_DIGITS)
        return 0.0 if r == 0 else r
    if isinstance(value, (list, tuple)):
        return [canonical(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): canonical(v) for k, v in sorted(value.items())}
    raise TypeError(f"tools return JSON values, got {type(value).__name__}")


def _check_type(name: str, schema: Mapping, value: Any) -> str | None:
    t = schema["type"]
    ok = {"string": isinstance(value, str),
          "integer": isinstance(value, int) and not isinstance(value, bool),
          "number": isinstance(value, (int, float)) and not isinstance(value, bool),
          "boolean": isinstance(value, bool), "array": isinstance(value, list),
          "object": isinstance(value, dict)}[t]
    if not ok:
        return f"argument {name!r} must be of JSON type {t}, got {type(value).__name__}"
    if isinstance(value, float) and not math.isfinite(value):
        return f"argument {name!r} must be finite"
    if "enum" in schema and value not in schema["enum"]:
        return f"argument {name!r} must be one of {schema['enum']}, got {value!r}"
    return None


def call_tool(world: World, name: str, args: Mapping[str, Any]) -> tuple[bool, Any]:
    """Run tool ``name`` on ``world``: ``(True, output)`` or ``(False, error message)``.

    Never raises for a bad call (unknown tool, wrong domain, missing / extra / mistyped
    argument, a :class:`ToolError` from the tool); a bug in a tool (any other exception)
    propagates.
    """
    tools = registry()
    if name not in tools:
        return False, f"unknown tool {name!r}"
    t = tools[name]
    if t.spec.domain != world.domain:
        return False, f"tool {name!r} belongs to {t.spec.domain!r}, not {world.domain!r}"
    if not isinstance(args, Mapping):
        return False, "arguments must be an object"
    props = t.spec.parameters["properties"]
    missing = [k for k in props if k not in args]
    extra = sorted(k for k in args if k not in props)
    if missing or extra:
        return False, f"{name}: missing arguments {missing}, unknown arguments {extra}"
    for k, schema in props.items():
        problem = _check_type(k, schema, args[k])
        if problem:
            return False, f"{name}: {problem}"
    try:
        out = canonical(t.fn(world, **{k: args[k] for k in props}))
    except ToolError as e:
        return False, f"{name}: {e}"
    return True, out


def dumps(value: Any) -> str:
    """Compact, sorted-key JSON (how non-string answers are written)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"))
