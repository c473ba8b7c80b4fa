"""A rule-based stand-in for a real model, so memory runs with no API key.

:class:`RuleBasedLLM` answers two kinds of prompt:

- **The fact-extraction prompt** of ``Memory(learn=)`` and ``fastaiagent learn``
  (:mod:`fastaiagent.learn.extractor`: the known facts, then the message between
  ``<<<`` and ``>>>``): it records the durable facts that simple rules find in
  plain first-person English ("my name is Alice", "I live in Paris", "I prefer
  email", "I'm a vegetarian", "call me Al", "I have two cats" ...), as a
  ``record_facts`` tool call when the tool is offered, else as JSON text. A
  new fact about the same thing as a known one ("Lives in Berlin" after "Lives
  in Paris") is marked as replacing it. Asked for an agent's operational
  knowledge (``fastaiagent learn``'s agent scope, shown to every user), it
  records standing instructions only ("please always cite sources" -> "Always
  cite sources"), never a personal fact.
- **Anything else** (a chat turn): a question is answered with the remembered
  facts the prompt shows, a statement with a short acknowledgement.

It is a stand-in, not an extractor: it knows a dozen sentence shapes in
English and nothing else (no negation beyond "don't like", no third person, no
context). Use it for examples, demos and tests; use a real model
(``LLMClient(...)``) for anything a user says.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass

from fastaiagent.agent.memory_blocks.framing import PREAMBLE
from fastaiagent.learn.extractor import RECORD_FACTS
from fastaiagent.learn.loop import AGENT_KNOWLEDGE_PROMPT
from fastaiagent.llm.base import ToolSpec
from fastaiagent.llm.message import Message, ToolCall

MAX_VALUE_CHARS = 80  # a longer "value" is a story, not a fact

# The message an extraction prompt shows, after the known facts (F1: ..., F2: ...).
_EXTRACTION = re.compile(
    r"Known facts:\n(?P<known>.*?)\n\nMessage from (?P<speaker>[^\n]+):\n<<<\n(?P<body>.*)\n>>>\s*\Z",
    re.DOTALL,
)
_KNOWN = re.compile(r"^F(?P<n>\d+): (?P<fact>.*)$", re.MULTILINE)
_NOTE = re.compile(r'^- (?P<quoted>".*") \([^()]*\)$')
# One clause per sentence, and a new clause at ", and I ..." / "but my ...".
_SENTENCES = re.compile(
    r"[.!;]+(?=\s|\Z)|\n+|,?\s+(?:and|but)\s+(?=(?:i|i'm|i've|my|call me)\b)", re.IGNORECASE
)
_OPENERS = r"^(?:hi|hello|hey|so|well|also|oh|ok|okay|actually)\b[,!]?\s*"
_call_ids = itertools.count(1)
_ONE_OFF = ("question", "problem", "issue", "request", "idea", "minute", "moment", "look")


@dataclass(frozen=True)
class _Rule:
    pattern: re.Pattern[str]
    fact: str  # the fact, with {value}; its text before {value} names the attribute


def _rule(pattern: str, fact: str) -> _Rule:
    value = r"(?P<value>[^,?]+?)"
    return _Rule(
        re.compile(r"^\s*" + pattern.replace("VALUE", value) + r"\s*$", re.IGNORECASE), fact
    )


_RULES = (
    _rule(r"(?:my name is|my name's|call me|i'm called|i am called) VALUE", "Name is {value}"),
    _rule(r"(?:i live in|i'm living in|i am living in|i moved to) VALUE", "Lives in {value}"),
    _rule(r"(?:i work at|i work for) VALUE", "Works at {value}"),
    _rule(r"(?:i'm|i am) (?:allergic to) VALUE", "Is allergic to {value}"),
    _rule(r"(?:i'm|i am) from VALUE", "Is from {value}"),
    _rule(r"(?:i'm|i am) (?P<age>\d{1,3}) years? old", "Is {age} years old"),
    _rule(r"(?:i'm|i am) (?P<article>an?) VALUE", "Is {article} {value}"),
    _rule(r"i (?:really )?prefer VALUE", "Prefers {value}"),
    _rule(r"i (?:really )?(?:don't|do not) (?:like|love|enjoy) VALUE", "Dislikes {value}"),
    _rule(r"i (?:really )?(?:hate|dislike) VALUE", "Dislikes {value}"),
    _rule(r"i (?:really )?(?:like|enjoy) VALUE", "Likes {value}"),
    _rule(r"i (?:really )?love VALUE", "Loves {value}"),
    _rule(r"my (?P<thing>favou?rite [a-z ]{1,30}?) is VALUE", "{thing_cap} is {value}"),
    _rule(
        r"my (?P<thing>email|email address|phone number|birthday) is VALUE",
        "{thing_cap} is {value}",
    ),
    _rule(
        r"(?:i have|i've got|i have got) (?P<count>an?|one|two|three|four|five|\d{1,2}) VALUE",
        "Has {count} {value}",
    ),
)


# Standing instructions, for an agent's operational knowledge (never personal).
_INSTRUCTIONS = (
    (re.compile(r"^(?:please )?always (?P<value>.+)$", re.IGNORECASE), "Always {value}"),
    (
        re.compile(r"^(?:please )?(?:never|don't|do not) (?P<value>.+)$", re.IGNORECASE),
        "Never {value}",
    ),
)


def instructions_in(text: str) -> list[str]:
    """The standing instructions in ``text``: "please always X" -> "Always X",
    "never X" / "please don't X" -> "Never X"; nothing personal."""
    found: list[str] = []
    for clause in _clauses(text):
        for pattern, template in _INSTRUCTIONS:
            match = pattern.match(clause)
            if match and len(match.group("value")) <= MAX_VALUE_CHARS:
                fact = template.format(value=match.group("value").strip())
                if fact not in found:
                    found.append(fact)
                break
    return found


def _clauses(text: str) -> list[str]:
    """The statements of ``text``, one per clause, greetings and questions dropped."""
    clauses = []
    for clause in _SENTENCES.split(text):
        clause = clause.strip().strip("\"'").strip()
        if not clause or clause.endswith("?"):
            continue
        clauses.append(re.sub(_OPENERS, "", clause, flags=re.IGNORECASE))
    return clauses


def facts_in(text: str) -> list[str]:
    """The durable facts the rules find in ``text`` (a user's message), in order.

    ``facts_in("Hi! My name is Alice and I live in Paris.")`` is
    ``["Name is Alice", "Lives in Paris"]``. Questions, one-off requests ("I
    have a question") and anything the rules do not know give nothing.
    """
    found: list[str] = []
    for clause in _clauses(text):
        fact = _first_fact(clause)
        if fact and fact not in found:
            found.append(fact)
    return found


def _first_fact(clause: str) -> str | None:
    for rule in _RULES:
        match = rule.pattern.match(clause)
        if not match:
            continue
        parts = {k: v.strip() for k, v in match.groupdict().items() if v is not None}
        value = parts.get("value", "")
        if len(value) > MAX_VALUE_CHARS or value.lower().split(" ")[0] in _ONE_OFF:
            return None
        if "thing" in parts:
            parts["thing_cap"] = parts["thing"][:1].upper() + parts["thing"][1:].lower()
        return rule.fact.format(**parts)
    return None


def _attribute(fact: str) -> str:
    """What a fact is about: its rule's words before the value ("Lives in")."""
    for rule in _RULES:
        head = rule.fact.split("{", 1)[0]
        if head and fact.startswith(head):
            return head
    return ""


def _replaced(fact: str, known: dict[str, str]) -> str | None:
    """The id of the known fact this one changes (same attribute, other value)."""
    attribute = _attribute(fact)
    if attribute in ("", "Likes ", "Loves ", "Dislikes ", "Has ", "Is a ", "Is an "):
        return None  # one can like many things: a new one adds, it does not replace
    for fact_id, text in known.items():
        if text != fact and text.startswith(attribute):
            return fact_id
    return None


def extraction_answer(
    messages: Sequence[Message], tools: Sequence[ToolSpec]
) -> str | ToolCall | None:
    """The answer to an extraction prompt, or None when ``messages`` is not one."""
    last = next((m for m in reversed(messages) if m.role == "user"), None)
    match = _EXTRACTION.search(last.content or "") if last else None
    if match is None:
        return None
    known = {f"F{m.group('n')}": m.group("fact") for m in _KNOWN.finditer(match.group("known"))}
    body, agent_scope = (
        match.group("body"),
        bool(messages) and messages[0].content == AGENT_KNOWLEDGE_PROMPT,
    )
    if match.group("speaker") != "the user":
        texts = []
    else:
        texts = instructions_in(body) if agent_scope else facts_in(body)
    facts = [{"fact": text, "replaces": _replaced(text, known)} for text in texts]
    if any(tool.name == RECORD_FACTS for tool in tools):
        return ToolCall(
            id=f"call_rules_{next(_call_ids)}", name=RECORD_FACTS, arguments={"facts": facts}
        )
    return json.dumps({"facts": facts})


def remembered(messages: Sequence[Message]) -> list[str]:
    """The remembered facts a prompt shows, unquoted, in prompt order: the notes of
    its fact sections (global, user, plane), without headings, the preamble or
    sources. Summaries and recalled messages are not facts and are left out.

    ``remembered(messages)`` is ``["Support hours are 9-17", "Has a beagle"]``
    for a prompt holding those two facts: what a stand-in model answers from."""
    notes: list[str] = []
    for message in messages:
        if message.role != "system" or PREAMBLE not in (message.content or ""):
            continue
        for line in (message.content or "").splitlines():
            match = _NOTE.match(line)
            if match:
                notes.append(json.loads(match.group("quoted")))
    return notes


def chat_answer(messages: Sequence[Message]) -> str:
    """A short chat reply: the remembered facts to a question, else an acknowledgement."""
    last = next((m for m in reversed(messages) if m.role == "user"), None)
    said = (last.content or "").strip() if last else ""
    if not said.endswith("?"):
        return "Got it." if said else "Hello!"
    notes = remembered(messages)
    if not notes:
        return "I don't know that yet."
    return "Here is what I remember: " + "; ".join(notes) + "."
