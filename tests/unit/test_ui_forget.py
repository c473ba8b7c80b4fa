"""Issue #31 on the Memory page: a post is refused before its form is read when it
is too large (413) or comes from another origin (403); "forget this user" needs the
CSRF value and the typed user id and leaves everyone else; a fact's timeline stays
readable after a version is deleted; a fact's source is shown in words."""

from __future__ import annotations

import asyncio
import html
import re
import time
from typing import Any

import pytest
from fastapi.testclient import TestClient

from fastaiagent.facts.fact import SOURCE_CONVERSATION, SOURCE_TRACES
from fastaiagent.learn import Fact, MemoryStore
from fastaiagent.trace.store import SpanRecord, TraceStore
from fastaiagent.ui import create_app
from fastaiagent.ui.form_guard import MAX_FORM_BYTES, foreign_origin

BASE = "http://127.0.0.1"


@pytest.fixture
def store(tmp_path):  # type: ignore[no-untyped-def]
    s = MemoryStore(tmp_path / "facts.db")
    yield s
    s.close()


def _client(store: MemoryStore, tmp_path, **kw: Any) -> TestClient:  # type: ignore[no-untyped-def]
    return TestClient(create_app(store, trace_db=tmp_path / "traces.db", **kw), base_url=BASE)


def _csrf(page: str) -> str:
    found = re.search(r'name="csrf" value="([0-9a-f]+)"', page)
    assert found, "the page carries a CSRF value"
    return found.group(1)


def _user(store: MemoryStore, text: str, user: str, project: str = "", **kw: Any) -> int:
    return store.add(Fact(text, scope="user", scope_id=user, project_id=project, **kw))


# -- refused before the form is read ---------------------------------------------


def _asgi_post(app: Any, receive: Any, headers: dict[str, str]) -> tuple[int, bytes]:
    """POST /memory/facts/1/delete straight to the ASGI app: (status, body)."""
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
        "scheme": "http", "path": "/memory/facts/1/delete", "raw_path": b"/memory/facts/1/delete",
        "root_path": "", "query_string": b"", "server": ("127.0.0.1", 7860), "client": ("127.0.0.1", 5000),
        "headers": [(k.lower().encode(), v.encode()) for k, v in {"host": "127.0.0.1:7860", **headers}.items()],
    }  # fmt: skip
    asyncio.run(app(scope, receive, send))
    start = next(m for m in sent if m["type"] == "http.response.start")
    return start["status"], b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")


def test_a_declared_body_over_the_limit_gets_413_unread(store: MemoryStore, tmp_path) -> None:  # type: ignore[no-untyped-def]
    fact = _user(store, "Prefers oat milk", "alice")
    app = create_app(store, trace_db=tmp_path / "traces.db")
    reads = 0

    async def receive() -> dict[str, Any]:
        nonlocal reads
        reads += 1
        return {"type": "http.request", "body": b"x" * 1024, "more_body": True}

    status, body = _asgi_post(app, receive, {"content-length": str(10 * 1024 * 1024)})
    assert status == 413 and b"too large" in body and reads == 0
    client = _client(store, tmp_path)
    csrf = _csrf(client.get(f"/memory/facts/{fact}").text)
    padded = client.post(f"/memory/facts/{fact}/delete", data={"csrf": csrf, "pad": "x" * MAX_FORM_BYTES})
    assert padded.status_code == 413 and store.get(fact) is not None
    assert client.post(f"/memory/facts/{fact}/delete", data={"csrf": csrf}).status_code == 200  # under it: done
    assert store.get(fact) is None


def test_a_chunked_body_is_read_only_up_to_the_limit(store: MemoryStore, tmp_path) -> None:  # type: ignore[no-untyped-def]
    app = create_app(store, trace_db=tmp_path / "traces.db")
    chunk = 16 * 1024
    reads = 0

    async def endless() -> dict[str, Any]:
        nonlocal reads
        reads += 1
        return {"type": "http.request", "body": b"a" * chunk, "more_body": True}

    status, _ = _asgi_post(app, endless, {"transfer-encoding": "chunked"})
    assert status == 413
    assert reads == MAX_FORM_BYTES // chunk + 1  # stopped at the first chunk past the limit
    bad, _ = _asgi_post(app, endless, {"content-length": "lots"})
    assert bad == 400


