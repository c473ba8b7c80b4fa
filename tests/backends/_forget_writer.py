"""Process A of the forget tests: everything a user's words can leave in a location.

``python _forget_writer.py <location> <user> <marker> <turns>`` writes, for
``user``, a fact holding ``<marker>fact`` (and its vector, by a semantic
retrieve), ``turns`` recalled turns each saying ``<marker>``, a shared window
with a summary of what left it; then prints the number of turns. The embedder
is a bag of hashed words, so no model is loaded.
"""

from __future__ import annotations

import hashlib
import math
import re
import sys

from fastaiagent import Agent, Memory
from fastaiagent.llm.message import Message
from fastaiagent.testing import FunctionLLM


class WordsEmbedder:
    """Bag of hashed words (tests only)."""

    model = "forget-words"
    dimension = 32

    def embed(self, texts: list[str]) -> list[list[float]]:
        out = []
        for text in texts:
            vector = [0.0] * self.dimension
            for word in re.findall(r"\w+", text.lower()) or ["<empty>"]:
                vector[int(hashlib.md5(word.encode()).hexdigest(), 16) % self.dimension] += 1.0
            norm = math.sqrt(sum(x * x for x in vector)) or 1.0
            out.append([x / norm for x in vector])
        return out


def summarize(messages: list[Message]) -> str:
    # Echo what was folded, so the summary holds the user's words too.
    return "Summary: " + " ".join((m.content or "")[:60] for m in messages[-4:])


def main(location: str, user: str, marker: str, turns: int) -> None:
    mem = Memory(
        location=location, user_id=user, agent_id="support", window=4,
        recall="auto", semantic="auto", window_store="shared", embedder=WordsEmbedder(),
        summarize=FunctionLLM(summarize), learn_in_background=False,
    )  # fmt: skip
    mem.persist(f"{user} secret is {marker}fact", tier="user")
    mem.retrieve(f"what is the secret {marker}fact", tier="user")  # writes the fact's vector
    agent = Agent("writer", FunctionLLM(lambda messages: "Noted."), memory=mem)
    for i in range(turns):
        agent.run(f"My secret code word is {marker} number {i}")
    mem.flush()
    print(turns)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]))
