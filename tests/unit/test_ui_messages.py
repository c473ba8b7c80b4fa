"""The Messages tab's delete form: it needs the page's CSRF value and names the user,
so a forged post or another user's message id deletes nothing; bad ids get a 400."""

from __future__ import annotations

import re
from pathlib import Path

from fastapi.testclient import TestClient

from _recalled_sample import seeded_memory
from fastaiagent.facts import messages
from fastaiagent.llm.message import UserMessage
from fastaiagent.ui import create_app


def test_the_delete_form_deletes_only_what_it_may(tmp_path: Path) -> None:
    location = f"sqlite:///{tmp_path / 'm.db'}"
    store = seeded_memory(location).location
    client = TestClient(create_app(location, trace_db=tmp_path / "t.db"), base_url="http://127.0.0.1")
    page = client.get("/memory/messages?user=ann").text
    csrf = re.search(r'name="csrf" value="([^"]+)"', page)[1]  # type: ignore[index]
    ann = messages.list_messages(store, "ann")[0].id
    bob = messages.list_messages(store, "bob")[0].id

    def post(**form: str) -> int:
        return client.post("/memory/messages/delete", data=form, follow_redirects=False).status_code

    assert post(csrf="guess", user="ann", message_id=ann) == 403
    assert post(csrf=csrf, user="ann", message_id=bob) == 404  # bob's message, named as ann's
    assert post(csrf=csrf, user="", message_id=ann) == 400
    assert post(csrf=csrf, user="ann", project_id="a\x00b", message_id=ann) == 400
    assert post(csrf=csrf, user="ann", message_id=" ") == 400
    assert messages.count_messages(store, "ann") == 3 and messages.count_messages(store, "bob") == 1
    assert post(csrf=csrf, user="ann", message_id=ann) == 303
    assert messages.count_messages(store, "ann") == 2 and messages.count_messages(store, "bob") == 1


def test_the_tabs_answer_bad_parameters_with_a_page(tmp_path: Path) -> None:
    location = f"sqlite:///{tmp_path / 'm.db'}"
    seeded_memory(location)
    client = TestClient(create_app(location, trace_db=tmp_path / "t.db"), base_url="http://127.0.0.1")
    assert client.get("/memory/messages?user=*").status_code == 400
    assert client.get("/memory/messages?user=ann&page=0").status_code == 400
    assert client.get("/memory/users?page=0").status_code == 400
    masked = client.get("/memory/users?mask=1")
    assert masked.status_code == 200 and "ann" in masked.text


def test_the_messages_pager_keeps_the_user_and_mask_across_pages(tmp_path: Path) -> None:
    location = f"sqlite:///{tmp_path / 'm.db'}"
    memory = seeded_memory(location)
    memory.add_history([UserMessage(f"note number {n}") for n in range(60)], user_id="ann")
    client = TestClient(create_app(location, trace_db=tmp_path / "t.db"), base_url="http://127.0.0.1")

    def pager_link(page: str, which: str) -> str | None:
        found = re.search(rf'id="{which}" href="([^"]+)"', page)
        return found[1].replace("&amp;", "&") if found else None

    first = client.get("/memory/messages?user=ann&mask=1").text
    older = pager_link(first, "next-page")
    assert pager_link(first, "prev-page") is None and older is not None
    assert "user=ann" in older and "page=2" in older and "mask=1" in older
    second = client.get(older).text
    assert pager_link(second, "next-page") is None  # 63 messages: two pages of 50
    newer = pager_link(second, "prev-page")
    assert newer is not None and "page=1" in newer and "mask=1" in newer
