"""The fact-extraction prompt and its forgiving parser."""

from __future__ import annotations

import asyncio

import pytest

from fastaiagent.agent.memory_blocks.facts import FactExtractionBlock
from fastaiagent.learn import MemoryStore
from fastaiagent.learn.extractor import (
    MAX_FACTS_PER_REPLY,
    MAX_KNOWN_FACTS,
    MAX_MESSAGE_CHARS,
    RECORD_FACTS_TOOL,
    ExtractedFact,
    aextract_facts,
    build_extraction_messages,
    extract_facts,
    parse_extraction,
    parse_extraction_response,
)
from fastaiagent.llm.base import LLMResponse, ToolSpec
from fastaiagent.llm.errors import LLMBadRequestError, LLMServerError
from fastaiagent.llm.message import Message, UserMessage
from fastaiagent.testing import CannedLLM, FunctionLLM, Reply, tool_call


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
    assert parse_extraction(reply, known_count=2) == [ExtractedFact("Prefers Slack", expected)]


def test_replaces_without_known_facts_is_ignored():
    reply = '{"facts": [{"fact": "Prefers Slack", "replaces": "F1"}]}'
    assert parse_extraction(reply, known_count=0) == [ExtractedFact("Prefers Slack", None)]


def test_bullet_with_replaces_suffix():
    reply = "- Prefers Slack (replaces F1)\n- Lives in Rome [supersedes: F3]"
    assert parse_extraction(reply, known_count=3) == [
        ExtractedFact("Prefers Slack", 0),
        ExtractedFact("Lives in Rome", 2),
    ]


def test_prompt_lists_known_facts_with_short_ids_and_bounds_the_message():
    messages = build_extraction_messages(
        "y" * (MAX_MESSAGE_CHARS + 500), known_facts=["Prefers email", "Lives in Lyon"]
    )
    assert messages[0].role == "system" and "replaces" in (messages[0].content or "")
    body = messages[1].content or ""
    assert "F1: Prefers email" in body and "F2: Lives in Lyon" in body
    assert "Message from the user" in body
    assert len(body) < MAX_MESSAGE_CHARS + 300


def test_prompt_shows_at_most_max_known_facts():
    known = [f"fact {i}" for i in range(MAX_KNOWN_FACTS + 5)]
    body = build_extraction_messages("hi", known_facts=known)[1].content or ""
    assert f"F{MAX_KNOWN_FACTS}:" in body and f"F{MAX_KNOWN_FACTS + 1}:" not in body


def test_prompt_without_known_facts_and_assistant_role():
    body = build_extraction_messages("hello", role="assistant")[1].content or ""
    assert "(none)" in body and "Message from the assistant" in body


def test_extract_facts_round_trip_and_errors_propagate():
    llm = CannedLLM('{"facts": [{"fact": "Prefers Slack", "replaces": "F1"}]}')
    assert extract_facts(llm, "use slack please", known_facts=["Prefers email"]) == [
        ExtractedFact("Prefers Slack", 0)
    ]
    assert "F1: Prefers email" in (llm.calls[0][1].content or "")
    with pytest.raises(TimeoutError, match=r"^slow$"):  # the model's own error, unchanged
        extract_facts(CannedLLM(TimeoutError("slow")), "hi")


def test_aextract_facts_uses_acomplete():
    llm = CannedLLM('["Has a cat"]')
    assert asyncio.run(aextract_facts(llm, "I have a cat")) == [ExtractedFact("Has a cat")]


# -- structured answers: the record_facts tool ---------------------------------------


def test_the_record_facts_tool_is_offered_and_its_call_is_read():
    llm = CannedLLM(tool_call("record_facts", facts=[{"fact": "Prefers Slack", "replaces": "F1"}]))
    assert extract_facts(llm, "use slack please", known_facts=["Prefers email"]) == [
        ExtractedFact("Prefers Slack", 0)
    ]
    assert llm.tools_offered == [[RECORD_FACTS_TOOL]]
    assert RECORD_FACTS_TOOL.parameters["properties"]["facts"]["items"]["required"] == ["fact"]


def test_a_text_answer_to_the_tool_offer_is_parsed_by_the_tolerant_parser():
    llm = CannedLLM('Here you go: {"facts": [{"fact": "Has a cat"}]}')
    assert extract_facts(llm, "I have a cat") == [ExtractedFact("Has a cat")]
    assert llm.tools_offered == [[RECORD_FACTS_TOOL]]


def answer_in_kind(messages: list[Message], tools: list[ToolSpec]) -> Reply:
    """A model that calls record_facts when it is offered, else writes JSON, like a real one."""
    if any(t.name == "record_facts" for t in tools):
        return tool_call("record_facts", facts=[{"fact": "Owns a bike", "replaces": None}])
    return '{"facts": [{"fact": "Owns a bike"}]}'


def test_a_model_without_tools_is_asked_for_text():
    with_tools = FunctionLLM(answer_in_kind)
    without = FunctionLLM(answer_in_kind, supports_tools=False)
    assert extract_facts(with_tools, "my bike") == extract_facts(without, "my bike")
    assert extract_facts(without, "my bike") == [ExtractedFact("Owns a bike")]
    assert with_tools.tools_offered == [[RECORD_FACTS_TOOL]] and without.tools_offered == [[], []]


