"""LLM fact extraction: the prompt, a structured answer, and a parser that survives prose.

The model is shown one message and the subject's known facts, each with a short
id (``F1``, ``F2`` ...). It answers with the durable facts the message states
and, for a fact that changes a known one ("prefers Slack" after "prefers
email"), the id of the fact it replaces.

The answer is asked for as a call of the ``record_facts`` tool
(:data:`RECORD_FACTS_TOOL`), whose arguments are JSON by construction. A model
that answers in text instead, or one that cannot be offered tools
(``supports_tools = False``, or a provider that refuses the request with
tools), is read by :func:`parse_extraction`, which accepts JSON with prose or
code fences around it, bare JSON lists, bullet lists, and treats an empty
answer, a refusal or junk as "no facts". Parsing never raises.
"""

from __future__ import annotations

import contextlib
import json
import re
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from fastaiagent._io import json_text_too_deep
from fastaiagent.facts.scoping import normalize_text
from fastaiagent.llm.base import BaseLLM, LLMResponse, ToolSpec
from fastaiagent.llm.errors import LLMBadRequestError
from fastaiagent.llm.message import Message, SystemMessage, ToolCall, UserMessage

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

Record your answer by calling the record_facts tool. If you cannot call \
tools, answer with JSON only, no other text:
{"facts": [{"fact": "<statement>", "replaces": null}]}
If the message states no durable fact, record an empty list: {"facts": []}."""

RECORD_FACTS = "record_facts"

RECORD_FACTS_TOOL = ToolSpec(
    name=RECORD_FACTS,
    description="Record the durable facts the message states; an empty list when it states none.",
    parameters={
        "type": "object",
        "properties": {
            "facts": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "fact": {
                            "type": "string",
                            "description": "One short standalone sentence.",
                        },
                        "replaces": {
                            "anyOf": [{"type": "string"}, {"type": "null"}],
                            "description": "The id (e.g. F2) of the known fact this one "
                            "changes, or null.",
                        },
                    },
                    "required": ["fact"],
                },
            }
        },
        "required": ["facts"],
    },
)


@dataclass(frozen=True)
class ExtractedFact:
    """One fact from an extraction answer.

    ``replaces`` is the 0-based position, in the ``known_facts`` list given to the
    prompt, of the fact this one supersedes, or None.
    """

    text: str
    replaces: int | None = None


def known_fact_id(index: int) -> str:
    """The short id a known fact is shown with: ``F1`` for index 0."""
    return f"F{index + 1}"


def build_extraction_messages(
    text: str, *, role: str = "user", known_facts: Sequence[str] = ()
) -> list[Message]:
    """The prompt for one message: instructions, then known facts and the message.

    ``known_facts`` is the subject's current facts, most relevant first; only
    the first :data:`MAX_KNOWN_FACTS` are shown, and the ids in the answer
    refer to positions in ``known_facts``.
    """
    speaker = "the user" if role == "user" else f"the {role}"
    shown = list(known_facts)[:MAX_KNOWN_FACTS]
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
# Both read a model's reply in linear time: the body ends at its last non-space
# (not ".+?" tried against "\s*$" at each character), and a "(replaces 2)" tail
# is looked for after the body's last-but-one closing bracket only.
_BULLET = re.compile(r"^\s*(?:[-*•‣◦]|\d{1,3}[.)])\s+(?P<body>.*\S)")
_BULLET_REPLACES = re.compile(
    r"[(\[]\s*(?:replaces|supersedes|updates)\s*:?\s*(?P<ref>[^)\]]*)[)\]]$", re.IGNORECASE
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


def _reference(value: Any, known_count: int) -> int | None:
    """A ``replaces`` value as a 0-based index into the known facts, or None."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (list, tuple)):  # a model that lists one id in a list
        return _reference(value[0], known_count) if len(value) == 1 else None
    if isinstance(value, int):
        number = value
    elif isinstance(value, str):
        match = _REF.match(value)
        if not match:
            return None
        number = int(match.group(1))
    else:
        return None
    return number - 1 if 1 <= number <= known_count else None


