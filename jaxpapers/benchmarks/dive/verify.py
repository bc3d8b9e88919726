"""Replay verification of synthesised tasks: the answer must come out of the program again.

DIVE keeps whatever its LLM wrote as ground truth (a parse failure leaves "Failed to derive
answer") and never re-runs a tool call. :func:`replay` re-executes a task's program in a fresh
world built from ``(domain, world_seed)``, in the sandbox worker, and accepts the task only if
every call's output and the answer are reproduced exactly. :func:`solve` reads only the
question, the offered tools' specs and the world's lexicon and runs every composition
consistent with the question; :func:`solver_verified` accepts a task only if all of them give
its answer (the question is complete and unambiguous).
"""

from __future__ import annotations

import itertools
import re
from typing import Any

from jaxpapers.benchmarks.dive.synth import MAX_STEPS, VERB_PHRASES, _key, answer_text
from jaxpapers.benchmarks.dive.worlds import (DOMAINS, call_tool, canonical, domain_tools,
                                              make_world)

__all__ = ["replay", "check_task", "solve", "solver_verified", "MAX_STEPS"]

_KEYS = ("id", "domain", "world_seed", "toolset", "question", "answer", "program")


def check_task(task: Any) -> None:
    """Raise ValueError naming the first malformed field of ``task``."""
    if not isinstance(task, dict):
        raise ValueError(f"task must be a dict, got {type(task).__name__}")
    missing = [k for k in _KEYS if k not in task]
    if missing:
        raise ValueError(f"task is missing {missing}")
    if task["domain"] not in DOMAINS:
        raise ValueError(f"task domain must be one of {DOMAINS}, got {task['domain']!r}")
    if not isinstance(task["program"], list) or not task["program"]:
        raise ValueError("task program must be a non-empty list of calls")
    for i, call in enumerate(task["program"]):
        if not isinstance(call, dict) or not {"id", "tool", "args", "output"} <= set(call):
            raise ValueError(f"task program[{i}] must have id, tool, args and output")
        if not isinstance(call["args"], dict):
            raise ValueError(f"task program[{i}].args must be an object")


def replay(task: dict, *, sandboxed: bool = True) -> bool:
    """Re-run ``task``'s program in a fresh world (contract): True iff every call succeeds with
    its recorded output and the last output gives the recorded answer. False on any mismatch,
    an unknown tool, a dangling or forward reference, or a malformed task.

    ``sandboxed`` (default): each call runs in the shared sandbox worker
    (:func:`jaxpapers.core.sandbox.call_function`: time and memory limits, no network, no
    writes), about 5 ms a task; False runs the registered tools in this process."""
    try:
        check_task(task)
        world = make_world(task["domain"], task["world_seed"])
    except (ValueError, TypeError):
        return False
    outputs: dict[Any, Any] = {}
    for call in task["program"]:
        args = {}
        for k, v in call["args"].items():
            if isinstance(v, dict):
                if set(v) != {"ref"} or v["ref"] not in outputs:
                    return False
                args[k] = outputs[v["ref"]]
            else:
                args[k] = v
        if call["tool"] not in task["toolset"]:
            return False
        ok, out = call_tool(world, call["tool"], args, sandboxed=sandboxed)
        try:
            same = ok and canonical(call["output"]) == out
        except (TypeError, ValueError):
            return False
        if not same or call["id"] in outputs:
            return False
        outputs[call["id"]] = out
    return answer_text(outputs[task["program"][-1]["id"]]) == task["answer"]


# ------------------------------------------------------------------------------------ solver
def _parse_steps(question: str):
    """``(seed type words, seed value, domain, [step text])`` or None."""
    m = re.fullmatch(r"Start from the (.+?) \((\w+)\)\. (.+)\. What is the result\?", question,
                     flags=re.S)
    if m is None:
        return None
    head, domain, body = m.groups()
    return head, domain, body.split("; then ")


_TARGET = r"(that|it|the start value|the result of step (\d+))"
_STEP_REF = re.compile(r"the result of step (\d+)")


