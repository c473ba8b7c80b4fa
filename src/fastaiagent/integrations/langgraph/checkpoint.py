"""A LangGraph checkpointer on this library's stores (SQLite, Postgres, Redis).

Thread state is kept as namespaced items (:mod:`fastaiagent.facts.items`):

- a checkpoint is one item in ``(root, "checkpoints", thread_id, checkpoint_ns)``
  keyed by its id; LangGraph's ids sort by time, so the newest is the last key;
- a task's pending writes are items in
  ``(root, "writes", thread_id, checkpoint_ns, checkpoint_id)`` keyed by
  ``task_id`` and write index.

Values are serialised with the saver's ``serde`` (LangGraph's own
``JsonPlusSerializer`` by default) and stored as text (base64 of its bytes).
"""

from __future__ import annotations

import asyncio
import base64
import builtins
import json
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator, Sequence
from typing import Any, Concatenate, ParamSpec, TypeVar

from fastaiagent._optional import require
from fastaiagent._validate import identifier, one_of
from fastaiagent.facts.items import ItemWrite, Namespace, StoredItem
from fastaiagent.integrations.items import item_store_for, root_namespace

require("langgraph.checkpoint.base", "langgraph")

from langchain_core.runnables import RunnableConfig  # noqa: E402
from langgraph.checkpoint.base import (  # noqa: E402
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    SerializerProtocol,
    get_checkpoint_id,
    get_checkpoint_metadata,
    writes_sort_key,
)

__all__ = ["FastAIAgentSaver"]

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")


def _pack(typed: tuple[str, bytes]) -> list[str]:
    return [typed[0], base64.b64encode(typed[1]).decode("ascii")]


def _unpack(packed: list[str]) -> tuple[str, bytes]:
    return packed[0], base64.b64decode(packed[1])


def _in_thread(
    method: Callable[Concatenate[Any, P], R],
) -> Callable[Concatenate[Any, P], Coroutine[Any, Any, R]]:
    """The async twin of a saver method: the same call (the instance's own, so an
    override counts) in a worker thread, so the event loop never waits on I/O."""
    name = method.__name__

    async def twin(self: Any, *args: P.args, **kwargs: P.kwargs) -> R:
        return await asyncio.to_thread(getattr(self, name), *args, **kwargs)

    twin.__name__ = twin.__qualname__ = f"a{name}"
    twin.__doc__ = f"Async :meth:`{name}`."
    return twin


def _listed_in_thread(
    method: Callable[Concatenate[Any, P], Iterator[T]],
) -> Callable[Concatenate[Any, P], AsyncIterator[T]]:
    """:func:`_in_thread` for a method returning an iterator: it is read to the end
    in the worker thread, then yielded from."""
    name = method.__name__

    async def twin(self: Any, *args: P.args, **kwargs: P.kwargs) -> AsyncIterator[T]:
        def read() -> builtins.list[T]:
            return builtins.list(getattr(self, name)(*args, **kwargs))

        for found in await asyncio.to_thread(read):
            yield found

    twin.__name__ = twin.__qualname__ = f"a{name}"
    twin.__doc__ = f"Async :meth:`{name}`."
    return twin


def _config(thread_id: str, checkpoint_ns: str, checkpoint_id: str) -> RunnableConfig:
    return {
        "configurable": {
            "thread_id": thread_id,
            "checkpoint_ns": checkpoint_ns,
            "checkpoint_id": checkpoint_id,
        }
    }


