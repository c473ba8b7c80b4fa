"""Agent: an LLM with a system prompt, tools, middleware and memory.

``run`` and ``arun`` / ``astream`` are thin loops over the same pure steps
(:class:`_Run`: build the prompt, take one model response, book a tool
result, finish the reply); only the I/O (model call, tools, memory, async
middleware) differs between the sync and async paths.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from fastaiagent import _validate as check
from fastaiagent import trace
from fastaiagent.agent.middleware import Middleware
from fastaiagent.agent.tools import FunctionTool, ToolArgumentsError, as_tool
from fastaiagent.agent.window import MemoryTurn
from fastaiagent.errors import InvalidTypeError, InvalidValueError
from fastaiagent.llm import (
    AssistantMessage,
    BaseLLM,
    LLMError,
    LLMResponse,
    Message,
    SystemMessage,
    ToolCall,
    ToolMessage,
    ToolSpec,
    Usage,
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
    """The state of one run and the pure steps every run path shares."""

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
        """What the model is sent this round (before middleware)."""
        system = [SystemMessage(self.agent.system_prompt)] if self.agent.system_prompt else []
        return system + memory_messages + self.history

    def take(self, response: LLMResponse) -> list[ToolCall]:
        """Count one response; a tool-calling one joins the history and its calls are returned."""
        self.usage.input_tokens += response.usage.input_tokens
        self.usage.output_tokens += response.usage.output_tokens
        if response.tool_calls:
            self.history.append(AssistantMessage(response.content, tool_calls=response.tool_calls))
        return response.tool_calls

    def add_tool_result(self, call: ToolCall, output: str) -> None:
        self.tool_calls.append({"name": call.name, "arguments": call.arguments, "output": output})
        self.history.append(ToolMessage(output, tool_call_id=call.id, name=call.name))

    def finish(self, response: LLMResponse) -> str:
        """The final reply (after middleware) joins the history; its text is returned."""
        output = response.content or ""
        trace.annotate({"agent.output": output[:TRACE_TEXT_CHARS]})
        self.history.append(AssistantMessage(output))
        return output

    def turn_to_store(self, output: str) -> list[Message]:
        # The user's words as said, and only the final reply after middleware.
        return [UserMessage(self.query), AssistantMessage(output)]

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

    def span_attributes(self) -> dict[str, Any] | None:
        # The input is bounded; it is a payload attribute (dropped from exported
        # spans when FASTAIAGENT_TRACE_PAYLOADS=0, kept in the local store).
        if not trace.is_enabled():
            return None
        return {
            "agent.name": self.agent.name,
            "agent.run_id": self.run_id,
            "agent.input": self.query[:TRACE_TEXT_CHARS],
        }


def _tool_table(tools: Any) -> dict[str, FunctionTool]:
    if tools is None:
        return {}
    if isinstance(tools, (str, bytes)) or callable(tools) or not isinstance(tools, Sequence):
        raise InvalidTypeError(
            f"tools must be a list of functions or FunctionTool, got {type(tools).__name__}; "
            "wrap a single tool in a list: tools=[my_tool]"
        )
    table: dict[str, FunctionTool] = {}
    for item in tools:
        built = as_tool(item)
        if built.name in table:
            raise InvalidValueError(
                f"two tools are named {built.name!r}; give one another name with tool(fn, name=...)"
            )
        table[built.name] = built
    return table


def _middleware_list(middleware: Any) -> list[Middleware]:
    if middleware is None:
        return []
    if isinstance(middleware, Middleware) or not isinstance(middleware, Sequence):
        raise InvalidTypeError(
            f"middleware must be a list of Middleware, got {type(middleware).__name__}; "
            "wrap a single one in a list: middleware=[RedactPII()]"
        )
    for hook in middleware:
        if not isinstance(hook, Middleware):
            raise InvalidTypeError(
                f"middleware items must be Middleware instances, got {type(hook).__name__}"
            )
    return list(middleware)


def _tool_error(call: ToolCall, exc: Exception) -> str:
    """What the model is told when a tool call fails; the run continues."""
    if isinstance(exc, ToolArgumentsError):
        logger.info("tool %r called with invalid arguments: %s", call.name, exc)
        return f"error: {exc}"
    logger.warning("tool %r failed: %s", call.name, exc)
    return f"error: {type(exc).__name__}: {exc}"


class Agent:
    """An LLM-driven agent.

    ``memory`` is an :class:`AgentMemory`, :class:`ComposableMemory` or
    :class:`Memory`; the agent prepends what it holds to each run and stores
    the user's message and the final reply afterwards. ``tools`` are plain
    functions (schema and argument validation from their type hints) or
    :class:`FunctionTool`; the model may call them for at most
    ``max_tool_rounds`` rounds per run. A tool that fails, or that the model
    calls with invalid arguments, answers the model with an error message and
    the run continues. Every argument is checked here: a wrong type raises
    InvalidTypeError, a bad value InvalidValueError.
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
        self.name = check.text("name", name)
        if not isinstance(llm, BaseLLM):
            raise InvalidTypeError(
                f"llm must be an LLMClient or BaseLLM, got {type(llm).__name__}; "
                "e.g. llm=LLMClient('openai', model='gpt-4.1')"
            )
        if memory is not None and not hasattr(memory, "start_turn"):
            raise InvalidTypeError(
                f"memory must be Memory, AgentMemory or ComposableMemory, got {type(memory).__name__}"
            )
        self.llm = llm
        self.system_prompt = check.text("system_prompt", system_prompt, allow_empty=True)
        self.memory = memory
        self.tools = _tool_table(tools)
        self.middleware = _middleware_list(middleware)
        self.max_tool_rounds = check.integer("max_tool_rounds", max_tool_rounds, minimum=1)

    def __repr__(self) -> str:
        return f"Agent(name={self.name!r}, llm={self.llm!r})"

    @property
    def _tool_specs(self) -> list[ToolSpec] | None:
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

    # -- steps shared by run / arun / astream --------------------------------

    def _start(self, query: str, context: Any, history: list[Message] | None = None) -> _Run:
        if not isinstance(query, str):
            raise InvalidTypeError(f"query must be a str, got {type(query).__name__}")
        return _Run(self, query, context, history if history is not None else [UserMessage(query)])

    def _continue(self, result: AgentResult, context: Any) -> _Run:
        if not isinstance(result, AgentResult):
            raise InvalidTypeError(f"resume needs the AgentResult of a run, got {type(result).__name__}")
        return self._start(result.query, context, list(result.messages))

    def _branch(self, result: AgentResult, query: str, context: Any) -> _Run:
        if not isinstance(result, AgentResult):
            raise InvalidTypeError(f"fork needs the AgentResult of a run, got {type(result).__name__}")
        return self._start(query, context, [*result.messages, UserMessage(query)])

    def _tool(self, call: ToolCall) -> FunctionTool | str:
        """The tool a call names, or the error message for the model when there is none."""
        tool = self.tools.get(call.name)
        if tool is not None:
            return tool
        known = ", ".join(sorted(self.tools)) or "none"
        return f"error: unknown tool {call.name!r}; the tools are: {known}"

    def _call_tool(self, run: _Run, call: ToolCall) -> str:
        tool = self._tool(call)
        if isinstance(tool, str):
            return tool
        try:
            return tool.call(call.arguments, run.context)
        except Exception as exc:
            return _tool_error(call, exc)

    async def _acall_tool(self, run: _Run, call: ToolCall) -> str:
        tool = self._tool(call)
        if isinstance(tool, str):
            return tool
        try:
            return await tool.acall(call.arguments, run.context)
        except Exception as exc:
            return _tool_error(call, exc)

    def _before_model(self, run: _Run, messages: list[Message]) -> list[Message]:
        for hook in self.middleware:
            messages = hook.before_model(messages, run.context)
        return messages

    def _after_model(self, run: _Run, response: LLMResponse) -> LLMResponse:
        for hook in reversed(self.middleware):
            response = hook.after_model(response, run.context)
        return response

    async def _abefore_model(self, run: _Run, messages: list[Message]) -> list[Message]:
        for hook in self.middleware:
            messages = await hook.abefore_model(messages, run.context)
        return messages

    async def _aafter_model(self, run: _Run, response: LLMResponse) -> LLMResponse:
        for hook in reversed(self.middleware):
            response = await hook.aafter_model(response, run.context)
        return response

    # -- sync ----------------------------------------------------------------

    def run(self, query: str, *, context: Any = None) -> AgentResult:
        """Answer ``query``; ``context`` (a RunContext) reaches tools and memory."""
        return self._run(self._start(query, context))

    def resume(self, result: AgentResult, *, context: Any = None) -> AgentResult:
        """Continue a run that stopped early (``status != "completed"``).

        Memory records the question the run was resuming, with the final reply.
        """
        return self._run(self._continue(result, context))

    def fork(self, result: AgentResult, query: str, *, context: Any = None) -> AgentResult:
        """Start a new run from a finished run's conversation, asking ``query``."""
        return self._run(self._branch(result, query, context))

    def _run(self, run: _Run) -> AgentResult:
        try:
            with trace.span("agent.run", run.span_attributes()):
                return self._run_loop(run)
        finally:
            run.close()

    def _run_loop(self, run: _Run) -> AgentResult:
        memory_messages = run.turn.context_messages(run.query) if run.turn else []
        for _ in range(self.max_tool_rounds):
            messages = self._before_model(run, run.prompt(memory_messages))
            with trace.span("llm.call", {"llm.model": self.llm.model}):
                response = self.llm.complete(messages, tools=self._tool_specs)
            calls = run.take(response)
            if not calls:
                output = run.finish(self._after_model(run, response))
                if run.turn:
                    run.turn.record(run.turn_to_store(output))
                return run.result(output, "completed")
            for call in calls:
                run.add_tool_result(call, self._call_tool(run, call))
        return run.result("", "max_tool_rounds")

    # -- async ---------------------------------------------------------------

    async def arun(self, query: str, *, context: Any = None) -> AgentResult:
        """Async :meth:`run`; memory and tool I/O never hold the event loop."""
        return await self._acollect(self._start(query, context))

    async def aresume(self, result: AgentResult, *, context: Any = None) -> AgentResult:
        """Async :meth:`resume`."""
        return await self._acollect(self._continue(result, context))

    async def afork(self, result: AgentResult, query: str, *, context: Any = None) -> AgentResult:
        """Async :meth:`fork`."""
        return await self._acollect(self._branch(result, query, context))

    async def astream(
        self, query: str, *, context: Any = None
    ) -> AsyncIterator[StreamDelta | AgentResult]:
        """Yield :class:`StreamDelta` text pieces, then the :class:`AgentResult`.

        Deltas are the model's raw text; the final result carries the reply
        after middleware, which is also what memory stores.
        """
        async for event in self._astream(self._start(query, context), stream=True):
            yield event

    async def _acollect(self, run: _Run) -> AgentResult:
        async for event in self._astream(run, stream=False):
            if isinstance(event, AgentResult):
                return event
        raise AssertionError("unreachable: every run path ends with an AgentResult")

    async def _astream(self, run: _Run, *, stream: bool) -> AsyncIterator[StreamDelta | AgentResult]:
        try:
            with trace.span("agent.run", run.span_attributes()):
                async for event in self._astream_loop(run, stream=stream):
                    yield event
        finally:
            run.close()

    async def _astream_loop(self, run: _Run, *, stream: bool) -> AsyncIterator[StreamDelta | AgentResult]:
        memory_messages = await run.turn.acontext_messages(run.query) if run.turn else []
        for _ in range(self.max_tool_rounds):
            messages = await self._abefore_model(run, run.prompt(memory_messages))
            response = LLMResponse()
            async for event in self._aresponse(messages, stream=stream):
                if isinstance(event, StreamDelta):
                    yield event
                else:
                    response = event
            calls = run.take(response)
            if not calls:
                output = run.finish(await self._aafter_model(run, response))
                if run.turn:
                    await run.turn.arecord(run.turn_to_store(output))
                yield run.result(output, "completed")
                return
            for call in calls:
                run.add_tool_result(call, await self._acall_tool(run, call))
        yield run.result("", "max_tool_rounds")

    async def _aresponse(self, messages: list[Message], *, stream: bool) -> AsyncIterator[StreamDelta | LLMResponse]:
        """One model call: text deltas when streaming, then the whole response."""
        with trace.span("llm.call", {"llm.model": self.llm.model}):
            if not stream:
                yield await self.llm.acomplete(messages, tools=self._tool_specs)
                return
            final: LLMResponse | None = None
            async for event in self.llm.astream(messages, tools=self._tool_specs):
                if event.kind == "text" and event.text:
                    yield StreamDelta(event.text)
                elif event.kind == "done":
                    final = event.response
            if final is None:
                raise LLMError(
                    f"the stream of model {self.llm.model!r} ended without a final response"
                )
            yield final
