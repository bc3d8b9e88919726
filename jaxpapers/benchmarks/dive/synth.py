"""Reproducible, evidence-first task synthesis over the typed tool worlds (DIVE, offline).

DIVE's synthesiser offers an LLM a random toolset of one domain and a seed concept, lets it
collect evidence with tool calls for three rounds, and asks it to derive a question and answer
"from actual tool results only"; random draws are reseeded from the clock, and nothing is
replayed. Here every draw of task ``i`` comes from ``random.Random(crc32(f"{seed}:{i}"))``, the
explorer is type-directed (or an LLM through ``jaxpapers.agents``), and the answer is the output
of a program of logged calls, so :func:`~jaxpapers.benchmarks.dive.verify.replay` can re-run it.

Per task:

1. domain and world seed; a toolset of U[``toolset_min``, ``toolset_max``] tools of the domain
   (offered); a seed entity: a lexicon value of a type some offered tool takes.
2. :class:`TypeDirectedExplorer`: ``rounds`` rounds of at most ``calls_per_round`` calls. A call
   takes a tool whose every argument can be filled with the right semantic type: the first from
   the most recent output or the seed (later rounds prefer the deepest output: "deepen"), the
   others from the world's lexicon (named constants) or a small integer, or else another value
   of their type seen so far (the seed or an earlier output: "join" branches); unused tools
   first.
   Failed calls (a ``ToolError``) are dropped, as DIVE drops empty evidence.
3. Derivation: the deepest sink of the calls' dependency DAG and its ancestors form the program
   (calls in order; an argument ``{"ref": id}`` is an earlier output); its output is the answer.
4. Question: names the seed and each step as a paraphrase of its verb and object, what it
   applies to ("it", "the result of step k", ...), with the named constants; never an
   intermediate value. A question whose answer appears in it as a
   whole token (any case) is redrawn.

Output: JSON-ready dicts with ``id``, ``domain``, ``world_seed``, ``toolset``, ``question``,
``answer``, ``program`` (``id``, ``tool``, ``args``, ``output``), plus ``seed_entity``,
``trace`` (every call made, the evidence) and ``steps``.
"""

from __future__ import annotations

import json
import random
import re
import zlib
from typing import Any

from jaxpapers.benchmarks.dive.worlds import (DOMAINS, World, call_tool, domain_tools, dumps,
                                              make_world)

__all__ = ["MAX_STEPS", "VERB_PHRASES", "TypeDirectedExplorer", "LLMExplorer", "synthesize",
           "synthesize_one", "answer_text", "question_leaks"]

MAX_STEPS = 8  # the longest program a question may describe (the solver reads up to this)

# Paraphrases of each tool verb (the question writer picks one; a solver knows them all).
VERB_PHRASES: dict[str, tuple[str, ...]] = {
    "get": ("get", "look up", "retrieve"), "list": ("list", "enumerate"),
    "count": ("count", "tally"), "compute": ("compute", "calculate"),
    "find": ("find", "locate"), "compare": ("compare", "weigh"),
    "convert": ("convert", "transform"), "check": ("check", "verify"),
    "translate": ("translate",), "reverse": ("reverse",), "merge": ("merge", "join"),
    "add": ("add", "shift by"), "round": ("round",),
}


def answer_text(output: Any) -> str:
    """The answer string: a string output as it is, anything else as compact sorted JSON."""
    return output if isinstance(output, str) else dumps(output)


def question_leaks(question: str, answer: str) -> bool:
    """Whether ``answer`` occurs in ``question`` as a whole token (any case)."""
    a = answer.strip().lower()
    if not a:
        return False
    pattern = r"(?<![\w.-])" + re.escape(a) + r"(?![\w-]|\.\w)"
    return re.search(pattern, question.lower()) is not None


def _key(schema: dict) -> tuple[str, bool]:
    return schema["x-type"], schema["type"] == "array"


def _constant_type(world: World, schema: dict) -> bool:
    """Whether an argument after the first takes a named constant (a lexicon value, an enum
    member or an integer); otherwise it joins an earlier value of its type."""
    if schema["type"] == "array":
        return False
    return bool(world.lexicon.get(schema["x-type"])) or "enum" in schema \
        or schema["type"] == "integer"


