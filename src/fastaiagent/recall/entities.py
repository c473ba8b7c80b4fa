"""The people and things a message talks about, found without an LLM.

:func:`mentions` reads one message with rules about the shape of text, not about
one language:

- a **capitalised word or run of words** inside a sentence ("talked to Lena",
  "Acme Corp", "Bank of America"); one that opens a sentence only when the same
  word is capitalised elsewhere in the message, when a description is set
  beside it ("Lena, my sister, ..."), in a run of several (less a verb that
  opens it: "Booked Pine Hollow"), or when the caller (the user's entity book)
  knows it. German capitalises every noun, so in a German message a
  capitalised word needs more evidence (the next rules);
- a name **after a naming cue** ("a puppy we named Biscuit", "mein Hund heißt
  Bello", "mi gato se llama Toby", "我的狗叫小白"), with the thing it names
  ("puppy": a dog);
- a **relation**: a possessive, a description, a name ("my sister Lena", "our
  dog Biscuit", "ma sœur Léa"); a possessive and a description alone ("my
  sister") is a mention of that one person or thing, keyed ``"my sister"``;
- a short **quoted or bracketed name** ("the project "Falcon"", 「ポチ」, 《三体》),
  the one rule that works in scripts without capitals.

Words a rule needs (cues, possessives, descriptions and their synonyms, words
that are never names) are in the one table, :mod:`fastaiagent.recall.words`.
Resolving mentions across messages (aliases, "the dog" for Biscuit) is
:class:`~fastaiagent.recall.entity_book.EntityBook`'s work.
"""

from __future__ import annotations

import re
from collections.abc import Container, Sequence

from fastaiagent._validate import text as check_text
from fastaiagent.recall.entity_text import (
    _BREAK,
    _CODE,
    _NO_CASE_RUN,
    _PAUSE,
    OWN,
    Mention,
    _Found,
    _scan,
    _Word,
    _words,
    entity_term,
    normalise,
    own_key,
)
from fastaiagent.recall.words import (
    CJK_CUES,
    CJK_DESCRIPTIONS,
    CONJUNCTIONS,
    CONNECTORS,
    CUE_OBJECTS,
    CUES,
    DESCRIPTIONS,
    DETERMINERS,
    GERMAN_MARKERS,
    GERMAN_NOT_PLACES,
    GERMAN_PLACE_WORDS,
    KANA_CUES,
    KIND_CUES,
    KIND_OF,
    NOT_NAMES,
    ORG_SUFFIXES,
    OWN_POSSESSIVES,
    PLACE_WORDS,
    POSSESSIVES,
    STRONG_CUES,
    TITLES,
)

_MOST_QUOTES = 64  # quoted spans read per message: a long run of quotes costs no more
_QUOTES = frozenset("\"“„«'「『《")
_QUOTED = re.compile(
    r"\"([^\"\n]{1,40})\"|“([^”\n]{1,40})”|„([^“”\n]{1,40})[“”]|«\s?([^»\n]{1,40}?)\s?»"
    r"|「([^」\n]{1,40})」|『([^』\n]{1,40})』|(《)([^》\n]{1,40})》|(?<!\w)'([^'\n]{1,40})'(?!\w)"
)



def _description(word: _Word) -> str | None:
    entry = DESCRIPTIONS.get(word.fold)
    return entry[0] if entry else None


def _is_name_word(word: _Word) -> bool:
    return word.fold not in NOT_NAMES and word.fold not in DESCRIPTIONS and word.fold not in TITLES


_SECOND_CONNECTORS = CONNECTORS | {"the"}  # "The Lord of the Rings"


def _run_end(words: Sequence[_Word], start: int, longest: int = 6) -> int:
    """The last index of the capitalised run from ``start``: words joined by spaces
    only, or by up to two connectors ("Bank of America", "Ana de la Cruz"); at most
    ``longest`` words."""
    end = start
    while end + 1 < min(len(words), start + longest):
        after = end + 1
        while after < len(words) and after - end <= 2 and not words[after].upper:
            if words[after].fold not in (CONNECTORS if after == end + 1 else _SECOND_CONNECTORS):
                break
            after += 1
        if any(w.gap.strip() for w in words[end + 1 : after + 1]) or after >= len(words) or not words[after].upper:
            break
        end = after
    return end


