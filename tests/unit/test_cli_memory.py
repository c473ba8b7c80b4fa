"""``fastaiagent memory``: search, show, forget, expire and prune from the shell."""

from __future__ import annotations

import re
import time

import pytest
from typer.testing import CliRunner

from fastaiagent.cli import _register, app
from fastaiagent.facts.fact import SOURCE_CONVERSATION, SOURCE_TRACES
from fastaiagent.learn import Fact, MemoryStore


@pytest.fixture
def cli():  # type: ignore[no-untyped-def]
    _register()
    runner = CliRunner()
    return lambda *args: runner.invoke(app, list(args))


@pytest.fixture
def store(tmp_path) -> MemoryStore:  # type: ignore[no-untyped-def]
    made = MemoryStore(tmp_path / "facts.db")
    now = time.time()
    made.add(Fact("Prefers oat milk", scope="user", scope_id="alice", created_at=now - 30))
    made.add(Fact("Oat allergy: none", scope="user", scope_id="bob", created_at=now - 20))
    made.add(Fact("Old promo OAT10", scope="user", scope_id="alice", created_at=now - 10, valid_to=now - 5))
    return made


def _location(store: MemoryStore) -> str:
    return f"sqlite:///{store.path}"


def test_search_finds_text_across_users_and_hides_expired(cli, store: MemoryStore) -> None:  # type: ignore[no-untyped-def]
    out = cli("memory", "search", "oat", "-l", _location(store), "--subject", "user:*")
    assert out.exit_code == 0, out.output
    assert "Prefers oat milk" in out.output and "Oat allergy" in out.output
    assert "OAT10" not in out.output
    expired = cli("memory", "search", "oat", "-l", _location(store), "--expired")
    assert "Old promo OAT10" in expired.output and "(expired)" in expired.output
    alice = cli("memory", "search", "oat", "-l", _location(store), "--subject", "user:alice")
    assert "Prefers oat milk" in alice.output and "Oat allergy" not in alice.output


def test_show_prints_the_timeline(cli, store: MemoryStore) -> None:  # type: ignore[no-untyped-def]
    old = store.find_active("user", "alice", "", "Prefers oat milk")
    assert old is not None and old.id is not None
    new = store.update(Fact("Prefers soy milk", scope="user", scope_id="alice"), old.id)
    out = cli("memory", "show", str(old.id), "-l", _location(store))
    assert out.exit_code == 0, out.output
    assert "user:alice" in out.output and "2 version(s)" in out.output
    assert out.output.index(f"#{new}  Prefers soy milk") < out.output.index(f"#{old.id}  Prefers oat milk")
    assert "superseded" in out.output
    missing = cli("memory", "show", "987654", "-l", _location(store))
    assert missing.exit_code == 1 and "no fact #987654" in missing.output


def test_forget_and_expire_are_scoped_to_the_subject(cli, store: MemoryStore) -> None:  # type: ignore[no-untyped-def]
    bobs = store.find_active("user", "bob", "", "Oat allergy: none")
    assert bobs is not None
    wrong = cli("memory", "forget", str(bobs.id), "--subject", "user:alice", "-l", _location(store))
    assert wrong.exit_code == 1 and "has no fact" in wrong.output
    assert store.get(bobs.id or 0) is not None
    refused = cli("memory", "expire", str(bobs.id), "--subject", "user:alice", "-l", _location(store))
    assert refused.exit_code == 1 and store.list_active("user", "bob") != []
    ends = cli("memory", "expire", str(bobs.id), "--subject", "user:bob", "-l", _location(store))
    assert ends.exit_code == 0, ends.output
    assert store.list_active("user", "bob") == []
    gone = cli("memory", "forget", str(bobs.id), "--subject", "user:bob", "-l", _location(store))
    assert gone.exit_code == 0 and store.get(bobs.id or 0) is None
    bad = cli("memory", "expire", "1", "--subject", "user:alice", "--at", "friday", "-l", _location(store))
    assert bad.exit_code == 2 and "not an ISO 8601 time" in bad.output


def test_prune_removes_only_what_ended_long_enough_ago(cli, store: MemoryStore) -> None:  # type: ignore[no-untyped-def]
    long_ago = time.time() - 40 * 86_400
    store.add(Fact("Ancient promo", scope="user", scope_id="alice", created_at=long_ago - 10, valid_to=long_ago))
    out = cli("memory", "prune", "--older-than", "30d", "-l", _location(store))
    assert out.exit_code == 0 and "pruned 1 fact(s)" in out.output
    assert [f.fact for f in store.browse(include_expired=True)] == [
        "Old promo OAT10",
        "Oat allergy: none",
        "Prefers oat milk",
    ]
    bad = cli("memory", "prune", "--older-than", "soon", "-l", _location(store))
    assert bad.exit_code == 2 and "use a number and a unit" in bad.output


