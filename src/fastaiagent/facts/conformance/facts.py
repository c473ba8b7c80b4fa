"""The shared FactStore conformance suite, importable by anyone's tests.

Subclass :class:`FactStoreConformance` in a test module and override the
``store`` fixture so it yields a fresh, empty store per test::

    import pytest
    from fastaiagent.facts.conformance import FactStoreConformance

    class TestMyStore(FactStoreConformance):
        @pytest.fixture
        def store(self):
            s = MyStore(...)
            yield s
            s.close()

Every ``test_*`` method then runs against your store: idempotent add (also
from 16 threads and 4 processes at once), normalisation, newest-first reads,
limits and ``offset`` pages, ``find_active`` by normalised text, supersede
rules and history, transactional update, scoped delete (also of a subject
larger than one delete step, and ``"*"`` over many subjects, with exact
counts; ``fact=`` removes every version of a text, history too) and prune, browse/subjects, the empty-id and ``"*"`` rules, project
isolation, bad input, validity and "as of" reads (``validity.py``), and a hypothesis state machine that checks random
operations on one subject never touch another. Optional hooks add fault
tests: override :meth:`break_connections` and :meth:`unreachable_store`.

Needs ``pytest`` and ``hypothesis`` (the ``dev`` extra).
"""

from __future__ import annotations

import multiprocessing
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from fastaiagent.facts.conformance.validity import ValidityConformance
from fastaiagent.facts.fact import SOURCE_CONVERSATION, Fact
from fastaiagent.facts.scoping import MAX_FACT_CHARS, normalize_text
from fastaiagent.facts.store import DELETE_BATCH, FactStore

__all__ = ["FactStoreConformance"]

# Text and ids that break naive SQL, Redis key or glob handling.
NASTY_TEXTS = (
    "Robert'); DROP TABLE learned_memory;--",
    "100% of * and ? and [a-z] and \\ backslash",
    "quotes \" and ' and `ticks`",
    "ключ: значение — 日本語のテキスト 🎉 مرحبا",
    "line one\nline two\ttabbed",
    "{json: true} $1 %s %(name)s",
)
NASTY_IDS = ("a:b", "a", "b:c", "a*", "user:*", "%3A", "x%y", "日本", "'; --", "{tag}")


def _refuses_bad_page(store: FactStore, name: str) -> None:
    """``list_active`` refuses a negative ``name`` (``limit`` or ``offset``) and one
    that is not an int (a float, a numeric string, a bool)."""
    negative: dict[str, Any] = {name: -1}
    with pytest.raises(ValueError, match=f"{name} must be >= 0"):
        store.list_active("user", "alice", **negative)
    for bad in (1.5, "3", True):
        page: dict[str, Any] = {name: bad}
        with pytest.raises(TypeError, match=f"{name} must be an int"):
            store.list_active("user", "alice", **page)


def _user(text: str, scope_id: str = "alice", **kw: Any) -> Fact:
    return Fact(text, scope="user", scope_id=scope_id, **kw)


def _texts(facts: list[Fact]) -> list[str]:
    return [f.fact for f in facts]


def _add_in_child(store: FactStore, fact: Fact, barrier: Any, out: Any) -> None:
    """Run in a forked process: wait for the others, then add the same fact."""
    try:
        barrier.wait(timeout=30)
        out.put(("ok", store.add(fact)))
    except BaseException as exc:  # report, don't hang the parent
        out.put(("error", repr(exc)))


