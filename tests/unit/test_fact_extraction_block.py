"""FactExtractionBlock (acceptance 113-120, H8, H15; contradictions)."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import threading

import pytest

from fastaiagent import trace
from fastaiagent.agent import Agent, ComposableMemory, MemoryIsolationError
from fastaiagent.agent.memory_blocks.background import BackgroundQueue
from fastaiagent.agent.memory_blocks.facts import HEADING, FactExtractionBlock
from fastaiagent.agent.memory_blocks.framing import PREAMBLE
from fastaiagent.errors import InvalidTypeError, InvalidValueError
from fastaiagent.learn import SOURCE_CONVERSATION, Fact, MemoryStore
from fastaiagent.llm.base import BaseLLM, LLMResponse
from fastaiagent.llm.message import AssistantMessage, Message, UserMessage
from fastaiagent.testing import CannedLLM, FunctionLLM, echo_llm

_KNOWN = re.compile(r"^(F\d+): (.*)$", re.MULTILINE)


def said(body: str) -> str:
    return body.split("<<<\n", 1)[1].rsplit("\n>>>", 1)[0]


def scripted_extractor() -> FunctionLLM:
    """A deterministic extractor: "FACT: x" states x; "FACT: x | REPLACES: y" changes y.

    It reads the known facts from the prompt the block sent, as a real model would.
    """

    def reply(messages: list[Message]) -> str:
        body = messages[-1].content or ""
        ids = {text.casefold(): fid for fid, text in _KNOWN.findall(body)}
        facts = []
        for line in said(body).splitlines():
            match = re.match(r"FACT: (.*?)(?: \| REPLACES: (.*))?$", line.strip())
            if match:
                replaces = ids.get((match.group(2) or "").casefold())
                facts.append({"fact": match.group(1), "replaces": replaces})
        return json.dumps({"facts": facts})

    return FunctionLLM(reply)


def feed(block: FactExtractionBlock, *texts: str, role: str = "user") -> None:
    for text in texts:
        block.on_message(UserMessage(text) if role == "user" else AssistantMessage(text))


def active(store: MemoryStore, scope_id: str, scope: str = "user") -> list[str]:
    return [f.fact for f in store.list_active(scope, scope_id, limit=None)]


@pytest.fixture
def store(tmp_path) -> MemoryStore:
    return MemoryStore(tmp_path / "facts.db")


# -- rendering, caps, cadence, roles (acceptance 113-116, H8) -------------------------


def test_renders_known_facts_bullets():
    block = FactExtractionBlock(scripted_extractor())
    assert block.render("q") == []
    feed(block, "FACT: Is allergic to peanuts\nFACT: Has a beagle named Biscuit")
    [message] = block.render("q")
    assert message.role == "system"
    assert message.content == (
        f"{HEADING}\n{PREAMBLE}\n"
        '- "Is allergic to peanuts" (learned, 0.6)\n'
        '- "Has a beagle named Biscuit" (learned, 0.6)'
    )


def test_inject_false_extracts_without_rendering():
    block = FactExtractionBlock(scripted_extractor(), inject=False)
    feed(block, "FACT: Likes tea")
    assert block.facts == ["Likes tea"] and block.render("q") == []


def test_max_facts_drops_the_oldest():
    block = FactExtractionBlock(scripted_extractor(), max_facts=3)
    feed(block, *(f"FACT: fact number {i}" for i in range(5)))
    assert block.facts == ["fact number 2", "fact number 3", "fact number 4"]


def test_extract_every_n_inspected_messages():
    llm = scripted_extractor()
    block = FactExtractionBlock(llm, extract_every=3, roles=("user",))
    for i in range(1, 10):
        block.on_message(UserMessage(f"FACT: user fact {i}"))
        block.on_message(AssistantMessage("not inspected"))
    assert llm.call_count == 3
    assert block.facts == ["user fact 3", "user fact 6", "user fact 9"]


def test_user_role_only_never_extracts_from_assistant_messages():
    llm = scripted_extractor()
    block = FactExtractionBlock(llm, roles=("user",))
    feed(block, "FACT: The assistant is called Bob", role="assistant")
    feed(block, "FACT: Lives in Lyon")
    assert llm.call_count == 1
    assert all("Bob" not in (m.content or "") for call in llm.calls for m in call)
    assert block.facts == ["Lives in Lyon"]


def test_default_roles_read_both_and_tell_the_model_who_spoke():
    llm = scripted_extractor()
    block = FactExtractionBlock(llm)
    feed(block, "FACT: Told the user about plan B", role="assistant")
    assert llm.call_count == 1 and "Message from the assistant" in (llm.calls[0][1].content or "")


def test_dedupe_is_normalised_case_and_spacing():
    """Acceptance H8: facts are compared normalised (case and spacing) for dedupe."""
    block = FactExtractionBlock(scripted_extractor())
    feed(block, "FACT: Prefers email", "FACT: prefers   EMAIL", "FACT:  Prefers email ")
    assert block.facts == ["Prefers email"]


def test_tool_messages_and_empty_messages_are_not_inspected():
    llm = scripted_extractor()
    block = FactExtractionBlock(llm)
    block.on_message(AssistantMessage(None))
    block.on_message(UserMessage("   "))
    assert llm.call_count == 0 and block.inspected == 0


# -- bad answers and failing models ------------------------------------------------


@pytest.mark.parametrize(
    "reply", ["", "no facts here, sorry", "{{{{", '{"facts": []}', "<html>502</html>"]
)
def test_junk_or_empty_answers_learn_nothing(reply):
    block = FactExtractionBlock(CannedLLM(reply))
    feed(block, "hello there")
    assert block.facts == [] and block.render("q") == []


def test_prose_around_json_and_bullets_are_understood():
    block = FactExtractionBlock(
        CannedLLM(['Here you go: {"facts": ["Works at Acme"]} hope it helps', "- Has two cats"])
    )
    feed(block, "one", "two")
    assert block.facts == ["Works at Acme", "Has two cats"]


@pytest.mark.parametrize("error", [RuntimeError("provider down"), TimeoutError("too slow")])
def test_llm_error_is_logged_and_state_kept(error, caplog):
    llm = CannedLLM(['["Lives in Oslo"]', error, '["Has twins"]'])
    block = FactExtractionBlock(llm)
    with caplog.at_level(logging.WARNING, logger="fastaiagent.memory"):
        feed(block, "a", "b", "c")
    assert block.facts == ["Lives in Oslo", "Has twins"]
    assert "extraction LLM failed" in caplog.text


def test_failing_extraction_never_breaks_an_agent_run():
    block = FactExtractionBlock(CannedLLM(RuntimeError("down")))
    agent = Agent("a", echo_llm(), memory=ComposableMemory(blocks=[block]))
    assert agent.run("hi").output == "You said: hi"


# -- contradictions --------------------------------------------------------------


def test_contradiction_replaces_the_old_fact_in_the_list():
    block = FactExtractionBlock(scripted_extractor())
    feed(block, "FACT: Prefers email", "FACT: Lives in Rome")
    feed(block, "FACT: Prefers Slack | REPLACES: Prefers email")
    assert block.facts == ["Lives in Rome", "Prefers Slack"]


def test_the_model_is_shown_the_current_facts_with_short_ids():
    llm = scripted_extractor()
    block = FactExtractionBlock(llm)
    feed(block, "FACT: Prefers email", "FACT: Lives in Rome", "hi")
    body = llm.calls[-1][1].content or ""
    assert "F1: Lives in Rome" in body and "F2: Prefers email" in body  # newest first


def test_persisted_contradiction_supersedes_and_keeps_history(store):
    block = FactExtractionBlock(scripted_extractor(), persist=True, scope_id="alice", store=store)
    feed(block, "FACT: Prefers email")
    feed(block, "FACT: Prefers Slack | REPLACES: Prefers email")
    assert active(store, "alice") == ["Prefers Slack"]
    history = store.browse(scope="user", scope_id="alice", include_superseded=True)
    by_text = {f.fact: f for f in history}
    assert by_text["Prefers email"].superseded_by == by_text["Prefers Slack"].id
    assert block.facts == ["Prefers Slack"]


def test_contradiction_known_facts_come_from_the_store_across_blocks(store):
    """A new process (new block) still sees, and can replace, what earlier runs learned."""
    first = FactExtractionBlock(scripted_extractor(), persist=True, scope_id="alice", store=store)
    feed(first, "FACT: Prefers email")
    llm = scripted_extractor()
    later = FactExtractionBlock(llm, persist=True, scope_id="alice", store=store)
    feed(later, "FACT: Prefers Slack | REPLACES: Prefers email")
    assert "F1: Prefers email" in (llm.calls[0][1].content or "")
    assert active(store, "alice") == ["Prefers Slack"]


def test_manual_facts_are_never_superseded_by_learned_ones(store):
    manual_id = store.add(Fact("Prefers email", scope="user", scope_id="alice"))
    block = FactExtractionBlock(scripted_extractor(), persist=True, scope_id="alice", store=store)
    feed(block, "FACT: Prefers Slack | REPLACES: Prefers email")
    assert sorted(active(store, "alice")) == ["Prefers Slack", "Prefers email"]
    assert store.get(manual_id).superseded_by is None


def test_new_fact_is_kept_when_the_supersede_fails(store, caplog):
    """The replaced fact vanished between the read and the write: the new fact is not lost."""

    def reply(messages: list[Message]) -> str:
        store.delete("user", "alice", fact="Prefers email")  # a concurrent forget
        return '{"facts": [{"fact": "Prefers Slack", "replaces": "F1"}]}'

    FactExtractionBlock(scripted_extractor(), persist=True, scope_id="alice", store=store).on_message(
        UserMessage("FACT: Prefers email")
    )
    block = FactExtractionBlock(FunctionLLM(reply), persist=True, scope_id="alice", store=store)
    with caplog.at_level(logging.WARNING, logger="fastaiagent.memory"):
        feed(block, "use slack")
    assert active(store, "alice") == ["Prefers Slack"]
    assert "could not supersede" in caplog.text


def test_replacing_with_the_same_text_changes_nothing(store):
    block = FactExtractionBlock(scripted_extractor(), persist=True, scope_id="alice", store=store)
    feed(block, "FACT: Prefers email")
    feed(block, "FACT: prefers EMAIL | REPLACES: Prefers email")
    assert active(store, "alice") == ["Prefers email"]
    assert len(store.browse(scope="user", scope_id="alice", include_superseded=True)) == 1


# -- persistence to the store (acceptance 117-119, H15) -----------------------------------


def test_persist_requires_a_scope_id():
    with pytest.raises(ValueError, match="scope_id"):
        FactExtractionBlock(CannedLLM("[]"), persist=True, scope="user", scope_id="")
    with pytest.raises(ValueError, match=r'"\*" is a read wildcard and cannot be a scope_id'):
        FactExtractionBlock(CannedLLM("[]"), persist=True, scope_id="*")


def test_persisted_facts_carry_confidence_source_and_the_runs_trace_id(store):
    block = FactExtractionBlock(
        scripted_extractor(), roles=("user",), persist=True, scope_id="alice", store=store
    )
    agent = Agent("a", echo_llm(), memory=ComposableMemory(blocks=[block]))
    with trace.capture() as spans:
        agent.run("FACT: Has a beagle named Biscuit")
    [fact] = store.list_active("user", "alice")
    assert fact.fact == "Has a beagle named Biscuit"
    assert fact.confidence == 0.6 and fact.source == SOURCE_CONVERSATION
    run_trace_ids = {s.trace_id for s in spans.spans}
    assert fact.source_trace_id in run_trace_ids and len(run_trace_ids) == 1


def test_persist_without_tracing_has_no_trace_id(store):
    block = FactExtractionBlock(scripted_extractor(), persist=True, scope_id="alice", store=store,
                                confidence=0.8)
    feed(block, "FACT: Speaks Dutch")
    [fact] = store.list_active("user", "alice")
    assert fact.source_trace_id is None and fact.confidence == 0.8


def test_persist_is_idempotent(store):
    block = FactExtractionBlock(scripted_extractor(), persist=True, scope_id="alice", store=store)
    feed(block, "FACT: Likes jazz", "FACT: likes JAZZ")
    block.clear()
    feed(block, "FACT: Likes jazz")
    FactExtractionBlock(scripted_extractor(), persist=True, scope_id="alice", store=store)\
        .on_message(UserMessage("FACT: Likes jazz"))
    assert len(store.browse(scope="user", scope_id="alice", include_superseded=True)) == 1


def test_persist_writes_only_the_blocks_subject(store):
    store.add(Fact("Bob's fact", scope="user", scope_id="bob"))
    store.add(Fact("Alice in project p2", scope="user", scope_id="alice", project_id="p2"))
    block = FactExtractionBlock(scripted_extractor(), persist=True, scope_id="alice",
                                project_id="p1", store=store, max_persisted=1)
    feed(block, "FACT: one", "FACT: two")
    assert [f.fact for f in store.list_active("user", "alice", "p1")] == ["two"]
    assert active(store, "bob") == ["Bob's fact"]
    assert [f.fact for f in store.list_active("user", "alice", "p2")] == ["Alice in project p2"]


def test_default_store_is_the_local_db(tmp_path, monkeypatch):
    monkeypatch.setenv("FASTAIAGENT_LOCAL_DB", str(tmp_path / "default.db"))
    block = FactExtractionBlock(scripted_extractor(), persist=True, scope_id="alice")
    assert not (tmp_path / "default.db").exists()  # construction touches no file
    feed(block, "FACT: Uses vim")
    assert active(MemoryStore(tmp_path / "default.db"), "alice") == ["Uses vim"]


def test_store_error_is_logged_and_the_run_continues(tmp_path, caplog):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    broken = MemoryStore(blocker / "sub" / "facts.db")  # cannot be created
    block = FactExtractionBlock(scripted_extractor(), persist=True, scope_id="alice", store=broken)
    agent = Agent("a", echo_llm(), memory=ComposableMemory(blocks=[block]))
    with caplog.at_level(logging.WARNING, logger="fastaiagent.memory"):
        result = agent.run("FACT: Likes tea")
    assert result.output == "You said: FACT: Likes tea"
    assert "could not persist" in caplog.text
    assert block.facts == ["Likes tea"]  # still known for this conversation


def test_max_persisted_prunes_oldest_learned_facts_never_manual_ones(store):
    """Acceptance 119 and H15: the cap counts and deletes only facts learned during runs."""
    for i in range(3):
        store.add(Fact(f"manual {i}", scope="user", scope_id="alice"))
    block = FactExtractionBlock(scripted_extractor(), persist=True, scope_id="alice",
                                store=store, max_persisted=2)
    feed(block, "FACT: learned 0", "FACT: learned 1", "FACT: learned 2", "FACT: learned 3")
    facts = active(store, "alice")
    assert [f for f in facts if f.startswith("learned")] == ["learned 3", "learned 2"]
    assert sorted(f for f in facts if f.startswith("manual")) == ["manual 0", "manual 1", "manual 2"]
    all_rows = store.browse(scope="user", scope_id="alice", include_superseded=True)
    assert not any(f.fact in ("learned 0", "learned 1") for f in all_rows)  # hard-deleted


def test_max_persisted_none_keeps_everything(store):
    block = FactExtractionBlock(scripted_extractor(), persist=True, scope_id="alice",
                                store=store, max_persisted=None)
    feed(block, *(f"FACT: learned {i}" for i in range(5)))
    assert len(active(store, "alice")) == 5


def test_tracing_reports_extracted_and_persisted_counts(store):
    block = FactExtractionBlock(scripted_extractor(), persist=True, scope_id="alice", store=store)
    memory = ComposableMemory(blocks=[block])
    with trace.capture() as spans:
        memory.add_message(UserMessage("FACT: a fact\nFACT: another fact"))
        memory.add_message(UserMessage("FACT: a fact"))
    first, second = spans.named("memory.write.facts")
    assert first.attributes["memory.action"] == "extracted_facts"
    assert json.loads(first.attributes["memory.detail"]) == {"facts_extracted": 2, "persisted": 2}
    assert json.loads(second.attributes["memory.detail"]) == {"facts_extracted": 0, "persisted": 0}


def test_tracing_detail_without_persist_has_no_persisted_count():
    memory = ComposableMemory(blocks=[FactExtractionBlock(scripted_extractor())])
    with trace.capture() as spans:
        memory.add_message(UserMessage("FACT: x marks the spot"))
    [span] = spans.named("memory.write.facts")
    assert json.loads(span.attributes["memory.detail"]) == {"facts_extracted": 1}


# -- isolation, persistence of the list, clear (acceptance 120) --------------------------


def test_isolated_copy_refused_when_persisting(store):
    block = FactExtractionBlock(CannedLLM("[]"), persist=True, scope_id="alice", store=store)
    with pytest.raises(MemoryIsolationError, match="writes to an external store"):
        block.isolated_copy()


def test_isolated_copy_without_persist_is_independent():
    block = FactExtractionBlock(scripted_extractor())
    feed(block, "FACT: Likes tea")
    copy = block.isolated_copy()
    feed(copy, "FACT: Likes coffee")
    assert block.facts == ["Likes tea"] and copy.facts == ["Likes tea", "Likes coffee"]


def test_save_load_round_trip(tmp_path):
    block = FactExtractionBlock(scripted_extractor(), extract_every=2)
    feed(block, "x", "FACT: Likes tea", "y")
    block.save(tmp_path / "facts.json")
    restored = FactExtractionBlock(scripted_extractor(), extract_every=2)
    restored.load(tmp_path / "facts.json")
    assert restored.facts == ["Likes tea"] and restored.inspected == 3
    assert restored.render("") == block.render("")


def test_composable_memory_saves_blocks_facts_json(tmp_path):
    block = FactExtractionBlock(scripted_extractor())
    memory = ComposableMemory(blocks=[block])
    memory.add_message(UserMessage("FACT: Likes tea"))
    memory.save(tmp_path / "state")
    assert (tmp_path / "state" / "blocks" / "facts.json").is_file()
    fresh = FactExtractionBlock(scripted_extractor())
    ComposableMemory(blocks=[fresh]).load(tmp_path / "state")
    assert fresh.facts == ["Likes tea"]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{broken", "facts.json is corrupt: Expecting property name"),
        ('{"facts": "nope"}', "facts state is corrupt: no list of fact strings"),
        ('{"facts": [1, 2]}', "facts state is corrupt: no list of fact strings"),
        ('{"facts": [], "inspected": -3}', "facts state is corrupt: bad inspected count"),
    ],
)
def test_corrupt_file_raises_and_keeps_the_list(tmp_path, content, message):
    block = FactExtractionBlock(scripted_extractor())
    feed(block, "FACT: Likes tea")
    path = tmp_path / "facts.json"
    path.write_text(content)
    with pytest.raises(ValueError, match=re.escape(message)):
        block.load(path)
    assert block.facts == ["Likes tea"]


def test_clear_forgets_the_list_but_not_the_store(store):
    block = FactExtractionBlock(scripted_extractor(), persist=True, scope_id="alice", store=store)
    feed(block, "FACT: Likes tea")
    block.clear()
    assert block.facts == [] and block.render("") == []
    assert active(store, "alice") == ["Likes tea"]


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"max_facts": 0}, InvalidValueError, "max_facts must be >= 1, got 0"),
        ({"max_facts": 1.5}, InvalidTypeError, "max_facts must be an int, got float 1.5"),
        ({"extract_every": 0}, InvalidValueError, "extract_every must be >= 1, got 0"),
        ({"extract_every": "2"}, InvalidTypeError, "extract_every must be an int, got str '2'"),
        ({"roles": ()}, InvalidValueError, "roles must name at least one message role"),
        ({"roles": ("robot",)}, InvalidValueError, "roles must be one of 'system', 'user'"),
        ({"inject": "no"}, InvalidTypeError, "inject must be True or False, got str 'no'"),
        ({"persist": 1}, InvalidTypeError, "persist must be True or False, got int 1"),
        (
            {"scope": "team"},
            InvalidValueError,
            "scope must be one of 'user', 'project', 'agent', got 'team'",
        ),
        ({"scope_id": 42}, InvalidTypeError, "scope_id must be a str, got int 42"),
        ({"project_id": None}, InvalidTypeError, "project_id must be a str, got NoneType None"),
        ({"confidence": 1.5}, InvalidValueError, "confidence must be <= 1.0, got 1.5"),
        ({"confidence": -0.1}, InvalidValueError, "confidence must be >= 0.0, got -0.1"),
        ({"confidence": float("nan")}, InvalidValueError, "confidence must be a finite number, got nan"),
        ({"confidence": True}, InvalidTypeError, "confidence must be a number, got bool True"),
        ({"confidence": "0.9"}, InvalidTypeError, "confidence must be a number, got str '0.9'"),
        ({"max_persisted": 0}, InvalidValueError, "max_persisted must be >= 1, got 0"),
        ({"max_persisted": True}, InvalidTypeError, "max_persisted must be an int, got bool True"),
        ({"name": ""}, InvalidValueError, "name cannot be empty"),
        ({"store": "facts.db"}, InvalidTypeError, "store must be a FactStore"),
    ],
)
def test_bad_arguments_raise_at_construction(kwargs, error, message):
    """A wrong type is a TypeError, a value out of range a ValueError, both naming the argument."""
    with pytest.raises(error, match=re.escape(message)):
        FactExtractionBlock(CannedLLM("[]"), **kwargs)


def test_llm_is_required():
    with pytest.raises(TypeError, match="FactExtractionBlock needs an llm with a complete"):
        FactExtractionBlock(None)  # type: ignore[arg-type]


# -- async and background ------------------------------------------------------------


class SlowAsyncExtractor(BaseLLM):
    """An async-native model that takes a while, like a real provider: it answers
    once ``go`` is set (by another task of the loop; 10 s at most)."""

    def __init__(self, reply: str) -> None:
        self.reply, self.async_calls = reply, 0
        self.go: asyncio.Event | None = None

    def complete(self, messages, *, tools=None):  # type: ignore[no-untyped-def]
        raise AssertionError("aon_message must use acomplete")

    async def acomplete(self, messages, *, tools=None):  # type: ignore[no-untyped-def]
        self.async_calls += 1
        assert self.go is not None
        await asyncio.wait_for(self.go.wait(), 10)
        return LLMResponse(content=self.reply)


def test_aon_message_awaits_acomplete_and_leaves_the_loop_free(store):
    llm = SlowAsyncExtractor('["Likes tea"]')
    block = FactExtractionBlock(llm, persist=True, scope_id="alice", store=store)

    async def main() -> None:
        llm.go = asyncio.Event()
        asyncio.get_running_loop().call_soon(llm.go.set)  # runs only while the loop is free
        await block.aon_message(UserMessage("I like tea"))

    asyncio.run(main())
    assert llm.async_calls == 1 and active(store, "alice") == ["Likes tea"]


def test_arun_with_a_slow_sync_extractor_does_not_block_other_runs(store):
    """A slow extraction model in arun runs off the loop: the loop goes on meanwhile
    (the model answers once a callback of the loop has run, 10 s at most)."""
    loop_ran: list[bool] = []
    held: dict[str, asyncio.AbstractEventLoop] = {}

    def extract(messages: list[Message]) -> str:
        answered = threading.Event()
        held["loop"].call_soon_threadsafe(answered.set)
        loop_ran.append(answered.wait(10))
        return '["Likes tea"]'

    block = FactExtractionBlock(FunctionLLM(extract), persist=True, scope_id="alice", store=store)
    agent = Agent("a", echo_llm(), memory=ComposableMemory(blocks=[block]))

    async def main() -> None:
        held["loop"] = asyncio.get_running_loop()
        await agent.arun("I like tea")

    asyncio.run(main())
    assert loop_ran and all(loop_ran), loop_ran  # the loop went on during each extraction
    assert active(store, "alice") == ["Likes tea"]


def test_background_extraction_keeps_the_trace_id_of_the_run(store):
    """Extraction submitted to a BackgroundQueue after the reply still stamps the run's trace."""
    reply_ready = threading.Event()

    def slow_reply(messages: list[Message]) -> str:
        reply_ready.wait(10)
        return '["Likes tea"]'

    block = FactExtractionBlock(FunctionLLM(slow_reply), persist=True, scope_id="alice",
                                store=store)
    queue = BackgroundQueue()
    with trace.capture() as spans:
        with trace.span("agent.run"):
            queue.submit(lambda: block.on_message(UserMessage("I like tea")),
                         span="memory.write.facts")
        assert active(store, "alice") == []  # the reply is not held for extraction
        reply_ready.set()
        assert queue.flush(timeout=10)
        [run_span] = spans.named("agent.run")
        [write_span] = spans.named("memory.write.facts")
    [fact] = store.list_active("user", "alice")
    assert fact.source_trace_id == run_span.trace_id
    assert write_span.parent_id == run_span.span_id
    assert write_span.attributes["memory.action"] == "extracted_facts"


