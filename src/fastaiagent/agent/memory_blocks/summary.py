"""SummaryBlock: a rolling LLM summary of the turns older than the recent window."""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from fastaiagent import trace
from fastaiagent._validate import integer, text
from fastaiagent.agent.memory_blocks import framing
from fastaiagent.agent.memory_blocks.base import MemoryBlock, check_llm, described
from fastaiagent.errors import InvalidTypeError, InvalidValueError
from fastaiagent.llm.base import BaseLLM
from fastaiagent.llm.message import Message, SystemMessage, UserMessage

logger = logging.getLogger("fastaiagent.memory")

SUMMARY_PREFIX = "Summary of the earlier conversation:"  # the heading of the rendered message
MAX_MESSAGE_CHARS = 2_000  # each message is cut here in the summary prompt: bounded input
MIN_PENDING_CAP = 50

SUMMARY_PROMPT = """\
You keep a running summary of a conversation between a user and an assistant.
Merge the previous summary with the new messages into one updated summary.
Keep what matters later: who the user is, their goals, preferences, decisions, \
facts they gave and open questions. Drop greetings and small talk. Write plain \
prose in the third person, under {max_chars} characters. Answer with the \
summary only."""


def render_summary(summary: str) -> str:
    """The injected message: the summary is written by a model from what users
    said, so it is one quoted note under the heading and preamble."""
    return framing.notes_section(
        SUMMARY_PREFIX, [summary], [framing.SUMMARY], framing.SUMMARY_PREAMBLE
    )


def cut_summary(text: str, max_chars: int) -> str:
    """``text`` cut to at most ``max_chars``, at a word boundary when one is near."""
    text = text.strip()
    if len(text) <= max_chars:
        return text
    cut = text[:max_chars]
    space = cut.rfind(" ")
    if space >= max_chars * 0.8:
        cut = cut[:space]
    return cut.rstrip()


@dataclass
class _Refresh:
    """One summary refresh: the previous summary and the messages it folds in."""

    previous: str
    messages: list[Message]


