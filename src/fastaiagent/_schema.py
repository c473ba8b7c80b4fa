"""Schema versions of the stores' tables, shared by the SQLite and Postgres runners.

Each *component* (a fact table, a windows table, the trace store) records its
version in one small table, ``fastaiagent_schema(component, version)``, in the
same database. Opening a store reads that version once: equal to what this
code knows -> no DDL at all; older (or none recorded: a database written
before versions existed is version 0) -> the missing steps run once, in
order, under a lock; newer -> :class:`~fastaiagent.errors.SchemaVersionError`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from fastaiagent.errors import SchemaVersionError

VERSION_TABLE = "fastaiagent_schema"

Step = str | Callable[[Any], None]
"""One migration step: SQL statements separated by ``;``, or a function of the connection."""


@dataclass(frozen=True)
class Schema:
    """A component's ordered migrations: ``steps[i]`` brings version ``i`` to ``i + 1``.

    Step 0 must turn either an empty database or the layout written before
    versions existed (version 0) into version 1, so it is written to be
    idempotent (``IF NOT EXISTS``).
    """

    component: str
    steps: Sequence[Step]

    @property
    def version(self) -> int:
        """The version this code writes."""
        return len(self.steps)


def check_not_newer(schema: Schema, found: int, where: str) -> None:
    """Raise :class:`SchemaVersionError` when ``found`` is newer than this code knows."""
    if found > schema.version:
        raise SchemaVersionError(
            f"{where} holds {schema.component!r} at schema version {found}, but this "
            f"fastaiagent knows versions up to {schema.version}: it was written by a newer "
            "fastaiagent. Upgrade the package (pip install -U fastaiagent) in every process "
            "that opens it."
        )


def sql_statements(script: str) -> list[str]:
    """The statements of a DDL script (none of ours has a ``;`` inside a literal)."""
    return [part.strip() for part in script.split(";") if part.strip()]
