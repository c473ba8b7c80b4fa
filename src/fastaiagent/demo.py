"""``fastaiagent demo``: a companion agent for two users on the embedded default.

Shows global facts, per-user facts, windows, semantic retrieval and isolation,
with what each turn injected, on SQLite and the offline embedder. With a model
configured (OPENAI_API_KEY, ANTHROPIC_API_KEY, or FASTAIAGENT_LLM_BASE_URL for
Ollama / an OpenAI-compatible server) it uses that model and ``learn=``;
otherwise it runs a clearly labelled offline model from ``fastaiagent.testing``
and writes facts through the direct API.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table

from fastaiagent import Agent, LLMClient, Memory, RunContext
from fastaiagent.kb.embedding import get_embedder
from fastaiagent.llm.base import BaseLLM, LLMResponse
from fastaiagent.llm.message import Message
from fastaiagent.testing import FunctionLLM

AGENT_ID = "companion"
GLOBAL_FACTS = ["Support hours are 9:00-17:00 CET", "Never share one user's details with another"]
USER_FACTS = {
    "alice": ["The user is allergic to peanuts", "Has a beagle named Biscuit"],
    "bob": ["Vegetarian, training for a marathon", "Works night shifts as a nurse"],
}
CONVERSATION = [
    ("alice", "Hi! I'm planning a picnic for Saturday."),
    ("bob", "What should I eat before a long run?"),
    ("alice", "Any snack ideas for the picnic?"),
    ("bob", "When can I reach support?"),
]


@dataclass
class Session:
    user_id: str


def configured_llm() -> tuple[BaseLLM | None, str]:
    """The model from the environment, or None (offline) with a label saying why."""
    base_url = os.environ.get("FASTAIAGENT_LLM_BASE_URL")
    if base_url:
        model = os.environ.get("FASTAIAGENT_LLM_MODEL", "llama3.1")
        return LLMClient("openai-compatible", model, base_url=base_url), f"{model} at {base_url}"
    if os.environ.get("OPENAI_API_KEY"):
        return LLMClient("openai", "gpt-4o-mini"), "OpenAI gpt-4o-mini"
    if os.environ.get("ANTHROPIC_API_KEY"):
        return LLMClient("anthropic", "claude-3-5-haiku-latest"), "Anthropic claude-3-5-haiku"
    return None, "no model configured"


class _PromptRecorder(BaseLLM):
    """Wraps the model to keep the last prompt, so the demo can show what was injected."""

    def __init__(self, inner: BaseLLM) -> None:
        self.inner = inner
        self.model = inner.model
        self.last_prompt: list[Message] = []

    def complete(self, messages: Any, *, tools: Any = None) -> LLMResponse:
        self.last_prompt = list(messages)
        return self.inner.complete(messages, tools=tools)


def offline_reply(messages: list[Message]) -> str:
    """The offline model: answers from the facts memory injected into its prompt."""
    facts = [
        line[2:]
        for m in messages
        if m.role == "system" and m.content
        for line in m.content.splitlines()
        if line.startswith("- ")
    ]
    question = messages[-1].content or ""
    return f"[offline model] You asked {question!r}. I'm keeping in mind: " + "; ".join(facts)


def _noted(section: str) -> list[str]:
    """The note lines of an injected section (``- "fact" (source)``), without the preamble."""
    return [line[2:] for line in section.splitlines() if line.startswith("- ")]


def injected_by_tier(prompt: list[Message]) -> dict[str, list[str]]:
    tiers: dict[str, list[str]] = {"global": [], "user": [], "window": []}
    for message in prompt[:-1]:
        content = message.content or ""
        if message.role == "system" and content.startswith("Facts true for everyone"):
            tiers["global"] += _noted(content)
        elif message.role == "system" and content.startswith("Facts about this user"):
            tiers["user"] += _noted(content)
        elif message.role in ("user", "assistant"):
            tiers["window"].append(f"{message.role}: {content[:60]}")
    return tiers


def run_demo(console: Console | None = None) -> dict[str, Any]:
    """Run the demo; returns what it observed (used by the tests)."""
    console = console or Console()
    started = time.perf_counter()
    real_llm = _introduce(console)
    llm = _PromptRecorder(real_llm or FunctionLLM(offline_reply, model="offline-demo"))
    memory = _seeded_memory(console, real_llm)
    agent = Agent(
        name=AGENT_ID,
        llm=llm,
        system_prompt="You are a warm, concise companion. Use what you know about the user.",
        memory=memory,
    )
    leaks = [leak for user, text in CONVERSATION for leak in _turn(console, agent, llm, user, text)]
    memory.flush()
    hit = _show_retrieval(console, memory)
    _show_outcome(console, memory, leaks)
    elapsed = time.perf_counter() - started
    console.print(f"done in {elapsed:.1f}s")
    return {"leaks": leaks, "semantic_hit": hit, "seconds": elapsed}


def _introduce(console: Console) -> BaseLLM | None:
    """Say which model answers; None means the offline test model."""
    real_llm, label = configured_llm()
    console.print(
        Panel.fit("fastaiagent memory demo: one companion agent, two users", style="bold")
    )
    if real_llm is None:
        console.print(
            f"[yellow]No LLM configured ({label}).[/] Running with an [bold]OFFLINE test model[/] "
            "(fastaiagent.testing.FunctionLLM) that answers from what memory injects. Set "
            "OPENAI_API_KEY, ANTHROPIC_API_KEY or FASTAIAGENT_LLM_BASE_URL to use a real model."
        )
    else:
        console.print(f"Using [bold]{label}[/] with learn= (facts extracted from user messages).")
    return real_llm


def _seeded_memory(console: Console, real_llm: BaseLLM | None) -> Memory:
    """Memory on the embedded default, the embedder warmed up, the demo's facts stored."""
    with console.status("Loading the offline embedder (all-MiniLM-L6-v2)..."):
        embedder = get_embedder("auto")
        embedder.embed(["warm up"])  # load the model before the first turn, not during it
    memory = Memory(
        agent_id=AGENT_ID,
        user_id=lambda ctx: ctx.state.user_id,
        window=20,
        semantic="auto",
        embedder=embedder,
        learn=real_llm,
    )
    for fact in GLOBAL_FACTS:
        memory.persist(fact, tier="global")
    for user, facts in USER_FACTS.items():
        for fact in facts:
            memory.persist(fact, tier="user", id=user)
    return memory


