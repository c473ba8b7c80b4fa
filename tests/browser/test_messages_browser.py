"""The Memory page's Users and Messages tabs in real headless Chromium, on SQLite,
Postgres and Redis: every user with their counts, a user's recalled messages newest
first, a search, and a delete through the page's form that takes the message out of
recall and leaves the other user's alone (issue 49)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from live_server import LiveServer, navigate

from _recalled_sample import ANN, BOB, recalled, seeded_memory
from fastaiagent.ui import create_app

pytestmark = pytest.mark.browser
BACKENDS = [
    "sqlite",
    pytest.param("postgres", marks=pytest.mark.postgres),
    pytest.param("redis", marks=pytest.mark.redis),
]


@pytest.fixture(params=BACKENDS)
def site(request, own_location, tmp_path) -> Iterator[dict[str, Any]]:  # type: ignore[no-untyped-def]
    location = own_location(request.param)
    memory = seeded_memory(location)
    app = create_app(location, trace_db=tmp_path / "traces.db")
    with LiveServer(app) as server:
        yield {"url": server.url, "memory": memory}
    app.state.fact_store.close()


def _cells(driver: Any, selector: str) -> list[str]:
    from selenium.webdriver.common.by import By

    return [e.text for e in driver.find_elements(By.CSS_SELECTOR, selector)]


def test_users_then_messages_then_search_and_delete(browser, site) -> None:  # type: ignore[no-untyped-def]
    from selenium.webdriver.common.by import By

    browser.get(site["url"] + "/memory")
    navigate(browser, browser.find_element(By.ID, "tab-users"))
    assert _cells(browser, "#users td.scope") == ["ann", "bob"]
    assert _cells(browser, "#users td.facts") == ["1", "0"]
    assert _cells(browser, "#users td.messages") == ["3", "1"]
    assert all(_cells(browser, "#users td.created"))  # last active, for each
    ann_row = browser.find_elements(By.CSS_SELECTOR, "#users tr.user")[0]
    assert "forget-user" in ann_row.find_element(By.CLASS_NAME, "forget-link").get_attribute("href")
    navigate(browser, ann_row.find_element(By.CLASS_NAME, "messages-link"))
    assert _cells(browser, "#messages td.message-text") == [m.content for m in reversed(ANN)]
    assert "3 messages of user ann" in browser.find_element(By.ID, "message-count").text
    browser.find_element(By.ID, "q").send_keys("Porto")
    navigate(browser, browser.find_element(By.ID, "show"))
    assert _cells(browser, "#messages td.message-text") == [ANN[2].content]
    navigate(browser, browser.find_element(By.CSS_SELECTOR, "#messages button.delete-message"))
    assert "Deleted message" in browser.find_element(By.ID, "notice").text
    assert _cells(browser, "#messages td.message-text") == [m.content for m in reversed(ANN[:2])]
    assert "Porto" not in recalled(site["memory"], "ann", "Where did I move to?")
    browser.get(site["url"] + "/memory/messages?user=bob")
    assert _cells(browser, "#messages td.message-text") == [BOB[0].content]
    navigate(browser, browser.find_element(By.ID, "forget-user-link"))
    assert browser.find_element(By.ID, "forget-user-form").is_displayed()


def test_the_messages_tab_offers_the_users_with_messages(browser, site) -> None:  # type: ignore[no-untyped-def]
    from selenium.webdriver.common.by import By

    browser.get(site["url"] + "/memory")
    navigate(browser, browser.find_element(By.ID, "tab-messages"))
    assert _cells(browser, "#message-users a") == ["ann", "bob"]
    navigate(browser, browser.find_element(By.LINK_TEXT, "bob"))
    assert _cells(browser, "#messages td.message-text") == [BOB[0].content]
