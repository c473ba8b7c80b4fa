"""ComposableMemory: a window plus long-term blocks, rendered and fed each turn."""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fastaiagent import trace
from fastaiagent._io import read_json
from fastaiagent._throttle import LogThrottle
from fastaiagent._validate import positive_int
from fastaiagent.agent.memory_blocks.base import (
    SNIPPET_CHARS,
    MemoryBlock,
    SharedMemoryContext,
    snippets,
)
from fastaiagent.agent.memory_budget import pack
from fastaiagent.agent.window import AgentMemory, MemoryTurn
from fastaiagent.errors import (
    InvalidTypeError,
    InvalidValueError,
    MissingFileError,
    is_configuration_error,
)
from fastaiagent.llm.message import Message

logger = logging.getLogger("fastaiagent.memory")

DEFAULT_WINDOW = 20
LOG_INTERVAL_SECONDS = 60.0
"""A failing block is logged at most once per this many seconds (per block name,
render or message, and error class), with a count of the repeats in between:
an outage over many users and turns is a few lines, not one per turn. Read at
each failure."""


# Shared by every user's memory: block names repeat across users.
_failures = LogThrottle(lambda: LOG_INTERVAL_SECONDS)


def _log_failure(block: MemoryBlock, kind: str, error: Exception) -> None:
    key = (block.name, kind, type(error).__qualname__)
    _failures.warn(logger, key, "memory block %r failed %s; skipped: %s", block.name, kind, error)


