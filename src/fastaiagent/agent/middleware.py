"""Middleware: hooks that see the messages before the model and the reply after it."""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

from fastaiagent import _validate as check
from fastaiagent.llm.base import LLMResponse
from fastaiagent.llm.message import Message
from fastaiagent.trace.redaction import EMAIL_PATTERN


class Middleware:
    """Override ``before_model`` and/or ``after_model``; both default to pass-through.

    The async variants run the sync hooks inline (they are expected to be
    cheap, pure transforms); override them for hooks that do I/O.
    """

    def before_model(self, messages: list[Message], context: Any) -> list[Message]:
        return messages

    def after_model(self, response: LLMResponse, context: Any) -> LLMResponse:
        return response

    async def abefore_model(self, messages: list[Message], context: Any) -> list[Message]:
        return self.before_model(messages, context)

    async def aafter_model(self, response: LLMResponse, context: Any) -> LLMResponse:
        return self.after_model(response, context)


def _luhn_ok(digits: str) -> bool:
    total, parity = 0, len(digits) % 2
    for index, char in enumerate(digits):
        value = int(char)
        if index % 2 == parity:
            value *= 2
            if value > 9:
                value -= 9
        total += value
    return total % 10 == 0


def _iban_ok(candidate: str) -> bool:
    compact = candidate.replace(" ", "").upper()
    rearranged = compact[4:] + compact[:4]
    numeric = "".join(str(int(char, 36)) for char in rearranged)
    return int(numeric) % 97 == 1


_EMAIL = re.compile(EMAIL_PATTERN)
_IBAN = re.compile(r"\b[A-Z]{2}\d{2}(?: ?[A-Z0-9]){11,30}\b")
_CARD = re.compile(r"\b\d(?:[ -]?\d){12,18}\b")
_PHONE = re.compile(
    r"(?<![\w+])\+\d{1,3}(?:[ .-]?\(?\d{1,4}\)?){2,5}\b"  # international, with +
    r"|(?<!\w)\(?\b\d{3}\)?[ .-]\d{3}[ .-]\d{4}\b"  # national 3-3-4, e.g. (415) 555-0132
)


class RedactPII(Middleware):
    """Masks emails, IBANs, payment card numbers and phone numbers.

    By default only the model's reply is redacted (what the user sees and what
    memory stores); ``redact_input=True`` also masks what is sent to the model.
    Card numbers must pass the Luhn check and IBANs their checksum, so order
    ids and dates are left alone.
    """

    def __init__(self, *, redact_input: bool = False, redact_output: bool = True) -> None:
        self.redact_input = check.boolean("redact_input", redact_input)
        self.redact_output = check.boolean("redact_output", redact_output)

    @staticmethod
    def redact(text: str) -> str:
        """Return ``text`` with every recognised identifier masked."""
        text = _EMAIL.sub("[EMAIL]", text)
        text = _IBAN.sub(lambda m: "[IBAN]" if _iban_ok(m.group()) else m.group(), text)
        text = _CARD.sub(
            lambda m: "[CARD]" if _luhn_ok(re.sub(r"\D", "", m.group())) else m.group(), text
        )
        return _PHONE.sub(
            lambda m: "[PHONE]" if len(re.sub(r"\D", "", m.group())) >= 8 else m.group(), text
        )

    def before_model(self, messages: list[Message], context: Any) -> list[Message]:
        if not self.redact_input:
            return messages
        redacted = []
        for message in messages:
            if message.role in ("user", "tool") and message.content:
                message = Message.from_dict({**message.to_dict(), "content": self.redact(message.content)})
            redacted.append(message)
        return redacted

    def after_model(self, response: LLMResponse, context: Any) -> LLMResponse:
        if not self.redact_output or not response.content:
            return response
        return replace(response, content=self.redact(response.content))


