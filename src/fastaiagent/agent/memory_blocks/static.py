"""StaticBlock: a fixed fact injected every turn."""

from __future__ import annotations

from fastaiagent.agent.memory_blocks.base import MemoryBlock
from fastaiagent.errors import InvalidValueError
from fastaiagent.llm.message import Message, SystemMessage


class StaticBlock(MemoryBlock):
    """Injects the same text every turn. No state, no LLM calls, no file on save."""

    name = "static"

    def __init__(self, text: str, *, name: str = "static") -> None:
        if not isinstance(text, str) or not text.strip():
            raise InvalidValueError("StaticBlock needs non-empty text")
        self.text = text
        self.name = name

    def render(self, query: str) -> list[Message]:
        return [SystemMessage(self.text)]
