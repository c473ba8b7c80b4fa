"""What an import may write, and the check of each of a file's lines against it.

A memory file's header names what it holds: one user's memory (``user_id``;
one project, or every project when ``project_id`` is null) or a whole location
(no user). An import is one of two kinds:

- **a user's** (:meth:`Memory.import_user`, ``fastaiagent memory import``):
  every line must be that user's, in the file's project (or the one the caller
  names): user-tier facts filed under them, recalled messages in their recall
  namespace, their windows, items in a namespace naming them. A fact keeps a
  source only from the library's own (:data:`KEPT_SOURCES`), with at most the
  confidence that source is written with live: a user's file cannot write the
  global tier, file a fact under another label, or raise a fact's standing;
- **a whole location's**, asked for explicitly (``everything=True``,
  ``--all``): an operator's move between stores, every line kept as written.

Either way every line passes the checks of a live write (types, the size
limits of :mod:`fastaiagent.facts.scoping`, a finite vector of the target's
size) and a recalled message is filed under the namespace its line names (its
``metadata["namespace"]`` must agree). The file is checked whole before
anything is written, so a refused import writes nothing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from fastaiagent.errors import FastAIAgentError, InvalidValueError
from fastaiagent.facts import scoping
from fastaiagent.facts.fact import (
    LEARNED_CONFIDENCE,
    SOURCE_CONVERSATION,
    SOURCE_MANUAL,
    SOURCE_TRACES,
    Fact,
)
from fastaiagent.facts.items import ItemWrite, check_write
from fastaiagent.facts.transfer.records import Header, chunk_of, fact_of, item_of, window_of
from fastaiagent.facts.vectors import recall_namespace
from fastaiagent.facts.windows import WindowKey
from fastaiagent.kb.protocols import Chunk, DimensionMismatchError, check_chunk, namespace_key

KEPT_SOURCES = {SOURCE_MANUAL: 1.0, SOURCE_CONVERSATION: LEARNED_CONFIDENCE, SOURCE_TRACES: 1.0}
"""The sources a user's import keeps, each with the highest confidence a live write
of that source stores (a Memory's learning: 0.6)."""

_TIERS = {"agent": "the global tier", "project": "the project tier", "user": "the user tier"}


@dataclass(frozen=True)
class ImportScope:
    """What an import writes: one user's memory (``user_id``) in one project
    (``project_id``; None: any of theirs), or every line (``user_id`` None)."""

    user_id: str | None = None
    project_id: str | None = None

    def takes_project(self, project_id: str) -> bool:
        return self.project_id is None or project_id == self.project_id

    def takes_namespace(self, namespace: str) -> bool:
        """The user's recall namespace in the scope's project (any of theirs when None)."""
        assert self.user_id is not None
        if self.project_id is not None:
            return namespace == recall_namespace(self.project_id, self.user_id)
        base = recall_namespace("", self.user_id)
        return namespace == base or namespace.endswith(":" + base)

    def where(self) -> str:
        project = "" if self.project_id is None else f" in project {self.project_id!r}"
        return f"user {self.user_id!r}{project}"


def import_scope(
    header: Header, name: str, *, everything: bool, user_id: str | None, project_id: str | None
) -> ImportScope:
    """The scope of an import of a file whose header is ``header``: a user's import of
    the user it names (who must be ``user_id`` when given, in ``project_id`` when
    given), or with ``everything`` every line."""
    if everything:
        if user_id is not None or project_id is not None:
            raise InvalidValueError("a whole-location import (everything=True, --all) takes no user or project")
        return ImportScope()
    if header.user_id is None:
        raise InvalidValueError(
            f"{name} holds a whole location's memory (its header names no user): import it on "
            "purpose with everything=True (fastaiagent memory import --all), or import a file "
            "exported for one user (export --user, Memory.export_user)"
        )
    if user_id is not None and header.user_id != user_id:
        raise InvalidValueError(f"{name} holds another user's memory, not {user_id!r}'s: nothing was imported")
    project = header.project_id
    if project_id is not None:
        if project is not None and project != project_id:
            raise InvalidValueError(
                f"{name} holds project {project!r}, not {project_id!r}: import it where that "
                "project is (Memory(project_id=...), --project-id)"
            )
        project = project_id
    return ImportScope(header.user_id, project)


Record = tuple[str, Any]  # ("fact", Fact) | ("recall", (namespace, Chunk)) | ("window", ...) | ("item", ...)


class LineCheck:
    """Reads each line of a file into the record an import writes, checked against
    ``scope`` and the rules of live writes; a refusal names the file and the line.
    ``dimension``: the size every vector must have (a store of one vector size),
    None when each size goes to its own index."""

    def __init__(self, scope: ImportScope, name: str, *, dimension: int | None, one_size: bool) -> None:
        self.scope, self.name = scope, name
        self.dimension, self.one_size = dimension, one_size
        self.seen = 0

    def __call__(self, line: dict[str, Any]) -> Record:
        self.seen += 1
        try:
            return self._read(line)
        except (FastAIAgentError, ValueError, TypeError) as exc:
            where = f"line {line['_line']}" if "_line" in line else f"record {self.seen}"
            refusal = type(exc)(f"{self.name}, {where}: {exc}") if isinstance(exc, FastAIAgentError) else (
                InvalidValueError(f"{self.name}, {where}: {exc}")
            )  # fmt: skip
            raise refusal from None

    def _read(self, line: dict[str, Any]) -> Record:
        kind = line["kind"]
        if kind == "fact":
            fact = fact_of(line)
            self._fact(fact)
            return kind, fact
        if kind == "recall":
            namespace, chunk = chunk_of(line)
            self._chunk(namespace, chunk)
            return kind, (namespace, chunk)
        if kind == "window":
            window = window_of(line)
            self._window(*window)
            return kind, window
        item = item_of(line)
        check_write(ItemWrite(*item[:3]))
        if self.scope.user_id is not None and self.scope.user_id not in item[0]:
            raise InvalidValueError(f"an item of namespace {list(item[0])!r}, outside {self._whose()}")
        return kind, item

    def _whose(self) -> str:
        return f"the file's {self.scope.where()}: a user's import writes only theirs"

    def _fact(self, fact: Fact) -> None:
        scoping.validate_for_write(fact)
        if self.scope.user_id is None:
            return
        if fact.scope != "user" or fact.scope_id != self.scope.user_id:
            raise InvalidValueError(f"a fact of {fact.subject} ({_TIERS[fact.scope]}), outside {self._whose()}")
        if not self.scope.takes_project(fact.project_id):
            raise InvalidValueError(f"a fact of project {fact.project_id!r}, outside {self._whose()}")
        highest = KEPT_SOURCES.get(fact.source)
        if highest is None:
            raise InvalidValueError(
                f"a fact whose source is {fact.source!r}: a user's import keeps the library's "
                f"sources only ({', '.join(KEPT_SOURCES)}); import the whole location (--all) to keep it"
            )
        if fact.confidence > highest:
            raise InvalidValueError(
                f"a {fact.source!r} fact with confidence {fact.confidence:g}, where that source is "
                f"stored with at most {highest:g}: a user's import cannot raise a fact's standing"
            )

    def _chunk(self, namespace: str, chunk: Chunk) -> None:
        filed = namespace_key(chunk.metadata)  # what files it ("" when untagged)
        if filed != namespace:
            raise InvalidValueError(
                f"a recalled message whose metadata files it under {filed!r} but whose line says "
                f"{namespace!r}: the two must agree"
            )
        if self.scope.user_id is not None and not self.scope.takes_namespace(namespace):
            raise InvalidValueError(f"a recalled message of namespace {namespace!r}, outside {self._whose()}")
        vector = check_chunk(chunk, None)
        if len(chunk.text) > scoping.MAX_RECALL_CHARS:
            raise _too_long("a recalled message", len(chunk.text), "MAX_RECALL_CHARS")
        problem = scoping.text_problem(chunk.text) or scoping.id_problem(chunk.id)
        if problem is not None:
            raise InvalidValueError(f"a recalled message whose text or id {problem}")
        size = len(json.dumps(chunk.metadata))
        if size > scoping.MAX_METADATA_BYTES:
            raise _too_long("a recalled message's metadata", size, "MAX_METADATA_BYTES", "bytes of JSON")
        self._check_size(len(vector))

    def _check_size(self, size: int) -> None:
        if not self.one_size:
            return
        if self.dimension is None:
            self.dimension = size
        elif size != self.dimension:
            raise DimensionMismatchError(
                f"a recalled message with a {size}-dimensional vector, but the target index holds "
                f"{self.dimension}-dimensional ones (another embedder): import into a location "
                "whose vector index is empty or of the same embedder"
            )

    def _window(self, key: WindowKey, state: str) -> None:
        if self.scope.user_id is not None and (
            key.user_id != self.scope.user_id or not self.scope.takes_project(key.project_id)
        ):
            raise InvalidValueError(f"a window of user {key.user_id!r} in project {key.project_id!r}, outside {self._whose()}")
        try:
            data = json.loads(state)
        except json.JSONDecodeError:
            raise InvalidValueError("a window whose state is not JSON") from None
        if not isinstance(data, dict):
            raise InvalidValueError("a window whose state is not a JSON object")
        longest = _longest_text(data)
        if longest > scoping.MAX_MESSAGE_CHARS:
            raise _too_long("a text in a window (a message or summary)", longest, "MAX_MESSAGE_CHARS")


def _longest_text(data: Any) -> int:
    """The length of the longest string anywhere in parsed JSON (walked without recursion)."""
    longest, stack = 0, [data]
    while stack:
        value = stack.pop()
        if isinstance(value, str):
            longest = max(longest, len(value))
        elif isinstance(value, dict):
            stack.extend(value.keys())
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
    return longest


def _too_long(what: str, size: int, setting: str, unit: str = "characters") -> InvalidValueError:
    limit = getattr(scoping, setting)
    return InvalidValueError(
        f"{what} of {size:,} {unit}; a live write stores at most {limit:,} "
        f"(fastaiagent.facts.scoping.{setting}): raise the limit to import it"
    )