def test_a_post_from_another_origin_gets_403_before_its_body_is_read(store: MemoryStore, tmp_path) -> None:  # type: ignore[no-untyped-def]
    fact = _user(store, "Prefers oat milk", "alice")
    app = create_app(store, trace_db=tmp_path / "traces.db")

    async def must_not_read() -> dict[str, Any]:
        raise AssertionError("the body of a foreign post is not read")

    status, body = _asgi_post(app, must_not_read, {"origin": "http://evil.example"})
    assert status == 403 and b"did not come from this UI" in body
    client = _client(store, tmp_path)
    csrf = _csrf(client.get(f"/memory/facts/{fact}").text)
    for headers in (
        {"Origin": "http://evil.example"},
        {"Origin": "null"},  # a sandboxed frame, or a page that hides its origin
        {"Origin": "http://127.0.0.1:8080"},  # another port is another origin
        {"Referer": "http://evil.example/prize.html"},  # no Origin: the Referer says it
    ):
        refused = client.post(f"/memory/facts/{fact}/expire", data={"csrf": csrf}, headers=headers)
        assert refused.status_code == 403, headers
        assert "did not come from this UI" in refused.text
    assert store.list_active("user", "alice") != []  # nothing changed
    own = client.post(
        f"/memory/facts/{fact}/expire", data={"csrf": csrf}, headers={"Origin": BASE}, follow_redirects=False
    )
    assert own.status_code == 303 and store.list_active("user", "alice") == []
    # the UI's pages let a browser send their origin with the UI's own forms
    assert client.get("/memory").headers["referrer-policy"] == "same-origin"


def test_origin_matching_rules() -> None:
    assert not foreign_origin("http://127.0.0.1:7860", "127.0.0.1:7860")
    assert not foreign_origin("http://LOCALHOST:7860", "localhost:7860")
    assert not foreign_origin("https://memory.example.com", "memory.example.com:443")
    assert not foreign_origin("http://[::1]:7860/memory?x=1", "[::1]:7860")  # a Referer
    assert foreign_origin("http://127.0.0.1:7860", "localhost:7860")
    assert foreign_origin("http://127.0.0.1.evil.example", "127.0.0.1")
    assert foreign_origin("null", "127.0.0.1:7860")
    assert foreign_origin("file:///tmp/page.html", "127.0.0.1:7860")
    assert foreign_origin("http://127.0.0.1:99999", "127.0.0.1:99999")  # malformed


# -- forget this user --------------------------------------------------------------


def _seed_users(store: MemoryStore, tmp_path) -> dict[str, int]:  # type: ignore[no-untyped-def]
    now = time.time()
    old = _user(store, "Plan: free", "alice", created_at=now - 50)
    ids = {
        "old": old,
        "new": store.update(Fact("Plan: pro", scope="user", scope_id="alice"), old),
        "tea": _user(store, "Drinks green tea", "alice", created_at=now - 40),
        "bob": _user(store, "Plan: team", "bob", created_at=now - 30),
        "acme": _user(store, "Uses SSO", "alice", "acme", created_at=now - 20),
    }
    runs = TraceStore(tmp_path / "traces.db")
    for user, trace_id in (("alice", "a" * 32), ("bob", "b" * 32)):
        runs.write([SpanRecord("1" * 16, trace_id, None, "agent.run", 1, 2, attributes={"memory.user_id": user})])
    runs.close()
    return ids


def test_forget_user_needs_the_csrf_value_and_the_typed_id(store: MemoryStore, tmp_path) -> None:  # type: ignore[no-untyped-def]
    ids = _seed_users(store, tmp_path)
    client = _client(store, tmp_path)
    page = client.get("/memory", params={"scope": "user:alice"}).text
    assert 'id="forget-user-form"' in page and 'action="/memory/users/alice/forget"' in page
    assert 'id="forget-user-form"' not in client.get("/memory", params={"scope": "user:*"}).text
    csrf = _csrf(page)
    attempts = (
        ({"confirm": "alice"}, 403),  # no CSRF value
        ({"csrf": "0" * 64, "confirm": "alice"}, 403),
        ({"csrf": csrf}, 400),  # not confirmed
        ({"csrf": csrf, "confirm": "alic"}, 400),
        ({"csrf": csrf, "confirm": "bob"}, 400),
    )
    for form, status in attempts:
        answer = client.post("/memory/users/alice/forget", data=form)
        assert answer.status_code == status, form
    said = client.post("/memory/users/alice/forget", data={"csrf": csrf}).text
    assert "Nothing was forgotten: type the user id 'alice' exactly" in html.unescape(said)
    assert store.get(ids["tea"]) is not None and store.get(ids["old"]) is not None  # nothing happened
    every = client.post("/memory/users/*/forget", data={"csrf": csrf, "confirm": "*"})
    assert every.status_code == 400 and store.get(ids["bob"]) is not None


