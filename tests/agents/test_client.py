"""Tests of OpenAICompatClient (against a fake chat server) and ToolCallingAgent.

The fake server is pytest-httpserver's ``httpserver`` fixture answering ``POST /v1/chat/
completions`` with canned replies; the end-to-end test runs ``CalculatorEnv`` (test_episode.py)
with a ``ToolCallingAgent`` over it. Retry waits go to a recorder, so nothing sleeps.
"""

from __future__ import annotations

import copy
import json
import socket
import sys

import pytest

from jaxpapers.agents import (Agent, LLMError, Observation, OpenAICompatClient, ToolCall,
                              ToolCallingAgent, run_episode)
from jaxpapers.agents.client import NUDGE
from tests.agents.test_episode import CalculatorEnv

PATH = "/v1/chat/completions"
TRANSPORTS = ["urllib", "httpx"]


def _tool_calls(*calls):
    """OpenAI ``tool_calls`` entries from ``(id, name, arguments)`` (arguments: dict or str)."""
    return [{"id": i, "type": "function",
             "function": {"name": n, "arguments": a if isinstance(a, str) else json.dumps(a)}}
            for i, n, a in calls]


def _reply(content=None, *calls):
    """A chat-completions response body whose first choice has the given content and calls."""
    message = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = _tool_calls(*calls)
    return {"id": "chatcmpl-1", "object": "chat.completion", "model": "toy",
            "choices": [{"index": 0, "message": message,
                         "finish_reason": "tool_calls" if calls else "stop"}]}


class Sleeps(list):
    """Records the requested waits instead of sleeping."""

    def __call__(self, seconds):
        self.append(seconds)


def _client(httpserver, **kwargs):
    kwargs.setdefault("sleep", Sleeps())
    return OpenAICompatClient(httpserver.url_for("/v1"), "toy-model", **kwargs)


def _bodies(httpserver):
    return [json.loads(request.get_data()) for request, _ in httpserver.log]


