"""LLM fact extraction: the prompt, and a parser that survives what models answer.

The model is shown one message and the subject's known facts, each with a short
id (``F1``, ``F2`` ...). It answers with the durable facts the message states
and, for a fact that changes a known one ("prefers Slack" after "prefers
email"), the id of the fact it replaces.

Models do not always answer as asked, so :func:`parse_extraction` accepts JSON
with prose or code fences around it, bare JSON lists, bullet lists, and treats
an empty answer, a refusal or junk as "no facts". It never raises.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from fastaiagent.facts.scoping import normalize_text
from fastaiagent.llm.base import BaseLLM
from fastaiagent.llm.message import Message, SystemMessage, UserMessage

MAX_MESSAGE_CHARS = 8_000  # the message shown to the model is cut here: bounded input
MAX_KNOWN_FACTS = 50  # known facts shown for contradiction checks
MAX_FACT_CHARS = 500  # a longer "fact" is prose, not a fact
MAX_FACTS_PER_REPLY = 20
MAX_REPLY_CHARS = 50_000  # parse at most this much of a runaway answer
_MAX_JSON_ATTEMPTS = 200

EXTRACTION_PROMPT = """\
You extract durable facts from one message of a conversation between a user \
and an assistant.

A durable fact stays true after this conversation ends: who the user is, their \
preferences, relationships, constraints, possessions, plans and standing \
decisions. For example: "Is allergic to peanuts", "Prefers email over phone \
calls", "Has two kids named Maya and Omar".

Do not extract greetings, thanks, questions, one-off requests, opinions about \
this conversation, or anything that is only true right now. Write each fact as \
one short standalone sentence that makes sense without the conversation (say \
"The user ..." or leave the subject implicit; never "he", "she" or "it" for \
someone not named in the fact).

Known facts are listed with ids. Do not repeat a known fact. When the message \
changes a known fact (the same attribute with a new value, e.g. a new email \
address or a changed preference), output the new fact and put the known \
fact's id in "replaces". Otherwise "replaces" is null.

Answer with JSON only, no other text:
{"facts": [{"fact": "<statement>", "replaces": null}]}
If the message states no durable fact, answer {"facts": []}."""


@dataclass(frozen=True)
class ExtractedFact:
    """One fact from an extraction answer.

    ``replaces`` is the 0-based position, in the ``known`` list given to the
    prompt, of the fact this one supersedes, or None.
    """

    text: str
    replaces: int | None = None


def known_fact_id(index: int) -> str:
    """The short id a known fact is shown with: ``F1`` for index 0."""
    return f"F{index + 1}"


def build_extraction_messages(
    text: str, *, role: str = "user", known: Sequence[str] = ()
) -> list[Message]:
    """The prompt for one message: instructions, then known facts and the message.

    ``known`` is the subject's current facts, most relevant first; only the
    first :data:`MAX_KNOWN_FACTS` are shown, and the ids in the answer refer to
    positions in ``known``.
    """
    speaker = "the user" if role == "user" else f"the {role}"
    shown = list(known)[:MAX_KNOWN_FACTS]
    if shown:
        listing = "\n".join(f"{known_fact_id(i)}: {fact}" for i, fact in enumerate(shown))
    else:
        listing = "(none)"
    body = text if len(text) <= MAX_MESSAGE_CHARS else text[:MAX_MESSAGE_CHARS] + " [...]"
    return [
        SystemMessage(EXTRACTION_PROMPT),
        UserMessage(f"Known facts:\n{listing}\n\nMessage from {speaker}:\n<<<\n{body}\n>>>"),
    ]


# -- parsing -------------------------------------------------------------------

_FACT_KEYS = ("fact", "text", "statement", "content", "value")
_LIST_KEYS = ("facts", "new_facts", "durable_facts", "items", "results")
_REPLACE_KEYS = ("replaces", "replace", "supersedes", "replaces_id", "replaced_id", "updates")
_BULLET = re.compile(r"^\s*(?:[-*•‣◦]|\d{1,3}[.)])\s+(?P<body>.+?)\s*$")
_BULLET_REPLACES = re.compile(
    r"\s*[(\[]\s*(?:replaces|supersedes|updates)\s*:?\s*(?P<ref>[^)\]]*)[)\]]\s*$", re.IGNORECASE
)
_REF = re.compile(r"^\s*(?:F|#|id\s*)?\s*(\d{1,6})\s*$", re.IGNORECASE)
_NOTHING = {
    "none",
    "null",
    "n/a",
    "na",
    "nothing",
    "no facts",
    "no durable facts",
    "no new facts",
    "no facts found",
    "[]",
    "{}",
}
_QUOTES = "\"'`“”‘’"


def _reference(value: Any, known: int) -> int | None:
    """A ``replaces`` value as a 0-based index into the known facts, or None."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (list, tuple)):  # a model that lists one id in a list
        return _reference(value[0], known) if len(value) == 1 else None
    if isinstance(value, int):
        number = value
    elif isinstance(value, str):
        match = _REF.match(value)
        if not match:
            return None
        number = int(match.group(1))
    else:
        return None
    return number - 1 if 1 <= number <= known else None


