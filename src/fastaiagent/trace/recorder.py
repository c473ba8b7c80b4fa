"""The hot path of tracing: recording a span costs about a microsecond.

Creating an OpenTelemetry SDK span costs tens of microseconds (sampler,
locks, attribute validation), and a turn opens ten or more spans, which
would more than double the memory overhead of a fast turn. So spans are
recorded as plain slotted objects here and turned into SDK ``ReadableSpan``s
on the background export thread (:mod:`fastaiagent.trace.pipeline`).

A root span joins the caller's active OpenTelemetry trace when there is one,
so agent runs nest under e.g. a web request span in the exported data.
"""

from __future__ import annotations

import os
import random
import time
import traceback
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from typing import Any

ERROR_TEXT_CHARS = 500
_current: ContextVar[LiveSpan | None] = ContextVar("fastaiagent_span", default=None)


_ids = random.Random()  # seeded from os.urandom; ids need uniqueness, not secrecy


def _reseed() -> None:
    _ids.seed()  # a forked child must not repeat its parent's ids


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reseed)


def _new_id(nbytes: int) -> int:
    return _ids.getrandbits(nbytes * 8) or 1


_get_current_span: Callable[[], Any] | None = None


def _otel_parent() -> tuple[int, int] | None:
    """(trace id, span id) of the caller's active OpenTelemetry span, if any."""
    global _get_current_span
    if _get_current_span is None:
        from opentelemetry.trace import get_current_span

        _get_current_span = get_current_span
    context = _get_current_span().get_span_context()
    return (context.trace_id, context.span_id) if context.is_valid else None


class LiveSpan:
    """A span being recorded. Offers the subset of the OTel ``Span`` API blocks use."""

    __slots__ = (
        "attributes",
        "end_ns",
        "events",
        "name",
        "parent_id",
        "span_id",
        "start_ns",
        "status",
        "status_message",
        "trace_id",
    )

    def __init__(
        self, name: str, trace_id: int, span_id: int, parent_id: int | None, attributes: dict[str, Any]
    ) -> None:
        self.name = name
        self.trace_id = trace_id
        self.span_id = span_id
        self.parent_id = parent_id
        self.attributes = attributes
        self.events: list[tuple[str, int, dict[str, Any]]] = []
        self.status = "UNSET"
        self.status_message = ""
        self.start_ns = time.time_ns()
        self.end_ns = 0

    def set_attribute(self, key: str, value: Any) -> None:
        if value is not None:
            self.attributes[key] = value

    def set_attributes(self, attributes: Mapping[str, Any]) -> None:
        for key, value in attributes.items():
            if value is not None:
                self.attributes[key] = value

    def add_event(self, name: str, attributes: Mapping[str, Any] | None = None) -> None:
        self.events.append((name, time.time_ns(), dict(attributes or {})))

    def record_exception(self, exc: BaseException, attributes: Mapping[str, Any] | None = None) -> None:
        details = {
            "exception.type": type(exc).__name__,
            "exception.message": str(exc)[:ERROR_TEXT_CHARS],
            "exception.stacktrace": "".join(traceback.format_exception(exc))[-4000:],
            **dict(attributes or {}),
        }
        self.add_event("exception", details)

    def set_status(self, status: Any, description: str | None = None) -> None:
        """Accepts ``"OK"``/``"ERROR"`` or an OTel ``StatusCode``/``Status``."""
        code = getattr(status, "status_code", status)
        self.status = getattr(code, "name", str(code)).upper()
        self.status_message = description or getattr(status, "description", None) or ""

    def is_recording(self) -> bool:
        return self.end_ns == 0

    @property
    def trace_id_hex(self) -> str:
        return format(self.trace_id, "032x")


Sink = Callable[[LiveSpan], None]


class RecordedSpan:
    """Context manager that records one span and hands it to ``sink`` when it ends."""

    __slots__ = ("_attributes", "_name", "_sink", "_span", "_token")

    def __init__(self, name: str, attributes: Mapping[str, Any] | None, sink: Sink) -> None:
        self._name = name
        self._attributes = attributes
        self._sink = sink

    def __enter__(self) -> LiveSpan:
        parent = _current.get()
        parent_id: int | None
        if parent is not None:
            trace_id, parent_id = parent.trace_id, parent.span_id
        else:
            outer = _otel_parent()
            if outer is not None:
                trace_id, parent_id = outer
            else:
                trace_id, parent_id = _new_id(16), None
        given = self._attributes
        attributes = dict(given) if given else {}
        if None in attributes.values():
            attributes = {k: v for k, v in attributes.items() if v is not None}
        span = LiveSpan(self._name, trace_id, _new_id(8), parent_id, attributes)
        self._span = span
        self._token = _current.set(span)
        return span

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        span = self._span
        span.end_ns = time.time_ns()
        if exc is not None:
            span.record_exception(exc)
            span.status = "ERROR"
            span.status_message = f"{type(exc).__name__}: {exc}"[:ERROR_TEXT_CHARS]
        try:
            _current.reset(self._token)
        except ValueError:  # closed from another context (an abandoned async generator)
            _current.set(None)
        self._sink(span)


def current_span() -> LiveSpan | None:
    """The span being recorded in this context, or None."""
    return _current.get()
