"""Where spans go: the local store, exporters, OTLP, payload switch and redaction."""

from __future__ import annotations

import http.server
import threading
import time
from typing import ClassVar

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from fastaiagent import Agent, trace
from fastaiagent.agent import ComposableMemory, StaticBlock
from fastaiagent.testing import CannedLLM
from fastaiagent.trace import RedactionPolicy, TraceStore
from fastaiagent.trace.exporters import span_to_record
from fastaiagent.trace.store import build_tree, flatten

SECRET_QUERY = "my api key is sk-abcdefghijklmnopqrstuvwx and my email is ann@example.com"


@pytest.fixture(autouse=True)
def _tracing_off_after():
    yield
    trace.shutdown()
    trace.set_redaction_policy(None)


def _agent() -> Agent:
    return Agent(
        "exporter", CannedLLM("fine"), memory=ComposableMemory([StaticBlock("User is alice")])
    )


def test_local_store_keeps_every_span_of_a_run(tmp_path):
    trace.setup(store_path=tmp_path / "traces.db")
    result = _agent().run("hello there")
    trace.shutdown()  # flushes the batch processor
    store = TraceStore(tmp_path / "traces.db")
    runs = store.list_runs()
    assert [r.trace_id for r in runs] == [result.trace_id]
    assert runs[0].name == "agent.run" and runs[0].span_count == 8
    assert runs[0].attributes["agent.input"] == "hello there"
    assert runs[0].attributes["agent.output"] == "fine"
    spans = store.get_trace(result.trace_id)
    ordered = [node.span.name for node in flatten(build_tree(spans))]
    assert ordered[:4] == ["agent.run", "memory.read", "memory.read.static", "llm.call"]
    depth = {node.span.name: node.depth for node in flatten(build_tree(spans))}
    assert depth["memory.read.static"] == 2


def test_default_store_sits_beside_the_local_fact_db(tmp_path, monkeypatch):
    monkeypatch.setenv("FASTAIAGENT_LOCAL_DB", str(tmp_path / "facts" / "local.db"))
    tracing = trace.setup()
    assert tracing.store is not None
    assert tracing.store.path == (tmp_path / "facts" / "traces.db").resolve()
    monkeypatch.setenv("FASTAIAGENT_TRACE_DB", str(tmp_path / "elsewhere.db"))
    assert TraceStore().path == (tmp_path / "elsewhere.db").resolve()


def test_batched_writes_happen_off_the_calling_thread(tmp_path, monkeypatch):
    writers: list[str] = []
    original = TraceStore.write_batches

    def spy(self, *args):
        writers.append(threading.current_thread().name)
        return original(self, *args)

    monkeypatch.setattr(TraceStore, "write_batches", spy)
    trace.setup(store_path=tmp_path / "traces.db", batch_delay_ms=50)
    _agent().run("hi")
    assert writers == []  # nothing written during the run itself
    deadline = time.monotonic() + 5
    while not writers and time.monotonic() < deadline:
        time.sleep(0.02)
    assert writers and threading.current_thread().name not in writers
    with pytest.raises(ValueError, match="batch_delay_ms"):
        trace.setup(batch_delay_ms=0)


def test_payloads_off_drops_content_from_exports_but_the_store_keeps_it(tmp_path, monkeypatch):
    monkeypatch.setenv("FASTAIAGENT_TRACE_PAYLOADS", "0")
    exported = InMemorySpanExporter()
    trace.setup(store_path=tmp_path / "traces.db", exporters=[exported])
    from fastaiagent import Memory
    from fastaiagent.learn import MemoryStore

    mem = Memory(location=MemoryStore(tmp_path / "facts.db"), agent_id="a")
    result = _agent().run(SECRET_QUERY)
    mem.persist("Likes tea", tier="user", id="alice")
    trace.shutdown()
    dropped = ("memory.snippets", "memory.query", "memory.detail", "memory.scope_id", "agent.input")
    sent = [span_to_record(s) for s in exported.get_finished_spans()]
    assert {s.name for s in sent} >= {"memory.read", "memory.read.static", "memory.persist"}
    for span in sent:
        for key in dropped:
            assert key not in span.attributes, (span.name, key)
    assert sent and all("memory.rendered_count" in s.attributes for s in sent if s.name == "memory.read.static")
    kept = {s.name: s.attributes for s in TraceStore(tmp_path / "traces.db").get_trace(result.trace_id)}
    assert kept["memory.read"]["memory.query"] == SECRET_QUERY
    assert kept["memory.read.static"]["memory.snippets"] == ["User is alice"]
    assert "memory.detail" in kept["memory.write.static"]


