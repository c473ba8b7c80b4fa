"""Bearer tokens of ``fastaiagent mcp``: parsing, files, and which user a header names."""

from __future__ import annotations

import pytest

from fastaiagent.errors import InvalidValueError, MissingFileError
from fastaiagent.mcp import TokenMap, load_tokens_file, parse_token_specs

ALICE = "alice-token-0123456789abcdef"
BOB = "bob-token-0123456789abcdefgh"


def test_a_header_names_the_user_of_its_token_only():
    tokens = parse_token_specs([f"{ALICE}=alice", f"{BOB}=bob"])
    assert tokens.users == ["alice", "bob"] and len(tokens) == 2
    assert tokens.user_of_header(f"Bearer {ALICE}") == "alice"
    assert tokens.user_of_header(f"bearer  {BOB} ") == "bob"
    for header in (
        None,
        "",
        "Bearer",
        f"Basic {ALICE}",
        f"Bearer {ALICE}x",
        f"Bearer {ALICE[:-1]}",
        ALICE,
    ):
        assert tokens.user_of_header(header) is None


def test_a_token_may_contain_equals_signs():
    tokens = parse_token_specs(["abc=def=ghi=jkl=mnop=qrs=alice"])
    assert tokens.user_for("abc=def=ghi=jkl=mnop=qrs") == "alice"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("short=alice", "at least 16 characters"),
        (f"{ALICE}=", "needs a user|cannot be empty"),
        (f"{ALICE}=*", "wildcard"),
        ("no-equals-sign-in-this-spec", "TOKEN=USER"),
        ("=alice", "TOKEN=USER"),
    ],
)
def test_bad_token_specs_are_refused(spec, message):
    with pytest.raises(InvalidValueError, match=message):
        parse_token_specs([spec])


def test_the_same_token_for_two_users_is_refused():
    with pytest.raises(InvalidValueError, match="same token is given twice"):
        TokenMap({ALICE: "alice"}).add(ALICE, "bob")


def test_tokens_files_as_lines_or_json(tmp_path):
    lines = tmp_path / "tokens"
    lines.write_text(f"# comment\n\n{ALICE}=alice\n  {BOB}=bob  \n")
    assert load_tokens_file(lines).users == ["alice", "bob"]
    as_json = tmp_path / "tokens.json"
    as_json.write_text(f'{{"{ALICE}": "alice"}}')
    assert load_tokens_file(as_json).user_for(ALICE) == "alice"
    broken = tmp_path / "broken.json"
    broken.write_text('{"a": ')
    with pytest.raises(InvalidValueError, match="not valid JSON"):
        load_tokens_file(broken)
    broken.write_text('{"a": ' + "[" * 100_000)  # deeper than the decoder goes
    with pytest.raises(InvalidValueError, match="not valid JSON: nested too deeply"):
        load_tokens_file(broken)
    wrong = tmp_path / "wrong.json"
    wrong.write_text(f'{{"{ALICE}": 3}}')
    with pytest.raises(InvalidValueError, match="map token strings to user strings"):
        load_tokens_file(wrong)
    with pytest.raises(MissingFileError, match="no tokens file"):
        load_tokens_file(tmp_path / "absent")
