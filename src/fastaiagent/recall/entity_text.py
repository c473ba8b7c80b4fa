"""A message as the entity reader sees it: its words, where sentences start, and
the :class:`Mention` it yields (rules: :mod:`fastaiagent.recall.entities`)."""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from functools import lru_cache
from typing import NamedTuple

from fastaiagent.facts.entities import entity_term  # one posting format, the stores' own

OWN = "my "
"""The key of a description-only mention starts so: "my sister", "my dog"."""


@dataclass(frozen=True)
class Mention:
    """One entity as a message names it.

    ``key`` is the normalised name ("lena", "acme corp"), or for a description
    without a name ``"my " + description`` ("my sister"); ``surface`` the words
    as written; ``kind`` one of ``person``, ``pet``, ``place``, ``organisation``,
    ``product``, ``project``, ``other``; ``description`` the canonical
    description it was given ("sister", "dog" for "puppy"), if any."""

    key: str
    surface: str
    kind: str
    description: str | None = None

    @property
    def named(self) -> bool:
        """False for a description-only mention ("my sister")."""
        return self.description is None or self.key != OWN + self.description


def own_key(description: str) -> str:
    """The key of the user's own ``description`` ("sister" -> "my sister")."""
    return OWN + description


def normalise(name: str) -> str:
    """The key of a name: NFKC, case-folded, one space between words, no "'s"."""
    folded = " ".join(unicodedata.normalize("NFKC", name).casefold().replace("’", "'").split())
    return folded[:-2] if folded.endswith("'s") else folded


_NO_CASE = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"
_WORD = re.compile(rf"[^\W\d_{_NO_CASE}](?:[^\W_{_NO_CASE}]|['’\-](?=[^\W\d_{_NO_CASE}]))*")
# What ends a sentence between two words; an opening double quote starts one.
_BREAK = re.compile(r"[.!?;:\n•*\"“„«「『]|(?:^|\s)[-–—]\s")
_PAUSE = re.compile(r"[,()–—]")  # "Lena, my sister", "Lena (my sister)"
_CODE = re.compile(r"```.*?(?:```|$)|`[^`\n]*`", re.DOTALL)  # code names no one
_NO_CASE_RUN = re.compile(rf"[{_NO_CASE}]")
class _Word(NamedTuple):
    text: str
    fold: str  # normalised, without "'s"
    start: int
    end: int
    initial: bool  # opens a sentence
    gap: str  # the text between the previous word and this one
    upper: bool  # starts with a capital


def _scan(text: str) -> tuple[_Word, ...]:
    out: list[_Word] = []
    last = 0
    for match in _WORD.finditer(text):
        gap = text[last : match.start()]
        initial = _BREAK.search(gap) is not None or (not out and not _NO_CASE_RUN.search(gap))
        word = match.group()
        fold = word.lower() if word.isascii() else normalise(word)
        if fold.endswith("'s"):
            fold = fold[:-2]
        out.append(_Word(word, fold, match.start(), match.end(), initial, gap, word[0].isupper()))
        last = match.end()
    return tuple(out)


_words = lru_cache(maxsize=8)(_scan)  # a message is read by several steps: mentions, the book


class _Found:
    """Mentions by key, in the order of their first place in the message."""

    def __init__(self) -> None:
        self.by_key: dict[str, tuple[int, Mention]] = {}

    def add(self, at: int, key: str, surface: str, kind: str, description: str | None = None) -> None:
        if not key:
            return
        old = self.by_key.get(key)
        if old is not None:
            _, was = old
            kind = was.kind if was.kind != "other" else kind
            description = was.description or description
            surface, at = was.surface, min(at, old[0])
        self.by_key[key] = (at, Mention(key, surface, kind, description))

    def mentions(self) -> list[Mention]:
        return [m for _, m in sorted(self.by_key.values(), key=lambda pair: pair[0])]


__all__ = ["OWN", "Mention", "entity_term", "normalise", "own_key"]
