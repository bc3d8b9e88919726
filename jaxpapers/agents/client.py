"""An OpenAI-compatible chat client and the LLM agent that calls tools through it.

The agent benchmarks (ExCyTIn's ``ExcytinEnv`` with tools ``execute_sql``/``submit``, DIVE's tool
worlds) run offline with scripted agents by default. An LLM is used only when the user points
the library at an endpoint that speaks the OpenAI chat-completions API (vLLM, llama.cpp,
Ollama, a hosted API) through environment variables read by ``OpenAICompatClient.from_env``:

* ``JAXPAPERS_LLM_BASE_URL``: e.g. ``http://localhost:8000/v1`` (unset: no LLM, the default);
* ``JAXPAPERS_LLM_MODEL``: the model name (required once the base URL is set);
* ``JAXPAPERS_LLM_API_KEY``: sent as ``Authorization: Bearer ...`` when set.

``ToolCallingAgent`` keeps the conversation (system, user question, then an assistant message
with one tool call and the matching tool message per step) and turns the model's first tool
call into a ``ToolCall``. Only the standard library is needed (``transport="httpx"`` optional).
"""

from __future__ import annotations

import copy
import http.client
import json
import os
import time
import urllib.error
import urllib.request
from typing import Any, Callable, Mapping, Sequence

from jaxpapers.agents._types import LLMError, Observation, ToolCall

__all__ = ["DEFAULT_SYSTEM_PROMPT", "OpenAICompatClient", "ToolCallingAgent"]

ENV_BASE_URL = "JAXPAPERS_LLM_BASE_URL"
ENV_MODEL = "JAXPAPERS_LLM_MODEL"
ENV_API_KEY = "JAXPAPERS_LLM_API_KEY"

DEFAULT_SYSTEM_PROMPT = (
    "You are an agent that solves the user's task by calling the provided tools. "
    "Call exactly one tool per turn and read its result before the next call. "
    "When you know the answer, call the tool that submits it.")
NUDGE = "Call one of the tools."

_SNIPPET = 300  # characters of a response body quoted in an error message


class _ConnectionFailure(Exception):
    """The request did not get an HTTP answer (refused, reset, timed out); retried."""


