"""Recalled messages of two users (ann and bob) in a location, imported with
``Memory.add_history``, and a way to ask recall what it finds: for the tests of
``fastaiagent memory messages`` and the Memory page's Messages and Users tabs."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent / "unit"))
from _vector_fakes import WordHashEmbedder

from fastaiagent import Agent, Memory, RunContext
from fastaiagent.llm.message import AssistantMessage, UserMessage
from fastaiagent.testing import CannedLLM

ANN = [
    UserMessage("My dog Biscuit is a beagle and hates baths"),
    AssistantMessage("Beagles often dislike water; lukewarm baths help a lot."),
    UserMessage("I moved to Porto in April for the new job"),
]
BOB = [UserMessage("My cat Miso sleeps on the piano all day")]
# ann's messages said a day apart: newest first is ANN reversed.
TIMES = [datetime(2024, 3, day, 12, tzinfo=timezone.utc) for day in (1, 2, 3)]


@dataclass
class Session:
    user_id: str


def seeded_memory(location: str) -> Memory:
    """A Memory on ``location`` holding ANN for ann and BOB for bob (recall only), and
    one fact of ann's."""
    memory = Memory(location, user_id=lambda ctx: ctx.state.user_id, recall="auto", embedder=WordHashEmbedder(32))
    memory.add_history(ANN, user_id="ann", at=TIMES)
    memory.add_history(BOB, user_id="bob", at=TIMES[:1])
    memory.persist("Likes green tea", id="ann")
    return memory


def recalled(memory: Memory, user_id: str, question: str) -> str:
    """What recall put in the prompt of one run of ``user_id`` asking ``question``."""
    llm = CannedLLM("ok")
    Agent(name="support", llm=llm, memory=memory).run(question, context=RunContext(state=Session(user_id)))
    return " ".join(str(m.content) for m in llm.calls[0])
