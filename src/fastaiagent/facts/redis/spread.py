"""What a :class:`~fastaiagent.facts.redis.store.RedisFactStore` does across
subjects on a Redis Cluster, where no script may span two subjects' slots: a
``"*"`` read, browsing, pruning and the id map's repair walk the namespace's
``subjects`` set and work one subject (one slot) at a time.

One server keeps global indexes for these instead (``scope:``, ``all``,
``expiry``, ``retired``), updated inside each write's script.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from fastaiagent.facts.fact import SOURCE_CONVERSATION, Fact
from fastaiagent.facts.redis.layout import escape_part, glob_escape, unescape_part
from fastaiagent.facts.scoping import Selector
from fastaiagent.facts.store import BrowseFilter

if TYPE_CHECKING:
    from fastaiagent.facts.redis.cluster import ClusterNamespace

Parts = tuple[str, str, str]
_PAGE = 500  # keys or subjects one step reads


def subject_parts(member: str) -> Parts:
    """A subject's escaped parts from its member (``project:scope:scope_id``)."""
    project, scope, scope_id = member.split(":")
    return project, scope, scope_id


def newest_first(fact: Fact) -> tuple[float, int]:
    return -fact.created_at, -(fact.id or 0)


class SpreadOps:
    """The cluster forms of the store's cross-subject operations (a mixin of
    :class:`~fastaiagent.facts.redis.store.RedisFactStore`)."""

    prefix: str
    delete_batch: int
    _client: Any
    _spread: ClusterNamespace | None
    _prune: Any
    _delete_id: Any
    _prune_history: Any
    _supersede: Any

    if TYPE_CHECKING:  # the store's own

        def _k(self, *parts: str) -> str: ...
        def _sk(self, kind: str, parts: Parts, *rest: str) -> str: ...
        def _subjects_key(self) -> str: ...
        def _selected_subjects(self, selector: Selector) -> list[Parts]: ...
        def _load_facts(self, ids: list[int], parts: Parts | None = None) -> list[Fact]: ...
        def _write(self, script: Any, parts: Parts, args: list[Any], index: str = "") -> Any: ...
        def _read_fact(self, pipe: Any, fact_id: int, parts: Parts | None = None) -> Fact | None: ...
        def _subject_newest(
            self, subject: Parts, limit: int | None, offset: int, now: float | None
        ) -> list[Fact]: ...

    def _where(self, fact_id: int) -> Parts | None:
        """Cluster: the subject (escaped parts) of a fact id, from the namespace's map."""
        assert self._spread is not None
        member = self._spread.subject_of([fact_id])[0]
        return None if member is None else subject_parts(member)

    def _cluster_supersede(self, old_id: int, new_id: int, when: str) -> Any:
        """Supersede in a cluster: both ids' subjects from the map, then one script
        call in that subject's slot (facts of two subjects: the usual refusal)."""
        assert self._spread is not None
        old, new = (None if m is None else subject_parts(m) for m in self._spread.subject_of([old_id, new_id]))
        if old is None or new is None:
            return ["missing", old_id if old is None else new_id]
        if old != new:
            o, n = self._read_fact(self._client, old_id, old), self._read_fact(self._client, new_id, new)
            if o is None or n is None:
                return ["missing", old_id if o is None else new_id]
            return ["subject", old_id, f"{o.scope}:{o.scope_id}", o.project_id,
                    new_id, f"{n.scope}:{n.scope_id}", n.project_id]  # fmt: skip
        return self._write(self._supersede, old, [self.prefix, old_id, new_id, when, *old])

    def _elsewhere(self, fact_id: int) -> list[Any] | None:
        """Cluster: the refusal for an old fact of another subject than the new one's
        (the update script only sees its own slot), None when there is no such fact."""
        fact = self._read_fact(self._client, fact_id)
        if fact is None:
            return None
        return ["subject", fact_id, f"{fact.scope}:{fact.scope_id}", fact.project_id]

    def _members(self, match: str = "") -> Iterator[str]:
        """Every subject of the namespace (SSCAN), those starting with ``match`` if given."""
        pattern = glob_escape(match) + "*" if match else None
        return self._client.sscan_iter(self._subjects_key(), match=pattern, count=_PAGE)

    def _spread_newest(
        self, selector: Selector, limit: int | None, offset: int, now: float | None
    ) -> list[Fact]:
        """A ``"*"`` read: each subject's newest ``offset + limit``, merged."""
        wanted = None if limit is None else offset + limit
        facts: list[Fact] = []
        for parts in self._selected_subjects(selector):
            facts += self._subject_newest(parts, wanted, 0, now)
        facts.sort(key=newest_first)
        return facts[offset:] if limit is None else facts[offset : offset + limit]

    def _spread_browse(self, wanted: BrowseFilter, keep: Callable[[Fact], bool]) -> list[Fact]:
        """Browse: every fact of the subjects the filter allows, newest first."""
        found: list[Fact] = []
        for member in self._members():
            project, scope, scope_id = (unescape_part(p) for p in subject_parts(member))
            if (
                (wanted.scope is not None and scope != wanted.scope)
                or (wanted.scope_id is not None and scope_id != wanted.scope_id)
                or (wanted.project_id is not None and project != wanted.project_id)
            ):
                continue
            parts = subject_parts(member)
            ids = sorted(map(int, self._client.smembers(self._sk("hist", parts))))
            found += [f for f in self._load_facts(ids, parts) if keep(f)]
        found.sort(key=newest_first)
        return found[wanted.offset : wanted.offset + wanted.limit]

    def _spread_prune_learned(self, selector: Selector, keep: int) -> int:
        """``"*"``: the newest ``keep`` run-learned facts across the scope's subjects
        stay; the others go one atomic call each."""
        learned: list[tuple[Fact, Parts]] = []
        for parts in self._selected_subjects(selector):
            learned += [
                (f, parts)
                for f in self._subject_newest(parts, None, 0, None)
                if f.source == SOURCE_CONVERSATION
            ]
        learned.sort(key=lambda pair: newest_first(pair[0]))
        total = 0
        for fact, parts in learned[keep:]:
            args = [self.prefix, *parts, fact.id, ""]
            total += int(self._write(self._delete_id, parts, args))
        return total

    def _spread_prune_history(self, cutoff: float, scoped: list[str], limit: int) -> int:
        """Facts expired or superseded before ``cutoff``, a subject at a time (each
        subject's own ``expiry`` and ``retired`` sets), ``limit`` at most."""
        total = 0
        match = "" if scoped[0] == "0" else self._subject_head(scoped[1])
        for member in list(self._members(match)):
            parts = subject_parts(member)
            while total < limit:
                budget = min(self.delete_batch, limit - total)
                args = [self.prefix, repr(cutoff), budget, *scoped, *parts]
                deleted = int(self._write(self._prune_history, parts, args))
                total += deleted
                if deleted < budget:
                    break
            if total >= limit:
                break
        return total

    def _subject_head(self, project: str) -> str:
        return escape_part(project, braces=True) + ":"

    def _spread_reindex(self) -> int:
        """Map every fact hash of the namespace to its subject and list the subjects
        (the repair of a write interrupted between its two calls); returns the count."""
        assert self._spread is not None
        spread, seen, highest = self._spread, 0, 0
        head = self._k("fact") + ":{"
        batch: dict[str, str] = {}
        for key in self._client.scan_iter(match=glob_escape(head) + "*", count=1000):
            member, _, fact_id = key[len(head) :].rpartition("}:")
            if not fact_id.isdigit():
                continue
            batch[fact_id] = member
            seen, highest = seen + 1, max(highest, int(fact_id))
            if len(batch) >= _PAGE:
                spread.map_ids(batch)
                batch = {}
        if batch:
            spread.map_ids(batch)
        if highest:
            spread.raise_counter(highest)
        return seen
