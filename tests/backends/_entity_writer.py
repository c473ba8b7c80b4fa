"""A process storing one user's messages for the entity-book race test.

``python _entity_writer.py <location> <user> <start file> <name> [<name> ...]``
waits for ``<start file>`` to exist (so two writers begin together), then stores
one message per name, each in its own ``add_history`` call (a book write each):
"Walked Biscuit in the park with <name> this morning". Prints how many it stored.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent.parent / "unit"))
from _vector_fakes import WordHashEmbedder

from fastaiagent import Memory
from fastaiagent.llm.message import UserMessage


def said(name: str) -> str:
    return f"Walked Biscuit in the park with {name} this morning"


def main(location: str, user: str, start: Path, names: list[str]) -> None:
    memory = Memory(location, user_id=user, recall="auto", embedder=WordHashEmbedder(32))
    memory.add_history(
        [UserMessage("warming up")], user_id=user, at=[1.0]
    )  # connections made before the start
    deadline = time.monotonic() + 60
    while not start.exists():
        if time.monotonic() > deadline:
            raise SystemExit("the start file never came")
        time.sleep(0.001)
    for n, name in enumerate(names):
        memory.add_history(
            [UserMessage(said(name))], user_id=user, at=[1.0e9 + hash(name) % 10**6 + n]
        )
    print(len(names))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], Path(sys.argv[3]), sys.argv[4:])
