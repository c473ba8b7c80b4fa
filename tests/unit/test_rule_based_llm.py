"""RuleBasedLLM: memory with no API key, learning by rules and chatting without echoing memory."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from fastaiagent import Agent, Memory, RunContext
from fastaiagent.agent.memory_blocks.framing import PREAMBLE
from fastaiagent.learn.extractor import extract_facts
from fastaiagent.llm.message import SystemMessage, UserMessage
from fastaiagent.testing import RuleBasedLLM
from fastaiagent.testing.rules import facts_in


@dataclass
class Session:
    user_id: str


@pytest.mark.parametrize(
    ("said", "facts"),
    [
        ("Hi! My name is Alice and I live in Paris.", ["Name is Alice", "Lives in Paris"]),
        ("call me Al; I'm a vegetarian", ["Name is Al", "Is a vegetarian"]),
        ("I prefer email over phone calls.", ["Prefers email over phone calls"]),
        ("I love hiking, but I don't like mornings!", ["Loves hiking", "Dislikes mornings"]),
        ("I am allergic to peanuts", ["Is allergic to peanuts"]),
        (
            "I'm 34 years old and my favourite colour is green",
            ["Is 34 years old", "Favourite colour is green"],
        ),
        (
            "I work at Acme but my email is al@acme.example.",
            ["Works at Acme", "Email is al@acme.example"],
        ),
        ("I have two cats named Tom and Jerry", ["Has two cats named Tom and Jerry"]),
    ],
)
def test_first_person_facts_are_found(said, facts):
    assert facts_in(said) == facts


@pytest.mark.parametrize(
    "said",
    [
        "What's my name?",
        "I have a question about my order",
        "I'm looking for a refund",
        "thanks!",
        "",
    ],
)
def test_questions_requests_and_chatter_are_not_facts(said):
    assert facts_in(said) == []


@pytest.mark.parametrize("tools", [True, False])
def test_it_answers_the_extraction_prompt_as_a_tool_call_or_as_text(tools):
    llm = RuleBasedLLM(supports_tools=tools)
    found = extract_facts(llm, "My name is Alice. I live in Paris.")
    assert [(f.text, f.replaces) for f in found] == [
        ("Name is Alice", None),
        ("Lives in Paris", None),
    ]
    assert [len(offered) for offered in llm.tools_offered] == [1 if tools else 0]


def test_a_changed_fact_replaces_the_known_one_and_a_new_liking_adds():
    known = ["Likes tea", "Lives in Paris", "Name is Alice"]
    found = extract_facts(RuleBasedLLM(), "I moved to Berlin and I like coffee", known_facts=known)
    assert [(f.text, f.replaces) for f in found] == [("Lives in Berlin", 1), ("Likes coffee", None)]


def test_only_what_the_user_said_is_extracted():
    found = extract_facts(RuleBasedLLM(), "My name is Bot", role="assistant")
    assert found == []


def test_chat_answers_a_question_from_the_remembered_facts_never_the_preamble():
    llm = RuleBasedLLM()
    notes = SystemMessage(
        f'Facts about this user:\n{PREAMBLE}\n- "Name is \\"Al\\"" (learned, 0.6)'
    )
    asked = llm.complete([notes, UserMessage("Who am I?")]).content
    assert asked == 'Here is what I remember: Name is "Al".'
    assert llm.complete([notes, UserMessage("I live in Rome")]).content == "Got it."
    assert llm.complete([UserMessage("Who am I?")]).content == "I don't know that yet."


def test_memory_learns_per_user_with_it():
    llm = RuleBasedLLM()
    mem = Memory(user_id=lambda ctx: ctx.state.user_id, learn=llm)
    agent = Agent(name="assistant", llm=llm, memory=mem)
    alice, bob = RunContext(state=Session("alice")), RunContext(state=Session("bob"))
    agent.run("My name is Alice and I prefer email.", context=alice)
    agent.run("I live in Oslo", context=bob)
    assert mem.flush(timeout=30)
    learned = {(f.fact, f.source, f.confidence) for f in mem.retrieve(id="alice")}
    assert learned == {("Name is Alice", "learned", 0.6), ("Prefers email", "learned", 0.6)}
    assert [f.fact for f in mem.retrieve(id="bob")] == ["Lives in Oslo"]
    answer = agent.run("What do you know about me?", context=alice).output
    assert "Name is Alice" in answer and "Oslo" not in answer and PREAMBLE not in answer


def test_for_an_agent_s_knowledge_it_records_instructions_never_personal_facts():
    from fastaiagent.learn.loop import extract_for_scope

    said = "My name is Alice and I live in Paris. Please always answer in two sentences."
    agent = extract_for_scope(RuleBasedLLM(), "agent", said, [])
    assert [f.text for f in agent] == ["Always answer in two sentences"]
    user = extract_for_scope(RuleBasedLLM(), "user", said, [])
    assert [f.text for f in user] == ["Name is Alice", "Lives in Paris"]


def test_remembered_gives_the_facts_of_a_prompt_without_preamble_summary_or_messages():
    from fastaiagent.agent.memory_blocks.framing import MESSAGES_PREAMBLE, SUMMARY_PREAMBLE
    from fastaiagent.testing import remembered

    prompt = [
        SystemMessage("Be brief."),
        SystemMessage(
            f'Facts true for everyone using this agent:\n{PREAMBLE}\n- "Open 9-17" (manual)'
        ),
        SystemMessage(f'Facts about this user:\n{PREAMBLE}\n- "Has a beagle" (learned, 0.6)'),
        SystemMessage(
            f'Summary of earlier conversation:\n{SUMMARY_PREAMBLE}\n- "Talked about dogs" (summary)'
        ),
        SystemMessage(
            f'Relevant past messages:\n{MESSAGES_PREAMBLE}\n- "I adopted a puppy" (user said)'
        ),
        UserMessage('- "not a note" (user said)'),
    ]
    assert remembered(prompt) == ["Open 9-17", "Has a beagle"]
