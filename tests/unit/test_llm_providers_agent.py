"""End to end: an Agent with a function tool on a real provider client and a local fake API."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from fake_llm_server import MODEL, Call, FakeLLMServer, Recorded, Say

from fastaiagent import Agent, LLMClient
from fastaiagent.agent.agent import AgentResult, StreamDelta


def get_weather(city: str) -> str:
    """Current weather in a city."""
    return {"Paris": "sunny, 21C"}.get(city, "unknown")


def _tool_result(request: Recorded) -> str | None:
    """The tool output in the last message of an OpenAI or Anthropic request, if any."""
    last = request.body["messages"][-1]
    if last["role"] == "tool":
        return str(last["content"])
    content = last.get("content")
    if isinstance(content, list):
        for block in content:
            if block.get("type") == "tool_result":
                return str(block["content"])
    return None


def weather_model(request: Recorded) -> Say:
    """Call get_weather first; once the result is back, answer with it."""
    result = _tool_result(request)
    if result is None:
        return Say("Let me check.", calls=[Call("call_1", "get_weather", {"city": "Paris"})])
    return Say(f"Paris is {result} today.")


@pytest.fixture
def server() -> Iterator[FakeLLMServer]:
    with FakeLLMServer() as fake:
        fake.default = weather_model
        yield fake


@pytest.mark.parametrize("provider", ["openai", "anthropic", "ollama"])
def test_agent_run_arun_astream_agree(server: FakeLLMServer, provider: str) -> None:
    base_url = server.url if provider == "anthropic" else server.openai_url
    llm = LLMClient(provider, MODEL, api_key="sk-test", base_url=base_url, timeout=5.0)
    agent = Agent("weather", llm, "You report the weather.", tools=[get_weather])

    ran = agent.run("Weather in Paris?")
    aran = asyncio.run(agent.arun("Weather in Paris?"))

    async def stream() -> tuple[list[str], AgentResult]:
        deltas: list[str] = []
        final: Any = None
        async for event in agent.astream("Weather in Paris?"):
            if isinstance(event, StreamDelta):
                deltas.append(event.text)
            else:
                final = event
        return deltas, final

    deltas, streamed = asyncio.run(stream())

    expected = "Paris is sunny, 21C today."
    assert ran.output == aran.output == streamed.output == expected
    # Deltas cover both model turns: the text before the tool call, then the answer.
    assert "".join(deltas) == "Let me check." + expected
    for result in (ran, aran, streamed):
        assert result.tool_calls == [
            {"name": "get_weather", "arguments": {"city": "Paris"}, "output": "sunny, 21C"}
        ]
        assert result.usage.input_tokens == 22  # two model calls, 11 prompt tokens each
    assert len(server.requests) == 6
    first, second = server.requests[0].body, server.requests[1].body
    assert [t.get("name") or t["function"]["name"] for t in first["tools"]] == ["get_weather"]
    assert _tool_result(server.requests[1]) == "sunny, 21C"
    assert len(second["messages"]) > len(first["messages"])


def _client(server: FakeLLMServer, provider: str) -> LLMClient:
    base_url = server.url if provider == "anthropic" else server.openai_url
    return LLMClient(provider, MODEL, api_key="sk-test", base_url=base_url, timeout=5.0, max_retries=0)


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_invalid_tool_arguments_go_back_to_the_model_over_http(
    server: FakeLLMServer, provider: str
) -> None:
    server.script(
        Say(calls=[Call("c1", "get_weather", {"city": ["Paris"]})]),
        Say(calls=[Call("c2", "get_weather", {"city": "Paris"})]),
    )
    result = Agent("weather", _client(server, provider), tools=[get_weather]).run("Paris?")
    assert result.output == "Paris is sunny, 21C today."
    error = _tool_result(server.requests[1])
    assert error is not None
    assert error.startswith("error: invalid arguments for tool 'get_weather': city: Input should be")
    assert _tool_result(server.requests[2]) == "sunny, 21C"


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_extraction_reads_a_record_facts_call_over_http(server: FakeLLMServer, provider: str) -> None:
    from fastaiagent.learn.extractor import ExtractedFact, extract_facts

    server.script(Say(calls=[Call("c1", "record_facts", {"facts": [{"fact": "Prefers Slack", "replaces": "F1"}]})]))
    llm = _client(server, provider)
    assert extract_facts(llm, "use Slack", known_facts=["Prefers email"]) == [
        ExtractedFact("Prefers Slack", 0)
    ]
    tools = server.requests[0].body["tools"]
    assert [t.get("name") or t["function"]["name"] for t in tools] == ["record_facts"]


def test_a_server_refusing_tools_gets_a_text_extraction_request(server: FakeLLMServer) -> None:
    from fake_llm_server import Fail

    from fastaiagent.learn.extractor import ExtractedFact, aextract_facts, extract_facts

    server.script(
        Fail(400, "registry.ollama.ai/library/gemma does not support tools"),
        Say('{"facts": [{"fact": "Lives in Oslo"}]}'),
        Say('["Has a dog"]'),
    )
    llm = _client(server, "ollama")
    assert extract_facts(llm, "I live in Oslo") == [ExtractedFact("Lives in Oslo")]
    assert asyncio.run(aextract_facts(llm, "my dog")) == [ExtractedFact("Has a dog")]
    assert ["tools" in r.body for r in server.requests] == [True, False, False]