def _turn(console: Console, agent: Agent, llm: _PromptRecorder, user: str, text: str) -> list[str]:
    """One user turn, shown with what memory injected; returns the other user's facts it saw."""
    result = agent.run(text, context=RunContext(state=Session(user)))
    other = "bob" if user == "alice" else "alice"
    prompt_text = " ".join(m.content or "" for m in llm.last_prompt)
    table = Table(title=f"{user}: {text}", show_header=True, header_style="bold cyan")
    table.add_column("tier")
    table.add_column("injected this turn")
    for tier, items in injected_by_tier(llm.last_prompt).items():
        table.add_row(tier, escape("\n".join(items)) or "-")
    console.print(table)
    console.print(f"[green]reply:[/] {escape(result.output)}\n")
    return [f for f in USER_FACTS[other] if f in prompt_text]


def _show_retrieval(console: Console, memory: Memory) -> str | None:
    query = "what foods should we avoid?"
    found = memory.retrieve(query, tier="user", id="alice", limit=1)
    hit = found[0].fact if found else None
    console.print(
        Panel(
            escape(f"retrieve({query!r}, tier='user', id='alice')\n-> {hit}"),
            title="semantic retrieval",
        )
    )
    return hit


def _show_outcome(console: Console, memory: Memory, leaks: list[str]) -> None:
    console.print(
        "[bold green]isolation holds[/]: no turn saw the other user's facts"
        if not leaks
        else f"[bold red]ISOLATION BROKEN[/]: {leaks}"
    )
    store_path = getattr(memory.location, "path", memory.location)
    console.print(
        Panel(
            f"Durable facts: {store_path}\n"
            "Windows: in this process (per user, at most max_users)\n"
            "Browse them: fastaiagent ui   (then open the Memory page)",
            title="where the data lives",
        )
    )


def register(app: Any) -> None:
    @app.command()
    def demo() -> None:
        """Run the two-user companion demo on the embedded default."""
        observed = run_demo()
        if observed["leaks"]:
            raise SystemExit(1)


__all__ = ["register", "run_demo"]
