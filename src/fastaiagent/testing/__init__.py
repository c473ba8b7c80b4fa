"""Deterministic LLMs for tests: no network, same answer every time.

``CannedLLM`` replays a script of replies (text, tool calls or errors);
``FunctionLLM`` answers with a function of the messages it is sent (and, if
the function takes a ``tools`` argument, of the tools offered). Both record
every call's messages in ``.calls`` and the tools offered in ``.tools_offered``
so tests can assert what the model saw. Either can answer a tool-offering
caller in text or with :func:`tool_call`, like a real model.

``RuleBasedLLM`` is a stand-in for a real model in examples and quick starts:
it answers the fact-extraction prompt of ``Memory(learn=)`` by simple rules
("my name is Alice" -> "Name is Alice") and chat turns with a short reply
(:mod:`fastaiagent.testing.rules`). :func:`remembered` gives a stand-in
model of your own the facts memory put in its prompt, without the preamble
around them, so it can answer like a chat model would.
"""

from __future__ import annotations

import inspect
import itertools
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from fastaiagent import _validate as check
from fastaiagent.errors import InvalidTypeError, InvalidValueError, UsageError
from fastaiagent.llm.base import BaseLLM, LLMResponse, ToolSpec
from fastaiagent.llm.message import Message, ToolCall
from fastaiagent.testing import rules
from fastaiagent.testing.rules import remembered

#: What a test LLM may answer: text, a whole response, tool call(s), or an exception to raise.
Reply = str | LLMResponse | ToolCall | list[ToolCall] | BaseException
_call_ids = itertools.count(1)


def tool_call(name: str, **arguments: Any) -> ToolCall:
    """A canned tool call, e.g. ``tool_call("get_weather", city="Paris")``."""
    return ToolCall(id=f"call_{next(_call_ids)}", name=name, arguments=arguments)


def _to_response(reply: Reply, model: str) -> LLMResponse:
    if isinstance(reply, BaseException):
        raise reply
    if isinstance(reply, LLMResponse):
        return reply
    if isinstance(reply, ToolCall):
        return LLMResponse(tool_calls=[reply], model=model, finish_reason="tool_calls")
    if isinstance(reply, list):
        return LLMResponse(tool_calls=list(reply), model=model, finish_reason="tool_calls")
    if isinstance(reply, str):
        return LLMResponse(content=reply, model=model, finish_reason="stop")
    raise InvalidTypeError(f"cannot turn {type(reply).__name__} into an LLM reply")


class _RecordingLLM(BaseLLM):
    def __init__(self, model: str, delay: float, *, supports_tools: bool = True) -> None:
        self.model = check.text("model", model)
        self.delay = check.number("delay", delay, minimum=0.0) or 0.0
        self.supports_tools = check.boolean("supports_tools", supports_tools)
        self.calls: list[list[Message]] = []
        self.tools_offered: list[list[ToolSpec]] = []
        self._lock = threading.Lock()

    def _record(self, messages: Sequence[Message], tools: Sequence[ToolSpec] | None) -> None:
        with self._lock:
            self.calls.append(list(messages))
            self.tools_offered.append(list(tools or []))
        if self.delay:
            time.sleep(self.delay)

    @property
    def call_count(self) -> int:
        return len(self.calls)


class CannedLLM(_RecordingLLM):
    """Replies from a script, in order.

    Each reply is a string, an :class:`LLMResponse`, a :class:`ToolCall` (or a
    list of them) from :func:`tool_call`, or an exception to raise. When the
    script runs out the last reply repeats (``repeat_last=True``, the default)
    or UsageError is raised. ``supports_tools=False`` plays a model that
    cannot be offered tools (callers with a text fallback then use it).
    """

    def __init__(
        self,
        replies: Sequence[Reply] | Reply = "ok",
        *,
        model: str = "canned",
        repeat_last: bool = True,
        delay: float = 0.0,
        supports_tools: bool = True,
    ) -> None:
        super().__init__(model, delay, supports_tools=supports_tools)
        script: list[Reply] = (
            [replies]
            if isinstance(replies, (str, LLMResponse, ToolCall, BaseException))
            else list(replies)
        )
        if not script:
            raise InvalidValueError("CannedLLM needs at least one reply")
        for reply in script:
            if not isinstance(reply, (str, LLMResponse, ToolCall, list, BaseException)):
                raise InvalidTypeError(f"cannot turn {type(reply).__name__} into an LLM reply")
        self.replies: list[Reply] = script
        self.repeat_last = check.boolean("repeat_last", repeat_last)
        self._next = 0

    def complete(
        self, messages: Sequence[Message], *, tools: Sequence[ToolSpec] | None = None
    ) -> LLMResponse:
        self._record(messages, tools)
        with self._lock:
            if self._next >= len(self.replies):
                if not self.repeat_last:
                    raise UsageError(
                        "CannedLLM ran out of replies: give it one reply per model call, "
                        "or repeat_last=True"
                    )
                reply = self.replies[-1]
            else:
                reply = self.replies[self._next]
                self._next += 1
        return _to_response(reply, self.model)


