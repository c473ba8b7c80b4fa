"""A user's recalled messages, listed, searched and deleted one at a time, on SQLite,
Postgres and Redis: through :mod:`fastaiagent.facts.messages` and
``fastaiagent memory messages``. A deleted message is gone from recall; the
other user's messages are untouched (issue 49)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from _recalled_sample import ANN, BOB, WordHashEmbedder, recalled, seeded_memory
from fastaiagent.cli import _register, app
from fastaiagent.facts import messages
from fastaiagent.facts.index.embedding_cache import identity_of
from fastaiagent.facts.vectors import text_key

NEWEST_FIRST = [m.content for m in reversed(ANN)]


def _cli(*args: str) -> tuple[int, str]:
    _register()
    result = CliRunner().invoke(app, ["memory", "messages", *args])
    return result.exit_code, result.output


def test_a_users_messages_are_listed_newest_first_paged_and_searched(any_location):
    memory = seeded_memory(any_location)
    store = memory.location
    assert [m.text for m in messages.list_messages(store, "ann")] == NEWEST_FIRST
    assert [m.text for m in messages.list_messages(store, "ann", limit=2, offset=2)] == NEWEST_FIRST[2:]
    assert [m.role for m in messages.list_messages(store, "ann", limit=2)] == ["user", "assistant"]
    assert messages.count_messages(store, "ann") == 3 and messages.count_messages(store, "bob") == 1
    assert messages.search_messages(store, "ann", "Porto")[0].text == ANN[2].content
    assert messages.search_messages(store, "ann", "piano") == []  # bob's word: not ann's
    assert messages.list_messages(store, "ann", project_id="other") == []
    users = {(u.project_id, u.user_id): u.messages for u in messages.message_users(store)}
    assert users == {("", "ann"): 3, ("", "bob"): 1}


def _cached(store: object, text: str) -> dict[str, list[float]]:
    """ann's cached embedding of ``text``, if the index keeps one."""
    index = store.vector_store(32)  # type: ignore[attr-defined]
    return dict(index.cached_embeddings(identity_of(WordHashEmbedder(32)), "user:ann", [text_key(text)]))


def test_deleting_one_message_takes_it_out_of_recall_and_nothing_else(any_location):
    memory = seeded_memory(any_location)
    store = memory.location
    porto, bobs = messages.list_messages(store, "ann")[0], messages.list_messages(store, "bob")[0]
    assert porto.text == ANN[2].content and "Porto" in recalled(memory, "ann", "Where did I move to?")
    assert list(_cached(store, porto.text)) == [text_key(porto.text)]
    assert not messages.delete_message(store, "ann", bobs.id)  # another user's id: nothing
    assert messages.delete_message(store, "ann", porto.id)
    assert not messages.delete_message(store, "ann", porto.id)
    assert "Porto" not in recalled(memory, "ann", "Where did I move to?")
    assert porto.id not in {m.id for m in messages.search_messages(store, "ann", "Porto April job")}
    assert porto.id not in {m.id for m in messages.list_messages(store, "ann")}
    assert _cached(store, porto.text) == {}  # its embedding is not kept either
    assert "Miso" in recalled(memory, "bob", "What is my cat called?")
    assert bobs.id in {m.id for m in messages.list_messages(store, "bob")}
    assert "Biscuit" in recalled(memory, "ann", "What is my dog called?")


def test_bad_requests_are_refused(any_location):
    store = seeded_memory(any_location).location
    for call in (
        lambda: messages.list_messages(store, "*"),
        lambda: messages.list_messages(store, ""),
        lambda: messages.list_messages(store, "ann", limit=-1),
        lambda: messages.search_messages(store, "ann", " "),
        lambda: messages.delete_message(store, "ann", ""),
    ):
        with pytest.raises(ValueError):
            call()


def test_the_command_lists_searches_and_deletes(any_location):
    memory = seeded_memory(any_location)
    code, out = _cli("--user", "ann", "-l", any_location)
    assert code == 0, out
    positions = [out.index(str(text)) for text in NEWEST_FIRST]
    assert positions == sorted(positions) and "messages 1-3 of 3, newest first" in out
    code, out = _cli("--user", "ann", "--limit", "2", "--page", "2", "-l", any_location)
    assert code == 0 and str(ANN[0].content) in out and str(ANN[2].content) not in out, out
    code, out = _cli("--user", "ann", "--search", "Porto", "-l", any_location)
    assert code == 0 and str(ANN[2].content) in out and "Miso" not in out, out
    porto = messages.list_messages(memory.location, "ann")[0].id
    bobs = messages.list_messages(memory.location, "bob")[0].id
    code, out = _cli("--user", "ann", "--delete", bobs, "-l", any_location)
    assert code == 1 and "has no message" in out, out  # bob's message, named as ann's
    code, out = _cli("--user", "ann", "--delete", porto, "-l", any_location)
    assert code == 0 and f"deleted message {porto}" in out, out
    assert "Porto" not in recalled(memory, "ann", "Where did I move to?")
    assert "Miso" in recalled(memory, "bob", "What is my cat called?")
    code, out = _cli("--user", "bob", "-l", any_location)
    assert code == 0 and str(BOB[0].content) in out, out


def test_the_command_refuses_bad_options(any_location):
    for args in (["--user", "*"], ["--user", "ann", "--limit", "0"], ["--user", "ann", "--page", "0"],
                 ["--user", "ann", "--delete", "x", "--search", "y"]):  # fmt: skip
        code, out = _cli(*args, "-l", any_location)
        assert code == 2, (args, out)
