"""DIVE's LLM explorer over the shared agent layer, with scripted stand-ins for the model."""

from __future__ import annotations

import ast
import json
import random
import re

import pytest

from jaxpapers.benchmarks.dive.synth import (LLMExplorer, TypeDirectedExplorer, synthesize,
                                             synthesize_one)
from jaxpapers.benchmarks.dive.verify import replay, solver_verified
from jaxpapers.benchmarks.dive.worlds import make_world


def _call(name: str, args: dict, n: int) -> dict:
    return {"role": "assistant", "content": None, "tool_calls": [{
        "id": f"c{n}", "type": "function",
        "function": {"name": name, "arguments": json.dumps(args)}}]}


class Scripted:
    """Replies with a fixed list of calls, then finish_round forever; records requests."""

    def __init__(self, calls):
        self.calls, self.requests = list(calls), []

    def chat(self, messages, *, tools=None, **params):
        self.requests.append({"messages": [dict(m) for m in messages], "tools": tools,
                              "params": params})
        n = len(self.requests)
        if self.calls:
            name, args = self.calls.pop(0)
            return _call(name, args, n)
        return _call("finish_round", {}, n)


def _resolved(trace, short=False):
    out = {c["id"]: c["output"] for c in trace}
    return [(c["tool"].split(".", 1)[1] if short else c["tool"],
             {k: out[v["ref"]] if isinstance(v, dict) else v for k, v in c["args"].items()})
            for c in trace]


def _script(trace, per_round=5):
    """The type-directed trace as model replies (literal values), rounds closed explicitly."""
    calls = []
    for rnd in (1, 2, 3):
        these = [(t, a) for (t, a), c in zip(_resolved(trace, True), trace)
                 if c["round"] == rnd]
        calls += these
        if len(these) < per_round:
            calls.append(("finish_round", {}))
    return calls


@pytest.mark.parametrize("index", range(6))
def test_llm_explorer_rebuilds_the_type_directed_trace(index):
    """A model that sends the type-directed explorer's calls as literal values gets the same
    trace back: same tools, outputs and resolved arguments; refs recovered from the values."""
    task = synthesize_one(index, seed=11, explorer=TypeDirectedExplorer())
    world = make_world(task["domain"], task["world_seed"])
    seed = (task["seed_entity"]["type"], task["seed_entity"]["value"])
    client = Scripted(_script(task["trace"]))
    got = LLMExplorer(client).explore(world, task["toolset"], seed, random.Random(0))
    want = task["trace"]
    assert _resolved(got) == _resolved(want)
    assert [c["output"] for c in got] == [c["output"] for c in want]
    # a ref where the type-directed explorer used one (the same id unless two outputs agree)
    for g, w in zip(got, want):
        first = next(iter(w["args"]))
        assert isinstance(g["args"][first], dict) == isinstance(w["args"][first], dict)
    # the model was offered exactly the toolset (+ finish_round), with return types
    offered = {t["function"]["name"] for t in client.requests[0]["tools"]}
    assert offered == {n.split(".", 1)[1] for n in task["toolset"]} | {"finish_round"}
    assert all("Returns:" in t["function"]["description"] for t in client.requests[0]["tools"]
               if t["function"]["name"] != "finish_round")
    assert client.requests[0]["params"]["temperature"] == 0.0


def test_llm_explorer_rejects_bad_calls_without_logging_them():
    task = synthesize_one(0, seed=11)
    world = make_world(task["domain"], task["world_seed"])
    seed = (task["seed_entity"]["type"], task["seed_entity"]["value"])
    tool, args = _resolved(task["trace"], True)[0]
    first = next(iter(args))
    bad = [("no_such_tool", {}),
           (tool, {**args, first: "definitely not an earlier value"}),
           (tool, {k: v for k, v in args.items() if k != first}),
           (tool, {**args, "extra": 1}),
           (tool, args)]  # finally a good one
    if len(args) > 1:
        bad.insert(0, (tool, {**args, list(args)[1]: [1, 2]}))
    client = Scripted(bad)
    trace = LLMExplorer(client, rounds=1, calls_per_round=len(bad)).explore(
        world, task["toolset"], seed, random.Random(0))
    assert len(trace) == 1 and trace[0]["tool"] == task["trace"][0]["tool"]
    assert trace[0]["id"] == 1
    replies = [m["content"] for m in client.requests[-1]["messages"] if m["role"] == "tool"]
    assert len(replies) == len(bad) - 1 and all(r.startswith("error:") for r in replies)
    assert "unknown tool" in replies[len(bad) - 5]