def _snippet(text: str, limit: int = _SNIPPET) -> str:
    """``text`` on one line (whitespace runs collapsed), cut to ``limit`` characters."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + "..."


def _retry_after(headers: Mapping | None) -> float | None:
    """The ``Retry-After`` header in seconds, or None when absent or not a number (an HTTP
    date is not supported: the exponential backoff is used instead)."""
    if headers is None:
        return None
    value = headers.get("Retry-After")
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        return None
    return max(seconds, 0.0) if seconds == seconds else None  # NaN -> None


class OpenAICompatClient:
    """A minimal client of the OpenAI chat-completions HTTP API (``POST {base_url}/chat/
    completions``), with retries on rate limits, server errors and connection failures.

    Args:
      base_url: the API root including the version, e.g. ``http://localhost:8000/v1``; must
        start with ``http://`` or ``https://`` (a trailing ``/`` is dropped).
      model: the model name sent in every request.
      api_key: sent as ``Authorization: Bearer <api_key>`` when given; never shown by ``repr``.
      timeout_s: seconds to wait for one HTTP answer (> 0); a timeout counts as a connection
        failure and is retried.
      max_retries: retries after the first attempt (>= 0) on HTTP 429, 5xx and connection
        failures. Other 4xx raise ``LLMError`` at once.
      backoff_s: retry ``i`` (from 0) waits ``backoff_s * 2**i`` seconds, or the response's
        ``Retry-After`` seconds when present.
      transport: ``"urllib"`` (standard library, default) or ``"httpx"`` (needs httpx).
      sleep: the function used to wait between retries (tests pass a recorder).

    >>> client = OpenAICompatClient("http://localhost:8000/v1", "qwen", api_key="secret")
    >>> client
    OpenAICompatClient(base_url='http://localhost:8000/v1', model='qwen', api_key='***',
      transport='urllib')
    """

    def __init__(self, base_url: str, model: str, api_key: str | None = None, *,
                 timeout_s: float = 60.0, max_retries: int = 3, backoff_s: float = 1.0,
                 transport: str = "urllib", sleep: Callable[[float], Any] = time.sleep):
        if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
            raise ValueError("OpenAICompatClient base_url must start with http:// or https://, "
                             f"got {base_url!r}")
        if not isinstance(model, str) or not model.strip():
            raise ValueError(f"OpenAICompatClient model must be a non-empty str, got {model!r}")
        if api_key is not None and not isinstance(api_key, str):
            raise ValueError("OpenAICompatClient api_key must be a str or None, got "
                             f"{type(api_key).__name__}")
        if (isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float))
                or not timeout_s > 0):
            raise ValueError(f"OpenAICompatClient timeout_s must be > 0, got {timeout_s!r}")
        if isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0:
            raise ValueError("OpenAICompatClient max_retries must be an int >= 0, got "
                             f"{max_retries!r}")
        if (isinstance(backoff_s, bool) or not isinstance(backoff_s, (int, float))
                or not backoff_s >= 0):
            raise ValueError(f"OpenAICompatClient backoff_s must be >= 0, got {backoff_s!r}")
        if transport not in ("urllib", "httpx"):
            raise ValueError('OpenAICompatClient transport must be "urllib" or "httpx", got '
                             f"{transport!r}")
        if transport == "httpx":
            try:
                import httpx  # noqa: F401  (optional dependency)
            except ImportError:
                raise ValueError('OpenAICompatClient transport="httpx" needs the httpx package, '
                                 'which is not installed; use transport="urllib"') from None
        self.base_url = base_url.rstrip("/")
        self.model = model
        self._api_key = api_key or None
        self.timeout_s = float(timeout_s)
        self.max_retries = max_retries
        self.backoff_s = float(backoff_s)
        self.transport = transport
        self._sleep = sleep

    def __repr__(self) -> str:
        key = None if self._api_key is None else "***"
        return (f"OpenAICompatClient(base_url={self.base_url!r}, model={self.model!r}, "
                f"api_key={key!r}, transport={self.transport!r})")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None,
                 **kwargs) -> OpenAICompatClient | None:
        """The client configured by environment variables, or None when no LLM is configured.

        Args:
          environ: the variables to read (default ``os.environ``): ``JAXPAPERS_LLM_BASE_URL``
            (unset or empty: returns None), ``JAXPAPERS_LLM_MODEL`` (required when the base URL
            is set) and ``JAXPAPERS_LLM_API_KEY`` (optional).
          **kwargs: passed to the constructor (``timeout_s``, ``max_retries``, ...).

        Returns:
          An ``OpenAICompatClient``, or None (LLM use is off by default).

        >>> OpenAICompatClient.from_env({}) is None
        True
        >>> OpenAICompatClient.from_env({"JAXPAPERS_LLM_BASE_URL": "http://h:1/v1",
        ...                              "JAXPAPERS_LLM_MODEL": "m"}).model
        'm'
        """
        environ = os.environ if environ is None else environ
        base_url = (environ.get(ENV_BASE_URL) or "").strip()
        if not base_url:
            return None
        model = (environ.get(ENV_MODEL) or "").strip()
        if not model:
            raise ValueError(f"{ENV_BASE_URL} is set ({base_url!r}) but {ENV_MODEL} is not: "
                             "set it to the model name the server serves")
        api_key = (environ.get(ENV_API_KEY) or "").strip() or None
        return cls(base_url, model, api_key, **kwargs)

    @property
    def url(self) -> str:
        """The chat-completions endpoint."""
        return self.base_url + "/chat/completions"

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self._api_key is not None:
            headers["Authorization"] = f"Bearer {self._api_key}"
        return headers

    def _send_urllib(self, payload: bytes) -> tuple[int, Mapping, str]:
        request = urllib.request.Request(self.url, data=payload, headers=self._headers(),
                                         method="POST")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                body = response.read().decode("utf-8", errors="replace")
                return response.status, response.headers, body
        except urllib.error.HTTPError as err:  # an HTTP answer with an error status
            body = err.read().decode("utf-8", errors="replace") if err.fp is not None else ""
            return err.code, err.headers, body
        except (urllib.error.URLError, OSError, http.client.HTTPException) as err:
            raise _ConnectionFailure(f"{type(err).__name__}: {err}") from err

    def _send_httpx(self, payload: bytes) -> tuple[int, Mapping, str]:
        import httpx

        try:
            response = httpx.post(self.url, content=payload, headers=self._headers(),
                                  timeout=self.timeout_s)
        except httpx.TransportError as err:
            raise _ConnectionFailure(f"{type(err).__name__}: {err}") from err
        return response.status_code, response.headers, response.text

    def chat(self, messages: Sequence[Mapping], *, tools: Sequence[Mapping] | None = None,
             **params) -> dict:
        """One chat completion; returns the first choice's message.

        Args:
          messages: the conversation, OpenAI message dicts (``role``, ``content``, ...).
          tools: OpenAI function-tool specs offered to the model (omitted from the request when
            None or empty).
          **params: further request fields (``temperature``, ``max_tokens``, ``tool_choice``,
            ``seed``, ...), sent as given.

        Returns:
          The ``message`` dict of ``choices[0]``: ``role``, ``content`` (str or None) and, when
          the model called tools, ``tool_calls``.

        Raises:
          LLMError: a 4xx other than 429; 429/5xx/connection failures still failing after
            ``max_retries`` retries; a response that is not the expected JSON.
        """
        body: dict[str, Any] = {"model": self.model, "messages": list(messages)}
        if tools:
            body["tools"] = list(tools)
        body.update(params)
        payload = json.dumps(body).encode("utf-8")
        send = self._send_httpx if self.transport == "httpx" else self._send_urllib
        last, last_status = "", None
        for attempt in range(self.max_retries + 1):
            wait, last_status = None, None
            try:
                status, headers, text = send(payload)
            except _ConnectionFailure as err:
                last = f"connection failure: {err}"
            else:
                if 200 <= status < 300:
                    return self._first_message(text)
                if status != 429 and status < 500:
                    raise LLMError(f"{self.url} answered HTTP {status}: {_snippet(text)}",
                                   status=status)
                last, last_status = f"HTTP {status}: {_snippet(text)}", status
                wait = _retry_after(headers)
            if attempt < self.max_retries:
                self._sleep(self.backoff_s * 2 ** attempt if wait is None else wait)
        raise LLMError(f"{self.url} failed after {self.max_retries + 1} attempts; last: {last}",
                       status=last_status)

    def _first_message(self, text: str) -> dict:
        """``choices[0].message`` of a chat-completions response body."""
        try:
            data = json.loads(text)
        except json.JSONDecodeError:
            raise LLMError(f"{self.url} answered with invalid JSON: {_snippet(text)}") from None
        try:
            message = data["choices"][0]["message"]
        except (KeyError, IndexError, TypeError):
            message = None
        if not isinstance(message, dict):
            raise LLMError(f"{self.url} answered without choices[0].message: {_snippet(text)}")
        return message


class ToolCallingAgent:
    """An ``Agent`` backed by a chat model that calls the environment's tools.

    The conversation is ``system``, ``user`` (the initial observation's text), then per step the
    assistant message carrying one tool call and a ``{"role": "tool", "tool_call_id",
    "content"}`` message with the next observation's text. Only the first tool call of a reply
    is executed and kept in the stored assistant message (so every ``tool_call_id`` gets an
    answer); a missing call id is filled in as ``call_<n>``. Arguments that are not a JSON
    object become ``{"__raw__": <the string>}`` so the environment reports the error (see
    ``validate_arguments``) and the conversation stays valid.

    When the model answers in plain text, the agent appends the reply and a user nudge ("Call
    one of the tools.") and asks again, up to ``max_text_replies`` times; then it returns
    ``text_fallback(text)`` when given (e.g. treat the text as the final answer: ``lambda t:
    ToolCall("submit", {"answer": t})``; the next observation is then sent as a user message),
    else raises ``LLMError``.

    Args:
      client: an ``OpenAICompatClient`` or any object with the same ``chat`` method.
      system_prompt: the system message.
      temperature: sent with every request (None: not sent, the server's default).
      max_text_replies: nudges after plain-text replies before giving up (>= 0).
      text_fallback: ``str -> ToolCall`` used when the model keeps answering in text.
      **params: further request fields for every call (``max_tokens``, ``tool_choice``, ...).

    >>> class Fake:  # a stand-in for OpenAICompatClient
    ...     def chat(self, messages, *, tools=None, **params):
    ...         return {"role": "assistant", "content": None, "tool_calls": [{
    ...             "id": "c1", "type": "function",
    ...             "function": {"name": "submit", "arguments": '{"answer": 5}'}}]}
    >>> agent = ToolCallingAgent(Fake())
    >>> agent.reset(Observation("What is 2 + 3?"), tools=[])
    >>> agent.act(Observation("What is 2 + 3?"))
    ToolCall(name='submit', arguments={'answer': 5}, id='c1')
    """

    def __init__(self, client: Any, *, system_prompt: str = DEFAULT_SYSTEM_PROMPT,
                 temperature: float | None = 0.0, max_text_replies: int = 2,
                 text_fallback: Callable[[str], ToolCall] | None = None, **params):
        if not callable(getattr(client, "chat", None)):
            raise ValueError("ToolCallingAgent client must have a chat(messages, *, tools, "
                             f"**params) method, got {type(client).__name__}")
        if not isinstance(system_prompt, str):
            raise ValueError("ToolCallingAgent system_prompt must be a str, got "
                             f"{type(system_prompt).__name__}")
        if (isinstance(max_text_replies, bool) or not isinstance(max_text_replies, int)
                or max_text_replies < 0):
            raise ValueError("ToolCallingAgent max_text_replies must be an int >= 0, got "
                             f"{max_text_replies!r}")
        if text_fallback is not None and not callable(text_fallback):
            raise ValueError("ToolCallingAgent text_fallback must be callable or None, got "
                             f"{type(text_fallback).__name__}")
        self.client = client
        self.system_prompt = system_prompt
        self.max_text_replies = max_text_replies
        self.text_fallback = text_fallback
        self.params = dict(params)
        if temperature is not None:
            self.params["temperature"] = temperature
        self._messages: list[dict] | None = None
        self._tools: list[dict] = []
        self._pending: tuple[str, str] | None = None  # how to send the next observation
        self._num_calls = 0

    @property
    def messages(self) -> list[dict]:
        """A copy of the conversation so far (for transcripts and logs)."""
        return copy.deepcopy(self._messages or [])

    def reset(self, observation: Observation, tools: list[dict]) -> None:
        """Starts a conversation: the system prompt and the initial observation as the user's
        message; ``tools`` are offered to the model on every request."""
        self._messages = [{"role": "system", "content": self.system_prompt},
                          {"role": "user", "content": observation.text}]
        self._tools = list(tools)
        self._pending = None
        self._num_calls = 0

    def act(self, observation: Observation) -> ToolCall:
        """Sends the observation (as the answer to the previous tool call) and returns the
        model's next tool call; see the class docstring for text replies and bad arguments."""
        if self._messages is None:
            raise RuntimeError("ToolCallingAgent.act called before reset")
        if self._pending is not None:
            kind, call_id = self._pending
            if kind == "tool":
                self._messages.append({"role": "tool", "tool_call_id": call_id,
                                       "content": observation.text})
            else:  # the previous call came from text_fallback: no tool call to answer
                self._messages.append({"role": "user", "content": observation.text})
            self._pending = None
        text = ""
        for reply in range(self.max_text_replies + 1):
            message = self.client.chat(list(self._messages), tools=self._tools or None,
                                       **self.params)
            if not isinstance(message, Mapping):
                raise LLMError(f"chat returned {type(message).__name__}, not a message dict")
            tool_calls = message.get("tool_calls") or []
            if tool_calls:
                return self._take_first(message, tool_calls[0])
            text = message.get("content") or ""
            self._messages.append({"role": "assistant", "content": text})
            if reply < self.max_text_replies:
                self._messages.append({"role": "user", "content": NUDGE})
        if self.text_fallback is not None:
            call = self.text_fallback(text)
            if not isinstance(call, ToolCall):
                raise TypeError("ToolCallingAgent text_fallback must return a ToolCall, got "
                                f"{type(call).__name__}")
            self._pending = ("user", "")
            return call
        raise LLMError(f"the model answered in text {self.max_text_replies + 1} times without "
                       f"calling a tool; last reply: {_snippet(text)}")

    def _take_first(self, message: Mapping, first: Any) -> ToolCall:
        """Stores the assistant message with only its first tool call and decodes that call."""
        function = first.get("function") if isinstance(first, Mapping) else None
        name = function.get("name") if isinstance(function, Mapping) else None
        if not isinstance(name, str) or not name:
            raise LLMError(f"malformed tool call from the model: {_snippet(repr(first))}")
        self._num_calls += 1
        call_id = first.get("id") or f"call_{self._num_calls}"
        raw = function.get("arguments")
        if isinstance(raw, Mapping):  # some servers send an object instead of a JSON string
            arguments, raw = dict(raw), json.dumps(raw)
        elif raw is None or (isinstance(raw, str) and not raw.strip()):
            arguments, raw = {}, "{}"  # a call without arguments
        else:
            raw = raw if isinstance(raw, str) else json.dumps(raw)
            try:
                arguments = json.loads(raw)
            except json.JSONDecodeError:
                arguments = None
            if not isinstance(arguments, dict):
                arguments = {"__raw__": raw}
        self._messages.append({
            "role": "assistant", "content": message.get("content"),
            "tool_calls": [{"id": call_id, "type": "function",
                            "function": {"name": name, "arguments": raw}}]})
        self._pending = ("tool", call_id)
        return ToolCall(name=name, arguments=arguments, id=call_id)
