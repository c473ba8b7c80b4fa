"""OpenTelemetry exporters: the local SQLite store and a redacting wrapper."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from fastaiagent.trace.redaction import (
    RedactionPolicy,
    drop_payloads,
    payloads_enabled,
    write_policy,
)
from fastaiagent.trace.store import SpanRecord, TraceStore

logger = logging.getLogger("fastaiagent.trace")


def _plain(value: Any) -> Any:
    # OTel hands out tuples and immutable mappings; JSON wants lists and dicts.
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if hasattr(value, "items"):
        return {str(k): _plain(v) for k, v in value.items()}
    return value


def _hex(value: int, width: int) -> str:
    return format(value, f"0{width}x")


def span_to_record(span: ReadableSpan) -> SpanRecord:
    """The stored form of a finished OTel span."""
    context = span.context
    assert context is not None  # finished SDK spans always carry one
    return SpanRecord(
        span_id=_hex(context.span_id, 16),
        trace_id=_hex(context.trace_id, 32),
        parent_id=_hex(span.parent.span_id, 16) if span.parent is not None else None,
        name=span.name,
        start_ns=span.start_time or 0,
        end_ns=span.end_time or span.start_time or 0,
        status=span.status.status_code.name,
        attributes=_plain(dict(span.attributes or {})),
        events=[
            {"name": e.name, "time_ns": e.timestamp, "attributes": _plain(dict(e.attributes or {}))}
            for e in span.events
        ],
    )


class SQLiteSpanExporter(SpanExporter):
    """Writes spans to the local :class:`TraceStore`, payloads included.

    A write-mode :class:`RedactionPolicy`, when installed, masks secrets
    before they reach the file; ``FASTAIAGENT_TRACE_PAYLOADS`` does not apply
    here, since this file never leaves the machine.
    """

    def __init__(self, store: TraceStore) -> None:
        self.store = store

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        policy = write_policy()
        records = []
        for span in spans:
            record = span_to_record(span)
            if policy is not None:
                record.attributes = policy.redact_attributes(record.attributes)
            records.append(record)
        try:
            self.store.write(records)
        except Exception as exc:  # a full disk must not take the agent down
            logger.warning("could not write %d spans to %s: %s", len(records), self.store.path, exc)
            return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        self.store.close()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


def _copy_with(span: ReadableSpan, attributes: dict[str, Any]) -> ReadableSpan:
    return ReadableSpan(
        name=span.name,
        context=span.context,
        parent=span.parent,
        resource=span.resource,
        attributes=attributes,
        events=span.events,
        links=span.links,
        kind=span.kind,
        status=span.status,
        start_time=span.start_time,
        end_time=span.end_time,
        instrumentation_scope=span.instrumentation_scope,
    )


class RedactingExporter(SpanExporter):
    """Wraps an exporter that sends spans elsewhere (OTLP, a test list).

    Drops the content attributes when payloads are off
    (``FASTAIAGENT_TRACE_PAYLOADS=0``, checked on each export, or
    ``payloads=False``) and applies the write-mode redaction policy (the
    installed one, or ``policy``).
    """

    def __init__(
        self,
        inner: SpanExporter,
        *,
        payloads: bool | None = None,
        policy: RedactionPolicy | None = None,
    ) -> None:
        self.inner = inner
        self.payloads = payloads
        self.policy = policy

    def _filter(self, span: ReadableSpan) -> ReadableSpan:
        keep_payloads = payloads_enabled() if self.payloads is None else self.payloads
        policy = self.policy if self.policy is not None else write_policy()
        if keep_payloads and policy is None:
            return span
        attributes: dict[str, Any] = dict(span.attributes or {})
        if not keep_payloads:
            attributes = drop_payloads(attributes)
        if policy is not None:
            attributes = policy.redact_attributes(attributes)
        return _copy_with(span, attributes)

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return self.inner.export([self._filter(span) for span in spans])

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return bool(self.inner.force_flush(timeout_millis))
