"""A real LangGraph graph (StateGraph + FastAIAgentSaver + FastAIAgentStore) keeps
its memory across process restarts, on each backend: every turn runs the
example script in a new Python process."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

from _env import require_module

require_module("langgraph.graph")

from fastaiagent.integrations.langgraph import FastAIAgentSaver, FastAIAgentStore  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "examples/integrations/langgraph/chat_memory.py"


def _turn(location: str, thread: str, user: str, message: str, tmp_path: Path) -> str:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), location, thread, user, message],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env={**os.environ, "FASTAIAGENT_LOCAL_DB": str(tmp_path / "local.db")},
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_graph_memory_survives_restarts(backend: str, tmp_path: Path, own_location: Any) -> None:
    location = own_location(backend)
    run = uuid.uuid4().hex[:8]
    thread, other, user = f"t-{run}", f"t2-{run}", f"alice-{run}"
    try:
        assert _turn(location, thread, user, "remember I drink green tea", tmp_path) == (
            "Noted: I drink green tea"
        )
        assert _turn(location, thread, user, "what do you know?", tmp_path) == (
            "Turn 2 of this thread. I remember: I drink green tea"
        )
        # A new thread starts fresh, but the user's long-term memories carry over.
        assert _turn(location, other, user, "hello", tmp_path) == (
            "Turn 1 of this thread. I remember: I drink green tea"
        )
        saver = FastAIAgentSaver(location)
        history = list(saver.list({"configurable": {"thread_id": thread}}))
        assert len(history) >= 4  # input + loop checkpoints of both turns
        assert history[0].checkpoint["channel_values"]["messages"][-1].startswith("Turn 2")
    finally:
        saver = FastAIAgentSaver(location)
        saver.delete_thread(thread)
        saver.delete_thread(other)
        store = FastAIAgentStore(location)
        for item in store.search(("memories", user), limit=100):
            store.delete(item.namespace, item.key)
