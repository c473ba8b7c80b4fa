"""The fact-extraction prompt and its forgiving parser."""

from __future__ import annotations

import asyncio

import pytest

from fastaiagent.learn.extractor import (
    MAX_FACTS_PER_REPLY,
    MAX_KNOWN_FACTS,
    MAX_MESSAGE_CHARS,
    ExtractedFact,
    aextract_facts,
    build_extraction_messages,
    extract_facts,
    parse_extraction,
)
from fastaiagent.testing import CannedLLM


def texts(facts: list[ExtractedFact]) -> list[str]:
    return [f.text for f in facts]


def test_plain_json_answer():
    reply = '{"facts": [{"fact": "Is allergic to peanuts", "replaces": null}]}'
    assert parse_extraction(reply) == [ExtractedFact("Is allergic to peanuts")]


def test_json_in_prose_and_code_fences():
    reply = (
        "Sure! Here is what I found:\n```json\n"
        '{"facts": [{"fact": "Lives in Lyon"}, {"fact": "Has a beagle named Biscuit"}]}\n'
        "```\nLet me know if you need anything else."
    )
    assert texts(parse_extraction(reply)) == ["Lives in Lyon", "Has a beagle named Biscuit"]


def test_bare_list_of_strings_and_objects():
    assert texts(parse_extraction('["Prefers tea", "Works at Acme"]')) == [
        "Prefers tea",
        "Works at Acme",
    ]
    assert texts(parse_extraction('[{"text": "Speaks Dutch"}]')) == ["Speaks Dutch"]


def test_bracket_in_prose_before_the_json_is_skipped():
    reply = 'Facts [see below] (1 found): {"facts": ["Drives a red car"]}'
    assert texts(parse_extraction(reply)) == ["Drives a red car"]


def test_bullet_and_numbered_lists():
    reply = "Facts:\n- Is vegetarian\n* Runs marathons\n• Owns a bike\n1. Lives in Oslo\n2) Has twins"
    assert texts(parse_extraction(reply)) == [
        "Is vegetarian",
        "Runs marathons",
        "Owns a bike",
        "Lives in Oslo",
        "Has twins",
    ]


@pytest.mark.parametrize(
    "reply",
    [
        None,
        "",
        "   \n ",
        '{"facts": []}',
        "[]",
        '{"facts": null}',
        '{"facts": "none"}',
        "NONE",
        "No durable facts in this message.",
        "I'm sorry, I can't help with that.",
        "<<<garbage>>> {not json at all",
        "}{][",
        '{"answer": 42}',
        "[1, 2, 3]",
        "- none\n- N/A",
        "\x00\x01\x02",
    ],
)
def test_empty_refusal_and_junk_give_no_facts(reply):
    assert parse_extraction(reply) == []


def test_facts_are_cleaned_and_deduplicated_by_normalised_text():
    reply = '{"facts": ["  Prefers   email ", "prefers EMAIL", "\\"Likes jazz\\"", "ok", 7, null]}'
    assert texts(parse_extraction(reply)) == ["Prefers email", "Likes jazz"]


def test_overlong_fact_is_dropped_and_reply_capped():
    many = ", ".join(f'"Fact number {i}"' for i in range(MAX_FACTS_PER_REPLY + 10))
    assert len(parse_extraction(f"[{many}]")) == MAX_FACTS_PER_REPLY
    assert parse_extraction('["' + "x" * 2000 + '"]') == []


@pytest.mark.parametrize(
    ("ref", "expected"),
    [("F2", 1), ("f1", 0), ("#2", 1), (2, 1), ("2", 1), (["F1"], 0), ("F9", None), (0, None),
     ("F0", None), (True, None), ("banana", None), (None, None), (1.5, None)],
)
def test_replaces_reference_is_resolved_against_known_facts(ref, expected):
    import json

    reply = json.dumps({"facts": [{"fact": "Prefers Slack", "replaces": ref}]})
    assert parse_extraction(reply, known=2) == [ExtractedFact("Prefers Slack", expected)]


def test_replaces_without_known_facts_is_ignored():
    reply = '{"facts": [{"fact": "Prefers Slack", "replaces": "F1"}]}'
    assert parse_extraction(reply, known=0) == [ExtractedFact("Prefers Slack", None)]


def test_bullet_with_replaces_suffix():
    reply = "- Prefers Slack (replaces F1)\n- Lives in Rome [supersedes: F3]"
    assert parse_extraction(reply, known=3) == [
        ExtractedFact("Prefers Slack", 0),
        ExtractedFact("Lives in Rome", 2),
    ]


def test_prompt_lists_known_facts_with_short_ids_and_bounds_the_message():
    messages = build_extraction_messages(
        "y" * (MAX_MESSAGE_CHARS + 500), known=["Prefers email", "Lives in Lyon"]
    )
    assert messages[0].role == "system" and "replaces" in (messages[0].content or "")
    body = messages[1].content or ""
    assert "F1: Prefers email" in body and "F2: Lives in Lyon" in body
    assert "Message from the user" in body
    assert len(body) < MAX_MESSAGE_CHARS + 300


def test_prompt_shows_at_most_max_known_facts():
    known = [f"fact {i}" for i in range(MAX_KNOWN_FACTS + 5)]
    body = build_extraction_messages("hi", known=known)[1].content or ""
    assert f"F{MAX_KNOWN_FACTS}:" in body and f"F{MAX_KNOWN_FACTS + 1}:" not in body


def test_prompt_without_known_facts_and_assistant_role():
    body = build_extraction_messages("hello", role="assistant")[1].content or ""
    assert "(none)" in body and "Message from the assistant" in body


def test_extract_facts_round_trip_and_errors_propagate():
    llm = CannedLLM('{"facts": [{"fact": "Prefers Slack", "replaces": "F1"}]}')
    assert extract_facts(llm, "use slack please", known=["Prefers email"]) == [
        ExtractedFact("Prefers Slack", 0)
    ]
    assert "F1: Prefers email" in (llm.calls[0][1].content or "")
    with pytest.raises(TimeoutError):
        extract_facts(CannedLLM(TimeoutError("slow")), "hi")


def test_aextract_facts_uses_acomplete():
    llm = CannedLLM('["Has a cat"]')
    assert asyncio.run(aextract_facts(llm, "I have a cat")) == [ExtractedFact("Has a cat")]
