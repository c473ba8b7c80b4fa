"""The local UI: Memory page, Traces page, escaping and access rules (FastAPI TestClient)."""

from __future__ import annotations

import re

import pytest
from fastapi.testclient import TestClient
from markupsafe import escape
from typer.testing import CliRunner

from fastaiagent import Agent, trace
from fastaiagent.agent import ComposableMemory, MemoryBlock, StaticBlock
from fastaiagent.learn import Fact, MemoryStore
from fastaiagent.llm.message import Message, SystemMessage
from fastaiagent.testing import CannedLLM
from fastaiagent.trace import RedactionPolicy
from fastaiagent.ui import check_bind, create_app
from fastaiagent.ui.views import Subject, parse_subject

BASE = "http://127.0.0.1"


@pytest.fixture(autouse=True)
def _clean_tracing():
    yield
    trace.shutdown()
    trace.set_redaction_policy(None)


@pytest.fixture
def store(tmp_path):
    s = MemoryStore(tmp_path / "facts.db")
    yield s
    s.close()


def _client(store, tmp_path, **kwargs) -> TestClient:
    return TestClient(create_app(store, trace_db=tmp_path / "traces.db", **kwargs), base_url=BASE)


def _rows(html: str) -> list[str]:
    return re.findall(r'<tr id="fact-\d+" class="fact[^"]*">.*?</tr>', html, re.S)


def _seed(store: MemoryStore) -> dict[str, int]:
    ids = {
        "global": store.add(Fact("Return policy is 30 days", scope="agent", scope_id="assistant")),
        "old": store.add(
            Fact(
                "Prefers email",
                scope="user",
                scope_id="alice",
                source="learned",
                confidence=0.6,
                source_trace_id="ab" * 16,
            )
        ),
        "bob": store.add(Fact("Has a beagle named Biscuit", scope="user", scope_id="bob")),
    }
    ids["new"] = store.update(Fact("Prefers Slack", scope="user", scope_id="alice"), ids["old"])
    return ids


def test_memory_page_lists_facts_with_the_six_columns(store, tmp_path):
    ids = _seed(store)
    html = _client(store, tmp_path).get("/memory").text
    headers = re.findall(r"<th>(.*?)</th>", html)
    assert headers == ["Fact", "Scope", "Source", "Confidence", "Created", "Valid"]
    rows = _rows(html)
    assert len(rows) == 3  # the superseded fact is hidden by default
    global_row = next(r for r in rows if f'id="fact-{ids["global"]}"' in r)
    assert "agent:assistant" in global_row and "manual" in global_row and "1.00" in global_row
    assert re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", global_row)
    assert "user:bob" in html and "user:alice" in html


def test_a_fact_from_a_run_links_to_its_trace(store, tmp_path):
    ids = _seed(store)
    html = _client(store, tmp_path).get("/memory?superseded=1").text
    row = next(r for r in _rows(html) if f'id="fact-{ids["old"]}"' in r)
    assert f'href="/traces/{"ab" * 16}"' in row and "0.60" in row


def test_scope_filter_lists_every_subject_with_counts_and_all_scopes(store, tmp_path):
    _seed(store)
    client = _client(store, tmp_path)
    html = client.get("/memory").text
    options = re.findall(r'<option value="([^"]*)"[^>]*>([^<]*)</option>', html)
    assert options[0] == ("", "All scopes")
    assert ("user:alice", "user:alice (1)") in options
    assert ("user:bob", "user:bob (1)") in options
    assert ("agent:assistant", "agent:assistant (1)") in options
    with_history = client.get("/memory?superseded=1").text
    assert "user:alice (2)" in with_history
    only_bob = client.get("/memory?scope=user:bob").text
    assert [r for r in _rows(only_bob)] and all("user:bob" in r for r in _rows(only_bob))
    assert "Prefers Slack" not in only_bob and "Return policy" not in only_bob
    assert 'value="user:bob" selected' in only_bob