class TypeDirectedExplorer:
    """Fills typed arguments from the seed, earlier outputs and the lexicon (no LLM)."""

    def __init__(self, *, rounds: int = 3, calls_per_round: int = 5, max_int: int = 30,
                 max_depth: int = 4):
        self.rounds, self.calls_per_round, self.max_int = rounds, calls_per_round, max_int
        self.max_depth = max_depth  # longest chain (the solver composes up to 4 calls)

    def explore(self, world: World, toolset: list[str], seed_entity: tuple[str, Any],
                rng: random.Random) -> list[dict]:
        tools = {name: t for name, t in domain_tools(world.domain).items() if name in toolset}
        # typed values: (key, value, ref id or None, depth)
        pool: list[tuple[tuple[str, bool], Any, int | None, int]] = [
            ((seed_entity[0], False), seed_entity[1], None, 0)]
        used: dict[str, int] = {}
        made: set[str] = set()  # the same call twice teaches nothing
        trace: list[dict] = []
        for rnd in range(self.rounds):
            for _ in range(self.calls_per_round):
                call = self._one_call(world, tools, pool, used, made, rng, deepen=rnd > 0)
                if call is None:
                    break
                made.add(dumps([call["tool"], call["args"]]))
                call["id"] = len(trace) + 1
                call["round"] = rnd + 1
                ok, out = call_tool(world, call["tool"], self._resolve(call["args"], trace))
                if not ok:
                    continue
                call["output"] = out
                trace.append(call)
                used[call["tool"]] = used.get(call["tool"], 0) + 1
                depth = 1 + max([p[3] for p in pool if p[2] in call["_refs"]] or [0])
                pool.append((_key(tools[call["tool"]].spec.returns), out, call["id"], depth))
                del call["_refs"]
        return trace

    @staticmethod
    def _resolve(args: dict, trace: list[dict]) -> dict:
        outputs = {c["id"]: c["output"] for c in trace}
        return {k: outputs[v["ref"]] if isinstance(v, dict) and "ref" in v else v
                for k, v in args.items()}

    def _one_call(self, world, tools, pool, used, made, rng, *, deepen: bool) -> dict | None:
        names = sorted(tools)
        rng.shuffle(names)
        names.sort(key=lambda n: used.get(n, 0))  # unused tools first (stable: shuffled ties)
        for name in names:
            spec = tools[name].spec
            props = list(spec.parameters["properties"].items())
            first_key = _key(props[0][1])
            sources = [p for p in pool if p[0] == first_key and p[3] < self.max_depth]
            if not sources:
                continue
            if deepen:
                top = max(p[3] for p in sources)
                sources = [p for p in sources if p[3] == top]
            else:
                sources = sources[-1:] if len(sources) > 1 else sources
            src = sources[rng.randrange(len(sources))]
            args = {props[0][0]: ({"ref": src[2]} if src[2] is not None else src[1])}
            refs = {src[2]} if src[2] is not None else set()
            ok = True
            for arg_name, schema in props[1:]:
                value = self._constant(world, schema, rng)
                if value is None:  # join a branch: another value of the type seen so far
                    joins = [p for p in pool if p[0] == _key(schema) and p[3] < self.max_depth
                             and dumps(p[1]) != dumps(src[1])]  # two different values
                    if not joins:
                        ok = False
                        break
                    j = joins[rng.randrange(len(joins))]
                    value = j[1] if j[2] is None else {"ref": j[2]}
                    if j[2] is not None:
                        refs.add(j[2])
                args[arg_name] = value
            if ok and dumps([name, args]) not in made:
                return {"tool": name, "args": args, "_refs": refs}
        return None

    def _constant(self, world: World, schema: dict, rng: random.Random):
        if not _constant_type(world, schema):
            return None
        xtype, is_array = _key(schema)
        values = world.lexicon.get(xtype)
        if values:
            if "enum" in schema:
                values = [v for v in values if v in schema["enum"]] or schema["enum"]
            return values[rng.randrange(len(values))]
        if "enum" in schema:
            return schema["enum"][rng.randrange(len(schema["enum"]))]
        if schema["type"] == "integer":
            return rng.randint(1, self.max_int)
        return None


_DONE = "finish_round"
_EXPLORER_PROMPT = (
    "You collect evidence for a tool-use task in the {domain} domain. Start from the {xtype} "
    "{value!r}. Call the offered tools to learn facts about it: the first argument of every "
    "call must be that starting value or the exact output of an earlier call; other arguments "
    "are constants, or such values where no constant fits. Round {round} of {rounds}: make "
    "up to {calls} calls{deepen}, then call {done}.")


