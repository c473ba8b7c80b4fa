"""Chat messages exchanged with an LLM, and the tool calls they carry."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from fastaiagent.errors import InvalidTypeError, InvalidValueError

ROLES = ("system", "user", "assistant", "tool")
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def storable_text(text: str) -> str:
    """``text`` with each lone surrogate replaced by U+FFFD. No UTF-8 store or API
    takes one, and JSON's ``"\\ud800"`` escape makes one: kept, a single such
    message would fail every later write of its memory."""
    return text if text.isascii() else _LONE_SURROGATE.sub("\ufffd", text)


@dataclass
class ToolCall:
    """A model's request to call a tool with JSON arguments."""

    id: str
    name: str
    arguments: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "arguments": dict(self.arguments)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ToolCall:
        return cls(id=str(data["id"]), name=str(data["name"]), arguments=dict(data.get("arguments") or {}))


@dataclass(init=False)
class Message:
    """One chat message. Use the role subclasses to build them."""

    role: str
    content: str | None
    tool_calls: list[ToolCall]
    tool_call_id: str | None
    name: str | None

    def __init__(
        self,
        role: str,
        content: str | None = None,
        *,
        tool_calls: list[ToolCall] | None = None,
        tool_call_id: str | None = None,
        name: str | None = None,
    ) -> None:
        if role not in ROLES:
            raise InvalidValueError(f"unknown message role {role!r}; expected one of {ROLES}")
        if content is not None and not isinstance(content, str):
            raise InvalidTypeError(f"message content must be a str or None, got {type(content).__name__}")
        self.role = role
        self.content = storable_text(content) if content else content
        self.tool_calls = list(tool_calls or [])
        self.tool_call_id = tool_call_id
        self.name = storable_text(name) if isinstance(name, str) else name

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.tool_calls:
            data["tool_calls"] = [call.to_dict() for call in self.tool_calls]
        if self.tool_call_id is not None:
            data["tool_call_id"] = self.tool_call_id
        if self.name is not None:
            data["name"] = self.name
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Message:
        """Rebuild a message (as its role subclass) from :meth:`to_dict` output."""
        if not isinstance(data, dict) or "role" not in data:
            raise InvalidValueError(f"not a message record: {data!r}")
        role = data["role"]
        message = _ROLE_CLASSES.get(role, Message).__new__(_ROLE_CLASSES.get(role, Message))
        Message.__init__(
            message,
            role,
            data.get("content"),
            tool_calls=[ToolCall.from_dict(c) for c in data.get("tool_calls") or []],
            tool_call_id=data.get("tool_call_id"),
            name=data.get("name"),
        )
        return message


class SystemMessage(Message):
    """Instructions or injected context for the model."""

    def __init__(self, content: str, *, name: str | None = None) -> None:
        super().__init__("system", content, name=name)


class UserMessage(Message):
    """What the user said."""

    def __init__(self, content: str, *, name: str | None = None) -> None:
        super().__init__("user", content, name=name)


class AssistantMessage(Message):
    """The model's reply: text, tool calls, or both."""

    def __init__(
        self, content: str | None = None, *, tool_calls: list[ToolCall] | None = None
    ) -> None:
        super().__init__("assistant", content, tool_calls=tool_calls)


class ToolMessage(Message):
    """The result of one tool call, sent back to the model."""

    def __init__(self, content: str, *, tool_call_id: str, name: str | None = None) -> None:
        super().__init__("tool", content, tool_call_id=tool_call_id, name=name)


_ROLE_CLASSES: dict[str, type[Message]] = {
    "system": SystemMessage,
    "user": UserMessage,
    "assistant": AssistantMessage,
    "tool": ToolMessage,
}

__all__ = [
    "AssistantMessage",
    "Message",
    "SystemMessage",
    "ToolCall",
    "ToolMessage",
    "UserMessage",
]