def test_subject_keys_round_trip_odd_ids_and_projects():
    for subject in (Subject("user", "a:b@c.d", ""), Subject("project", "x", "acme@eu"), Subject("agent", "", "")):
        assert parse_subject(subject.key) == subject
    with pytest.raises(ValueError, match="scope filter must look like 'user:alice' or 'user:\\*', got 'nonsense'"):
        parse_subject("nonsense")
    with pytest.raises(ValueError, match="must look like 'user:alice' or 'user:\\*', got 'planet:earth'"):
        parse_subject("planet:earth")


def test_scope_filter_separates_projects(store, tmp_path):
    store.add(Fact("Acme uses SSO", scope="user", scope_id="alice", project_id="acme"))
    store.add(Fact("Personal note", scope="user", scope_id="alice"))
    client = _client(store, tmp_path)
    html = client.get("/memory").text
    assert "user:alice (project acme) (1)" in html
    acme = client.get("/memory", params={"scope": Subject("user", "alice", "acme").key}).text
    assert "Acme uses SSO" in acme and "Personal note" not in acme


def test_show_superseded_includes_replaced_rows_muted_with_a_marker(store, tmp_path):
    ids = _seed(store)
    client = _client(store, tmp_path)
    assert "Prefers email" not in client.get("/memory").text
    html = client.get("/memory?superseded=1").text
    row = next(r for r in _rows(html) if f'id="fact-{ids["old"]}"' in r)
    assert 'class="fact superseded"' in row
    # to the fact's own timeline, which is there even when the newer version is not
    link = f'/memory/facts/{ids["old"]}#version-{ids["new"]}'
    assert f'superseded → <a href="{link}">#{ids["new"]}</a>' in row
    new_row = next(r for r in _rows(html) if f'id="fact-{ids["new"]}"' in r)
    assert "superseded" not in new_row


def test_mask_secrets_uses_the_installed_read_mode_policy(store, tmp_path):
    store.add(Fact("API key is sk-live-abcdefghijklmnop1234", scope="user", scope_id="ann@corp.com"))
    trace.set_redaction_policy(RedactionPolicy(mode="read"))
    client = _client(store, tmp_path)
    plain = client.get("/memory").text
    assert "sk-live-abcdefghijklmnop1234" in plain
    masked = client.get("/memory?mask=1").text
    assert "sk-live-abcdefghijklmnop1234" not in masked and "[REDACTED:api_key]" in masked
    assert "ann@corp.com" not in masked  # ids can be personal too
    custom = RedactionPolicy(patterns=[("pet", r"beagle")])
    store.add(Fact("Has a beagle", scope="user", scope_id="bob"))
    html = _client(store, tmp_path, redaction=custom).get("/memory?mask=1").text
    assert "Has a [REDACTED:pet]" in html


def test_content_is_escaped_never_executed(store, tmp_path):
    store.add(Fact('<script>alert("x")</script> likes <b>bold</b>', scope="user", scope_id="<i>eve</i>"))
    html = _client(store, tmp_path).get("/memory").text
    assert "<script>alert" not in html and "<b>bold</b>" not in html and "<i>eve</i>" not in html
    assert "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;" in html
    assert "&lt;i&gt;eve&lt;/i&gt;" in html


def test_pages_hold_fifty_newest_first(store, tmp_path):
    for i in range(120):
        store.add(Fact(f"fact number {i:03d}", scope="agent", scope_id="pager", created_at=1_000 + i))
    client = _client(store, tmp_path)
    first = client.get("/memory").text
    assert len(_rows(first)) == 50 and "fact number 119" in first and 'id="next-page"' in first
    third = client.get("/memory?page=3").text
    assert len(_rows(third)) == 20 and "fact number 000" in third
    assert 'id="next-page"' not in third and 'id="prev-page"' in third
    assert "120 facts" in first


