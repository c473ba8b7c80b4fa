"""A memory export holds a user's personal data: the file is its owner's only (0600),
whether it is new or replaces one, and a failed export leaves the old file whole."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from fastaiagent import Memory
from fastaiagent.facts import transfer


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture(autouse=True)
def usual_umask() -> Iterator[None]:
    old = os.umask(0o022)  # what most shells have: a plain open() would give 0644
    yield
    os.umask(old)


@pytest.fixture
def memory(tmp_path: Path) -> Memory:
    mem = Memory(f"sqlite:///{tmp_path / 'm.db'}")
    mem.persist("Lives in Paris", id="alice")
    mem.persist("Lives in Oslo", id="bob")
    return mem


def test_export_user_writes_a_file_only_its_owner_can_read(memory: Memory, tmp_path: Path) -> None:
    out = tmp_path / "alice.jsonl"
    assert memory.export_user("alice", out).facts == 1
    assert mode(out) == 0o600
    assert "Lives in Paris" in out.read_text() and "Oslo" not in out.read_text()


def test_an_export_over_a_readable_file_replaces_it_with_a_private_one(
    memory: Memory, tmp_path: Path
) -> None:
    out = tmp_path / "alice.jsonl"
    out.write_text("old\n")
    out.chmod(0o644)
    memory.export_user("alice", out)
    assert mode(out) == 0o600 and "Lives in Paris" in out.read_text()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temp file left


def test_a_symlinked_export_replaces_the_file_it_names(memory: Memory, tmp_path: Path) -> None:
    real, link = tmp_path / "real.jsonl", tmp_path / "link.jsonl"
    real.write_text("old\n")
    link.symlink_to(real)
    memory.export_user("alice", link)
    assert link.is_symlink() and mode(real) == 0o600 and "Lives in Paris" in real.read_text()


def test_a_failed_export_leaves_the_old_file_as_it_was(
    memory: Memory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "alice.jsonl"
    out.write_text("the last good export\n")

    def broken(*args: Any, **kwargs: Any) -> Iterator[dict[str, Any]]:
        raise OSError("the store went away mid-export")
        yield {}  # pragma: no cover - a generator that fails when read

    monkeypatch.setattr(transfer, "records", broken)
    with pytest.raises(OSError, match="went away"):
        memory.export_user("alice", out)
    assert out.read_text() == "the last good export\n"
    assert sorted(p.name for p in tmp_path.iterdir() if p.suffix == ".tmp") == []


def test_the_cli_export_is_private_too(memory: Memory, tmp_path: Path) -> None:
    from fastaiagent.cli import _register, app

    _register()
    out = tmp_path / "all.jsonl"
    out.write_text("")
    out.chmod(0o644)
    done = CliRunner().invoke(
        app, ["memory", "export", "-l", f"sqlite:///{tmp_path / 'm.db'}", "-o", str(out)]
    )
    assert done.exit_code == 0, done.output
    assert mode(out) == 0o600 and "Lives in Oslo" in out.read_text()