def test_forget_user_deletes_their_facts_and_runs_only(store: MemoryStore, tmp_path) -> None:  # type: ignore[no-untyped-def]
    ids = _seed_users(store, tmp_path)
    client = _client(store, tmp_path)
    csrf = _csrf(client.get("/memory", params={"scope": "user:alice"}).text)
    done = client.post(
        "/memory/users/alice/forget", data={"csrf": csrf, "confirm": "alice", "project_id": ""},
        follow_redirects=False,
    )  # fmt: skip
    assert done.status_code == 303 and done.headers["location"].startswith("/memory?notice=")
    shown = client.get(done.headers["location"]).text
    # Every kind it removed is said: the run of alice in the UI's own trace store too.
    assert re.search(r'id="notice"[^>]*>Forgot user alice: 3 facts, 0 fact vectors, 0 recalled '
                     r'messages, 0 stored windows, 1 run deleted', shown), shown[-2000:]
    assert 'id="notice"' not in client.get(done.headers["location"]).text  # said once
    assert 'id="notice"' not in client.get("/memory?notice=made-up").text
    assert [store.get(ids[k]) for k in ("old", "new", "tea")] == [None, None, None]  # history too
    assert store.get(ids["bob"]) is not None  # another user
    assert store.get(ids["acme"]) is not None  # the same user in another project
    runs = TraceStore(tmp_path / "traces.db")
    assert runs.get_trace("a" * 32) == [] and runs.get_trace("b" * 32) != []
    runs.close()
    acme_page = client.get("/memory", params={"scope": "user:alice@acme"}).text
    assert 'name="project_id" value="acme"' in acme_page
    acme = client.post(
        "/memory/users/alice/forget", data={"csrf": csrf, "confirm": "alice", "project_id": "acme"}
    )
    assert acme.status_code == 200 and "Forgot user alice in project acme: 1 fact, " in acme.text
    assert store.get(ids["acme"]) is None and store.get(ids["bob"]) is not None


def test_forget_user_with_a_slash_in_the_id_through_the_pages_form(store: MemoryStore, tmp_path) -> None:  # type: ignore[no-untyped-def]
    _user(store, "Likes jazz", "team/ann")
    kept = _user(store, "Likes folk", "team")
    client = _client(store, tmp_path)
    page = client.get("/memory", params={"scope": "user:team%2Fann"}).text
    action = re.search(r'action="([^"]+)" id="forget-user-form"', page)
    assert action and action.group(1) == "/memory/users/team%2Fann/forget"
    done = client.post(action.group(1), data={"csrf": _csrf(page), "confirm": "team/ann"})
    assert done.status_code == 200 and "Forgot user team/ann: 1 fact, " in done.text
    assert store.list_active("user", "team/ann") == [] and store.get(kept) is not None


# -- a timeline with a deleted version ---------------------------------------------


def _links(page: str) -> list[str]:
    return [h for h in re.findall(r'href="([^"]+)"', page) if not h.startswith(("/static/", "/traces"))]


def test_the_timeline_stays_readable_after_its_newest_version_is_deleted(store: MemoryStore, tmp_path) -> None:  # type: ignore[no-untyped-def]
    ids = _seed_users(store, tmp_path)
    client = _client(store, tmp_path)
    page = client.get(f"/memory/facts/{ids['new']}").text
    assert f'<a class="successor-link" href="#version-{ids["new"]}">' in page  # in the same timeline
    gone = client.post(f"/memory/facts/{ids['new']}/delete", data={"csrf": _csrf(page)}, follow_redirects=False)
    assert gone.status_code == 303 and gone.headers["location"] == f"/memory/facts/{ids['old']}"
    left = client.get(gone.headers["location"])
    assert left.status_code == 200 and f"by #{ids['new']} <span class=\"marker\">deleted</span>" in left.text
    assert f'href="#version-{ids["new"]}"' not in left.text
    with_history = client.get("/memory", params={"superseded": "1", "scope": "user:alice"}).text
    for shown in (left.text, with_history):
        for link in _links(shown):
            if not link.startswith("#"):
                assert client.get(link).status_code == 200, link
    alone = client.post(f"/memory/facts/{ids['tea']}/delete", data={"csrf": _csrf(page)}, follow_redirects=False)
    assert alone.headers["location"] == "/memory"  # no version left: back to the list


# -- sources in words --------------------------------------------------------------


def test_sources_are_shown_by_name_with_the_run_as_a_link(store: MemoryStore, tmp_path) -> None:  # type: ignore[no-untyped-def]
    said = _user(store, "Has a beagle", "alice", source=SOURCE_CONVERSATION, source_trace_id="ab" * 16)
    mined = _user(store, "Likes short answers", "alice", source=SOURCE_TRACES, source_trace_id="cd" * 16)
    manual = _user(store, "VIP customer", "alice")
    client = _client(store, tmp_path)
    listing = client.get("/memory").text
    cells = dict(re.findall(r'<tr id="fact-(\d+)".*?<td class="source">(.*?)</td>', listing, re.S))
    assert cells[str(said)].startswith("learned · ") and f'href="/traces/{"ab" * 16}"' in cells[str(said)]
    assert cells[str(mined)].startswith("traces · ") and "trace cdcdcdcd" in cells[str(mined)]
    assert cells[str(manual)] == "manual"
    fact_page = client.get(f"/memory/facts/{said}").text
    assert '<span class="source">learned</span>' in fact_page and f'/traces/{"ab" * 16}' in fact_page
    assert (
        Fact("x", source=SOURCE_CONVERSATION).source_words,
        Fact("x", source=SOURCE_TRACES).source_words,
        Fact("x").source_words,
        Fact("x", source="import").source_words,
    ) == ("learned", "traces", "manual", "import")