def test_a_store_that_is_down_gets_an_error_page(tmp_path):
    from fastaiagent.facts.redis.store import RedisFactStore

    dead = RedisFactStore("redis://127.0.0.1:1/0", socket_timeout=0.5)
    response = _client(dead, tmp_path).get("/memory")
    assert response.status_code == 503 and "fact store failed" in response.text


def test_bad_scope_filter_is_a_clear_400(store, tmp_path):
    response = _client(store, tmp_path).get("/memory?scope=galaxy:far")
    assert response.status_code == 400 and "scope filter" in response.text


class ScoredBlock(MemoryBlock):
    """Reports recall scores the way VectorBlock does."""

    name = "vector"

    def render(self, query: str) -> list[Message]:
        trace.annotate({"memory.scores": [0.91, 0.71]})
        return [SystemMessage("Likes hiking"), SystemMessage("Lives in Oslo")]


def test_traces_page_lists_runs_and_shows_what_each_block_recalled(store, tmp_path):
    trace.setup(store_path=tmp_path / "traces.db")
    agent = Agent("guide", CannedLLM("ok"), memory=ComposableMemory([StaticBlock("Pinned"), ScoredBlock()]))
    result = agent.run("plan a <trip>")
    trace.shutdown()
    client = _client(store, tmp_path)
    listing = client.get("/traces").text
    assert f'href="/traces/{result.trace_id}"' in listing and "guide" in listing
    assert "plan a &lt;trip&gt;" in listing
    page = client.get(f"/traces/{result.trace_id}").text
    vector = page[page.index('data-name="memory.read.vector"') :]
    vector = vector[: vector.index("</li>")]
    cells = re.findall(r"<td>(.*?)</td><td class=\"num score\">(.*?)</td>", vector)
    assert cells == [("Likes hiking", "0.910"), ("Lives in Oslo", "0.710")]
    assert 'class="span d2 memory"' in page  # memory.read.<block> sits two levels down


def test_unknown_or_malformed_trace_ids_are_404(store, tmp_path):
    client = _client(store, tmp_path)
    assert client.get("/traces/" + "0" * 32).status_code == 404
    assert client.get("/traces/not-a-trace").status_code == 404


def test_no_token_means_loopback_hosts_only(store, tmp_path):
    app = create_app(store, trace_db=tmp_path / "t.db")
    assert TestClient(app, base_url="http://localhost:7860").get("/memory").status_code == 200
    rebinding = TestClient(app, base_url="http://attacker.example")
    assert rebinding.get("/memory").status_code == 400


def test_token_is_required_once_then_kept_in_a_cookie(store, tmp_path):
    client = TestClient(create_app(store, trace_db=tmp_path / "t.db", token="s3cret-token"), base_url="http://0.0.0.0")
    assert client.get("/memory").status_code == 401
    assert client.get("/memory?token=wrong-token").status_code == 401
    first = client.get("/memory?token=s3cret-token")
    assert first.status_code == 200 and "fastaiagent_ui_token" in first.headers.get("set-cookie", "")
    assert client.get("/memory").status_code == 200  # the cookie carries it now
    fresh = TestClient(client.app, base_url="http://0.0.0.0")
    assert fresh.get("/memory", headers={"Authorization": "Bearer s3cret-token"}).status_code == 200


def test_the_cookie_holds_a_derived_value_never_the_token(store, tmp_path):
    from fastaiagent.ui.app import TOKEN_COOKIE, cookie_value

    app = create_app(store, trace_db=tmp_path / "t.db", token="s3cret-token")
    first = TestClient(app, base_url="http://0.0.0.0").get("/memory?token=s3cret-token")
    kept = first.cookies[TOKEN_COOKIE]
    assert kept == cookie_value("s3cret-token") and "s3cret-token" not in kept
    assert "s3cret-token" not in first.headers["set-cookie"]
    for value, status in ((kept, 200), ("s3cret-token", 401), (cookie_value("other-token"), 401)):
        browser = TestClient(app, base_url="http://0.0.0.0", cookies={TOKEN_COOKIE: value})
        assert browser.get("/memory").status_code == status
    # The cookie's value is no token: it opens nothing as ?token= or a bearer token.
    thief = TestClient(app, base_url="http://0.0.0.0")
    assert thief.get(f"/memory?token={kept}").status_code == 401
    assert thief.get("/memory", headers={"Authorization": f"Bearer {kept}"}).status_code == 401