def _name_at(words: Sequence[_Word], index: int, lower_ok: bool = False) -> tuple[int, int] | None:
    """The name starting at ``index`` as ``(first, last)`` word indices: a capitalised
    run, or (``lower_ok``) one lower-case word; None when there is none."""
    if index >= len(words) or _BREAK.search(words[index].gap) or not _is_name_word(words[index]):
        return None
    if words[index].upper:
        return index, _run_end(words, index)
    return (index, index) if lower_ok else None


def _description_near(words: Sequence[_Word], before: int, reach: int = 6) -> str | None:
    """The nearest description in the ``reach`` words before index ``before``, also in
    the sentence before ("We got a puppy! We named him ...")."""
    for index in range(before - 1, max(-1, before - 1 - reach), -1):
        found = _description(words[index])
        if found:
            return found
    return None


def _surface(text: str, words: Sequence[_Word], first: int, last: int) -> str:
    surface = text[words[first].start : words[last].end]
    return surface[:-2] if surface.endswith(("'s", "’s")) else surface


def _key(words: Sequence[_Word], first: int, last: int) -> str:
    return " ".join(w.fold for w in words[first : last + 1])


def _cued(text: str, words: Sequence[_Word], found: _Found) -> None:
    """Names after a naming cue: "a puppy we named Biscuit", "se llama Ana"."""
    for index, word in enumerate(words):
        cue = word.fold.rsplit("'", 1)[-1]
        pair = f"{words[index - 1].fold} {cue}" if index else cue
        if cue not in CUES and pair not in CUES:
            continue
        described = _description_near(words, index - (pair in CUES and " " in pair))
        after = index + 1 + (index + 1 < len(words) and words[index + 1].fold in CUE_OBJECTS)
        name = _name_at(words, after, lower_ok=described is not None or cue in STRONG_CUES or pair in STRONG_CUES)
        if name:
            kind = KIND_OF[described] if described else "other"
            found.add(words[name[0]].start, _key(words, *name), _surface(text, words, *name), kind, described)


def _related(text: str, words: Sequence[_Word], found: _Found) -> None:
    """"my sister Lena", "our new puppy, Biscuit", and "my sister" alone."""
    for index, word in enumerate(words):
        if word.fold not in POSSESSIVES or (index and _apposition(words, index - 1)):
            continue  # "Lena, my sister": the name's description
        for at in range(index + 1, min(index + 4, len(words))):
            if _BREAK.search(words[at].gap) or words[at].fold in CUES or words[at].fold in CONJUNCTIONS:
                break
            described = _description(words[at])
            if described is None:
                continue
            name = _name_at(words, at + 1)
            if name:
                surface = _surface(text, words, *name)
                found.add(words[name[0]].start, _key(words, *name), surface, KIND_OF[described], described)
            elif word.fold in OWN_POSSESSIVES:
                surface = text[word.start : words[at].end]
                found.add(word.start, own_key(described), surface, KIND_OF[described], described)
            break


def _apposition(words: Sequence[_Word], after: int) -> str | None:
    """The description set beside a capitalised name ending at ``after``, closed by
    a pause or the end: "Lena, my sister, ...", "Lena (my sister)"; not "Whoa,
    your store looks great"."""
    index = after + 1
    if not words[after].upper or index >= len(words) or words[index].fold not in POSSESSIVES:
        return None
    if not _PAUSE.search(words[index].gap):
        return None
    for at in range(index + 1, min(index + 4, len(words))):
        found = _description(words[at])
        if found:
            closed = at + 1 == len(words) or _PAUSE.search(words[at + 1].gap) or _BREAK.search(words[at + 1].gap)
            return found if closed else None
    return None


def capitalises_nouns(text: str) -> bool:
    """Whether ``text`` reads as German, where every noun is capitalised (two of
    the table's German marker words)."""
    return len(GERMAN_MARKERS.intersection(w.fold for w in _words(text))) >= 2