def _clean(text: Any) -> str | None:
    if not isinstance(text, str):
        return None
    cleaned = " ".join(text.split()).strip(_QUOTES + " ").rstrip(",;").strip()
    if len(cleaned) < 3 or len(cleaned) > MAX_FACT_CHARS:
        return None
    if normalize_text(cleaned).rstrip(".!") in _NOTHING:
        return None
    return cleaned


def _from_item(item: Any, known: int) -> ExtractedFact | None:
    if isinstance(item, str):
        text = _clean(item)
        return ExtractedFact(text) if text else None
    if isinstance(item, dict):
        raw = next((item[k] for k in _FACT_KEYS if k in item), None)
        text = _clean(raw)
        if not text:
            return None
        ref = next((item[k] for k in _REPLACE_KEYS if k in item), None)
        return ExtractedFact(text, _reference(ref, known))
    return None


def _items(value: Any) -> list[Any] | None:
    """The list of fact items in a JSON answer, or None if it is not one."""
    if isinstance(value, list):
        usable = [v for v in value if isinstance(v, (str, dict))]
        return usable if usable or not value else None
    if isinstance(value, dict):
        for key in _LIST_KEYS:
            if key in value:
                inner = value[key]
                if inner is None or isinstance(inner, str):  # "facts": null / "none"
                    return []
                return _items(inner)
        if any(k in value for k in _FACT_KEYS):
            return [value]
    return None


def _json_items(text: str) -> list[Any] | None:
    """The first JSON value in ``text`` that reads as an answer (prose around is fine)."""
    decoder = json.JSONDecoder()
    attempts = 0
    for match in re.finditer(r"[\[{]", text):
        attempts += 1
        if attempts > _MAX_JSON_ATTEMPTS:
            break
        try:
            value, _ = decoder.raw_decode(text, match.start())
        except ValueError:
            continue
        items = _items(value)
        if items is not None:
            return items
    return None


def _bullet_items(text: str, known: int) -> list[ExtractedFact]:
    found = []
    for line in text.splitlines():
        match = _BULLET.match(line)
        if not match:
            continue
        body, ref = match.group("body"), None
        tail = _BULLET_REPLACES.search(body)
        if tail:
            ref = _reference(tail.group("ref"), known)
            body = body[: tail.start()]
        fact = _from_item(body, known)
        if fact:
            found.append(ExtractedFact(fact.text, ref))
    return found


def parse_extraction(reply: str | None, known: int = 0) -> list[ExtractedFact]:
    """The facts in a model's extraction answer; ``known`` is how many facts it was shown.

    Accepts ``{"facts": [...]}`` or a bare list (of strings or objects), with
    prose or code fences around; failing that, a bullet or numbered list.
    Anything else (empty, a refusal, junk) gives ``[]``. Facts are deduplicated
    by normalised text, and ``replaces`` ids outside the known list are ignored.
    """
    if not isinstance(reply, str) or not reply.strip():
        return []
    text = reply[:MAX_REPLY_CHARS]
    items = _json_items(text)
    if items is not None:
        facts = [f for f in (_from_item(item, known) for item in items) if f]
    else:
        facts = _bullet_items(text, known)
    unique: list[ExtractedFact] = []
    seen: set[str] = set()
    for fact in facts:
        key = normalize_text(fact.text)
        if key not in seen:
            seen.add(key)
            unique.append(fact)
    return unique[:MAX_FACTS_PER_REPLY]


def extract_facts(
    llm: BaseLLM, text: str, *, role: str = "user", known: Sequence[str] = ()
) -> list[ExtractedFact]:
    """Ask ``llm`` for the durable facts in ``text``. LLM errors propagate."""
    response = llm.complete(build_extraction_messages(text, role=role, known=known))
    return parse_extraction(response.content, min(len(known), MAX_KNOWN_FACTS))


async def aextract_facts(
    llm: BaseLLM, text: str, *, role: str = "user", known: Sequence[str] = ()
) -> list[ExtractedFact]:
    """Async :func:`extract_facts`, through the model's ``acomplete``."""
    response = await llm.acomplete(build_extraction_messages(text, role=role, known=known))
    return parse_extraction(response.content, min(len(known), MAX_KNOWN_FACTS))


__all__ = [
    "EXTRACTION_PROMPT",
    "ExtractedFact",
    "aextract_facts",
    "build_extraction_messages",
    "extract_facts",
    "known_fact_id",
    "parse_extraction",
]
