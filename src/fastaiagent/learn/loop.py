"""The Trace Learning Loop (``fastaiagent learn``): durable facts mined from past runs.

Each recent run in the local trace store is shown to an LLM extractor; the
facts it finds are written to a fact store with confidence 1.0, source
``"traces"`` and the run's trace id. A fact the model says replaces a known
one supersedes it, so history is kept. The model is asked for a
``record_facts`` tool call; a text answer is read by the tolerant parser of
:mod:`fastaiagent.learn.extractor`.

Only what the user said in a run is mined, never the model's replies. Facts
go to the agent scope by default (the run's agent name), and there the model
is asked for operational knowledge only (standing instructions, conventions,
corrections), never personal details: an agent-scope fact is shown to every
user of the agent. User and project scopes hold personal data; they need
``allow_personal=True`` and use the personal-fact prompt of ``Memory(learn=)``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastaiagent import _validate as check
from fastaiagent.errors import InvalidTypeError, InvalidValueError, PolicyError
from fastaiagent.facts.fact import SCOPES, SOURCE_TRACES, Fact
from fastaiagent.facts.factory import make_fact_store
from fastaiagent.facts.scoping import WILDCARD
from fastaiagent.facts.store import FactStore
from fastaiagent.learn.extractor import (
    MAX_KNOWN_FACTS,
    MAX_MESSAGE_CHARS,
    ExtractedFact,
    build_extraction_messages,
    complete_extraction,
    known_fact_id,
)
from fastaiagent.llm.base import BaseLLM
from fastaiagent.llm.message import Message, SystemMessage, UserMessage
from fastaiagent.trace.store import RunSummary, TraceStore

RUN_SPAN = "agent.run"
LOOP_CONFIDENCE = 1.0
Progress = Callable[[int, int], None]

AGENT_KNOWLEDGE_PROMPT = """\
You review one message a user sent to an AI agent and extract operational \
knowledge for the agent: standing instructions, conventions, policies and \
corrections that should shape how it works with every user from now on. For \
example: "Always cite a source for token-cost claims", "Keep reports under 800 \
words", "Refunds need an order number".

Every fact you write is shown to all users of the agent. So never extract \
personal information about the user (names, contact details, health, \
location, family, possessions, personal preferences), nor anything that is \
true only for this conversation. Write each fact as one short standalone \
instruction or statement.

Known facts are listed with ids. Do not repeat a known fact. When the message \
corrects a known fact, output the new fact and put the known fact's id in \
"replaces". Otherwise "replaces" is null.

