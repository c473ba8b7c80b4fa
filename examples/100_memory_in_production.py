"""Memory in production: many users, a max_users cap, a dropped user comes back.

A dropped user loses the in-process window but keeps every durable fact, and
a saved window can be restored before their next run. The run keeps its data
in a temporary folder (never the default ``.fastaiagent/local.db``) and forgets
only the user it made.

    python examples/100_memory_in_production.py
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

from fastaiagent import Agent, Memory, RunContext
from fastaiagent.llm.message import Message
from fastaiagent.testing import FunctionLLM, remembered


@dataclass
class Session:
    user_id: str


def recall(messages: list[Message]) -> str:
    """An offline 'model' that answers from the facts memory injected and the window."""
    notes = remembered(messages)  # the facts, without the preamble around them
    said = [m.content for m in messages[:-1] if m.role == "user"]
    reply = "I know: " + "; ".join(notes) + "." if notes else "I know nothing about you yet."
    if said:
        return reply + " Earlier you said: " + " / ".join(f"{text!r}" for text in said) + "."
    return reply + " This is a new conversation."


def main(folder: Path) -> None:
    memory = Memory(
        location=f"sqlite:///{folder / 'memory.db'}",  # or postgres://... / redis://... in production
        agent_id="support",
        user_id=lambda ctx: ctx.state.user_id,
        max_users=3,  # tiny on purpose; size it well above your peak concurrent users
    )
    agent = Agent(name="support", llm=FunctionLLM(recall), memory=memory)
    memory.persist("Customer since 2019, premium plan", tier="user", id="alice")

    agent.run("My order #1234 is late", context=RunContext(state=Session("alice")))
    saved = folder / "alice"
    memory.for_user("alice").save(saved)  # keep her conversation across a drop

    for n in range(3):  # three other users push alice out of the cache
        agent.run("hello", context=RunContext(state=Session(f"user-{n}")))
    print("cached users:", memory.cached_users)
    assert "alice" not in memory.cached_users

    back = agent.run("Any news?", context=RunContext(state=Session("alice"))).output
    print("alice returns (fresh window, facts kept):", back)
    assert "premium plan" in back and "#1234" not in back

    memory.for_user("alice").load(saved)  # restore her window before the next run
    restored = agent.run("So, my order?", context=RunContext(state=Session("alice"))).output
    print("after for_user(...).load:", restored)
    assert "#1234" in restored

    print("forget alice completely:", memory.forget(tier="user", id="alice"), "fact(s) deleted")


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as tmp:
        main(Path(tmp))
