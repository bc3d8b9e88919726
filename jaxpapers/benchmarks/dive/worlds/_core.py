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
seed (never Python's salted string hash); tools iterate in sorted order.
"""

from __future__ import annotations

import dataclasses
import json
import math
import random
import zlib
from collections.abc import Callable, Mapping, Sequence
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


def call_tool(world: World, name: str, args: Mapping[str, Any], *, sandboxed: bool = False,
              timeout_s: float = 5.0, extra_modules: Sequence[str] = ()) -> tuple[bool, Any]:
    """Run tool ``name`` on ``world``: ``(True, output)`` or ``(False, error message)``.

    Never raises for a bad call (unknown tool, wrong domain, missing / extra / mistyped
    argument, a :class:`ToolError` from the tool); in this process (the default), a bug in a
    tool (any other exception) propagates.

    With ``sandboxed=True`` the tool runs in a worker process of
    :func:`jaxpapers.core.sandbox.call_function` (``timeout_s``, 256 MiB, this process's
    ``sys.path``): :func:`_run_tool` there rebuilds the world from ``(world.domain,
    world.seed)`` (so ``world`` must be what :func:`make_world` builds from them), imports
    ``extra_modules`` first (modules that register more tools with :func:`tool`: registered in
    the worker only, never in this process) and calls this function in-process. The contract
    is the same, and never raises for what the tool does: a timeout, running out of memory,
    an action the sandbox refuses (sockets, processes, writing files ...), the worker's death
    or a tool's bug give ``(False, "<name>: <why>")``, and so do arguments that are not JSON
    or too large to send (16 MiB of JSON). The arguments travel as JSON (a tuple arrives as a
    list). ``extra_modules`` is ignored in this process. A call costs about 0.5 ms (a pooled
    worker; the first call in a worker imports the domains and builds the world).
    """
    if sandboxed:
        return _call_sandboxed(world, name, args, timeout_s, extra_modules)
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


# Sandboxed calls (see call_tool): the target the worker calls, and the worlds a worker has
# built so far, by (domain, seed), oldest first (at most _WORKER_WORLDS_MAX).
_RUN_TOOL = "jaxpapers.benchmarks.dive.worlds._core:_run_tool"
_WORKER_WORLDS: dict[tuple[str, int], World] = {}
_WORKER_WORLDS_MAX = 8


def _run_tool(domain: str, world_seed: int, name: str, args: Any,
              modules: Sequence[str] = ()) -> list:
    """In a sandbox worker: import ``modules`` (they register more tools), get the world of
    ``(domain, world_seed)`` (built once per worker), run :func:`call_tool` in-process;
    returns ``[ok, value_or_error]``."""
    import importlib

    for module in modules:
        importlib.import_module(module)
    key = (domain, world_seed)
    world = _WORKER_WORLDS.get(key)
    if world is None:
        world = make_world(domain, world_seed)
        while len(_WORKER_WORLDS) >= _WORKER_WORLDS_MAX:
            del _WORKER_WORLDS[next(iter(_WORKER_WORLDS))]
        _WORKER_WORLDS[key] = world
    return list(call_tool(world, name, args))


def _call_sandboxed(world: World, name: str, args: Any, timeout_s: float,
                    extra_modules: Sequence[str]) -> tuple[bool, Any]:
    from jaxpapers.core.sandbox import call_function  # lazily: in-process calls never need it

    if isinstance(extra_modules, str) or not all(isinstance(m, str) for m in extra_modules):
        raise TypeError(f"extra_modules must be a sequence of module names, got "
                        f"{extra_modules!r}")
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or not (
            math.isfinite(timeout_s) and timeout_s > 0):
        raise ValueError(f"timeout_s must be a finite number of seconds > 0, got {timeout_s!r}")
    if isinstance(args, Mapping) and not isinstance(args, dict):
        args = dict(args)
    kwargs = {"domain": world.domain, "world_seed": world.seed, "name": name, "args": args,
              "modules": list(extra_modules)}
    try:
        result = call_function(_RUN_TOOL, kwargs, timeout_s=timeout_s)
    except ValueError as e:  # the arguments are not JSON, or too large to send
        return False, f"{name}: cannot send the arguments to the sandbox: {e}"
    if not result.ok:
        return False, f"{name}: {result.error}"
    out = result.value
    if not (isinstance(out, list) and len(out) == 2 and isinstance(out[0], bool)):
        return False, f"{name}: the sandbox sent a malformed reply"
    return out[0], out[1]


def dumps(value: Any) -> str:
    """Compact, sorted-key JSON (how non-string answers are written)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"))
