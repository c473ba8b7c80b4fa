"""One process of the durable-recall tests: a Memory on a shared store, one turn.

``python _durable_worker.py <location> <log> <user> <message> [persist]`` runs
one agent turn for ``user`` with ``recall="auto"`` and ``semantic="auto"``,
optionally persists a fact, and prints JSON: the prompt the model saw and
``retrieve(message)``. Every text the embedder is asked for is appended to
``log`` (one line each), so a test can prove no text is embedded twice.
``python _durable_worker.py --serve <location> <log> <user>`` is a live worker:
one Memory for the process, a turn for every JSON line on stdin
(``{"message", "persist", "query"}``), a JSON line out for each.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import sys
from typing import Any

from fastaiagent import Agent, Memory
from fastaiagent.kb.bm25 import tokenize
from fastaiagent.llm.message import Message
from fastaiagent.testing import FunctionLLM


class LoggingEmbedder:
    """Bag of hashed words; logs every text it embeds (tests only)."""

    model = "logging-words"
    dimension = 64

    def __init__(self, log: str) -> None:
        self.log = log

    def embed(self, texts: list[str]) -> list[list[float]]:
        with open(self.log, "a", encoding="utf-8") as out:
            out.writelines(json.dumps(t) + "\n" for t in texts)
        vectors = []
        for text in texts:
            vector = [0.0] * self.dimension
            for word in tokenize(text) or re.findall(r"\w+", text.lower()) or ["<empty>"]:
                vector[int(hashlib.md5(word.encode()).hexdigest(), 16) % self.dimension] += 1.0
            norm = math.sqrt(sum(x * x for x in vector)) or 1.0
            vectors.append([x / norm for x in vector])
        return vectors


def open_memory(location: Any, log: str, user: str) -> Memory:
    return Memory(
        location=location, user_id=user, window=1, recall="auto", semantic="auto",
        embedder=LoggingEmbedder(log), learn_in_background=False,
    )  # fmt: skip


def turn(mem: Memory, user: str, message: str, persist: str | None, query: str | None) -> dict[str, Any]:
    prompts: list[str] = []

    def answer(messages: list[Message]) -> str:
        prompts.append("\n".join(f"{m.role}:{m.content}" for m in messages))
        return "Noted."

    if persist:
        mem.persist(persist, tier="user", id=user)
    Agent("a", FunctionLLM(answer), memory=mem).run(message)
    # The cache is per namespace: a recall message asked again as a fact query is
    # embedded once for each, so the no-twice test asks facts with its own query.
    found = [f.fact for f in mem.retrieve(query or message, tier="user", id=user)]
    return {"prompt": prompts[-1], "retrieved": found}


def serve(location: str, log: str, user: str) -> None:
    """A live worker: one Memory for the whole process, one turn per JSON line read."""
    mem = open_memory(location, log, user)
    for line in sys.stdin:
        asked = json.loads(line)
        print(json.dumps(turn(mem, user, asked["message"], asked.get("persist"), asked.get("query"))), flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "--serve":
        serve(*sys.argv[2:5])
        sys.exit(0)
    loc, log_path, user_id, text = sys.argv[1:5]
    fact = sys.argv[5] if len(sys.argv) > 5 and sys.argv[5] else None
    asked = sys.argv[6] if len(sys.argv) > 6 else None
    print(json.dumps(turn(open_memory(loc, log_path, user_id), user_id, text, fact, asked)))
