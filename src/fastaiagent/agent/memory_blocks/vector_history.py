"""A past conversation as recall chunks, without running the agent (a chat import).

Each kept message becomes the chunk :meth:`VectorBlock.make_chunk` makes, said at
its own time, indexed with the messages before it (``context_turns``), chained
to its successor (``metadata["next"]``) as live turns are. Its id is derived
from the namespace, its position-independent content (role, time, text) and
how many equal messages came before it, so importing the same history twice
writes the same chunks again (an upsert), never a second copy.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter, deque
from collections.abc import Sequence
from datetime import datetime
from itertools import pairwise
from typing import TYPE_CHECKING, Any

from fastaiagent.errors import InvalidTypeError, InvalidValueError
from fastaiagent.facts.entities import ENTITIES_KEY
from fastaiagent.facts.index.embedding_cache import EMBEDDER_KEY, holds_cache, identity_of
from fastaiagent.facts.vectors import REPLIES_TO_KEY
from fastaiagent.kb.identity import same_embedder
from fastaiagent.kb.protocols import Chunk
from fastaiagent.llm.message import Message
from fastaiagent.recall.following import asks

if TYPE_CHECKING:
    from fastaiagent.agent.memory_blocks.vector import VectorBlock


# The end of a sentence: ., !, ? or the Arabic question mark before a space, or the
# ideographic ones.
_SENTENCE_END = re.compile(r"(?<=[.!?\u061f])\s+|(?<=[。！？])\s*")


def sentences_of(text: str) -> list[str]:
    """``text`` cut into sentences (none for blank text)."""
    return [part for part in _SENTENCE_END.split(text.strip()) if part]


def as_context(chunk: Chunk) -> str:
    """What ``chunk`` gives the message after it to be indexed with (``context_turns``):
    its text, and of the agent's reply only its last question and last sentence. A
    user answers what a reply asks and ends on ("Which would suit you better? I'll
    book it straight away."); the rest of a long reply would bury their short
    statement under words they never said. Both parts raised the everyday bench's
    support and coding chats (docs/research/recall-history.md); LoCoMo holds no
    replies."""
    if chunk.metadata.get("role") != "assistant":
        return chunk.text
    sentences = sentences_of(chunk.text)
    if not sentences:
        return chunk.text
    asked = [sentence for sentence in sentences[:-1] if asks(sentence)]
    return f"{asked[-1]} {sentences[-1]}" if asked else sentences[-1]


# The voice of a user's message without a name: the one user of a one-to-one chat.
ANONYMOUS_USER = "user:"


def voice_of(chunk: Chunk) -> str:
    """Who said ``chunk``: its role and speaker (``"user:Ana"``, ``"assistant:"``)."""
    speaker = chunk.metadata.get("speaker")
    return f"{chunk.metadata.get('role')}:{speaker if isinstance(speaker, str) else ''}"


def link_to_previous(
    chunk: Chunk,
    recent: deque[str],
    context_turns: int,
    embed_question: bool = False,
    asked_by: str | None = None,
) -> None:
    """Give ``chunk`` what the messages before it lend it (``recent``: their
    :func:`as_context`; ``asked_by``: the :func:`voice_of` the last one, None
    when unknown), then add its own to ``recent`` for the next message.

    With ``context_turns``, the chunk is indexed with those messages' keywords
    (``metadata["context"]``); with ``embed_question`` (what a block always
    does), unless it is the agent's reply or its speaker asked the question, it is
    embedded with the
    last question of the message just before it (``metadata["replies_to"]``,
    :func:`~fastaiagent.facts.vectors.embedded_text`): "They're the Aura 300"
    answers "Which headphones?". It raised both benchmarks, support chats most
    (docs/research/recall-history.md); the whole previous message embedded with it
    measured worse: only the question.
    A turn's recall query is the same text (``VectorBlock._question_answered``),
    so a turn still embeds its message once."""
    if context_turns and recent:
        chunk.metadata.setdefault("context", " ".join(recent))
    asked = question_answered(recent, asked_by, voice_of(chunk)) if embed_question else None
    if asked is not None:
        chunk.metadata.setdefault(REPLIES_TO_KEY, asked)
    recent.append(as_context(chunk))


def question_answered(recent: deque[str], asked_by: str | None, voice: str) -> str | None:
    """The question a message said in ``voice`` answers: the last one the message
    before it (``recent[-1]``, said in ``asked_by``) asks. None when it asks
    nothing, when the same voice asked it (going on, not answering) or when the
    agent speaks (its replies are embedded as they are)."""
    if not recent or asked_by == voice or voice.startswith("assistant:"):
        return None
    asked = [sentence for sentence in sentences_of(recent[-1]) if asks(sentence)]
    return asked[-1] if asked else None


def said_times(count: int, at: Sequence[float | datetime] | None, now: float) -> list[float]:
    """Epoch seconds for ``count`` messages: ``at`` checked (numbers or aware datetimes,
    one per message), or ``now`` for all when None."""
    if at is None:
        return [now] * count
    if isinstance(at, str | bytes) or len(at) != count:
        raise InvalidValueError(f"at= needs one time per message ({count}), got {at!r:.80}")
    times = []
    for value in at:
        if isinstance(value, datetime):
            if value.tzinfo is None:
                raise InvalidValueError(f"at= datetimes need a time zone, got {value!r}")
            times.append(value.timestamp())
        elif isinstance(value, int | float) and not isinstance(value, bool):
            times.append(float(value))
        else:
            raise InvalidTypeError(f"at= holds epoch seconds or datetimes, got {value!r:.80}")
    return times


def past_chunks(block: VectorBlock, messages: Sequence[Message], times: Sequence[float]) -> list[Chunk]:
    """The chunks of ``messages`` said at ``times`` (see the module), oldest first."""
    for message in messages:
        if not isinstance(message, Message):
            raise InvalidTypeError(f"add_history takes Message objects, got {type(message).__name__}")
    recent: deque[str] = deque(maxlen=block.context_turns or 1)
    seen: Counter[str] = Counter()
    chunks: list[Chunk] = []
    voice: str | None = None
    for message, said in zip(messages, times, strict=True):
        chunk = block.make_chunk(message)
        if chunk is None:
            continue
        chunk.metadata["created_at"] = said
        link_to_previous(chunk, recent, block.context_turns, True, voice)
        voice = voice_of(chunk)
        content = f"{block.namespace}\x00{message.role}\x00{said!r}\x00{chunk.text}"
        seen[content] += 1
        chunk.id = "h-" + hashlib.sha256(f"{content}\x00{seen[content]}".encode()).hexdigest()[:32]
        chunks.append(chunk)
    for before, after in pairwise(chunks):
        before.metadata["next"] = after.id
    if chunks:  # no successor: a link to nothing, the same on every import
        chunks[-1].metadata["next"] = "h-" + hashlib.sha256(f"{chunks[-1].id}\x00next".encode()).hexdigest()[:32]
    return chunks


def embed_and_store(block: Any, chunks: list[Chunk]) -> int:
    """Embed and store ``chunks`` through ``block``'s own batch path, a batch at a time;
    returns how many the store did not hold. A chunk it holds as is (the same text,
    links and embedder) is neither embedded nor written again: importing the same
    history twice costs one read and returns 0."""
    held = {found.id: found for found in block.store.get([c.id for c in chunks])} if chunks else {}
    identity = identity_of(block.embedder) if held and holds_cache(block.store) else None
    changed = [c for c in chunks if not _held_as_is(held.get(c.id), c, identity)]
    for chunk in changed:  # written again (a longer history): its mentions are in the book already
        before = held.get(chunk.id)
        if before is not None and before.text == chunk.text and ENTITIES_KEY in before.metadata:
            chunk.metadata[ENTITIES_KEY] = before.metadata[ENTITIES_KEY]
    for first in range(0, len(changed), block.batch_size):
        block.store_batch(changed[first : first + block.batch_size])
    return sum(1 for chunk in chunks if chunk.id not in held)


def _held_as_is(stored: Chunk | None, chunk: Chunk, identity: str | None) -> bool:
    """Whether ``stored`` is ``chunk`` as the store would hold it now (a chunk whose
    successor changed, e.g. a longer history imported, is written again)."""
    if stored is None or stored.text != chunk.text:
        return False
    made_by = stored.metadata.get(EMBEDDER_KEY)
    if identity is not None and (made_by is None or not same_embedder(made_by, identity)):
        return False
    return all(stored.metadata.get(key) == value for key, value in chunk.metadata.items())


__all__ = [
    "ANONYMOUS_USER",
    "as_context",
    "embed_and_store",
    "link_to_previous",
    "past_chunks",
    "question_answered",
    "said_times",
    "sentences_of",
    "voice_of",
]