class LLMExplorer:
    """DIVE's evidence collection by a chat model (any client with the ``chat`` method of
    :class:`jaxpapers.agents.OpenAICompatClient`), driven by
    :class:`jaxpapers.agents.ToolCallingAgent` over the offered tools' specs plus a
    ``finish_round`` tool (function names: tool names without the ``domain.`` prefix).

    ``rounds`` rounds of at most ``calls_per_round`` calls in one conversation (later rounds ask
    to build on the latest output: "deepen"). The model sends literal values; a call is logged
    only if its arguments fit the spec and its first argument equals (canonical JSON) the seed
    or an earlier output of the right type, which becomes ``{"ref": id}`` (the latest such
    output), and so must any later argument of a type without named constants (a join); the
    trace then has the type-directed explorer's form and replays. Other calls, tool
    errors and chains deeper than ``max_depth`` get an error observation and are not logged.
    The request carries ``seed`` from ``rng`` (servers that honour it are reproducible).
    """

    def __init__(self, client, *, rounds: int = 3, calls_per_round: int = 5,
                 max_depth: int = 4, temperature: float | None = 0.0, **params):
        if not callable(getattr(client, "chat", None)):
            raise ValueError("LLMExplorer client must have a chat(messages, *, tools, **params) "
                             f"method, got {type(client).__name__}")
        for name, v in (("rounds", rounds), ("calls_per_round", calls_per_round),
                        ("max_depth", max_depth)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"LLMExplorer {name} must be an int >= 1, got {v!r}")
        self.client, self.rounds, self.calls_per_round = client, rounds, calls_per_round
        self.max_depth, self.temperature, self.params = max_depth, temperature, dict(params)

    def explore(self, world: World, toolset: list[str], seed_entity: tuple[str, Any],
                rng: random.Random) -> list[dict]:
        from jaxpapers import agents as ag

        tools = {name: t for name, t in domain_tools(world.domain).items() if name in toolset}
        order = sorted(tools)
        rng.shuffle(order)  # presentation order from the task's own generator
        # function names without the domain prefix (OpenAI names allow no dots)
        self._names = {n.split(".", 1)[-1]: n for n in order}
        specs = [ag.tool_spec(short, f"{tools[n].spec.description} Returns: "
                              f"{tools[n].spec.returns['x-type']}.", tools[n].spec.parameters)
                 for short, n in self._names.items()]
        specs.append(ag.tool_spec(_DONE, "End this round of evidence collection.",
                                  {"type": "object", "properties": {}}))
        agent = ag.ToolCallingAgent(self.client, temperature=self.temperature,
                                    seed=rng.randrange(2 ** 31), **self.params)
        xtype, value = seed_entity
        # typed values seen so far: (x-type, canonical JSON, ref id or None, depth)
        known: list[tuple[str, str, int | None, int]] = [(xtype, dumps(value), None, 0)]
        trace: list[dict] = []
        obs, pending = None, ""
        for rnd in range(self.rounds):
            text = _EXPLORER_PROMPT.format(
                domain=world.domain, xtype=xtype.replace("_", " "), value=value,
                round=rnd + 1, rounds=self.rounds, calls=self.calls_per_round, done=_DONE,
                deepen=", building on the latest output" if rnd else "")
            if obs is None:
                obs = ag.Observation(text)
                agent.reset(obs, specs)
            else:  # the last call's result (unless the round ended by finish_round) + prompt
                obs = ag.Observation(f"{pending}\n\n{text}" if pending else text)
            for _ in range(self.calls_per_round):
                call = agent.act(obs)
                if call.name == _DONE:
                    pending = ""
                    break
                pending = self._try(world, tools, specs, call, known, trace, rnd)
                obs = ag.Observation(pending)
        return trace

    def _try(self, world, tools, specs, call, known, trace, rnd) -> str:
        """Runs one model call; the observation text (an output or an error)."""
        from jaxpapers import agents as ag

        name = self._names.get(call.name)
        if name is None:
            return f"error: unknown tool {call.name!r}; call one of the offered tools"
        spec = tools[name].spec
        problem = ag.validate_arguments(next(s for s in specs
                                             if s["function"]["name"] == call.name),
                                        call.arguments)
        if problem:
            return f"error: {problem}"
        props = list(spec.parameters["properties"].items())
        if set(call.arguments) != {k for k, _ in props}:
            return f"error: {call.name} takes exactly the arguments {[k for k, _ in props]}"
        first_name, first_schema = props[0]
        joined: dict[str, int] = {}  # arguments after the first that name an earlier output
        for k, schema in props[1:]:
            value = call.arguments[k]
            if not _constant_type(world, schema):  # no constants of this type: a join
                if dumps(value) == dumps(call.arguments[props[0][0]]):
                    return f"error: argument {k!r} must differ from the first argument"
                hit = [c for c in known if c[0] == schema["x-type"] and c[1] == dumps(value)
                       and c[3] < self.max_depth]
                if not hit:
                    return (f"error: argument {k!r} must be the starting value or the exact "
                            "output of an earlier call of the same type")
                if hit[-1][2] is not None:  # the seed itself stays a literal
                    joined[k] = hit[-1][2]
            elif not isinstance(value, (str, int, float, bool)):
                return f"error: argument {k!r} must be a constant (a string or a number)"
        first = dumps(call.arguments[first_name])
        match = [k for k in known if k[0] == first_schema["x-type"] and k[1] == first]
        if not match:
            return (f"error: the first argument {first_name!r} must be the starting value or "
                    "an earlier output of the same type")
        if all(k[3] >= self.max_depth for k in match):
            return f"error: chains are limited to {self.max_depth} calls"
        src = [k for k in match if k[3] < self.max_depth][-1]
        args = {k: call.arguments[k] for k, _ in props}
        ok, out = call_tool(world, name, args)
        if not ok:
            return f"error: {out}"
        call_id = len(trace) + 1
        logged = {**args, **{k: {"ref": i} for k, i in joined.items()}}
        if src[2] is not None:
            logged[first_name] = {"ref": src[2]}
        trace.append({"id": call_id, "round": rnd + 1, "tool": name, "args": logged,
                      "output": out})
        depth = 1 + max([src[3]] + [c[3] for c in known if c[2] in joined.values()])
        known.append((spec.returns["x-type"], dumps(out), call_id, depth))
        return json.dumps(out) if not isinstance(out, str) else out


