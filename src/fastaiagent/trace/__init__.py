"""Tracing: OpenTelemetry spans for agent runs, LLM calls and memory.

Turn it on with :func:`setup` (local SQLite trace store, optional OTLP export)
and off with :func:`shutdown`. ``span`` opens a span when tracing is on and is
a shared no-op context otherwise, so tracing off costs one flag check.
``annotate`` adds attributes to the current span (blocks use it to report
what they did). :func:`capture` records spans in memory for tests.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, nullcontext
from typing import TYPE_CHECKING, Any

from fastaiagent._lazy import LazyNames
from fastaiagent.trace.recorder import LiveSpan, current_span
from fastaiagent.trace.redaction import (
    ENV_PAYLOADS,
    PAYLOAD_KEYS,
    RedactionPolicy,
    get_redaction_policy,
    payloads_enabled,
    set_redaction_policy,
)

if TYPE_CHECKING:
    from fastaiagent.trace.provider import (
        CapturedSpans,
        Tracing,
        active,
        capture,
        flush,
        setup,
        shutdown,
    )
    from fastaiagent.trace.store import SpanRecord, TraceStore

# The OpenTelemetry SDK is imported only when tracing is turned on.
__getattr__ = LazyNames(
    __name__,
    {
        **dict.fromkeys(
            ("CapturedSpans", "Tracing", "active", "capture", "flush", "setup", "shutdown"),
            "fastaiagent.trace.provider",
        ),
        **dict.fromkeys(("SpanRecord", "TraceStore"), "fastaiagent.trace.store"),
    },
).__getattr__

# "sink" receives spans recorded by the fast recorder (installed by setup() and
# capture()); "tracer" is an OpenTelemetry tracer installed with set_tracer(),
# for apps that want every span created by their own SDK provider.
_state: dict[str, Any] = {"tracer": None, "sink": None}
_NOOP: Any = nullcontext(None)


def is_enabled() -> bool:
    """True while tracing is on (see :func:`fastaiagent.trace.setup`)."""
    return _state["sink"] is not None or _state["tracer"] is not None


def set_tracer(tracer: Any) -> None:
    """Install (or with None remove) an OpenTelemetry tracer spans go to.

    Spans then are real SDK spans of your provider (slower than the
    recorder :func:`setup` installs, but they join every OTel context).
    """
    _state["tracer"] = tracer
    if tracer is not None:
        _state["sink"] = None


@contextmanager
def _open(name: str, attributes: Mapping[str, Any] | None) -> Iterator[Any]:
    with _state["tracer"].start_as_current_span(name) as otel_span:
        if attributes:
            for key, value in attributes.items():
                if value is not None:
                    otel_span.set_attribute(key, value)
        yield otel_span


def span(name: str, attributes: Mapping[str, Any] | None = None) -> Any:
    """A context manager for one span; a no-op when tracing is off."""
    sink = _state["sink"]
    if sink is not None:
        return LiveSpan(name, attributes, sink)
    if _state["tracer"] is None:
        return _NOOP
    return _open(name, attributes)


def annotate(attributes: Mapping[str, Any]) -> None:
    """Set attributes on the current span, if tracing is on."""
    if _state["sink"] is not None:
        live = current_span()
        if live is not None:
            live.set_attributes(attributes)
        return
    if _state["tracer"] is None:
        return
    from opentelemetry import trace as otel_trace

    current = otel_trace.get_current_span()
    for key, value in attributes.items():
        if value is not None:
            current.set_attribute(key, value)


def current_trace_id() -> str | None:
    """The hex id of the active trace, or None when tracing is off."""
    if _state["sink"] is not None:
        live = current_span()
        return live.trace_id_hex if live is not None else None
    if _state["tracer"] is None:
        return None
    from opentelemetry import trace as otel_trace

    context = otel_trace.get_current_span().get_span_context()
    return format(context.trace_id, "032x") if context.is_valid else None


def forget_user(user_id: str, store: Any = None) -> int:
    """Erase a user's runs from the local trace store; returns the traces deleted.

    Pending spans are written out first, then every trace that belongs to or
    mentions ``user_id`` is deleted (see :meth:`TraceStore.erase_user`) from
    ``store`` (a TraceStore or a path), else from the store tracing writes to
    now and the default ``traces.db`` (the file ``fastaiagent ui`` reads).
    Spans already sent to an OTLP collector or other exporters are out of
    reach, as are spans still open (a run in progress).
    ``Memory.forget(tier="user", id=...)`` calls this.
    """
    with _local_stores(store) as stores:
        return sum(s.erase_user(user_id) for s in stores)


@contextmanager
def _local_stores(store: Any = None) -> Iterator[list[Any]]:
    """``store`` (a TraceStore or a path), else the store tracing writes to now and the
    default ``traces.db`` if it exists; pending spans written out first. Stores
    opened here close after."""
    import sys

    from fastaiagent.trace.store import TraceStore, default_trace_db_path

    provider = sys.modules.get("fastaiagent.trace.provider")  # loaded only if tracing was on
    tracing = provider.active() if provider is not None else None
    if tracing is not None:
        tracing.flush()
    opened: list[TraceStore] = []
    if isinstance(store, TraceStore):
        stores = [store]
    elif store is not None:
        stores = opened = [TraceStore(store)]
    else:
        stores = [tracing.store] if tracing is not None and tracing.store is not None else []
        default = default_trace_db_path()
        if default.exists() and all(s.path != default for s in stores):
            opened = [TraceStore(default)]
            stores.extend(opened)
    try:
        yield stores
    finally:
        for own in opened:
            own.close()


def audit(name: str, attributes: Mapping[str, Any], store: Any = None) -> None:
    """Record one audit line (a span of its own trace named ``name``) in the local
    trace stores :func:`forget_user` reaches (the store tracing writes to, the
    default ``traces.db`` when it exists: none is created), and log it at INFO on
    the ``fastaiagent.audit`` logger, e.g. who forgot what and how many rows of
    each kind. ``attributes`` must hold no user text: they are kept."""
    import getpass
    import os
    import secrets
    import socket
    import time

    from fastaiagent.trace.store import SpanRecord

    try:
        who = f"{getpass.getuser()}@{socket.gethostname()} pid {os.getpid()}"
    except Exception:  # no user name (a container without one): the host and pid say enough
        who = f"{socket.gethostname()} pid {os.getpid()}"
    now = time.time_ns()
    record = SpanRecord(
        secrets.token_hex(8), secrets.token_hex(16), None, name, now, now, "OK",
        {"audit.by": who, **attributes},
    )  # fmt: skip
    logging.getLogger("fastaiagent.audit").info(
        "%s %s", name, " ".join(f"{k}={v}" for k, v in record.attributes.items())
    )
    with _local_stores(store) as stores:
        for found in stores:
            found.write([record])


__all__ = [
    "ENV_PAYLOADS",
    "PAYLOAD_KEYS",
    "CapturedSpans",
    "RedactionPolicy",
    "SpanRecord",
    "TraceStore",
    "Tracing",
    "active",
    "annotate",
    "audit",
    "capture",
    "current_trace_id",
    "flush",
    "forget_user",
    "get_redaction_policy",
    "is_enabled",
    "payloads_enabled",
    "set_redaction_policy",
    "set_tracer",
    "setup",
    "shutdown",
    "span",
]