def _capitalised(
    text: str, words: Sequence[_Word], found: _Found, german: bool, known: Container[str]
) -> None:
    """Capitalised words and runs of them (see the module's docstring)."""
    # German capitalises nouns anywhere: there only a known name is one "elsewhere"
    elsewhere = {w.fold for w in words if (w.upper and not w.initial and not german) or w.fold in known}
    index = 0
    while index < len(words):
        if not words[index].upper:
            index += 1
            continue
        end = _run_end(words, index)
        first, titled = _trimmed(words, index, end)
        if first == index < end and words[first].initial and _capitalised_by_place(words, first, elsewhere):
            first, _ = _trimmed(words, first + 1, end)  # "Booked Pine Hollow": the verb opens it
        last = end
        while last >= first and (words[last].fold in NOT_NAMES or words[last].fold in CONNECTORS):
            last -= 1
        for at in range(index, end + 1) if not german else ():
            word, family = words[at], _family(words[at])  # "told Mom", "Planning Mom's 70th"
            if family and not word.initial and not (at and words[at - 1].fold in DETERMINERS):
                found.add(word.start, own_key(family), word.text.removesuffix("'s"), "person", family)
        if first <= last:
            _name_run(text, words, found, (first, last), titled, german, elsewhere)
        index = end + 1


def _trimmed(words: Sequence[_Word], first: int, last: int) -> tuple[int, bool]:
    """The run's first name word from ``first`` (past "The", "Dr", "Thanks"), and
    whether a title was passed."""
    titled = False
    while first <= last and (not _is_name_word(words[first]) or words[first].fold in CONNECTORS):
        titled = titled or words[first].fold in TITLES
        first += 1
    return first, titled


def _family(word: _Word) -> str | None:
    """The description a capitalised family word stands for ("Mom", "Oma")."""
    entry = DESCRIPTIONS.get(word.fold)
    return entry[0] if entry and entry[1] == "person" and word.upper else None


def _capitalised_by_place(words: Sequence[_Word], first: int, elsewhere: set[str]) -> bool:
    """Whether a run's first word, opening a sentence, is capitalised only by its
    place: not elsewhere in the message, not joined by a connector ("Bank of")."""
    joined = first + 1 < len(words) and words[first + 1].fold in CONNECTORS
    return not joined and words[first].fold not in elsewhere


def _name_run(
    text: str, words: Sequence[_Word], found: _Found, span: tuple[int, int], titled: bool, german: bool, elsewhere: set[str]
) -> None:
    first, last = span
    lead = words[first]
    single = first == last
    if all(w.text.isupper() for w in words[first : last + 1]) or (single and len(lead.fold) < 2):
        return  # "OK", "API", "SELECT", "ADD VALUE": capitals shout or abbreviate
    described = _apposition(words, last)
    suffixed = words[last].fold.rstrip(".") in ORG_SUFFIXES and not single
    placed = first > 0 and words[first - 1].fold in GERMAN_PLACE_WORDS and lead.fold not in GERMAN_NOT_PLACES
    if german and not (
        described or suffixed or titled or (single and ((placed and not lead.initial) or lead.fold in elsewhere))
    ):
        return  # every German noun is capitalised; "in Pankow" has no article, "in der Stadt" has
    # "Lena's birthday" opening a sentence is no evidence: "Life's too short" reads the same
    if lead.initial and single and not (described or lead.fold in elsewhere):
        return  # capitalised by its place: "Thanks", "Biscuit chewed ..." (the book knows names)
    if described:
        kind = KIND_OF[described]
    elif suffixed:
        kind = "organisation"
    elif titled:
        kind = "person"
    elif first > 1 and not _BREAK.search(lead.gap) and f"{words[first - 2].fold} {words[first - 1].fold}" in KIND_CUES:
        kind = KIND_CUES[f"{words[first - 2].fold} {words[first - 1].fold}"]
    elif first and (words[first - 1].fold in PLACE_WORDS or german) and not _BREAK.search(lead.gap):
        kind = "place"
    else:
        kind = "other"
    found.add(lead.start, _key(words, first, last), _surface(text, words, first, last), kind, described)


