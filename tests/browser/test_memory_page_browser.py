"""The Memory and Traces pages in real headless Chromium: filter, toggle, follow a trace."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from live_server import LiveServer, navigate

from fastaiagent import Agent, trace
from fastaiagent.agent import ComposableMemory, StaticBlock
from fastaiagent.learn import SOURCE_CONVERSATION, Fact, MemoryStore
from fastaiagent.testing import CannedLLM
from fastaiagent.trace import RedactionPolicy
from fastaiagent.ui import create_app

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Iterator[dict[str, Any]]:
    """A fact store and a trace store with one learned fact pointing at its run."""
    root = tmp_path_factory.mktemp("ui-site")
    trace.setup(store_path=root / "traces.db")
    memory = ComposableMemory([StaticBlock("The user's dog is called Biscuit")])
    run = Agent("assistant", CannedLLM("Noted!"), memory=memory).run("I moved to Oslo")
    trace.shutdown()
    store = MemoryStore(root / "facts.db")
    ids = {
        "global": store.add(Fact("Return policy is 30 days", scope="agent", scope_id="assistant")),
        "old": store.add(Fact("Lives in Bergen", scope="user", scope_id="alice")),
        "bob": store.add(Fact("Card 4111 1111 1111 1111 on file", scope="user", scope_id="bob")),
        "evil": store.add(
            Fact('<script>alert("pwned")</script> likes tea', scope="user", scope_id="mallory")
        ),
    }
    ids["new"] = store.update(
        Fact(
            "Lives in Oslo",
            scope="user",
            scope_id="alice",
            source=SOURCE_CONVERSATION,
            confidence=0.6,
            source_trace_id=run.trace_id,
        ),
        ids["old"],
    )
    app = create_app(store, trace_db=root / "traces.db", redaction=RedactionPolicy(mode="read"))
    with LiveServer(app) as server:
        yield {"url": server.url, "ids": ids, "trace_id": run.trace_id}
    store.close()


def _shot(driver: Any, folder: Path, name: str) -> Path:
    path = folder / f"{name}.png"
    assert driver.save_screenshot(str(path))
    assert path.stat().st_size > 1000
    return path


def _texts(driver: Any, selector: str) -> list[str]:
    from selenium.webdriver.common.by import By

    return [e.text for e in driver.find_elements(By.CSS_SELECTOR, selector)]


def _apply(driver: Any) -> None:
    from selenium.webdriver.common.by import By

    navigate(driver, driver.find_element(By.ID, "apply"))


def test_memory_page_loads_with_every_active_fact(browser, site, tmp_path):
    browser.get(site["url"] + "/memory")
    assert browser.title.startswith("Memory")
    facts = _texts(browser, "#facts tbody td.fact-text")
    assert len(facts) == 4 and "Lives in Oslo" in facts and "Lives in Bergen" not in facts
    assert _texts(browser, "#facts thead th") == ["Fact", "Scope", "Source", "Confidence", "Created", "Valid"]
    _shot(browser, tmp_path, "memory")


def test_scope_filter_narrows_to_one_subject(browser, site, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    browser.get(site["url"] + "/memory")
    select = Select(browser.find_element(By.ID, "scope"))
    labels = [o.text for o in select.options]
    assert labels[0] == "All scopes" and "user:alice (1)" in labels and "agent:assistant (1)" in labels
    select.select_by_visible_text("user:alice (1)")
    _apply(browser)
    assert "scope=user%3Aalice" in browser.current_url or "scope=user:alice" in browser.current_url
    assert _texts(browser, "#facts tbody td.scope") == ["user:alice"]
    _shot(browser, tmp_path, "memory-alice")


def test_show_superseded_adds_muted_rows_with_a_marker(browser, site, tmp_path):
    from selenium.webdriver.common.by import By

    browser.get(site["url"] + "/memory")
    browser.find_element(By.ID, "superseded").click()
    _apply(browser)
    old = browser.find_element(By.ID, f"fact-{site['ids']['old']}")
    new = browser.find_element(By.ID, f"fact-{site['ids']['new']}")
    assert "superseded" in old.get_attribute("class")
    assert f"superseded → #{site['ids']['new']}" in old.text
    cell = old.find_element(By.CSS_SELECTOR, "td.created")
    active_cell = new.find_element(By.CSS_SELECTOR, "td.confidence")
    muted, normal = cell.value_of_css_property("color"), active_cell.value_of_css_property("color")
    assert muted != normal  # rendered muted, not just tagged
    _shot(browser, tmp_path, "memory-superseded")


def test_mask_secrets_hides_card_numbers(browser, site, tmp_path):
    from selenium.webdriver.common.by import By

    browser.get(site["url"] + "/memory")
    assert any("4111 1111 1111 1111" in t for t in _texts(browser, "td.fact-text"))
    browser.find_element(By.ID, "mask").click()
    _apply(browser)
    masked = _texts(browser, "td.fact-text")
    assert not any("4111" in t for t in masked)
    assert any("[REDACTED:card]" in t for t in masked)
    _shot(browser, tmp_path, "memory-masked")


def test_a_fact_holding_a_script_renders_as_text(browser, site):
    from selenium.common.exceptions import NoAlertPresentException
    from selenium.webdriver.common.by import By

    browser.get(site["url"] + "/memory")
    row = browser.find_element(By.ID, f"fact-{site['ids']['evil']}")
    assert '<script>alert("pwned")</script> likes tea' in row.text
    with pytest.raises(NoAlertPresentException, match="no such alert"):  # the script never ran
        browser.switch_to.alert.text  # noqa: B018 - reading it is the check


def test_trace_link_leads_to_the_run_and_its_memory_spans(browser, site, tmp_path):
    from selenium.webdriver.common.by import By

    browser.get(site["url"] + "/memory")
    row = browser.find_element(By.ID, f"fact-{site['ids']['new']}")
    navigate(browser, row.find_element(By.CSS_SELECTOR, "a.trace-link"))
    assert browser.current_url.endswith(f"/traces/{site['trace_id']}")
    assert browser.find_element(By.ID, "trace-id").text == site["trace_id"]
    names = [e.get_attribute("data-name") for e in browser.find_elements(By.CSS_SELECTOR, "li.span")]
    assert names[:3] == ["agent.run", "memory.read", "memory.read.static"]
    recalled = browser.find_element(By.CSS_SELECTOR, 'li[data-name="memory.read.static"] table.recalled')
    assert "The user's dog is called Biscuit" in recalled.text
    _shot(browser, tmp_path, "trace")
    navigate(browser, browser.find_element(By.ID, "nav-traces"))
    assert "I moved to Oslo" in browser.find_element(By.ID, "runs").text
    _shot(browser, tmp_path, "traces")
