"""Turning tracing on and off: the tracer provider and where spans go."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SimpleSpanProcessor,
    SpanExporter,
)
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from fastaiagent.trace.exporters import RedactingExporter, SQLiteSpanExporter, span_to_record
from fastaiagent.trace.redaction import RedactionPolicy, set_redaction_policy
from fastaiagent.trace.store import SpanRecord, TraceStore

TRACER_NAME = "fastaiagent"


@dataclass
class Tracing:
    """What :func:`setup` installed; :func:`shutdown` flushes and removes it."""

    provider: TracerProvider
    store: TraceStore | None
    owns_provider: bool
    processors: list[Any] = field(default_factory=list)

    def flush(self, timeout_millis: int = 30000) -> bool:
        """Write every finished span out now (the store and exporters)."""
        return all(p.force_flush(timeout_millis) for p in self.processors)


_lock = threading.Lock()
_active: dict[str, Tracing | None] = {"tracing": None}


def _otlp_exporter(endpoint: str, headers: Mapping[str, str] | None) -> SpanExporter:
    from fastaiagent._optional import require

    module = require("opentelemetry.exporter.otlp.proto.http.trace_exporter", "otlp")
    url = endpoint.rstrip("/")
    if not url.endswith("/v1/traces"):
        url += "/v1/traces"
    exporter: SpanExporter = module.OTLPSpanExporter(endpoint=url, headers=dict(headers or {}))
    return exporter


def setup(
    store_path: str | os.PathLike[str] | None = None,
    otlp_endpoint: str | None = None,
    *,
    otlp_headers: Mapping[str, str] | None = None,
    local_store: bool = True,
    exporters: Sequence[SpanExporter] = (),
    payloads: bool | None = None,
    redaction: RedactionPolicy | None = None,
    service_name: str = "fastaiagent",
    provider: TracerProvider | None = None,
    batch_delay_ms: int = 1000,
) -> Tracing:
    """Turn tracing on.

    Spans go to the local trace store (``store_path``, default ``traces.db``
    beside the local fact database; ``local_store=False`` skips it), to an
    OTLP/HTTP collector at ``otlp_endpoint`` (needs ``fastaiagent[otlp]``), and
    to any extra ``exporters``. Every destination is written by a batch
    processor on a background thread, off the agent's hot path. Exported
    spans (not the local store) drop payload attributes when ``payloads`` is
    False or ``FASTAIAGENT_TRACE_PAYLOADS=0``. ``redaction`` installs a
    :class:`RedactionPolicy`. Pass your own SDK ``provider`` to add these
    destinations to it. Batches are written every ``batch_delay_ms`` (or when
    full, and at :func:`flush`/:func:`shutdown`/exit). Calling ``setup`` again
    replaces the previous setup.
    """
    if batch_delay_ms <= 0:
        raise ValueError("batch_delay_ms must be > 0")
    with _lock:
        _shutdown_locked()
        if redaction is not None:
            set_redaction_policy(redaction)
        owns = provider is None
        tracer_provider = provider or TracerProvider(
            resource=Resource.create({"service.name": service_name})
        )
        store = TraceStore(store_path) if local_store else None
        processors: list[Any] = []
        if store is not None:
            processors.append(
                BatchSpanProcessor(SQLiteSpanExporter(store), schedule_delay_millis=batch_delay_ms)
            )
        remote: list[SpanExporter] = list(exporters)
        if otlp_endpoint:
            remote.append(_otlp_exporter(otlp_endpoint, otlp_headers))
        for exporter in remote:
            processors.append(
                BatchSpanProcessor(
                    RedactingExporter(exporter, payloads=payloads),
                    schedule_delay_millis=batch_delay_ms,
                )
            )
        for processor in processors:
            tracer_provider.add_span_processor(processor)
        tracing = Tracing(tracer_provider, store, owns, processors)
        _active["tracing"] = tracing
        from fastaiagent import trace

        trace.set_tracer(tracer_provider.get_tracer(TRACER_NAME))
        return tracing


def _shutdown_locked() -> None:
    tracing = _active["tracing"]
    if tracing is None:
        return
    from fastaiagent import trace

    trace.set_tracer(None)
    _active["tracing"] = None
    if tracing.owns_provider:
        tracing.provider.shutdown()
    else:  # the caller's provider lives on; only our processors end
        for processor in tracing.processors:
            processor.force_flush()
            processor.shutdown()


def shutdown() -> None:
    """Flush pending spans and turn tracing off (safe to call when it is off)."""
    with _lock:
        _shutdown_locked()


def flush(timeout_millis: int = 30000) -> bool:
    """Write out every finished span now; True when tracing is off."""
    tracing = _active["tracing"]
    return True if tracing is None else tracing.flush(timeout_millis)


def active() -> Tracing | None:
    """The current setup, or None when tracing is off."""
    return _active["tracing"]


class CapturedSpans:
    """Spans recorded by :func:`capture`, as an exporter would receive them."""

    def __init__(self, exporter: InMemorySpanExporter) -> None:
        self._exporter = exporter

    @property
    def spans(self) -> list[SpanRecord]:
        """Every finished span so far, in end order."""
        return [span_to_record(s) for s in self._exporter.get_finished_spans()]

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
        self._exporter.clear()


@contextmanager
def capture(
    *, payloads: bool | None = None, redaction: RedactionPolicy | None = None
) -> Iterator[CapturedSpans]:
    """Record spans in memory for tests: ``with trace.capture() as spans: ...``.

    Spans pass through the same redaction as an exported span (payload
    switch and write-mode policy), synchronously, and tracing is restored to
    off when the block ends. No local store is written.
    """
    exporter = InMemorySpanExporter()
    processor = SimpleSpanProcessor(
        RedactingExporter(exporter, payloads=payloads, policy=redaction)
    )
    tracing = setup(local_store=False)
    tracing.provider.add_span_processor(processor)
    tracing.processors.append(processor)
    try:
        yield CapturedSpans(exporter)
    finally:
        shutdown()


__all__ = [
    "CapturedSpans",
    "Tracing",
    "active",
    "capture",
    "flush",
    "setup",
    "shutdown",
]
