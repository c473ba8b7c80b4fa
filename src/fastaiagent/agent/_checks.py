"""Validation of Memory's keywords: each bad value fails at construction (H6)."""

from __future__ import annotations

from typing import Any

from fastaiagent.errors import InvalidTypeError, InvalidValueError
from fastaiagent.facts.scoping import WILDCARD
from fastaiagent.llm.base import BaseLLM


def positive_int_or_none(name: str, value: Any) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidValueError(f"{name} must be a positive int or None, got {value!r}")


def optional_id(name: str, value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidTypeError(f"{name} must be a str, got {type(value).__name__}")
    if not value.strip():
        raise InvalidValueError(f"{name} cannot be empty; leave it out (None) instead")
    if value == WILDCARD:
        raise InvalidValueError(f'{name} cannot be "*"')
    return value


def check_llm(name: str, value: Any) -> BaseLLM | None:
    if value is not None and not isinstance(value, BaseLLM):
        raise InvalidTypeError(f"{name}= needs an LLM (LLMClient or BaseLLM), got {type(value).__name__}")
    return value


def check_vector_option(name: str, value: Any) -> Any:
    if value is None or value == "auto":
        return value
    if isinstance(value, str) or not (hasattr(value, "search") and hasattr(value, "add")):
        raise InvalidTypeError(f'{name}= must be "auto", a VectorStore instance or None, got {value!r}')
    return value


def check_embedder(value: Any) -> None:
    if value is None:
        return
    if isinstance(value, str):
        if value in ("auto", "local", "openai") or value.startswith("openai:"):
            return
        raise InvalidValueError(
            f"unknown embedder {value!r}: use 'auto', 'local', 'openai', 'openai:<model>' "
            "or an Embedder instance"
        )
    if not (callable(getattr(value, "embed", None)) and hasattr(value, "dimension")):
        raise InvalidTypeError(f"embedder= must be a name or an Embedder (embed + dimension), got {value!r}")