class FactStoreConformance(ValidityConformance):
    """Base class of the conformance tests; override the ``store`` fixture
    (the time tests come from :class:`ValidityConformance`)."""

    #: examples the tenant-isolation state machine runs (keep it quick)
    state_machine_examples = 12
    state_machine_steps = 14

    @pytest.fixture
    def store(self) -> Iterator[FactStore]:
        """A fresh, empty store; subclasses must override this fixture."""
        raise NotImplementedError("override the `store` fixture in your test class")
        yield  # pragma: no cover

    def break_connections(self, store: FactStore) -> None:
        """Kill the store's server connections (e.g. pg_terminate_backend).
        Override to enable :meth:`test_reconnects_after_connections_are_killed`."""
        pytest.skip("this backend has no connection-fault hook")

    def unreachable_store(self) -> FactStore:
        """A store pointed at a server that is not there. Override to enable
        :meth:`test_unreachable_server_raises_connection_error`."""
        pytest.skip("this backend has no unreachable-server hook")

    # -- add, get, idempotency ---------------------------------------------

    def test_add_returns_int_id_and_get_round_trips(self, store: FactStore) -> None:
        fact = Fact(
            "Prefers email",
            scope="user",
            scope_id="alice",
            project_id="p1",
            confidence=0.6,
            source=SOURCE_CONVERSATION,
            source_trace_id="trace-1",
            metadata={"k": [1, "two"], "n": None},
        )
        before = time.time()
        fact_id = store.add(fact)
        assert isinstance(fact_id, int) and not isinstance(fact_id, bool)
        got = store.get(fact_id)
        assert got is not None
        assert (got.id, got.fact, got.scope, got.scope_id, got.project_id) == (
            fact_id,
            "Prefers email",
            "user",
            "alice",
            "p1",
        )
        assert got.confidence == pytest.approx(0.6)
        assert (got.source, got.source_trace_id) == (SOURCE_CONVERSATION, "trace-1")
        assert got.metadata == {"k": [1, "two"], "n": None}
        assert got.superseded_by is None and got.active
        assert before - 1 <= got.created_at <= time.time() + 1

    def test_defaults_are_manual_confidence_one_no_trace(self, store: FactStore) -> None:
        got = store.get(store.add(_user("Likes tea")))
        assert got is not None
        assert (got.confidence, got.source, got.source_trace_id) == (1.0, "manual", None)
        assert got.source_label == "manual"

    def test_get_missing_is_none_and_bad_id_is_type_error(self, store: FactStore) -> None:
        assert store.get(987_654_321) is None
        with pytest.raises(TypeError):
            store.get("1")  # type: ignore[arg-type]

    def test_add_is_idempotent_and_normalised(self, store: FactStore) -> None:
        first = store.add(_user("Prefers email"))
        assert store.add(_user("Prefers email")) == first
        assert store.add(_user("  prefers   EMAIL ")) == first
        assert store.add(_user("Prefers\temail\n")) == first
        assert _texts(store.list_active("user", "alice")) == ["Prefers email"]

    def test_same_text_in_other_subjects_is_a_separate_fact(self, store: FactStore) -> None:
        ids = {
            store.add(_user("Likes jazz", "alice")),
            store.add(_user("Likes jazz", "bob")),
            store.add(_user("Likes jazz", "alice", project_id="other")),
            store.add(Fact("Likes jazz", scope="project", scope_id="alice")),
            store.add(Fact("Likes jazz", scope="agent", scope_id="alice")),
        }
        assert len(ids) == 5

    # -- reads ---------------------------------------------------------------

    def test_list_active_is_newest_first_with_limit(self, store: FactStore) -> None:
        ids = [store.add(_user(f"fact {i}")) for i in range(7)]
        newest_first = list(reversed(ids))
        assert [f.id for f in store.list_active("user", "alice", limit=None)] == newest_first
        assert [f.id for f in store.list_active("user", "alice", limit=3)] == newest_first[:3]
        assert [f.id for f in store.list_active("user", "alice")] == newest_first  # default 50
        assert store.list_active("user", "alice", limit=0) == []
        _refuses_bad_page(store, "limit")

    def test_list_active_pages_with_offset(self, store: FactStore) -> None:
        ids = [store.add(_user(f"fact {i}")) for i in range(7)]
        store.update(_user("replacement"), ids[3])
        expected = [f.id for f in store.list_active("user", "alice", limit=None)]
        assert len(expected) == 7
        pages = [store.list_active("user", "alice", limit=3, offset=o) for o in (0, 3, 6, 9)]
        assert [len(p) for p in pages] == [3, 3, 1, 0]
        assert [f.id for page in pages for f in page] == expected
        assert [f.id for f in store.list_active("user", "alice", limit=None, offset=5)] == expected[5:]
        store.add(_user("bob", "bob"))
        everyone = [f.id for f in store.list_active("user", "*", limit=None)]
        assert [f.id for f in store.list_active("user", "*", limit=2, offset=1)] == everyone[1:3]
        _refuses_bad_page(store, "offset")

    def test_find_active_by_normalised_text(self, store: FactStore) -> None:
        old = store.add(_user("Prefers email", metadata={"k": 1}))
        found = store.find_active("user", "alice", "", "  prefers   EMAIL ")
        assert found is not None and found == store.get(old)
        new = store.update(_user("Prefers Slack"), old)
        assert store.find_active("user", "alice", "", "Prefers email") is None  # superseded
        assert store.find_active("user", "alice", "", "prefers slack").id == new  # type: ignore[union-attr]
        store.add(_user("Prefers Slack", "bob"))
        store.add(_user("Prefers Slack", project_id="p2"))
        assert store.find_active("user", "alice", "p2", "Prefers Slack").id != new  # type: ignore[union-attr]
        assert store.find_active("user", "carol", "", "Prefers Slack") is None
        assert store.find_active("user", "*", "", "Prefers Slack") is None  # an id, not a wildcard
        assert store.find_active("user", "", "", "Prefers Slack") is None
        assert store.find_active("agent", "alice", "", "Prefers Slack") is None
        assert store.find_active("user", "alice", "", "   ") is None
        with pytest.raises(ValueError, match="unknown scope"):
            store.find_active("team", "alice", "", "x")
        with pytest.raises(TypeError):
            store.find_active("user", "alice", "", None)  # type: ignore[arg-type]
        with pytest.raises(TypeError):
            store.find_active("user", None, "", "x")  # type: ignore[arg-type]

    def test_limit_n_returns_n_when_n_active_exist(self, store: FactStore) -> None:
        """Superseded and deleted facts between active ones never shorten a page."""
        ids = [store.add(_user(f"fact {i}")) for i in range(12)]
        for i in range(1, 12, 2):
            store.update(_user(f"replacement {i}"), ids[i])
        store.delete("user", "alice", fact="replacement 11")
        store.delete("user", "alice", fact_id=ids[0])
        active = store.list_active("user", "alice", limit=None)
        assert len(active) == 10
        for n in (1, 4, 10):
            assert len(store.list_active("user", "alice", limit=n)) == n
        assert len(store.list_active("user", "alice", limit=11)) == 10

    def test_newest_first_uses_created_at(self, store: FactStore) -> None:
        now = time.time()
        store.add(_user("older", created_at=now - 100))
        store.add(_user("newest", created_at=now))
        store.add(_user("middle", created_at=now - 50))
        assert _texts(store.list_active("user", "alice")) == ["newest", "middle", "older"]

    def test_empty_id_reads_nothing_at_user_and_project_scope(self, store: FactStore) -> None:
        store.add(_user("alice fact", "alice"))
        store.add(Fact("project fact", scope="project", scope_id="p"))
        assert store.list_active("user", "") == []
        assert store.list_active("project", "") == []

    def test_star_reads_every_subject_of_the_scope(self, store: FactStore) -> None:
        store.add(_user("a1", "alice"))
        store.add(_user("b1", "bob"))
        store.add(Fact("g1", scope="agent", scope_id="support"))
        store.add(_user("other project", "carol", project_id="p2"))
        assert sorted(_texts(store.list_active("user", "*"))) == ["a1", "b1"]
        assert _texts(store.list_active("user", "*", "p2")) == ["other project"]
        assert _texts(store.list_active("user", "*", limit=1)) == ["b1"]

    def test_agent_scope_empty_id_reads_every_agent(self, store: FactStore) -> None:
        store.add(Fact("support truth", scope="agent", scope_id="support"))
        store.add(Fact("sales truth", scope="agent", scope_id="sales"))
        store.add(Fact("unnamed truth", scope="agent", scope_id=""))
        store.add(_user("user fact"))
        assert sorted(_texts(store.list_active("agent", ""))) == [
            "sales truth",
            "support truth",
            "unnamed truth",
        ]
        assert _texts(store.list_active("agent", "support")) == ["support truth"]

    def test_project_id_partitions_exactly(self, store: FactStore) -> None:
        store.add(_user("in default"))
        store.add(_user("in p1", project_id="p1"))
        store.add(_user("in p10", project_id="p10"))
        assert _texts(store.list_active("user", "alice")) == ["in default"]
        assert _texts(store.list_active("user", "alice", "p1")) == ["in p1"]
        assert _texts(store.list_active("user", "alice", "p")) == []
        assert store.delete("user", "alice", "p1") == 1
        assert _texts(store.list_active("user", "alice", "p10")) == ["in p10"]
        assert _texts(store.list_active("user", "alice")) == ["in default"]

    # -- supersede and update -------------------------------------------------

    def test_supersede_keeps_history(self, store: FactStore) -> None:
        old = store.add(_user("Prefers email"))
        new = store.add(_user("Prefers Slack"))
        store.supersede(old, new)
        assert _texts(store.list_active("user", "alice")) == ["Prefers Slack"]
        kept = store.get(old)
        assert kept is not None and kept.superseded_by == new and not kept.active
        store.supersede(old, new)  # repeating the same supersede is harmless
        assert store.get(old).superseded_by == new  # type: ignore[union-attr]

    def test_supersede_refuses_self_missing_and_cycles(self, store: FactStore) -> None:
        a = store.add(_user("A"))
        b = store.add(_user("B"))
        c = store.add(_user("C"))
        with pytest.raises(ValueError):
            store.supersede(a, a)
        with pytest.raises(KeyError):
            store.supersede(a, 987_654_321)
        with pytest.raises(KeyError):
            store.supersede(987_654_321, a)
        store.supersede(a, b)
        with pytest.raises(ValueError):  # b -> a would close a cycle (a is superseded)
            store.supersede(b, a)
        with pytest.raises(ValueError):  # a already replaced by b
            store.supersede(a, c)
        assert _texts(store.list_active("user", "alice")) == ["C", "B"]

    def test_supersede_refuses_other_subjects(self, store: FactStore) -> None:
        """A fact can never replace another user's, another project's or a global fact."""
        mine = store.add(_user("mine", "alice"))
        others = [
            store.add(_user("bob's", "bob")),
            store.add(_user("alice in p2", "alice", project_id="p2")),
            store.add(Fact("global", scope="agent", scope_id="alice")),
            store.add(Fact("project", scope="project", scope_id="alice")),
        ]
        for other in others:
            with pytest.raises(ValueError):
                store.supersede(other, mine)
            with pytest.raises(ValueError):
                store.supersede(mine, other)
            with pytest.raises(ValueError):
                store.update(_user("sneaky", "alice"), other)
            assert store.get(other).active  # type: ignore[union-attr]
        assert _texts(store.list_active("user", "alice")) == ["mine"]

    def test_update_is_transactional(self, store: FactStore) -> None:
        """A refused update writes nothing: the new text does not appear on its own."""
        bob = store.add(_user("bob's", "bob"))
        with pytest.raises(KeyError):
            store.update(_user("new text"), 987_654_321)
        with pytest.raises(ValueError):
            store.update(_user("new text"), bob)
        assert store.list_active("user", "alice") == []
        assert _texts(store.list_active("user", "bob")) == ["bob's"]

    def test_update_supersedes_and_returns_new_id(self, store: FactStore) -> None:
        old = store.add(_user("Prefers email"))
        new = store.update(_user("Prefers Slack"), old)
        assert new != old
        assert [f.id for f in store.list_active("user", "alice")] == [new]
        assert store.get(old).superseded_by == new  # type: ignore[union-attr]

    def test_h1_update_there_and_back_leaves_one_active_latest(self, store: FactStore) -> None:
        a = store.add(_user("Prefers email"))
        b = store.update(_user("Prefers Slack"), a)
        a2 = store.update(_user("Prefers email"), b)
        active = store.list_active("user", "alice")
        assert [f.id for f in active] == [a2]
        assert active[0].fact == "Prefers email"
        for fact_id in (a, b):  # history never disappears
            assert store.get(fact_id) is not None
        assert store.get(b).superseded_by == a2  # type: ignore[union-attr]

    def test_h2_update_to_same_text_keeps_the_fact(self, store: FactStore) -> None:
        a = store.add(_user("Prefers email"))
        assert store.update(_user("prefers  EMAIL"), a) == a
        assert [f.id for f in store.list_active("user", "alice")] == [a]
        assert store.get(a).active  # type: ignore[union-attr]

    def test_h3_readding_a_superseded_text_makes_it_active(self, store: FactStore) -> None:
        a = store.add(_user("Prefers email"))
        store.update(_user("Prefers Slack"), a)
        again = store.add(_user("Prefers email"))
        assert again in [f.id for f in store.list_active("user", "alice")]
        assert store.get(again).active  # type: ignore[union-attr]
        assert store.add(_user("Prefers email")) == again

    def test_update_to_an_existing_active_text_reuses_it(self, store: FactStore) -> None:
        a = store.add(_user("A"))
        b = store.add(_user("B"))
        assert store.update(_user("b"), a) == b
        assert [f.id for f in store.list_active("user", "alice")] == [b]

    def test_h5_star_and_empty_ids_are_refused_on_write(self, store: FactStore) -> None:
        base = store.add(_user("base"))
        for bad in (_user("x", "*"), _user("x", project_id="*"), _user("x", "")):
            with pytest.raises(ValueError):
                store.add(bad)
            with pytest.raises(ValueError):
                store.update(bad, base)
        with pytest.raises(ValueError):
            store.add(Fact("x", scope="project", scope_id=""))
        assert _texts(store.list_active("user", "*")) == ["base"]

    # -- delete and prune ------------------------------------------------------

    def test_delete_is_scoped_and_removes_history(self, store: FactStore) -> None:
        a = store.add(_user("A"))
        store.update(_user("B"), a)
        store.add(_user("bob's", "bob"))
        store.add(_user("alice p2", project_id="p2"))
        store.add(Fact("global", scope="agent", scope_id="alice"))
        assert store.delete("user", "alice") == 2
        assert store.get(a) is None
        assert store.list_active("user", "alice") == []
        assert _texts(store.list_active("user", "bob")) == ["bob's"]
        assert _texts(store.list_active("user", "alice", "p2")) == ["alice p2"]
        assert _texts(store.list_active("agent", "alice")) == ["global"]
        assert store.delete("user", "alice") == 0

    def test_delete_refuses_an_empty_id_at_every_scope(self, store: FactStore) -> None:
        store.add(Fact("global", scope="agent", scope_id="support"))
        for scope in ("user", "project", "agent"):
            with pytest.raises(ValueError):
                store.delete(scope, "")
        assert _texts(store.list_active("agent", "support")) == ["global"]

    def test_delete_star_removes_every_subject_of_the_scope_only(self, store: FactStore) -> None:
        store.add(_user("a", "alice"))
        store.add(_user("b", "bob"))
        store.add(_user("c", "carol", project_id="p2"))
        store.add(Fact("g", scope="agent", scope_id="support"))
        store.add(Fact("p", scope="project", scope_id="x"))
        assert store.delete("user", "*") == 2
        assert store.list_active("user", "*") == []
        assert _texts(store.list_active("user", "carol", "p2")) == ["c"]
        assert _texts(store.list_active("agent", "support")) == ["g"]
        assert _texts(store.list_active("project", "x")) == ["p"]

    def test_delete_one_fact_by_text_or_id(self, store: FactStore) -> None:
        keep = store.add(_user("Keep me"))
        store.add(_user("Drop me"))
        bob = store.add(_user("Drop me", "bob"))
        assert store.delete("user", "alice", fact="  drop ME ") == 1
        assert _texts(store.list_active("user", "alice")) == ["Keep me"]
        assert _texts(store.list_active("user", "bob")) == ["Drop me"]
        assert store.delete("user", "alice", fact_id=bob) == 0  # another subject's id
        assert store.get(bob) is not None
        assert store.delete("user", "alice", fact_id=keep) == 1
        assert store.list_active("user", "alice") == []
        assert store.add(_user("Keep me")) != keep  # deleted text can be added afresh

    def test_delete_by_text_removes_every_version_with_that_text(self, store: FactStore) -> None:
        """``fact=`` forgets a text wholly: the active fact and its superseded versions."""
        text = "my card is 4111"
        alice_old = store.add(_user(text))
        alice_new = store.update(_user("card ends 5555"), alice_old)  # the text is history only
        bob_old = [store.add(_user(text, "bob"))]
        bob_other = [store.update(_user("card ends 5555", "bob"), bob_old[0])]
        bob_old.append(store.update(_user("My card is  4111", "bob"), bob_other[0]))
        bob_other.append(store.update(_user("Card ends 5555", "bob"), bob_old[1]))
        bob_active = store.update(_user("MY CARD IS 4111", "bob"), bob_other[1])  # both
        carol = store.add(_user(text, "carol"))
        other_project = store.add(_user(text, project_id="p2"))
        agent = store.add(Fact(text, scope="agent", scope_id="alice"))
        assert store.delete("user", "alice", fact="MY CARD is 4111") == 1
        assert store.delete("user", "bob", fact="MY CARD is 4111") == 3
        for gone in (alice_old, *bob_old, bob_active):
            assert store.get(gone) is None, gone
        assert store.find_active("user", "bob", "", text) is None
        assert _texts(store.list_active("user", "alice")) == ["card ends 5555"]
        assert store.get(alice_new) is not None
        assert store.list_active("user", "bob") == []  # its other text stays as history
        assert all(store.get(kept) is not None for kept in bob_other)
        assert store.delete("user", "alice", fact=text) == 0
        assert store.delete("user", "bob", fact=text) == 0
        for kept in (carol, other_project, agent):
            assert store.get(kept) is not None, kept
        assert store.delete("user", "alice", fact="never said") == 0

    def test_delete_by_text_across_a_scope_removes_history_too(self, store: FactStore) -> None:
        old = store.add(_user("Prefers email", "bob"))
        store.update(_user("Prefers Slack", "bob"), old)
        active = store.add(_user("prefers EMAIL", "bob"))
        carol = store.add(_user("Prefers email", "carol"))
        other_project = store.add(_user("Prefers email", "dan", project_id="p2"))
        assert store.delete("user", "*", fact="prefers email") == 3
        assert all(store.get(gone) is None for gone in (old, active, carol))
        assert _texts(store.list_active("user", "bob")) == ["Prefers Slack"]
        assert store.get(other_project) is not None

    def test_delete_by_text_of_more_versions_than_one_step(self, store: FactStore) -> None:
        """A text superseded more times than one delete step removes: the count is exact."""
        step = min(getattr(store, "delete_batch", DELETE_BATCH), DELETE_BATCH)
        current, versions = store.add(_user("B")), []
        for _ in range(step + 3):
            versions.append(store.update(_user("A"), current))
            current = store.update(_user("B"), versions[-1])
        assert store.delete("user", "alice", fact="a") == step + 3
        assert all(store.get(gone) is None for gone in versions)
        assert [f.id for f in store.list_active("user", "alice")] == [current]

    def test_delete_of_a_subject_larger_than_one_step(self, store: FactStore) -> None:
        """A subject of more than DELETE_BATCH facts goes entirely; the count is exact."""
        neighbour = store.add(_user("neighbour", "bob"))
        ids = [store.add(_user(f"fact {i}")) for i in range(DELETE_BATCH + 150)]
        store.update(_user("replacement"), ids[0])  # history counts too
        assert store.delete("user", "alice") == DELETE_BATCH + 151
        assert store.list_active("user", "alice", limit=None) == []
        assert store.get(ids[0]) is None and store.get(ids[-1]) is None
        assert [f.id for f in store.list_active("user", "bob")] == [neighbour]
        assert store.delete("user", "alice") == 0

    def test_delete_star_over_many_subjects_counts_exactly(self, store: FactStore) -> None:
        for n in range(40):
            for k in range(1 + n % 3):
                store.add(_user(f"fact {k}", f"user-{n}"))
        store.add(_user("other project", "user-1", project_id="p2"))
        store.add(Fact("global", scope="agent", scope_id="support"))
        assert store.delete("user", "*") == sum(1 + n % 3 for n in range(40))
        assert store.list_active("user", "*", limit=None) == []
        assert _texts(store.list_active("user", "user-1", "p2")) == ["other project"]
        assert _texts(store.list_active("agent", "support")) == ["global"]
        assert store.delete("user", "*") == 0

    def test_prune_learned_checks_keep(self, store: FactStore) -> None:
        with pytest.raises(ValueError, match="keep must be >= 0, got -1"):
            store.prune_learned("user", "alice", keep=-1)
        for bad in (True, 1.5, "3"):
            with pytest.raises(TypeError, match="keep must be an int"):
                store.prune_learned("user", "alice", keep=bad)  # type: ignore[arg-type]

    def test_prune_learned_touches_only_learned_facts(self, store: FactStore) -> None:
        now = time.time()
        manual = [store.add(_user(f"manual {i}", created_at=now - 100 + i)) for i in range(3)]
        learned = [
            store.add(_user(f"learned {i}", source=SOURCE_CONVERSATION, created_at=now - 50 + i))
            for i in range(5)
        ]
        bob = store.add(_user("bob learned", "bob", source=SOURCE_CONVERSATION, created_at=now - 200))
        assert store.prune_learned("user", "alice", keep=2) == 3
        remaining = {f.id for f in store.list_active("user", "alice", limit=None)}
        assert remaining == {*manual, *learned[-2:]}
        assert store.get(bob) is not None
        assert store.prune_learned("user", "alice", keep=2) == 0
        with pytest.raises(ValueError):
            store.prune_learned("user", "", keep=1)
        with pytest.raises(ValueError):
            store.prune_learned("user", "alice", keep=-1)

    # -- browse and subjects ---------------------------------------------------

    def test_browse_filters_before_limit(self, store: FactStore) -> None:
        for i in range(5):
            store.add(_user(f"alice {i}"))
        bob = [store.add(_user(f"bob {i}", "bob")) for i in range(3)]
        store.update(_user("bob new", "bob"), bob[0])
        got = store.browse(scope="user", scope_id="bob", limit=10)
        assert _texts(got) == ["bob new", "bob 2", "bob 1"]
        with_history = store.browse(scope_id="bob", include_superseded=True, limit=10)
        assert len(with_history) == 4
        assert _texts(store.browse(scope_id="alice", limit=2, offset=1)) == ["alice 3", "alice 2"]
        assert len(store.browse(limit=100)) == 8

    def test_subjects_count_active_and_history(self, store: FactStore) -> None:
        a = store.add(_user("A"))
        store.update(_user("B"), a)
        store.add(_user("x", "b:ob"))
        store.add(Fact("g", scope="agent", scope_id="support", project_id="p"))
        active = {(s.scope, s.scope_id, s.project_id): s.count for s in store.subjects()}
        assert active == {
            ("user", "alice", ""): 1,
            ("user", "b:ob", ""): 1,
            ("agent", "support", "p"): 1,
        }
        history = {(s.scope, s.scope_id): s.count for s in store.subjects(include_superseded=True)}
        assert history[("user", "alice")] == 2
        store.delete("user", "b:ob")
        assert ("user", "b:ob") not in {(s.scope, s.scope_id) for s in store.subjects()}

    # -- bad input ---------------------------------------------------------------

    def test_bad_input_is_refused_clearly(self, store: FactStore) -> None:
        with pytest.raises(TypeError):
            store.add(None)  # type: ignore[arg-type]
        with pytest.raises(TypeError):
            store.add("just a string")  # type: ignore[arg-type]
        with pytest.raises(TypeError):
            store.add(_user(None))  # type: ignore[arg-type]
        with pytest.raises(TypeError):
            store.add(_user("x", None))  # type: ignore[arg-type]
        for text in ("", "   ", "\n\t"):
            with pytest.raises(ValueError):
                store.add(_user(text))
        with pytest.raises(ValueError):
            store.add(_user("x" * (MAX_FACT_CHARS + 1)))
        with pytest.raises(ValueError):
            store.add(_user("nul \x00 byte"))
        with pytest.raises(ValueError):
            store.add(_user("lone surrogate \ud800"))
        with pytest.raises(ValueError):
            store.add(Fact("x", scope="team", scope_id="a"))
        for confidence in (-0.1, 1.5, float("nan")):
            with pytest.raises(ValueError):
                store.add(_user("x", confidence=confidence))
        with pytest.raises(ValueError):
            store.list_active("team", "a")
        with pytest.raises(TypeError):
            store.list_active("user", None)  # type: ignore[arg-type]
        assert store.list_active("user", "*") == []

    def test_huge_text_at_the_limit_round_trips(self, store: FactStore) -> None:
        text = ("long fact " * MAX_FACT_CHARS)[:MAX_FACT_CHARS]
        fact_id = store.add(_user(text))
        assert store.get(fact_id).fact == text  # type: ignore[union-attr]
        assert store.add(_user(text)) == fact_id

    def test_metacharacters_in_text_round_trip(self, store: FactStore) -> None:
        ids = [store.add(_user(text)) for text in NASTY_TEXTS]
        assert len(set(ids)) == len(NASTY_TEXTS)
        for fact_id, text in zip(ids, NASTY_TEXTS, strict=False):
            assert store.get(fact_id).fact == text  # type: ignore[union-attr]
        assert sorted(_texts(store.list_active("user", "alice"))) == sorted(NASTY_TEXTS)
        assert store.delete("user", "alice", fact=NASTY_TEXTS[0]) == 1
        assert len(store.list_active("user", "alice")) == len(NASTY_TEXTS) - 1

    def test_ids_with_metacharacters_never_collide(self, store: FactStore) -> None:
        """'a:b' + 'c' and 'a' + 'b:c' are different subjects; 'a*' is not a glob."""
        for scope_id in NASTY_IDS:
            store.add(_user(f"fact of {scope_id}", scope_id))
            store.add(_user(f"p fact of {scope_id}", "u", project_id=scope_id))
        for scope_id in NASTY_IDS:
            assert _texts(store.list_active("user", scope_id)) == [f"fact of {scope_id}"]
            assert _texts(store.list_active("user", "u", scope_id)) == [f"p fact of {scope_id}"]
        assert store.delete("user", "a*") == 1
        assert store.delete("user", "a") == 1
        assert _texts(store.list_active("user", "a:b")) == ["fact of a:b"]
        assert store.delete("user", "user:*") == 1
        assert len(store.list_active("user", "*")) == len(NASTY_IDS) - 3

    # -- concurrency -------------------------------------------------------------

    def test_16_threads_adding_the_same_fact_get_one_id(self, store: FactStore) -> None:
        store.add(_user("warm up"))
        barrier = threading.Barrier(16)
        ids: list[int] = []
        errors: list[BaseException] = []

        def worker() -> None:
            try:
                barrier.wait(timeout=30)
                ids.append(store.add(_user("Concurrent fact")))
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=worker) for _ in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert not errors, errors
        assert len(ids) == 16 and len(set(ids)) == 1
        assert next(f.id for f in store.list_active("user", "alice")) == ids[0]
        assert len(store.list_active("user", "alice")) == 2

    def test_4_processes_adding_the_same_fact_get_one_id(self, store: FactStore) -> None:
        """Forked children (as under gunicorn --preload) share one row, and each
        opens its own connections: the store was used before the fork."""
        if "fork" not in multiprocessing.get_all_start_methods():
            pytest.skip("needs the fork start method (POSIX)")
        store.add(_user("warm up"))
        ctx = multiprocessing.get_context("fork")
        barrier, out = ctx.Barrier(4), ctx.Queue()
        fact = _user("Cross-process fact")
        procs = [
            ctx.Process(target=_add_in_child, args=(store, fact, barrier, out)) for _ in range(4)
        ]
        for p in procs:
            p.start()
        results = [out.get(timeout=60) for _ in procs]
        for p in procs:
            p.join(30)
        assert all(kind == "ok" for kind, _ in results), results
        assert len({value for _, value in results}) == 1
        assert store.add(fact) == results[0][1]
        assert len(store.list_active("user", "alice")) == 2

    def test_close_then_reuse(self, store: FactStore) -> None:
        fact_id = store.add(_user("survives close"))
        store.close()
        assert store.get(fact_id) is not None
        store.close()
        store.close()  # closing twice is fine
        assert store.add(_user("after close")) != fact_id

    # -- tenant isolation (property-based) ----------------------------------------

    def test_random_operations_never_touch_another_subject(self, store: FactStore) -> None:
        machine = _isolation_machine(store)
        run_state_machine_as_test(
            machine,
            settings=settings(
                max_examples=self.state_machine_examples,
                stateful_step_count=self.state_machine_steps,
                deadline=None,
                database=None,
                suppress_health_check=list(HealthCheck),
            ),
        )

    # -- faults -------------------------------------------------------------------

    def test_reconnects_after_connections_are_killed(self, store: FactStore) -> None:
        first = store.add(_user("before the fault"))
        self.break_connections(store)
        assert store.get(first) is not None  # the next call reconnects
        second = store.add(_user("after the fault"))
        self.break_connections(store)
        third = store.update(_user("updated after the fault"), second)
        assert [f.id for f in store.list_active("user", "alice")] == [third, first]

    def test_unreachable_server_raises_connection_error(self) -> None:
        store = self.unreachable_store()
        try:
            with pytest.raises(ConnectionError):
                store.add(_user("goes nowhere"))
            with pytest.raises(ConnectionError):
                store.list_active("user", "alice")
        finally:
            store.close()


