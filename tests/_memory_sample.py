"""A location's worth of memory for the export / import / copy tests: facts with
history and validity in several subjects and projects, recalled messages with
vectors, windows and items, for two users (ann and bob) and the agent."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from fastaiagent.facts import Fact
from fastaiagent.facts.items import ItemWrite
from fastaiagent.facts.windows import WindowKey
from fastaiagent.kb.protocols import Chunk

DIMENSION = 16
EMBEDDER = "TestEmbedder@16"
T0 = 1_700_000_000.0


def vector(seed: str) -> list[float]:
    rng = random.Random(seed)
    raw = [rng.gauss(0, 1) for _ in range(DIMENSION)]
    norm = sum(x * x for x in raw) ** 0.5
    return [x / norm for x in raw]


def message(namespace: str, n: int, text: str) -> Chunk:
    meta = {"namespace": namespace, "role": "user", "created_at": T0 + n, "embedder": EMBEDDER}
    return Chunk(f"h-{namespace}-{n}", text, vector(f"{namespace}{n}"), meta)


def fill(store: Any) -> dict[str, int]:
    """Write the sample into ``store``; returns the ids of the named facts."""
    ids: dict[str, int] = {}
    tea = store.add(Fact("likes tea", scope="user", scope_id="ann", created_at=T0 + 1))
    coffee = store.update(Fact("likes coffee", scope="user", scope_id="ann", created_at=T0 + 2), tea)
    ids["tea_again"] = store.update(Fact("likes tea", scope="user", scope_id="ann", created_at=T0 + 3), coffee)
    ids["tea"], ids["coffee"] = tea, coffee
    ids["passport"] = store.add(Fact("passport expires soon", scope="user", scope_id="ann",
                                     created_at=T0 + 4, valid_from=T0, valid_to=T0 + 10))  # fmt: skip
    ids["ann_acme"] = store.add(
        Fact("works at acme", scope="user", scope_id="ann", project_id="acme", created_at=T0 + 5,
             confidence=0.7, source="conversation", metadata={"agent_id": "a1", "n": [1, 2]})
    )  # fmt: skip
    ids["bob"] = store.add(Fact("is vegan", scope="user", scope_id="bob", created_at=T0 + 6))
    ids["rule"] = store.add(Fact("answer briefly", scope="agent", scope_id="", created_at=T0 + 7))
    vectors = store.vector_store()
    vectors.add([message("user:ann", n, f"ann said thing {n}") for n in range(5)])
    vectors.add([message("acme:user:ann", n, f"ann at acme {n}") for n in range(2)])
    vectors.add([message("user:bob", n, f"bob said {n}") for n in range(3)])
    windows = store.window_store()
    for key in (WindowKey("a1", "", "ann"), WindowKey("a2", "", "ann"), WindowKey("a1", "", "bob")):
        windows.save(key, json.dumps({"messages": [key.user_id], "summary": "s"}), None, None)
    store.item_store().write([
        ItemWrite(("memories", "ann"), "k1", json.dumps({"v": 1})),
        ItemWrite(("memories", "bob"), "k1", json.dumps({"v": 2})),
        ItemWrite(("shared",), "k", "x"),
    ])  # fmt: skip
    return ids


def lines(path: Path) -> list[dict[str, Any]]:
    """The file's records without the ids a store assigns (fact ids and links)."""
    found = []
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = json.loads(raw)
        if line["kind"] == "fact":
            line.pop("id")
            line["superseded_by"] = line["superseded_by"] is not None
        found.append(line)
    return found