def test_a_provider_refusing_tools_is_asked_again_without_and_remembered():
    def picky(messages: list[Message], tools: list[ToolSpec]) -> Reply:
        if tools:  # FunctionLLM raises a returned exception, like a failing provider
            return LLMBadRequestError("tools are not supported by this model", status_code=400)
        return '["Speaks Dutch"]'

    llm = FunctionLLM(picky)
    assert extract_facts(llm, "ik spreek Nederlands") == [ExtractedFact("Speaks Dutch")]
    assert extract_facts(llm, "again") == [ExtractedFact("Speaks Dutch")]
    assert llm.tools_offered == [[RECORD_FACTS_TOOL], [], []]  # the second run skips tools


def test_other_llm_errors_still_propagate_with_tools():
    with pytest.raises(LLMServerError, match="overloaded"):
        extract_facts(CannedLLM(LLMServerError("overloaded")), "hi")


@pytest.mark.parametrize(
    ("call", "content", "expected"),
    [
        # not the tool's shape: the text answer is used instead
        (tool_call("record_facts", items=5), '["Likes tea"]', ["Likes tea"]),
        (tool_call("record_facts"), "- Likes tea", ["Likes tea"]),
        (tool_call("record_facts", facts=42), '["Likes tea"]', ["Likes tea"]),
        (tool_call("something_else", facts=["Wrong tool"]), '["Likes tea"]', ["Likes tea"]),
        # the tool's shape with junk inside: no facts, never an exception
        (tool_call("record_facts", facts=[None, 3, {"fact": ""}, {"x": "y"}]), None, []),
        (tool_call("record_facts", facts="none"), "ignored", []),
        (tool_call("record_facts", facts=[]), '["Text is ignored when the call is valid"]', []),
        # a list sent as a JSON string, a bare list of strings
        (tool_call("record_facts", facts='[{"fact": "Likes tea"}]'), None, ["Likes tea"]),
        (tool_call("record_facts", facts=["Likes tea", "likes TEA"]), None, ["Likes tea"]),
        # malformed with no text at all
        (tool_call("record_facts", facts={"oops": True}), None, []),
    ],
)
def test_malformed_tool_calls_fall_back_safely(call, content, expected):
    response = LLMResponse(content=content, tool_calls=[call])
    assert texts(parse_extraction_response(response)) == expected
    assert texts(extract_facts(CannedLLM(response), "tea")) == expected


def test_several_record_facts_calls_are_merged_and_limits_apply():
    many = [{"fact": f"Fact number {i}"} for i in range(MAX_FACTS_PER_REPLY + 5)]
    response = LLMResponse(tool_calls=[
        tool_call("record_facts", facts=[{"fact": "Lives in Rome", "replaces": "F9"}]),
        tool_call("record_facts", facts=many),
    ])
    facts = parse_extraction_response(response, known_count=2)
    assert facts[0] == ExtractedFact("Lives in Rome", None)  # F9 is not a known fact
    assert len(facts) == MAX_FACTS_PER_REPLY


def test_aextract_facts_reads_a_tool_call():
    llm = CannedLLM(tool_call("record_facts", facts=[{"fact": "Has a cat", "replaces": "F1"}]))
    result = asyncio.run(aextract_facts(llm, "my cat", known_facts=["Has a dog"]))
    assert result == [ExtractedFact("Has a cat", 0)]
    assert llm.tools_offered == [[RECORD_FACTS_TOOL]]


def test_fact_extraction_block_learns_from_a_tool_call(tmp_path):
    store = MemoryStore(tmp_path / "facts.db")
    llm = CannedLLM(tool_call("record_facts", facts=[{"fact": "Is vegetarian"}]))
    block = FactExtractionBlock(llm, persist=True, scope_id="alice", store=store)
    block.on_message(UserMessage("I don't eat meat"))
    assert [f.fact for f in store.list_active("user", "alice", limit=None)] == ["Is vegetarian"]
    asyncio.run(block.aon_message(UserMessage("still vegetarian")))
    assert llm.tools_offered == [[RECORD_FACTS_TOOL], [RECORD_FACTS_TOOL]]


def test_a_bullet_reply_padded_with_spaces_and_brackets_is_read_whole():
    """A runaway reply of spaces and open brackets (near-misses of the "(replaces
    N)" tail) is read in one pass, and the facts around it keep their tails."""
    reply = "\n".join(
        [
            "- Likes tea" + " " * 20_000 + "(replaces F1)",
            "- " + "( " * 10_000 + "x)",
            "-    ",
            "- Has a dog [supersedes: 2]",
        ]
    )
    facts = parse_extraction(reply, known_count=2)
    assert facts[0] == ExtractedFact("Likes tea", 0)
    assert facts[-1] == ExtractedFact("Has a dog", 1)
    assert len(facts) == 2  # the bracket line is too long for a fact, the bare dash none


def test_a_reply_nested_deeper_than_json_goes_gives_no_facts_not_an_error():
    assert parse_extraction("[" * 50_000) == []
    assert parse_extraction("[" * 50_000 + '\n{"facts": ["Has a cat"]}') == []  # cut at the limit
    assert parse_extraction('{"facts": ["Has a cat"]} ' + "[" * 40_000) == [ExtractedFact("Has a cat")]
