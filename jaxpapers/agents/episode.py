"""Running an agent in a tool environment, and helpers for environments' tool specs.

``run_episode`` is the loop shared by the agent benchmarks: ExCyTIn's ``ExcytinEnv`` (tools
``execute_sql`` and ``submit`` over a security-incident database) and DIVE's synthesized tool
worlds. ``tool_spec`` builds the OpenAI function-tool dict an environment lists in ``tools()``,
and ``validate_arguments`` lets its ``step`` reject a malformed call with a message the agent can
read and correct (a minimal JSON-schema check of the top-level arguments).
"""

from __future__ import annotations

import copy
import re
import time
from typing import Any, Mapping

from jaxpapers.agents._types import Agent, Environment, Episode, StepResult, ToolCall

__all__ = ["run_episode", "tool_spec", "validate_arguments"]

_TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")  # the OpenAI API's limit on function names

# JSON-schema type name -> check of a decoded JSON value (bool is not an integer or a number;
# an integral float such as 3.0 is not an integer here, so environments can index with it).
_TYPE_CHECKS = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "array": lambda v: isinstance(v, (list, tuple)),
    "object": lambda v: isinstance(v, Mapping),
    "null": lambda v: v is None,
}


def tool_spec(name: str, description: str, parameters: dict) -> dict:
    """An OpenAI function-tool spec, the format of ``Environment.tools()``.

    Args:
      name: the function name the model calls (letters, digits, ``_`` and ``-``, up to 64).
      description: what the tool does, for the model.
      parameters: a JSON schema of the arguments, ``{"type": "object", "properties": {...},
        "required": [...]}``; it is copied.

    Returns:
      ``{"type": "function", "function": {"name", "description", "parameters"}}``.

    >>> spec = tool_spec("add", "Adds two integers.", {
    ...     "type": "object", "required": ["a", "b"],
    ...     "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}})
    >>> spec["function"]["name"], spec["type"]
    ('add', 'function')
    """
    if not isinstance(name, str) or not _TOOL_NAME.match(name):
        raise ValueError("tool_spec name must be 1 to 64 letters, digits, '_' or '-', "
                         f"got {name!r}")
    if not isinstance(description, str):
        raise ValueError(f"tool_spec description must be a str, got {type(description).__name__}")
    if not isinstance(parameters, Mapping) or parameters.get("type") != "object":
        raise ValueError('tool_spec parameters must be a JSON schema dict with "type": "object", '
                         f"got {parameters!r}")
    return {"type": "function", "function": {"name": name, "description": description,
                                             "parameters": copy.deepcopy(dict(parameters))}}


def _function_of(spec: Mapping) -> Mapping:
    """The ``function`` part of a tool spec (accepts the whole tool dict or that part)."""
    if not isinstance(spec, Mapping):
        raise ValueError(f"validate_arguments spec must be a dict, got {type(spec).__name__}")
    function = spec.get("function") if spec.get("type") == "function" else spec
    if not isinstance(function, Mapping) or not isinstance(function.get("name"), str):
        raise ValueError("validate_arguments spec must be a tool spec (see tool_spec) or its "
                         f'"function" dict with a "name", got {spec!r}')
    return function


def validate_arguments(spec: Mapping, arguments: Any) -> str | None:
    """Checks a call's arguments against a tool spec; a message for the agent, or None if fine.

    A minimal JSON-schema check of the top level: the arguments form an object, every
    ``required`` key is present, each given key with a declared ``type`` (a name or a list of
    names among string, integer, number, boolean, array, object, null) has a value of that type,
    values with an ``enum`` are in it, and with ``"additionalProperties": false`` no other key is
    given. Nested schemas are not checked. Arguments holding the ``"__raw__"`` key (the model's
    arguments were not a JSON object, see ``ToolCallingAgent``) are reported as such.

    Args:
      spec: the tool spec (``tool_spec``'s dict) or its ``"function"`` dict.
      arguments: the call's decoded arguments (``ToolCall.arguments``).

    Returns:
      None when the arguments fit, else an error message naming the tool and the argument.

    >>> spec = tool_spec("submit", "Final answer.", {
    ...     "type": "object", "required": ["answer"],
    ...     "properties": {"answer": {"type": "integer"}}})
    >>> validate_arguments(spec, {"answer": 5}) is None
    True
    >>> validate_arguments(spec, {"answer": "five"})
    "submit: argument 'answer' must be of type integer, got str ('five')"
    >>> validate_arguments(spec, {})
    "submit: missing required argument 'answer'"
    """
    function = _function_of(spec)
    name = function["name"]
    if not isinstance(arguments, Mapping):
        return f"{name}: arguments must be a JSON object, got {type(arguments).__name__}"
    if "__raw__" in arguments:
        return (f"{name}: arguments are not a valid JSON object: {_snippet(arguments['__raw__'])}"
                "; send the arguments as a JSON object")
    schema = function.get("parameters") or {}
    properties = schema.get("properties") or {}
    for key in schema.get("required") or ():
        if key not in arguments:
            return f"{name}: missing required argument {key!r}"
    if schema.get("additionalProperties") is False:
        for key in arguments:
            if key not in properties:
                allowed = ", ".join(sorted(properties)) or "none"
                return f"{name}: unknown argument {key!r} (allowed: {allowed})"
    for key, value in arguments.items():
        prop = properties.get(key)
        if not isinstance(prop, Mapping):
            continue
        types = prop.get("type")
        types = [types] if isinstance(types, str) else list(types or ())
        known = [t for t in types if t in _TYPE_CHECKS]
        if known and not any(_TYPE_CHECKS[t](value) for t in known):
            return (f"{name}: argument {key!r} must be of type {' or '.join(known)}, "
                    f"got {type(value).__name__} ({_snippet(value)})")
        if "enum" in prop and value not in prop["enum"]:
            return f"{name}: argument {key!r} must be one of {list(prop['enum'])}, got {value!r}"
    return None


