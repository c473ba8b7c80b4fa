"""Stored JSON read back (fastaiagent._io): the fast path for the library's own texts
gives what json.loads gives, and refuses what json.loads refuses."""

from __future__ import annotations

import json

import pytest

from fastaiagent._io import MAX_JSON_DEPTH, decode_own_json

TEXTS = [
    '{"namespace": "facts::user:ana", "fact_id": 7, "created_at": 1796470478.77, "embedder": "m@384"}',
    '{"nested": {"a": [1, 2, {"b": null}]}, "unicode": "Zoë 東京", "escaped": "line\\nbreak \\"q\\""}',
    "{}", "[]", "3", '"text"', "null", "true", "-1.5e3",
]  # fmt: skip


@pytest.mark.parametrize("text", TEXTS)
def test_the_library_s_own_json_reads_as_json_loads_reads_it(text: str) -> None:
    assert decode_own_json(text) == json.loads(text)


@pytest.mark.parametrize("text", [' {"a": 1}', '{"a": 1} ', '{"a": 1}\n'])
def test_space_around_the_value_is_still_read(text: str) -> None:
    assert decode_own_json(text) == {"a": 1}


@pytest.mark.parametrize("text", ['{"a": 1}x', '{"a": 1', "", "{'a': 1}", "nan nan"])
def test_a_damaged_text_raises_a_json_error(text: str) -> None:
    with pytest.raises(json.JSONDecodeError):
        decode_own_json(text)


def test_a_text_nested_too_deeply_raises_a_json_error_not_recursion() -> None:
    with pytest.raises(json.JSONDecodeError, match="nested too deeply"):
        decode_own_json("[" * (MAX_JSON_DEPTH + 5) + "]" * (MAX_JSON_DEPTH + 5))
