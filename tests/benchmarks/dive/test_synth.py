"""DIVE synthesis: reproducibility, replay, call-graph hashing, diversity, bad input."""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
import sys

import pytest

from jaxpapers.benchmarks.dive.stats import call_graph_hash, diversity, topology_hash
from jaxpapers.benchmarks.dive.synth import question_leaks, synthesize
from jaxpapers.benchmarks.dive.verify import replay


@pytest.fixture(scope="module")
def tasks():
    return synthesize(300, seed=0)


def _jsonl(ts) -> str:
    return "".join(json.dumps(t, sort_keys=True, separators=(",", ":")) + "\n" for t in ts)


def test_every_task_replays_and_has_no_leak(tasks):
    assert len(tasks) == 300
    for t in tasks:
        assert replay(t), t["id"]
        assert not question_leaks(t["question"], t["answer"])
        assert str(t["seed_entity"]["value"]) in t["question"]
        assert 5 <= len(t["toolset"]) <= 15
        assert all(c["tool"] in t["toolset"] for c in t["program"])
        assert [c["id"] for c in t["program"]] == list(range(1, len(t["program"]) + 1))


def test_same_seed_byte_identical_across_processes(tasks):
    here = _jsonl(tasks[:60])
    code = ("import json, sys; from jaxpapers.benchmarks.dive.synth import synthesize; "
            "sys.stdout.write(''.join(json.dumps(t, sort_keys=True, separators=(',', ':')) "
            "+ '\\n' for t in synthesize(60, seed=0)))")
    for hash_seed in ("1", "4242"):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             check=True, env=dict(os.environ, PYTHONHASHSEED=hash_seed)).stdout
        assert out == here
    assert _jsonl(synthesize(60, seed=1)) != here


@pytest.mark.parametrize("edit", ["answer", "output", "argument", "tool", "dangling"])
def test_replay_rejects_altered_tasks(tasks, edit):
    t = copy.deepcopy(next(t for t in tasks if len(t["program"]) >= 2))
    assert replay(t)
    first = t["program"][0]
    if edit == "answer":
        t["answer"] = t["answer"] + "x"
    elif edit == "output":
        first["output"] = [first["output"]] if not isinstance(first["output"], list) else []
    elif edit == "argument":
        k = next(iter(first["args"]))
        first["args"][k] = "definitely-not-in-the-world"
    elif edit == "tool":
        first["tool"] = first["tool"] + "_nope"
    else:
        second = t["program"][1]
        k = next(k for k, v in second["args"].items() if isinstance(v, dict))
        second["args"][k] = {"ref": 99}
    assert not replay(t)


def test_replay_rejects_malformed_tasks():
    assert not replay({"id": "x"})
    assert not replay("not a task")


def test_call_graph_hash_ignores_ids_not_names_or_direction(tasks):
    t = copy.deepcopy(next(t for t in tasks if len(t["program"]) >= 3))
    h = call_graph_hash(t)
    renumbered = copy.deepcopy(t)
    new = {c["id"]: 100 + 7 * c["id"] for c in renumbered["program"]}
    for c in renumbered["program"]:
        c["id"] = new[c["id"]]
        for k, v in c["args"].items():
            if isinstance(v, dict):
                c["args"][k] = {"ref": new[v["ref"]]}
    assert call_graph_hash(renumbered) == h
    renamed = copy.deepcopy(t)
    renamed["program"][0]["tool"] = "bio.get_sequence" if t["program"][0]["tool"] != \
        "bio.get_sequence" else "bio.get_organism"
    assert call_graph_hash(renamed) != h
    # reverse every edge: a chain a -> b -> c becomes c -> b -> a
    rev = copy.deepcopy(t)
    tools = [c["tool"] for c in rev["program"]]
    for c, name in zip(rev["program"], reversed(tools)):
        c["tool"] = name
    if tools != tools[::-1]:
        assert call_graph_hash(rev) != h
    assert isinstance(topology_hash(t), str)