Record your answer by calling the record_facts tool. If you cannot call \
tools, answer with JSON only, no other text:
{"facts": [{"fact": "<statement>", "replaces": null}]}
If the message holds no such knowledge, record an empty list: {"facts": []}."""


def build_agent_messages(text: str, known_facts: list[str]) -> list[Message]:
    """The agent-scope prompt for one message (same layout as the personal prompt)."""
    shown = known_facts[:MAX_KNOWN_FACTS]
    listing = "\n".join(f"{known_fact_id(i)}: {f}" for i, f in enumerate(shown)) or "(none)"
    body = text if len(text) <= MAX_MESSAGE_CHARS else text[:MAX_MESSAGE_CHARS] + " [...]"
    return [
        SystemMessage(AGENT_KNOWLEDGE_PROMPT),
        UserMessage(f"Known facts:\n{listing}\n\nMessage from the user:\n<<<\n{body}\n>>>"),
    ]


def extract_for_scope(
    llm: BaseLLM, scope: str, text: str, known_facts: list[str]
) -> list[ExtractedFact]:
    """Ask ``llm`` for the facts in ``text`` fit for ``scope``. LLM errors propagate."""
    if scope == "agent":
        messages = build_agent_messages(text, known_facts)
    else:
        messages = build_extraction_messages(text, role="user", known_facts=known_facts)
    count = min(len(known_facts), MAX_KNOWN_FACTS)
    return complete_extraction(llm, messages, known_count=count)


@dataclass
class LearnReport:
    """What one pass of the loop did."""

    runs_seen: int = 0
    runs_mined: int = 0
    runs_skipped: int = 0  # already mined, other agents, or nothing to read
    facts_added: list[int] = field(default_factory=list)
    facts_superseded: list[tuple[int, int]] = field(default_factory=list)  # (old, new)
    proposed: list[tuple[str, str, str]] = field(default_factory=list)  # (trace, subject, fact)
    failures: list[tuple[str, str]] = field(default_factory=list)  # (trace, error)


def check_target(scope: str, scope_id: str | None, *, allow_personal: bool) -> None:
    """Refuse a scope the loop must not write without being asked, or an empty id."""
    if scope not in SCOPES:
        raise InvalidValueError(f"unknown scope {scope!r}; expected one of {SCOPES}")
    check.boolean("allow_personal", allow_personal)
    if scope_id is not None:
        check.text("scope_id", scope_id, allow_empty=True)
    if scope in ("user", "project") and not allow_personal:
        raise PolicyError(
            f"learning into {scope} scope stores personal data mined from traces; "
            "pass allow_personal=True (--allow-personal) to do it on purpose"
        )
    if scope_id is not None and not scope_id.strip():
        raise InvalidValueError("refusing an empty scope id: name the subject the facts are about")
    if scope_id == WILDCARD:
        raise InvalidValueError('"*" is a read/delete wildcard, not a scope id to write under')
    if scope_id is not None:
        check.identifier("scope_id", scope_id)
    if scope in ("user", "project") and scope_id is None:
        raise InvalidValueError(f"{scope} scope needs a scope id (scope_id=; --subject {scope}:ID)")


def _run_text(run: RunSummary, traces: TraceStore) -> str:
    text = run.attributes.get("agent.input")
    if isinstance(text, str) and text.strip():
        return text
    # Older runs: the question is also on the memory.read span.
    for span in traces.get_trace(run.trace_id):
        query = span.attributes.get("memory.query")
        if span.name == "memory.read" and isinstance(query, str) and query.strip():
            return query
    return ""


def _check_options(
    llm: Any,
    limit: Any,
    project_id: Any,
    agent: Any,
    remine: Any,
    dry_run: Any,
    on_progress: Any,
) -> None:
    if not isinstance(llm, BaseLLM):
        raise InvalidTypeError(f"llm must be an LLMClient or BaseLLM, got {type(llm).__name__}")
    check.integer("limit", limit, minimum=1)
    check.text("project_id", project_id, allow_empty=True)
    if agent is not None:
        check.text("agent", agent)
    check.boolean("remine", remine)
    check.boolean("dry_run", dry_run)
    if on_progress is not None and not callable(on_progress):
        raise InvalidTypeError(f"on_progress must be callable, got {type(on_progress).__name__}")


def learn_from_traces(
    llm: BaseLLM,
    *,
    location: Any = "sqlite",
    trace_store: TraceStore | str | Path | None = None,
    scope: str = "agent",
    scope_id: str | None = None,
    project_id: str = "",
    allow_personal: bool = False,
    limit: int = 50,
    agent: str | None = None,
    remine: bool = False,
    dry_run: bool = False,
    on_progress: Progress | None = None,
) -> LearnReport:
    """Mine the ``limit`` most recent runs into durable facts.

    ``scope_id=None`` files agent-scope facts under each run's agent name;
    user and project scopes need ``allow_personal=True`` and a ``scope_id``.
    ``agent`` keeps only that agent's runs. Runs mined before are skipped
    unless ``remine`` (re-mining is harmless: adds are idempotent).
    ``dry_run`` asks the model but writes nothing (see ``report.proposed``).
    A run whose extraction fails is reported and left for the next pass.
    """
    check_target(scope, scope_id, allow_personal=allow_personal)
    _check_options(llm, limit, project_id, agent, remine, dry_run, on_progress)
    store: FactStore = make_fact_store(location)
    traces = trace_store if isinstance(trace_store, TraceStore) else TraceStore(trace_store)
    runs = traces.list_runs(limit=limit, name=RUN_SPAN)
    report = LearnReport(runs_seen=len(runs))
    done_before = set() if remine else traces.mined_trace_ids(r.trace_id for r in runs)
    # Oldest first, so a later run's correction supersedes an earlier fact.
    for position, run in enumerate(reversed(runs), start=1):
        run_agent = str(run.attributes.get("agent.name") or "")
        subject_id = scope_id if scope_id is not None else run_agent
        text = _run_text(run, traces)
        if (
            run.trace_id in done_before
            or (agent is not None and run_agent != agent)
            or not subject_id
            or not text
        ):
            report.runs_skipped += 1
        else:
            _mine_run(llm, store, traces, run, text, scope, subject_id, project_id, dry_run, report)
        if on_progress is not None:
            on_progress(position, len(runs))
    return report


def _mine_run(
    llm: BaseLLM,
    store: FactStore,
    traces: TraceStore,
    run: RunSummary,
    text: str,
    scope: str,
    scope_id: str,
    project_id: str,
    dry_run: bool,
    report: LearnReport,
) -> None:
    known = store.list_active(scope, scope_id, project_id, limit=MAX_KNOWN_FACTS)
    try:
        extracted = extract_for_scope(llm, scope, text, [f.fact for f in known])
    except Exception as exc:  # one bad run must not stop the pass
        report.failures.append((run.trace_id, f"{type(exc).__name__}: {exc}"))
        return
    replaced: set[int] = set()
    failures_before = len(report.failures)
    for item in extracted:
        if dry_run:
            report.proposed.append((run.trace_id, f"{scope}:{scope_id}", item.text))
            continue
        fact = Fact(
            fact=item.text,
            scope=scope,
            scope_id=scope_id,
            project_id=project_id,
            confidence=LOOP_CONFIDENCE,
            source=SOURCE_TRACES,
            source_trace_id=run.trace_id,
        )
        old = known[item.replaces] if item.replaces is not None else None
        try:
            if old is not None and old.id is not None and old.id not in replaced:
                new_id = store.update(fact, old.id)
                if new_id != old.id:
                    replaced.add(old.id)
                    report.facts_superseded.append((old.id, new_id))
            else:
                new_id = store.add(fact)
        except (ValueError, KeyError) as exc:  # e.g. the old fact was replaced meanwhile
            report.failures.append((run.trace_id, f"{type(exc).__name__}: {exc}"))
            continue
        if new_id not in report.facts_added:
            report.facts_added.append(new_id)
    report.runs_mined += 1
    if not dry_run and len(report.failures) == failures_before:  # else retry next pass
        traces.mark_mined([run.trace_id], time.time())


__all__ = [
    "AGENT_KNOWLEDGE_PROMPT",
    "LearnReport",
    "build_agent_messages",
    "check_target",
    "extract_for_scope",
    "learn_from_traces",
]
