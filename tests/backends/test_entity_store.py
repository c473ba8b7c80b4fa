"""The entities of a user's messages kept beside them on SQLite, Postgres and Redis
(issue 47): every message about an entity is found through its postings, in any
session; forget, one message's delete, export and import cover them; another
user's entities are never touched."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from _recalled_sample import WordHashEmbedder
from fastaiagent import Memory
from fastaiagent.facts import messages
from fastaiagent.facts.entities import ENTITIES_KEY, entity_ids
from fastaiagent.llm.message import AssistantMessage, UserMessage
from fastaiagent.recall.entity_store import entity_candidates, entity_counts, user_entities

ANN_MONDAY = [
    UserMessage("We adopted a puppy and named him Biscuit"),
    AssistantMessage("Congratulations on the new puppy!"),
]
ANN_FRIDAY = [UserMessage("Yesterday Biscuit chewed through my charger cable")]
BOB = [UserMessage("My cat Biscuit sleeps on the piano")]
QUESTION = "What did Biscuit break?"


def _memory(location: str) -> Memory:
    memory = Memory(location, user_id=lambda ctx: ctx.state.user_id, recall="auto", embedder=WordHashEmbedder(32))
    memory.add_history(ANN_MONDAY, user_id="ann", at=[1.0e9, 1.0e9 + 1])
    memory.add_history(ANN_FRIDAY, user_id="ann", at=[1.0e9 + 4 * 86400])  # another session
    memory.add_history(BOB, user_id="bob", at=[1.0e9])
    return memory


def _about(store: Any, user: str, question: str = QUESTION) -> set[str]:
    """The texts of ``user``'s messages the entity side draws in for ``question``."""
    index = store.vector_store(32)
    found = entity_candidates(index, f"user:{user}", question, 10)
    texts = {chunk.id: chunk.text for chunk in index.get([i for i, _ in found.hits])}
    return {texts[i] for i, _ in found.hits}


def test_messages_about_an_entity_are_found_in_every_session_of_that_user_only(any_location: str) -> None:
    store = _memory(any_location).location
    assert _about(store, "ann") == {ANN_MONDAY[0].content, ANN_FRIDAY[0].content}
    assert _about(store, "bob") == {BOB[0].content}  # bob's Biscuit is his own
    assert _about(store, "ann", "How is the weather?") == set()
    stored = {m.text: m for m in messages.list_messages(store, "ann")}
    chunk = store.vector_store(32).get([stored[ANN_FRIDAY[0].content].id])[0]
    assert entity_ids(chunk.metadata) and ENTITIES_KEY in chunk.metadata
    names = {entity.name for entity in user_entities(store, "ann")}
    assert "Biscuit" in names and {e.name for e in user_entities(store, "bob")} == {"Biscuit"}
    assert entity_counts(store)[("", "ann")] == len(names)


def _mentions(store: Any, user: str) -> dict[str, int]:
    return {entity.name: entity.mentions for entity in user_entities(store, user)}


def test_deleting_a_message_takes_its_entity_postings_and_mentions(any_location: str) -> None:
    from fastaiagent.recall.entity_store import delete_message

    store = _memory(any_location).location
    said = {m.text: m.id for m in messages.list_messages(store, "ann")}
    assert _mentions(store, "ann")["Biscuit"] == 2
    assert not delete_message(store, "ann", messages.list_messages(store, "bob")[0].id)  # bob's: nothing
    assert delete_message(store, "ann", said[ANN_FRIDAY[0].content])
    assert _about(store, "ann") == {ANN_MONDAY[0].content}
    assert _mentions(store, "ann")["Biscuit"] == 1
    assert delete_message(store, "ann", said[ANN_MONDAY[0].content])
    assert "Biscuit" not in _mentions(store, "ann") and _about(store, "ann") == set()
    assert _about(store, "bob") == {BOB[0].content} and _mentions(store, "bob") == {"Biscuit": 1}