class SummaryBlock(MemoryBlock):
    """A rolling summary of everything older than the last ``keep_last`` messages.

    Every ``summarize_every`` messages (a turn is two: the user's and the
    reply) the block asks ``llm`` to fold the messages that left the
    ``keep_last`` window since the last refresh into the previous summary.
    The input of a refresh is bounded (previous summary + those messages,
    each cut at 2,000 characters) and the summary never covers a message still
    among the last ``keep_last``. Summaries longer than ``max_chars`` are cut.
    If the LLM fails, the error is logged, the summary stays as it was and the
    messages wait for the next refresh (at most a bounded number of them).
    """

    name: str = "summary"

    def __init__(
        self,
        llm: BaseLLM,
        keep_last: int = 10,
        summarize_every: int = 5,
        max_chars: int = 800,
        *,
        name: str = "summary",
    ) -> None:
        self.llm = check_llm("SummaryBlock", llm)
        self.keep_last = integer("keep_last", keep_last, minimum=1)
        self.summarize_every = integer("summarize_every", summarize_every, minimum=1)
        self.max_chars = integer("max_chars", max_chars, minimum=1)
        self.name = text("name", name)
        # Messages waiting to be summarised are bounded too: if the LLM keeps
        # failing, the oldest unsummarised ones are dropped rather than piling up.
        self.max_pending = max(MIN_PENDING_CAP, 4 * self.summarize_every)
        self.summary = ""
        self.message_count = 0
        self._recent: deque[Message] = deque()
        self._pending: deque[Message] = deque()
        self._refreshing = False
        self._dropped_warned = False
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return described("SummaryBlock", keep_last=self.keep_last,
                         summarize_every=self.summarize_every, max_chars=self.max_chars)  # fmt: skip

    # -- the prompt ------------------------------------------------------------

    def build_prompt(self, previous: str, messages: Sequence[Message]) -> list[Message]:
        """The refresh prompt: instructions, the previous summary, the new messages."""
        lines = []
        for message in messages:
            content = (message.content or "").strip()
            if len(content) > MAX_MESSAGE_CHARS:
                content = content[:MAX_MESSAGE_CHARS] + " [...]"
            lines.append(f"{message.role}: {content}")
        body = (
            f"Previous summary:\n{previous or '(none yet)'}\n\n"
            "New messages, oldest first:\n" + "\n".join(lines)
        )
        return [SystemMessage(SUMMARY_PROMPT.format(max_chars=self.max_chars)), UserMessage(body)]

    # -- state changes (quick, under the lock) -----------------------------------

    def _observe(self, message: Message) -> _Refresh | None:
        """Record ``message``; return the refresh that is due now, if any."""
        if not (message.content or "").strip():
            return None  # a tool-call-only reply has nothing to summarise
        with self._lock:
            self.message_count += 1
            self._recent.append(message)
            while len(self._recent) > self.keep_last:
                self._pending.append(self._recent.popleft())
            while len(self._pending) > self.max_pending:
                self._pending.popleft()
                if not self._dropped_warned:
                    self._dropped_warned = True
                    logger.warning(
                        "SummaryBlock: summaries keep failing; dropping the oldest "
                        "unsummarised messages (at most %d are kept)",
                        self.max_pending,
                    )
            due = self.message_count % self.summarize_every == 0
            if not due or not self._pending or self._refreshing:
                return None
            self._refreshing = True
            return _Refresh(self.summary, list(self._pending))

    def _finish(self, refresh: _Refresh, reply: str | None) -> bool:
        """Apply an LLM answer (None = the call failed); True if the summary changed."""
        with self._lock:
            self._refreshing = False
            text = cut_summary(reply or "", self.max_chars)
            if not text:
                if reply is not None:
                    logger.warning("SummaryBlock: the summary LLM answered nothing; summary kept")
                return False
            self.summary = text
            # The folded messages are the oldest pending ones; newer may have arrived.
            for _ in range(min(len(refresh.messages), len(self._pending))):
                self._pending.popleft()
            return True

    def _report(self, refresh: _Refresh | None, changed: bool) -> None:
        if refresh is None:
            trace.annotate({"memory.action": "stored"})
        elif changed:
            trace.annotate(
                {
                    "memory.action": "summarized",
                    "memory.detail": f'{{"messages_summarized": {len(refresh.messages)}}}',
                }
            )
        else:
            trace.annotate({"memory.action": "failed"})

    # -- MemoryBlock -----------------------------------------------------------

    def on_message(self, message: Message) -> None:
        refresh = self._observe(message)
        changed = False
        if refresh is not None:
            reply = None
            try:
                response = self.llm.complete(self.build_prompt(refresh.previous, refresh.messages))
                reply = response.content
            except Exception as exc:
                logger.warning("SummaryBlock: the summary LLM failed; summary kept: %s", exc)
            changed = self._finish(refresh, reply)
        self._report(refresh, changed)

    async def aon_message(self, message: Message) -> None:
        """Like :meth:`on_message`, awaiting the LLM's ``acomplete`` (the loop stays free)."""
        refresh = self._observe(message)
        changed = False
        if refresh is not None:
            reply = None
            try:
                prompt = self.build_prompt(refresh.previous, refresh.messages)
                response = await self.llm.acomplete(prompt)
                reply = response.content
            except Exception as exc:
                logger.warning("SummaryBlock: the summary LLM failed; summary kept: %s", exc)
            changed = self._finish(refresh, reply)
        self._report(refresh, changed)

    def render(self, query: str) -> list[Message]:
        summary = self.summary
        return [SystemMessage(render_summary(summary))] if summary else []

    def clear(self) -> None:
        with self._lock:
            self.summary = ""
            self.message_count = 0
            self._recent.clear()
            self._pending.clear()

    def isolated_copy(self) -> SummaryBlock:
        """A copy with the same LLM and its own state."""
        copy = SummaryBlock(
            self.llm, self.keep_last, self.summarize_every, self.max_chars, name=self.name
        )
        copy._restore(self._state())
        return copy

    # -- persistence -----------------------------------------------------------

    def _state(self) -> dict[str, Any]:
        with self._lock:
            return {
                "version": 1,
                "summary": self.summary,
                "message_count": self.message_count,
                "recent": [m.to_dict() for m in self._recent],
                "pending": [m.to_dict() for m in self._pending],
            }

    def _restore(self, data: dict[str, Any]) -> None:
        with self._lock:
            self.summary = data["summary"]
            self.message_count = data["message_count"]
            self._recent = deque(data["recent"])
            self._pending = deque(data["pending"])

    def dump_state(self) -> dict[str, Any]:
        """The summary and the unsummarised messages, as JSON-ready data."""
        return self._state()

    def load_state(self, data: Any) -> None:
        """Replace the state with :meth:`dump_state` output; corrupt data raises
        and leaves the current state as it was."""
        if data is None:
            return
        try:
            if not isinstance(data, dict):
                raise InvalidTypeError("not an object")
            summary = data.get("summary", "")
            count = data.get("message_count", 0)
            if not isinstance(summary, str):
                raise InvalidTypeError("summary is not a string")
            if isinstance(count, bool) or not isinstance(count, int) or count < 0:
                raise InvalidTypeError("message_count is not a non-negative int")
            recent = [Message.from_dict(m) for m in data.get("recent", [])]
            pending = [Message.from_dict(m) for m in data.get("pending", [])]
        except (TypeError, ValueError, KeyError, AttributeError) as exc:
            raise InvalidValueError(f"summary state is corrupt: {exc}") from exc
        # A file saved with a larger window: the overflow is due for summarising.
        overflow = max(0, len(recent) - self.keep_last)
        pending += recent[:overflow]
        recent = recent[overflow:]
        self._restore(
            {
                "summary": cut_summary(summary, self.max_chars),
                "message_count": count,
                "recent": recent,
                "pending": pending[-self.max_pending :],
            }
        )


__all__ = ["SUMMARY_PREFIX", "SummaryBlock", "cut_summary", "render_summary"]
