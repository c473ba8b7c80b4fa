"""A customer-support REPL whose session remembers earlier turns (AgentMemory).

    python examples/customer-support-agent/agent.py [--memory FILE]

Type a message and press Enter. Commands: ``/history`` shows what the agent
remembers, ``/save`` writes it to the memory file, ``/quit`` saves and leaves.
With ``--memory FILE`` an earlier session is loaded at start, so a support
case can be picked up later. With OPENAI_API_KEY set it uses gpt-4o-mini;
otherwise an offline model from ``fastaiagent.testing`` that answers from the
conversation it remembers.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path

from fastaiagent import Agent, LLMClient
from fastaiagent.agent import AgentMemory, RedactPII
from fastaiagent.llm.base import BaseLLM
from fastaiagent.llm.message import Message
from fastaiagent.testing import FunctionLLM

ORDER = re.compile(r"#?\b(\d{4,})\b")


def offline_support(messages: list[Message]) -> str:
    """Finds the customer's order number anywhere in the remembered conversation."""
    said = [m.content or "" for m in messages if m.role == "user"]
    question = said[-1] if said else ""
    if ORDER.findall(question):
        return f"Thanks, I've noted order #{ORDER.findall(question)[-1]}. Let me check on it."
    earlier = [match for text in said[:-1] for match in ORDER.findall(text)]
    if "order" in question.lower() and earlier:
        return f"I see order #{earlier[-1]} from earlier in our chat. It ships within 2 days."
    return "Happy to help! What's your order number?"


def make_llm() -> BaseLLM:
    if os.environ.get("OPENAI_API_KEY"):
        return LLMClient(provider="openai", model="gpt-4o-mini")
    return FunctionLLM(offline_support, model="offline-support")


def main() -> None:
    parser = argparse.ArgumentParser(description="Customer-support REPL with memory.")
    parser.add_argument("--memory", type=Path, default=None, help="load/save the session here")
    args = parser.parse_args()

    memory = AgentMemory(max_messages=40)
    if args.memory and args.memory.exists():
        memory.load(args.memory)
        print(f"(resumed a session of {len(memory)} messages from {args.memory})")
    agent = Agent(
        name="support",
        llm=make_llm(),
        system_prompt="You are a concise, friendly support agent for an online shop.",
        memory=memory,
        middleware=[RedactPII()],
    )
    print("Support chat. /history, /save, /quit")
    while True:
        try:
            line = input("you> ").strip()
        except EOFError:
            line = "/quit"
        if not line:
            continue
        if line == "/history":
            for message in memory.get_messages():
                print(f"  {message.role}: {message.content}")
            continue
        if line in ("/save", "/quit"):
            if args.memory:
                memory.save(args.memory)
                print(f"(saved {len(memory)} messages to {args.memory})")
            if line == "/quit":
                print("bye")
                return
            continue
        print(f"agent> {agent.run(line).output}")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
