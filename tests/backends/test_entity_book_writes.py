"""Writes of a user's entity book on SQLite, Postgres, Redis and a Redis Cluster:
a message stored again under its own id counts once; writers storing one
user's messages at the same moment (threads with stores of their own, two
processes) lose none of each other's entities or counts; facts that
``Memory(learn=...)`` extracts feed the same book, so recall links them."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from _entity_writer import said

from _recalled_sample import WordHashEmbedder
from fastaiagent import Memory
from fastaiagent.facts import messages
from fastaiagent.facts.factory import make_fact_store
from fastaiagent.kb.protocols import Chunk
from fastaiagent.llm.message import Message, UserMessage
from fastaiagent.recall.entity_store import (
    add_with_entities,
    delete_message,
    entity_candidates,
    read_facts,
    user_entities,
)
from fastaiagent.testing import FunctionLLM

NAMES = [
    "Amara",
    "Bruno",
    "Celine",
    "Dario",
    "Elif",
    "Farah",
    "Goran",
    "Hana",
    "Ivo",
    "Jonas",
    "Kemal",
    "Lotte",
    "Mateo",
    "Nadia",
    "Oskar",
    "Priya",
    "Quentin",
    "Rosa",
    "Stefan",
    "Tariq",
    "Ursula",
    "Viktor",
    "Wanda",
    "Xavier",
    "Yusuf",
    "Zora",
    "Anika",
    "Bastian",
    "Clara",
    "Dmitri",
    "Esther",
    "Felix",
    "Greta",
    "Henrik",
    "Ines",
    "Jakob",
    "Kira",
    "Leon",
    "Mira",
    "Nils",
]


def _mentions(store: Any, user: str) -> dict[str, int]:
    return {entity.name: entity.mentions for entity in user_entities(store, user)}


def _chunk(message_id: str, text: str, user: str = "ann") -> Chunk:
    return Chunk(
        message_id, text, [1.0, 0.0, 0.0, 0.0], {"namespace": f"user:{user}", "created_at": 1.0}
    )


def test_a_message_stored_again_under_its_id_counts_once(any_location: str) -> None:
    store = make_fact_store(any_location)
    try:
        index = store.vector_store(4)
        first = [
            _chunk("m1", "We adopted a puppy and named him Biscuit"),
            _chunk("m2", "Yesterday Biscuit chewed my cable"),
        ]
        add_with_entities(index, first)
        assert _mentions(store, "ann") == {"Biscuit": 2}
        for _ in range(
            3
        ):  # a retry, a replay, an import of the same messages: fresh objects, same ids
            add_with_entities(
                index,
                [_chunk("m2", "Yesterday Biscuit chewed my cable"), _chunk("m1", first[0].text)],
            )
        add_with_entities(
            index, [_chunk("m3", "Lunch with Lena"), _chunk("m3", "Lunch with Lena")]
        )  # twice in a batch
        assert _mentions(store, "ann") == {"Biscuit": 2, "Lena": 1}
        again = index.get(["m1", "m2"])
        assert all(
            chunk.metadata["entities"] == ["biscuit"] for chunk in again
        )  # the ids it counted, kept
        add_with_entities(index, [_chunk("b1", "My cat Biscuit sleeps all day", user="bob")])
        assert delete_message(store, "ann", "m2") and _mentions(store, "ann") == {
            "Biscuit": 1,
            "Lena": 1,
        }
        assert not delete_message(store, "ann", "m2")  # gone: nothing released twice
        assert delete_message(store, "ann", "m1") and _mentions(store, "ann") == {"Lena": 1}
        add_with_entities(
            index, [_chunk("m1", "Today Biscuit is back from the vet")]
        )  # a new message under a freed id
        assert _mentions(store, "ann") == {"Biscuit": 1, "Lena": 1}
        assert _mentions(store, "bob") == {"Biscuit": 1}
    finally:
        store.close()


def test_the_same_history_imported_by_two_memories_at_once_counts_each_message_once(
    any_location: str,
) -> None:
    history = [UserMessage(said(name)) for name in NAMES[:8]]
    times = [1.0e9 + n for n in range(len(history))]
    start = threading.Barrier(2)
    stores = [make_fact_store(any_location) for _ in range(2)]
    failures: list[BaseException] = []

    def load(store: Any) -> None:
        try:
            memory = Memory(store, user_id="ann", recall="auto", embedder=WordHashEmbedder(32))
            start.wait()
            for first in range(
                0, len(history), 2
            ):  # a write per two messages: many chances to race
                memory.add_history(
                    history[first : first + 2], user_id="ann", at=times[first : first + 2]
                )
        except BaseException as exc:  # reported by the main thread
            failures.append(exc)

    try:
        threads = [threading.Thread(target=load, args=(store,)) for store in stores]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert not failures, failures
        assert _mentions(stores[0], "ann") == {"Biscuit": 8, **{name: 1 for name in NAMES[:8]}}
        assert messages.count_messages(stores[0], "ann") == 8
    finally:
        for store in stores:
            store.close()


def test_writers_with_stores_of_their_own_lose_no_entity(any_location: str) -> None:
    """Four threads, each with its own store objects and Memory (what two processes
    are to the database), store one user's messages at once, one write each."""
    shares = [NAMES[n::4] for n in range(4)]
    stores = [make_fact_store(any_location) for _ in shares]
    start = threading.Barrier(len(shares))
    failures: list[BaseException] = []

    def write(store: Any, names: list[str], lane: int) -> None:
        try:
            memory = Memory(store, user_id="ann", recall="auto", embedder=WordHashEmbedder(32))
            start.wait()
            for n, name in enumerate(names):
                memory.add_history(
                    [UserMessage(said(name))], user_id="ann", at=[1.0e9 + 100 * lane + n]
                )
        except BaseException as exc:
            failures.append(exc)

    try:
        threads = [
            threading.Thread(target=write, args=(s, names, n))
            for n, (s, names) in enumerate(zip(stores, shares, strict=True))
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert not failures, failures
        assert _mentions(stores[0], "ann") == {"Biscuit": len(NAMES), **{name: 1 for name in NAMES}}
        index = stores[1].vector_store(32)  # and every message is found through its entity
        found = entity_candidates(index, "user:ann", "How is Biscuit?", 100)
        assert len(found.hits) == len(NAMES)
    finally:
        for store in stores:
            store.close()


def test_two_processes_storing_one_users_messages_lose_no_entity(
    any_location: str, tmp_path: Path
) -> None:
    start = tmp_path / "start"
    shares = [NAMES[0::2], NAMES[1::2]]
    writer = Path(__file__).parent / "_entity_writer.py"
    command = [sys.executable, str(writer), any_location, "ann", str(start)]
    pipes: dict[str, Any] = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True}
    children = [subprocess.Popen([*command, *names], **pipes) for names in shares]
    try:
        start.touch()
        outputs = [child.communicate(timeout=300) for child in children]
    finally:
        for child in children:
            child.kill()
    for child, (out, err) in zip(children, outputs, strict=True):
        assert child.returncode == 0, err[-2000:]
        assert out.strip() == str(len(NAMES) // 2)
    store = make_fact_store(any_location)
    try:
        assert _mentions(store, "ann") == {"Biscuit": len(NAMES), **{name: 1 for name in NAMES}}
    finally:
        store.close()


def _extractor(facts: dict[str, str]) -> FunctionLLM:
    """A deterministic fact extractor: the fact ``facts`` gives a message's text."""

    def reply(messages_: list[Message]) -> str:
        body = messages_[-1].content or ""
        if "<<<\n" not in body:
            return "ok"  # a chat turn
        told = body.split("<<<\n", 1)[1].rsplit("\n>>>", 1)[0].strip()
        return json.dumps({"facts": [{"fact": facts[told]}] if told in facts else []})

    return FunctionLLM(reply)


SISTER = "My sister just started as a nurse at the children's hospital"
QUESTION = "What does Lena do for work?"


def _about(store: Any, user: str, question: str) -> set[str]:
    index = store.vector_store(32)
    found = entity_candidates(index, f"user:{user}", question, 10)
    return {chunk.text for chunk in index.get([i for i, _ in found.hits])}


def test_a_learned_fact_links_a_name_to_what_the_user_said_about_them(any_location: str) -> None:
    """ "My sister" said in one session; "Lena" known only from a fact learned in
    another ("The user's sister Lena lives in Porto", from a message that never
    names her): a question about Lena draws in the sister's message."""
    from fastaiagent import Agent, RunContext

    said_later = "She moved to Porto last spring"
    llm = _extractor({said_later: "The user's sister Lena lives in Porto"})
    memory = Memory(
        any_location, user_id=lambda ctx: ctx.state, recall="auto", embedder=WordHashEmbedder(32),
        learn=llm, learn_in_background=False,
    )  # fmt: skip
    memory.add_history([UserMessage(SISTER)], user_id="ann", at=[1.0e9])
    memory.add_history([UserMessage(SISTER)], user_id="bob", at=[1.0e9])
    store = memory.location
    assert _about(store, "ann", QUESTION) == set()  # nothing names Lena yet
    Agent(name="a", llm=llm, memory=memory).run(said_later, context=RunContext(state="ann"))
    memory.flush()
    assert [f.fact for f in memory.retrieve(tier="user", id="ann")] == [
        "The user's sister Lena lives in Porto"
    ]
    assert SISTER in _about(store, "ann", QUESTION)
    lena = next(e for e in user_entities(store, "ann") if e.name == "Lena")
    assert "sister" in lena.descriptions
    assert _about(store, "bob", QUESTION) == set()  # bob's sister is not ann's Lena
    assert "Lena" not in {e.name for e in user_entities(store, "bob")}
    before = _mentions(store, "ann")
    facts = [(f.id, f.fact) for f in memory.retrieve(tier="user", id="ann")]
    assert not read_facts(store, "ann", facts)  # read already: counted once
    assert _mentions(store, "ann") == before


@pytest.mark.redis
def test_book_writes_on_a_redis_cluster_count_once_and_lose_nothing(redis_cluster: Any) -> None:
    from test_redis_cluster import drop_cluster_prefix

    from _env import unique_name

    prefix = unique_name("cluster")
    location = f"{redis_cluster.url}&prefix={prefix}"
    stores = [make_fact_store(location) for _ in range(2)]
    try:
        index = stores[0].vector_store(4)
        add_with_entities(index, [_chunk("m1", "Yesterday Biscuit chewed my cable")])
        add_with_entities(index, [_chunk("m1", "Yesterday Biscuit chewed my cable")])
        assert _mentions(stores[0], "ann") == {"Biscuit": 1}
        start = threading.Barrier(2)

        def write(store: Any, names: list[str]) -> None:
            start.wait()
            for name in names:
                add_with_entities(store.vector_store(4), [_chunk(f"n-{name}", said(name))])

        threads = [
            threading.Thread(target=write, args=(s, NAMES[n::2][:10])) for n, s in enumerate(stores)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        expected = {"Biscuit": 21, **{name: 1 for name in NAMES[0::2][:10] + NAMES[1::2][:10]}}
        assert _mentions(stores[1], "ann") == expected
        stores[0].vector_store(4).delete_namespace("user:ann")  # a forget: book, revision and marks
        assert user_entities(stores[0], "ann") == []
        add_with_entities(index, [_chunk("m1", "Yesterday Biscuit chewed my cable")])
        assert _mentions(stores[0], "ann") == {"Biscuit": 1}  # its mark went with the forget
    finally:
        for store in stores:
            store.close()
        drop_cluster_prefix(redis_cluster, prefix)
