"""Learning during a store outage: no extraction calls, one log line, the run goes on."""

from __future__ import annotations

import logging
from typing import Any

from fastaiagent import Agent, Memory
from fastaiagent.errors import StoreUnavailableError
from fastaiagent.facts import SQLiteFactStore
from fastaiagent.testing import CannedLLM, FunctionLLM


class DownStore(SQLiteFactStore):
    """A SQLite store whose server-side reads fail as a Postgres/Redis outage would."""

    def list_active(self, *args: Any, **kwargs: Any) -> Any:
        raise StoreUnavailableError("cannot reach the fact store: connection refused")


def test_learning_skips_extraction_while_the_store_is_down(tmp_path, caplog):
    extractions: list[int] = []

    def extract(messages: list) -> str:
        extractions.append(1)
        return '{"facts": [{"fact": "Likes tea"}]}'

    memory = Memory(
        DownStore(tmp_path / "f.db"), user_id="alice", learn=FunctionLLM(extract),
        learn_in_background=False,
    )
    agent = Agent(name="a", llm=CannedLLM("ok"), memory=memory)
    with caplog.at_level(logging.WARNING):
        replies = [agent.run(f"I like tea {i}").output for i in range(30)]
    assert replies == ["ok"] * 30  # the outage degrades memory, never the run
    assert extractions == []  # nothing learned could be stored: the LLM is not paid for
    skipped = [r for r in caplog.records if "extraction skipped" in r.getMessage()]
    assert len(skipped) == 1
