"""Counts that tell the truth (issue #46), on SQLite, Postgres and Redis.

``add_history`` returns how many messages recall did not hold yet (the same
history imported twice: 0 the second time, and nothing embedded again), and
``fastaiagent memory forget --user`` reports every kind of thing it removed:
facts, recalled messages, stored windows, runs.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import pytest
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).parents[1] / "unit"))
from _vector_fakes import WordHashEmbedder

from fastaiagent import Agent, Memory, RunContext
from fastaiagent.cli import _register, app
from fastaiagent.llm.message import AssistantMessage, UserMessage
from fastaiagent.testing import echo_llm

HISTORY = [
    UserMessage("My dog Biscuit is a beagle and hates baths"),
    AssistantMessage("Beagles often dislike water; lukewarm baths help a lot."),
    UserMessage("I moved to Porto in April for the new job"),
    AssistantMessage("Porto is lovely in spring, congratulations on the job!"),
]
TIMES = [datetime(2024, 3, day, 12, tzinfo=timezone.utc) for day in (1, 1, 2, 2)]


@dataclass
class Session:
    user_id: str


def test_add_history_returns_what_it_added(any_location):
    embedder = WordHashEmbedder(32)
    memory = Memory(any_location, user_id=lambda ctx: ctx.state.user_id, recall="auto", embedder=embedder)
    index = memory.location.vector_store(32)  # type: ignore[attr-defined]
    assert memory.add_history(HISTORY[:2], user_id="ann", at=TIMES[:2]) == 2
    embedded = embedder.texts_embedded
    assert memory.add_history(HISTORY[:2], user_id="ann", at=TIMES[:2]) == 0  # nothing was added
    assert embedder.texts_embedded == embedded  # and nothing embedded again
    assert memory.add_history(HISTORY, user_id="ann", at=TIMES) == 2  # the two new ones
    assert index.count("user:ann") == 4
    # The message that was last is linked to the one now after it (written again).
    linked = {c.id: c.metadata.get("next") for c in index.chunks("user:ann")}
    assert sum(1 for target in linked.values() if target in linked) == 3
    assert memory.add_history(HISTORY, user_id="ann", at=TIMES) == 0


def test_forget_user_from_the_shell_reports_every_kind_it_removed(any_location):
    memory = Memory(
        any_location, user_id=lambda ctx: ctx.state.user_id, recall="auto",
        embedder=WordHashEmbedder(32), window_store="shared",
    )  # fmt: skip
    agent = Agent(name="support", llm=echo_llm(), memory=memory)
    for text in ("I adopted a beagle", "It is called Biscuit"):
        agent.run(text, context=RunContext(state=Session("alice")))
    memory.persist("Likes green tea", id="alice")
    memory.persist("Lives in Porto", id="alice")
    agent.run("I have a cat called Miso", context=RunContext(state=Session("bob")))
    _register()
    result = CliRunner().invoke(app, ["memory", "forget", "--user", "alice", "--yes", "-l", any_location])
    assert result.exit_code == 0, result.output
    said = dict((kind, int(n)) for n, kind in re.findall(r"(\d+) ([a-z ]+?)(?:,| deleted)", result.output))
    assert said["facts"] == 2, result.output
    assert said["recalled messages"] == 4, result.output  # two turns: a message and a reply each
    assert said["stored window"] == 1, result.output
    assert "runs" in said or "run" in said, result.output
    # bob is untouched
    index = memory.location.vector_store(32)  # type: ignore[attr-defined]
    assert index.count("user:alice") == 0 and index.count("user:bob") == 2


@pytest.mark.parametrize("kind", ["facts", "recall", "windows", "traces"])
def test_forget_user_counts_are_the_ones_the_verb_returns(any_location, kind):
    memory = Memory(any_location, user_id=lambda ctx: ctx.state.user_id, recall="auto",
                    embedder=WordHashEmbedder(32), window_store="shared")  # fmt: skip
    agent = Agent(name="a", llm=echo_llm(), memory=memory)
    agent.run("I adopted a beagle", context=RunContext(state=Session("carol")))
    memory.persist("Likes tea", id="carol")
    counts = memory.forget_user("carol")
    expected = {"facts": 1, "recall": 2, "windows": 1}
    if kind in expected:
        assert counts[kind] == expected[kind], counts
    else:
        assert kind in counts, counts
    assert memory.forget_user("carol")[kind] == 0