def _clean(text: Any) -> str | None:
    if not isinstance(text, str):
        return None
    cleaned = " ".join(text.split()).strip(_QUOTES + " ").rstrip(",;").strip()
    if len(cleaned) < 3 or len(cleaned) > MAX_FACT_CHARS:
        return None
    if normalize_text(cleaned).rstrip(".!") in _NOTHING:
        return None
    return cleaned


def _from_item(item: Any, known_count: int) -> ExtractedFact | None:
    if isinstance(item, str):
        text = _clean(item)
        return ExtractedFact(text) if text else None
    if isinstance(item, dict):
        raw = next((item[k] for k in _FACT_KEYS if k in item), None)
        text = _clean(raw)
        if not text:
            return None
        ref = next((item[k] for k in _REPLACE_KEYS if k in item), None)
        return ExtractedFact(text, _reference(ref, known_count))
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
                if isinstance(inner, str):  # "none", or a list sent as a JSON string
                    inner = _json_items(inner[:MAX_REPLY_CHARS])
                return [] if inner is None else _items(inner)
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
        if json_text_too_deep(text, match.start()):
            continue
        try:
            value, _ = decoder.raw_decode(text, match.start())
        except ValueError:
            continue
        items = _items(value)
        if items is not None:
            return items
    return None


def _replaces_tail(body: str) -> re.Match[str] | None:
    """The ``(replaces 2)`` that ends ``body``, if any. Its reference holds no
    closing bracket, so it opens after the one before the last."""
    if not body.endswith((")", "]")):
        return None
    opens_after = max(body.rfind(")", 0, len(body) - 1), body.rfind("]", 0, len(body) - 1))
    return _BULLET_REPLACES.search(body, opens_after + 1)


def _bullet_items(text: str, known_count: int) -> list[ExtractedFact]:
    found = []
    for line in text.splitlines():
        match = _BULLET.match(line)
        if not match:
            continue
        body, ref = match.group("body"), None
        tail = _replaces_tail(body)
        if tail:
            ref = _reference(tail.group("ref"), known_count)
            body = body[: tail.start()]
        fact = _from_item(body, known_count)
        if fact:
            found.append(ExtractedFact(fact.text, ref))
    return found


def _unique(facts: Sequence[ExtractedFact]) -> list[ExtractedFact]:
    unique: list[ExtractedFact] = []
    seen: set[str] = set()
    for fact in facts:
        key = normalize_text(fact.text)
        if key not in seen:
            seen.add(key)
            unique.append(fact)
    return unique[:MAX_FACTS_PER_REPLY]


def parse_extraction(reply: str | None, known_count: int = 0) -> list[ExtractedFact]:
    """The facts in a model's text answer; ``known_count`` is how many known facts it was shown.

    Accepts ``{"facts": [...]}`` or a bare list (of strings or objects), with
    prose or code fences around; failing that, a bullet or numbered list.
    Anything else (empty, a refusal, junk) gives ``[]``. Facts are deduplicated
    by normalised text, and ``replaces`` ids outside the known list are ignored.
    """
    if not isinstance(reply, str) or not reply.strip():
        return []
    text = reply[:MAX_REPLY_CHARS]
    items = _json_items(text)
    if items is None:
        return _unique(_bullet_items(text, known_count))
    return _unique([f for f in (_from_item(item, known_count) for item in items) if f])


def _tool_call_items(calls: Sequence[ToolCall]) -> list[Any] | None:
    """The fact items of every well-formed ``record_facts`` call, or None if there is none."""
    found: list[Any] | None = None
    for call in calls:
        items = _items(call.arguments) if call.name == RECORD_FACTS else None
        if items is not None:
            found = (found or []) + items
    return found