# -- the spec's snippets ---------------------------------------------------------------


def test_spec_snippet_fact_extraction_block():
    llm = CannedLLM('{"facts": [{"fact": "The user is allergic to peanuts", "replaces": null}]}')
    block = FactExtractionBlock(
        llm=llm,                      # use a fast model (gpt-4o-mini, claude-haiku)
        max_facts=200,                # cap; oldest drop on overflow
        extract_every=1,              # run extraction every N inspected messages
        roles=("user", "assistant"),  # which messages to read; ("user",) skips the model's own claims
        inject=True,                  # False = extract (and persist) without rendering
    )
    block.on_message(UserMessage("I'm allergic to peanuts"))
    assert "The user is allergic to peanuts" in (block.render("")[0].content or "")


def test_spec_snippet_persist_true():
    llm = CannedLLM('["Prefers terse answers"]')
    block = FactExtractionBlock(
        llm=llm,
        persist=True,           # write new facts to learned_memory during the run
        scope="user",           # 'user' | 'project' | 'agent'
        scope_id="upendra",     # REQUIRED when persist=True
        confidence=0.6,         # stamped on auto-facts; below curated 1.0 so they sort lower
        max_persisted=200,      # keep the newest N learned facts per subject; None = no cap
    )
    block.on_message(UserMessage("Keep it short please"))
    [fact] = MemoryStore().list_active("user", "upendra")
    assert fact.fact == "Prefers terse answers" and fact.confidence == 0.6
