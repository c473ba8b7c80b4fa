"""RedisFactStore: durable facts in Redis, read through newest-first sorted indexes.

Key layout under ``<prefix>`` (every variable part escaped, so an id that
contains ``:`` can never collide with another subject):

- ``<prefix>:seq`` - the id counter
- ``<prefix>:fact:<id>`` - one hash per fact (active or superseded); its ``row``
  field is the fact as one JSON array (see ``ROW_FIELDS``), ``fact_key`` its
  normalised text and ``digest`` the last part of its content key
- ``<prefix>:active:<project>:<scope>:<scope_id>`` - a subject's active ids, newest first
- ``<prefix>:rows:<project>:<scope>:<scope_id>`` - a subject's active facts as
  rows, newest first (member: zero-padded id + row), so reading a subject is
  one ZREVRANGE with nothing to look up per fact
- ``<prefix>:scope:<project>:<scope>`` - a scope's active ids across subjects (``"*"`` reads)
- ``<prefix>:hist:<project>:<scope>:<scope_id>`` - every id of a subject (history, delete)
- ``<prefix>:key:<project>:<scope>:<scope_id>:<digest>`` - active id of a normalised text
- ``<prefix>:old:<project>:<scope>:<scope_id>:<digest>`` - superseded ids of a normalised
  text (written when a fact is superseded, never by ``add``), so ``delete(fact=)``
  removes a text's history without reading the subject
- ``<prefix>:exp:<project>:<scope>:<scope_id>`` - a subject's active facts that
  have an end (``valid_to``), as rows scored by ``valid_to``: they are kept out
  of ``rows:``, so a read takes the still-valid ones by score and never an
  expired one
- ``<prefix>:expiry`` - active facts with an end by ``valid_to``; ``<prefix>:retired``
  - superseded facts by ``superseded_at`` (both for the retention job)
- ``<prefix>:prev:<id>`` - the ids fact ``<id>`` superseded (its history)
- ``<prefix>:all`` - every id, newest first (browse); ``<prefix>:subjects`` - known subjects
- ``<prefix>:layout`` - the layout version (``LAYOUT_VERSION``)

Sorted-set members are (or start with) zero-padded ids, scored by
``created_at``, so facts written in the same instant still come back newest
(highest id) first.

Every write (add, update, supersede, delete, prune_learned) is one Lua script
call (EVALSHA; see ``lua.py``), so Redis applies it atomically: no WATCH,
no client retries, and a crash or a dropped connection leaves nothing
half-written. Deleting a whole subject runs in steps of ``delete_batch``
facts, so a huge subject never blocks the server for long. A server that
lost its script cache (restart, SCRIPT FLUSH) is given the scripts again.

Layouts: 1 bare hashes, 2 indexes and a ``doc`` field, 3 per-subject rows, 4
a ``digest`` field in each hash (so scripts find a fact's content key without
hashing on the server), 5 the ``old:`` sets of superseded ids per text, 6 the
two times (``valid_from`` / ``valid_to`` / ``superseded_at`` fields, the ``exp:``,
``expiry``, ``retired`` and ``prev:`` keys). Opening an older namespace upgrades it once (see
:meth:`RedisFactStore.reindex`); a newer one raises
:class:`~fastaiagent.errors.SchemaVersionError`. Outages raise
:class:`~fastaiagent.errors.StoreUnavailableError` (see :func:`unavailable`).

On a Redis Cluster (``?cluster=true``, layout ``CLUSTER_LAYOUT``) every key of a
subject is in its hash slot: its own keys carry it as a hash tag
(``<prefix>:rows:{<project>:<scope>:<scope_id>}``, and its own ``expiry:`` /
``retired:`` sets), the keys its slot shares carry a tag of that slot (the id
counter, the subjects set, fact hashes and ``prev:`` sets; ids name their slot),
so each script touches one slot; the global ``scope:`` and ``all`` indexes are not
kept (see ``cluster.py``, and ``spread.py`` for what runs a subject at a time). A
single server's keys are unchanged.
"""

from __future__ import annotations

import dataclasses
import json
import threading
from collections import defaultdict
from collections.abc import Callable, Iterator
from itertools import chain
from typing import Any, TypeVar

from fastaiagent._validate import integer, text
from fastaiagent.errors import FactNotFoundError, InvalidValueError, UsageError
from fastaiagent.facts.capabilities import StoreCapabilities
from fastaiagent.facts.fact import SOURCE_CONVERSATION, Fact
from fastaiagent.facts.factory import split_location_option
from fastaiagent.facts.locations import check_redis_url
from fastaiagent.facts.redis import lua
from fastaiagent.facts.redis.client import guarded_client, unavailable
from fastaiagent.facts.redis.cluster import (
    SLOTS,
    ClusterNamespace,
    cluster_client,
    is_cluster,
    slot_of,
    wait_replicas_option,
)
from fastaiagent.facts.redis.layout import (
    ROW_LEN,
    escape_part,
    fact_of_row,
    fact_row,
    glob_escape,
    parse_fact,
    parse_rows,
    recorded_layout,
    row_facts,
    row_parts,
    sorted_member,
    stored_time,
    text_digest,
    unescape_part,
)
from fastaiagent.facts.redis.spread import SpreadOps
from fastaiagent.facts.redis.spread import subject_parts as _parts
from fastaiagent.facts.scoping import (
    Selector,
    check_fact_id,
    check_fact_text,
    delete_selector,
    normalize_text,
    not_in_subject,
    read_selector,
    validate_for_write,
)
from fastaiagent.facts.store import DELETE_BATCH, BrowseFilter, StoreFront, SubjectCount
from fastaiagent.facts.validity import history_cutoff, moment_or_now