def parse_extraction_response(response: LLMResponse, known_count: int = 0) -> list[ExtractedFact]:
    """The facts in a model's answer: its ``record_facts`` call, else its text.

    A call whose arguments are not the tool's shape (no ``facts`` list) is
    ignored, and the text of the answer, if any, is parsed instead; the same
    cleaning, deduplication and limits apply either way. Never raises.
    """
    items = _tool_call_items(response.tool_calls)
    if items is None:
        return parse_extraction(response.content, known_count)
    return _unique([f for f in (_from_item(item, known_count) for item in items) if f])


# Models (or servers) that refused a request offering tools: asked for text from then on.
_REFUSED_TOOLS: weakref.WeakSet[BaseLLM] = weakref.WeakSet()


def _offers_tools(llm: BaseLLM) -> bool:
    if not getattr(llm, "supports_tools", True):
        return False
    try:
        return llm not in _REFUSED_TOOLS
    except TypeError:  # unhashable model object: it cannot be remembered either
        return True


def _refused_tools(llm: BaseLLM) -> None:
    # A model that is not weak-referenceable or hashable is asked with tools again.
    with contextlib.suppress(TypeError):
        _REFUSED_TOOLS.add(llm)


def complete_extraction(
    llm: BaseLLM, messages: Sequence[Message], *, known_count: int
) -> list[ExtractedFact]:
    """Send an extraction prompt to ``llm`` and read its answer.

    The ``record_facts`` tool is offered unless the model cannot take tools; a
    provider that refuses the request with tools (HTTP 400) is asked again
    without, and remembered. Other LLM errors propagate.
    """
    if not _offers_tools(llm):
        return parse_extraction_response(llm.complete(messages), known_count)
    try:
        response = llm.complete(messages, tools=[RECORD_FACTS_TOOL])
    except LLMBadRequestError:
        response = llm.complete(messages)
        _refused_tools(llm)
    return parse_extraction_response(response, known_count)


async def acomplete_extraction(
    llm: BaseLLM, messages: Sequence[Message], *, known_count: int
) -> list[ExtractedFact]:
    """Async :func:`complete_extraction`, through the model's ``acomplete``."""
    if not _offers_tools(llm):
        return parse_extraction_response(await llm.acomplete(messages), known_count)
    try:
        response = await llm.acomplete(messages, tools=[RECORD_FACTS_TOOL])
    except LLMBadRequestError:
        response = await llm.acomplete(messages)
        _refused_tools(llm)
    return parse_extraction_response(response, known_count)


def extract_facts(
    llm: BaseLLM, text: str, *, role: str = "user", known_facts: Sequence[str] = ()
) -> list[ExtractedFact]:
    """Ask ``llm`` for the durable facts in ``text``. LLM errors propagate.

    ``known_facts`` are the subject's current facts; an extracted fact's
    ``replaces`` is an index into this list.
    """
    messages = build_extraction_messages(text, role=role, known_facts=known_facts)
    return complete_extraction(llm, messages, known_count=min(len(known_facts), MAX_KNOWN_FACTS))


async def aextract_facts(
    llm: BaseLLM, text: str, *, role: str = "user", known_facts: Sequence[str] = ()
) -> list[ExtractedFact]:
    """Async :func:`extract_facts`, through the model's ``acomplete``."""
    messages = build_extraction_messages(text, role=role, known_facts=known_facts)
    count = min(len(known_facts), MAX_KNOWN_FACTS)
    return await acomplete_extraction(llm, messages, known_count=count)


__all__ = [
    "EXTRACTION_PROMPT",
    "RECORD_FACTS_TOOL",
    "ExtractedFact",
    "acomplete_extraction",
    "aextract_facts",
    "build_extraction_messages",
    "complete_extraction",
    "extract_facts",
    "known_fact_id",
    "parse_extraction",
    "parse_extraction_response",
]