class FunctionLLM(_RecordingLLM):
    """Replies with ``fn(messages)``: a string, LLMResponse or ToolCall(s).

    A function with a ``tools`` parameter is called ``fn(messages, tools=...)``
    with the :class:`ToolSpec` list offered (empty when none), so it can answer
    with a tool call only when one is on offer.
    """

    def __init__(
        self,
        fn: Callable[..., Reply],
        *,
        model: str = "function",
        delay: float = 0.0,
        supports_tools: bool = True,
    ) -> None:
        super().__init__(model, delay, supports_tools=supports_tools)
        if not callable(fn):
            raise InvalidTypeError("FunctionLLM needs a callable taking the message list")
        self.fn = fn
        self._wants_tools = _takes_tools(fn)

    def complete(
        self, messages: Sequence[Message], *, tools: Sequence[ToolSpec] | None = None
    ) -> LLMResponse:
        self._record(messages, tools)
        if self._wants_tools:
            return _to_response(self.fn(list(messages), tools=list(tools or [])), self.model)
        return _to_response(self.fn(list(messages)), self.model)


def _takes_tools(fn: Callable[..., Any]) -> bool:
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):  # some builtins have no signature
        return False
    return any(p.name == "tools" or p.kind is p.VAR_KEYWORD for p in parameters)


def echo_llm() -> FunctionLLM:
    """A model that repeats the last user message back: handy in examples."""

    def reply(messages: list[Message]) -> str:
        last = next((m for m in reversed(messages) if m.role == "user"), None)
        return f"You said: {last.content}" if last and last.content else "Hello!"

    return FunctionLLM(reply, model="echo")


class RuleBasedLLM(_RecordingLLM):
    """A rule-based stand-in for a real model: memory with no API key.

    Use one for the agent and for ``learn=``::

        llm = RuleBasedLLM()
        agent = Agent(name="assistant", llm=llm, memory=Memory(user_id="alice", learn=llm))

    - Asked the fact-extraction prompt (``Memory(learn=)``, ``fastaiagent
      learn``), it records the durable facts that simple rules find in the
      user's message, in plain first-person English: "my name is X" / "call me
      X", "I live in X", "I work at X", "I prefer / like / love / don't like X",
      "I'm a X", "I'm allergic to X", "I'm from X", "I have two X", "my
      favourite X is Y", "my email is X" (see
      :func:`fastaiagent.testing.rules.facts_in`). A fact about the same thing
      as a known one ("Lives in Berlin" after "Lives in Paris") replaces it.
      The answer is a ``record_facts`` tool call when the tool is offered,
      else JSON text.
    - Asked anything else, it answers a question with the remembered facts
      shown in the prompt ("Here is what I remember: Name is Alice.") and a
      statement with "Got it.". It never repeats the memory preamble.

    A stand-in, not an extractor: it knows those sentence shapes and nothing
    else. Swap in a real model (``LLMClient(provider="openai", model="gpt-4.1")``)
    for real users. Records ``.calls`` and ``.tools_offered`` like the others.
    """

    def __init__(
        self, *, model: str = "rule-based", delay: float = 0.0, supports_tools: bool = True
    ) -> None:
        super().__init__(model, delay, supports_tools=supports_tools)

    def complete(
        self, messages: Sequence[Message], *, tools: Sequence[ToolSpec] | None = None
    ) -> LLMResponse:
        self._record(messages, tools)
        answer = rules.extraction_answer(messages, list(tools or []))
        if answer is None:
            answer = rules.chat_answer(messages)
        return _to_response(answer, self.model)


__all__ = ["CannedLLM", "FunctionLLM", "Reply", "RuleBasedLLM", "echo_llm", "remembered", "tool_call"]