class FastAIAgentSaver(BaseCheckpointSaver[int]):
    """LangGraph checkpointer (``BaseCheckpointSaver``) on a fastaiagent store.

    ``location`` is what ``Memory(location=...)`` takes (``"sqlite"``,
    ``"sqlite:///path.db"``, ``postgresql://...``, ``redis://...``, a fact
    store) or a :class:`~fastaiagent.Memory`; the checkpoints live in the same
    database as its facts. ``project_id`` keeps several applications apart in
    one database. Sync and async methods are both native to LangGraph; the
    async ones run the store call in a worker thread, so the event loop never
    waits on I/O.

    Example::

        graph = builder.compile(checkpointer=FastAIAgentSaver("sqlite:///state.db"))
        graph.invoke(inputs, {"configurable": {"thread_id": "t1"}})
    """

    def __init__(
        self, location: Any = "sqlite", *, project_id: str = "", serde: SerializerProtocol | None = None
    ) -> None:
        super().__init__(serde=serde)
        self.items = item_store_for(location)
        self._root = root_namespace("langgraph", project_id)

    def __repr__(self) -> str:
        return f"FastAIAgentSaver(items={self.items!r})"

    # -- namespaces ---------------------------------------------------------

    def _checkpoints(self, *parts: str) -> Namespace:
        if parts:  # parts[0] is the thread id: the one id rule, as for every id
            identifier("thread_id", parts[0], allow_empty=True)
        return (*self._root, "checkpoints", *parts)

    def _writes(self, *parts: str) -> Namespace:
        if parts:
            identifier("thread_id", parts[0], allow_empty=True)
        return (*self._root, "writes", *parts)

    # -- records ------------------------------------------------------------

    def _tuple(self, item: StoredItem) -> CheckpointTuple:
        """The CheckpointTuple of a stored checkpoint, with its pending writes."""
        thread_id, checkpoint_ns = item.namespace[-2:]
        record = json.loads(item.value)
        writes = self.items.scan(self._writes(thread_id, checkpoint_ns, item.key), exact=True)
        rows = [json.loads(w.value) for w in writes]
        rows.sort(key=lambda r: writes_sort_key(r[3], r[0], r[4]))
        parent = record["p"]
        return CheckpointTuple(
            config=_config(thread_id, checkpoint_ns, item.key),
            checkpoint=self.serde.loads_typed(_unpack(record["c"])),
            metadata=self.serde.loads_typed(_unpack(record["m"])),
            parent_config=_config(thread_id, checkpoint_ns, parent) if parent else None,
            pending_writes=[(r[0], r[1], self.serde.loads_typed(_unpack(r[2]))) for r in rows],
        )

    # -- the BaseCheckpointSaver methods ------------------------------------

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint ``config`` names (its ``checkpoint_id``), or the thread's latest."""
        conf = config["configurable"]
        ns = self._checkpoints(str(conf["thread_id"]), conf.get("checkpoint_ns", ""))
        checkpoint_id = get_checkpoint_id(config)
        if checkpoint_id:
            found = self.items.get(ns, [checkpoint_id])[0]
        else:
            latest = self.items.scan(ns, exact=True, descending=True, limit=1)
            found = latest[0] if latest else None
        return self._tuple(found) if found else None

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """Checkpoints newest first: of one thread (and namespace, when ``config`` names
        one), or of every thread; ``filter`` matches metadata values exactly."""
        conf = config["configurable"] if config else {}
        prefix = self._checkpoints()
        if "thread_id" in conf:
            prefix = self._checkpoints(str(conf["thread_id"]))
            if conf.get("checkpoint_ns") is not None:
                prefix = (*prefix, conf["checkpoint_ns"])
        exact = len(prefix) == len(self._checkpoints("", ""))
        only_id = conf.get("checkpoint_id")
        before_id = get_checkpoint_id(before) if before else None
        # Without a metadata filter the store applies the limit itself.
        page = None if filter or only_id else limit
        found = self.items.scan(prefix, exact=exact, before=before_id, descending=True, limit=page)
        out: builtins.list[CheckpointTuple] = []
        for item in found:
            if limit is not None and len(out) >= limit:
                break
            if only_id and item.key != only_id:
                continue
            if filter:
                metadata = self.serde.loads_typed(_unpack(json.loads(item.value)["m"]))
                if any(metadata.get(k) != v for k, v in filter.items()):
                    continue
            out.append(self._tuple(item))
        return iter(out)

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Store a checkpoint (all its channel values) under its thread and namespace."""
        conf = config["configurable"]
        thread_id, checkpoint_ns = str(conf["thread_id"]), conf.get("checkpoint_ns", "")
        record = {
            "c": _pack(self.serde.dumps_typed(checkpoint)),
            "m": _pack(self.serde.dumps_typed(get_checkpoint_metadata(config, metadata))),
            "p": conf.get("checkpoint_id"),
        }
        ns = self._checkpoints(thread_id, checkpoint_ns)
        self.items.write([ItemWrite(ns, checkpoint["id"], json.dumps(record))])
        return _config(thread_id, checkpoint_ns, checkpoint["id"])

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Store a task's pending writes: a repeated regular write keeps the first
        value; special ones (errors, interrupts) are replaced."""
        conf = config["configurable"]
        ns = self._writes(
            str(conf["thread_id"]), conf.get("checkpoint_ns", ""), conf["checkpoint_id"]
        )
        batch = []
        for position, (channel, value) in enumerate(writes):
            idx = WRITES_IDX_MAP.get(channel, position)
            row = [task_id, channel, _pack(self.serde.dumps_typed(value)), task_path, idx]
            batch.append(ItemWrite(ns, f"{task_id}:{idx}", json.dumps(row), if_absent=idx >= 0))
        self.items.write(batch)

    def delete_thread(self, thread_id: str) -> None:
        """Delete every checkpoint and write of a thread (all its namespaces)."""
        self.items.delete_prefix(self._checkpoints(str(thread_id)))
        self.items.delete_prefix(self._writes(str(thread_id)))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy every checkpoint and write of a thread (all its namespaces, the
        whole parent chain) to another thread, in one atomic write."""
        copies = []
        for under in (self._checkpoints, self._writes):
            source = under(str(source_thread_id))
            for item in self.items.scan(source):
                namespace = under(str(target_thread_id), *item.namespace[len(source) :])
                copies.append(ItemWrite(namespace, item.key, item.value))
        self.items.write(copies)

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """``"keep_latest"``: keep only each namespace's newest checkpoint (and its
        writes); ``"delete"``: delete the threads. Checkpoints here hold every
        channel value, so the kept one is complete on its own."""
        one_of("strategy", strategy, ("keep_latest", "delete"))
        for thread_id in map(str, thread_ids):
            if strategy == "delete":
                self.delete_thread(thread_id)
                continue
            newest: dict[str, str] = {}
            drop = []
            for item in self.items.scan(self._checkpoints(thread_id), descending=True):
                if newest.setdefault(item.namespace[-1], item.key) != item.key:
                    drop.append(ItemWrite(item.namespace, item.key, None))
            for item in self.items.scan(self._writes(thread_id)):
                checkpoint_ns, checkpoint_id = item.namespace[-2:]
                if newest.get(checkpoint_ns) != checkpoint_id:
                    drop.append(ItemWrite(item.namespace, item.key, None))
            self.items.write(drop)

    # -- async: the same calls in a worker thread ---------------------------

    aget_tuple = _in_thread(get_tuple)
    alist = _listed_in_thread(list)
    aput = _in_thread(put)
    aput_writes = _in_thread(put_writes)
    adelete_thread = _in_thread(delete_thread)
    acopy_thread = _in_thread(copy_thread)
    aprune = _in_thread(prune)
