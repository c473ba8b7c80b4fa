"""StaticBlock: a fixed fact injected every turn."""

from __future__ import annotations

from fastaiagent._validate import text as check_text
from fastaiagent.agent.memory_blocks.base import MemoryBlock
from fastaiagent.llm.message import Message, SystemMessage


class StaticBlock(MemoryBlock):
    """Injects the same text every turn. No state, no LLM calls, no file on save."""

    name = "static"

    def __init__(self, text: str, *, name: str = "static") -> None:
        self.text = check_text("text", text)
        self.name = check_text("name", name)

    def render(self, query: str) -> list[Message]:
        return [SystemMessage(self.text)]
