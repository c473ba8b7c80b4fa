"""Reviewing memory in real headless Chromium: search, a fact's timeline, expire and
delete through the page's forms, and a forged post from another origin refused."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from live_server import LiveServer, navigate

from fastaiagent.learn import Fact, MemoryStore
from fastaiagent.ui import create_app

pytestmark = pytest.mark.browser


@pytest.fixture
def site(tmp_path) -> Iterator[dict[str, Any]]:  # type: ignore[no-untyped-def]
    store = MemoryStore(tmp_path / "facts.db")
    now = time.time()
    old = store.add(Fact("Plan: free", scope="user", scope_id="alice", created_at=now - 100))
    ids = {
        "old": old,
        "new": store.update(Fact("Plan: pro", scope="user", scope_id="alice", created_at=now - 50), old),
        "bob": store.add(Fact("Plan: team", scope="user", scope_id="bob", created_at=now - 40)),
        "tea": store.add(Fact("Drinks green tea", scope="user", scope_id="bob", created_at=now - 30)),
    }
    with LiveServer(create_app(store, trace_db=tmp_path / "traces.db")) as server:
        yield {"url": server.url, "ids": ids, "store": store}
    store.close()


def _facts(driver: Any) -> list[str]:
    from selenium.webdriver.common.by import By

    return [e.text for e in driver.find_elements(By.CSS_SELECTOR, "#facts a.history-link")]


def test_search_then_timeline_then_expire_and_delete(browser, site) -> None:  # type: ignore[no-untyped-def]
    from selenium.webdriver.common.by import By

    browser.get(site["url"] + "/memory")
    browser.find_element(By.ID, "q").send_keys("plan")
    navigate(browser, browser.find_element(By.ID, "apply"))
    assert _facts(browser) == ["Plan: team", "Plan: pro"]
    navigate(browser, browser.find_element(By.LINK_TEXT, "Plan: pro"))
    versions = [e.get_attribute("id") for e in browser.find_elements(By.CSS_SELECTOR, "#timeline li")]
    assert versions == [f"version-{site['ids']['new']}", f"version-{site['ids']['old']}"]
    assert "superseded" in browser.find_element(By.ID, f"version-{site['ids']['old']}").text
    navigate(browser, browser.find_element(By.ID, "expire"))
    assert browser.find_elements(By.ID, "expire") == []  # expired now: no second expire
    assert "expired" in browser.find_element(By.ID, f"version-{site['ids']['new']}").text
    browser.get(site["url"] + "/memory?scope=user:*")
    assert "Plan: pro" not in _facts(browser) and "Plan: team" in _facts(browser)
    browser.find_element(By.ID, "expired").click()
    navigate(browser, browser.find_element(By.ID, "apply"))
    assert "Plan: pro" in _facts(browser)
    navigate(browser, browser.find_element(By.LINK_TEXT, "Drinks green tea"))
    navigate(browser, browser.find_element(By.ID, "delete"))
    assert "Drinks green tea" not in _facts(browser)
    assert site["store"].get(site["ids"]["tea"]) is None
    assert site["store"].get(site["ids"]["bob"]) is not None  # bob's other fact stays


def test_a_form_posted_from_another_origin_is_refused(browser, site, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from selenium.webdriver.common.by import By

    target = f"{site['url']}/memory/facts/{site['ids']['bob']}/delete"
    page = tmp_path / "attacker.html"
    page.write_text(
        f'<form id="f" method="post" action="{target}"><input name="csrf" value="guess">'
        '<button id="go" type="submit">win a prize</button></form>'
    )
    browser.get(page.as_uri())
    navigate(browser, browser.find_element(By.ID, "go"))
    assert "did not come from this UI" in browser.find_element(By.ID, "error-message").text
    assert site["store"].get(site["ids"]["bob"]) is not None