def _snippet(value: Any, limit: int = 200) -> str:
    """``repr(value)`` cut to ``limit`` characters."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def run_episode(env: Environment, agent: Agent, task: Any, *, max_steps: int,
                raise_errors: bool = False) -> Episode:
    """Runs ``agent`` in ``env`` on ``task`` until the environment says done or steps run out.

    The loop: ``obs = env.reset(task)``, ``agent.reset(obs, env.tools())`` (tools are read after
    the reset, so they may depend on the task), then up to ``max_steps`` times ``call =
    agent.act(obs)``, ``result = env.step(call)``, ``obs = result.observation``, stopping after
    a result with ``done``. Every call goes to ``env.step``, also one naming a tool that is not
    in ``env.tools()`` or with malformed arguments: the environment answers it with an error
    observation (``validate_arguments`` helps), so the agent can correct itself.

    If the agent raises (an ``LLMError`` when the LLM is unreachable, a bug in a scripted
    policy), the episode ends there and the exception is recorded in ``Episode.error``; with
    ``raise_errors=True`` it propagates instead. Exceptions from the environment always
    propagate (an environment should answer bad calls, not raise).

    Args:
      env: the environment (``Environment`` protocol).
      agent: the agent (``Agent`` protocol), e.g. ``ToolCallingAgent`` or a scripted one.
      task: passed unchanged to ``env.reset`` and kept in the episode.
      max_steps: the most environment steps (>= 1); an episode cut here has ``done=False``.
      raise_errors: re-raise the agent's exceptions instead of recording them.

    Returns:
      The ``Episode``: calls, results, final reward (0.0 unless done), done, steps, seconds,
      error.

    >>> from jaxpapers.agents import Observation, StepResult, ToolCall
    >>> class Echo:  # an environment whose only tool ends the episode with reward 1
    ...     def tools(self): return [tool_spec("stop", "Stop.", {"type": "object"})]
    ...     def reset(self, task): return Observation(f"task {task}")
    ...     def step(self, call): return StepResult(Observation("bye"), reward=1.0, done=True)
    >>> class Stopper:
    ...     def reset(self, observation, tools): pass
    ...     def act(self, observation): return ToolCall("stop", {})
    >>> ep = run_episode(Echo(), Stopper(), task=7, max_steps=3)
    >>> ep.done, ep.reward, ep.steps, ep.error
    (True, 1.0, 1, None)
    """
    if isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1:
        raise ValueError(f"run_episode max_steps must be an int >= 1, got {max_steps!r}")
    start = time.perf_counter()
    calls: list[ToolCall] = []
    results: list[StepResult] = []
    error = None
    observation = env.reset(task)
    tools = env.tools()
    try:
        agent.reset(observation, tools)
    except Exception as err:  # the agent failed: record it (see docstring)
        if raise_errors:
            raise
        error = f"{type(err).__name__}: {err}"
    while error is None and len(results) < max_steps:
        try:
            call = agent.act(observation)
            if not isinstance(call, ToolCall):
                raise TypeError(f"agent.act returned {type(call).__name__}, not a ToolCall")
        except Exception as err:
            if raise_errors:
                raise
            error = f"{type(err).__name__}: {err}"
            break
        result = env.step(call)
        if not isinstance(result, StepResult):
            raise TypeError(f"env.step returned {type(result).__name__}, not a StepResult")
        calls.append(call)
        results.append(result)
        observation = result.observation
        if result.done:
            break
    done = bool(results) and bool(results[-1].done)
    return Episode(task=task, calls=tuple(calls), results=tuple(results),
                   reward=float(results[-1].reward) if done else 0.0, done=done,
                   steps=len(results), seconds=time.perf_counter() - start, error=error)
