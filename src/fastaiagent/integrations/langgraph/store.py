"""A LangGraph ``BaseStore`` (long-term memory) on this library's stores.

Items live as namespaced items (:mod:`fastaiagent.facts.items`) under
``("langgraph", project_id, "store", *namespace)``. A stored value is JSON:
``{"v": <the item's value>, "e": [<vectors>]}``, where the vectors (float32,
unit length, base64) are the item's indexed fields embedded at write time, so
a search by meaning embeds only the query. Filters and ranking run in
process over the items under the searched prefix: a search reads every live
item there (keep namespaces per user or topic, as LangGraph suggests).
"""

from __future__ import annotations

import asyncio
import base64
import json
import math
import time
from array import array
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timezone
from itertools import islice
from typing import Any

from fastaiagent._io import decode_own_json
from fastaiagent._optional import require
from fastaiagent.errors import InvalidValueError
from fastaiagent.facts.items import ItemWrite, Namespace, StoredItem
from fastaiagent.integrations.items import item_store_for, root_namespace
from fastaiagent.kb.embedding import get_embedder
from fastaiagent.kb.similarity import best_unit_cosines
from fastaiagent.recall.given import Given, rank_given
from fastaiagent.recall.query import read_query
from fastaiagent.recall.weights import FETCH_FACTOR

require("langgraph.store.base", "langgraph")

from langgraph.store.base import (  # noqa: E402
    BaseStore,
    GetOp,
    IndexConfig,
    Item,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    TTLConfig,
    ensure_embeddings,
    get_text_at_path,
    validate_op_namespace,
)

__all__ = ["FastAIAgentStore"]

EmbedTexts = Callable[[list[str]], list[list[float]]]
_OPERATORS: dict[str, Callable[[Any, Any], bool]] = {
    "$eq": lambda a, b: a == b,
    "$ne": lambda a, b: a != b,
    "$gt": lambda a, b: a is not None and a > b,
    "$gte": lambda a, b: a is not None and a >= b,
    "$lt": lambda a, b: a is not None and a < b,
    "$lte": lambda a, b: a is not None and a <= b,
}


def _embedder(embed: Any) -> EmbedTexts:
    """A batch embedding function from this library's embedders (an ``Embedder``,
    or a name ``get_embedder`` knows: "local", "openai", "auto") or from what
    LangGraph accepts (a LangChain ``Embeddings`` or a function of texts)."""
    if isinstance(embed, str) and embed.split(":")[0] in ("auto", "local", "openai"):
        embed = get_embedder(embed)
    if hasattr(embed, "embed") and hasattr(embed, "dimension"):
        return embed.embed
    return ensure_embeddings(embed).embed_documents


def _pack(vector: Sequence[float]) -> str:
    """A unit-length float32 vector as base64: the stored form of an item's vectors."""
    norm = math.sqrt(sum(x * x for x in vector)) or 1.0
    return base64.b64encode(array("f", [x / norm for x in vector]).tobytes()).decode("ascii")


def _unpack(text: str) -> array[float]:
    vector = array("f")
    vector.frombytes(base64.b64decode(text))
    return vector


def _matches(value: Any, wanted: Any) -> bool:
    """LangGraph's filter semantics: nested dicts match field by field, ``$`` keys
    are operators ($eq, $ne, $gt, $gte, $lt, $lte), anything else is equality."""
    if isinstance(wanted, dict):
        if any(k.startswith("$") for k in wanted):
            for op, operand in wanted.items():
                if op not in _OPERATORS:
                    raise InvalidValueError(f"unknown filter operator {op!r}: use one of {sorted(_OPERATORS)}")
                try:
                    if not _OPERATORS[op](value, operand):
                        return False
                except TypeError:  # e.g. "a" > 1: no match, as in a JSON store
                    return False
            return True
        return isinstance(value, dict) and all(_matches(value.get(k), v) for k, v in wanted.items())
    return bool(value == wanted)


def _namespace_matches(condition: MatchCondition, namespace: Namespace) -> bool:
    path = tuple(condition.path)
    if len(namespace) < len(path):
        return False
    part = namespace[: len(path)] if condition.match_type == "prefix" else namespace[len(namespace) - len(path) :]
    return all(p == "*" or p == n for p, n in zip(path, part, strict=True))


Hit = tuple[StoredItem, dict[str, Any], float | None]