def _program(trace: list[dict], rng: random.Random) -> list[dict]:
    """The deepest sink of the dependency DAG with its ancestors, in call order."""
    by_id = {c["id"]: c for c in trace}
    parents = {c["id"]: [v["ref"] for v in c["args"].values() if isinstance(v, dict)]
               for c in trace}
    depth: dict[int, int] = {}
    for c in trace:  # calls are in order, parents come first
        depth[c["id"]] = 1 + max([depth[p] for p in parents[c["id"]]] or [0])
    has_child = {p for ps in parents.values() for p in ps}
    sinks = [i for i in by_id if i not in has_child]
    best = max(depth[i] for i in sinks)
    sink = [i for i in sinks if depth[i] == best][rng.randrange(
        sum(depth[i] == best for i in sinks))]
    keep, todo = set(), [sink]
    while todo:
        i = todo.pop()
        if i not in keep:
            keep.add(i)
            todo.extend(parents[i])
    return [by_id[i] for i in sorted(keep)]


def _phrase(spec, args: dict, rng: random.Random, index: int) -> str:
    """Step ``index`` (0-based) of a renumbered program: its verb and object, what its first
    argument is ("that": the seed at the first step; "it": the previous step's output; "the
    result of step k"; "the start value": the seed later on) and its other arguments (named
    constants, or "the result of step k" where a branch is joined)."""
    verb = rng.choice(VERB_PHRASES.get(spec.verb, (spec.verb,)))
    obj = spec.obj.replace("_", " ")
    items = list(args.items())
    first = items[0][1]
    if isinstance(first, dict):
        target = "it" if first["ref"] == index else f"the result of step {first['ref']}"
    else:
        target = "that" if index == 0 else "the start value"
    consts = [f"{k.replace('_', ' ')} " + (f"the result of step {v['ref']}"
                                            if isinstance(v, dict) else f"{v}")
              for k, v in items[1:]]
    extra = f" (with {', '.join(consts)})" if consts else ""
    return f"{verb} the {obj} for {target}{extra}"


def _renumber(program: list[dict]) -> list[dict]:
    new_id = {c["id"]: i + 1 for i, c in enumerate(program)}
    out = []
    for c in program:
        args = {k: ({"ref": new_id[v["ref"]]} if isinstance(v, dict) else v)
                for k, v in c["args"].items()}
        out.append({"id": new_id[c["id"]], "tool": c["tool"], "args": args,
                    "output": c["output"]})
    return out