# Subjects the state machine works on: tricky ids, two projects, two scopes.
_SUBJECT_IDS = ("alice", "bob", "a:b", "a", "b:c", "*x")
_TEXTS = ("likes tea", "Likes  TEA", "prefers email", "prefers slack", "lives in Paris", "a:b")


class _IsolationMachine(RuleBasedStateMachine):
    """Random operations checked against a dict model, subject by subject
    (``store`` is set by :func:`_isolation_machine`)."""

    store: FactStore

    @initialize()
    def fresh_namespace(self) -> None:
        # A new project pair per example keeps examples apart in one self.store.
        run = uuid.uuid4().hex[:8]
        self.projects = (f"{run}-p1", f"{run}-p2")
        # model: subject -> {normalised text: id}, in insertion (age) order
        self.model: dict[tuple[str, str, str], dict[str, int]] = {}

    def subject(self, scope: str, sid_index: int, project_index: int) -> tuple[str, str, str]:
        return (scope, _SUBJECT_IDS[sid_index], self.projects[project_index])

    subjects = st.tuples(
        st.sampled_from(("user", "project")),
        st.integers(0, len(_SUBJECT_IDS) - 1),
        st.integers(0, 1),
    )

    @rule(where=subjects, text=st.sampled_from(_TEXTS))
    def add(self, where: tuple[str, int, int], text: str) -> None:
        subject = self.subject(*where)
        fact_id = self.store.add(
            Fact(text, scope=subject[0], scope_id=subject[1], project_id=subject[2])
        )
        active = self.model.setdefault(subject, {})
        key = normalize_text(text)
        if key in active:
            assert fact_id == active[key]
        else:
            assert fact_id not in active.values()
            active[key] = fact_id

    @precondition(lambda self: any(self.model.values()))
    @rule(data=st.data(), text=st.sampled_from(_TEXTS))
    def update(self, data: Any, text: str) -> None:
        subject = data.draw(st.sampled_from(sorted(s for s, a in self.model.items() if a)))
        active = self.model[subject]
        old_key = data.draw(st.sampled_from(sorted(active)))
        old_id = active[old_key]
        new_id = self.store.update(
            Fact(text, scope=subject[0], scope_id=subject[1], project_id=subject[2]), old_id
        )
        key = normalize_text(text)
        if key == old_key:
            assert new_id == old_id
            return
        if key in active:
            assert new_id == active[key]
        else:
            active[key] = new_id
        del active[old_key]

    @rule(where=subjects)
    def delete_subject(self, where: tuple[str, int, int]) -> None:
        subject = self.subject(*where)
        expected = len(self.model.get(subject, {}))
        deleted = self.store.delete(*subject)
        assert deleted >= expected  # history rows count too
        self.model[subject] = {}

    @rule(where=subjects, text=st.sampled_from(_TEXTS))
    def delete_one_text(self, where: tuple[str, int, int], text: str) -> None:
        subject = self.subject(*where)
        self.store.delete(*subject, fact=text)
        self.model.get(subject, {}).pop(normalize_text(text), None)

    @rule(scope=st.sampled_from(("user", "project")), project_index=st.integers(0, 1))
    def delete_every_subject(self, scope: str, project_index: int) -> None:
        self.store.delete(scope, "*", self.projects[project_index])
        for subject in self.model:
            if subject[0] == scope and subject[2] == self.projects[project_index]:
                self.model[subject] = {}

    @invariant()
    def every_subject_matches_the_model(self) -> None:
        if not hasattr(self, "model"):
            return
        for subject, active in self.model.items():
            got = self.store.list_active(*subject, limit=None)
            assert [f.id for f in got] == sorted(active.values(), reverse=True), subject
            assert all(f.subject == f"{subject[0]}:{subject[1]}" for f in got)
            assert all(f.project_id == subject[2] for f in got)
        for scope in ("user", "project"):
            for project in self.projects:
                expected = sum(
                    len(a) for s, a in self.model.items() if s[0] == scope and s[2] == project
                )
                assert len(self.store.list_active(scope, "*", project, limit=None)) == expected


def _isolation_machine(store: FactStore) -> type[RuleBasedStateMachine]:
    """The isolation state machine bound to ``store``."""
    return type("Isolation", (_IsolationMachine,), {"store": store})
