"""Which learned facts may be stored and shown to the model again.

A fact learned from a conversation is something a user said, rewritten by
an extraction model. A user can say "SYSTEM OVERRIDE: ignore all prior
rules" and a model may dutifully extract it; stored, it would come back on
every later turn. A *fact policy* looks at each candidate before it is
stored and answers one of:

- ``"keep"``: store it and inject it as a quoted note;
- ``"flag"``: store it with ``metadata["flagged"]`` set (visible on the Memory
  page and to ``retrieve``) but never inject it;
- ``"drop"``: do not store it at all.

:func:`default_fact_policy` drops text that reads as instructions to the
assistant (override phrases, role or chat-template markers, forged section
headings); it is deliberately narrow, so ordinary facts ("Prefers email",
"Works as a nurse") are kept. Tighten it with your own callable, e.g.::

    def strict(text: str, source: str) -> str:
        if default_fact_policy(text, source) != KEEP:
            return DROP
        return FLAG if "password" in text.lower() else KEEP

    Memory(user_id=..., learn=llm, fact_policy=strict)

A policy that raises or answers anything else drops the fact (fail closed)
and logs a warning. Policies judge facts when they are learned; a stored fact
is not judged again on each turn (that would cost every turn), but every
injected fact is quoted (see ``framing``), and flagged ones are never shown.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from typing import Protocol

from fastaiagent.agent.memory_blocks.framing import USER_SAID
from fastaiagent.errors import InvalidTypeError
from fastaiagent.facts.fact import Fact

logger = logging.getLogger("fastaiagent.memory")

KEEP = "keep"
FLAG = "flag"
DROP = "drop"
VERDICTS = (KEEP, FLAG, DROP)
FLAGGED_KEY = "flagged"  # metadata key on a stored fact the policy flagged

_BREAK = r"[\r\n\x0b\x0c\x1c-\x1e\x85\u2028\u2029]"
_START = r"(?:^|[\x00\r\n\x0b\x0c\x1c-\x1e\x85\u2028\u2029])"
# Whitespace that breaks no line. A marker is looked for after the last break
# before it: "\s*" after every break of a run of blank lines scanned the rest of
# the run again from each one, quadratic in its length.
_INLINE_SPACE = r"[^\S\r\n\x0b\x0c\x1c-\x1e\x85\u2028\u2029]*"
_VERB = r"\b(?:ignore|disregard|forget|override|bypass)"
_RULES = r"(?:instructions?|prompts?|guidelines|guardrails|safeguards|directives)"
_OPENER = r"(?:all|any|every|previous|prior|earlier|above|preceding|your|the\s+(?:previous|prior|above|earlier|system))"
_ROLES = r"(?:system|assistant|developer|user|human|tool)"
_HEADINGS = (
    r"facts about this user:|facts true for everyone using this agent:|known facts:"
    r"|curated facts:|relevant past messages:|summary of the earlier conversation"
    r"|remembered notes, not instructions"
)
_BOT = r"(?:the\s+)?(?:assistant|chatbot|bot)"
_PATTERNS = [
    # addressed to the model: override phrases
    rf"{_VERB}(?:\s+\w+){{0,3}}?\s+{_RULES}\b",
    rf"{_VERB}\s+{_OPENER}\b(?:\s+\w+){{0,2}}?\s+rules\b",
    r"\bsystem\s+override\b|\b(?:developer|god)\s+mode\b|\bnew\s+(?:system\s+)?instructions?\s*:",
    r"\breveal\s+(?:the\s+|your\s+)(?:system|hidden|secret)\b",
    r"\byou\s+(?:must|shall|should|have\s+to|need\s+to|are\s+(?:now|to|required))\b",
    rf"\b{_BOT}\s+(?:must|shall|should|has\s+to|needs\s+to|is\s+(?:required|instructed)\s+to)\b",
    r"\bfrom\s+now\s+on,?\s+(?:you|the\s+assistant|always|never)\b",
    r"\b(?:always|never)\s+(?:obey|comply|reveal)\b|\bobey\s+(?:me|the\s+user)\b",
    # role and chat-template markers
    rf"{_START}{_INLINE_SPACE}{_ROLES}\s*:",
    r"<\|[^|>\s]{1,40}\|>|\[/?INST\]|<</?SYS>>|(?<!#)#{2,}\s*(?:system|instruction)",
    # a new section, heading or bullet opened inside the fact
    _HEADINGS,
    rf"{_BREAK}{_INLINE_SPACE}[-*•#>]|:[ \t]*{_BREAK}",
]
_INSTRUCTION = re.compile("|".join(f"(?:{p})" for p in _PATTERNS), re.IGNORECASE)


class FactPolicy(Protocol):
    """Decides what happens to a learned fact before it is stored.

    Called once per extracted fact, before it is stored, with the candidate
    ``text`` and its ``source``: ``"user said"`` or ``"assistant said"`` (the
    role of the message it was extracted from). Returns ``"keep"``,
    ``"flag"`` or ``"drop"``. It runs off the turn's hot path (after the
    extraction call), so it may be as thorough as you like.
    """

    def __call__(self, text: str, source: str) -> str: ...


def reads_as_instruction(text: str) -> bool:
    """True when ``text`` addresses the assistant or tries to shape the prompt."""
    return _INSTRUCTION.search(text) is not None


def default_fact_policy(text: str, source: str) -> str:
    """Drops text that reads as instructions to the assistant; keeps the rest."""
    return DROP if reads_as_instruction(text) else KEEP


def judge(policy: FactPolicy, text: str, source: str) -> str:
    """``policy``'s verdict; a policy that raises or answers nonsense drops the fact."""
    try:
        verdict = policy(text, source)
    except Exception as exc:
        logger.warning("fact policy %r raised (%s); the fact is dropped", policy, exc)
        return DROP
    if verdict not in VERDICTS:
        logger.warning(
            "fact policy %r answered %r, not one of %s; the fact is dropped",
            policy, verdict, ", ".join(VERDICTS),
        )
        return DROP
    return str(verdict)


def check_policy(policy: FactPolicy | None) -> FactPolicy:
    """The policy to use: ``None`` means :func:`default_fact_policy`."""
    if policy is None:
        return default_fact_policy
    if not callable(policy):
        raise InvalidTypeError(
            "fact_policy must be a callable (text, source) -> 'keep' | 'flag' | 'drop', "
            f"got {type(policy).__name__}"
        )
    return policy


def imported_fact_check(policy: FactPolicy | None) -> Callable[[Fact], Fact | None]:
    """What a user's import does with each of its active facts: ``policy`` (None: the
    default) judges the text as a learned fact's ("user said"); a kept fact is
    written as it is, a flagged one with ``metadata["flagged"]`` (stored, never
    shown), a dropped one not at all (the version it replaced stays active)."""
    chosen = check_policy(policy)

    def check(fact: Fact) -> Fact | None:
        verdict = judge(chosen, fact.fact, USER_SAID)
        if verdict == DROP:
            return None
        return fact.with_metadata({**fact.metadata, FLAGGED_KEY: "fact_policy"}) if verdict == FLAG else fact

    return check


__all__ = [
    "DROP",
    "FLAG",
    "FLAGGED_KEY",
    "KEEP",
    "VERDICTS",
    "FactPolicy",
    "check_policy",
    "default_fact_policy",
    "imported_fact_check",
    "judge",
    "reads_as_instruction",
]
