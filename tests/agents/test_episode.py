"""Tests of the episode loop and the tool-spec helpers (jaxpapers.agents.episode), no HTTP.

``CalculatorEnv`` (tools ``add(a, b)`` and ``submit(answer)``; the task ``(x, y)`` asks for
``x + y``) is also the environment of the end-to-end LLM tests in ``test_client.py``.
"""

from __future__ import annotations

import dataclasses

import pytest

from jaxpapers.agents import (Agent, Environment, Episode, Observation, StepResult, ToolCall,
                              run_episode, tool_spec, validate_arguments)

_INT = {"type": "integer"}


class CalculatorEnv:
    """Task ``(x, y)``: compute ``x + y`` with ``add`` and ``submit`` it (reward 1 if right)."""

    def __init__(self):
        self._specs = [
            tool_spec("add", "Adds two integers.", {
                "type": "object", "properties": {"a": _INT, "b": _INT}, "required": ["a", "b"],
                "additionalProperties": False}),
            tool_spec("submit", "Submits the final answer and ends the episode.", {
                "type": "object", "properties": {"answer": _INT}, "required": ["answer"]}),
        ]
        self.task = None
        self.num_steps = 0

    def tools(self):
        return self._specs

    def reset(self, task):
        self.task = task
        self.num_steps = 0
        x, y = task
        return Observation(f"What is {x} + {y}? Use add, then submit the result.",
                           data={"x": x, "y": y})

    def step(self, call):
        self.num_steps += 1
        specs = {s["function"]["name"]: s for s in self._specs}
        if call.name not in specs:
            return StepResult(Observation(
                f"error: unknown tool {call.name!r}; available: {', '.join(specs)}"))
        problem = validate_arguments(specs[call.name], call.arguments)
        if problem is not None:
            return StepResult(Observation(f"error: {problem}"), info={"error": problem})
        if call.name == "add":
            total = call.arguments["a"] + call.arguments["b"]
            return StepResult(Observation(str(total), data={"sum": total}))
        right = call.arguments["answer"] == sum(self.task)
        return StepResult(Observation("correct" if right else "wrong"),
                          reward=1.0 if right else 0.0, done=True)


class ScriptedAgent:
    """Adds the task's numbers (from ``Observation.data``), then submits the sum plus ``bias``."""

    def __init__(self, bias=0):
        self.bias = bias
        self.seen: list[Observation] = []
        self.tools = None

    def reset(self, observation, tools):
        self.tools = tools
        self.seen = []

    def act(self, observation):
        self.seen.append(observation)
        if "sum" in observation.data:
            return ToolCall("submit", {"answer": observation.data["sum"] + self.bias})
        return ToolCall("add", {"a": observation.data["x"], "b": observation.data["y"]})


class ListAgent:
    """Returns the given calls in order; an exception in the list is raised instead."""

    def __init__(self, calls):
        self.calls = list(calls)

    def reset(self, observation, tools):
        pass

    def act(self, observation):
        item = self.calls.pop(0)
        if isinstance(item, BaseException):
            raise item
        return item


def test_scripted_agent_solves_the_task():
    env, agent = CalculatorEnv(), ScriptedAgent()
    ep = run_episode(env, agent, (2, 3), max_steps=5)
    assert isinstance(ep, Episode)
    assert ep.task == (2, 3) and ep.done and ep.error is None
    assert ep.reward == 1.0 and ep.steps == 2 == len(ep.calls) == len(ep.results)
    assert ep.calls == (ToolCall("add", {"a": 2, "b": 3}), ToolCall("submit", {"answer": 5}))
    assert ep.results[0].observation.text == "5" and ep.results[1].done
    assert 0.0 <= ep.seconds < 5.0
    # the agent saw the initial observation first, then the result of its previous call
    assert [o.text for o in agent.seen] == [
        "What is 2 + 3? Use add, then submit the result.", "5"]
    assert agent.tools == env.tools()


def test_wrong_answer_is_done_with_zero_reward():
    ep = run_episode(CalculatorEnv(), ScriptedAgent(bias=1), (4, 4), max_steps=5)
    assert ep.done and ep.reward == 0.0 and ep.calls[-1].arguments == {"answer": 9}