def _rank(embed: EmbedTexts, query: str, hits: list[Hit], fields: Sequence[str], wanted: int) -> list[Hit]:
    """Best first through the recall pipeline (:func:`fastaiagent.recall.given.rank_given`):
    the cosine of the query and each item's closest vector (its score) as the side by
    meaning, BM25 over the item's indexed ``fields`` as the keyword side, and the cues
    of the query (the time it names, "now" / "at first": items by their last write).
    Each side puts its ``wanted`` x FETCH_FACTOR best forward; the other items follow by
    cosine, and items without vectors (not indexed) come last, unscored. The ``wanted``
    first are returned."""
    read = read_query(query, now=time.time())
    wanted_vector = embed([read.said])[0]
    indexed = [hit for hit in hits if hit[1]["e"]]
    cosines = best_unit_cosines(wanted_vector, (map(_unpack, record["e"]) for _, record, _ in indexed))
    given = Given([_text(record["v"], fields) for _, record, _ in indexed], [stored.updated_at for stored, _, _ in indexed])
    by_cosine = sorted(range(len(indexed)), key=cosines.__getitem__, reverse=True)
    ranked = rank_given(
        read, given, [(str(n), c) for n, c in enumerate(cosines)], fetch=wanted * FETCH_FACTOR,
        rest=map(str, by_cosine),
    )  # fmt: skip
    best = [(*indexed[n][:2], cosines[n]) for n in (int(found.chunk.id) for found in islice(ranked, wanted))]
    return best + [hit for hit in hits if not hit[1]["e"]][: wanted - len(best)]


def _text(value: dict[str, Any], fields: Sequence[str]) -> str:
    """The text of an item's indexed fields (what its vectors embed), for the keyword side."""
    return "\n".join(text for path in fields for text in _at_path(value, path))


_PATH_SYNTAX = frozenset(".[]{}*$")


def _at_path(value: dict[str, Any], path: str) -> list[str]:
    """``get_text_at_path``: a field named plainly that holds a string is read directly
    (every search reads every item's fields; the general path reader is the slow part)."""
    if path and _PATH_SYNTAX.isdisjoint(path) and isinstance(text := value.get(path), str):
        return [text]
    return get_text_at_path(value, path)


def _when(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, tz=timezone.utc)


