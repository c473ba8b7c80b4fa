"""The shared scoping rules (fastaiagent.facts.scoping), tested directly."""

from __future__ import annotations

import pytest

from fastaiagent._io import MAX_JSON_DEPTH, decode_json, json_text_too_deep
from fastaiagent.facts.scoping import (
    MAX_ID_CHARS,
    Selector,
    check_fact_id,
    check_limit,
    delete_selector,
    normalize_text,
    read_selector,
    validate_for_write,
)
from fastaiagent.learn import Fact


def test_normalisation_folds_case_and_spacing() -> None:
    assert normalize_text("  Prefers\t EMAIL\n") == "prefers email"
    assert normalize_text("STRASSE") == normalize_text("straße")  # casefold, not lower
    # Every Unicode space counts (the key of files written before stays the same).
    assert normalize_text("\u00a0likes\u3000 tea\x1c\u2029") == "likes tea"
    assert normalize_text("likes\u200btea") == "likes\u200btea"  # zero width: not a space


@pytest.mark.parametrize("scope", ["user", "project"])
def test_empty_id_reads_nothing_at_user_and_project(scope: str) -> None:
    assert read_selector(scope, "") is None
    assert read_selector(scope, "*") == Selector(scope, None, "")
    assert read_selector(scope, "a", "p") == Selector(scope, "a", "p")


def test_agent_empty_id_reads_every_agent() -> None:
    assert read_selector("agent", "") == Selector("agent", None, "")


@pytest.mark.parametrize("scope", ["user", "project", "agent"])
def test_delete_needs_an_id_or_star(scope: str) -> None:
    with pytest.raises(ValueError, match='scope_id="\\*"'):
        delete_selector(scope, "")
    assert delete_selector(scope, "*", "p") == Selector(scope, None, "p")


def test_write_validation() -> None:
    ok = validate_for_write(Fact("x", scope="user", scope_id="a"))
    assert ok.created_at > 0
    wildcard = r'"\*" is a read/delete wildcard and cannot be written as an id'
    bad = [
        (Fact("x", scope="user", scope_id="*"), wildcard),
        (Fact("x", scope="agent", scope_id="a", project_id="*"), wildcard),
        (
            Fact("x", scope="project", scope_id=""),
            "a project-scope fact needs a non-empty scope_id",
        ),
        (Fact("x", scope="nope", scope_id="a"), "unknown scope 'nope'; expected one of"),
        (Fact(" ", scope="user", scope_id="a"), "fact text is empty"),
        (
            Fact("x", scope="user", scope_id="a" * (MAX_ID_CHARS + 1)),
            f"scope_id is {MAX_ID_CHARS + 1} characters; the limit is {MAX_ID_CHARS}",
        ),
        (Fact("x\ud800", scope="user", scope_id="a"), "fact is not valid Unicode text"),
    ]
    for fact, message in bad:
        with pytest.raises(ValueError, match=message):
            validate_for_write(fact)
    with pytest.raises(TypeError, match="metadata must be JSON-serialisable"):
        validate_for_write(Fact("x", scope="user", scope_id="a", metadata={"s": {1, 2}}))
    deep: dict[str, object] = {}
    for _ in range(5_000):  # small as JSON, deeper than the encoder goes
        deep = {"d": deep}
    with pytest.raises(TypeError, match="metadata must be JSON-serialisable: nested too deeply"):
        validate_for_write(Fact("x", scope="user", scope_id="a", metadata=deep))
    assert validate_for_write(Fact("x", scope="agent", scope_id="")).scope_id == ""


def test_json_depth_is_refused_before_the_interpreter_limit() -> None:
    """Depth is counted, not found by running into RecursionError: near that limit
    any finaliser the garbage collector runs fails unraisably (a test once did)."""

    def nested(depth: int) -> dict[str, object]:
        value: dict[str, object] = {}
        for _ in range(depth - 1):
            value = {"d": value}
        return value

    assert validate_for_write(
        Fact("x", scope="user", scope_id="a", metadata=nested(MAX_JSON_DEPTH))
    )
    with pytest.raises(TypeError, match="nested too deeply"):
        validate_for_write(
            Fact("x", scope="user", scope_id="a", metadata=nested(MAX_JSON_DEPTH + 1))
        )
    text = "[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH
    assert json_text_too_deep(text) is False
    assert json_text_too_deep("[" + text + "]") is True
    assert json_text_too_deep('["' + "[" * 500 + '"]') is False  # brackets inside a string
    assert decode_json('{"a": "' + "{" * 500 + '"}') == {"a": "{" * 500}
    with pytest.raises(ValueError, match="nested too deeply"):
        decode_json(b"[" * 100_000)


def test_ids_and_limits() -> None:
    assert check_fact_id(3) == 3
    for bad in ("3", 3.0, True, None):
        with pytest.raises(TypeError, match=f"fact id must be an int, got {type(bad).__name__}"):
            check_fact_id(bad)
    check_limit(None)
    check_limit(0)
    with pytest.raises(ValueError, match="limit must be >= 0"):
        check_limit(-1)
    for bad_limit in (True, 2.5, "3"):
        with pytest.raises(TypeError, match="limit must be an int"):
            check_limit(bad_limit)  # type: ignore[arg-type]