def test_diversity_counts(tasks):
    d = diversity(tasks)
    assert d["tasks"] == 300 and d["unique_toolsets"] >= 295
    assert d["unique_call_graphs"] <= 300 and d["unique_call_sequences"] <= 300
    assert 0 < d["tools_covered_frac"] <= 1


@pytest.mark.parametrize("kwargs, name", [
    ({"n_tasks": 0}, "n_tasks"), ({"n_tasks": 2, "domains": ("chemistry",)}, "domains"),
    ({"n_tasks": 2, "toolset_min": 6, "toolset_max": 5}, "toolset"),
    ({"n_tasks": 2, "toolset_min": 0}, "toolset"), ({"n_tasks": True}, "n_tasks")])
def test_bad_input(kwargs, name):
    n = kwargs.pop("n_tasks")
    with pytest.raises(ValueError, match=name):
        synthesize(n, seed=0, **kwargs)


def test_one_domain_only():
    ts = synthesize(20, seed=3, domains=("finance",))
    assert {t["domain"] for t in ts} == {"finance"}


def test_solver_verifies_synthesised_tasks_and_rejects_edited_questions(tasks):
    from jaxpapers.benchmarks.dive.verify import solver_verified

    assert all(solver_verified(t) for t in tasks)
    t = copy.deepcopy(next(t for t in tasks if len(t["program"]) >= 2))
    broken = dict(t, question=t["question"].replace("; then ", "; next ", 1))
    assert not solver_verified(broken)  # a step the solver cannot read
    dropped = dict(t, question=t["question"].split("; then ")[0] + ". What is the result?")
    assert not solver_verified(dropped)  # a shorter program gives another answer
    assert not solver_verified(dict(t, question="What is the answer?"))
    assert not solver_verified({"id": "x"})


def test_joined_branches_are_named_replayed_and_solved(tasks):
    """Arguments of types without named constants join an earlier value ("the result of step
    k"); such programs are DAGs, replay, and the solver reads the reference."""
    from jaxpapers.benchmarks.dive.verify import solve, solver_verified
    from jaxpapers.benchmarks.dive.worlds import make_world

    joined = [t for t in tasks if any(isinstance(v, dict) for c in t["program"]
                                      for v in list(c["args"].values())[1:])]
    assert len(joined) >= 15  # about a tenth of the tasks
    changed = 0
    for t in joined:
        for i, c in enumerate(t["program"]):
            for v in list(c["args"].values())[1:]:
                if isinstance(v, dict):
                    assert v["ref"] <= i  # an earlier step
                    assert f"the result of step {v['ref']}" in t["question"]
        assert replay(t) and solver_verified(t)
        assert not solver_verified(dict(t, question=t["question"].replace(
            "the result of step", "the result of step 9", 1)))  # no such step: unreadable
        # pointing a reference at another step gives no answer or another one
        m = re.search(r"the result of step (\d+)", t["question"])
        k = int(m.group(1))
        other = next((j for j in range(1, len(t["program"])) if j != k), None)
        if other is not None:
            q = t["question"][:m.start()] + f"the result of step {other}" + \
                t["question"][m.end():]
            answers = solve(q, t["toolset"], make_world(t["domain"], t["world_seed"]))
            changed += answers != [t["answer"]]
    assert changed >= len(joined) // 2


def test_thousand_tasks_cover_the_tools_fast_and_verify():
    """The issue's synthesis bars at 1000 tasks: >= 90% of tools used, <= 30 s (one core
    here is faster than that by far), every task replay- and solver-verified."""
    import time

    from jaxpapers.benchmarks.dive.verify import solver_verified

    t0 = time.process_time()
    ts = synthesize(1000, seed=2)
    cpu = time.process_time() - t0
    d = diversity(ts)
    assert d["tools_covered_frac"] >= 0.9, d
    assert d["unique_toolsets"] >= 990 and d["unique_call_graphs"] >= 400, d
    assert cpu <= 30, cpu
    assert all(replay(t, sandboxed=False) and solver_verified(t) for t in ts)
