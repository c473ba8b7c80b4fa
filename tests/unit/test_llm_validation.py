"""LLMClient and the test LLMs check their arguments at construction."""

from __future__ import annotations

import pytest

from fastaiagent import LLMClient
from fastaiagent.errors import InvalidTypeError, InvalidValueError
from fastaiagent.llm.providers import make_provider
from fastaiagent.testing import CannedLLM, FunctionLLM


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"timeout": "5"}, InvalidTypeError, "timeout must be a number, got str '5'"),
        ({"timeout": 0}, InvalidValueError, "timeout must be > 0, got 0"),
        ({"timeout": float("inf")}, InvalidValueError, "timeout must be a finite number"),
        ({"max_retries": "2"}, InvalidTypeError, "max_retries must be an int, got str '2'"),
        ({"max_retries": -1}, InvalidValueError, "max_retries must be >= 0, got -1"),
        ({"max_retries": 1.5}, InvalidTypeError, "max_retries must be an int, got float"),
        ({"temperature": "hot"}, InvalidTypeError, "temperature must be a number, got str"),
        ({"temperature": -0.5}, InvalidValueError, "temperature must be >= 0.0, got -0.5"),
        ({"max_tokens": 0}, InvalidValueError, "max_tokens must be >= 1, got 0"),
        ({"max_tokens": "64"}, InvalidTypeError, "max_tokens must be an int, got str"),
        ({"api_key": 123}, InvalidTypeError, "api_key must be a str, got int"),
        ({"base_url": b"http://x"}, InvalidTypeError, "base_url must be a str, got bytes"),
        ({"provider": "gemini"}, InvalidValueError, "provider must be one of 'openai', 'anthropic'"),
        ({"model": ""}, InvalidValueError, "LLMClient needs a model name, e.g. model='gpt-4.1'"),
        ({"model": 4}, InvalidTypeError, "model must be a str, got int"),
        (
            {"provider": "openai-compatible"},
            InvalidValueError,
            "provider='openai-compatible' needs base_url=",
        ),
    ],
)
def test_bad_client_arguments_fail_at_construction(kwargs, error, match):
    arguments = {"provider": "openai", "model": "gpt-4.1", **kwargs}
    with pytest.raises(error, match=match):
        LLMClient(**arguments)


def test_good_client_arguments_are_kept():
    llm = LLMClient("ollama", "llama3.2", timeout=5, max_retries=0, temperature=0, max_tokens=32)
    assert (llm.timeout, llm.max_retries, llm.temperature, llm.max_tokens) == (5.0, 0, 0.0, 32)
    assert LLMClient("openai", "gpt-4.1", api_key="").api_key == ""  # "" means not set


def test_make_provider_needs_a_client():
    with pytest.raises(InvalidTypeError, match="make_provider needs an LLMClient, got CannedLLM"):
        make_provider(CannedLLM("x"))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("build", "error", "match"),
    [
        (lambda: CannedLLM("x", delay="1"), InvalidTypeError, "delay must be a number, got str"),
        (lambda: CannedLLM("x", delay=-1), InvalidValueError, "delay must be >= 0.0, got -1"),
        (lambda: CannedLLM("x", model=""), InvalidValueError, "model cannot be empty"),
        (lambda: CannedLLM("x", repeat_last="no"), InvalidTypeError, "repeat_last must be True or False"),
        (lambda: CannedLLM([]), InvalidValueError, "CannedLLM needs at least one reply"),
        (lambda: CannedLLM([{"a": 1}]), InvalidTypeError, "cannot turn dict into an LLM reply"),
        (lambda: FunctionLLM("x"), InvalidTypeError, "FunctionLLM needs a callable"),
        (lambda: FunctionLLM(str, supports_tools=1), InvalidTypeError, "supports_tools must be True"),
    ],
)
def test_bad_test_llm_arguments_fail_at_construction(build, error, match):
    with pytest.raises(error, match=match):
        build()


def test_function_llm_sees_the_tools_offered_when_it_asks():
    from fastaiagent.llm.base import ToolSpec
    from fastaiagent.llm.message import UserMessage

    spec = ToolSpec("record", "Record.", {"type": "object", "properties": {}})
    seen = FunctionLLM(lambda messages, tools: ",".join(t.name for t in tools) or "none")
    assert seen.complete([UserMessage("hi")], tools=[spec]).content == "record"
    assert seen.complete([UserMessage("hi")]).content == "none"
    assert seen.tools_offered == [[spec], []]
    plain = FunctionLLM(lambda messages: "plain")
    assert plain.complete([UserMessage("hi")], tools=[spec]).content == "plain"
