"""A recall query, read once into a typed, frozen :class:`RecallQuery`.

Everything recall needs to know about the question is read here, in one pass,
before any search: its terms (the keyword side's tokens), the participants it
names and whom it asks about, the time it points to (:mod:`.dates`), whether it
asks how things stand now or were at first, whether it asks what the agent said,
and its script. The people and things it names are resolved by the entity side
(:mod:`.candidates`), against the user's book of entities.
The searches and the ranking only read the object; a widening pass reuses it.

- **Participants.** In a conversation with several named speakers
  (``Message.name``), "What books has Melanie read?" is about Melanie's own
  messages. The name says little to an embedding model except "a person", so
  it is taken out of the text that is embedded (:attr:`RecallQuery.embedded`),
  and the speaker it asks about is :attr:`RecallQuery.speaker`. A name is a
  whole run of words written as the speaker's name is.
- **Words of a language** ("now", "originally", "did you") come from the one
  table of :mod:`.words`.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import timezone, tzinfo
from typing import Literal

from fastaiagent.facts.vectors import with_question
from fastaiagent.kb.bm25 import has_cjk, tokenize
from fastaiagent.recall.dates import DateCue, date_cue
from fastaiagent.recall.kept import kept_for_short_texts
from fastaiagent.recall.words import WORDS, pattern

_WORD = re.compile(r"\w+")
_SPACES = re.compile(r"\s+")
_PAIRED = re.compile(
    r"\s*(?:,\s*)?(?:" + "|".join(re.escape(w) for w in WORDS["pair"]["en"]) + r"|,)\s*", re.IGNORECASE
)
_LATEST = pattern("latest")
_EARLIEST = pattern("earliest")
_ABOUT_REPLIES = pattern("about_replies")
_OWNER = "'s"
# Queries whose reading is kept: the same question is often asked again (a retry, a
# door asked twice, an agent checking what it just stored).
QUERIES_KEPT = 256

Span = tuple[int, int]


class _Reads:
    """How many queries were read (for the test that a recall reads its query once)."""

    def __init__(self) -> None:
        self.count = 0
        self._lock = threading.Lock()

    def add(self) -> None:
        with self._lock:
            self.count += 1


READS = _Reads()


@dataclass(frozen=True)
class RecallQuery:
    """A recall query as read once (see the module). Build it with :func:`read_query`."""

    text: str
    """The query as asked."""
    replies_to: str | None
    """The question the query answers (embedded with it), if any."""
    terms: tuple[str, ...]
    """Its keyword tokens (``kb.bm25.tokenize``)."""
    names: frozenset[str]
    """The participants it names, of those known when it was read."""
    speaker: str | None
    """The participant it asks about (see :meth:`about`)."""
    embedded: str
    """What the dense side embeds: the text without participant names, then the
    question it answers."""
    when: DateCue | None
    """The months, years and spans of time it points to."""
    time_order: int
    """1: it asks how things stand now; -1: how they were at first; else 0."""
    about_replies: bool
    """Whether it asks what the agent said ("What did you suggest ...?")."""
    script: Literal["cjk", "spaced"]
    """``"cjk"`` when written in Chinese, Japanese or Korean script."""
    now: float
    """When it was asked (UNIX seconds): what "yesterday" is read against."""
    words: tuple[Span, ...] = field(default=(), repr=False)
    """Where its words are (start, end): names are matched on them, not re-read."""
    known: frozenset[str] = field(default=frozenset(), repr=False, compare=False)
    """The speakers known when it was read (:attr:`speaker` is among them)."""

    @property
    def said(self) -> str:
        """The query with the question it answers, as a stored message is embedded."""
        return with_question(self.text, self.replies_to)

    def about(self, known: Iterable[str]) -> str | None:
        """The participant among ``known`` this query asks about: the one it names,
        or, naming several, the first it names as a subject: not as an owner
        ("Caroline's decision") and not in a pair ("Did Jon and Gina both ...",
        which prefers neither)."""
        known = set(known)
        if known == self.known:  # no speaker learnt since it was read
            return self.speaker
        return _subject(self.text, self.words, known)


def _subject(text: str, words: Sequence[Span], known: Iterable[str]) -> str | None:
    """See :meth:`RecallQuery.about`."""
    found = sorted(m for name in set(known) if name for m in _mentions(text, words, name))
    if len({name for _, _, name in found}) <= 1:
        return found[0][2] if found else None
    for index, (start, end, name) in enumerate(found):
        if end - start > len(name):  # "Caroline's": an owner, not the subject
            continue
        before = found[index - 1] if index else None
        after = found[index + 1] if index + 1 < len(found) else None
        paired = (before is not None and _PAIRED.fullmatch(text[before[1] : start])) or (
            after is not None and _PAIRED.fullmatch(text[end : after[0]])
        )
        return None if paired else name
    return None


def _mentions(text: str, words: Sequence[Span], name: str) -> list[tuple[int, int, str]]:
    """Where ``text`` (its ``words``) names ``name``: a run of whole words written as
    the name is (its ``'s`` included), as ``(start, end, name)``."""
    parts = _WORD.findall(name)
    if not parts:
        return []
    found = []
    for index, (start, _) in enumerate(words[: len(words) - len(parts) + 1]):
        end = words[index + len(parts) - 1][1]
        if text[start:end] != name:
            continue
        end += len(_OWNER) if text.startswith(_OWNER, end) else 0
        found.append((start, end, name))
    return found


def without_names(text: str, words: Sequence[Span], names: Iterable[str]) -> str:
    """``text`` with every participant name (and its ``'s``) removed; ``text``
    itself when nothing would be left."""
    cut = sorted(m[:2] for name in set(names) if name for m in _mentions(text, words, name))
    if not cut:
        return text
    pieces, kept_from = [], 0
    for start, end in cut:
        if start >= kept_from:
            pieces += [text[kept_from:start], " "]
            kept_from = end
    pieces.append(text[kept_from:])
    stripped = _SPACES.sub(" ", "".join(pieces)).strip()
    return stripped if stripped.strip(" ?.!,'") else text


def read_query(
    text: str,
    *,
    speakers: Iterable[str] = (),
    now: float,
    tz: tzinfo = timezone.utc,
    replies_to: str | None = None,
) -> RecallQuery:
    """Read ``text`` once into a :class:`RecallQuery`: ``speakers`` are the
    participants known now, ``now`` / ``tz`` what its dates are read against."""
    READS.add()
    read, dated = _read_text(text, frozenset(speakers), tz, replies_to)
    # Only a time phrase ("yesterday") depends on ``now``; a text with none has none at any time.
    return _asked_at(read, now, date_cue(text, now, tz) if dated else read.when)


def _asked_at(read: RecallQuery, now: float, when: DateCue | None) -> RecallQuery:
    """``read`` as asked at ``now``: a copy of the kept reading (``dataclasses.replace``
    costs ~3 us a query, most of the reading's cost when it is kept)."""
    asked = object.__new__(RecallQuery)
    fields = asked.__dict__
    fields.update(read.__dict__)
    fields["now"], fields["when"] = now, when
    return asked


@kept_for_short_texts(QUERIES_KEPT)
def _read_text(
    text: str, known: frozenset[str], tz: tzinfo, replies_to: str | None
) -> tuple[RecallQuery, bool]:
    """What :func:`read_query` reads of ``text`` that does not depend on when it was
    asked (``when`` read at time 0), and whether it names a time at all."""
    words = tuple(m.span() for m in _WORD.finditer(text))
    named = frozenset(name for name in known if name and _mentions(text, words, name))
    latest, earliest = _LATEST.search(text) is not None, _EARLIEST.search(text) is not None
    when = date_cue(text, 0.0, tz)
    read = RecallQuery(
        text=text,
        replies_to=replies_to,
        terms=tuple(tokenize(text)),
        names=named,
        speaker=_subject(text, words, named),
        embedded=with_question(without_names(text, words, named), replies_to),
        when=when,
        time_order=int(latest) - int(earliest),
        about_replies=_ABOUT_REPLIES.search(text) is not None,
        script="cjk" if has_cjk(text) else "spaced",
        now=0.0,
        words=words,
        known=known,
    )
    return read, when is not None


__all__ = ["READS", "RecallQuery", "read_query", "without_names"]
