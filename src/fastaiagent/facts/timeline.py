"""A fact's history: the chain of versions that ``update`` (or learning) made of it.

Each ``update`` adds a new version and supersedes the old one
(``superseded_by``), so one fact's history is the set of rows linked by that
chain. :func:`versions` walks it with the store's point reads only (``get`` and
``replaced``, both by index), never reading the subject.
"""

from __future__ import annotations

from fastaiagent.facts.fact import Fact
from fastaiagent.facts.store import FactStore

MAX_VERSIONS = 200
"""Versions one history returns at most (a chain is rarely longer than a few)."""


def versions(store: FactStore, fact_id: int, limit: int = MAX_VERSIONS) -> list[Fact]:
    """Every version of the fact ``fact_id`` belongs to, newest first: from the
    newest version (following ``superseded_by``) back through what each replaced."""
    head = store.get(fact_id)
    if head is None:
        return []
    seen = {fact_id}
    while head.superseded_by is not None and len(seen) < limit:
        newer = store.get(head.superseded_by)
        if newer is None or newer.id in seen:
            break
        seen.add(int(newer.id or 0))
        head = newer
    found = {int(head.id or 0): head}
    frontier = [head]
    while frontier and len(found) < limit:
        for older in store.replaced(int(frontier.pop().id or 0)):
            if older.id is not None and older.id not in found:
                found[older.id] = older
                frontier.append(older)
    chain = sorted(found.values(), key=lambda f: (f.created_at, f.id or 0), reverse=True)
    return chain[:limit]
