"""Conversation memory: the sliding window, memory blocks and their composition."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import logging
import os
import tempfile
import threading
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol

from fastaiagent import trace
from fastaiagent._io import read_json, write_json_atomic
from fastaiagent.llm.message import Message

logger = logging.getLogger("fastaiagent.memory")

SNIPPET_CHARS = 200
MAX_SNIPPETS = 10
DEFAULT_WINDOW = 20


@contextlib.contextmanager
def _scratch_dir() -> Iterator[str]:
    """A throwaway directory, in RAM (/dev/shm) when there is one: file-based block
    state goes through it on every shared-window turn."""
    shm = "/dev/shm"
    base = shm if os.path.isdir(shm) and os.access(shm, os.W_OK) else None
    with tempfile.TemporaryDirectory(prefix="fastaiagent-", dir=base) as scratch:
        yield scratch


class MemoryIsolationError(RuntimeError):
    """A block that writes to an external store cannot be copied in isolation."""


def snippets(messages: Iterable[Message]) -> list[str]:
    """Bounded previews of injected content, for trace attributes."""
    out: list[str] = []
    for message in messages:
        if len(out) >= MAX_SNIPPETS:
            break
        out.append((message.content or "")[:SNIPPET_CHARS])
    return out


class SharedMemoryContext:
    """What earlier blocks rendered this turn: a one-way pipe down the block chain.

    Block N sees blocks 1..N-1. The primary window is not part of the pipe;
    ``window`` exposes it separately so recall can skip what is already there.
    """

    def __init__(self, window: Sequence[Message] = ()) -> None:
        self._rendered: list[tuple[str, list[Message]]] = []
        self.window: tuple[Message, ...] = tuple(window)

    def _add(self, block_name: str, messages: list[Message]) -> None:
        self._rendered.append((block_name, list(messages)))

    def upstream_messages(self) -> list[Message]:
        """Every message earlier blocks rendered, in order."""
        return [m for _, messages in self._rendered for m in messages]

    def upstream_text(self) -> str:
        """The content of every upstream message, joined by newlines."""
        return "\n".join(m.content or "" for m in self.upstream_messages())

    def by_block(self, name: str) -> list[Message]:
        """Messages rendered by the earlier block called ``name`` ([] if none)."""
        return [m for block, messages in self._rendered if block == name for m in messages]


class MemoryBlock:
    """Base class of long-term memory blocks.

    Implement ``on_message`` (see each stored message) and ``render`` (return
    SystemMessages for this turn). Everything else has a working default:
    ``render_with_context`` ignores upstream output, the async methods run the
    sync ones in a worker thread, and ``save``/``load`` keep nothing.
    """

    name: str = "block"

    def on_message(self, message: Message) -> None:
        """Called with each message stored in memory (the user's, then the reply)."""

    def render(self, query: str) -> list[Message]:
        """Messages to inject before the window for this turn's ``query``."""
        return []

    def render_with_context(self, query: str, shared: SharedMemoryContext) -> list[Message]:
        return self.render(query)

    async def aon_message(self, message: Message) -> None:
        await asyncio.to_thread(self.on_message, message)

    async def arender_with_context(self, query: str, shared: SharedMemoryContext) -> list[Message]:
        return await asyncio.to_thread(self.render_with_context, query, shared)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Persist state to the file ``path`` (default: nothing to keep, no file)."""

    def load(self, path: str | os.PathLike[str]) -> None:
        """Restore state saved by :meth:`save`."""

    def clear(self) -> None:
        """Forget everything this block holds (used by ``Memory.forget``)."""

    def dump_state(self) -> Any:
        """This block's state as JSON-ready data, or None when it keeps nothing.

        The default goes through :meth:`save` and a scratch file, so any block
        that can save can be shared across processes; override it to skip the file.
        """
        if type(self).save is MemoryBlock.save:
            return None
        with _scratch_dir() as scratch:
            file = Path(scratch) / "block.json"
            self.save(file)
            return read_json(file, what="block state") if file.exists() else None

    def load_state(self, data: Any) -> None:
        """Restore state from :meth:`dump_state` output (None leaves the state as it is)."""
        if data is None or type(self).load is MemoryBlock.load:
            return
        with _scratch_dir() as scratch:
            file = Path(scratch) / "block.json"
            file.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
            self.load(file)

    def isolated_copy(self) -> MemoryBlock:
        """An independent copy for side-by-side experiments."""
        return copy.deepcopy(self)

    @property
    def trace_name(self) -> str:
        return self.name

    def _has_native_async(self) -> bool:
        cls = type(self)
        return (
            cls.aon_message is not MemoryBlock.aon_message
            or cls.arender_with_context is not MemoryBlock.arender_with_context
        )


class AgentMemory:
    """A sliding window of raw messages. ``max_messages=None`` keeps everything."""

    def __init__(self, max_messages: int | None = None) -> None:
        if max_messages is not None and (
            not isinstance(max_messages, int) or isinstance(max_messages, bool) or max_messages < 1
        ):
            raise ValueError(f"max_messages must be a positive int or None, got {max_messages!r}")
        self.max_messages = max_messages
        self._messages: deque[Message] = deque(maxlen=max_messages)
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._messages)

    def __bool__(self) -> bool:
        return True

    def add(self, message: Message) -> None:
        """Append a message; the oldest drop first once ``max_messages`` is reached."""
        if not isinstance(message, Message):
            raise TypeError(f"expected a Message, got {type(message).__name__}")
        with self._lock:
            self._messages.append(message)

    add_message = add

    def get_messages(self) -> list[Message]:
        with self._lock:
            return list(self._messages)

    @property
    def messages(self) -> list[Message]:
        return self.get_messages()

    def clear(self) -> None:
        with self._lock:
            self._messages.clear()

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": 1,
            "max_messages": self.max_messages,
            "messages": [m.to_dict() for m in self.get_messages()],
        }

    dump_state = to_dict

    def load_state(self, data: Any) -> None:
        """Replace the window with :meth:`to_dict` output; bad data raises and changes nothing."""
        records = data.get("messages") if isinstance(data, dict) else data
        if not isinstance(records, list):
            raise ValueError("window state holds no message list")
        try:
            messages = [Message.from_dict(record) for record in records]
        except (ValueError, TypeError, KeyError) as exc:
            raise ValueError(f"window state is corrupt: {exc}") from exc
        with self._lock:
            self._messages = deque(messages, maxlen=self.max_messages)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the window to ``path`` as JSON, atomically."""
        write_json_atomic(path, self.to_dict())

    def load(self, path: str | os.PathLike[str]) -> None:
        """Replace the window with the one saved at ``path``.

        A missing or corrupt file raises and leaves the current window as it was.
        """
        data = read_json(path, what="memory file")
        try:
            self.load_state(data)
        except ValueError as exc:
            raise ValueError(f"memory file {path}: {exc}") from exc

    # The Agent's view of memory: one turn at a time.
    def start_turn(self, context: Any = None) -> MemoryTurn:
        return _WindowTurn(self)


class MemoryTurn(Protocol):
    """One run's pinned view of memory: what to prepend, where to record."""

    def context_messages(self, query: str) -> list[Message]: ...

    async def acontext_messages(self, query: str) -> list[Message]: ...

    def record(self, messages: Sequence[Message]) -> None: ...

    async def arecord(self, messages: Sequence[Message]) -> None: ...


class _WindowTurn:
    def __init__(self, window: AgentMemory) -> None:
        self.window = window

    def context_messages(self, query: str) -> list[Message]:
        return self.window.get_messages()

    async def acontext_messages(self, query: str) -> list[Message]:
        return self.window.get_messages()  # in memory, nothing to wait for

    def record(self, messages: Sequence[Message]) -> None:
        for message in messages:
            self.window.add(message)

    async def arecord(self, messages: Sequence[Message]) -> None:
        self.record(messages)


class ComposableMemory:
    """A primary window plus long-term blocks that inject SystemMessages each turn.

    Blocks render in declaration order, before the window. A block that
    raises (in ``on_message`` or ``render``) is logged and skipped; its state
    is kept and the run goes on.
    """

    def __init__(
        self,
        blocks: Sequence[MemoryBlock] | None = None,
        primary: AgentMemory | None = None,
    ) -> None:
        self.blocks: list[MemoryBlock] = []
        for block in blocks or []:
            if not isinstance(block, MemoryBlock):
                raise TypeError(f"blocks must be MemoryBlock instances, got {type(block).__name__}")
            self.blocks.append(block)
        self.primary = primary if primary is not None else AgentMemory(max_messages=DEFAULT_WINDOW)
        self._record_lock = threading.Lock()

    def __bool__(self) -> bool:
        return True

    # -- reading -----------------------------------------------------------

    @staticmethod
    def _rendered(
        block: MemoryBlock, block_span: Any, rendered: Any, error: Exception | None
    ) -> list[Message]:
        """Trace and return one block's render; a failure injects nothing (and no count, H12)."""
        if error is not None:
            logger.warning("memory block %r failed to render; skipped: %s", block.name, error)
            if block_span is not None:
                block_span.record_exception(error)
                block_span.set_attribute("memory.error", str(error)[:SNIPPET_CHARS])
            return []
        messages = list(rendered or [])
        if block_span is not None:
            block_span.set_attribute("memory.rendered_count", len(messages))
            block_span.set_attribute("memory.snippets", snippets(messages))
        return messages

    def _render_block(
        self, block: MemoryBlock, query: str, shared: SharedMemoryContext
    ) -> list[Message]:
        with trace.span(f"memory.read.{block.trace_name}") as block_span:
            try:
                rendered, error = block.render_with_context(query, shared), None
            except Exception as exc:
                rendered, error = None, exc
            return self._rendered(block, block_span, rendered, error)

    def render_blocks(self, query: str) -> list[Message]:
        """Only the blocks' messages for ``query``, in declaration order."""
        window = self.primary.get_messages()
        shared = SharedMemoryContext(window)
        out: list[Message] = []
        for block in self.blocks:
            rendered = self._render_block(block, query, shared)
            shared._add(block.name, rendered)
            out.extend(rendered)
        return out

    def get_context(self, query: str = "") -> list[Message]:
        """Block messages (declaration order) followed by the primary window."""
        with trace.span(
            "memory.read", {"memory.block_count": len(self.blocks), "memory.query": query}
        ) as read_span:
            messages = self.render_blocks(query) + self.primary.get_messages()
            if read_span is not None:
                read_span.set_attribute("memory.message_count", len(messages))
        return messages

    async def aget_context(self, query: str = "") -> list[Message]:
        if not any(block._has_native_async() for block in self.blocks):
            return await asyncio.to_thread(self.get_context, query)
        with trace.span(
            "memory.read", {"memory.block_count": len(self.blocks), "memory.query": query}
        ) as read_span:
            shared = SharedMemoryContext(self.primary.get_messages())
            out: list[Message] = []
            for block in self.blocks:
                with trace.span(f"memory.read.{block.trace_name}") as block_span:
                    try:
                        result, error = await block.arender_with_context(query, shared), None
                    except Exception as exc:
                        result, error = None, exc
                    rendered = self._rendered(block, block_span, result, error)
                shared._add(block.name, rendered)
                out.extend(rendered)
            messages = out + self.primary.get_messages()
            if read_span is not None:
                read_span.set_attribute("memory.message_count", len(messages))
        return messages

    # -- writing -----------------------------------------------------------

    @staticmethod
    def _write_attributes(block: MemoryBlock) -> dict[str, Any]:
        # Blocks overwrite action and detail with what they did (e.g. a count).
        native = type(block).on_message is not MemoryBlock.on_message or (
            type(block).aon_message is not MemoryBlock.aon_message
        )
        return {"memory.action": "stored" if native else "noop", "memory.detail": "{}"}

    def _feed_block(self, block: MemoryBlock, message: Message) -> None:
        attributes = self._write_attributes(block) if trace.is_enabled() else None
        with trace.span(f"memory.write.{block.trace_name}", attributes):
            try:
                block.on_message(message)
            except Exception as exc:
                self._feed_failed(block, exc)

    @staticmethod
    def _feed_failed(block: MemoryBlock, error: Exception) -> None:
        logger.warning("memory block %r failed on a message; skipped: %s", block.name, error)
        trace.annotate({"memory.action": "failed", "memory.error": str(error)[:SNIPPET_CHARS]})

    def add_message(self, message: Message) -> None:
        """Store one message in the window and show it to every block."""
        with trace.span("memory.write", {"memory.role": message.role}):
            self.primary.add(message)
            for block in self.blocks:
                self._feed_block(block, message)

    add = add_message

    def record(self, messages: Sequence[Message]) -> None:
        """Store a turn's messages together, so concurrent turns never interleave."""
        with self._record_lock:
            for message in messages:
                self.add_message(message)

    async def arecord(self, messages: Sequence[Message]) -> None:
        if not any(block._has_native_async() for block in self.blocks):
            await asyncio.to_thread(self.record, messages)
            return
        # The same lock as record(), taken off the loop: concurrent turns never interleave.
        await asyncio.to_thread(self._record_lock.acquire)
        try:
            for message in messages:
                with trace.span("memory.write", {"memory.role": message.role}):
                    self.primary.add(message)
                    for block in self.blocks:
                        attributes = self._write_attributes(block) if trace.is_enabled() else None
                        with trace.span(f"memory.write.{block.trace_name}", attributes):
                            try:
                                await block.aon_message(message)
                            except Exception as exc:
                                self._feed_failed(block, exc)
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
            raise FileNotFoundError(f"memory directory not found: {root}")
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
            raise ValueError("memory state must be a dict with a 'blocks' dict")
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
