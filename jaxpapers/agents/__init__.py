"""The shared LLM-agent layer: tool environments, agents, an OpenAI-compatible client, episodes.

Used by the agent benchmarks: ExCyTIn (``ExcytinEnv``: an agent investigates a security-incident
database with the tools ``execute_sql`` and ``submit``) and DIVE (synthesized tool worlds for
tool-use tasks). Everything works offline with scripted agents; an LLM is used only when the
user sets ``JAXPAPERS_LLM_BASE_URL`` and ``JAXPAPERS_LLM_MODEL`` (see
``OpenAICompatClient.from_env``). Plain Python: nothing here needs JAX.
"""

from jaxpapers.agents._types import (Agent, Environment, Episode, LLMError, Observation,
                                     StepResult, ToolCall)
from jaxpapers.agents.client import DEFAULT_SYSTEM_PROMPT, OpenAICompatClient, ToolCallingAgent
from jaxpapers.agents.episode import run_episode, tool_spec, validate_arguments

__all__ = [
    "Agent", "DEFAULT_SYSTEM_PROMPT", "Environment", "Episode", "LLMError", "Observation",
    "OpenAICompatClient", "StepResult", "ToolCall", "ToolCallingAgent", "run_episode",
    "tool_spec", "validate_arguments",
]
