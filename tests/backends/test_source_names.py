"""One set of source names: a fact stored under a source's old name ("learn", what
`fastaiagent learn` wrote before the rename) reads as today's name ("traces") on every
backend, through every door: the store, Memory, the prompt, an export and its import."""

from __future__ import annotations

import time
from pathlib import Path

from fastaiagent import Agent, Memory
from fastaiagent.facts import SOURCE_CONVERSATION, SOURCE_TRACES, SOURCES, Fact
from fastaiagent.facts.factory import make_fact_store
from fastaiagent.testing import CannedLLM


def old_fact(text: str, user: str) -> Fact:
    """A fact as an older release stored it: the old source name, written as it is."""
    fact = Fact(text, scope="user", scope_id=user, confidence=1.0, created_at=time.time())
    fact.source = "learn"  # set after construction: the store writes it unchanged
    return fact


def test_an_old_source_name_reads_as_today_s(any_location: str, tmp_path: Path) -> None:
    store = make_fact_store(any_location)
    old = store.add(old_fact("Answers in British English", "alice"))
    learned = store.add(
        Fact(
            "Prefers email",
            scope="user",
            scope_id="alice",
            confidence=0.6,
            source=SOURCE_CONVERSATION,
        )
    )
    store.add(old_fact("Is a night owl", "bob"))
    try:
        assert store.get(old).source == SOURCE_TRACES
        assert store.get(learned).source == SOURCE_CONVERSATION
        mem = Memory(any_location, user_id="alice")
        sources = {f.fact: f.source for f in mem.retrieve()}
        assert sources == {"Answers in British English": "traces", "Prefers email": "learned"}
        assert set(sources.values()) <= set(SOURCES)
        assert [f.source for f in mem.history(old)] == ["traces"]

        llm = CannedLLM("ok")
        Agent(name="a", llm=llm, memory=mem).run("hi")
        prompt = "\n".join(m.content or "" for m in llm.calls[0] if m.role == "system")
        assert '"Answers in British English" (traces)' in prompt
        assert '"Prefers email" (learned, 0.6)' in prompt and "learn)" not in prompt

        # A file exported by an older release carries the old name; a user's import takes it.
        out = tmp_path / "alice.jsonl"
        mem.export_user("alice", out)
        old_file = tmp_path / "old.jsonl"
        old_file.write_text(out.read_text().replace('"source":"traces"', '"source":"learn"'))
        assert '"learn"' in old_file.read_text()
        target = Memory(f"sqlite:///{tmp_path / 'target.db'}", user_id="alice")
        assert target.import_user(old_file, user_id="alice").facts == 2
        assert {f.fact: f.source for f in target.retrieve()} == sources
        # Bob's fact was never touched by Alice's reads, export or import.
        assert [f.source for f in Memory(any_location, user_id="bob").retrieve()] == ["traces"]
    finally:
        store.close()