def test_project_id_is_the_flag_everywhere_and_project_still_works(cli, store: MemoryStore) -> None:  # type: ignore[no-untyped-def]
    store.add(Fact("Tenant B prefers tea", scope="user", scope_id="alice", project_id="b"))
    for flag in ("--project-id", "--project"):
        out = cli("memory", "search", "", "-l", _location(store), flag, "b")
        assert out.exit_code == 0, out.output
        assert "Tenant B prefers tea" in out.output and "oat" not in out.output.lower()
        assert ("use --project-id" in out.output) == (flag == "--project")  # the old one says so
    for command in (["memory", "search"], ["memory", "forget"], ["memory", "prune"], ["learn"],
                    ["mcp"], ["plane", "serve"]):  # fmt: skip
        help_text = cli(*command, "--help").output
        assert "--project-id" in help_text, command
        assert not re.search(r"--project\b(?!-)", help_text), command


def test_forget_user_with_yes_forgets_everything_of_theirs_and_no_one_elses(cli, store: MemoryStore) -> None:  # type: ignore[no-untyped-def]
    old = store.find_active("user", "alice", "", "Prefers oat milk")
    assert old is not None and old.id is not None
    store.update(Fact("Prefers soy milk", scope="user", scope_id="alice"), old.id)  # history too
    tenant = store.add(Fact("Tenant B prefers tea", scope="user", scope_id="alice", project_id="b"))
    out = cli("memory", "forget", "--user", "alice", "--yes", "-l", _location(store))
    assert out.exit_code == 0, out.output
    assert "forgot user 'alice': 3 facts, 0 fact vectors, 0 recalled messages, 0 stored windows" in out.output  # two versions and the expired promo
    assert store.browse(scope="user", scope_id="alice", project_id="", include_superseded=True,
                        include_expired=True) == []  # fmt: skip
    assert store.list_active("user", "bob") != [] and store.get(tenant) is not None
    in_b = cli("memory", "forget", "--user", "alice", "-y", "--project-id", "b", "-l", _location(store))
    assert in_b.exit_code == 0 and "in project 'b': 1 fact, " in in_b.output
    assert store.get(tenant) is None and store.list_active("user", "bob") != []


def test_forget_user_without_yes_asks_and_refuses_without_a_terminal(cli, store: MemoryStore, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import fastaiagent.cli.memory as memory_cli

    refused = cli("memory", "forget", "--user", "alice", "-l", _location(store))
    assert refused.exit_code == 2 and "pass --yes" in refused.output
    assert store.list_active("user", "alice") != []
    monkeypatch.setattr(memory_cli, "stdin_is_terminal", lambda: True)
    runner = CliRunner()
    declined = runner.invoke(app, ["memory", "forget", "--user", "alice", "-l", _location(store)], input="n\n")
    assert declined.exit_code == 1 and "Forget everything of user 'alice'" in declined.output
    assert "nothing forgotten" in declined.output and store.list_active("user", "alice") != []
    agreed = runner.invoke(app, ["memory", "forget", "--user", "alice", "-l", _location(store)], input="y\n")
    assert agreed.exit_code == 0 and "2 facts, " in agreed.output
    assert store.list_active("user", "alice") == [] and store.list_active("user", "bob") != []


def test_forget_takes_a_fact_or_a_user_not_both(cli, store: MemoryStore) -> None:  # type: ignore[no-untyped-def]
    for args in (["1", "--user", "alice"], ["--subject", "user:bob", "--user", "alice"], [],
                 ["1"], ["--user", "*"], ["--user", " "]):  # fmt: skip
        out = cli("memory", "forget", *args, "--yes", "-l", _location(store))
        assert out.exit_code == 2, (args, out.output)
    assert len(store.browse(include_expired=True)) == 3  # nothing was deleted
    assert "--user" in cli("memory", "forget", "--help").output


def test_search_and_show_name_the_source(cli, store: MemoryStore) -> None:  # type: ignore[no-untyped-def]
    said = store.add(Fact("Has a beagle", scope="user", scope_id="carol", source=SOURCE_CONVERSATION,
                          source_trace_id="ab" * 16))  # fmt: skip
    store.add(Fact("Likes short answers", scope="user", scope_id="carol", source=SOURCE_TRACES))
    out = cli("memory", "search", "", "--subject", "user:carol", "-l", _location(store))
    assert out.exit_code == 0, out.output
    lines = out.output.splitlines()
    assert "trace" in lines[0]
    beagle = next(line for line in lines if "Has a beagle" in line)
    assert "learned" in beagle and "ab" * 16 in beagle
    assert "traces" in next(line for line in lines if "Likes short answers" in line)
    assert "manual" in cli("memory", "search", "", "--subject", "user:bob", "-l", _location(store)).output
    shown = cli("memory", "show", str(said), "-l", _location(store))
    assert f"source learned (trace {'ab' * 16})" in shown.output
    listed = cli("learn", "list", "--subject", "user:carol", "-l", _location(store))
    assert "learned (trace abababab)" in listed.output and "traces" in listed.output
