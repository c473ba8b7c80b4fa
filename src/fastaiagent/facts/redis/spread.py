"""What a :class:`~fastaiagent.facts.redis.store.RedisFactStore` does across
subjects on a Redis Cluster, where no script may span two slots: a ``"*"`` read,
browsing and pruning walk the subjects sets (one per slot) and work one subject
(one slot) at a time; writes by id go to the slot the id names.

One server keeps global indexes for these instead (``scope:``, ``all``,
``expiry``, ``retired``), updated inside each write's script.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from fastaiagent.facts.fact import SOURCE_CONVERSATION, Fact
from fastaiagent.facts.redis.cluster import SLOTS
from fastaiagent.facts.redis.layout import escape_part, glob_escape, parse_fact, unescape_part
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
    _index: Any
    _raise_seq: Any

    if TYPE_CHECKING:  # the store's own

        def _k(self, *parts: str) -> str: ...
        def _sk(self, kind: str, parts: Parts, *rest: str) -> str: ...
        def _members(self, head: str = "") -> Iterator[str]: ...
        def _subject(self, scope: str, scope_id: str, project_id: str) -> Parts: ...
        def _index_args(self, fact: Fact, raw: dict[str, str]) -> list[Any]: ...
        def _selected_subjects(self, selector: Selector) -> list[Parts]: ...
        def _load_facts(self, ids: list[int]) -> list[Fact]: ...
        def _write(self, script: Any, parts: Parts, args: list[Any], index: str = "") -> Any: ...
        def _read_fact(self, pipe: Any, fact_id: int) -> Fact | None: ...
        def _subject_newest(
            self, subject: Parts, limit: int | None, offset: int, now: float | None
        ) -> list[Fact]: ...

    def _cluster_supersede(self, old_id: int, new_id: int, when: str) -> Any:
        """Supersede in a cluster: two ids of different slots are facts of different
        subjects, or missing (the usual refusal: only the new fact is read, for its
        subject's name); else one script call in their slot."""
        if old_id % SLOTS == new_id % SLOTS:
            return self._slot_write(self._supersede, old_id % SLOTS, [self.prefix, old_id, new_id, when])
        n = self._read_fact(self._client, new_id)
        if n is None:
            return ["missing", new_id]
        return ["elsewhere", old_id, n.scope, n.scope_id, n.project_id]

    def _elsewhere(self, fact_id: int) -> list[Any]:
        """Cluster: the refusal of an update whose old fact is in another slot than
        the new one's subject: another subject's, or missing (nothing of it is read)."""
        return ["elsewhere", fact_id]

    def _slot_write(self, script: Any, slot: int, args: list[Any]) -> Any:
        """A write script in ``slot`` (its counter as KEYS[1]), waited for by replicas."""
        assert self._spread is not None
        return self._spread.script(script, [self._spread.counter_key(slot)], args)

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
            found += [f for f in self._load_facts(ids) if keep(f)]
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
        """Index every fact hash of the namespace again, a script each in its slot
        (puts back a subject its set lost), and raise each slot's id counter above
        the ids found; returns how many facts it saw."""
        assert self._spread is not None
        seen, top = 0, dict[int, int]()
        head = self._k("fact") + ":{"
        keys = self._client.scan_iter(match=glob_escape(head) + "*", count=1000)
        while batch := [key for _, key in zip(range(_PAGE), keys, strict=False)]:
            reader = self._client.pipeline(transaction=False)
            for key in batch:
                reader.hgetall(key)
            for key, raw in zip(batch, reader.execute(), strict=True):
                fact_id = key.rpartition(":")[2]
                if not raw or "fact" not in raw or not fact_id.isdigit():
                    continue
                fact = parse_fact(int(fact_id), raw)
                parts = self._subject(fact.scope, fact.scope_id, fact.project_id)
                self._write(self._index, parts, self._index_args(fact, raw))
                count, slot = divmod(int(fact_id), SLOTS)
                top[slot], seen = max(top.get(slot, 0), count), seen + 1
        for slot, count in top.items():
            self._raise_seq(keys=[self._spread.counter_key(slot)], args=[count])
        return seen