def test_forgetting_a_user_deletes_their_entities_and_nobody_elses(any_location: str) -> None:
    memory = _memory(any_location)
    store = memory.location
    memory.forget_user("ann")
    assert user_entities(store, "ann") == [] and _about(store, "ann") == set()
    assert ("", "ann") not in entity_counts(store)
    assert _about(store, "bob") == {BOB[0].content}
    assert {e.name for e in user_entities(store, "bob")} == {"Biscuit"}


def test_an_exported_user_keeps_their_entities_elsewhere(
    any_location: str, own_location: Any, tmp_path: Path
) -> None:
    memory = _memory(any_location)
    path = tmp_path / "ann.jsonl"
    memory.export_user("ann", path)
    target = Memory(own_location("sqlite"), user_id=lambda ctx: ctx.state.user_id, recall="auto", embedder=WordHashEmbedder(32))
    target.import_user(path, user_id="ann")
    assert _about(target.location, "ann") == {ANN_MONDAY[0].content, ANN_FRIDAY[0].content}
    before = [(e.name, e.kind) for e in user_entities(memory.location, "ann")]
    assert [(e.name, e.kind) for e in user_entities(target.location, "ann")] == before
    assert user_entities(target.location, "bob") == []  # only ann was exported


def test_postings_of_an_older_analyzer_are_rebuilt_in_the_background(
    any_location: str, monkeypatch: Any
) -> None:
    from fastaiagent.facts import vectors
    from fastaiagent.facts.factory import make_fact_store
    from fastaiagent.facts.index.reindex import reindex_job
    from fastaiagent.kb import bm25

    today = bm25.STOPWORDS
    monkeypatch.setattr(bm25, "STOPWORDS", today | {"biscuit", "cat"})  # the old analyzer drops them
    old = _memory(any_location).location
    assert messages.search_messages(old, "ann", "charger")  # built (version 1)
    monkeypatch.setattr(bm25, "STOPWORDS", today)
    monkeypatch.setattr(vectors, "ANALYZER_VERSION", 2)
    assert messages.search_messages(old, "ann", "biscuit") == []  # old postings: the word is not there

    reopened = make_fact_store(any_location)
    try:
        index = reopened.vector_store(32)
        index.count()  # the first use checks the recorded version
        job = reindex_job(index)
        assert job is not None and job.wait(120) and job.state == "done", job
        found = {m.text for m in messages.search_messages(reopened, "ann", "biscuit")}
        assert {ANN_MONDAY[0].content, ANN_FRIDAY[0].content} <= found  # (the reply: by its context)
        assert [m.text for m in messages.search_messages(reopened, "bob", "cat")] == [BOB[0].content]
        assert messages.count_messages(reopened, "ann") == 3 and messages.count_messages(reopened, "bob") == 1
        assert _about(reopened, "ann") == {ANN_MONDAY[0].content, ANN_FRIDAY[0].content}  # entities kept
    finally:
        reopened.close()
    again = make_fact_store(any_location)  # version 2 recorded: nothing to rebuild
    try:
        index = again.vector_store(32)
        index.count()
        assert reindex_job(index) is None
    finally:
        again.close()


def test_the_memory_page_shows_each_users_entities(any_location: str, tmp_path: Path) -> None:
    from fastapi.testclient import TestClient

    from fastaiagent.ui import create_app, people

    store = _memory(any_location).location
    counts = {row.label: row.entities for row in people.users_page(store).rows}
    assert counts["bob"] == 1 and counts["ann"] == len(user_entities(store, "ann")) >= 1
    biscuit = next(row for row in people.messages_page(store, user_id="ann").entities if row.name == "Biscuit")
    assert biscuit.mentions == 2 and biscuit.kind
    assert [row.name for row in people.messages_page(store, user_id="bob").entities] == ["Biscuit"]
    client = TestClient(create_app(any_location, trace_db=tmp_path / "t.db"), base_url="http://127.0.0.1")
    page = client.get("/memory/messages?user=ann").text
    assert 'id="entities"' in page and "Biscuit" in page
    assert 'class="num entities"' in client.get("/memory/users").text