def synthesize_one(index: int, *, seed: int, domains: tuple[str, ...] = DOMAINS,
                   toolset_min: int = 5, toolset_max: int = 15,
                   explorer: TypeDirectedExplorer | None = None, max_tries: int = 8,
                   tool_pool=None, fixed_toolsets=None) -> dict | None:
    """Task ``index`` of run ``seed`` (None when no try gives a leak-free program).

    ``tool_pool``: the tools toolsets are drawn from (default all); ``fixed_toolsets``:
    ``{domain: [tool names]}`` offered as they are instead of a random draw (a narrow arm).
    """
    explorer = explorer or TypeDirectedExplorer()
    rng = random.Random(zlib.crc32(f"{seed}:{index}".encode()))
    for _ in range(max_tries):
        domain = domains[rng.randrange(len(domains))]
        world_seed = rng.randrange(1_000_000)
        world = make_world(domain, world_seed)
        names = sorted(n for n in domain_tools(domain) if tool_pool is None or n in tool_pool)
        k = min(len(names), rng.randint(toolset_min, toolset_max))
        sample = sorted(rng.sample(names, k))
        toolset = sorted(fixed_toolsets[domain]) if fixed_toolsets else sample
        tools = domain_tools(domain)
        first_types = sorted({_key(next(iter(tools[n].spec.parameters["properties"].values())))
                              for n in toolset})
        seedable = [t for t, arr in first_types if not arr and world.lexicon.get(t)]
        if not seedable:
            continue
        # prefer seed types that start a chain of two offered tools (evidence to build on)
        takes = {n: _key(next(iter(tools[n].spec.parameters["properties"].values())))
                 for n in toolset}
        chained = [t for t in seedable if any(
            takes[a] == (t, False) and any(takes[b] == _key(tools[a].spec.returns)
                                           for b in toolset) for a in toolset)]
        seedable = chained or seedable
        xtype = seedable[rng.randrange(len(seedable))]
        seed_value = world.lexicon[xtype][rng.randrange(len(world.lexicon[xtype]))]
        trace = explorer.explore(world, toolset, (xtype, seed_value), rng)
        if not trace:
            continue
        program = _renumber(_program(trace, rng))
        if len(program) > MAX_STEPS:
            continue
        steps = [_phrase(tools[c["tool"]].spec, c["args"], rng, i)
                 for i, c in enumerate(program)]
        question = (f"Start from the {xtype.replace('_', ' ')} {seed_value} ({domain}). "
                    + "; then ".join(s[0].upper() + s[1:] if i == 0 else s
                                     for i, s in enumerate(steps))
                    + ". What is the result?")
        answer = answer_text(program[-1]["output"])
        if question_leaks(question, answer):
            continue
        return {"id": f"{seed}-{index:06d}", "domain": domain, "world_seed": world_seed,
                "toolset": toolset, "seed_entity": {"type": xtype, "value": seed_value},
                "question": question, "answer": answer, "program": program,
                "steps": len(program),
                "trace": [{k: c[k] for k in ("id", "round", "tool", "args", "output")}
                          for c in trace]}
    return None


def synthesize(n_tasks: int, *, seed: int, domains=None, toolset_min: int = 5,
               toolset_max: int = 15, tool_pool=None, fixed_toolsets=None,
               keep=None, explorer=None) -> list[dict]:
    """``n_tasks`` tasks of run ``seed`` (contract; see the module docstring).

    ``tool_pool`` / ``fixed_toolsets``: see :func:`synthesize_one`; ``keep(task) -> bool``
    filters tasks (e.g. those using a held-out tool); rejected tasks are not counted.
    ``explorer``: a :class:`TypeDirectedExplorer` (default) or :class:`LLMExplorer`.

    Raises ValueError for ``n_tasks`` < 1, an unknown domain, or toolset bounds outside
    ``1 <= toolset_min <= toolset_max``.
    """
    if isinstance(n_tasks, bool) or not isinstance(n_tasks, int) or n_tasks < 1:
        raise ValueError(f"n_tasks must be an int >= 1, got {n_tasks!r}")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"seed must be an int, got {seed!r}")
    doms = tuple(DOMAINS if domains is None else domains)
    bad = [d for d in doms if d not in DOMAINS]
    if not doms or bad:
        raise ValueError(f"domains must be a non-empty subset of {DOMAINS}, got {domains!r}")
    if explorer is not None and not callable(getattr(explorer, "explore", None)):
        raise ValueError(f"explorer must have an explore method, got {type(explorer).__name__}")
    if not (isinstance(toolset_min, int) and isinstance(toolset_max, int)
            and 1 <= toolset_min <= toolset_max):
        raise ValueError(f"toolset bounds must satisfy 1 <= toolset_min <= toolset_max, got "
                         f"{toolset_min}, {toolset_max}")
    out = []
    index = 0
    while len(out) < n_tasks:
        task = synthesize_one(index, seed=seed, domains=doms, toolset_min=toolset_min,
                              toolset_max=toolset_max, tool_pool=tool_pool,
                              fixed_toolsets=fixed_toolsets, explorer=explorer)
        index += 1
        if task is not None and (keep is None or keep(task)):
            out.append(task)
        if index > 200 * n_tasks + 1000:
            raise RuntimeError(f"only {len(out)} of {n_tasks} tasks after {index} tries")
    return out