class ComposableMemory:
    """A primary window plus long-term blocks that inject SystemMessages each turn.

    Blocks render in declaration order, before the window. A block that
    raises (in ``on_message`` or ``render``) is logged and skipped; its state
    is kept and the run goes on. A configuration error (a store configured
    wrong, a missing extra: :func:`~fastaiagent.errors.is_configuration_error`)
    is raised instead: it is no outage, and memory does not run without it. With ``max_memory_tokens`` what the blocks
    inject is packed into that many tokens (see :mod:`~fastaiagent.agent.memory_budget`);
    the window is never cut.
    """

    def __init__(
        self,
        blocks: Sequence[MemoryBlock] | None = None,
        primary: AgentMemory | None = None,
        *,
        max_memory_tokens: int | None = None,
    ) -> None:
        self.blocks: list[MemoryBlock] = []
        for block in blocks or []:
            if not isinstance(block, MemoryBlock):
                raise InvalidTypeError(f"blocks must be MemoryBlock instances, got {type(block).__name__}")
            self.blocks.append(block)
        self.primary = primary if primary is not None else AgentMemory(max_messages=DEFAULT_WINDOW)
        self.max_memory_tokens = positive_int(
            "max_memory_tokens", max_memory_tokens, allow_none=True
        )
        self._record_lock = threading.Lock()

    def __bool__(self) -> bool:
        return True

    # -- reading -----------------------------------------------------------
    # get_context and aget_context share every step but the call to the block.

    def _read_span(self, query: str) -> Any:
        return trace.span(
            "memory.read", {"memory.block_count": len(self.blocks), "memory.query": query}
        )

    @staticmethod
    def _rendered(
        block: MemoryBlock, block_span: Any, rendered: Any, error: Exception | None
    ) -> list[Message]:
        """Trace and return one block's render; a failure injects nothing (and no rendered count)."""
        if error is not None:
            _log_failure(block, "to render", error)
            if block_span is not None:
                block_span.record_exception(error)
                block_span.set_attribute("memory.error", str(error)[:SNIPPET_CHARS])
            return []
        messages = list(rendered or [])
        if block_span is not None:
            block_span.set_attribute("memory.rendered_count", len(messages))
            block_span.set_attribute("memory.snippets", snippets(messages))
        return messages

    def _with_window(self, read_span: Any, shared: SharedMemoryContext) -> list[Message]:
        rendered = shared.upstream_messages()
        if self.max_memory_tokens is not None:
            packed = pack(shared.blocks(), self.max_memory_tokens)
            rendered = packed.messages
            if read_span is not None:
                read_span.set_attributes(packed.trace_attributes(self.max_memory_tokens))
        messages = rendered + self.primary.get_messages()
        if read_span is not None:
            read_span.set_attribute("memory.message_count", len(messages))
        return messages

    def render_blocks(self, query: str) -> list[Message]:
        """Only the blocks' messages for ``query``, in declaration order (no budget)."""
        return self._render(query).upstream_messages()

    async def arender_blocks(self, query: str) -> list[Message]:
        """:meth:`render_blocks` with each block's native async render."""
        return (await self._arender(query)).upstream_messages()

    def _render(self, query: str) -> SharedMemoryContext:
        shared = SharedMemoryContext(self.primary.get_messages())
        for block in self.blocks:
            with trace.span(f"memory.read.{block.trace_name}") as block_span:
                try:
                    result, error = block.render_with_context(query, shared), None
                except Exception as exc:
                    if is_configuration_error(exc):
                        raise  # not an outage: the caller must see it (and fix it)
                    result, error = None, exc
                shared._add(block.name, self._rendered(block, block_span, result, error))
        return shared

    async def _arender(self, query: str) -> SharedMemoryContext:
        shared = SharedMemoryContext(self.primary.get_messages())
        for block in self.blocks:
            with trace.span(f"memory.read.{block.trace_name}") as block_span:
                try:
                    result, error = await block.arender_with_context(query, shared), None
                except Exception as exc:
                    if is_configuration_error(exc):
                        raise
                    result, error = None, exc
                shared._add(block.name, self._rendered(block, block_span, result, error))
        return shared

    def get_context(self, query: str = "") -> list[Message]:
        """Block messages (declaration order) followed by the primary window."""
        with self._read_span(query) as read_span:
            return self._with_window(read_span, self._render(query))

    async def aget_context(self, query: str = "") -> list[Message]:
        """Async :meth:`get_context`: blocks without native async run in a worker thread."""
        if not self._any_native_async():
            return await asyncio.to_thread(self.get_context, query)
        with self._read_span(query) as read_span:
            return self._with_window(read_span, await self._arender(query))

    def _any_native_async(self) -> bool:
        return any(block._has_native_async() for block in self.blocks)

    # -- writing -----------------------------------------------------------
    # record and arecord share the steps around each block's on_message.

    @staticmethod
    def _write_span(block: MemoryBlock) -> Any:
        attributes = None
        if trace.is_enabled():  # blocks overwrite action and detail with what they did
            native = type(block).on_message is not MemoryBlock.on_message or (
                type(block).aon_message is not MemoryBlock.aon_message
            )
            attributes = {"memory.action": "stored" if native else "noop", "memory.detail": "{}"}
        return trace.span(f"memory.write.{block.trace_name}", attributes)

    @staticmethod
    def _feed_failed(block: MemoryBlock, error: Exception) -> None:
        _log_failure(block, "on a message", error)
        trace.annotate({"memory.action": "failed", "memory.error": str(error)[:SNIPPET_CHARS]})

    def add_message(self, message: Message) -> None:
        """Store one message in the window and show it to every block."""
        with trace.span("memory.write", {"memory.role": message.role}):
            self.primary.add(message)
            for block in self.blocks:
                with self._write_span(block):
                    try:
                        block.on_message(message)
                    except Exception as exc:
                        if is_configuration_error(exc):
                            raise
                        self._feed_failed(block, exc)

    add = add_message

    async def aadd_message(self, message: Message) -> None:
        """:meth:`add_message` with each block's native async ``aon_message``."""
        with trace.span("memory.write", {"memory.role": message.role}):
            self.primary.add(message)
            for block in self.blocks:
                with self._write_span(block):
                    try:
                        await block.aon_message(message)
                    except Exception as exc:
                        if is_configuration_error(exc):
                            raise
                        self._feed_failed(block, exc)

    def record(self, messages: Sequence[Message]) -> None:
        """Store a turn's messages together, so concurrent turns never interleave."""
        with self._record_lock:
            for message in messages:
                self.add_message(message)

    async def arecord(self, messages: Sequence[Message]) -> None:
        """Async :meth:`record`; the turn lock is taken off the event loop."""
        if not self._any_native_async():
            await asyncio.to_thread(self.record, messages)
            return
        await _acquire(self._record_lock)
        try:
            for message in messages:
                await self.aadd_message(message)
        finally:
            self._record_lock.release()

    def clear(self) -> None:
        """Empty the window and every block."""
        self.primary.clear()
        for block in self.blocks:
            try:
                block.clear()
            except Exception as exc:
                logger.warning("memory block %r failed to clear: %s", block.name, exc)

    # -- persistence -------------------------------------------------------

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write ``primary.json`` and ``blocks/<name>.json`` under the directory ``path``."""
        root = Path(path)
        root.mkdir(parents=True, exist_ok=True)
        self.primary.save(root / "primary.json")
        for block in self.blocks:
            block.save(root / "blocks" / f"{block.name}.json")

    def load(self, path: str | os.PathLike[str]) -> None:
        """Restore state saved by :meth:`save` into the same-named blocks.

        Every file is checked before any state changes, so a corrupt file
        leaves the memory as it was. Unknown files are ignored; missing files
        leave a block's state as it is.
        """
        root = Path(path)
        if not root.is_dir():
            raise MissingFileError(f"memory directory not found: {root}: pass the directory save() wrote")
        files = [root / "primary.json"] + [root / "blocks" / f"{b.name}.json" for b in self.blocks]
        for file in files:
            if file.exists():
                read_json(file)  # raises on a corrupt file before anything is replaced
        if files[0].exists():
            self.primary.load(files[0])
        for block, file in zip(self.blocks, files[1:], strict=True):
            if file.exists():
                block.load(file)

    def dump_state(self, blocks: Sequence[MemoryBlock] | None = None) -> dict[str, Any]:
        """The window and block state (``blocks``, default all) as JSON-ready data:
        the dict form of :meth:`save`'s directory."""
        chosen = self.blocks if blocks is None else blocks
        states = {b.name: b.dump_state() for b in chosen}
        return {
            "version": 1,
            "primary": self.primary.dump_state(),
            "blocks": {name: state for name, state in states.items() if state is not None},
        }

    def load_state(self, data: dict[str, Any]) -> None:
        """Restore :meth:`dump_state` output into the same-named blocks (like :meth:`load`:
        unknown names are ignored, missing ones leave a block as it is)."""
        if not isinstance(data, dict) or not isinstance(data.get("blocks", {}), dict):
            raise InvalidValueError("memory state must be a dict with a 'blocks' dict")
        self.primary.load_state(data.get("primary") or {"messages": []})
        blocks = data.get("blocks", {})
        for block in self.blocks:
            if block.name in blocks:
                block.load_state(blocks[block.name])

    def start_turn(self, context: Any = None) -> MemoryTurn:
        return self

    def context_messages(self, query: str) -> list[Message]:
        return self.get_context(query)

    async def acontext_messages(self, query: str) -> list[Message]:
        return await self.aget_context(query)


async def _acquire(lock: threading.Lock) -> None:
    """Take ``lock`` from a worker thread without ever leaking it.

    A task cancelled while it waits cannot stop the worker thread; if that
    thread takes the lock after the waiter is gone, it is released at once,
    so a cancelled turn never locks a user's memory for good.
    """
    waiter = asyncio.ensure_future(asyncio.to_thread(lock.acquire))
    try:
        await asyncio.shield(waiter)
    except asyncio.CancelledError:
        waiter.add_done_callback(lambda done: _release_if_taken(lock, done))
        raise


def _release_if_taken(lock: threading.Lock, acquired: asyncio.Future[bool]) -> None:
    if not acquired.cancelled() and acquired.exception() is None:
        lock.release()