def test_llm_explorer_limits_depth_and_carries_results_across_rounds():
    def distinct(t):  # every value in the chain differs (values, not ids, are sent back)
        vals = [json.dumps(t["seed_entity"]["value"])] + [json.dumps(c["output"])
                                                          for c in t["program"]]
        return len(set(vals)) == len(vals)

    task = next(t for i in range(80) if (t := synthesize_one(i, seed=3)) and
                len(t["program"]) >= 3 and distinct(t))
    world = make_world(task["domain"], task["world_seed"])
    seed = (task["seed_entity"]["type"], task["seed_entity"]["value"])
    prog = _resolved(task["program"], True)
    client = Scripted(prog)  # round 1 ends by the call limit (2), round 2 gets the rest
    trace = LLMExplorer(client, rounds=2, calls_per_round=2, max_depth=2).explore(
        world, task["toolset"], seed, random.Random(0))
    assert [c["tool"] for c in trace] == [c["tool"] for c in task["program"][:2]]
    # round 1 ended by the call limit: round 2's prompt carries the second call's result
    users = [m for m in client.requests[2]["messages"] if m["role"] == "tool"]
    assert "Round 2 of 2" in users[-1]["content"]
    out = task["program"][1]["output"]
    assert users[-1]["content"].startswith(out if isinstance(out, str) else json.dumps(out))
    deep = [m["content"] for m in client.requests[-1]["messages"] if m["role"] == "tool"]
    assert any("limited to 2" in c for c in deep)


class GreedyChainer:
    """A stand-in model: from the seed in the prompt, chains one-argument tools by type
    (read from the specs and the 'Returns:' line), at most three, then finishes."""

    def __init__(self):
        self.n = 0

    def chat(self, messages, *, tools=None, **params):
        self.n += 1
        first = messages[1]["content"]
        m = re.search(r"Start from the (.+?) ('.*?'|-?\d+)\. ", first)
        cur_type, cur = m.group(1).replace(" ", "_"), ast.literal_eval(m.group(2))
        made = [json.loads(c["function"]["arguments"]) and c["function"]["name"]
                for msg in messages if msg["role"] == "assistant"
                for c in msg.get("tool_calls") or [] if c["function"]["name"] != "finish_round"]
        results = [msg["content"] for msg in messages if msg["role"] == "tool"]
        specs = {t["function"]["name"]: t["function"] for t in tools}
        for name, res in zip(made, results):
            text = res.split("\n\n")[0]
            if not text.startswith("error"):
                cur_type = re.search(r"Returns: (\w+)\.", specs[name]["description"]).group(1)
                cur = text if not text[:1] in "[{0123456789-" else json.loads(text)
        for name in sorted(specs):
            props = specs[name]["parameters"].get("properties", {})
            if (name not in made and len(props) == 1 and len(made) < 3
                    and next(iter(props.values()))["x-type"] == cur_type):
                return _call(name, {next(iter(props)): cur}, self.n)
        return _call("finish_round", {}, self.n)


def test_synthesize_with_an_llm_explorer_end_to_end():
    kw = dict(seed=4, domains=("bio", "academic"))
    a = synthesize(6, explorer=LLMExplorer(GreedyChainer()), **kw)
    b = synthesize(6, explorer=LLMExplorer(GreedyChainer()), **kw)
    assert a == b  # the stand-in is deterministic, so is synthesis
    for task in a:
        assert replay(task) and solver_verified(task)
        assert all(c["tool"] in task["toolset"] for c in task["program"])


def test_llm_explorer_bad_arguments():
    with pytest.raises(ValueError, match="client"):
        LLMExplorer(object())
    with pytest.raises(ValueError, match="rounds"):
        LLMExplorer(Scripted([]), rounds=0)
    with pytest.raises(ValueError, match="explorer"):
        synthesize(1, seed=0, explorer=object())
