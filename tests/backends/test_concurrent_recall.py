"""Workers running turns for one user at once (shared windows, durable recall): every
acknowledged message is recalled exactly once, none lost to a shared id, none
stored twice by a re-applied turn. On the real SQLite file, Postgres and Redis."""

from __future__ import annotations

import threading

import pytest
from _forget_writer import WordsEmbedder

from fastaiagent import Agent, Memory
from fastaiagent.testing import FunctionLLM

TURNS = 6  # per worker


def worker(location: str) -> Memory:
    return Memory(
        location, user_id="ann", agent_id="desk", window=6, recall="auto",
        window_store="shared", embedder=WordsEmbedder(), learn_in_background=False,
    )  # fmt: skip


@pytest.mark.parametrize("workers", [2, 8])
def test_every_message_of_concurrent_turns_is_recalled_once(any_location: str, workers: int) -> None:
    memories = [worker(any_location) for _ in range(workers)]
    start = threading.Barrier(workers)
    said: list[str] = []
    errors: list[BaseException] = []

    def run(n: int) -> None:
        agent = Agent("desk", FunctionLLM(lambda messages: "ok"), memory=memories[n])
        try:
            start.wait()
            for turn in range(TURNS):
                text = f"worker {n} turn {turn} says hello there"
                agent.run(text)
                said.append(text)  # acknowledged
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(n,)) for n in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert not errors, errors
    index = memories[0].location.vector_store()  # type: ignore[attr-defined]
    stored = [c.text for c in index.chunks("user:ann") if c.metadata.get("role") == "user"]
    assert sorted(stored) == sorted(said)
