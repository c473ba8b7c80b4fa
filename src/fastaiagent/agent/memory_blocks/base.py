"""The block contract: MemoryBlock, and what earlier blocks rendered this turn."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import os
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from fastaiagent._io import read_json, write_json_atomic
from fastaiagent._validate import one_of
from fastaiagent.errors import InvalidTypeError, InvalidValueError
from fastaiagent.llm.base import BaseLLM
from fastaiagent.llm.message import ROLES, Message

SNIPPET_CHARS = 200
MAX_SNIPPETS = 10


def described(kind: str, **fields: Any) -> str:
    """``kind(name=value!r, ...)``: the repr of a memory part, its settings in order."""
    return f"{kind}({', '.join(f'{name}={value!r}' for name, value in fields.items())})"


def check_llm(block: str, llm: object) -> BaseLLM:
    """``llm`` if it can ``complete()``: the model a block calls (extraction, summaries)."""
    if llm is None or not callable(getattr(llm, "complete", None)):
        raise InvalidTypeError(f"{block} needs an llm with a complete() method")
    return llm  # type: ignore[return-value]  # duck-typed: any object with complete()


def check_roles(roles: Sequence[str] | str) -> tuple[str, ...]:
    """``roles`` as a non-empty tuple of message roles (one role may be a bare str):
    which messages a block reads."""
    chosen = (roles,) if isinstance(roles, str) else tuple(roles)
    if not chosen:
        raise InvalidValueError("roles must name at least one message role, e.g. ('user', 'assistant')")
    return tuple(one_of("roles", role, ROLES) for role in chosen)


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

    def blocks(self) -> list[tuple[str, list[Message]]]:
        """``(block name, its messages)`` of every earlier block, in order."""
        return [(name, list(messages)) for name, messages in self._rendered]

    def by_block(self, name: str) -> list[Message]:
        """Messages rendered by the earlier block called ``name`` ([] if none)."""
        return [m for block, messages in self._rendered if block == name for m in messages]


@contextlib.contextmanager
def _scratch_file() -> Iterator[Path]:
    """A throwaway file for blocks that only implement save/load."""
    with tempfile.TemporaryDirectory(prefix="fastaiagent-") as scratch:
        yield Path(scratch) / "block.json"


class MemoryBlock:
    """Base class of long-term memory blocks.

    Implement ``on_message`` (see each stored message) and ``render`` (return
    SystemMessages for this turn). Everything else has a working default:
    ``render_with_context`` ignores upstream output, the async methods run the
    sync ones in a worker thread, and a block keeps no state unless it overrides
    ``dump_state``/``load_state`` (which ``save``/``load`` write and read).
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

    def dump_state(self) -> Any:
        """This block's state as JSON-ready data, or None when it keeps nothing.

        Blocks that hold state override this and :meth:`load_state`; shared
        windows move this data between processes, and :meth:`save` writes it.
        A block written for older versions that overrides only ``save``/``load``
        still works: its state then goes through a scratch file.
        """
        if type(self).save is MemoryBlock.save:
            return None
        with _scratch_file() as file:
            self.save(file)
            return read_json(file, what="block state") if file.exists() else None

    def load_state(self, data: Any) -> None:
        """Restore state from :meth:`dump_state` output (None leaves the state as it is).
        Bad data raises ValueError and changes nothing."""
        if data is None or type(self).load is MemoryBlock.load:
            return
        with _scratch_file() as file:
            file.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
            self.load(file)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write :meth:`dump_state` to the file ``path`` as JSON, atomically (no
        file when the block keeps nothing)."""
        state = self.dump_state()
        if state is not None:
            write_json_atomic(path, state)

    def load(self, path: str | os.PathLike[str]) -> None:
        """Restore state written by :meth:`save`; a missing or corrupt file raises
        and leaves the state as it was."""
        data = read_json(path, what=f"{self.name} state file")
        try:
            self.load_state(data)
        except ValueError as exc:
            raise InvalidValueError(f"{self.name} state file {path}: {exc}") from exc

    def clear(self) -> None:
        """Forget everything this block holds (used by ``Memory.forget``)."""

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