def _quoted(text: str, found: _Found) -> None:
    """Short quoted or bracketed names; lower-case ones only after a cue or description."""
    for count, match in enumerate(_QUOTED.finditer(text)):
        if count == _MOST_QUOTES:
            break
        content = next(g for g in match.groups() if g and g != "《").strip()
        if not content or len(content.split()) > 4 or any(c in content for c in ".!?,;:"):
            continue
        before = _scan(text[max(0, match.start() - 40) : match.start()])[-4:]
        described = next((d for d in map(_description, reversed(before)) if d), None)
        cued = any(w.fold.rsplit("'", 1)[-1] in CUES for w in before)
        first = content.split()[0]
        no_case = _NO_CASE_RUN.search(content) is not None
        if normalise(first) in NOT_NAMES or not (first[0].isupper() or no_case or described or cued):
            continue
        kind = KIND_OF[described] if described else ("product" if match.group(7) else "other")
        found.add(match.start() + 1, normalise(content), content, kind, described)


_HAN_NAME = re.compile(r"[\u4e00-\u9fff]{1,3}")
_HAN_STOP = "的了是在和也都很就说今昨明去来我你他她它们，。！？"
_KANA_NAME = re.compile(
    r"([\u30a1-\u30fa\u30fc]{2,8}|[\u4e00-\u9fff]{1,3})(?:" + "|".join(KANA_CUES) + r")([\u3040-\u9fff]{0,3})"
)


def _cjk_description(run: str) -> str | None:
    for word, (canonical, _) in sorted(CJK_DESCRIPTIONS.items(), key=lambda item: -len(item[0])):
        if word in run:
            return canonical
    return None


def _cjk(text: str, found: _Found) -> None:
    """Chinese "叫 <name>" and Japanese "<name> という <thing>" (short Han or katakana names)."""
    for cue in CJK_CUES:
        start = text.find(cue)
        while start >= 0:
            match = _HAN_NAME.match(text, start + len(cue))
            name = match.group() if match else ""
            for index, char in enumerate(name):
                if char in _HAN_STOP:
                    name = name[:index]
                    break
            if name:
                described = _cjk_description(text[max(0, start - 4) : start])
                kind = KIND_OF[described] if described else "other"
                found.add(start + len(cue), normalise(name), name, kind, described)
            start = text.find(cue, start + len(cue))
    for match in _KANA_NAME.finditer(text):
        described = _cjk_description(match.group(2))
        kind = KIND_OF[described] if described else "other"
        found.add(match.start(), normalise(match.group(1)), match.group(1), kind, described)


def mentions(
    text: str, *, capitalised_nouns: bool | None = None, known: Container[str] = ()
) -> list[Mention]:
    """The entities ``text`` names, one :class:`Mention` per key, in the order they
    first appear (rules in the module's docstring; no LLM, no model).

    ``capitalised_nouns``: whether the text's language capitalises every noun
    (German); None reads it from the message (:func:`capitalises_nouns`), which a
    short message may not show: an :class:`~fastaiagent.recall.entity_book.EntityBook`
    passes what the user's earlier messages said. ``known``: names (keys) the
    caller knows; such a word opening a sentence ("Lena Novak is coming", "Biscuit
    chewed ...") or capitalised in German is taken as a name, as one capitalised
    elsewhere in the message is."""
    check_text("text", text, allow_empty=True)
    found = _Found()
    text = _CODE.sub(lambda match: " " * len(match.group()), text) if "`" in text else text
    words = _words(text)
    if capitalised_nouns is None:
        capitalised_nouns = len(GERMAN_MARKERS.intersection(w.fold for w in words)) >= 2
    _cued(text, words, found)
    _related(text, words, found)
    _capitalised(text, words, found, capitalised_nouns, known)
    if any(c in _QUOTES for c in text):
        _quoted(text, found)
    if _NO_CASE_RUN.search(text):
        _cjk(text, found)
    return found.mentions()


__all__ = ["OWN", "Mention", "capitalises_nouns", "entity_term", "mentions", "normalise", "own_key"]