@pytest.mark.redis
def test_entities_on_a_redis_cluster_are_found_forgotten_and_rebuilt(redis_cluster: Any, monkeypatch: Any) -> None:
    from test_redis_cluster import drop_cluster_prefix

    from _env import unique_name
    from fastaiagent.facts import vectors
    from fastaiagent.facts.factory import make_fact_store
    from fastaiagent.facts.index.reindex import reindex_job

    prefix = unique_name("cluster")
    location = f"{redis_cluster.url}&prefix={prefix}"
    try:
        memory = _memory(location)
        store = memory.location
        assert _about(store, "ann") == {ANN_MONDAY[0].content, ANN_FRIDAY[0].content}
        monkeypatch.setattr(vectors, "ANALYZER_VERSION", 2)
        reopened = make_fact_store(location)
        index = reopened.vector_store(32)
        index.count()
        job = reindex_job(index)
        assert job is not None and job.wait(120) and job.state == "done", job
        assert _about(reopened, "ann") == {ANN_MONDAY[0].content, ANN_FRIDAY[0].content}
        reopened.close()
        memory.forget_user("ann")
        assert user_entities(store, "ann") == [] and _about(store, "ann") == set()
        assert _about(store, "bob") == {BOB[0].content}
    finally:
        drop_cluster_prefix(redis_cluster, prefix)


def test_a_turn_whose_user_stored_nothing_reads_no_book(any_location: str, monkeypatch: Any) -> None:
    store = _memory(any_location).location
    index = store.vector_store(32)
    items, reads = store.item_store(), []
    get = items.get
    monkeypatch.setattr(items, "get", lambda *a, **k: reads.append(a) or get(*a, **k))
    index.search([1.0] * 32, 1, namespace="user:ann")  # a turn's dense search: the namespace checked
    first = entity_candidates(index, "user:ann", QUESTION, 10)
    again = entity_candidates(index, "user:ann", QUESTION, 10)
    assert first == again and first.entities and len(reads) <= 1  # at most the first read
    Memory(store, user_id="ann", recall="auto", embedder=WordHashEmbedder(32)).add_history(
        [UserMessage("Biscuit has a vet appointment on Monday")], user_id="ann", at=[1.0e9 + 9 * 86400]
    )
    index.search([1.0] * 32, 1, namespace="user:ann")
    before = len(reads)
    assert len(entity_candidates(index, "user:ann", QUESTION, 10).hits) == 3
    assert len(reads) == before  # the book this process stored is current: no read


def test_the_command_lists_a_users_entities(any_location: str) -> None:
    from typer.testing import CliRunner

    from fastaiagent.cli import _register, app

    _memory(any_location)
    _register()
    run = CliRunner().invoke(app, ["memory", "messages", "--user", "ann", "--entities", "-l", any_location])
    assert run.exit_code == 0, run.output
    assert "Biscuit" in run.output and "mentions" in run.output
    nobody = CliRunner().invoke(app, ["memory", "messages", "--user", "cy", "--entities", "-l", any_location])
    assert nobody.exit_code == 0 and "no entities" in nobody.output


def test_a_history_imported_again_longer_counts_each_message_once(any_location: str) -> None:
    memory = _memory(any_location)
    store = memory.location
    assert _mentions(store, "ann")["Biscuit"] == 2
    # The Friday session again, one message longer: its first message is written again (a new link)
    longer = [*ANN_FRIDAY, AssistantMessage("Keep cables out of reach; a puppy chews everything.")]
    assert memory.add_history(longer, user_id="ann", at=[1.0e9 + 4 * 86400, 1.0e9 + 4 * 86400 + 5]) == 1
    assert _mentions(store, "ann")["Biscuit"] == 2
    assert _about(store, "ann") == {ANN_MONDAY[0].content, ANN_FRIDAY[0].content}


