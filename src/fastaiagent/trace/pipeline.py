"""The background half of tracing: batches finished spans to the store and exporters.

The agent's thread only appends a finished span to a queue. A daemon thread
wakes every ``delay_ms`` (or when a batch fills), turns the spans into stored
records and OpenTelemetry SDK ``ReadableSpan``s, and hands them to the local
trace store and to each exporter. Payload dropping and write-mode redaction
happen here too, off the hot path. A full queue drops spans (counted, logged
once) rather than growing without bound.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import weakref
from collections import deque
from collections.abc import Sequence
from typing import Any

from fastaiagent.trace.recorder import LiveSpan
from fastaiagent.trace.redaction import RedactionPolicy, write_policy
from fastaiagent.trace.store import (
    EncodedRun,
    EncodedSpan,
    SpanRecord,
    TraceStore,
    encode_spans,
)

logger = logging.getLogger("fastaiagent.trace")

MAX_QUEUE = 50_000
MAX_BATCH = 2048  # the thread wakes early once this many spans wait
EXPORT_CHUNK = 256  # spans encoded and written per step
_PRIMITIVES = (str, bool, int, float)
# One encoder reused: json.dumps with options would build a new one per call.
_dumps = json.JSONEncoder(default=str, separators=(",", ":")).encode


def _clean(value: Any) -> Any:
    """An attribute value OpenTelemetry accepts: a primitive or a list of one type."""
    if isinstance(value, _PRIMITIVES):
        return value
    if isinstance(value, (list, tuple)):
        items = [v if isinstance(v, _PRIMITIVES) else str(v) for v in value]
        if len({type(v) for v in items}) > 1:
            items = [str(v) for v in items]
        return items
    return str(value)


def _present(attributes: dict[str, Any]) -> dict[str, Any]:
    """Attributes without None values (callers may pass None meaning "not set")."""
    if None in attributes.values():
        return {k: v for k, v in attributes.items() if v is not None}
    return attributes


def encode_batch(
    batch: list[LiveSpan], policy: RedactionPolicy | None
) -> tuple[list[tuple[str, int, bytes]], list[EncodedRun]]:
    """Spans grouped per trace and encoded once per trace, plus run rows."""
    grouped: dict[int, list[EncodedSpan]] = {}
    runs: list[EncodedRun] = []
    for span in batch:
        attributes = _present(span.attributes)
        if policy is not None:
            attributes = policy.redact_attributes(attributes)
        end_ns = span.end_ns or span.start_ns
        events = (
            [{"name": n, "time_ns": t, "attributes": a} for n, t, a in span.events]
            if span.events
            else None
        )
        item = (
            span.span_id,
            span.parent_id,
            span.name,
            span.start_ns,
            end_ns,
            span.status,
            attributes,
            events,
        )
        grouped.setdefault(span.trace_id, []).append(item)
        if span.is_root:
            runs.append(
                (
                    format(span.trace_id, "032x"),
                    format(span.span_id, "016x"),
                    span.name,
                    span.start_ns,
                    end_ns,
                    span.status,
                    _dumps(attributes),
                )
            )
    batches = [
        (format(trace_id, "032x"), len(items), encode_spans(items))
        for trace_id, items in grouped.items()
    ]
    return batches, runs


def to_record(span: LiveSpan) -> SpanRecord:
    """The stored form of a recorded span."""
    return SpanRecord(
        span_id=format(span.span_id, "016x"),
        trace_id=format(span.trace_id, "032x"),
        parent_id=format(span.parent_id, "016x") if span.parent_id is not None else None,
        name=span.name,
        start_ns=span.start_ns,
        end_ns=span.end_ns or span.start_ns,
        status=span.status,
        attributes={k: _clean(v) for k, v in _present(span.attributes).items()},
        events=[
            {"name": name, "time_ns": when, "attributes": {k: _clean(v) for k, v in attrs.items()}}
            for name, when, attrs in span.events or ()
        ],
    )


class _Otel:
    """SDK types for building ReadableSpans, imported once, on the export thread."""

    def __init__(self, service_name: str) -> None:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import Event, ReadableSpan
        from opentelemetry.sdk.util.instrumentation import InstrumentationScope
        from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

        from fastaiagent._version import __version__

        self.Event, self.ReadableSpan, self.SpanContext = Event, ReadableSpan, SpanContext
        self.Status, self.StatusCode, self.kind = Status, StatusCode, SpanKind.INTERNAL
        self.flags = TraceFlags(TraceFlags.SAMPLED)
        self.resource = Resource.create({"service.name": service_name})
        self.scope = InstrumentationScope("fastaiagent", __version__)

    def readable(self, span: LiveSpan) -> Any:
        context = self.SpanContext(span.trace_id, span.span_id, False, self.flags)
        parent = (
            self.SpanContext(span.trace_id, span.parent_id, False, self.flags)
            if span.parent_id is not None
            else None
        )
        code = getattr(self.StatusCode, span.status, self.StatusCode.UNSET)
        status = self.Status(code, span.status_message or None) if code is self.StatusCode.ERROR else self.Status(code)
        return self.ReadableSpan(
            name=span.name,
            context=context,
            parent=parent,
            resource=self.resource,
            attributes={k: _clean(v) for k, v in _present(span.attributes).items()},
            events=[
                self.Event(name, {k: _clean(v) for k, v in attrs.items()}, when)
                for name, when, attrs in span.events or ()
            ],
            kind=self.kind,
            status=status,
            start_time=span.start_ns,
            end_time=span.end_ns or span.start_ns,
            instrumentation_scope=self.scope,
        )


class SpanPipeline:
    """Queue + export thread feeding the local store and any SpanExporters."""

    def __init__(
        self,
        store: TraceStore | None,
        exporters: Sequence[Any] = (),
        *,
        delay_ms: int = 1000,
        service_name: str = "fastaiagent",
        max_queue: int = MAX_QUEUE,
    ) -> None:
        self.store = store
        self.exporters = list(exporters)
        self.delay = delay_ms / 1000
        self.service_name = service_name
        self.max_queue = max_queue
        self.dropped = 0
        self._queue: deque[LiveSpan] = deque()
        self._wake = threading.Event()
        self._export_lock = threading.Lock()
        self._stopped = False
        self._otel: _Otel | None = None
        self._thread = self._start()
        if hasattr(os, "register_at_fork"):  # a forked child needs its own export thread
            ref = weakref.ref(self)

            def after_fork() -> None:
                pipeline = ref()
                if pipeline is not None:
                    pipeline._after_fork()

            os.register_at_fork(after_in_child=after_fork)

    def _after_fork(self) -> None:
        self._queue = deque()
        self._export_lock = threading.Lock()
        if not self._stopped:
            self._thread = self._start()

    def _start(self) -> threading.Thread:
        thread = threading.Thread(target=self._run, name="fastaiagent-trace-export", daemon=True)
        thread.start()
        return thread

    # -- hot path ------------------------------------------------------------

    def submit(self, span: LiveSpan) -> None:
        """Queue a finished span (called on the agent's thread; never blocks)."""
        if self._stopped:
            return
        if len(self._queue) >= self.max_queue:
            self.dropped += 1
            if self.dropped == 1:
                logger.warning("trace queue full (%d spans); dropping spans", self.max_queue)
            return
        queue = self._queue
        queue.append(span)
        if len(queue) >= MAX_BATCH and not self._wake.is_set():  # set() takes a lock: once
            self._wake.set()

    # -- export thread -------------------------------------------------------

    def _run(self) -> None:
        while not self._stopped:
            self._wake.wait(self.delay)
            self._wake.clear()
            self.drain()

    def drain(self) -> None:
        """Export everything queued so far, in batches (any thread may call it)."""
        with self._export_lock:
            while self._queue:
                batch: list[LiveSpan] = []
                while self._queue and len(batch) < EXPORT_CHUNK:
                    batch.append(self._queue.popleft())
                self._export(batch)

    def _export(self, batch: list[LiveSpan]) -> None:
        if self.store is not None:
            policy = write_policy()
            try:
                self.store.write_batches(*encode_batch(batch, policy))
            except Exception as exc:  # a full disk must not take the agent down
                logger.warning("could not write %d spans to %s: %s", len(batch), self.store.path, exc)
        if self.exporters:
            if self._otel is None:
                self._otel = _Otel(self.service_name)
            readable = [self._otel.readable(span) for span in batch]
            for exporter in self.exporters:
                try:
                    exporter.export(readable)
                except Exception as exc:
                    logger.warning("span exporter %s failed: %s", type(exporter).__name__, exc)

    def flush(self) -> bool:
        """Export what is queued and flush the exporters; True when all succeeded."""
        self.drain()
        return all(bool(e.force_flush()) for e in self.exporters)

    def shutdown(self) -> None:
        """Stop the thread, export what is left, shut the exporters down."""
        if self._stopped:
            return
        self._stopped = True
        self._wake.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=10)
        self.drain()
        for exporter in self.exporters:
            try:
                exporter.shutdown()
            except Exception as exc:
                logger.warning("span exporter %s failed to shut down: %s", type(exporter).__name__, exc)
        if self.store is not None:
            self.store.close()
