"""Connected central memory: curated facts from a plane, injected every turn.

Runs offline: it starts the self-hosted plane in-process on a free port (or
uses the one at FASTAIAGENT_TARGET / FASTAIAGENT_API_KEY if you set both),
then

1. reads the plane with a PlaneFactBlock on its own, and
2. gives Memory(plane_agent_id=...) to an agent used by two users, each with
   their own window, both getting the plane's facts.

    python examples/87_connected_memory.py
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import fastaiagent as fa
from fastaiagent import Agent, AgentMemory, ComposableMemory, RunContext
from fastaiagent.agent.memory_blocks import PlaneFactBlock
from fastaiagent.learn import Fact, MemoryStore
from fastaiagent.llm.message import Message
from fastaiagent.plane.server import start_plane
from fastaiagent.testing import FunctionLLM

PLANE_AGENT_ID = "support-bot"


def curated_store(path: Path) -> MemoryStore:
    """The facts a human approved on the plane (agent scope, one category each)."""
    store = MemoryStore(path)
    for text, category, importance in [
        ("Refunds are accepted within 30 days of delivery", "policy", 0.9),
        ("Refund requests need the order number", "policy", 0.8),
        ("Orders ship from Lyon within two working days", "shipping", 0.7),
        ("Support is open 9:00-17:00 CET on weekdays", "hours", 0.5),
    ]:
        store.add(Fact(text, scope="agent", scope_id=PLANE_AGENT_ID, confidence=importance,
                       metadata={"category": category}))
    return store


def echo_facts(messages: list[Message]) -> str:
    """A stand-in model that answers with the facts it was given."""
    facts = [m.content for m in messages if (m.content or "").startswith("Curated facts:")]
    question = messages[-1].content
    return f"Q: {question!r} -> I was given {facts[0].count('- ') if facts else 0} curated facts."


def block_alone() -> None:
    print("== PlaneFactBlock on its own")
    block = PlaneFactBlock(agent_id=PLANE_AGENT_ID, category="policy", max_facts=5)
    for message in block.render("How do I get a refund?"):
        print(message.content)
    agent = Agent(
        name="support",
        system_prompt="Answer from the curated facts.",
        llm=FunctionLLM(echo_facts),
        memory=ComposableMemory(primary=AgentMemory(), blocks=[block]),
    )
    print(agent.run("How do I get a refund?").output)


def memory_for_two_users(local_db: Path) -> None:
    print("\n== Memory(plane_agent_id=...) for two users")
    llm = FunctionLLM(echo_facts)
    agent = Agent(
        name="support",
        llm=llm,
        memory=fa.Memory(
            location=f"sqlite:///{local_db}",
            user_id=lambda ctx: ctx.state["user_id"] if ctx and ctx.state else None,
            plane_agent_id=PLANE_AGENT_ID,
        ),
    )
    for user, question in [("alice", "Where do orders ship from?"), ("bob", "When are you open?")]:
        result = agent.run(question, context=RunContext(state={"user_id": user}))
        print(f"{user}: {result.output}")
    print(f"no user: {agent.run('Refund window?').output}")  # unresolved callers get them too
    # Each user has their own window: bob's prompt never contained alice's question.
    bob_prompt = [m.content for m in llm.calls[1]]
    assert "Where do orders ship from?" not in bob_prompt


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        running = None
        if os.environ.get("FASTAIAGENT_TARGET") and os.environ.get("FASTAIAGENT_API_KEY"):
            fa.connect()  # a plane you run yourself: fastaiagent plane serve ...
        else:
            store = curated_store(Path(tmp) / "plane.db")
            running = start_plane(store, "example-key")
            fa.connect(api_key="example-key", target=running.url)
            print(f"self-hosted plane at {running.url}")
        try:
            block_alone()
            memory_for_two_users(Path(tmp) / "local.db")
        finally:
            fa.disconnect()
            if running is not None:
                running.stop()


if __name__ == "__main__":
    main()
