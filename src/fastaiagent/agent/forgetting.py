"""What ``forget`` needs beyond the fact store: who wrote a fact, and who else holds a user.

- :class:`AttributedFacts` is a Memory's view of its fact store: every user
  fact the Memory writes (``persist``, ``update``, learning) carries the
  writing agent in ``metadata["agent_id"]``, so ``forget(id="*")`` of one
  agent can delete that agent's user facts and leave other agents' alone.
  Facts have no agent column: a user fact is shared by every agent of the
  location, and the metadata key is the only record of its writer.
- :func:`delete_agent_facts` deletes the user facts one agent wrote.
- :class:`Peers` knows the Memory instances of this process that share a
  location, so forgetting a user drops their in-process windows everywhere
  this process can reach.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

from fastaiagent.facts.fact import Fact
from fastaiagent.facts.scoping import WILDCARD, check_fact_text, normalize_text
from fastaiagent.facts.store import FactStore

AGENT_KEY = "agent_id"
"""The metadata key that names the agent whose Memory wrote a user fact."""

PAGE = 500  # facts read per step when looking for one agent's facts


class AttributedFacts:
    """A fact store whose user-fact writes are stamped with ``metadata["agent_id"]``.

    Everything else goes straight to the wrapped store (reads are bound once,
    so a turn's read costs no extra lookup). A fact that already names an
    agent keeps it; the same text written by two agents stays one fact, filed
    under the agent that wrote it first.
    """

    def __init__(self, store: FactStore, agent_id: str) -> None:
        self.inner = store
        self.agent_id = agent_id
        self.list_active = store.list_active
        self.get = store.get

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def __repr__(self) -> str:
        return repr(self.inner)

    def _stamp(self, fact: Fact) -> Fact:
        if fact.scope != "user" or AGENT_KEY in fact.metadata:
            return fact
        return fact.with_metadata({**fact.metadata, AGENT_KEY: self.agent_id})

    def add(self, fact: Fact) -> int:
        return self.inner.add(self._stamp(fact))

    def update(self, new: Fact, old_id: int) -> int:
        return self.inner.update(self._stamp(new), old_id)


def attributed(store: FactStore, agent_id: str | None) -> Any:
    """The store a Memory writes through: stamped when it has an agent id."""
    return AttributedFacts(store, agent_id) if agent_id else store


def _users(store: FactStore, user_id: str, project_id: str) -> list[str]:
    if user_id != WILDCARD:
        return [user_id]
    return sorted(
        {s.scope_id for s in store.subjects(include_superseded=True)
         if s.scope == "user" and s.project_id == project_id}
    )


def delete_agent_facts(store: FactStore, user_id: str, project_id: str, agent_id: str) -> list[int]:
    """Delete the user facts (history included) that ``agent_id``'s Memory wrote
    about ``user_id`` (``"*"``: about every user of the project); returns their ids.

    Facts without an agent (written before agents were recorded, by
    ``fastaiagent learn`` or directly on the store) are left alone. The user's
    facts are read a page at a time and deleted by id.
    """
    deleted: list[int] = []
    for user in _users(store, user_id, project_id):
        kept = 0
        while True:
            page = store.browse(
                scope="user", scope_id=user, project_id=project_id,
                include_superseded=True, limit=PAGE, offset=kept,
            )
            mine = [f for f in page if f.id is not None and f.metadata.get(AGENT_KEY) == agent_id]
            for fact in mine:
                assert fact.id is not None
                if store.delete("user", user, project_id, fact_id=fact.id):
                    deleted.append(fact.id)
            kept += len(page) - len(mine)  # deleted rows no longer take a place
            if len(page) < PAGE:
                break
    return deleted


def same_text_ids(store: FactStore, scope: str, scope_id: str, project_id: str, text: str) -> list[int]:
    """The ids of a subject's facts (history and expired ones too) whose text is
    ``text`` once normalised: what ``forget(fact=text)`` deletes, read before it
    does, so their vectors can go too."""
    key = check_fact_text(text)
    found: list[int] = []
    offset = 0
    while True:
        page = store.browse(
            scope=scope, scope_id=scope_id, project_id=project_id, include_superseded=True,
            include_expired=True, text=key, limit=PAGE, offset=offset,
        )  # fmt: skip
        found += [f.id for f in page if f.id is not None and normalize_text(f.fact) == key]
        if len(page) < PAGE:
            return found
        offset += PAGE


def drop_stored_windows(store: Any, project_id: str, user_id: str) -> int:
    """Delete a user's stored windows (summaries and block state in them) of every
    agent of the project, when the store keeps windows; returns how many."""
    make = getattr(store, "window_store", None)
    if not callable(make):
        return 0
    return int(make().delete_user(project_id, user_id))


class Peers:
    """Memory instances of this process grouped by location and project (weakly held).

    Memories built from the same location string, or given the same store
    object, are peers: they read the same facts, so a forgotten user must
    leave all of their in-process windows. Other processes are out of reach;
    with shared windows their next turn finds the stored window gone.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._groups: dict[tuple[Any, ...], weakref.WeakSet[Any]] = {}

    @staticmethod
    def key(location: Any, store: FactStore, project_id: str) -> tuple[Any, ...]:
        where = ("url", location) if isinstance(location, str) else ("store", id(store))
        return (*where, project_id)

    def join(self, key: tuple[Any, ...], memory: Any) -> None:
        with self._lock:
            self._groups.setdefault(key, weakref.WeakSet()).add(memory)

    def of(self, key: tuple[Any, ...]) -> list[Any]:
        with self._lock:
            group = self._groups.get(key)
            return list(group) if group is not None else []


PEERS = Peers()


__all__ = [
    "AGENT_KEY", "PEERS", "AttributedFacts", "Peers", "attributed", "delete_agent_facts",
    "drop_stored_windows", "same_text_ids",
]  # fmt: skip


# What a forget removed, in words: (count key, singular, plural), in report order.
_KINDS = (
    ("facts", "fact", "facts"),
    ("fact_vectors", "fact vector", "fact vectors"),
    ("recall", "recalled message", "recalled messages"),
    ("windows", "stored window", "stored windows"),
    ("traces", "run", "runs"),
)


def forgotten_words(counts: dict[str, int]) -> str:
    """``"3 facts, 0 fact vectors, 6 recalled messages, 1 stored window, 2 runs"``:
    every kind :meth:`~fastaiagent.agent.memory.Memory.forget_user` reports, zeros
    included (a kind not counted is left out)."""
    return ", ".join(
        f"{counts[key]} {one if counts[key] == 1 else many}"
        for key, one, many in _KINDS
        if key in counts
    )
