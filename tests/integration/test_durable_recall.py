"""recall="auto" and semantic="auto" outlive the process on a store-backed index.

Each turn runs in a fresh subprocess (tests/integration/_durable_worker.py) on
the same location: what process A recorded or persisted, process B recalls or
retrieves; a logging embedder proves no text is embedded twice across
restarts and concurrent workers. Parametrized over every backend whose
vector index module exists (Postgres and Redis need their servers).
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from fastaiagent import Memory

WORKER = Path(__file__).with_name("_durable_worker.py")
BACKENDS = ("sqlite", "postgres", "redis")


@pytest.fixture(params=BACKENDS)
def location(request: Any, own_location: Any) -> str:
    return str(own_location(request.param))


def run_turn(
    location: str, log: Path, user: str, message: str, persist: str = "", query: str = ""
) -> dict[str, Any]:
    args = [sys.executable, str(WORKER), location, str(log), user, message, persist]
    done = subprocess.run(
        args + ([query] if query else []), capture_output=True, text=True, timeout=120,
        cwd=WORKER.parent,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def embedded(log: Path) -> Counter[str]:
    return Counter(json.loads(line) for line in log.read_text().splitlines())


@pytest.fixture
def user(location: str) -> Any:
    name = f"u{uuid.uuid4().hex[:10]}"
    yield name
    Memory(location=location, recall="auto", semantic="auto").forget(tier="user", id=name)


def test_a_message_recorded_in_one_process_is_recalled_in_the_next(location, user, tmp_path):
    log = tmp_path / "embedded.log"
    run_turn(location, log, user, "I adopted a puppy named Biscuit last week")
    later = run_turn(location, log, user, "what is the name of the puppy I adopted?")
    assert "Relevant past messages" in later["prompt"]
    assert "I adopted a puppy named Biscuit last week" in later["prompt"]


def test_a_live_worker_recalls_what_another_process_recorded_on_its_next_turn(location, user, tmp_path):
    log = tmp_path / "embedded.log"
    live = subprocess.Popen(
        [sys.executable, str(WORKER), "--serve", location, str(log), user],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=WORKER.parent,
    )  # fmt: skip

    def ask(**turn: str) -> dict[str, Any]:
        assert live.stdin is not None and live.stdout is not None
        live.stdin.write(json.dumps(turn) + "\n")
        live.stdin.flush()
        return dict(json.loads(live.stdout.readline()))

    try:
        warm = ask(message="good morning, how is the weather in town today?")  # B holds its copies
        assert "Lisbon" not in warm["prompt"]
        run_turn(location, log, user, "My sister Jane lives in Lisbon near the river",
                 persist="The user's sister Jane lives in Lisbon")  # fmt: skip
        later = ask(message="where does my sister Jane live these days?")
        assert "My sister Jane lives in Lisbon near the river" in later["prompt"]
        assert later["retrieved"][0] == "The user's sister Jane lives in Lisbon"
    finally:
        assert live.stdin is not None
        live.stdin.close()
        live.wait(timeout=60)


def test_a_fact_persisted_in_one_process_is_retrieved_by_meaning_in_the_next(location, user, tmp_path):
    log = tmp_path / "embedded.log"
    run_turn(location, log, user, "hello there, nice weather", persist="The user is allergic to peanuts")
    later = run_turn(location, log, user, "is the user allergic to peanuts?")
    assert later["retrieved"][0] == "The user is allergic to peanuts"


def test_no_text_is_embedded_twice_across_restarts_and_workers(location, user, tmp_path):
    log = tmp_path / "embedded.log"
    messages = [f"my favourite colour number {i} is teal and gold" for i in range(4)]

    def again(message: str) -> dict[str, Any]:
        return run_turn(location, log, user, message, f"fact about {message}", "which colours?")

    for _restart in range(2):  # the same turns again in fresh processes
        for message in messages:
            again(message)
    with ThreadPoolExecutor(max_workers=4) as pool:  # four concurrent workers on the same store
        list(pool.map(again, messages))
    counts = embedded(log)
    assert counts, "the embedder was never called"
    twice = {text: n for text, n in counts.items() if n > 1}
    # Every text was cached by the first pass, so restarts and concurrent workers read it back.
    assert not twice, twice


def test_forget_deletes_the_users_durable_recall_and_fact_vectors(location, user, tmp_path):
    log = tmp_path / "embedded.log"
    run_turn(location, log, user, "my locker code is 4417 remember it", persist="Locker code 4417")
    mem = Memory(location=location, recall="auto", semantic="auto")
    index = mem.location.vector_store()
    assert index.ids(f"user:{user}")
    mem.forget(tier="user", id=user)
    assert not index.ids(f"user:{user}")
    later = run_turn(location, log, user, "what is my locker code?")
    assert "4417" not in later["prompt"] and later["retrieved"] == []