@pytest.fixture
def closed_port():
    """A local port with nothing listening (connections are refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_chat_sends_model_messages_tools_params_and_auth(httpserver, transport):
    reply = _reply(None, ("call_9", "add", {"a": 1, "b": 2}))
    httpserver.expect_request(PATH, method="POST").respond_with_json(reply)
    client = _client(httpserver, api_key="sk-test", transport=transport)
    tools = CalculatorEnv().tools()
    messages = [{"role": "user", "content": "1 + 2?"}]
    message = client.chat(messages, tools=tools, temperature=0.0, max_tokens=64)
    assert message == reply["choices"][0]["message"]
    (request, _), = httpserver.log
    assert request.headers["Authorization"] == "Bearer sk-test"
    assert request.headers["Content-Type"] == "application/json"
    assert json.loads(request.get_data()) == {"model": "toy-model", "messages": messages,
                                              "tools": tools, "temperature": 0.0,
                                              "max_tokens": 64}


def test_chat_without_key_or_tools(httpserver):
    httpserver.expect_request(PATH, method="POST").respond_with_json(_reply("hello"))
    client = _client(httpserver)
    assert client.chat([{"role": "user", "content": "hi"}])["content"] == "hello"
    (request, _), = httpserver.log
    assert "Authorization" not in request.headers
    assert json.loads(request.get_data()) == {
        "model": "toy-model", "messages": [{"role": "user", "content": "hi"}]}


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_end_to_end_episode_over_the_fake_server(httpserver, transport):
    httpserver.expect_ordered_request(PATH, method="POST").respond_with_json(
        _reply("Let me add.", ("call_1", "add", {"a": 2, "b": 3})))
    httpserver.expect_ordered_request(PATH, method="POST").respond_with_json(
        _reply(None, ("call_2", "submit", {"answer": 5})))
    env = CalculatorEnv()
    agent = ToolCallingAgent(_client(httpserver, api_key="k", transport=transport),
                             system_prompt="Be brief.")
    ep = run_episode(env, agent, (2, 3), max_steps=5)
    httpserver.check_assertions()
    assert ep.error is None and ep.done and ep.reward == 1.0 and ep.steps == 2
    assert ep.calls == (ToolCall("add", {"a": 2, "b": 3}, "call_1"),
                        ToolCall("submit", {"answer": 5}, "call_2"))
    first, second = _bodies(httpserver)
    question = "What is 2 + 3? Use add, then submit the result."
    assert first["messages"] == [{"role": "system", "content": "Be brief."},
                                 {"role": "user", "content": question}]
    assert first["tools"] == second["tools"] == env.tools()
    assert first["temperature"] == 0.0 and first["model"] == "toy-model"
    assert second["messages"] == first["messages"] + [
        {"role": "assistant", "content": "Let me add.",
         "tool_calls": _tool_calls(("call_1", "add", {"a": 2, "b": 3}))},
        {"role": "tool", "tool_call_id": "call_1", "content": "5"}]
    # the agent's transcript ends with the submit call (its answer was never needed)
    assert agent.messages[-1]["tool_calls"][0]["id"] == "call_2"


def test_retry_on_429_and_500_honours_retry_after(httpserver):
    httpserver.expect_ordered_request(PATH).respond_with_data(
        "slow down", status=429, headers={"Retry-After": "7"})
    httpserver.expect_ordered_request(PATH).respond_with_data("overloaded", status=503)
    httpserver.expect_ordered_request(PATH).respond_with_json(_reply("ok"))
    client = _client(httpserver, max_retries=3, backoff_s=0.5)
    assert client.chat([{"role": "user", "content": "hi"}])["content"] == "ok"
    httpserver.check_assertions()
    # Retry-After for the 429; backoff_s * 2**1 for the second (503) failure
    assert client._sleep == [7.0, 1.0] and len(httpserver.log) == 3


def test_server_errors_exhaust_retries(httpserver):
    httpserver.expect_request(PATH).respond_with_data("boom", status=500)
    client = _client(httpserver, max_retries=2, backoff_s=0.25)
    with pytest.raises(LLMError, match="failed after 3 attempts; last: HTTP 500: boom") as info:
        client.chat([{"role": "user", "content": "hi"}])
    assert info.value.status == 500
    assert len(httpserver.log) == 3 and client._sleep == [0.25, 0.5]


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_client_error_is_not_retried(httpserver, transport):
    httpserver.expect_request(PATH).respond_with_json({"error": "unknown model"}, status=400)
    client = _client(httpserver, transport=transport)
    with pytest.raises(LLMError, match="HTTP 400.*unknown model") as info:
        client.chat([{"role": "user", "content": "hi"}])
    assert info.value.status == 400 and len(httpserver.log) == 1 and client._sleep == []


@pytest.mark.parametrize("body, match", [
    ("<html>not json</html>", "invalid JSON: <html>not json</html>"),
    (json.dumps({"choices": []}), "without choices"),
    (json.dumps({"error": {"message": "x"}}), "without choices"),
    (json.dumps([1, 2]), "without choices"),
])
def test_malformed_response_body(httpserver, body, match):
    httpserver.expect_request(PATH).respond_with_data(body, status=200)
    client = _client(httpserver)
    with pytest.raises(LLMError, match=match):
        client.chat([{"role": "user", "content": "hi"}])
    assert len(httpserver.log) == 1  # a malformed 200 answer is not retried


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_unreachable_server_retries_then_fails(closed_port, transport):
    sleeps = Sleeps()
    client = OpenAICompatClient(f"http://127.0.0.1:{closed_port}/v1", "m", max_retries=2,
                                backoff_s=0.1, transport=transport, sleep=sleeps)
    with pytest.raises(LLMError, match="failed after 3 attempts; last: connection failure"):
        client.chat([{"role": "user", "content": "hi"}])
    assert sleeps == [0.1, 0.2]


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_timeout_is_a_connection_failure(transport):
    with socket.socket() as sock:  # accepts connections (kernel backlog) but never answers
        sock.bind(("127.0.0.1", 0))
        sock.listen(4)
        port = sock.getsockname()[1]
        client = OpenAICompatClient(f"http://127.0.0.1:{port}/v1", "m", timeout_s=0.1,
                                    max_retries=0, transport=transport)
        with pytest.raises(LLMError, match="failed after 1 attempts; last: connection failure"):
            client.chat([{"role": "user", "content": "hi"}])


def test_unreachable_llm_ends_the_episode_with_an_error(closed_port):
    client = OpenAICompatClient(f"http://127.0.0.1:{closed_port}/v1", "m", max_retries=0)
    ep = run_episode(CalculatorEnv(), ToolCallingAgent(client), (1, 2), max_steps=3)
    assert ep.error.startswith("LLMError: ") and "connection failure" in ep.error
    assert ep.steps == 0 and not ep.done and ep.reward == 0.0


def test_text_reply_is_nudged_over_http(httpserver):
    httpserver.expect_ordered_request(PATH).respond_with_json(_reply("The answer is 5."))
    httpserver.expect_ordered_request(PATH).respond_with_json(
        _reply(None, ("c1", "submit", {"answer": 5})))
    agent = ToolCallingAgent(_client(httpserver))
    agent.reset(Observation("2 + 3?"), CalculatorEnv().tools())
    assert agent.act(Observation("2 + 3?")) == ToolCall("submit", {"answer": 5}, "c1")
    httpserver.check_assertions()
    second = _bodies(httpserver)[1]["messages"]
    assert second[-2:] == [{"role": "assistant", "content": "The answer is 5."},
                           {"role": "user", "content": NUDGE}]


class FakeClient:
    """Returns the given assistant messages in order and records (messages, tools, params)."""

    def __init__(self, *messages):
        self.replies = list(messages)
        self.requests = []

    def chat(self, messages, *, tools=None, **params):
        self.requests.append((copy.deepcopy(messages), tools, params))
        return self.replies.pop(0)


def _message(content=None, *calls):
    return _reply(content, *calls)["choices"][0]["message"]


def test_text_replies_exhausted_raise_or_fall_back():
    texts = [_message(f"text {i}") for i in range(3)]
    agent = ToolCallingAgent(FakeClient(*texts), max_text_replies=1)
    agent.reset(Observation("q"), [])
    with pytest.raises(LLMError, match="answered in text 2 times.*text 1"):
        agent.act(Observation("q"))

    client = FakeClient(_message("42"), _message(None, ("c1", "add", {"a": 1, "b": 1})))
    agent = ToolCallingAgent(client, max_text_replies=0,
                             text_fallback=lambda t: ToolCall("submit", {"answer": t}))
    agent.reset(Observation("q"), [])
    assert agent.act(Observation("q")) == ToolCall("submit", {"answer": "42"})
    # the fallback call has no tool_call_id: its result goes back as a user message
    assert agent.act(Observation("wrong, try again")).name == "add"
    assert client.requests[1][0][-2:] == [{"role": "assistant", "content": "42"},
                                          {"role": "user", "content": "wrong, try again"}]


@pytest.mark.parametrize("raw, arguments", [
    ('{"a": 1, "b": ', {"__raw__": '{"a": 1, "b": '}),
    ("[1, 2]", {"__raw__": "[1, 2]"}),
    ("", {}),
    ('{"a": 1, "b": 2}', {"a": 1, "b": 2}),
])
def test_arguments_decoding(raw, arguments):
    client = FakeClient(_message(None, ("c1", "add", raw)), _message("done"))
    agent = ToolCallingAgent(client, max_text_replies=0, text_fallback=lambda t: ToolCall("x"))
    agent.reset(Observation("q"), [])
    call = agent.act(Observation("q"))
    assert call == ToolCall("add", arguments, "c1")
    agent.act(Observation("error: bad arguments"))
    # the conversation stays valid: the stored call keeps a JSON string and gets its answer
    sent = client.requests[1][0]
    assert sent[-2]["tool_calls"][0]["function"]["arguments"] == (raw or "{}")
    assert sent[-1] == {"role": "tool", "tool_call_id": "c1", "content": "error: bad arguments"}


def test_arguments_sent_as_an_object_are_accepted():
    message = _message()
    message["tool_calls"] = [{"id": "c1", "type": "function",
                              "function": {"name": "add", "arguments": {"a": 1, "b": 2}}}]
    agent = ToolCallingAgent(FakeClient(message))
    agent.reset(Observation("q"), [])
    assert agent.act(Observation("q")).arguments == {"a": 1, "b": 2}
    assert agent.messages[-1]["tool_calls"][0]["function"]["arguments"] == '{"a": 1, "b": 2}'


def test_only_the_first_of_several_tool_calls_is_kept():
    client = FakeClient(
        _message(None, ("c1", "add", {"a": 1, "b": 2}), ("c2", "submit", {"answer": 3})),
        _message(None, ("c3", "submit", {"answer": 3})))
    agent = ToolCallingAgent(client, temperature=0.7, max_tokens=32)
    agent.reset(Observation("q"), CalculatorEnv().tools())
    assert agent.act(Observation("q")).id == "c1"
    assert agent.act(Observation("3")).id == "c3"
    messages, tools, params = client.requests[1]
    assert [c["id"] for c in messages[-2]["tool_calls"]] == ["c1"]
    assert messages[-1] == {"role": "tool", "tool_call_id": "c1", "content": "3"}
    assert tools == CalculatorEnv().tools() and params == {"temperature": 0.7, "max_tokens": 32}


def test_missing_call_id_is_generated_and_temperature_none_is_omitted():
    message = _message(None, ("", "add", {"a": 1, "b": 2}))
    client = FakeClient(message, _message(None, ("", "submit", {"answer": 3})))
    agent = ToolCallingAgent(client, temperature=None)
    agent.reset(Observation("q"), [])
    assert agent.act(Observation("q")).id == "call_1"
    assert agent.act(Observation("3")).id == "call_2"
    messages, tools, params = client.requests[1]
    assert messages[-1]["tool_call_id"] == "call_1" and tools is None and params == {}


def test_malformed_tool_call_and_act_before_reset():
    message = _message()
    message["tool_calls"] = [{"id": "c1", "type": "function", "function": {}}]
    agent = ToolCallingAgent(FakeClient(message))
    with pytest.raises(RuntimeError, match="before reset"):
        agent.act(Observation("q"))
    agent.reset(Observation("q"), [])
    with pytest.raises(LLMError, match="malformed tool call"):
        agent.act(Observation("q"))


def test_tool_calling_agent_is_an_agent_and_rejects_bad_arguments():
    assert isinstance(ToolCallingAgent(FakeClient()), Agent)
    with pytest.raises(ValueError, match="client"):
        ToolCallingAgent(object())
    with pytest.raises(ValueError, match="max_text_replies"):
        ToolCallingAgent(FakeClient(), max_text_replies=-1)
    with pytest.raises(ValueError, match="text_fallback"):
        ToolCallingAgent(FakeClient(), text_fallback="submit")
    with pytest.raises(ValueError, match="system_prompt"):
        ToolCallingAgent(FakeClient(), system_prompt=None)


def test_from_env(monkeypatch):
    assert OpenAICompatClient.from_env({}) is None
    assert OpenAICompatClient.from_env({"JAXPAPERS_LLM_BASE_URL": " "}) is None
    monkeypatch.delenv("JAXPAPERS_LLM_BASE_URL", raising=False)
    assert OpenAICompatClient.from_env() is None  # off by default
    with pytest.raises(ValueError, match="JAXPAPERS_LLM_MODEL"):
        OpenAICompatClient.from_env({"JAXPAPERS_LLM_BASE_URL": "http://h:8000/v1"})
    environ = {"JAXPAPERS_LLM_BASE_URL": "https://h:8000/v1/", "JAXPAPERS_LLM_MODEL": "qwen",
               "JAXPAPERS_LLM_API_KEY": "sk-secret"}
    client = OpenAICompatClient.from_env(environ, max_retries=5)
    assert client.base_url == "https://h:8000/v1" and client.model == "qwen"
    assert client.url == "https://h:8000/v1/chat/completions" and client.max_retries == 5
    assert "sk-secret" not in repr(client) and "'***'" in repr(client)
    monkeypatch.setenv("JAXPAPERS_LLM_BASE_URL", "http://h:1/v1")
    monkeypatch.setenv("JAXPAPERS_LLM_MODEL", "m")
    monkeypatch.delenv("JAXPAPERS_LLM_API_KEY", raising=False)
    client = OpenAICompatClient.from_env()
    assert client.model == "m" and "api_key=None" in repr(client)


@pytest.mark.parametrize("kwargs, match", [
    (dict(base_url="localhost:8000/v1"), "base_url"),
    (dict(base_url="ftp://h/v1"), "base_url"),
    (dict(model=""), "model"),
    (dict(api_key=123), "api_key"),
    (dict(timeout_s=0), "timeout_s"),
    (dict(timeout_s=-1.0), "timeout_s"),
    (dict(max_retries=-1), "max_retries"),
    (dict(max_retries=1.5), "max_retries"),
    (dict(backoff_s=-0.1), "backoff_s"),
    (dict(transport="curl"), "transport"),
])
def test_bad_constructor_arguments(kwargs, match):
    args = dict(base_url="http://h:8000/v1", model="m") | kwargs
    with pytest.raises(ValueError, match=match):
        OpenAICompatClient(**args)


def test_httpx_transport_needs_httpx(monkeypatch):
    monkeypatch.setitem(sys.modules, "httpx", None)  # makes `import httpx` fail
    with pytest.raises(ValueError, match="httpx"):
        OpenAICompatClient("http://h:8000/v1", "m", transport="httpx")
