"""The same memory steps on any backend: SQLite, Postgres or Redis.

    python examples/memory_backends/run.py                                   # local SQLite
    python examples/memory_backends/run.py "postgresql://postgres@127.0.0.1:5432/test?table=example_memory"
    python examples/memory_backends/run.py "redis://127.0.0.1:6379/0?prefix=example"

Every step prints what it checked; the run works in a project of its own and
removes everything it wrote at the end. The SQLite run uses a file of its own,
``.fastaiagent-examples/memory_backends.db``; ``table=`` / ``prefix=`` name a
table / key prefix for the example instead of the default ones.

A location that held no facts before the run (a file, table or prefix of the
example's own) is torn down whole at the end with ``store.destroy()``: its
tables (Postgres, SQLite) or keys (Redis), bookkeeping included. A location
that already held facts keeps them: the run then deletes its own project's
facts only, and the store's tables or bookkeeping keys stay for their owner.
"""

from __future__ import annotations

import sys
import uuid
from pathlib import Path

from fastaiagent import Memory
from fastaiagent.learn import FactStore, make_fact_store

DEFAULT_LOCATION = "sqlite:///.fastaiagent-examples/memory_backends.db"


def main(location: str) -> None:
    if location == DEFAULT_LOCATION:
        Path(".fastaiagent-examples").mkdir(exist_ok=True)
    store = make_fact_store(location)  # the FactStore behind Memory(location=...)
    # Only a location that held nothing is this run's to tear down whole.
    owned = not store.subjects(include_superseded=True)
    project = f"demo-{uuid.uuid4().hex[:8]}"  # keeps this run apart from other data
    mem = Memory(location=store, agent_id="support", project_id=project)
    print(f"backend: {type(store).__name__}  project: {project}")

    try:
        policy = mem.persist("Return policy is 30 days", tier="global")
        email = mem.persist("Prefers email", tier="user", id="alice")
        assert mem.persist("prefers   EMAIL", tier="user", id="alice") == email
        mem.persist("Has a beagle", tier="user", id="bob")
        print(f"persisted: global #{policy}, alice #{email} (idempotent), bob's fact")

        slack = mem.update("Prefers Slack", old="Prefers email", tier="user", id="alice")
        alice = [f.fact for f in mem.retrieve(tier="user", id="alice")]
        assert alice == ["Prefers Slack"], alice
        old = store.get(email)
        assert old is not None and old.superseded_by == slack
        print(f"updated: alice now {alice}; #{email} kept as history, superseded by #{slack}")

        assert mem.retrieve(tier="user") == []  # no id: reads nothing, never everyone
        everyone = sorted(f.fact for f in store.list_active("user", "*", project))
        print(f"safe scoping: no id -> []; '*' on purpose -> {everyone}")

        assert mem.forget(tier="user", id="alice") == 2  # the fact and its history
        assert [f.fact for f in mem.retrieve(tier="user", id="bob")] == ["Has a beagle"]
        print("forgot alice (2 rows with history); bob untouched")

        subjects = {
            f"{s.scope}:{s.scope_id}": s.count for s in store.subjects() if s.project_id == project
        }
        print(f"subjects: {subjects}")
    finally:
        print(clean_up(mem, store, owned))
    if owned and location == DEFAULT_LOCATION:  # the example's own file: gone too
        for path in Path(".fastaiagent-examples").glob("memory_backends.db*"):
            path.unlink()


def clean_up(mem: Memory, store: FactStore, owned: bool) -> str:
    """Remove what the run wrote: the whole store when it was the run's own (its
    tables or keys, bookkeeping included), else this project's facts only."""
    mem.forget(tier="user", id="*")
    mem.forget(tier="global")
    if owned and hasattr(store, "destroy"):
        store.destroy()  # the store's tables / key prefix, bookkeeping included
        store.close()
        return f"cleaned up: removed {store!r} whole (it held nothing before this run); done"
    store.close()
    return "cleaned up: deleted this run's project; the location held other facts, which stay; done"


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else DEFAULT_LOCATION)