class FastAIAgentStore(BaseStore):
    """LangGraph ``BaseStore`` on a fastaiagent store (SQLite, Postgres or Redis).

    ``location`` is what ``Memory(location=...)`` takes, or a
    :class:`~fastaiagent.Memory`. ``index`` turns on search by meaning:
    ``{"embed": ..., "fields": [...]}`` where ``embed`` is one of this
    library's embedders (an ``Embedder`` instance or ``"local"`` /
    ``"openai"``) or anything LangGraph accepts (a LangChain ``Embeddings``, a
    function of a list of texts); ``fields`` (default ``["$"]``, the whole
    value) are the JSON paths embedded. ``ttl`` is LangGraph's ``TTLConfig``
    (``default_ttl`` in minutes, ``refresh_on_read``); expired items are never
    returned and are swept as the store writes (or by :meth:`sweep`).
    """

    supports_ttl = True

    def __init__(
        self, location: Any = "sqlite", *, project_id: str = "", index: IndexConfig | None = None, ttl: TTLConfig | None = None
    ) -> None:
        self.items = item_store_for(location)
        self._root = (*root_namespace("langgraph", project_id), "store")
        self.index_config = dict(index) if index else None
        self._embed: EmbedTexts | None = None
        self._fields: list[str] = ["$"]
        if index:
            if "embed" not in index:
                raise InvalidValueError('index needs "embed": an Embedder, "local", "openai" or an embeddings function')
            self._embed = _embedder(index["embed"])
            self._fields = list(index.get("fields") or ["$"])
        self.ttl_config = ttl

    def __repr__(self) -> str:
        return f"FastAIAgentStore(items={self.items!r}, search={'on' if self._embed else 'off'})"

    # -- batch --------------------------------------------------------------

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run ``ops`` in order (consecutive puts are one atomic write)."""
        ops = list(ops)
        for op in ops:
            validate_op_namespace(op)
        results: list[Result] = [None] * len(ops)
        pending: list[PutOp] = []
        for i, op in enumerate(ops):
            if isinstance(op, PutOp):
                pending.append(op)
                continue
            self._flush(pending)
            if isinstance(op, GetOp):
                results[i] = self._get(op)
            elif isinstance(op, SearchOp):
                results[i] = self._search(op)
            elif isinstance(op, ListNamespacesOp):
                results[i] = self._list_namespaces(op)
            else:
                raise InvalidValueError(f"unknown store operation {type(op).__name__}")
        self._flush(pending)
        return results

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """Async :meth:`batch`: the same work in a worker thread."""
        return await asyncio.to_thread(self.batch, list(ops))

    def sweep(self) -> int:
        """Delete expired items now (reads skip them anyway); returns the count."""
        return self.items.purge_expired()

    # -- operations ---------------------------------------------------------

    def _refresh(self, op: GetOp | SearchOp) -> bool:
        if self.ttl_config is not None and "refresh_on_read" in self.ttl_config:
            # LangGraph's ops default refresh_ttl to True; the store's setting wins then.
            return bool(op.refresh_ttl and self.ttl_config["refresh_on_read"])
        return bool(op.refresh_ttl)

    def _item(self, stored: StoredItem, value: Any) -> Item:
        return Item(
            value=value,
            key=stored.key,
            namespace=stored.namespace[len(self._root) :],
            created_at=_when(stored.created_at),
            updated_at=_when(stored.updated_at),
        )

    def _get(self, op: GetOp) -> Item | None:
        found = self.items.get((*self._root, *op.namespace), [str(op.key)], refresh_ttl=self._refresh(op))[0]
        return self._item(found, decode_own_json(found.value)["v"]) if found else None

    def _flush(self, pending: list[PutOp]) -> None:
        if not pending:
            return
        texts: list[str] = []
        owners: list[int] = []
        for n, op in enumerate(pending):
            if op.value is None or op.index is False or self._embed is None:
                continue
            for path in op.index or self._fields:
                found = get_text_at_path(op.value, path)
                texts += found
                owners += [n] * len(found)
        vectors: list[list[str]] = [[] for _ in pending]
        if texts and self._embed is not None:
            for owner, vector in zip(owners, self._embed(texts), strict=True):
                vectors[owner].append(_pack(vector))
        writes = []
        for op, packed in zip(pending, vectors, strict=True):
            ns = (*self._root, *op.namespace)
            if op.value is None:
                writes.append(ItemWrite(ns, str(op.key), None))
                continue
            record = json.dumps({"v": dict(op.value), "e": packed})
            ttl = None if op.ttl is None else op.ttl * 60.0
            writes.append(ItemWrite(ns, str(op.key), record, ttl_seconds=ttl))
        pending.clear()
        self.items.write(writes)

    def _search(self, op: SearchOp) -> list[SearchItem]:
        prefix = (*self._root, *op.namespace_prefix)
        ranked = bool(op.query and self._embed)
        hits: list[Hit]
        if not (op.filter or ranked):  # the store pages the answer itself
            found = self.items.scan(prefix, limit=op.limit, offset=op.offset)
            hits = [(s, decode_own_json(s.value), None) for s in found]
        else:
            hits = []
            for stored in self.items.scan(prefix):
                record = decode_own_json(stored.value)
                if not op.filter or _matches(record["v"], op.filter):
                    hits.append((stored, record, None))
            if op.query and self._embed is not None:
                hits = _rank(self._embed, op.query, hits, self._fields, op.offset + op.limit)
            hits = hits[op.offset : op.offset + op.limit]
        if self._refresh(op):
            self._refresh_found([s for s, _, _ in hits])
        return [
            SearchItem(
                namespace=s.namespace[len(self._root) :],
                key=s.key,
                value=r["v"],
                created_at=_when(s.created_at),
                updated_at=_when(s.updated_at),
                score=score,
            )
            for s, r, score in hits
        ]

    def _refresh_found(self, found: list[StoredItem]) -> None:
        by_namespace: dict[Namespace, list[str]] = {}
        for stored in found:
            if stored.ttl_seconds is not None:
                by_namespace.setdefault(stored.namespace, []).append(stored.key)
        for namespace, keys in by_namespace.items():
            self.items.get(namespace, keys, refresh_ttl=True)

    def _list_namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        conditions = tuple(op.match_conditions or ())
        fixed: tuple[str, ...] = ()
        for condition in conditions:  # the literal head of a prefix condition narrows the read
            if condition.match_type == "prefix":
                head = []
                for part in condition.path:
                    if part == "*":
                        break
                    head.append(part)
                fixed = tuple(head) if len(head) > len(fixed) else fixed
        seen: dict[tuple[str, ...], None] = {}
        for stored in self.items.namespaces((*self._root, *fixed)):
            namespace = stored[len(self._root) :]
            if all(_namespace_matches(c, namespace) for c in conditions):
                seen[namespace[: op.max_depth] if op.max_depth is not None else namespace] = None
        return sorted(seen)[op.offset : op.offset + op.limit]
