"""The time part of the FactStore conformance suite: validity, "as of" reads,
expiry, a fact's versions and the retention job.

:class:`~fastaiagent.facts.conformance.facts.FactStoreConformance` includes these
tests, so every store that runs the suite runs them. Time is injected: each
test writes facts with explicit ``created_at`` / ``valid_to`` and reads with
``now=`` / ``at=``, so nothing depends on the wall clock.
"""

from __future__ import annotations

from typing import Any

import pytest

from fastaiagent.facts.fact import Fact
from fastaiagent.facts.store import FactStore

T0 = 1_700_000_000.0  # a fixed "now" for every test


def _user(text: str, scope_id: str = "alice", at: float = T0, **kw: Any) -> Fact:
    return Fact(text, scope="user", scope_id=scope_id, created_at=at, **kw)


def _texts(facts: list[Fact]) -> list[str]:
    return [f.fact for f in facts]


class ValidityConformance:
    """Validity and recorded time on a store (mixed into the conformance suite)."""

    def test_a_fact_with_an_end_stops_being_read_when_it_expires(self, store: FactStore) -> None:
        store.add(_user("open-ended", at=T0 - 20))
        ending = store.add(_user("promo until noon", at=T0 - 10, valid_to=T0 + 60))
        assert _texts(store.list_active("user", "alice", now=T0)) == ["promo until noon", "open-ended"]
        assert _texts(store.list_active("user", "alice", now=T0 + 60)) == ["open-ended"]
        assert _texts(store.list_active("user", "*", now=T0 + 60)) == ["open-ended"]
        assert _texts(store.browse(now=T0 + 60)) == ["open-ended"]
        expired = store.list_active("user", "alice", now=T0 + 60, include_expired=True)
        assert expired[0].id == ending
        assert _texts(store.browse(now=T0 + 60, include_expired=True)) == [
            "promo until noon",
            "open-ended",
        ]
        got = store.get(ending)
        assert got is not None and (got.valid_from, got.valid_to) == (None, T0 + 60)
        assert got.expired(T0 + 60) and not got.expired(T0 + 59)

    def test_a_fact_not_yet_valid_is_not_read(self, store: FactStore) -> None:
        store.add(_user("starts tomorrow", valid_from=T0 + 86_400))
        store.add(_user("ends later, starts tomorrow", valid_from=T0 + 86_400, valid_to=T0 + 9e5))
        assert store.list_active("user", "alice", now=T0) == []
        assert len(store.list_active("user", "alice", now=T0 + 86_400)) == 2

    def test_open_and_ending_facts_interleave_newest_first_in_pages(self, store: FactStore) -> None:
        for n in range(12):
            end = T0 + 1000 if n % 2 else None
            store.add(_user(f"fact {n}", at=T0 - 100 + n, valid_to=end))
        for n in range(4):  # expired ones in between must not shift the pages
            store.add(_user(f"gone {n}", at=T0 - 95 + n, valid_to=T0 - 1))
        newest = [f"fact {n}" for n in reversed(range(12))]
        assert _texts(store.list_active("user", "alice", limit=None, now=T0)) == newest
        pages = [store.list_active("user", "alice", limit=5, offset=o, now=T0) for o in (0, 5, 10)]
        assert [f for page in pages for f in _texts(page)] == newest

    def test_as_of_before_and_after_an_update(self, store: FactStore) -> None:
        old = store.add(_user("Lives in Paris", at=T0))
        new = store.update(_user("Lives in Berlin", at=T0 + 100), old)
        assert _texts(store.list_as_of("user", "alice", "", T0 - 1)) == []
        assert _texts(store.list_as_of("user", "alice", "", T0 + 50)) == ["Lives in Paris"]
        assert _texts(store.list_as_of("user", "alice", "", T0 + 100)) == ["Lives in Berlin"]
        superseded = store.get(old)
        assert superseded is not None
        assert (superseded.superseded_by, superseded.superseded_at) == (new, T0 + 100)
        assert store.list_as_of("user", "bob", "", T0 + 50) == []

    def test_as_of_respects_validity(self, store: FactStore) -> None:
        store.add(_user("On leave this week", at=T0, valid_from=T0, valid_to=T0 + 7 * 86_400))
        assert _texts(store.list_as_of("user", "alice", "", T0 + 86_400)) == ["On leave this week"]
        assert store.list_as_of("user", "alice", "", T0 + 8 * 86_400) == []

    def test_supersede_records_when(self, store: FactStore) -> None:
        a = store.add(_user("A", at=T0))
        b = store.add(_user("B", at=T0 + 1))
        store.supersede(a, b, at=T0 + 5)
        got = store.get(a)
        assert got is not None and got.superseded_at == T0 + 5

    def test_replaced_lists_the_previous_versions(self, store: FactStore) -> None:
        v1 = store.add(_user("Plan: free", at=T0))
        v2 = store.update(_user("Plan: pro", at=T0 + 10), v1)
        v3 = store.update(_user("Plan: team", at=T0 + 20), v2)
        assert [f.id for f in store.replaced(v3)] == [v2]
        assert [f.id for f in store.replaced(v2)] == [v1]
        assert store.replaced(v1) == []

    def test_expire_is_scoped_and_ends_a_fact(self, store: FactStore) -> None:
        mine = store.add(_user("Allergic to nuts", at=T0))
        theirs = store.add(_user("Allergic to nuts", scope_id="bob", at=T0))
        assert store.expire("user", "bob", "", mine, T0 + 10) is False
        assert store.expire("user", "alice", "other-project", mine, T0 + 10) is False
        assert store.expire("user", "alice", "", mine, T0 + 10) is True
        assert store.list_active("user", "alice", now=T0 + 10) == []
        assert _texts(store.list_active("user", "alice", now=T0 + 9)) == ["Allergic to nuts"]
        assert [f.id for f in store.list_active("user", "bob", now=T0 + 10)] == [theirs]
        assert store.expire("user", "alice", "", 987_654_321, T0) is False

    def test_re_adding_an_expired_text_records_it_again(self, store: FactStore) -> None:
        first = store.add(_user("In Lisbon", at=T0, valid_to=T0 + 10))
        assert store.add(_user("in  lisbon", at=T0 + 5)) == first  # still valid: the same fact
        again = store.add(_user("In Lisbon", at=T0 + 20))
        assert again != first
        assert [f.id for f in store.list_active("user", "alice", now=T0 + 20)] == [again]
        old = store.get(first)
        assert old is not None and (old.superseded_by, old.superseded_at) == (again, T0 + 20)

    def test_prune_history_is_bounded_and_keeps_the_rest(self, store: FactStore) -> None:
        for n in range(5):
            store.add(_user(f"expired {n}", at=T0 - 100, valid_to=T0 - 50))
        old = store.add(_user("old plan", at=T0 - 100))
        store.update(_user("new plan", at=T0 - 60), old)
        store.add(_user("expires later", at=T0 - 100, valid_to=T0 + 50))
        other = store.add(Fact("expired elsewhere", "user", "alice", "p2", created_at=T0 - 100, valid_to=T0 - 50))
        assert store.prune_history(T0, project_id="", limit=4) == 4
        assert store.prune_history(T0, project_id="", limit=4) == 2
        assert store.prune_history(T0, project_id="") == 0
        left = store.list_active("user", "alice", limit=None, now=T0, include_expired=True)
        assert sorted(_texts(left)) == ["expires later", "new plan"]
        assert store.get(old) is None and store.get(other) is not None
        assert store.prune_history(T0) == 1  # every project
        assert store.get(other) is None

    def test_bad_validity_is_refused(self, store: FactStore) -> None:
        with pytest.raises(ValueError, match=r"valid_to .* must be after valid_from"):
            store.add(_user("backwards", valid_from=T0, valid_to=T0))
        with pytest.raises(TypeError, match="valid_to must be a number"):
            store.add(_user("bool end", valid_to=True))
        with pytest.raises(ValueError, match="limit must be >= 1"):
            store.prune_history(T0, limit=0)
        assert store.list_active("user", "alice", include_expired=True) == []

    def test_browse_searches_text(self, store: FactStore) -> None:
        store.add(_user("Prefers 100% oat milk", at=T0))
        store.add(_user("Drinks tea", at=T0 + 1))
        store.add(_user("OAT allergy? no", scope_id="bob", at=T0 + 2))
        assert _texts(store.browse(text="oat", now=T0)) == ["OAT allergy? no", "Prefers 100% oat milk"]
        assert _texts(store.browse(text="100%", now=T0)) == ["Prefers 100% oat milk"]
        assert _texts(store.browse(text="oat", scope_id="bob", now=T0)) == ["OAT allergy? no"]
        assert store.browse(text="_", now=T0) == []
