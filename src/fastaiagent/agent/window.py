"""The conversation window (the session tier): recent messages, and a run's view of memory."""

from __future__ import annotations

import os
import threading
from collections import deque
from collections.abc import Sequence
from typing import Any, Protocol

from fastaiagent._io import read_json, write_json_atomic
from fastaiagent._validate import positive_int
from fastaiagent.errors import InvalidTypeError, InvalidValueError
from fastaiagent.llm.message import Message


class AgentMemory:
    """A sliding window of raw messages. ``max_messages=None`` keeps everything."""

    def __init__(self, max_messages: int | None = None) -> None:
        self.max_messages = positive_int("max_messages", max_messages, allow_none=True)
        self._messages: deque[Message] = deque(maxlen=max_messages)
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._messages)

    def __bool__(self) -> bool:
        return True

    def add(self, message: Message) -> None:
        """Append a message; the oldest drop first once ``max_messages`` is reached."""
        if not isinstance(message, Message):
            raise InvalidTypeError(f"expected a Message, got {type(message).__name__}")
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
            raise InvalidValueError("window state holds no message list")
        try:
            messages = [Message.from_dict(record) for record in records]
        except (ValueError, TypeError, KeyError) as exc:
            raise InvalidValueError(f"window state is corrupt: {exc}") from exc
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
            raise InvalidValueError(f"memory file {path}: {exc}") from exc

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
