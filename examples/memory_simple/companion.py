"""One companion agent, two users: global facts, per-user facts and windows.

Runs offline with a deterministic model from ``fastaiagent.testing`` that
answers from what memory put in its prompt. Its facts live in a folder of
its own, ``.fastaiagent-examples/memory_simple/`` (never the default
``.fastaiagent/local.db`` that ``make demo`` and your own agents use).

    python examples/memory_simple/companion.py
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from fastaiagent import Agent, Memory, RunContext
from fastaiagent.llm.message import Message
from fastaiagent.testing import FunctionLLM, remembered


@dataclass
class Session:
    user_id: str


def answer_from_prompt(messages: list[Message]) -> str:
    """An offline 'model' that answers as a chat model would, from the facts memory
    put in its prompt (the notes, not the preamble around them) and the earlier turns."""
    notes = remembered(messages)
    earlier = [m.content for m in messages[:-1] if m.role == "user"]
    reply = "Happy to help!"
    if notes:
        reply += " I'm keeping in mind: " + "; ".join(notes) + "."
    if earlier:
        reply += " Earlier you asked: " + " / ".join(f"{text!r}" for text in earlier) + "."
    return reply


DATA = Path(".fastaiagent-examples") / "memory_simple"


def main() -> None:
    DATA.mkdir(parents=True, exist_ok=True)
    memory = Memory(
        location=f"sqlite:///{DATA / 'memory.db'}",  # this example's own file
        agent_id="assistant",  # global facts filed under this agent
        user_id=lambda ctx: ctx.state.user_id,  # one window and fact set per user
        window=20,
    )
    memory.persist("Support hours are 9:00-17:00 CET", tier="global")
    memory.persist("Has a beagle named Biscuit; allergic to cats", tier="user", id="alice")
    memory.persist("Vegetarian; training for a marathon", tier="user", id="bob")

    agent = Agent(
        name="assistant",
        llm=FunctionLLM(answer_from_prompt, model="offline-companion"),
        system_prompt="You are a friendly companion. Use what you know about the user.",
        memory=memory,
    )
    alice, bob = RunContext(state=Session("alice")), RunContext(state=Session("bob"))

    for question, who in [
        ("Any tips for my dog?", alice),
        ("What should I cook tonight?", bob),
        ("And a toy for him?", alice),
    ]:
        print(f"{who.state.user_id}: {question}\n  -> {agent.run(question, context=who).output}")

    alice_facts = [f.fact for f in memory.retrieve(tier="user", id="alice")]
    bob_facts = [f.fact for f in memory.retrieve(tier="user", id="bob")]
    print("alice's facts:", alice_facts)
    print("bob's facts:  ", bob_facts)
    assert not set(alice_facts) & set(bob_facts)
    print("facts stored in:", memory.location)


if __name__ == "__main__":
    main()
