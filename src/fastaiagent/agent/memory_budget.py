"""What memory may add to the prompt: a token budget over the blocks' sections.

``Memory(max_memory_tokens=N)`` bounds what the blocks inject each turn (global
facts, plane facts, user facts, summary, recalled messages); the window is
never cut and does not count. Blocks are packed in prompt order, which is
their priority, and each block's notes in the order it rendered them (best
first: recall by score, facts as ranked): a note is kept when it fits in what
is left, else dropped, and a later, shorter note may still fit. A section's
heading and preamble are paid once, with its first kept note; a message that
is not a notes section (a custom block's text) is kept or dropped whole.

Tokens are estimated as one per four characters (English text averages about
that with the common tokenizers); it needs no tokenizer and costs one
``len`` per line. What was dropped is recorded on the ``memory.read`` span.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from fastaiagent.agent.memory_blocks import framing
from fastaiagent.agent.memory_blocks.base import SNIPPET_CHARS
from fastaiagent.llm.message import Message, SystemMessage

CHARS_PER_TOKEN = 4
MAX_DROPPED_LISTED = 10  # dropped notes named on the span (all are counted)


def estimate_tokens(text: str) -> int:
    """A tokenizer-free estimate: one token per four characters, at least one."""
    return max(1, -(-len(text) // CHARS_PER_TOKEN))


@dataclass
class Packed:
    """The messages that fit, the tokens they cost and what was left out."""

    messages: list[Message] = field(default_factory=list)
    tokens: int = 0
    dropped: list[tuple[str, str]] = field(default_factory=list)  # (block, note)

    def trace_attributes(self, budget: int) -> dict[str, object]:
        """The ``memory.read`` span attributes describing this packing."""
        return {
            "memory.budget_tokens": budget,
            "memory.tokens": self.tokens,
            "memory.dropped_count": len(self.dropped),
            "memory.dropped": [
                f"{block}: {note[:SNIPPET_CHARS]}"
                for block, note in self.dropped[:MAX_DROPPED_LISTED]
            ],
        }


def pack(rendered: Sequence[tuple[str, Sequence[Message]]], max_tokens: int) -> Packed:
    """Fit each block's messages (``(block name, messages)`` in priority order)
    into ``max_tokens``; see the module doc for the rule."""
    packed = Packed()
    left = max_tokens
    for block, messages in rendered:
        for message in messages:
            text = message.content or ""
            parts = framing.split_section(text)
            if parts is None:
                cost = estimate_tokens(text)
                if cost <= left:
                    packed.messages.append(message)
                    left -= cost
                else:
                    packed.dropped.append((block, text))
                continue
            left = _pack_section(packed, block, message, parts, left)
    packed.tokens = max_tokens - left
    return packed


def _pack_section(
    packed: Packed, block: str, message: Message, parts: tuple[str, list[str]], left: int
) -> int:
    """Keep the notes of one section that fit; returns the tokens left."""
    head, notes = parts
    head_cost = estimate_tokens(head)
    kept: list[str] = []
    for note in notes:
        cost = estimate_tokens(note) + (0 if kept else head_cost)
        if cost <= left:
            kept.append(note)
            left -= cost
        else:
            packed.dropped.append((block, note))
    if len(kept) == len(notes):
        packed.messages.append(message)
    elif kept:
        packed.messages.append(SystemMessage(head + "\n" + "\n".join(kept)))
    return left


__all__ = ["CHARS_PER_TOKEN", "Packed", "estimate_tokens", "pack"]
