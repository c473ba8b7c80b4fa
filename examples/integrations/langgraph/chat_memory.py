"""A LangGraph graph whose memory lives in fastaiagent's stores.

The checkpointer (FastAIAgentSaver) keeps each thread's state; the store
(FastAIAgentStore) keeps what a user asked the graph to remember, across
threads. Both survive a restart: every turn below runs in a new process.

Run it:
    python chat_memory.py                      # a demo: three turns, three processes
    python chat_memory.py LOCATION THREAD USER MESSAGE
        LOCATION: sqlite:///memory.db, postgresql://..., redis://...

No model and no network: the node answers from the state and the store.
Install: pip install 'fastaiagent[langgraph]'
"""

from __future__ import annotations

import operator
import subprocess
import sys
import tempfile
import uuid
from typing import Annotated, TypedDict

from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph
from langgraph.store.base import BaseStore

from fastaiagent.integrations.langgraph import FastAIAgentSaver, FastAIAgentStore


class State(TypedDict):
    messages: Annotated[list[str], operator.add]


def respond(state: State, config: RunnableConfig, *, store: BaseStore) -> dict[str, list[str]]:
    """Remember what the user asks to; otherwise say what this thread and user hold."""
    memories = ("memories", config["configurable"]["user_id"])
    said = state["messages"][-1]
    if said.lower().startswith("remember "):
        store.put(memories, uuid.uuid4().hex, {"text": said[len("remember ") :]})
        return {"messages": [f"Noted: {said[len('remember '):]}"]}
    known = [item.value["text"] for item in store.search(memories, limit=10)]
    turn = len(state["messages"]) // 2 + 1
    return {"messages": [f"Turn {turn} of this thread. I remember: {'; '.join(known) or 'nothing yet'}"]}


def one_turn(location: str, thread: str, user: str, message: str) -> str:
    builder = StateGraph(State)
    builder.add_node("respond", respond)
    builder.add_edge(START, "respond")
    builder.add_edge("respond", END)
    graph = builder.compile(checkpointer=FastAIAgentSaver(location), store=FastAIAgentStore(location))
    config: RunnableConfig = {"configurable": {"thread_id": thread, "user_id": user}}
    result = graph.invoke({"messages": [message]}, config)
    return str(result["messages"][-1])


def demo() -> None:
    location = f"sqlite:///{tempfile.mkdtemp()}/memory.db"
    turns = [
        ("thread-1", "remember I drink green tea"),
        ("thread-1", "what do you know?"),  # a new process: the thread's state is back
        ("thread-2", "hello again"),  # a new thread: the user's memories carry over
    ]
    for thread, message in turns:
        reply = subprocess.run(
            [sys.executable, __file__, location, thread, "alice", message],
            capture_output=True, text=True, check=True,
        ).stdout.strip()
        print(f"[{thread}] alice: {message}\n[{thread}] graph: {reply}")


if __name__ == "__main__":
    if len(sys.argv) == 5:
        print(one_turn(*sys.argv[1:]))
    else:
        demo()
