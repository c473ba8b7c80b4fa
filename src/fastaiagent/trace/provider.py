"""Turning tracing on and off, and where spans go."""

from __future__ import annotations

import atexit
import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from fastaiagent.errors import InvalidValueError
from fastaiagent.trace.exporters import RedactingExporter
from fastaiagent.trace.pipeline import SpanPipeline, to_record
from fastaiagent.trace.recorder import LiveSpan
from fastaiagent.trace.redaction import (
    RedactionPolicy,
    drop_payloads,
    payloads_enabled,
    set_redaction_policy,
    write_policy,
)
from fastaiagent.trace.store import SpanRecord, TraceStore


@dataclass
class Tracing:
    """What :func:`setup` installed; :func:`shutdown` flushes and removes it."""

    pipeline: SpanPipeline
    store: TraceStore | None

    def flush(self) -> bool:
        """Write every finished span out now (the store and exporters)."""
        return self.pipeline.flush()


_lock = threading.Lock()
_active: dict[str, Tracing | None] = {"tracing": None}


def _otlp_exporter(endpoint: str, headers: Mapping[str, str] | None) -> Any:
    from fastaiagent._optional import require

    module = require("opentelemetry.exporter.otlp.proto.http.trace_exporter", "otlp")
    url = endpoint.rstrip("/")
    if not url.endswith("/v1/traces"):
        url += "/v1/traces"
    return module.OTLPSpanExporter(endpoint=url, headers=dict(headers or {}))


def setup(
    store_path: str | os.PathLike[str] | None = None,
    otlp_endpoint: str | None = None,
    *,
    otlp_headers: Mapping[str, str] | None = None,
    local_store: bool = True,
    exporters: Sequence[Any] = (),
    payloads: bool | None = None,
    redaction: RedactionPolicy | None = None,
    service_name: str = "fastaiagent",
    batch_delay_ms: int = 1000,
) -> Tracing:
    """Turn tracing on.

    Spans go to the local trace store (``store_path``, default ``traces.db``
    beside the local fact database; ``local_store=False`` skips it), to an
    OTLP/HTTP collector at ``otlp_endpoint`` (needs ``fastaiagent[otlp]``),
    and to any extra OpenTelemetry SDK ``exporters``. A background thread
    writes them in batches every ``batch_delay_ms`` (and at :func:`flush`,
    :func:`shutdown` and exit), off the agent's hot path. Exported spans (not
    the local store) drop payload attributes when ``payloads`` is False or
    ``FASTAIAGENT_TRACE_PAYLOADS=0``. ``redaction`` installs a
    :class:`RedactionPolicy`. Calling ``setup`` again replaces the previous
    setup.
    """
    if batch_delay_ms <= 0:
        raise InvalidValueError("batch_delay_ms must be > 0")
    with _lock:
        _shutdown_locked()
        if redaction is not None:
            set_redaction_policy(redaction)
        store = TraceStore(store_path) if local_store else None
        remote: list[Any] = list(exporters)
        if otlp_endpoint:
            remote.append(_otlp_exporter(otlp_endpoint, otlp_headers))
        pipeline = SpanPipeline(
            store,
            [RedactingExporter(e, payloads=payloads) for e in remote],
            delay_ms=batch_delay_ms,
            service_name=service_name,
        )
        tracing = Tracing(pipeline, store)
        _active["tracing"] = tracing
        _install(pipeline.submit)
        return tracing


def _install(sink: Any) -> None:
    from fastaiagent import trace

    trace.set_tracer(None)
    trace._state["sink"] = sink


def _shutdown_locked() -> None:
    tracing = _active["tracing"]
    if tracing is None:
        return
    from fastaiagent import trace

    trace._state["sink"] = None
    _active["tracing"] = None
    tracing.pipeline.shutdown()


def shutdown() -> None:
    """Flush pending spans and turn tracing off (safe to call when it is off)."""
    with _lock:
        _shutdown_locked()


atexit.register(shutdown)


def flush() -> bool:
    """Write out every finished span now; True when tracing is off."""
    tracing = _active["tracing"]
    return True if tracing is None else tracing.flush()


def active() -> Tracing | None:
    """The current setup, or None when tracing is off."""
    return _active["tracing"]


class CapturedSpans:
    """Spans recorded by :func:`capture`, as an exporter would receive them."""

    def __init__(self) -> None:
        self._records: list[SpanRecord] = []
        self._lock = threading.Lock()

    def _add(self, record: SpanRecord) -> None:
        with self._lock:
            self._records.append(record)

    @property
    def spans(self) -> list[SpanRecord]:
        """Every finished span so far, in end order."""
        with self._lock:
            return list(self._records)

    def named(self, name: str) -> list[SpanRecord]:
        """Finished spans called ``name``."""
        return [s for s in self.spans if s.name == name]

    def names(self) -> list[str]:
        return [s.name for s in self.spans]

    def children(self, parent: SpanRecord) -> list[SpanRecord]:
        """Direct children of ``parent``, in start order."""
        kids = [s for s in self.spans if s.parent_id == parent.span_id]
        return sorted(kids, key=lambda s: s.start_ns)

    def clear(self) -> None:
        with self._lock:
            self._records.clear()


@contextmanager
def capture(
    *, payloads: bool | None = None, redaction: RedactionPolicy | None = None
) -> Iterator[CapturedSpans]:
    """Record spans in memory for tests: ``with trace.capture() as spans: ...``.

    Each span is kept as soon as it ends, filtered as an exported span is
    (payload switch and write-mode policy). Tracing is off again when the
    block ends; no store is written.
    """
    captured = CapturedSpans()

    def sink(span: LiveSpan) -> None:
        record = to_record(span)
        keep = payloads_enabled() if payloads is None else payloads
        if not keep:
            record.attributes = drop_payloads(record.attributes)
        policy = redaction if redaction is not None else write_policy()
        if policy is not None:
            record.attributes = policy.redact_attributes(record.attributes)
        captured._add(record)

    with _lock:
        _shutdown_locked()
        _install(sink)
    try:
        yield captured
    finally:
        from fastaiagent import trace

        if trace._state["sink"] is sink:
            trace._state["sink"] = None


__all__ = [
    "CapturedSpans",
    "Tracing",
    "active",
    "capture",
    "flush",
    "setup",
    "shutdown",
]