__all__ = ["CLUSTER_LAYOUT", "LAYOUT_VERSION", "RedisFactStore"]

LAYOUT_VERSION = "6"  # see the module docstring for what each layout added
CLUSTER_LAYOUT = "7"  # a cluster's (hash tags); an older SDK refuses it as newer
_SUBJECT_PAGE = 200  # subjects one SSCAN step of a "*" delete reads
_T = TypeVar("_T")


def _newest_first(fact: Fact) -> tuple[float, int]:
    return -fact.created_at, -(fact.id or 0)


def _held_at(fact: Fact, when: float) -> bool:
    """Recorded, not yet superseded and valid at ``when``."""
    if fact.created_at > when or not fact.valid_at(when):
        return False
    return fact.superseded_by is None or (fact.superseded_at or 0.0) > when


def _refusal(reply: list[Any], new: Fact | None = None) -> Exception:
    """The exception for a write a script refused (the rules of
    :func:`~fastaiagent.facts.scoping.check_supersede`, checked on the server). An
    old fact of another subject reads as a missing one, in the words of the new
    fact's subject (``new``, or the subject the script sent back)."""
    code, fact_id = reply[0], reply[1]
    if code == "missing":
        return FactNotFoundError(f"no fact #{fact_id}")
    if code == "inactive":
        return InvalidValueError(f"fact #{fact_id} is itself superseded and cannot replace another")
    if code == "taken":
        return InvalidValueError(f"fact #{fact_id} is already superseded by #{reply[2]}")
    if new is not None:
        return not_in_subject(fact_id, new.scope, new.scope_id, new.project_id)
    return not_in_subject(fact_id, reply[2], reply[3], reply[4])