def test_ui_command_never_prints_its_token(monkeypatch, tmp_path):
    from fastaiagent.cli import _register, app
    from fastaiagent.cli import ui as ui_command

    def fake_serve(sock, store, *, token, trace_db, announce):  # type: ignore[no-untyped-def]
        sock.close()
        assert token == "env-token-123"  # the UI still guards with it
        announce("http://127.0.0.1:7860")

    monkeypatch.setattr(ui_command, "serve_on", fake_serve)
    monkeypatch.setenv("FASTAIAGENT_UI_TOKEN", "env-token-123")
    _register()
    result = CliRunner().invoke(app, ["ui", "--port", "0", "--location", f"sqlite:///{tmp_path}/f.db"])
    assert result.exit_code == 0, result.output
    assert "env-token-123" not in result.output
    assert "?token=<token>" in result.output and "$FASTAIAGENT_UI_TOKEN" in result.output
    assert "passed with --token" in ui_command.announcement("http://h:1", "--token")
    assert "token" not in ui_command.announcement("http://h:1", None)


def test_trace_db_help_names_the_real_default(monkeypatch, tmp_path):
    import inspect

    from fastaiagent.cli.ui import ui
    from fastaiagent.trace.store import default_trace_db_path

    help_text = inspect.signature(ui).parameters["trace_db"].default.help
    assert "$FASTAIAGENT_TRACE_DB" in help_text and "./.fastaiagent/" in help_text
    assert "beside the fact db" not in help_text
    monkeypatch.delenv("FASTAIAGENT_TRACE_DB", raising=False)
    monkeypatch.setenv("FASTAIAGENT_LOCAL_DB", str(tmp_path / "data" / "local.db"))
    assert default_trace_db_path() == tmp_path / "data" / "traces.db"  # what the help says
    monkeypatch.delenv("FASTAIAGENT_LOCAL_DB")
    monkeypatch.chdir(tmp_path)
    assert default_trace_db_path() == tmp_path / ".fastaiagent" / "traces.db"


def test_pages_forbid_scripts(store, tmp_path):
    response = _client(store, tmp_path).get("/memory")
    assert "default-src 'none'" in response.headers["content-security-policy"]
    assert "<script" not in response.text


def test_binding_beyond_loopback_needs_a_token():
    check_bind("127.0.0.1", None)
    check_bind("::1", None)
    check_bind("localhost", None)
    with pytest.raises(ValueError, match="without a token"):
        check_bind("0.0.0.0", None)
    with pytest.raises(ValueError, match="at least 8"):
        check_bind("0.0.0.0", "short")
    check_bind("0.0.0.0", "long-enough-token")


def test_ui_command_refuses_a_public_address_without_a_token(monkeypatch):
    from fastaiagent.cli import _register, app

    monkeypatch.delenv("FASTAIAGENT_UI_TOKEN", raising=False)
    _register()
    result = CliRunner().invoke(app, ["ui", "--host", "0.0.0.0"])
    assert result.exit_code == 2
    assert "without a token" in result.output


# -- failing clearly: bad parameters, damaged stores, health --------------------------------


@pytest.fixture
def not_a_database(tmp_path):
    path = tmp_path / "damaged.db"
    path.write_text("this is not a database\n")
    return path


def _damaged(path) -> str:
    """What the store says of ``path``, a file that is not a SQLite database: the file and the fix."""
    return (
        f"the SQLite database '{path}' is damaged (file is not a database): restore it from a backup, "
        "or move it aside so a new one is created (the sqlite3 shell's .recover may save its rows)"
    )


