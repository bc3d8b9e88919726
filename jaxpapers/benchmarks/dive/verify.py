"""Replay verification of synthesised tasks: the answer must come out of the program again.

DIVE keeps whatever its LLM wrote as ground truth (a parse failure leaves "Failed to derive
answer") and never re-runs a tool call. :func:`replay` re-executes a task's program in a fresh
world built from ``(domain, world_seed)`` and accepts the task only if every call's output and
the answer are reproduced exactly. (The solver check, ``solve``, and running tools in the shared
sandbox worker are not built yet.)
"""

from __future__ import annotations

from typing import Any

from jaxpapers.benchmarks.dive.synth import answer_text
from jaxpapers.benchmarks.dive.worlds import DOMAINS, call_tool, canonical, make_world

__all__ = ["replay", "check_task"]

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


def replay(task: dict) -> bool:
    """Re-run ``task``'s program in a fresh world (contract): True iff every call succeeds with
    its recorded output and the last output gives the recorded answer. False on any mismatch,
    an unknown tool, a dangling or forward reference, or a malformed task."""
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
        ok, out = call_tool(world, call["tool"], args)
        try:
            same = ok and canonical(call["output"]) == out
        except (TypeError, ValueError):
            return False
        if not same or call["id"] in outputs:
            return False
        outputs[call["id"]] = out
    return answer_text(outputs[task["program"][-1]["id"]]) == task["answer"]