def test_capture_honours_the_payload_switch(monkeypatch):
    monkeypatch.setenv("FASTAIAGENT_TRACE_PAYLOADS", "0")
    with trace.capture() as spans:
        _agent().run("private question")
    assert "memory.query" not in spans.named("memory.read")[0].attributes
    monkeypatch.setenv("FASTAIAGENT_TRACE_PAYLOADS", "1")
    with trace.capture() as spans:
        _agent().run("private question")
    assert spans.named("memory.read")[0].attributes["memory.query"] == "private question"


def test_write_mode_policy_masks_exports_and_store(tmp_path):
    exported = InMemorySpanExporter()
    trace.setup(
        store_path=tmp_path / "traces.db",
        exporters=[exported],
        redaction=RedactionPolicy(mode="write"),
    )
    result = _agent().run(SECRET_QUERY)
    trace.shutdown()
    sent = {s.name: s.attributes for s in map(span_to_record, exported.get_finished_spans())}
    stored = {s.name: s.attributes for s in TraceStore(tmp_path / "traces.db").get_trace(result.trace_id)}
    for attributes in (sent, stored):
        query = attributes["memory.read"]["memory.query"]
        assert "sk-abcdef" not in query and "ann@example.com" not in query
        assert "[REDACTED:api_key]" in query and "[REDACTED:email]" in query


def test_read_mode_policy_leaves_stored_spans_intact(tmp_path):
    trace.setup(store_path=tmp_path / "traces.db", redaction=RedactionPolicy(mode="read"))
    result = _agent().run(SECRET_QUERY)
    trace.shutdown()
    stored = {s.name: s.attributes for s in TraceStore(tmp_path / "traces.db").get_trace(result.trace_id)}
    assert stored["memory.read"]["memory.query"] == SECRET_QUERY
    assert trace.get_redaction_policy() is not None


def test_redaction_policy_patterns_and_validation():
    policy = RedactionPolicy.default()
    masked = policy.redact("call +1 415 555 0100, card 4111 1111 1111 1111, password: hunter2")
    assert "4111" not in masked and "hunter2" not in masked and "555" not in masked
    assert policy.redact("Has a beagle named Biscuit") == "Has a beagle named Biscuit"
    assert policy.redact_value(["a@b.co", 3]) == ["[REDACTED:email]", 3]
    only_query = RedactionPolicy(keys=["memory.query"], mode="write")
    out = only_query.redact_attributes({"memory.query": "x@y.org", "other": "x@y.org"})
    assert out == {"memory.query": "[REDACTED:email]", "other": "x@y.org"}
    with pytest.raises(ValueError, match="mode"):
        RedactionPolicy(mode="sometimes")
    with pytest.raises(ValueError, match="bad redaction pattern"):
        RedactionPolicy(patterns=[("broken", "(")])
    with pytest.raises(TypeError, match="expected a RedactionPolicy or None, got str"):
        trace.set_redaction_policy("mask everything")  # type: ignore[arg-type]


def test_redaction_masks_keys_tokens_and_addresses_in_long_hostile_text():
    """A 64k-character attribute of near-misses (address characters without "@",
    "eyJ" runs without dots, keys without an END) is masked in one pass, and what
    is real in it is still found: each pattern starts only where its run starts."""
    policy = RedactionPolicy.default()
    near_misses = "a." * 20_000 + " eyJ-" * 4_000
    real = " mail me@example.org, eyJhbGciOiJI.eyJzdWIiOiIx.c2lnbmF0dXJl"
    masked = policy.redact(near_misses + real + " -----BEGIN A PRIVATE KEY----- x" * 500)
    assert masked == near_misses + " mail [REDACTED:email], [REDACTED:jwt] [REDACTED:private_key]"
    assert policy.redact("x-me@example.org") == "[REDACTED:email]"  # the whole run
    # A key cut off before its END (a truncated attribute) is masked to the end.
    cut = policy.redact("key: -----BEGIN RSA PRIVATE KEY-----\nMIIEow")
    assert cut == "key: [REDACTED:private_key]"
    whole = "-----BEGIN RSA PRIVATE KEY-----\nMIIE\n-----END RSA PRIVATE KEY----- kept"
    assert policy.redact(whole) == "[REDACTED:private_key] kept"


def test_setup_again_replaces_the_previous_setup(tmp_path):
    trace.setup(store_path=tmp_path / "one.db")
    _agent().run("first")
    trace.setup(store_path=tmp_path / "two.db")  # flushes and closes the first
    _agent().run("second")
    trace.shutdown()
    assert [r.attributes["agent.input"] for r in TraceStore(tmp_path / "one.db").list_runs()] == ["first"]
    assert [r.attributes["agent.input"] for r in TraceStore(tmp_path / "two.db").list_runs()] == ["second"]
    assert not trace.is_enabled()
    trace.shutdown()  # already off: harmless