def test_max_steps_cuts_the_episode():
    env = CalculatorEnv()
    agent = ListAgent([ToolCall("add", {"a": 1, "b": i}) for i in range(10)])
    ep = run_episode(env, agent, (1, 1), max_steps=3)
    assert ep.steps == 3 == env.num_steps and not ep.done and ep.error is None
    assert ep.reward == 0.0
    assert [r.observation.text for r in ep.results] == ["1", "2", "3"]


def test_reward_is_zero_unless_done():
    class Paying(CalculatorEnv):  # pays a reward on every step but never ends the episode
        def step(self, call):
            return StepResult(Observation("ok"), reward=0.5)

    ep = run_episode(Paying(), ListAgent([ToolCall("add", {})] * 2), (0, 0), max_steps=2)
    assert not ep.done and ep.reward == 0.0 and ep.results[-1].reward == 0.5


def test_unknown_tool_and_bad_arguments_go_to_the_environment():
    agent = ListAgent([ToolCall("multiply", {"a": 2, "b": 3}),
                       ToolCall("add", {"a": "2", "b": 3}),
                       ToolCall("add", {"a": 2, "b": 3, "c": 4}),
                       ToolCall("submit", {"answer": 5})])
    ep = run_episode(CalculatorEnv(), agent, (2, 3), max_steps=10)
    texts = [r.observation.text for r in ep.results]
    assert texts[0] == "error: unknown tool 'multiply'; available: add, submit"
    assert texts[1] == "error: add: argument 'a' must be of type integer, got str ('2')"
    assert texts[2] == "error: add: unknown argument 'c' (allowed: a, b)"
    assert ep.done and ep.reward == 1.0 and ep.steps == 4


def test_agent_exception_is_recorded():
    agent = ListAgent([ToolCall("add", {"a": 1, "b": 2}), RuntimeError("LLM down")])
    ep = run_episode(CalculatorEnv(), agent, (1, 2), max_steps=5)
    assert ep.error == "RuntimeError: LLM down"
    assert ep.steps == 1 and not ep.done and ep.reward == 0.0


def test_agent_exception_raised_when_asked():
    agent = ListAgent([RuntimeError("LLM down")])
    with pytest.raises(RuntimeError, match="LLM down"):
        run_episode(CalculatorEnv(), agent, (1, 2), max_steps=5, raise_errors=True)


def test_agent_reset_exception_and_wrong_return_type_are_recorded():
    class BadReset(ScriptedAgent):
        def reset(self, observation, tools):
            raise KeyError("tools")

    ep = run_episode(CalculatorEnv(), BadReset(), (1, 2), max_steps=5)
    assert ep.error == "KeyError: 'tools'" and ep.steps == 0 and ep.calls == ()
    ep = run_episode(CalculatorEnv(), ListAgent([{"name": "add"}]), (1, 2), max_steps=5)
    assert ep.error == "TypeError: agent.act returned dict, not a ToolCall" and ep.steps == 0


def test_environment_exception_propagates():
    class Broken(CalculatorEnv):
        def step(self, call):
            raise ZeroDivisionError("bug in the environment")

    with pytest.raises(ZeroDivisionError):
        run_episode(Broken(), ScriptedAgent(), (1, 2), max_steps=5)


@pytest.mark.parametrize("max_steps", [0, -1, 1.5, True, None])
def test_bad_max_steps(max_steps):
    with pytest.raises(ValueError, match="max_steps"):
        run_episode(CalculatorEnv(), ScriptedAgent(), (1, 2), max_steps=max_steps)


def test_protocols_and_frozen_types():
    assert isinstance(CalculatorEnv(), Environment) and isinstance(ScriptedAgent(), Agent)
    assert not isinstance(ScriptedAgent(), Environment)
    ep = run_episode(CalculatorEnv(), ScriptedAgent(), (1, 2), max_steps=5)
    with pytest.raises(dataclasses.FrozenInstanceError):
        ep.reward = 2.0
    with pytest.raises(dataclasses.FrozenInstanceError):
        ep.calls[0].name = "submit"
    assert Observation("x").data == {} and StepResult(Observation("x")).info == {}
    assert ToolCall("f").arguments == {} and ToolCall("f").id == ""
    with pytest.raises(TypeError, match="text"):
        Observation(5)
    with pytest.raises(TypeError, match="arguments"):
        ToolCall("f", '{"a": 1}')
    with pytest.raises(TypeError, match="observation"):
        StepResult("text")


