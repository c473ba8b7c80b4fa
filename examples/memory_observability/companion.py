"""Seed traces and facts for the local UI: one agent, two users, tracing on.

Runs offline: a deterministic model from ``fastaiagent.testing`` chats and
answers the fact-extraction prompt. It leaves, in the local stores:

- traced runs (``traces.db``) whose ``memory.read`` spans show what each block
  recalled;
- durable facts of all three origins: learned during a run (``learn=``, with
  the run's trace id), mined afterwards by the Trace Learning Loop
  (``fastaiagent learn``), and written directly (``persist``, "manual");
- one superseded fact (Alice moved), for the "Show superseded" toggle.

    python examples/memory_observability/companion.py
    FASTAIAGENT_LOCAL_DB=.fastaiagent-examples/observability/local.db fastaiagent ui
    # then open http://127.0.0.1:7860/memory

The stores live in a folder of this example's own,
``.fastaiagent-examples/observability/`` (``local.db`` and ``traces.db``), never
the default ``.fastaiagent/`` that ``make demo`` and your agents use; set
``FASTAIAGENT_LOCAL_DB`` to choose another file. Browse them with
``FASTAIAGENT_LOCAL_DB=.fastaiagent-examples/observability/local.db fastaiagent ui``.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass

from fastaiagent import Agent, Memory, RunContext, trace
from fastaiagent.learn.loop import learn_from_traces
from fastaiagent.llm.message import Message
from fastaiagent.testing import FunctionLLM, remembered

# This example's own stores (the environment variable wins), read by snapshot.py too.
os.environ.setdefault("FASTAIAGENT_LOCAL_DB", ".fastaiagent-examples/observability/local.db")

# What the offline model "understands" as a durable fact in a message:
# personal facts (for the user tier) and standing instructions (agent scope).
PERSONAL = {
    r"\bmy dog is called (\w+)": "Has a dog called {0}",
    r"\bi(?:'m| am) allergic to (\w+)": "Is allergic to {0}",
    r"\bi live in (\w+)": "Lives in {0}",
    r"\bi moved to (\w+)": "Lives in {0}",
}
OPERATIONAL = {r"\bplease always (.+?)[.!]?$": "Always {0}"}


@dataclass
class Session:
    user_id: str


def offline_model(messages: list[Message]) -> str:
    """Chats from what memory injected, and answers the extraction prompt."""
    first = messages[0].content or ""
    if "extract durable facts" in first or "operational knowledge" in first:
        patterns = PERSONAL if "extract durable facts" in first else OPERATIONAL
        said = (messages[-1].content or "").split("<<<\n", 1)[-1].rsplit("\n>>>", 1)[0]
        known = re.findall(r"^(F\d+): (.+)$", messages[-1].content or "", re.M)
        facts = []
        for pattern, template in patterns.items():
            match = re.search(pattern, said, re.I)
            if match:
                text = template.format(*match.groups())
                # "Lives in X" replaces an earlier "Lives in Y".
                replaces = next((fid for fid, f in known if f.startswith("Lives in") and text.startswith("Lives in")), None)
                facts.append({"fact": text, "replaces": replaces})
        return json.dumps({"facts": facts})
    # A chat answer from the facts memory injected: the notes, never the preamble.
    notes = remembered(messages)
    if (messages[-1].content or "").rstrip().endswith("?") and notes:
        return "Here is what I remember: " + "; ".join(notes) + "."
    return "Got it."


def main() -> None:
    tracing = trace.setup()  # local trace store beside the fact database
    llm = FunctionLLM(offline_model, model="offline-companion")
    memory = Memory(agent_id="assistant", user_id=lambda ctx: ctx.state.user_id, learn=llm)
    memory.persist("Support hours are 9:00-17:00 CET", tier="global")  # source: manual
    agent = Agent(name="assistant", llm=llm, system_prompt="You are a friendly companion.", memory=memory)

    alice, bob = RunContext(state=Session("alice")), RunContext(state=Session("bob"))

    def say(text: str, who: RunContext) -> None:
        print(f"{who.state.user_id:>5}: {text}\n       -> {agent.run(text, context=who).output}")

    for text, who in [
        ("Hi! My dog is called Biscuit.", alice),
        ("I am allergic to peanuts, so no satay please.", bob),
        ("I live in Bergen, any tips for rainy days?", alice),
        ("Please always answer in two sentences.", bob),
        ("Big news: I moved to Oslo last week.", alice),  # supersedes "Lives in Bergen"
    ]:
        say(text, who)
    # Learning runs in the background after each reply: wait for it, so the last
    # question is answered from what was learned (dog, Oslo), not only the global fact.
    memory.flush()
    say("What do you remember about me?", alice)
    memory.flush()

    # The Trace Learning Loop: mine the runs into agent-scope facts (standing
    # instructions only; personal details stay in each user's tier).
    trace.flush()
    report = learn_from_traces(llm, location=memory.location, trace_store=tracing.store)
    print(f"learn loop: {report.runs_mined} runs mined, {len(report.facts_added)} agent facts")
    trace.shutdown()

    print(f"facts:  {memory.location}")
    print(f"traces: {tracing.store}")
    print(f"browse them: FASTAIAGENT_LOCAL_DB={os.environ['FASTAIAGENT_LOCAL_DB']} fastaiagent ui")
    print("   (or python examples/memory_observability/snapshot.py)")


if __name__ == "__main__":
    main()
