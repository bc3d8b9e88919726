"""Types of the LLM-agent layer: tool calls, observations, step results, episodes, protocols.

An *environment* offers tools (OpenAI function-tool JSON specs) and answers one ``ToolCall`` at a
time with a ``StepResult``; an *agent* (an LLM behind ``ToolCallingAgent`` or a scripted policy)
chooses the next ``ToolCall`` from the latest ``Observation``. ``run_episode`` drives the two and
returns an ``Episode``. Plain Python: nothing here needs JAX.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Protocol, runtime_checkable

__all__ = ["Agent", "Environment", "Episode", "LLMError", "Observation", "StepResult",
           "ToolCall"]


class LLMError(RuntimeError):
    """An LLM endpoint failed: HTTP error, unreachable server, malformed reply, no tool call.

    Attributes:
      status: the HTTP status code when the failure was an HTTP answer, else None.
    """

    def __init__(self, message: str, *, status: int | None = None):
        super().__init__(message)
        self.status = status


@dataclasses.dataclass(frozen=True)
class ToolCall:
    """One call of a named tool, as an agent chose it.

    Attributes:
      name: the tool's name (``function.name`` of one of the environment's tool specs; an unknown
        name is still passed to the environment, which answers with an error observation).
      arguments: the decoded JSON arguments. When an LLM sent arguments that are not a JSON
        object, ``ToolCallingAgent`` puts the raw string under the key ``"__raw__"``
        (``validate_arguments`` turns that into a clear error message).
      id: the LLM's ``tool_call_id`` ("" for scripted agents); it pairs the call with its answer.
    """

    name: str
    arguments: dict = dataclasses.field(default_factory=dict)
    id: str = ""

    def __post_init__(self):
        if not isinstance(self.name, str):
            raise TypeError(f"ToolCall name must be a str, got {type(self.name).__name__}")
        if not isinstance(self.arguments, dict):
            raise TypeError(
                f"ToolCall arguments must be a dict, got {type(self.arguments).__name__}")


@dataclasses.dataclass(frozen=True)
class Observation:
    """What the environment shows after a reset or a step.

    Attributes:
      text: what an LLM sees (the content of the tool message or of the first user message).
      data: structured extras for scripted agents and logging (rows of a query result, ids);
        never sent to an LLM.
    """

    text: str
    data: Mapping = dataclasses.field(default_factory=dict)

    def __post_init__(self):
        if not isinstance(self.text, str):
            raise TypeError(f"Observation text must be a str, got {type(self.text).__name__}")


@dataclasses.dataclass(frozen=True)
class StepResult:
    """The environment's answer to one ``ToolCall``.

    Attributes:
      observation: what the agent sees next.
      reward: the reward of this step (for a benchmark usually 0 until the final answer).
      done: True when the episode is over (e.g. after a ``submit`` call).
      info: extras for logging and scoring (never sent to an LLM).
    """

    observation: Observation
    reward: float = 0.0
    done: bool = False
    info: Mapping = dataclasses.field(default_factory=dict)

    def __post_init__(self):
        if not isinstance(self.observation, Observation):
            raise TypeError("StepResult observation must be an Observation, got "
                            f"{type(self.observation).__name__}")


@dataclasses.dataclass(frozen=True)
class Episode:
    """The record of one ``run_episode``.

    Attributes:
      task: the task the environment was reset with.
      calls: the tool calls in order, one per step.
      results: the environment's answers, ``results[i]`` to ``calls[i]``.
      reward: the reward of the final step when the episode ended with ``done``; 0.0 otherwise.
      done: whether the environment ended the episode (False when cut by ``max_steps`` or error).
      steps: the number of environment steps taken (``len(results)``).
      seconds: wall-clock time of the whole episode.
      error: ``"ExceptionType: message"`` when the agent failed (raised, LLM unreachable) and the
        episode was ended early; None otherwise.
    """

    task: Any
    calls: tuple[ToolCall, ...]
    results: tuple[StepResult, ...]
    reward: float
    done: bool
    steps: int
    seconds: float
    error: str | None = None


@runtime_checkable
class Environment(Protocol):
    """A tool-using environment (ExCyTIn's ``ExcytinEnv``, DIVE's tool worlds).

    ``run_episode`` calls ``reset(task)`` first and ``tools()`` after it, so the tool list may
    depend on the task. ``step`` must answer every call, including unknown tools and malformed
    arguments, with an error observation rather than raise: an exception from the environment
    is treated as a bug and propagates.
    """

    def tools(self) -> list[dict]:
        """OpenAI function-tool specs ``{"type": "function", "function": {...}}`` (see
        ``tool_spec``)."""
        ...

    def reset(self, task: Any) -> Observation:
        """Starts an episode on ``task`` and returns the initial observation (the question)."""
        ...

    def step(self, call: ToolCall) -> StepResult:
        """Executes one tool call."""
        ...


@runtime_checkable
class Agent(Protocol):
    """A policy over tool calls: an LLM (``ToolCallingAgent``) or a scripted baseline."""

    def reset(self, observation: Observation, tools: list[dict]) -> None:
        """Starts an episode from the initial observation with the environment's tool specs."""
        ...

    def act(self, observation: Observation) -> ToolCall:
        """The next tool call. ``observation`` is the initial one on the first call after
        ``reset``, then the observation of the previous step's result."""
        ...
