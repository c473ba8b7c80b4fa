"""LLMClient providers tested at the HTTP boundary against a local fake API server."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from fake_llm_server import MODEL, Call, Fail, FakeLLMServer, Hang, Say

from fastaiagent.llm import (
    AssistantMessage,
    LLMAuthenticationError,
    LLMBadRequestError,
    LLMClient,
    LLMConnectionError,
    LLMError,
    LLMRateLimitError,
    LLMResponse,
    LLMServerError,
    LLMTimeoutError,
    SystemMessage,
    ToolCall,
    ToolMessage,
    ToolSpec,
    UserMessage,
)

PROVIDERS = ["openai", "anthropic", "ollama", "openai-compatible"]
WEATHER = ToolSpec(
    name="get_weather",
    description="Current weather in a city.",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)


@pytest.fixture
def server() -> Iterator[FakeLLMServer]:
    with FakeLLMServer() as fake:
        yield fake


def client_for(server: FakeLLMServer, provider: str, **options: Any) -> LLMClient:
    base_url = server.url if provider == "anthropic" else server.openai_url
    if provider in ("openai", "anthropic"):
        options.setdefault("api_key", "sk-test")
    options.setdefault("timeout", 5.0)
    return LLMClient(provider=provider, model=MODEL, base_url=base_url, **options)


def complete(llm: LLMClient, mode: str, messages: list[Any], **kw: Any) -> LLMResponse:
    """Run one completion through complete / acomplete / stream / astream."""
    if mode == "sync":
        return llm.complete(messages, **kw)
    if mode == "async":
        return asyncio.run(llm.acomplete(messages, **kw))
    if mode == "stream":
        events = list(llm.stream(messages, **kw))
    else:

        async def collect() -> list[Any]:
            return [event async for event in llm.astream(messages, **kw)]

        events = asyncio.run(collect())
    assert events[-1].kind == "done" and all(e.kind == "text" for e in events[:-1])
    response = events[-1].response
    assert response is not None
    assert "".join(e.text for e in events[:-1]) == (response.content or "")
    return response


MODES = ["sync", "async", "stream", "astream"]


# -- text ----------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("provider", PROVIDERS)
def test_text_completion(server: FakeLLMServer, provider: str, mode: str) -> None:
    server.script(Say("The sky is blue."))
    llm = client_for(server, provider)
    response = complete(llm, mode, [SystemMessage("Be brief."), UserMessage("Sky colour?")])

    assert response.content == "The sky is blue."
    assert response.tool_calls == []
    assert response.model == MODEL
    assert response.finish_reason == "stop"
    if provider != "openai-compatible":  # usage in streams is asked for only where supported
        assert (response.usage.input_tokens, response.usage.output_tokens) == (11, 7)
    (request,) = server.requests
    assert request.body["model"] == MODEL
    if provider == "anthropic":
        assert request.path == "/v1/messages"
        assert request.body["system"] == "Be brief."
        assert request.body["messages"] == [
            {"role": "user", "content": [{"type": "text", "text": "Sky colour?"}]}
        ]
        # Depending on the SDK release the key travels as x-api-key or a bearer token.
        sent = request.headers.get("x-api-key") or request.headers["authorization"]
        assert sent.removeprefix("Bearer ") == "sk-test"
    else:
        assert request.path == "/v1/chat/completions"
        assert request.body["messages"] == [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Sky colour?"},
        ]
    assert bool(request.body.get("stream")) == (mode in ("stream", "astream"))


@pytest.mark.parametrize("mode", ["stream", "astream"])
@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_stream_yields_each_delta_as_it_arrives(
    server: FakeLLMServer, provider: str, mode: str
) -> None:
    server.script(Say("Hello there, world", pieces=["Hel", "lo there", ", ", "world"]))
    llm = client_for(server, provider)
    if mode == "stream":
        events = list(llm.stream([UserMessage("hi")]))
    else:

        async def collect() -> list[Any]:
            return [e async for e in llm.astream([UserMessage("hi")])]

        events = asyncio.run(collect())
    assert [e.text for e in events if e.kind == "text"] == ["Hel", "lo there", ", ", "world"]
    assert events[-1].response is not None
    assert events[-1].response.content == "Hello there, world"


@pytest.mark.parametrize(
    ("provider", "field"),
    [("openai", "max_completion_tokens"), ("anthropic", "max_tokens"), ("ollama", "max_tokens")],
)
def test_temperature_and_max_tokens_are_sent(
    server: FakeLLMServer, provider: str, field: str
) -> None:
    llm = client_for(server, provider, temperature=0.2, max_tokens=64)
    llm.complete([UserMessage("hi")])
    body = server.requests[0].body
    assert body["temperature"] == 0.2
    assert body[field] == 64


def test_anthropic_sends_a_default_max_tokens_and_openai_none(server: FakeLLMServer) -> None:
    client_for(server, "anthropic").complete([UserMessage("hi")])
    client_for(server, "openai").complete([UserMessage("hi")])
    assert server.requests[0].body["max_tokens"] > 0
    assert "max_tokens" not in server.requests[1].body
    assert "max_completion_tokens" not in server.requests[1].body
    assert "temperature" not in server.requests[1].body


# -- tools ---------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("provider", PROVIDERS)
def test_tool_calls_are_parsed(server: FakeLLMServer, provider: str, mode: str) -> None:
    server.script(
        Say(
            "Checking.",
            calls=[
                Call("call_a", "get_weather", {"city": "Paris"}),
                Call("call_b", "get_weather", {"city": "Lyon, FR", "nested": {"n": [1, 2]}}),
            ],
        )
    )
    llm = client_for(server, provider)
    response = complete(llm, mode, [UserMessage("Weather in Paris and Lyon?")], tools=[WEATHER])

    assert response.tool_calls == [
        ToolCall("call_a", "get_weather", {"city": "Paris"}),
        ToolCall("call_b", "get_weather", {"city": "Lyon, FR", "nested": {"n": [1, 2]}}),
    ]
    assert response.content == "Checking."
    assert response.finish_reason == "tool_calls"
    body = server.requests[0].body
    if provider == "anthropic":
        assert body["tools"] == [
            {
                "name": "get_weather",
                "description": "Current weather in a city.",
                "input_schema": WEATHER.parameters,
            }
        ]
    else:
        assert body["tools"] == [
            {
                "type": "function",
                "function": {
                    "name": "get_weather",
                    "description": "Current weather in a city.",
                    "parameters": WEATHER.parameters,
                },
            }
        ]


def _conversation_with_tool_results() -> list[Any]:
    calls = [
        ToolCall("call_a", "get_weather", {"city": "Paris"}),
        ToolCall("call_b", "get_weather", {"city": "Lyon"}),
    ]
    return [
        SystemMessage("You report weather."),
        UserMessage("Paris and Lyon?"),
        AssistantMessage(None, tool_calls=calls),
        ToolMessage("sunny", tool_call_id="call_a", name="get_weather"),
        ToolMessage("rainy", tool_call_id="call_b", name="get_weather"),
        SystemMessage("Answer in one line."),
    ]


def test_openai_sends_tool_calls_and_results_back(server: FakeLLMServer) -> None:
    server.script(Say("Paris sunny, Lyon rainy."))
    response = client_for(server, "openai").complete(
        _conversation_with_tool_results(), tools=[WEATHER]
    )
    assert response.content == "Paris sunny, Lyon rainy."
    messages = server.requests[0].body["messages"]
    assert messages[2] == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_a",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
            },
            {
                "id": "call_b",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Lyon"}'},
            },
        ],
    }
    assert messages[3] == {"role": "tool", "content": "sunny", "tool_call_id": "call_a"}
    assert messages[4] == {"role": "tool", "content": "rainy", "tool_call_id": "call_b"}
    assert messages[5] == {"role": "system", "content": "Answer in one line."}


def test_anthropic_sends_tool_use_and_merged_tool_results(server: FakeLLMServer) -> None:
    server.script(Say("Paris sunny, Lyon rainy."))
    response = client_for(server, "anthropic").complete(
        _conversation_with_tool_results(), tools=[WEATHER]
    )
    assert response.content == "Paris sunny, Lyon rainy."
    body = server.requests[0].body
    assert body["system"] == "You report weather.\n\nAnswer in one line."
    assert body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "Paris and Lyon?"}]},
        {
            "role": "assistant",
            "content": [
                {
                    "type": "tool_use",
                    "id": "call_a",
                    "name": "get_weather",
                    "input": {"city": "Paris"},
                },
                {
                    "type": "tool_use",
                    "id": "call_b",
                    "name": "get_weather",
                    "input": {"city": "Lyon"},
                },
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "call_a", "content": "sunny"},
                {"type": "tool_result", "tool_use_id": "call_b", "content": "rainy"},
            ],
        },
    ]


def test_tool_call_without_arguments_gets_an_empty_dict(server: FakeLLMServer) -> None:
    server.script(Say(calls=[Call("c1", "now", {})]), Say(calls=[Call("c2", "now", {})]))
    llm = client_for(server, "openai")
    assert llm.complete([UserMessage("time?")]).tool_calls == [ToolCall("c1", "now", {})]
    assert list(llm.stream([UserMessage("time?")]))[-1].response.tool_calls == [  # type: ignore[union-attr]
        ToolCall("c2", "now", {})
    ]


@pytest.mark.parametrize("mode", ["sync", "stream"])
@pytest.mark.parametrize("raw", ['{"city": "Par', '{"city": ' + "[" * 100_000])
def test_malformed_tool_arguments_raise_a_clear_error(
    server: FakeLLMServer, mode: str, raw: str
) -> None:
    """Cut off, or nested deeper than the decoder goes: the same clear error."""
    server.script(Say(calls=[Call("c1", "get_weather", {}, raw=raw)]))
    with pytest.raises(LLMError, match=r"openai: .*'get_weather'.*not valid JSON"):
        complete(client_for(server, "openai"), mode, [UserMessage("weather?")])


def test_anthropic_streamed_tool_arguments_must_be_an_object(server: FakeLLMServer) -> None:
    server.script(Say(calls=[Call("c1", "get_weather", {}, raw="[1, 2]")]))
    with pytest.raises(LLMError, match="not a JSON object"):
        complete(client_for(server, "anthropic"), "stream", [UserMessage("weather?")])


# -- errors and retries --------------------------------------------------------------


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
@pytest.mark.parametrize("mode", MODES)
def test_429_then_200_is_retried(server: FakeLLMServer, provider: str, mode: str) -> None:
    server.script(Fail(429, "slow down"), Fail(429, "slow down"), Say("finally"))
    llm = client_for(server, provider, max_retries=2)
    assert complete(llm, mode, [UserMessage("hi")]).content == "finally"
    assert len(server.requests) == 3


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
@pytest.mark.parametrize("mode", ["sync", "astream"])
def test_429_forever_raises_rate_limit_error(
    server: FakeLLMServer, provider: str, mode: str
) -> None:
    server.default = Fail(429, "Rate limit reached for requests", headers={"retry-after-ms": "3"})
    llm = client_for(server, provider, max_retries=2)
    with pytest.raises(LLMRateLimitError, match=f"{provider}: HTTP 429, rate limited after 2") as caught:
        complete(llm, mode, [UserMessage("hi")])
    assert len(server.requests) == 3
    error = caught.value
    assert error.status_code == 429 and error.provider == provider
    assert error.retry_after == pytest.approx(0.003)
    assert "Rate limit reached for requests" in str(error)
    assert f"{provider}: HTTP 429" in str(error) and "after 2 retries" in str(error)


def test_rate_limit_error_reads_retry_after_seconds(server: FakeLLMServer) -> None:
    server.default = Fail(429, "quota", headers={"retry-after": "7"})
    with pytest.raises(LLMRateLimitError, match="the server asks to retry after 7s: quota") as caught:
        client_for(server, "openai", max_retries=0).complete([UserMessage("hi")])
    assert caught.value.retry_after == 7.0
    assert "retry after 7s" in str(caught.value)


@pytest.mark.parametrize("provider", ["openai", "anthropic", "ollama"])
@pytest.mark.parametrize("mode", ["sync", "async", "stream"])
def test_500_raises_server_error_after_retries(
    server: FakeLLMServer, provider: str, mode: str
) -> None:
    server.default = Fail(500, "The server had an error processing your request")
    llm = client_for(server, provider, max_retries=1)
    with pytest.raises(LLMServerError, match=f"{provider}: HTTP 500, server error after 1 retry") as caught:
        complete(llm, mode, [UserMessage("hi")])
    assert len(server.requests) == 2
    assert caught.value.status_code == 500
    assert "HTTP 500" in str(caught.value)
    assert "The server had an error processing your request" in str(caught.value)


def test_503_then_200_is_retried(server: FakeLLMServer) -> None:
    server.script(Fail(503, "overloaded"), Say("ok"))
    assert (
        client_for(server, "anthropic", max_retries=1).complete([UserMessage("hi")]).content == "ok"
    )


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
@pytest.mark.parametrize("mode", ["sync", "async", "stream", "astream"])
def test_bad_key_raises_authentication_error(
    server: FakeLLMServer, provider: str, mode: str
) -> None:
    server.valid_keys = {"sk-good"}
    llm = client_for(server, provider, api_key="sk-wrong", max_retries=2)
    with pytest.raises(LLMAuthenticationError, match="the API key was refused") as caught:
        complete(llm, mode, [UserMessage("hi")])
    assert len(server.requests) == 1  # 401 is not retried
    assert caught.value.status_code == 401
    assert f"{provider}: HTTP 401" in str(caught.value) and "invalid api key" in str(caught.value)
    assert "sk-wrong" not in str(caught.value)


def test_403_is_an_authentication_error(server: FakeLLMServer) -> None:
    server.default = Fail(403, "model not allowed for this project")
    with pytest.raises(LLMAuthenticationError, match="model not allowed"):
        client_for(server, "openai").complete([UserMessage("hi")])


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_400_raises_bad_request_without_retrying(server: FakeLLMServer, provider: str) -> None:
    server.default = Fail(400, "messages: field required")
    with pytest.raises(LLMBadRequestError, match=f"{provider}: HTTP 400, request refused") as caught:
        client_for(server, provider, max_retries=2).complete([UserMessage("hi")])
    assert len(server.requests) == 1
    assert caught.value.status_code == 400
    assert "HTTP 400" in str(caught.value) and "messages: field required" in str(caught.value)


# The client timeout of the hang tests: short, so a hang is cut quickly, but
# with room for a loaded CI machine to answer a healthy read in time.
TIMEOUT = 0.3


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
@pytest.mark.parametrize("mode", MODES)
def test_hanging_server_raises_timeout_error(
    server: FakeLLMServer, provider: str, mode: str
) -> None:
    server.default = Hang(10)
    llm = client_for(server, provider, timeout=TIMEOUT, max_retries=0)
    # Cut by the timeout: a hang that ran its 10 s out would end in a dropped
    # connection (LLMConnectionError), not this error.
    with pytest.raises(LLMTimeoutError, match=rf"{provider}: no answer within the {TIMEOUT:g}s timeout") as caught:
        complete(llm, mode, [UserMessage("hi")])
    assert f"{TIMEOUT:g}s timeout" in str(caught.value) and caught.value.provider == provider


def _stream_until_error(llm: LLMClient, mode: str) -> tuple[list[str], BaseException]:
    texts: list[str] = []

    async def consume() -> None:
        async for event in llm.astream([UserMessage("hi")]):
            texts.append(event.text)

    try:
        if mode == "stream":
            for event in llm.stream([UserMessage("hi")]):
                texts.append(event.text)
        else:
            asyncio.run(consume())
    except Exception as exc:
        return texts, exc
    raise AssertionError("the stream did not fail")


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
@pytest.mark.parametrize("mode", ["stream", "astream"])
def test_stream_stalling_midway_raises_timeout_error(
    server: FakeLLMServer, provider: str, mode: str
) -> None:
    # Stall after the first two text deltas (Anthropic opens with three framing events).
    server.script(Say("one two three four", stall_after=5 if provider == "anthropic" else 3))
    llm = client_for(server, provider, timeout=TIMEOUT, max_retries=0)
    # Cut by the timeout: a stall that ran its 10 s out would end the stream
    # without an error ("the stream did not fail").
    texts, error = _stream_until_error(llm, mode)
    assert isinstance(error, LLMTimeoutError), repr(error)
    assert texts == ["one", " two"]  # the deltas before the stall were delivered


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
@pytest.mark.parametrize("mode", ["stream", "astream"])
def test_error_event_inside_a_stream_raises_server_error(
    server: FakeLLMServer, provider: str, mode: str
) -> None:
    server.script(Say("partial answer", stream_error="Overloaded, try later"))
    texts, error = _stream_until_error(client_for(server, provider), mode)
    assert "".join(texts) == "partial answer"
    assert isinstance(error, LLMServerError), repr(error)
    assert f"{provider}: " in str(error) and "Overloaded, try later" in str(error)


def test_timeout_is_retried_before_giving_up(server: FakeLLMServer) -> None:
    server.script(Hang(10))
    llm = client_for(server, "openai", timeout=TIMEOUT, max_retries=1)
    assert llm.complete([UserMessage("hi")]).content == "default reply"
    assert len(server.requests) == 2


def _unused_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.parametrize("provider", ["openai", "anthropic", "ollama"])
@pytest.mark.parametrize("mode", ["sync", "async", "stream", "astream"])
def test_unreachable_server_raises_connection_error(provider: str, mode: str) -> None:
    base_url = f"http://127.0.0.1:{_unused_port()}" + ("" if provider == "anthropic" else "/v1")
    llm = LLMClient(provider, MODEL, api_key="sk-test", base_url=base_url, max_retries=0)
    with pytest.raises(LLMConnectionError, match=f"{provider}: could not connect to http://") as caught:
        complete(llm, mode, [UserMessage("hi")])
    assert base_url in str(caught.value) and caught.value.provider == provider


# -- keys and endpoints --------------------------------------------------------------


@pytest.mark.parametrize(
    ("provider", "env_var"), [("openai", "OPENAI_API_KEY"), ("anthropic", "ANTHROPIC_API_KEY")]
)
def test_missing_key_fails_at_first_call_not_construction(
    server: FakeLLMServer, provider: str, env_var: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(env_var, raising=False)
    llm = LLMClient(provider, MODEL, base_url=server.url)  # no error yet
    with pytest.raises(LLMAuthenticationError, match=f"{provider}: no API key.*{env_var}"):
        llm.complete([UserMessage("hi")])
    assert server.requests == []
    # The key can still be supplied afterwards through the environment.
    monkeypatch.setenv(env_var, "sk-from-env")
    server.valid_keys = {"sk-from-env"}
    if provider == "openai":
        llm.base_url = server.openai_url
    assert llm.complete([UserMessage("hi")]).content == "default reply"


@pytest.mark.parametrize("provider", ["ollama", "openai-compatible"])
def test_keyless_providers_never_send_the_openai_key(
    server: FakeLLMServer, provider: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret-openai")
    client_for(server, provider).complete([UserMessage("hi")])
    assert "sk-secret-openai" not in server.requests[0].headers.get("authorization", "")


def test_openai_compatible_uses_a_given_key(server: FakeLLMServer) -> None:
    server.valid_keys = {"vllm-key"}
    llm = client_for(server, "openai-compatible", api_key="vllm-key")
    assert llm.complete([UserMessage("hi")]).content == "default reply"


def test_ollama_defaults_to_the_local_ollama_endpoint() -> None:
    llm = LLMClient("ollama", "llama3.2")
    assert str(llm.backend._sync.base_url).rstrip("/") == "http://localhost:11434/v1"


def test_async_client_survives_successive_event_loops(server: FakeLLMServer) -> None:
    llm = client_for(server, "openai")
    for _ in range(3):
        assert asyncio.run(llm.acomplete([UserMessage("hi")])).content == "default reply"
    assert len(server.requests) == 3


def test_concurrent_async_calls(server: FakeLLMServer) -> None:
    llm = client_for(server, "anthropic")

    async def many() -> list[LLMResponse]:
        return await asyncio.gather(*(llm.acomplete([UserMessage(f"q{i}")]) for i in range(8)))

    assert [r.content for r in asyncio.run(many())] == ["default reply"] * 8
    assert sorted(r.body["messages"][0]["content"][0]["text"] for r in server.requests) == sorted(
        f"q{i}" for i in range(8)
    )


@pytest.mark.subprocess
def test_sdks_are_imported_only_on_first_call() -> None:
    code = (
        "import sys\n"
        "from fastaiagent import Agent, LLMClient\n"
        "LLMClient('openai', 'gpt-4.1'); LLMClient('anthropic', 'claude')\n"
        "assert 'openai' not in sys.modules and 'anthropic' not in sys.modules, sorted(sys.modules)\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    subprocess.run([sys.executable, "-c", code], check=True, env=env, timeout=60)


@pytest.mark.parametrize(("provider", "module"), [("openai", "openai"), ("anthropic", "anthropic")])
def test_missing_sdk_names_the_extra(
    provider: str, module: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, module, None)  # makes `import module` fail
    llm = LLMClient(provider, MODEL, api_key="sk-test")
    with pytest.raises(ImportError, match=rf"pip install 'fastaiagent\[{module}\]'"):
        llm.complete([UserMessage("hi")])
