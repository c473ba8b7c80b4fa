"""The Memory page as a place to review memory: search by text, every user (``user:*``),
expired facts on request, a fact's timeline, and expire / delete forms that need the
page's CSRF value and the token (or a loopback Host)."""

from __future__ import annotations

import re
import time

import pytest
from fastapi.testclient import TestClient

from fastaiagent.learn import Fact, MemoryStore
from fastaiagent.ui import create_app

BASE = "http://127.0.0.1"


@pytest.fixture
def store(tmp_path):  # type: ignore[no-untyped-def]
    s = MemoryStore(tmp_path / "facts.db")
    now = time.time()
    s.add(Fact("Prefers oat milk", scope="user", scope_id="alice", created_at=now - 50))
    s.add(Fact("Oat allergy: none", scope="user", scope_id="bob", created_at=now - 40))
    s.add(Fact("Return policy: 30 days", scope="agent", scope_id="shop", created_at=now - 30))
    s.add(Fact("Promo OAT10", scope="user", scope_id="alice", created_at=now - 20, valid_to=now - 10))
    yield s
    s.close()


def _client(store: MemoryStore, tmp_path, **kw) -> TestClient:  # type: ignore[no-untyped-def]
    return TestClient(create_app(store, trace_db=tmp_path / "t.db", **kw), base_url=BASE)


def _facts(html: str) -> list[str]:
    return re.findall(r'class="history-link"[^>]*>(.*?)</a>', html)


def _csrf(html: str) -> str:
    found = re.search(r'name="csrf" value="([0-9a-f]+)"', html)
    assert found, "the page carries a CSRF value"
    return found.group(1)


def test_search_every_user_and_expired_on_request(store: MemoryStore, tmp_path) -> None:  # type: ignore[no-untyped-def]
    client = _client(store, tmp_path)
    assert _facts(client.get("/memory?q=oat").text) == ["Oat allergy: none", "Prefers oat milk"]
    users = client.get("/memory", params={"scope": "user:*"}).text
    assert _facts(users) == ["Oat allergy: none", "Prefers oat milk"]  # no agent fact, no expired one
    shown = client.get("/memory", params={"scope": "user:*", "expired": "1"}).text
    assert _facts(shown)[0] == "Promo OAT10" and "expired</span>" in shown
    assert _facts(client.get("/memory?q=OAT10").text) == []
    assert 'value="oat"' in client.get("/memory?q=oat").text  # the search box keeps its text


def test_the_timeline_lists_versions_newest_first(store: MemoryStore, tmp_path) -> None:  # type: ignore[no-untyped-def]
    old = store.find_active("user", "alice", "", "Prefers oat milk")
    assert old is not None and old.id is not None
    new = store.update(Fact("Prefers soy milk", scope="user", scope_id="alice"), old.id)
    page = _client(store, tmp_path).get(f"/memory/facts/{old.id}")
    assert page.status_code == 200
    versions = re.findall(r'<li id="version-(\d+)"', page.text)
    assert versions == [str(new), str(old.id)]
    assert "superseded" in page.text and "user:alice" in page.text
    assert _client(store, tmp_path).get("/memory/facts/987654").status_code == 404


def test_expire_and_delete_need_the_csrf_value(store: MemoryStore, tmp_path) -> None:  # type: ignore[no-untyped-def]
    client = _client(store, tmp_path)
    fact = store.find_active("user", "bob", "", "Oat allergy: none")
    assert fact is not None
    page = client.get(f"/memory/facts/{fact.id}").text
    forged = client.post(f"/memory/facts/{fact.id}/expire", data={"csrf": "0" * 64})
    assert forged.status_code == 403 and "did not come from this UI" in forged.text
    assert client.post(f"/memory/facts/{fact.id}/delete", data={}).status_code == 403
    assert store.list_active("user", "bob") != []  # nothing changed
    done = client.post(f"/memory/facts/{fact.id}/expire", data={"csrf": _csrf(page)}, follow_redirects=False)
    assert done.status_code == 303 and store.list_active("user", "bob") == []
    assert store.get(fact.id or 0) is not None  # expired, kept
    assert "Expire now" not in client.get(f"/memory/facts/{fact.id}").text
    gone = client.post(f"/memory/facts/{fact.id}/delete", data={"csrf": _csrf(page)}, follow_redirects=False)
    assert gone.status_code == 303 and store.get(fact.id or 0) is None
    assert store.find_active("user", "alice", "", "Prefers oat milk") is not None  # others untouched


def test_mutations_need_the_token_or_a_loopback_host(store: MemoryStore, tmp_path) -> None:  # type: ignore[no-untyped-def]
    fact = store.find_active("user", "alice", "", "Prefers oat milk")
    assert fact is not None
    remote = TestClient(create_app(store, trace_db=tmp_path / "t.db"), base_url="http://evil.example")
    assert remote.post(f"/memory/facts/{fact.id}/delete", data={"csrf": "x"}).status_code == 400
    guarded = TestClient(create_app(store, trace_db=tmp_path / "t.db", token="s3cret-token"), base_url="http://0.0.0.0")
    assert guarded.post(f"/memory/facts/{fact.id}/delete", data={"csrf": "x"}).status_code == 401
    page = guarded.get(f"/memory/facts/{fact.id}?token=s3cret-token").text  # the cookie is set
    ok = guarded.post(f"/memory/facts/{fact.id}/delete", data={"csrf": _csrf(page)}, follow_redirects=False)
    assert ok.status_code == 303 and store.get(fact.id or 0) is None