def test_tool_spec_builds_the_openai_format_and_copies():
    params = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}
    spec = tool_spec("execute_sql", "Runs one SQL query.", params)
    assert spec == {"type": "function", "function": {
        "name": "execute_sql", "description": "Runs one SQL query.", "parameters": params}}
    params["properties"]["q"]["type"] = "integer"
    assert spec["function"]["parameters"]["properties"]["q"] == {"type": "string"}


@pytest.mark.parametrize("name, description, parameters, match", [
    ("", "d", {"type": "object"}, "name"),
    ("has space", "d", {"type": "object"}, "name"),
    ("x" * 65, "d", {"type": "object"}, "name"),
    ("f", None, {"type": "object"}, "description"),
    ("f", "d", {"properties": {}}, "parameters"),
    ("f", "d", [], "parameters"),
])
def test_tool_spec_bad_arguments(name, description, parameters, match):
    with pytest.raises(ValueError, match=match):
        tool_spec(name, description, parameters)


_SPEC = tool_spec("search", "Searches.", {
    "type": "object", "required": ["query"],
    "properties": {
        "query": {"type": "string"}, "limit": {"type": "integer"}, "score": {"type": "number"},
        "exact": {"type": "boolean"}, "fields": {"type": "array"}, "filter": {"type": "object"},
        "after": {"type": ["string", "null"]}, "order": {"type": "string", "enum": ["asc", "desc"]},
        "free": {}}})


@pytest.mark.parametrize("arguments, expected", [
    ({"query": "x"}, None),
    ({"query": "x", "limit": 3, "score": 0.5, "exact": False, "fields": ["a"],
      "filter": {"k": 1}, "after": None, "order": "desc", "free": object(), "other": 1}, None),
    ({"query": "x", "score": 2}, None),  # an integer is a number
    ({"query": "x", "after": "id7"}, None),
    ({}, "search: missing required argument 'query'"),
    ({"query": 5}, "search: argument 'query' must be of type string, got int (5)"),
    ({"query": "x", "limit": True}, "search: argument 'limit' must be of type integer, got bool"),
    ({"query": "x", "limit": 3.0}, "search: argument 'limit' must be of type integer, got float"),
    ({"query": "x", "score": "1"}, "search: argument 'score' must be of type number, got str"),
    ({"query": "x", "exact": 1}, "search: argument 'exact' must be of type boolean, got int"),
    ({"query": "x", "fields": "a"}, "search: argument 'fields' must be of type array, got str"),
    ({"query": "x", "filter": []}, "search: argument 'filter' must be of type object, got list"),
    ({"query": "x", "after": 1}, "search: argument 'after' must be of type string or null"),
    ({"query": "x", "order": "up"}, "search: argument 'order' must be one of ['asc', 'desc']"),
    ({"__raw__": '{"query": "x"'}, "search: arguments are not a valid JSON object"),
    ([1, 2], "search: arguments must be a JSON object, got list"),
])
def test_validate_arguments(arguments, expected):
    message = validate_arguments(_SPEC, arguments)
    if expected is None:
        assert message is None
    else:
        assert message is not None and message.startswith(expected), message


def test_validate_arguments_accepts_the_function_part_and_rejects_bad_specs():
    assert validate_arguments(_SPEC["function"], {"query": "x"}) is None
    assert "missing" in validate_arguments(_SPEC["function"], {})
    no_params = {"type": "function", "function": {"name": "ping"}}
    assert validate_arguments(no_params, {}) is None
    for bad in ({"type": "function"}, {"parameters": {}}, "search"):
        with pytest.raises(ValueError, match="spec"):
            validate_arguments(bad, {})
