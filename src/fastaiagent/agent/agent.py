"""Agent: an LLM with a system prompt, tools, middleware and memory."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from fastaiagent import trace
from fastaiagent.agent.middleware import Middleware
from fastaiagent.agent.tools import FunctionTool, as_tool
from fastaiagent.agent.window import MemoryTurn
from fastaiagent.errors import InvalidTypeError, InvalidValueError
from fastaiagent.llm.base import BaseLLM, LLMResponse, Usage
from fastaiagent.llm.message import (
    AssistantMessage,
    Message,
    SystemMessage,
    ToolMessage,
    UserMessage,
)

logger = logging.getLogger("fastaiagent.agent")
DEFAULT_MAX_TOOL_ROUNDS = 10
TRACE_TEXT_CHARS = 2000  # run input/output kept on the agent.run span (payloads)


@dataclass
class AgentResult:
    """What a run returns. ``output`` is the final reply text.

    ``status`` is ``"completed"``, or ``"max_tool_rounds"`` when the model kept
    calling tools past the limit; such a run can be continued with
    :meth:`Agent.resume`.
    """

    output: str
    query: str
    messages: list[Message] = field(default_factory=list)
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    run_id: str = ""
    trace_id: str | None = None
    status: str = "completed"
    duration_ms: float = 0.0

    def __str__(self) -> str:
        return self.output


@dataclass
class StreamDelta:
    """A piece of reply text from :meth:`Agent.astream`."""

    text: str


class _Run:
    """The state of one run: messages so far, pinned memory turn, results."""

    def __init__(self, agent: Agent, query: str, context: Any, history: list[Message]):
        self.agent = agent
        self.query = query
        self.context = context
        self.run_id = uuid.uuid4().hex
        self.started = time.perf_counter()
        self.turn: MemoryTurn | None = agent.memory.start_turn(context) if agent.memory is not None else None
        self.history = history
        self.tool_calls: list[dict[str, Any]] = []
        self.usage = Usage()

    def prompt(self, memory_messages: list[Message]) -> list[Message]:
        system = [SystemMessage(self.agent.system_prompt)] if self.agent.system_prompt else []
        return system + memory_messages + self.history

    def add_usage(self, response: LLMResponse) -> None:
        self.usage.input_tokens += response.usage.input_tokens
        self.usage.output_tokens += response.usage.output_tokens

    def result(self, output: str, status: str) -> AgentResult:
        return AgentResult(
            output=output,
            query=self.query,
            messages=list(self.history),
            tool_calls=list(self.tool_calls),
            usage=self.usage,
            run_id=self.run_id,
            trace_id=trace.current_trace_id(),
            status=status,
            duration_ms=(time.perf_counter() - self.started) * 1000,
        )

    def close(self) -> None:
        close = getattr(self.turn, "close", None)
        if close is not None:
            close()

    def span_attributes(self) -> dict[str, Any]:
        # The input is bounded; it is a payload attribute (dropped from exported
        # spans when FASTAIAGENT_TRACE_PAYLOADS=0, kept in the local store).
        return {
            "agent.name": self.agent.name,
            "agent.run_id": self.run_id,
            "agent.input": self.query[:TRACE_TEXT_CHARS],
        }

    def turn_to_store(self, output: str) -> list[Message]:
        # The user's words as said, and only the final reply after middleware.
        return [UserMessage(self.query), AssistantMessage(output)]


class Agent:
    """An LLM-driven agent.

    ``memory`` is an :class:`AgentMemory`, :class:`ComposableMemory` or
    :class:`Memory`; the agent prepends what it holds to each run and stores
    the user's message and the final reply afterwards. ``tools`` are plain
    functions (schema from type hints) or :class:`FunctionTool`; the model may
    call them for at most ``max_tool_rounds`` rounds per run.
    """

    def __init__(
        self,
        name: str,
        llm: BaseLLM,
        system_prompt: str = "",
        *,
        memory: Any = None,
        tools: Sequence[Callable[..., Any] | FunctionTool] | None = None,
        middleware: Sequence[Middleware] | None = None,
        max_tool_rounds: int = DEFAULT_MAX_TOOL_ROUNDS,
    ) -> None:
        if not isinstance(name, str) or not name:
            raise InvalidValueError("an agent needs a non-empty name")
        if not isinstance(llm, BaseLLM):
            raise InvalidTypeError(f"llm must be an LLMClient or BaseLLM, got {type(llm).__name__}")
        if memory is not None and not hasattr(memory, "start_turn"):
            raise InvalidTypeError(
                f"memory must be Memory, AgentMemory or ComposableMemory, got {type(memory).__name__}"
            )
        if max_tool_rounds < 1:
            raise InvalidValueError("max_tool_rounds must be >= 1")
        self.name = name
        self.llm = llm
        self.system_prompt = system_prompt
        self.memory = memory
        self.tools = {t.name: t for t in (as_tool(x) for x in tools or [])}
        self.middleware = list(middleware or [])
        self.max_tool_rounds = max_tool_rounds

    def __repr__(self) -> str:
        return f"Agent(name={self.name!r}, llm={self.llm!r})"

    @property
    def _tool_specs(self) -> list[Any] | None:
        return [t.spec for t in self.tools.values()] or None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready description; ``memory_enabled`` appears only with memory."""
        data: dict[str, Any] = {
            "name": self.name,
            "system_prompt": self.system_prompt,
            "llm": self.llm.to_dict() if hasattr(self.llm, "to_dict") else {"model": self.llm.model},
            "tools": [
                {"name": t.name, "description": t.description, "parameters": t.spec.parameters}
                for t in self.tools.values()
            ],
        }
        if self.memory is not None:
            data["memory_enabled"] = True
        return data

    # -- helpers shared by run/arun/astream ---------------------------------

    def _start(self, query: str, context: Any, history: list[Message] | None = None) -> _Run:
        if not isinstance(query, str):
            raise InvalidTypeError(f"query must be a str, got {type(query).__name__}")
        return _Run(self, query, context, history if history is not None else [UserMessage(query)])

    def _after_reply(self, run: _Run, response: LLMResponse) -> LLMResponse:
        for hook in reversed(self.middleware):
            response = hook.after_model(response, run.context)
        return response

    def _before_model(self, run: _Run, messages: list[Message]) -> list[Message]:
        for hook in self.middleware:
            messages = hook.before_model(messages, run.context)
        return messages

    def _tool_message(self, run: _Run, call: Any, output: str) -> ToolMessage:
        run.tool_calls.append({"name": call.name, "arguments": call.arguments, "output": output})
        return ToolMessage(output, tool_call_id=call.id, name=call.name)

    def _call_tool(self, run: _Run, call: Any) -> ToolMessage:
        tool = self.tools.get(call.name)
        if tool is None:
            return self._tool_message(run, call, f"error: unknown tool {call.name!r}")
        try:
            output = tool.call(call.arguments, run.context)
        except Exception as exc:
            logger.warning("tool %r failed: %s", call.name, exc)
            output = f"error: {type(exc).__name__}: {exc}"
        return self._tool_message(run, call, output)

    async def _acall_tool(self, run: _Run, call: Any) -> ToolMessage:
        tool = self.tools.get(call.name)
        if tool is None:
            return self._tool_message(run, call, f"error: unknown tool {call.name!r}")
        try:
            output = await tool.acall(call.arguments, run.context)
        except Exception as exc:
            logger.warning("tool %r failed: %s", call.name, exc)
            output = f"error: {type(exc).__name__}: {exc}"
        return self._tool_message(run, call, output)

    # -- run ---------------------------------------------------------------

    def run(self, query: str, *, context: Any = None) -> AgentResult:
        """Answer ``query``; ``context`` (a RunContext) reaches tools and memory."""
        return self._run(self._start(query, context))

    def resume(self, result: AgentResult, *, context: Any = None) -> AgentResult:
        """Continue a run that stopped early (``status != "completed"``).

        Memory records the question the run was resuming, with the final reply.
        """
        return self._run(self._start(result.query, context, list(result.messages)))

    def fork(self, result: AgentResult, query: str, *, context: Any = None) -> AgentResult:
        """Start a new run from a finished run's conversation, asking ``query``."""
        return self._run(self._start(query, context, [*result.messages, UserMessage(query)]))

    def _run(self, run: _Run) -> AgentResult:
        try:
            return self._run_loop(run)
        finally:
            run.close()

    def _run_loop(self, run: _Run) -> AgentResult:
        with trace.span("agent.run", run.span_attributes() if trace.is_enabled() else None):
            memory_messages = run.turn.context_messages(run.query) if run.turn else []
            for _ in range(self.max_tool_rounds):
                messages = self._before_model(run, run.prompt(memory_messages))
                with trace.span("llm.call", {"llm.model": self.llm.model}):
                    response = self.llm.complete(messages, tools=self._tool_specs)
                run.add_usage(response)
                if response.tool_calls:
                    run.history.append(AssistantMessage(response.content, tool_calls=response.tool_calls))
                    run.history.extend(self._call_tool(run, call) for call in response.tool_calls)
                    continue
                return self._finish(run, self._after_reply(run, response))
            return run.result("", "max_tool_rounds")

    def _finish(self, run: _Run, response: LLMResponse) -> AgentResult:
        output = response.content or ""
        trace.annotate({"agent.output": output[:TRACE_TEXT_CHARS]})
        run.history.append(AssistantMessage(output))
        if run.turn:
            run.turn.record(run.turn_to_store(output))
        return run.result(output, "completed")

    async def arun(self, query: str, *, context: Any = None) -> AgentResult:
        """Async :meth:`run`; memory and tool I/O never hold the event loop."""
        result: AgentResult | None = None
        async for event in self._astream(self._start(query, context), stream=False):
            if isinstance(event, AgentResult):
                result = event
        assert result is not None
        return result

    async def aresume(self, result: AgentResult, *, context: Any = None) -> AgentResult:
        final: AgentResult | None = None
        async for event in self._astream(
            self._start(result.query, context, list(result.messages)), stream=False
        ):
            if isinstance(event, AgentResult):
                final = event
        assert final is not None
        return final

    async def astream(
        self, query: str, *, context: Any = None
    ) -> AsyncIterator[StreamDelta | AgentResult]:
        """Yield :class:`StreamDelta` text pieces, then the :class:`AgentResult`.

        Deltas are the model's raw text; the final result carries the reply
        after middleware, which is also what memory stores.
        """
        async for event in self._astream(self._start(query, context), stream=True):
            yield event

    async def _astream(
        self, run: _Run, *, stream: bool
    ) -> AsyncIterator[StreamDelta | AgentResult]:
        try:
            async for event in self._astream_loop(run, stream=stream):
                yield event
        finally:
            run.close()

    async def _astream_loop(
        self, run: _Run, *, stream: bool
    ) -> AsyncIterator[StreamDelta | AgentResult]:
        with trace.span("agent.run", run.span_attributes() if trace.is_enabled() else None):
            memory_messages = await run.turn.acontext_messages(run.query) if run.turn else []
            for _ in range(self.max_tool_rounds):
                messages = run.prompt(memory_messages)
                for hook in self.middleware:
                    messages = await hook.abefore_model(messages, run.context)
                with trace.span("llm.call", {"llm.model": self.llm.model}):
                    if stream:
                        response = None
                        async for event in self.llm.astream(messages, tools=self._tool_specs):
                            if event.kind == "text" and event.text:
                                yield StreamDelta(event.text)
                            elif event.kind == "done":
                                response = event.response
                        if response is None:
                            raise RuntimeError("the LLM stream ended without a final response")
                    else:
                        response = await self.llm.acomplete(messages, tools=self._tool_specs)
                run.add_usage(response)
                if response.tool_calls:
                    run.history.append(AssistantMessage(response.content, tool_calls=response.tool_calls))
                    for call in response.tool_calls:
                        run.history.append(await self._acall_tool(run, call))
                    continue
                for hook in reversed(self.middleware):
                    response = await hook.aafter_model(response, run.context)
                output = response.content or ""
                trace.annotate({"agent.output": output[:TRACE_TEXT_CHARS]})
                run.history.append(AssistantMessage(output))
                if run.turn:
                    await run.turn.arecord(run.turn_to_store(output))
                yield run.result(output, "completed")
                return
            yield run.result("", "max_tool_rounds")