def test_trace_store_reads_of_a_missing_file_are_empty(tmp_path):
    store = TraceStore(tmp_path / "never.db")
    assert store.list_runs() == [] and store.count_runs() == 0 and store.get_trace("x") == []
    assert not (tmp_path / "never.db").exists()


class _Collector(http.server.BaseHTTPRequestHandler):
    bodies: ClassVar[list[tuple[str, bytes]]] = []

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", 0))
        _Collector.bodies.append((self.path, self.rfile.read(length)))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.mark.parametrize("payloads", ["1", "0"])
def test_otlp_export_reaches_a_collector_and_honours_payloads(tmp_path, monkeypatch, payloads):
    monkeypatch.setenv("FASTAIAGENT_TRACE_PAYLOADS", payloads)
    _Collector.bodies = []
    server = http.server.HTTPServer(("127.0.0.1", 0), _Collector)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        endpoint = f"http://127.0.0.1:{server.server_address[1]}"
        trace.setup(store_path=tmp_path / "traces.db", otlp_endpoint=endpoint)
        _agent().run("question about ferrets")
        trace.shutdown()
    finally:
        server.shutdown()
        server.server_close()
    assert _Collector.bodies and _Collector.bodies[0][0] == "/v1/traces"
    body = b"".join(b for _, b in _Collector.bodies)
    assert b"memory.read.static" in body
    assert (b"question about ferrets" in body) is (payloads == "1")


def test_set_tracer_keeps_real_sdk_spans_for_apps_that_want_them():
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    exported = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exported))
    trace.set_tracer(provider.get_tracer("my-app"))
    try:
        result = _agent().run("through the sdk")
    finally:
        trace.set_tracer(None)
    names = [s.name for s in exported.get_finished_spans()]
    assert {"agent.run", "memory.read", "memory.read.static", "llm.call"} <= set(names)
    assert result.trace_id == format(exported.get_finished_spans()[0].context.trace_id, "032x")
    assert not trace.is_enabled()


def test_runs_join_the_callers_active_opentelemetry_trace(tmp_path):
    from opentelemetry.sdk.trace import TracerProvider

    exported = InMemorySpanExporter()
    trace.setup(store_path=tmp_path / "traces.db", exporters=[exported])
    outer_tracer = TracerProvider().get_tracer("web")
    with outer_tracer.start_as_current_span("POST /chat") as outer:
        result = _agent().run("inside a request")
    trace.shutdown()
    context = outer.get_span_context()
    assert result.trace_id == format(context.trace_id, "032x")
    run = next(s for s in exported.get_finished_spans() if s.name == "agent.run")
    assert run.parent is not None and run.parent.span_id == context.span_id
    stored = TraceStore(tmp_path / "traces.db")
    assert [r.trace_id for r in stored.list_runs()] == [result.trace_id]  # still listed as a run


def test_odd_attribute_values_are_stored_as_text(tmp_path):
    trace.setup(store_path=tmp_path / "traces.db")
    with trace.span("custom", {"when": object, "mixed": [1, "a"], "none": None}) as s:
        s.set_attribute("flag", True)
        trace_id = trace.current_trace_id()
    trace.shutdown()
    (span,) = TraceStore(tmp_path / "traces.db").get_trace(trace_id)
    assert span.attributes["when"] == str(object)
    assert span.attributes["mixed"] == [1, "a"] and span.attributes["flag"] is True
    assert "none" not in span.attributes


def test_an_abandoned_stream_leaves_tracing_usable(tmp_path):
    import asyncio

    async def first_delta_only() -> None:
        stream = _agent().astream("stream please")
        async for _ in stream:
            break
        await stream.aclose()

    with trace.capture() as spans:
        asyncio.run(first_delta_only())
        _agent().run("after")
    runs = spans.named("agent.run")
    assert runs and runs[-1].attributes["agent.input"] == "after"
    assert runs[-1].parent_id is None


def test_the_sqlite_exporter_serves_an_sdk_provider_too(tmp_path):
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    from fastaiagent.trace.exporters import SQLiteSpanExporter

    store = TraceStore(tmp_path / "sdk.db")
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(SQLiteSpanExporter(store)))
    trace.set_tracer(provider.get_tracer("my-app"))
    try:
        result = _agent().run("sdk spans into the local store")
    finally:
        trace.set_tracer(None)
        provider.shutdown()
    (run,) = TraceStore(tmp_path / "sdk.db").list_runs()
    assert run.trace_id == result.trace_id and run.span_count == 8
    assert run.attributes["agent.input"] == "sdk spans into the local store"