def _error_message(response) -> str:
    (message,) = re.findall(r'<p class="error" id="error-message">(.*?)</p>', response.text, re.S)
    return message


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("page=abc", "page must be a whole number from 1 to 1000000, got &#39;abc&#39;"),
        ("page=0", "page must be &gt;= 1, got 0"),
        ("page=1000001", "page must be &lt;= 1000000, got 1000001"),
        (f"page={10**24}", f"page must be &lt;= 1000000, got {10**24}"),
        ("per_page=100000000", "per_page must be &lt;= 200, got 100000000"),
        ("per_page=0", "per_page must be &gt;= 1, got 0"),
        ("per_page=ten", "per_page must be a whole number from 1 to 200, got &#39;ten&#39;"),
    ],
)
def test_bad_query_parameters_get_a_friendly_400_page(store, tmp_path, query, message):
    response = _client(store, tmp_path).get(f"/memory?{query}")
    assert response.status_code == 400
    assert response.headers["content-type"].startswith("text/html")
    assert _error_message(response) == message


def test_a_bad_parameter_is_escaped_on_the_error_page(store, tmp_path):
    response = _client(store, tmp_path).get("/memory", params={"page": "<script>x</script>"})
    assert response.status_code == 400
    assert "<script>" not in response.text
    assert _error_message(response).endswith("got &#39;&lt;script&gt;x&lt;/script&gt;&#39;")


def test_traces_page_parameters_are_checked_too(store, tmp_path):
    response = _client(store, tmp_path).get("/traces?page=x")
    assert response.status_code == 400
    huge = _client(store, tmp_path).get(f"/traces?page={10**24}")  # once a 503
    assert huge.status_code == 400 and _error_message(huge) == f"page must be &lt;= 1000000, got {10**24}"
    assert _error_message(response) == "page must be a whole number from 1 to 1000000, got &#39;x&#39;"
    assert 'class="active"' in response.text and 'id="nav-traces" class="active"' in response.text


def test_an_unknown_path_is_a_404_page(store, tmp_path):
    response = _client(store, tmp_path).get("/nowhere")
    assert response.status_code == 404
    assert _error_message(response) == "No page at /nowhere."


def test_healthz_reads_both_stores(store, tmp_path, not_a_database):
    healthy = _client(store, tmp_path).get("/healthz")
    assert (healthy.status_code, healthy.json()) == (200, {"status": "ok"})
    broken_facts = TestClient(create_app(f"sqlite:///{not_a_database}", trace_db=tmp_path / "t.db"), base_url=BASE)
    answer = broken_facts.get("/healthz")
    assert answer.status_code == 503
    assert answer.json() == {"status": "unavailable", "reason": f"the fact store failed: {_damaged(not_a_database)}"}
    broken_traces = TestClient(create_app(store, trace_db=not_a_database), base_url=BASE)
    answer = broken_traces.get("/healthz")
    assert answer.status_code == 503
    assert answer.json() == {"status": "unavailable", "reason": f"the trace store failed: {_damaged(not_a_database)}"}


def test_a_damaged_store_gets_a_503_page_with_one_line(store, tmp_path, not_a_database):
    facts = TestClient(create_app(f"sqlite:///{not_a_database}", trace_db=tmp_path / "t.db"), base_url=BASE)
    page = facts.get("/memory")
    assert page.status_code == 503
    assert _error_message(page) == escape(f"The fact store failed: {_damaged(not_a_database)}")
    traces = TestClient(create_app(store, trace_db=not_a_database), base_url=BASE)
    for path in ("/traces", "/traces/" + "ab" * 16):
        response = traces.get(path)
        assert response.status_code == 503, path
        assert _error_message(response) == escape(f"The trace store failed: {_damaged(not_a_database)}")
        assert "Traceback" not in response.text