def _source(target: str, index: int):
    """What a step's first argument is: ``"seed"`` or a 1-based step number (None: invalid)."""
    if target == "that":
        return "seed" if index == 0 else None
    if target == "it":
        return index if index > 0 else None
    if target == "the start value":
        return "seed" if index > 0 else None
    k = int(_STEP_REF.fullmatch(target).group(1))
    return k if 1 <= k <= index else None


def _step_candidates(step: str, specs: list, index: int):
    """``(spec, source, constants)`` for every tool whose verb paraphrase and object step
    ``index`` (0-based) states: ``source`` is where its first argument comes from (``"seed"`` or
    a 1-based step), ``constants`` its other arguments (a value, or ``("step", k)``)."""
    out = []
    text = step[:1].lower() + step[1:]
    for spec in specs:
        for phrase in VERB_PHRASES.get(spec.verb, (spec.verb,)):
            head = re.escape(f"{phrase} the {spec.obj.replace('_', ' ')} for ")
            m = re.match(head + _TARGET, text)
            if m is None:
                continue
            source = _source(m.group(1), index)
            if source is None:
                continue
            rest = text[m.end():]
            props = list(spec.parameters["properties"].items())[1:]
            consts: dict[str, Any] = {}
            if props:
                pat = (r" \(with " + ", ".join(re.escape(k.replace("_", " ")) + r" (.+?)"
                                               for k, _ in props) + r"\)")
                m = re.fullmatch(pat, rest)
                if m is None:
                    continue
                for (k, schema), raw in zip(props, m.groups()):
                    ref = _STEP_REF.fullmatch(raw)
                    try:
                        consts[k] = (("step", int(ref.group(1))) if ref else
                                     int(raw) if schema["type"] == "integer" else
                                     float(raw) if schema["type"] == "number" else raw)
                    except ValueError:
                        break
                else:
                    out.append((spec, source, consts))
            elif rest == "":
                out.append((spec, source, consts))
    return out


def solve(question: str, toolset: list[str], world) -> list[str] | None:
    """Answers of every composition of offered tools consistent with ``question``.

    Sees only the question, the offered tools' specs and the world's lexicon (the seed must be a
    lexicon value of the stated type); tools run in ``world``. A composition is one candidate
    tool per step (its verb paraphrase, object and named constants match the step's words);
    each argument is what the step says ("that" / "the start value": the seed, "it": the
    previous step's output, "the result of step k", a named constant) with matching semantic
    types; at most ``MAX_STEPS`` steps. Returns None when the question cannot be read.
    """
    parsed = _parse_steps(question)
    if parsed is None:
        return None
    head, domain, steps = parsed
    if domain != world.domain or not steps or len(steps) > MAX_STEPS:
        return None
    seeds = [(t, v) for t, values in world.lexicon.items() for v in values
             if head == f"{t.replace('_', ' ')} {v}"]
    specs = [t.spec for n, t in domain_tools(domain).items() if n in toolset]
    cands = [_step_candidates(s, specs, i) for i, s in enumerate(steps)]
    answers = []
    for xtype, value in seeds:
        for combo in itertools.product(*cands):
            outs: list[tuple[tuple[str, bool], Any]] = []  # (key, value) per step
            seed = ((xtype, False), value)
            for spec, source, consts in combo:
                props = list(spec.parameters["properties"].items())
                key, cur = seed if source == "seed" else outs[source - 1]
                if _key(props[0][1]) != key:
                    break
                args = {props[0][0]: cur}
                for (k, schema) in props[1:]:
                    v = consts[k]
                    if isinstance(v, tuple):
                        if v[1] > len(outs) or outs[v[1] - 1][0] != _key(schema):
                            break
                        v = outs[v[1] - 1][1]
                    args[k] = v
                else:
                    good, out = call_tool(world, spec.name, args)
                    if good:
                        outs.append((_key(spec.returns), out))
                        continue
                break
            else:
                answers.append(answer_text(outs[-1][1]))
    return answers


def solver_verified(task: dict) -> bool:
    """True iff the solver finds at least one composition and every one gives the answer."""
    try:
        check_task(task)
        world = make_world(task["domain"], task["world_seed"])
    except (ValueError, TypeError):
        return False
    answers = solve(task["question"], task["toolset"], world)
    return bool(answers) and all(a == task["answer"] for a in answers)