def test_messages_stored_before_entities_are_marked_by_a_backfill(any_location: str) -> None:
    from fastaiagent.facts.factory import make_fact_store
    from fastaiagent.kb.protocols import Chunk
    from fastaiagent.recall.entity_store import backfill_entities

    store = make_fact_store(any_location)
    try:
        index = store.vector_store(4)
        old = [  # as a release without entities stored them: no metadata["entities"], no book
            Chunk("a", "We adopted a puppy and named him Biscuit", [1.0, 0, 0, 0], {"namespace": "user:ann", "created_at": 1.0}),
            Chunk("b", "Biscuit chewed my charger cable", [0, 1.0, 0, 0], {"namespace": "user:ann", "created_at": 2.0}),
            Chunk("c", "ok thanks", [0, 0, 1.0, 0], {"namespace": "user:ann", "created_at": 3.0}),
            Chunk("d", "My cat Biscuit sleeps all day", [0, 0, 0, 1.0], {"namespace": "user:bob", "created_at": 1.0}),
        ]
        index.add(old)
        assert entity_candidates(index, "user:ann", QUESTION, 10).hits == []
        assert backfill_entities(index, "user:ann") == 2
        assert {i for i, _ in entity_candidates(index, "user:ann", QUESTION, 10).hits} == {"a", "b"}
        assert index.search([0, 1.0, 0, 0], 1, namespace="user:ann")[0].chunk.id == "b"  # its own vector
        assert backfill_entities(index, "user:ann") == 0  # done: nothing counted twice
        assert _mentions(store, "ann") == {"Biscuit": 2} and user_entities(store, "bob") == []
    finally:
        store.close()


def test_what_another_process_stored_is_seen_by_the_next_query(any_location: str) -> None:
    from fastaiagent.facts.factory import make_fact_store

    store = _memory(any_location).location
    index = store.vector_store(32)
    index.search([1.0] * 32, 1, namespace="user:ann")
    assert entity_candidates(index, "user:ann", "how is Lena?", 10).entities == frozenset()  # cached: no Lena
    other = make_fact_store(any_location)  # another process's store objects
    try:
        Memory(other, user_id="ann", recall="auto", embedder=WordHashEmbedder(32)).add_history(
            [UserMessage("I had lunch with my sister Lena today")], user_id="ann", at=[1.0e9 + 8 * 86400]
        )
    finally:
        other.close()
    index.search([1.0] * 32, 1, namespace="user:ann")  # the next turn's search sees their rows
    found = entity_candidates(index, "user:ann", "how is Lena?", 10)
    texts = {c.text for c in index.get([i for i, _ in found.hits])}
    assert texts == {"I had lunch with my sister Lena today"}
    assert _about(store, "ann") == {ANN_MONDAY[0].content, ANN_FRIDAY[0].content}  # theirs kept ours


def test_a_turn_recalls_what_was_said_about_a_pet_in_another_session_in_other_words(
    any_location: str,
) -> None:
    """The entity side in the recall pipeline: "the dog" names Biscuit (a puppy, said
    in Monday's session), so Friday's message about him is recalled though it shares
    no word with the question; bob's Biscuit is not ann's."""
    from dataclasses import dataclass

    from fastaiagent import Agent, RunContext
    from fastaiagent.testing import CannedLLM

    @dataclass
    class Session:
        user_id: str

    memory = _memory(any_location)
    chatter = [UserMessage(f"Note {n}: the quarterly report needs section {n} rewritten") for n in range(30)]
    memory.add_history(chatter, user_id="ann", at=[1.0e9 + 2 * 86400 + n for n in range(30)])
    llm = CannedLLM("ok")
    agent = Agent(name="a", llm=llm, memory=memory)
    agent.run("what did the dog break?", context=RunContext(state=Session("ann")))
    prompt = " ".join(str(m.content) for m in llm.calls[0])
    assert ANN_FRIDAY[0].content in prompt
    assert BOB[0].content not in prompt
