"""The hot path of tracing: recording a span costs a couple of microseconds.

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


# Bound once: the hot path below runs for every span of every turn.
_randbits = _ids.getrandbits
_time_ns = time.time_ns
_get_parent = _current.get
_set_current = _current.set


_get_current_span: Callable[[], Any] | None = None


def _otel_parent() -> tuple[int, int] | None:
    """(trace id, span id) of the caller's active OpenTelemetry span, if any."""
    global _get_current_span
    if _get_current_span is None:
        from opentelemetry.trace import get_current_span

        _get_current_span = get_current_span
    context = _get_current_span().get_span_context()
    return (context.trace_id, context.span_id) if context.is_valid else None


class _RareFields:
    """Defaults of the fields most spans never set: class attributes, so the hot
    path does not assign them; a span that does set one gets its own value."""

    parent_id: int | None = None
    is_root: bool = False  # no fastaiagent parent: the span a stored run is listed by
    events: list[tuple[str, int, dict[str, Any]]] | None = None
    status: str = "UNSET"
    status_message: str = ""


class LiveSpan(_RareFields):
    """A span being recorded, and the context manager that records it.

    Offers the subset of the OTel ``Span`` API blocks use. ``None`` attribute
    values are dropped when the span is exported, not here, to keep the hot
    path short.
    """

    __slots__ = ("_sink", "_token", "attributes", "end_ns", "name", "span_id", "start_ns", "trace_id")
    name: str
    attributes: dict[str, Any]
    trace_id: int
    span_id: int
    start_ns: int
    end_ns: int
    _token: Any

    def __init__(self, name: str, attributes: Mapping[str, Any] | None, sink: Sink) -> None:
        self.name = name
        self.attributes = dict(attributes) if attributes else {}
        self._sink = sink
        self.end_ns = 0

    def __enter__(self) -> LiveSpan:
        parent = _get_parent()
        if parent is not None:
            self.trace_id = parent.trace_id
            self.parent_id = parent.span_id
        else:
            self.is_root = True
            outer = _otel_parent()
            if outer is not None:
                self.trace_id, self.parent_id = outer
            else:
                self.trace_id = _new_id(16)
        self.span_id = _randbits(64) or 1
        self._token = _set_current(self)
        self.start_ns = _time_ns()
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        self.end_ns = _time_ns()
        if exc is not None:
            self.record_exception(exc)
            self.status = "ERROR"
            self.status_message = f"{type(exc).__name__}: {exc}"[:ERROR_TEXT_CHARS]
        try:
            _current.reset(self._token)
        except ValueError:  # closed from another context (an abandoned async generator)
            _current.set(None)
        self._sink(self)

    def set_attribute(self, key: str, value: Any) -> None:
        if value is not None:
            self.attributes[key] = value

    def set_attributes(self, attributes: Mapping[str, Any]) -> None:
        for key, value in attributes.items():
            if value is not None:
                self.attributes[key] = value

    def add_event(self, name: str, attributes: Mapping[str, Any] | None = None) -> None:
        if self.events is None:
            self.events = []
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


def current_span() -> LiveSpan | None:
    """The span being recorded in this context, or None."""
    return _current.get()