class RedisFactStore(StoreFront, StoreCapabilities, SpreadOps):
    """Facts in Redis under ``prefix`` (escaped; default ``fastaiagent``).

    The first use of a namespace written by an older SDK is upgraded once (see
    :meth:`reindex`; call it again if an old writer keeps writing). A namespace
    written by a newer SDK raises :class:`~fastaiagent.errors.SchemaVersionError`;
    an unreachable server :class:`~fastaiagent.errors.StoreUnavailableError`.
    ``client`` lets you pass your own ``redis.Redis`` or
    ``redis.cluster.RedisCluster`` (created with ``decode_responses=True``);
    otherwise one is built from ``url``. A URL with ``?cluster=true`` opens a
    Redis Cluster (see :mod:`fastaiagent.facts.redis.cluster`); there
    ``?wait_replicas=N`` (default 1) is how many replicas acknowledge each write.
    """

    backend = "redis"
    backend_class = "Redis"

    delete_batch: int = 100
    """Facts one script call of :meth:`delete` removes at most. Dropping a fact
    touches about ten keys (its hash and every index), so a step holds Redis
    for a few ms (1-7 ms measured on a busy 2-core machine) and other clients
    are served between steps."""

    def __init__(
        self,
        url: str,
        prefix: str = "fastaiagent",
        *,
        socket_timeout: float = 10.0,
        client: Any = None,
    ) -> None:
        text("url", url)
        text("prefix", prefix)
        check_redis_url(url, own=("cluster", "wait_replicas"))  # before redis-py sees it
        if client is not None and not client.get_encoder().decode_responses:
            raise InvalidValueError("pass a redis.Redis created with decode_responses=True")
        url, flag = split_location_option(url, "cluster")
        url, replicas = split_location_option(url, "wait_replicas")
        if flag not in (None, "true", "false"):
            raise InvalidValueError(f"cluster= takes true or false, got {flag!r}")
        cluster = is_cluster(client) if client is not None else flag == "true"
        self.url = url
        self.prefix = escape_part(prefix, braces=cluster)
        # Names the connections in CLIENT LIST, so operators can tell them apart.
        self.client_name = "fastaiagent-" + "".join(
            c if c.isalnum() or c in "-_." else "_" for c in prefix
        )
        options = {
            "client_name": self.client_name,
            "decode_responses": True,
            "socket_timeout": socket_timeout,
            "socket_connect_timeout": min(socket_timeout, 5.0),
        }
        if client is None and cluster:
            with unavailable("the fact store", url):  # it reads the slots' map now
                client = cluster_client(url, **options)
        self._client = client or guarded_client(url, **options)
        self._spread: ClusterNamespace | None = None
        if cluster:
            waits = wait_replicas_option(replicas, True)
            self._spread = ClusterNamespace(self._client, self.prefix, waits, "the fact store")
        else:
            wait_replicas_option(replicas, False)
        self._register_scripts(cluster)
        self._layout = CLUSTER_LAYOUT if cluster else LAYOUT_VERSION
        self._layout_checked = False
        self._layout_lock = threading.Lock()

    def _register_scripts(self, cluster: bool) -> None:
        """The write and read scripts (a cluster's variant on a cluster).
        register_script: EVALSHA, and on NOSCRIPT (a restarted or flushed server)
        the script is loaded again and the call repeated."""
        register = self._client.register_script

        def script(body: str) -> Any:
            return register(lua.for_cluster(body) if cluster else body)

        self._read_newest = script(lua.READ_NEWEST)
        self._prune_rows = script(lua.PRUNE_ROWS)
        self._raise_seq = script(lua.RAISE_SEQ)
        self._add, self._update, self._supersede = (
            script(lua.ADD),
            script(lua.UPDATE),
            script(lua.SUPERSEDE),
        )
        self._delete_id, self._delete_text = script(lua.DELETE_ID), script(lua.DELETE_TEXT)
        self._delete_some, self._prune = script(lua.DELETE_SOME), script(lua.PRUNE_LEARNED)
        self._index, self._set_layout = script(lua.INDEX), script(lua.SET_LAYOUT)
        self._expire, self._prune_history = script(lua.EXPIRE), script(lua.PRUNE_HISTORY)
        self._subject_read = script(lua.SUBJECT_READ)

    def __repr__(self) -> str:
        return f"RedisFactStore(prefix={self.prefix!r})"

    @property
    def client(self) -> Any:
        """The ``redis.Redis`` this store uses (``decode_responses=True``); the
        window store shares it. Its pool re-connects after a fork."""
        return self._client

    # -- keys --------------------------------------------------------------

    def _k(self, *parts: str) -> str:
        return ":".join((self.prefix, *parts))

    @property
    def cluster(self) -> bool:
        """True when the store runs on a Redis Cluster (the cluster layout)."""
        return self._spread is not None

    def _fact_key(self, fact_id: int | str) -> str:
        """A fact's hash; in a cluster in the slot its id names (its subject's)."""
        if self._spread is None:
            return self._k("fact", str(fact_id))
        return self._spread.fact_key(int(fact_id))

    def _slot_keys(self, parts: tuple[str, str, str]) -> list[str]:
        """Cluster: a subject's script keys: its slot's id counter first."""
        assert self._spread is not None
        return [self._spread.counter_key(slot_of(":".join(parts)))]

    def _tag(self, parts: tuple[str, str, str]) -> str:
        """A subject's part of its keys: ``project:scope:scope_id``, a hash tag in a cluster."""
        joined = ":".join(parts)
        return joined if self._spread is None else "{" + joined + "}"

    def _sk(self, kind: str, parts: tuple[str, str, str], *rest: str) -> str:
        """A subject's key of ``kind`` (active, rows, hist, exp, key, old)."""
        return self._k(kind, self._tag(parts), *rest)

    def _subject(self, scope: str, scope_id: str, project_id: str) -> tuple[str, str, str]:
        """A subject's escaped key parts, in key order: project, scope, scope_id."""
        braces = self._spread is not None
        return (
            escape_part(project_id, braces=braces),
            escape_part(scope, braces=braces),
            escape_part(scope_id, braces=braces),
        )

    def _active_key(self, scope: str, scope_id: str, project_id: str) -> str:
        return self._sk("active", self._subject(scope, scope_id, project_id))

    def _hist_key(self, scope: str, scope_id: str, project_id: str) -> str:
        return self._sk("hist", self._subject(scope, scope_id, project_id))

    def _scope_key(self, scope: str, project_id: str) -> str:
        return self._k("scope", escape_part(project_id), escape_part(scope))

    def _subject_member(self, scope: str, scope_id: str, project_id: str) -> str:
        return ":".join(self._subject(scope, scope_id, project_id))

    # -- companions (windows, items, vectors) ------------------------------

    def companion_prefix(self, kind: str) -> str:
        """The key prefix of a companion store (``it``: items). In a cluster all its
        keys share one hash tag: its scripts span namespaces (a batch of writes is
        atomic across them), so they stay in one slot."""
        if self._spread is None:
            return f"{self.prefix}:{kind}:"
        return f"{self.prefix}:{kind}:{{{self.prefix}:{kind}}}:"

    def run_script(
        self, script: Any, keys: list[str], args: list[Any], *, route: str = "", write: bool = True
    ) -> Any:
        """A companion's script call: as is on one server; in a cluster routed by its
        first key (else ``route``, a key of its slot), and a write acknowledged by
        replicas as the fact store's are."""
        if self._spread is None:
            return script(keys=keys, args=args)
        keys = keys or [route]
        if not write:
            return script(keys=keys, args=args)
        return self._spread.run(keys[0], lambda pipe: script(keys=keys, args=args, client=pipe))[0]

    def run_commands(self, route: str, queue: Callable[[Any], None]) -> list[Any]:
        """Commands of one slot (``queue(pipe)``, ``route`` a key of it) in one round
        trip; in a cluster acknowledged by replicas as the scripts are."""
        if self._spread is None:
            pipe = self._client.pipeline(transaction=False)
            queue(pipe)
            return list(pipe.execute())
        return self._spread.run(route, queue)

    # -- plumbing ----------------------------------------------------------

    def _call(self, operation: Callable[[], _T]) -> _T:
        with unavailable("the fact store", self.url):
            self._ensure_layout()
            return operation()

    def _found_layout(self) -> int:
        """The namespace's recorded layout (0: none); newer than this code -> error."""
        what = f"the Redis namespace {self.prefix!r}"
        return recorded_layout(self._client, self._k("layout"), self._layout, what)

    def _ensure_layout(self) -> None:
        if self._layout_checked:
            return
        with self._layout_lock:
            if self._layout_checked:
                return
            if self._found_layout() < int(self._layout):
                self._reindex()
                self._set_layout(keys=[self._k("layout")], args=[self._layout])
            self._layout_checked = True

    def close(self) -> None:
        """Disconnect; the client reconnects on its next use."""
        if self._spread is None:
            self._client.close()
            return
        for node in self._client.get_nodes():  # RedisCluster.close() forgets the nodes
            if node.redis_connection is not None:
                node.redis_connection.connection_pool.disconnect()

    def destroy(self) -> int:
        """Delete every key under this store's prefix: its facts, windows, items and
        vector indexes of every size, and their layout versions (see
        :mod:`fastaiagent.facts.redis.teardown`); other stores' keys are never
        touched, on one server or a Redis Cluster. Returns how many keys it deleted.

        For tearing down a tenant: stop the processes using the store first (a key
        written meanwhile may stay). This store can be used again afterwards and
        starts empty; window, item and vector stores taken from it before must be
        taken again."""
        from fastaiagent.facts.redis.teardown import delete_prefix

        with unavailable("the fact store", self.url):
            deleted = delete_prefix(self._client, self.prefix)
        self._layout_checked = False
        self._forget_vector_indexes()
        return deleted

    # -- writes ------------------------------------------------------------

    def _fields(self, fact: Fact, key: str) -> dict[str, str]:
        """The hash fields of a new fact, ``row`` aside."""
        return {
            "fact": fact.fact,
            "fact_key": key,
            "digest": text_digest(key),
            "scope": fact.scope,
            "scope_id": fact.scope_id,
            "project_id": fact.project_id,
            "confidence": repr(float(fact.confidence)),
            "source": fact.source,
            "source_trace_id": fact.source_trace_id or "",
            "created_at": repr(float(fact.created_at)),
            "superseded_by": "",
            "metadata": json.dumps(fact.metadata),
            "valid_from": stored_time(fact.valid_from),
            "valid_to": stored_time(fact.valid_to),
        }

    def _create_args(self, fact: Fact) -> list[str]:
        """What ``create`` in the scripts takes: score, row head and tail, digest,
        valid_to, then the hash's field/value pairs."""
        key = normalize_text(fact.fact)
        head, tail = row_parts(fact)
        fields = self._fields(fact, key)
        pairs = chain.from_iterable(fields.items())
        return [fields["created_at"], head, tail, fields["digest"], fields["valid_to"], *pairs]

    def _queue_create(self, pipe: Any, fact_id: int, fact: Fact, key: str) -> None:
        """Queue a new fact's keys on a pipeline under a fresh id: for bulk loads
        (benchmarks, tests). :meth:`add` is the safe way to write a fact."""
        self._queue_create_many(pipe, [(fact_id, fact, key)])

    def _queue_create_many(self, pipe: Any, facts: list[tuple[int, Fact, str]]) -> None:
        """Queue new facts (id, fact, normalised text) on a pipeline, one command per
        key they share (a sorted set gets all its members in one ZADD): the bulk
        load of benchmarks and tests, tens of times fewer commands than a fact at
        a time. :meth:`add` is the safe way to write a fact."""
        if self._spread is not None:
            raise UsageError("bulk loads write a single server's layout: on a cluster, use add()")
        zsets: dict[str, dict[str, float]] = defaultdict(dict)
        sets: dict[str, list[int | str]] = defaultdict(list)
        for fact_id, fact, key in facts:
            subject = self._subject(fact.scope, fact.scope_id, fact.project_id)
            fields = self._fields(fact, key)
            member, row = sorted_member(fact_id), fact_row(fact_id, fact)
            pipe.hset(self._fact_key(fact_id), mapping={**fields, "row": row})
            pipe.set(self._k("key", *subject, fields["digest"]), fact_id)
            zsets[self._k("active", *subject)][member] = fact.created_at
            if fact.valid_to is None:
                zsets[self._k("rows", *subject)][member + row] = fact.created_at
            else:
                zsets[self._k("exp", *subject)][member + row] = fact.valid_to
                zsets[self._k("expiry")][member] = fact.valid_to
                # a marker per fact (the scripts fold them into one at the next write)
                zsets[self._k("rows", *subject)]["~" + repr(fact.valid_to)] = float("inf")
            zsets[self._scope_key(fact.scope, fact.project_id)][member] = fact.created_at
            zsets[self._k("all")][member] = fact.created_at
            sets[self._k("hist", *subject)].append(fact_id)
            sets[self._k("subjects")].append(":".join(subject))
        for name, scores in zsets.items():
            pipe.zadd(name, scores)
        for name, members in sets.items():
            pipe.sadd(name, *members)

    def _read_fact(self, pipe: Any, fact_id: int) -> Fact | None:
        raw = pipe.hgetall(self._fact_key(fact_id))
        return parse_fact(fact_id, raw) if raw else None

    def _load_facts(self, ids: list[int]) -> list[Fact]:
        """These facts (missing ones left out), in one round trip (a cluster's
        pipeline: one per node)."""
        reader = self._client.pipeline(transaction=False)
        for fact_id in ids:
            reader.hgetall(self._fact_key(fact_id))
        raws = reader.execute()
        return [parse_fact(i, raw) for i, raw in zip(ids, raws, strict=False) if raw]

    def _write(self, script: Any, parts: tuple[str, str, str], args: list[Any], index: str = "") -> Any:
        """One write script on the subject ``parts`` (``index``: its last KEYS): as
        is on one server; in a cluster with the subject's slot counter as KEYS[1],
        routed to that slot and acknowledged by replicas."""
        keys = [index] if index else []
        if self._spread is None:
            return script(keys=keys, args=args)
        return self._spread.script(script, [*self._slot_keys(parts), *keys], args)

    def add(self, fact: Fact) -> int:
        """Store ``fact`` and return its id; the same normalised text in the same
        subject returns the one active fact's id, also under concurrent writers."""
        fact = validate_for_write(fact)
        subject = self._subject(fact.scope, fact.scope_id, fact.project_id)
        args = [self.prefix, *subject, *self._create_args(fact)]
        return int(self._call(lambda: self._write(self._add, subject, args)))

    def supersede(self, old_id: int, new_id: int, *, at: float | None = None) -> None:
        """Mark ``old_id`` replaced by ``new_id`` (same subject; no self or cycle)."""
        old_id, new_id = check_fact_id(old_id), check_fact_id(new_id)
        if old_id == new_id:
            raise InvalidValueError(f"fact #{old_id} cannot supersede itself")
        when = repr(moment_or_now(at))
        if self._spread is None:
            reply = self._call(lambda: self._supersede(args=[self.prefix, old_id, new_id, when]))
        else:
            reply = self._call(lambda: self._cluster_supersede(old_id, new_id, when))
        if isinstance(reply, list):
            raise _refusal(reply)

    def update(self, new: Fact, old_id: int) -> int:
        """Add ``new`` and supersede ``old_id`` with it, in one atomic step; a
        refused update writes nothing."""
        new = validate_for_write(new)
        old_id = check_fact_id(old_id)
        subject = self._subject(new.scope, new.scope_id, new.project_id)
        args = [self.prefix, *subject, old_id, *self._create_args(new)]
        if self._spread is not None and old_id % SLOTS != slot_of(":".join(subject)):
            reply = self._call(lambda: self._elsewhere(old_id))  # never this subject's
        else:
            reply = self._call(lambda: self._write(self._update, subject, args))
        if isinstance(reply, list):
            raise _refusal(reply, new)
        return int(reply)

    def _delete_by_id(self, selector: Selector, fact_id: int, key: str | None) -> int:
        """Delete one fact when it is in the selected subjects (and has text ``key``)."""
        if selector.scope_id is None:  # a fact's subject never changes: read it first
            scope, scope_id, project = self._client.hmget(
                self._fact_key(fact_id), "scope", "scope_id", "project_id"
            )
            if scope != selector.scope or project != selector.project_id:
                return 0
            subject = self._subject(scope, scope_id, project)
        else:
            subject = self._subject(selector.scope, selector.scope_id, selector.project_id)
        return int(self._write(self._delete_id, subject, [self.prefix, *subject, fact_id, key or ""]))

    def _delete_subject(self, parts: tuple[str, str, str]) -> int:
        """Delete one subject (escaped parts) in atomic steps of ``delete_batch`` facts."""
        count = 0
        while True:
            args = [self.prefix, *parts, self.delete_batch]
            deleted, taken = self._write(self._delete_some, parts, args)
            count += int(deleted)
            if int(taken) < self.delete_batch:
                return count

    def _delete_text_in(self, subjects: list[tuple[str, str, str]], key: str) -> int:
        """Delete every fact with normalised text ``key`` (active and superseded) of
        these subjects (escaped parts). Their first steps share pipelines that drop
        at most about ``delete_batch`` facts (Redis runs a pipeline's calls back to
        back); a subject with more of that text goes on step by step."""
        digest, batch, total = text_digest(key), self.delete_batch, 0
        if self._spread is not None:  # a slot at a time
            for parts in subjects:
                more = True
                while more:
                    args = [self.prefix, *parts, key, digest, batch]
                    deleted, taken = self._write(self._delete_text, parts, args)
                    total, more = total + int(deleted), int(taken) >= batch
            return total
        chunk = max(1, batch // 4)
        for start in range(0, len(subjects), chunk):
            group = subjects[start : start + chunk]
            first = max(1, batch // len(group) - 1)  # the active fact plus `first` old ones
            pipe = self._client.pipeline(transaction=False)
            for parts in group:
                self._delete_text(args=[self.prefix, *parts, key, digest, first], client=pipe)
            for parts, (deleted, taken) in zip(group, pipe.execute(), strict=True):
                total += int(deleted)
                more = int(taken) >= first  # more of that text here: go on step by step
                while more:
                    deleted, taken = self._delete_text(
                        args=[self.prefix, *parts, key, digest, batch]
                    )
                    total += int(deleted)
                    more = int(taken) >= batch
        return total

    def _delete_subjects(self, subjects: list[tuple[str, str, str]], key: str | None) -> int:
        """Delete these subjects (escaped parts), or their facts with text ``key``.
        Small subjects share a pipeline of at most ``delete_batch`` facts (Redis
        runs a pipeline's calls back to back); larger ones go step by step."""
        if key is not None:
            return self._delete_text_in(subjects, key)
        if self._spread is not None:  # a slot at a time
            return sum(self._delete_subject(parts) for parts in subjects)
        sizer = self._client.pipeline(transaction=False)
        for parts in subjects:
            sizer.scard(self._sk("hist", parts))
        sizes = sizer.execute()
        total, batch = 0, self.delete_batch
        pending: list[tuple[str, str, str]] = []
        budget = 0

        def flush() -> int:
            pipe = self._client.pipeline(transaction=False)
            for parts in pending:
                self._delete_some(args=[self.prefix, *parts, batch], client=pipe)
            done = 0
            for parts, (deleted, taken) in zip(pending, pipe.execute(), strict=True):
                done += int(deleted)
                if int(taken) >= batch:  # it grew meanwhile: finish it step by step
                    done += self._delete_subject(parts)
            pending.clear()
            return done

        for parts, size in zip(subjects, sizes, strict=True):
            if int(size) >= batch:
                total += self._delete_subject(parts)
                continue
            if budget + int(size) > batch:
                total += flush()
                budget = 0
            pending.append(parts)
            budget += max(1, int(size))
        return total + (flush() if pending else 0)

    def _delete_every(self, selector: Selector, key: str | None) -> int:
        """Every subject of a scope and project, found ``_SUBJECT_PAGE`` at a time
        with SSCAN (never one command over every subject)."""
        members = self._scope_members(selector)
        total = 0
        while page := [m for _, m in zip(range(_SUBJECT_PAGE), members, strict=False)]:
            total += self._delete_subjects([_parts(m) for m in page], key)
        return total

    def delete_rows(self, selector: Selector, key: str | None, wanted_id: int | None) -> int:
        """Hard-delete a subject's facts and history (or only ``key`` / ``wanted_id``).

        ``wanted_id`` is one atomic script. ``key`` removes every fact with that
        normalised text, active (its content key) and superseded (the text's
        ``old:`` set), in atomic steps, never reading the subject. A whole
        subject goes in atomic steps of :attr:`delete_batch` facts (a fact added
        meanwhile may go too), and ``"*"`` walks the subjects with SSCAN."""

        def run() -> int:
            if wanted_id is not None:  # with fact=: only when that id has that text
                return self._delete_by_id(selector, wanted_id, key)
            if selector.scope_id is None:
                return self._delete_every(selector, key)
            parts = self._subject(selector.scope, selector.scope_id, selector.project_id)
            return self._delete_subjects([parts], key)

        return self._call(run)

    def prune_learned(self, scope: str, scope_id: str, project_id: str = "", *, keep: int) -> int:
        """Delete the oldest run-learned active facts beyond ``keep`` (across every
        subject for ``"*"``); returns the count. Each step is atomic."""
        keep = integer("keep", keep, minimum=0)
        selector = delete_selector(scope, scope_id, project_id)
        if selector.scope_id is None:
            if self._spread is not None:
                return self._call(lambda: self._spread_prune_learned(selector, keep))
            index, parts = self._scope_key(selector.scope, selector.project_id), None
        else:
            parts = self._subject(selector.scope, selector.scope_id, selector.project_id)
            index = self._sk("active", parts)

        def run() -> int:
            total = 0
            while True:
                args = [self.prefix, keep, self.delete_batch, SOURCE_CONVERSATION]
                if parts is None:
                    deleted = int(self._prune(keys=[index], args=args))
                else:
                    deleted = int(self._write(self._prune, parts, args, index))
                total += deleted
                if deleted < self.delete_batch:
                    return total

        return self._call(run)

    # -- reads -------------------------------------------------------------

    def get(self, fact_id: int) -> Fact | None:
        """The fact with this id, active or superseded, or None."""
        fact_id = check_fact_id(fact_id)
        return self._call(lambda: self._read_fact(self._client, fact_id))

    def _newest(
        self, index_key: str, limit: int | None, offset: int, now: float | None
    ) -> list[Fact]:
        """Facts of an active index valid at ``now`` (None: any), read one by one on
        the server (the slow path)."""
        reply = self._read_newest(
            keys=[index_key],
            args=[
                self._k("fact", ""),
                -1 if limit is None else limit,
                offset,
                "" if now is None else repr(now),
            ],
        )
        facts = []
        for row in json.loads(reply):
            if len(row) >= ROW_LEN:
                facts.append(fact_of_row(row))
            elif (fact := self._read_fact(self._client, row[0])) is not None:
                facts.append(fact)
        return facts

    def _subject_newest(
        self, subject: tuple[str, str, str], limit: int | None, offset: int, now: float | None
    ) -> list[Fact]:
        """A subject's newest facts valid at ``now`` (None: any). The per-turn read
        is one ZREVRANGE of its rows when no fact with an end can still be valid
        (no marker, or the marker's latest end has passed); otherwise one script
        call adds its rows that end after ``now`` (by score, so no expired row is
        read). One JSON parse either way."""
        rows_key = self._sk("rows", subject)
        if offset == 0 and now is not None:
            entries = self._client.zrevrange(rows_key, 0, -1 if limit is None else limit)
            if not entries or entries[0][0] != "~":
                return row_facts(entries[:limit], now)
            ended = len(entries) < 2 or entries[1][0] != "~"  # one marker, as the scripts keep it
            if ended and float(entries[0][1:]) <= now:  # every fact with an end has expired
                return row_facts(entries[1 : None if limit is None else limit + 1], now)
        stop = -1 if limit is None else offset + limit
        lowest = "-inf" if now is None else f"({now!r}"
        keys = [rows_key, self._sk("exp", subject)]
        open_rows, ending = self._subject_read(keys=keys, args=[stop, lowest])
        open_rows = [entry for entry in open_rows if entry[0] != "~"]
        facts = parse_rows(open_rows)
        if ending:
            facts = sorted(facts + parse_rows(ending), key=_newest_first)
        if now is not None:  # a fact can start later than it was written (valid_from)
            facts = [f for f in facts if f.valid_from is None or f.valid_from <= now]
        return facts[offset:] if limit is None else facts[offset : offset + limit]

    def read_active(
        self, selector: Selector, limit: int | None, offset: int, now: float | None, include_expired: bool
    ) -> list[Fact]:
        """Active facts of a subject valid at ``now``, newest first; ``"*"`` reads
        every subject."""
        when = None if include_expired else moment_or_now(now)
        if selector.scope_id is None and self._spread is not None:
            return self._call(lambda: self._spread_newest(selector, limit, offset, when))
        if selector.scope_id is None:
            index = self._scope_key(selector.scope, selector.project_id)
            return self._call(lambda: self._newest(index, limit, offset, when))
        subject = self._subject(selector.scope, selector.scope_id, selector.project_id)
        return self._call(lambda: self._subject_newest(subject, limit, offset, when))

    def read_as_of(self, selector: Selector, when: float, limit: int | None, offset: int) -> list[Fact]:
        """What the store held for the subject at ``when``: an audit read of the
        subject's history set (every subject of the scope for ``"*"``)."""

        def run() -> list[Fact]:
            ids: set[str] = set()
            for parts in self._selected_subjects(selector):
                ids |= self._client.smembers(self._sk("hist", parts))
            facts = sorted(
                (f for f in self._load_facts(sorted(map(int, ids))) if _held_at(f, when)),
                key=_newest_first,
            )
            return facts[offset:] if limit is None else facts[offset : offset + limit]

        return self._call(run)

    def _selected_subjects(self, selector: Selector) -> list[tuple[str, str, str]]:
        """The escaped parts of the subjects a selector covers."""
        if selector.scope_id is not None:
            return [self._subject(selector.scope, selector.scope_id, selector.project_id)]
        return [_parts(m) for m in self._scope_members(selector)]

    def _scope_members(self, selector: Selector) -> Iterator[str]:
        """The subjects of a selector's scope and project, by SSCAN (a page at a time)."""
        project, scope = self._subject(selector.scope, "", selector.project_id)[:2]
        return self._members(f"{project}:{scope}:")

    def _members(self, head: str = "") -> Iterator[str]:
        """Every subject (escaped ``project:scope:scope_id``) starting with ``head``,
        by SSCAN of the subjects set (a cluster: of each slot's, found by SCAN)."""
        match = glob_escape(head) + "*" if head else None
        if self._spread is None:
            yield from self._client.sscan_iter(self._k("subjects"), match=match, count=_SUBJECT_PAGE)
            return
        sets = self._client.scan_iter(match=glob_escape(self._k("subjects")) + ":*", count=1000)
        for key in list(sets):
            yield from self._client.sscan_iter(key, match=match, count=_SUBJECT_PAGE)

    def replaced(self, fact_id: int) -> list[Fact]:
        """The facts ``fact_id`` superseded directly (its ``prev:`` set)."""
        wanted = check_fact_id(fact_id)

        def run() -> list[Fact]:
            if self._spread is None:
                key = self._k("prev", str(wanted))
            else:
                key = self._spread.prev_key(wanted)
            ids = sorted(map(int, self._client.smembers(key)))
            return sorted(self._load_facts(ids), key=_newest_first)

        return self._call(run)

    def expire(self, scope: str, scope_id: str, project_id: str, fact_id: int, at: float) -> bool:
        """Set an active fact's ``valid_to`` to ``at``; False when it is not there."""
        selector = delete_selector(scope, scope_id, project_id)
        wanted, when = check_fact_id(fact_id), moment_or_now(at)

        def run() -> bool:
            fact = self._read_fact(self._client, wanted)
            if fact is None or (fact.scope, fact.project_id) != (selector.scope, selector.project_id):
                return False
            if selector.scope_id is not None and fact.scope_id != selector.scope_id:
                return False
            ended = dataclasses.replace(fact, valid_to=when, superseded_by=None)
            subject = self._subject(fact.scope, fact.scope_id, fact.project_id)
            args = [self.prefix, *subject, wanted, repr(when), fact_row(wanted, ended)]
            return bool(int(self._write(self._expire, subject, args)))

        return self._call(run)

    def prune_history(
        self, before: float, *, project_id: str | None = None, limit: int = DELETE_BATCH
    ) -> int:
        """Delete up to ``limit`` facts expired or superseded before ``before``
        (from the ``expiry`` and ``retired`` sets), in steps of :attr:`delete_batch`."""
        cutoff, project, limit = history_cutoff(before, project_id, limit)
        scoped = ["0", ""] if project is None else ["1", project]
        if self._spread is not None:
            return self._call(lambda: self._spread_prune_history(cutoff, scoped, limit))

        def run() -> int:
            total = 0
            while total < limit:
                budget = min(self.delete_batch, limit - total)
                args = [self.prefix, repr(cutoff), budget, *scoped]
                deleted = int(self._prune_history(args=args))  # one server: its global sets
                total += deleted
                if deleted < budget:
                    break
            return total

        return self._call(run)

    def _find(self, selector: Selector, key: str) -> Fact | None:
        """The active fact of one subject with normalised text ``key``: its content key."""
        subject = self._subject(selector.scope, selector.scope_id or "", selector.project_id)
        fact_id = self._client.get(self._sk("key", subject, text_digest(key)))
        if fact_id is None:
            return None
        fact = self._read_fact(self._client, int(fact_id))
        if fact is None or not fact.active or normalize_text(fact.fact) != key:
            return None  # superseded or deleted meanwhile
        return fact

    def find_active(self, scope: str, scope_id: str, project_id: str, text: str) -> Fact | None:
        """The subject's active fact with this normalised text (its content key)."""
        read_selector(scope, scope_id, project_id)  # checks the scope and the id types
        key = check_fact_text(text)
        selector = Selector(scope, scope_id, project_id)
        return self._call(lambda: self._find(selector, key))

    def browse_facts(self, wanted: BrowseFilter) -> list[Fact]:
        """Facts across subjects, newest first; filters apply before the limit."""
        when, needle = wanted.valid_at, wanted.text.casefold() if wanted.text else None

        def keep(f: Fact) -> bool:
            return (
                (wanted.scope is None or f.scope == wanted.scope)
                and (wanted.scope_id is None or f.scope_id == wanted.scope_id)
                and (wanted.project_id is None or f.project_id == wanted.project_id)
                and (wanted.include_superseded or f.active)
                and (when is None or f.valid_at(when))
                and (needle is None or needle in f.fact.casefold())
            )

        if wanted.scope is not None and wanted.scope_id is not None and wanted.project_id is not None:
            return self._call(lambda: self._subject_browse(wanted, keep))
        if self._spread is not None:
            return self._call(lambda: self._spread_browse(wanted, keep))

        def run() -> list[Fact]:
            limit, skip, start, page = wanted.limit, wanted.offset, 0, 500
            out: list[Fact] = []
            while len(out) < limit:
                members = self._client.zrevrange(self._k("all"), start, start + page - 1)
                if not members:
                    break
                for fact in self._load_facts([int(m) for m in members]):
                    if not keep(fact):
                        continue
                    if skip:
                        skip -= 1
                        continue
                    out.append(fact)
                    if len(out) >= limit:
                        break
                start += page
            return out

        return self._call(run)

    def _subject_browse(self, wanted: BrowseFilter, keep: Callable[[Fact], bool]) -> list[Fact]:
        """A browse of one subject reads its history set, never the store's other
        facts. Unfiltered (history and expired ones included: what an export, an
        import and a forget read), a page loads only its own facts, ordered by
        each fact's ``created_at`` (one small read a fact)."""
        assert wanted.scope is not None and wanted.scope_id is not None and wanted.project_id is not None
        parts = self._subject(wanted.scope, wanted.scope_id, wanted.project_id)
        ids = [int(i) for i in self._client.smembers(self._sk("hist", parts))]
        end = wanted.offset + wanted.limit
        if wanted.include_superseded and wanted.valid_at is None and wanted.text is None:
            reader = self._client.pipeline(transaction=False)
            for fact_id in ids:
                reader.hget(self._fact_key(fact_id), "created_at")
            times = reader.execute()
            newest = sorted(
                ((float(at), i) for at, i in zip(times, ids, strict=True) if at is not None), reverse=True
            )
            page = [i for _, i in newest[wanted.offset : end]]
            return sorted(self._load_facts(page), key=_newest_first)
        found = [f for f in self._load_facts(ids) if keep(f)]
        return sorted(found, key=_newest_first)[wanted.offset : end]

    def subjects(self, *, include_superseded: bool = False) -> list[SubjectCount]:
        """Every ``scope:scope_id`` (per project) with its fact count."""

        def run() -> list[SubjectCount]:
            members = sorted(set(self._members()))
            parsed = [tuple(unescape_part(p) for p in m.split(":")) for m in members]
            counter = self._client.pipeline(transaction=False)
            for project, scope, scope_id in parsed:
                if include_superseded:
                    counter.scard(self._hist_key(scope, scope_id, project))
                else:
                    counter.zcard(self._active_key(scope, scope_id, project))
            out = [
                SubjectCount(scope, scope_id, project, int(count))
                for (project, scope, scope_id), count in zip(
                    parsed, counter.execute(), strict=False
                )
                if count
            ]
            return sorted(out, key=lambda s: (s.scope, s.scope_id, s.project_id))

        return self._call(run)

    # -- upgrades ----------------------------------------------------------

    def reindex(self) -> int:
        """Bring every fact hash of the namespace to this layout and into the
        indexes (facts written by an older SDK, or by one still running), then
        drop rows of facts that are no longer active; safe to repeat, and
        writes nothing when all is in place. Returns how many facts it saw.
        Refuses (SchemaVersionError) a namespace of a newer layout."""
        with unavailable("the fact store", self.url):
            self._found_layout()
            count = self._reindex()
            self._set_layout(keys=[self._k("layout")], args=[self._layout])
            return count

    def _scan(self, kind: str) -> Iterator[str]:
        """Keys ``<prefix>:<kind>:*`` of this namespace only."""
        return self._client.scan_iter(match=glob_escape(self._k(kind)) + ":*", count=1000)

    def _reindex(self) -> int:
        if self._spread is not None:
            return self._spread_reindex()
        batch: list[str] = []
        seen = highest = 0
        for key in self._scan("fact"):
            if key.rsplit(":", 1)[1].isdigit():
                batch.append(key)
            if len(batch) >= 500:
                seen, highest = self._index_batch(batch, seen, highest)
                batch = []
        if batch:
            seen, highest = self._index_batch(batch, seen, highest)
        if highest:
            self._raise_seq(keys=[self._k("seq")], args=[highest])
        self._prune_stale_rows()
        return seen

    def _index_batch(self, keys: list[str], seen: int, highest: int) -> tuple[int, int]:
        """Index these fact hashes, one script each (pipelined). The text and
        subject of a fact never change, so they are read here; its state
        (superseded or not) is read by the script, so a fact another writer
        supersedes meanwhile is never put back as active."""
        reader = self._client.pipeline(transaction=False)
        for key in keys:
            reader.hgetall(key)
        writer = self._client.pipeline(transaction=False)
        for key, raw in zip(keys, reader.execute(), strict=False):
            if not raw or "fact" not in raw:
                continue
            fact_id = int(key.rsplit(":", 1)[1])
            self._index(args=self._index_args(parse_fact(fact_id, raw), raw), client=writer)
            seen, highest = seen + 1, max(highest, fact_id)
        writer.execute()
        return seen, highest

    def _index_args(self, fact: Fact, raw: dict[str, str]) -> list[Any]:
        """The INDEX script's arguments for a fact hash (``raw``)."""
        assert fact.id is not None
        text_key = normalize_text(fact.fact)
        return [
            self.prefix,
            *self._subject(fact.scope, fact.scope_id, fact.project_id),
            fact.id,
            repr(float(fact.created_at)),
            text_key,
            text_digest(text_key),
            raw.get("row") or fact_row(fact.id, fact),
        ]

    def _prune_stale_rows(self) -> None:
        """Drop rows (and active entries) of facts an older writer superseded or
        deleted; up to 200 subjects a round trip, each checked by atomic steps."""
        rows_prefix = self._k("rows") + ":"
        fact_prefix = self._k("fact", "")
        subjects = self._scan("rows")
        while batch := [key for _, key in zip(range(200), subjects, strict=False)]:
            work: list[tuple[list[str], int]] = []
            for rows_key in batch:
                subject = rows_key[len(rows_prefix) :]  # project:scope:scope_id, escaped
                project, scope, _ = subject.split(":")
                keys = [rows_key, self._k("active", subject), self._k("scope", project, scope)]
                work.append((keys, 0))
            while work:
                pruner = self._client.pipeline(transaction=False)
                for keys, rank in work:
                    self._prune_rows(keys=keys, args=[fact_prefix, rank, 500], client=pruner)
                done = pruner.execute()
                work = [(keys, int(rank)) for (keys, _), rank in zip(work, done, strict=False)]
                work = [(keys, rank) for keys, rank in work if rank >= 0]
