"""What leaves the process: payload switches and redaction policies.

Two independent controls decide what a span carries when it is exported:

- ``FASTAIAGENT_TRACE_PAYLOADS=0`` drops content attributes (the query, the
  snippets a block injected, write details, the user id) from *exported*
  spans. The local trace store keeps them, since it never leaves the machine.
- a :class:`RedactionPolicy` masks secrets inside text. A ``"write"`` policy
  masks before anything is stored or exported; a ``"read"`` policy stores
  everything and masks at display time (the UI's "Mask secrets" toggle).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from fastaiagent.errors import InvalidTypeError, InvalidValueError

ENV_PAYLOADS = "FASTAIAGENT_TRACE_PAYLOADS"

# Attributes that hold conversation content or who said it.
PAYLOAD_KEYS = frozenset(
    {
        "memory.snippets",
        "memory.query",
        "memory.detail",
        "memory.scope_id",
        "memory.user_id",
        "memory.fact",
        "memory.facts",
        "agent.input",
        "agent.output",
    }
)

_OFF_VALUES = ("0", "false", "no", "off")


def payloads_enabled() -> bool:
    """False when ``FASTAIAGENT_TRACE_PAYLOADS`` is ``0``/``false``/``no``/``off``."""
    return os.environ.get(ENV_PAYLOADS, "1").strip().lower() not in _OFF_VALUES


def drop_payloads(attributes: Mapping[str, Any]) -> dict[str, Any]:
    """``attributes`` without the content keys of :data:`PAYLOAD_KEYS`."""
    return {key: value for key, value in attributes.items() if key not in PAYLOAD_KEYS}


# Each pattern is (label, regex). Order matters: specific token shapes first,
# so a key is labelled as a key rather than as a generic long number.
# The email and JWT patterns start only where their run of characters starts (a
# lookbehind, not ``\b``): started inside it, a long run without "@" (or without
# ".") is scanned again from each of its characters, quadratic in its length.
EMAIL_PATTERN = r"(?<![A-Za-z0-9._%+-])[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}\b"
DEFAULT_PATTERNS: tuple[tuple[str, str], ...] = (
    # A key cut off before its END (a truncated attribute) is masked to the end.
    (
        "private_key",
        r"-----BEGIN [A-Z ]*PRIVATE KEY-----(?:[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----|[\s\S]*)",
    ),
    ("jwt", r"(?<![\w-])eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\b"),
    ("api_key", r"\b(?:sk|pk|rk)-[A-Za-z0-9_-]{16,}\b"),
    ("api_key", r"\b(?:ghp|gho|ghs|github_pat|xox[abpr])_[A-Za-z0-9_-]{16,}\b"),
    ("aws_key", r"\bAKIA[0-9A-Z]{16}\b"),
    ("bearer", r"(?i)\bbearer\s+[A-Za-z0-9._~+/-]{12,}=*"),
    ("secret", r"(?i)\b(?:password|passwd|pwd|secret|token|api[_-]?key)\s*[:=]\s*\S+"),
    ("email", EMAIL_PATTERN),
    ("card", r"\b(?:\d[ -]?){12,18}\d\b"),
    ("phone", r"(?<![\w+])\+?\d{1,3}[ .-]?\(?\d{2,4}\)?[ .-]?\d{3,4}[ .-]?\d{3,4}\b"),
)

MODES = ("read", "write")


@dataclass
class RedactionPolicy:
    """Masks secrets in text with ``[REDACTED:<label>]``.

    ``patterns`` are ``(label, regex)`` pairs (default: keys, tokens,
    passwords, emails, card and phone numbers). ``mode="read"`` masks only
    when content is displayed (the UI's "Mask secrets" toggle);
    ``mode="write"`` also masks span attributes before they are stored or
    exported. ``keys`` limits span redaction to those attributes (default:
    every string attribute).
    """

    patterns: Sequence[tuple[str, str]] = DEFAULT_PATTERNS
    mode: str = "read"
    replacement: str = "[REDACTED:{label}]"
    keys: Iterable[str] | None = None
    _compiled: list[tuple[str, re.Pattern[str]]] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise InvalidValueError(f"mode must be one of {MODES}, got {self.mode!r}")
        compiled = []
        for entry in self.patterns:
            if not (isinstance(entry, (tuple, list)) and len(entry) == 2):
                raise InvalidTypeError("patterns must be (label, regex) pairs")
            label, regex = entry
            try:
                compiled.append((str(label), re.compile(regex)))
            except re.error as exc:
                raise InvalidValueError(f"bad redaction pattern {label!r}: {exc}") from exc
        self._compiled = compiled
        self.keys = frozenset(self.keys) if self.keys is not None else None

    @classmethod
    def default(cls, mode: str = "read") -> RedactionPolicy:
        """The built-in secret patterns, in the given mode."""
        return cls(mode=mode)

    def redact(self, text: str) -> str:
        """``text`` with every match replaced by its label marker."""
        if not text:
            return text
        for label, pattern in self._compiled:
            text = pattern.sub(self.replacement.format(label=label), text)
        return text

    def redact_value(self, value: Any) -> Any:
        """Redact a string, or each string in a list/tuple; other values pass through."""
        if isinstance(value, str):
            return self.redact(value)
        if isinstance(value, (list, tuple)):
            return type(value)(self.redact(v) if isinstance(v, str) else v for v in value)
        return value

    def redact_attributes(self, attributes: Mapping[str, Any]) -> dict[str, Any]:
        """A copy of span attributes with the covered string values masked."""
        keys = self.keys
        return {
            key: (self.redact_value(value) if keys is None or key in keys else value)
            for key, value in attributes.items()
        }


_installed: dict[str, RedactionPolicy | None] = {"policy": None}


def set_redaction_policy(policy: RedactionPolicy | None) -> None:
    """Install the process-wide policy (None removes it)."""
    if policy is not None and not isinstance(policy, RedactionPolicy):
        raise InvalidTypeError(f"expected a RedactionPolicy or None, got {type(policy).__name__}")
    _installed["policy"] = policy


def get_redaction_policy() -> RedactionPolicy | None:
    """The installed policy, or None."""
    return _installed["policy"]


def write_policy() -> RedactionPolicy | None:
    """The installed policy when it masks at write time, else None."""
    policy = _installed["policy"]
    return policy if policy is not None and policy.mode == "write" else None
