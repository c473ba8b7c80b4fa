"""The words recall reads in a query, by language: one table.

Most of a query is read without knowing its language: its terms (the keyword
side's tokenizer), the names of the people in the conversation (whatever they
are), the question mark that ends a message that asks (ASCII, full-width and
Arabic). A few cues need words, and those words are all here, in :data:`WORDS`:
one entry per cue, one tuple of words per language. A cue in a language that is
not listed is simply not read (the query ranks as with the cue off).

Languages covered: English (``en``) for every cue; German (``de``), Chinese
(``zh``) and Japanese (``ja``) for "now" / "at first". The date phrases of
:mod:`.dates` ("yesterday", "two weeks before 11 August 2023", month names) are
English. docs/semantic.md lists the same. To read a cue in another language, add
its words to the entry: nothing else changes.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

WORDS: Mapping[str, Mapping[str, tuple[str, ...]]] = {
    # "How do things stand now?": the later of two statements of one fact answers.
    "latest": {
        "en": ("now", "nowadays", "currently", "current", "latest", "these days", "at the moment"),
        "de": ("jetzt", "aktuell", "aktuelle", "aktueller", "aktuellen", "aktuelles", "derzeit",
               "momentan", "inzwischen", "mittlerweile"),
        "zh": ("现在", "目前", "如今", "最新"),
        "ja": ("現在",),
    },
    # "What did I originally order?": the earlier one. "first" and "before" are left
    # out: "first place", "the week before 3 June" are no such cue.
    "earliest": {
        "en": ("originally", "initially", "at first", "to begin with", "at the outset"),
        "de": ("ursprünglich", "anfangs", "zunächst", "am anfang"),
        "zh": ("一开始", "最初", "起初", "原本", "当初"),
        "ja": ("元々", "もともと"),
    },
    # "What did you suggest ...?": a question about the agent's own words.
    "about_replies": {
        "en": ("did you", "you said", "you told", "you suggested", "you recommended",
               "you mentioned", "you proposed", "you advised", "you meant"),
    },
    # Words that pair two names ("Did Jon and Gina both ..."): the query prefers neither.
    "pair": {"en": ("and", "or", "&")},
    # Words of time before a month or a year ("in May", "since 2019"): only there is a
    # month or a year a time the query points to ("the 2024 release" is content).
    "when": {
        "en": ("in", "on", "during", "since", "before", "after", "between", "until", "till", "by",
               "from", "of", "around", "through", "throughout", "early", "late", "mid", "last",
               "next", "this", "that"),
    },
    # Seasons a year completes ("summer 2022").
    "season": {"en": ("spring", "summer", "autumn", "fall", "winter")},
}


def languages() -> list[str]:
    """Every language some cue is read in (the docs list them)."""
    return sorted({language for cue in WORDS.values() for language in cue})


def words_of(cue: str) -> tuple[str, ...]:
    """Every word of ``cue``, all languages."""
    return tuple(word for words in WORDS[cue].values() for word in words)


def alternatives(cue: str) -> str:
    """The words of ``cue`` as one regex alternation, longest first (no groups)."""
    return "|".join(re.escape(w) for w in sorted(words_of(cue), key=len, reverse=True))


def pattern(cue: str) -> re.Pattern[str]:
    """A case-blind pattern for any word of ``cue``: whole words in scripts with
    spaces, anywhere in Chinese and Japanese (no spaces between words there)."""
    spaced = [w for w in words_of(cue) if w.isascii() or not _unspaced(w)]
    unspaced = [w for w in words_of(cue) if w not in spaced]
    parts = []
    if spaced:
        parts.append(r"\b(?:" + "|".join(re.escape(w) for w in sorted(spaced, key=len, reverse=True)) + r")\b")
    parts += [re.escape(w) for w in unspaced]
    return re.compile("|".join(parts), re.IGNORECASE)


def _unspaced(word: str) -> bool:
    """Whether ``word`` is written in a script without spaces between words."""
    return any("\u3040" <= ch <= "\u30ff" or "\u3400" <= ch <= "\u9fff" for ch in word)


__all__ = ["WORDS", "alternatives", "languages", "pattern", "words_of"]
