"""Every deprecated alias still works and says so: a DeprecationWarning naming the
new name and the release that removes the old one, pointing at the caller's line;
the docs give the same release."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from _vector_fakes import WordHashEmbedder

from fastaiagent import Memory
from fastaiagent.agent.deprecation import REMOVED_IN
from fastaiagent.agent.memory_blocks.vector import VectorBlock
from fastaiagent.kb.backends.faiss import FaissVectorStore
from fastaiagent.llm.message import UserMessage

DOCS = Path(__file__).resolve().parents[2] / "docs"
REMOVED = f"removed in fastaiagent {REMOVED_IN}"


def _said(records: pytest.WarningsRecorder, new: str) -> None:
    """One warning, naming ``new`` and the release, at this file's line."""
    assert len(records) == 1, [str(w.message) for w in records]
    message = str(records[0].message)
    assert f"use {new}" in message and REMOVED in message, message
    assert records[0].filename == __file__  # the caller's line, not the library's


@pytest.fixture
def memory(tmp_path):  # type: ignore[no-untyped-def]
    made = Memory(f"sqlite:///{tmp_path / 'facts.db'}")
    yield made
    made.location.close()


def test_memory_store_is_location_and_warns(memory) -> None:  # type: ignore[no-untyped-def]
    with pytest.warns(DeprecationWarning) as said:
        store = memory.store
    _said(said, "Memory.location")
    assert store is memory.location


def test_renamed_memory_keywords_warn(tmp_path) -> None:  # type: ignore[no-untyped-def]
    location = f"sqlite:///{tmp_path / 'facts.db'}"
    with pytest.warns(DeprecationWarning) as said:
        old = Memory(location, windows="shared")
    _said(said, "window_store=")
    assert old.config.window_store == "shared"
    with pytest.warns(DeprecationWarning) as said:
        old = Memory(location, window_store="shared", window_ttl_seconds=60)
    _said(said, "window_ttl=")
    assert old.config.window_ttl == 60.0


def test_update_by_position_warns(memory) -> None:  # type: ignore[no-untyped-def]
    memory.persist("Prefers email", tier="user", id="alice")
    with pytest.warns(DeprecationWarning) as said:
        memory.update("Prefers Slack", "Prefers email", "user", "alice")
    _said(said, "update(new, old=...)")
    assert [f.fact for f in memory.retrieve(tier="user", id="alice")] == ["Prefers Slack"]


def test_memory_tools_recall_and_its_old_module_names_warn(memory) -> None:  # type: ignore[no-untyped-def]
    import fastaiagent.mcp.tools as tools_module
    from fastaiagent.mcp.tools import MemoryTools

    tools = MemoryTools(memory, user_id="alice")
    tools.remember("alice", "Alice lives in Lyon")
    with pytest.warns(DeprecationWarning) as said:
        old = tools.recall("alice")
    _said(said, "MemoryTools.retrieve")
    assert old == tools.retrieve("alice")
    for name, new in (("Recalled", "Retrieved"), ("DEFAULT_RECALL_LIMIT", "DEFAULT_RETRIEVE_LIMIT"),
                      ("MAX_RECALL_LIMIT", "MAX_RETRIEVE_LIMIT")):  # fmt: skip
        with pytest.warns(DeprecationWarning) as said:
            value = getattr(tools_module, name)
        assert value is getattr(tools_module, new)
        assert f"use fastaiagent.mcp.tools.{new}" in str(said[0].message) and REMOVED in str(said[0].message)
    with pytest.warns(DeprecationWarning) as said:
        from fastaiagent.mcp.tools import Recalled  # noqa: F401
    _said(said, "fastaiagent.mcp.tools.Retrieved")
    with pytest.raises(AttributeError):
        tools_module.Nothing  # noqa: B018


def test_vector_block_old_hooks_warn_when_overridden_or_called() -> None:
    with pytest.warns(DeprecationWarning) as said:

        class Old(VectorBlock):
            def _make_chunk(self, message):  # type: ignore[no-untyped-def]
                return super()._make_chunk(message)  # the override's own call: warned above

    _said(said, "an override of VectorBlock.make_chunk, the public extension point")
    store = FaissVectorStore(dimension=64)
    Old(store, embedder=WordHashEmbedder(), min_content_chars=1).on_message(UserMessage("hello there"))
    new = VectorBlock(store, embedder=WordHashEmbedder(), min_content_chars=1)
    with pytest.warns(DeprecationWarning) as said:
        chunk = new._make_chunk(UserMessage("hi"))
    _said(said, "VectorBlock.make_chunk")
    assert chunk is not None and chunk.text == "hi"
    with pytest.warns(DeprecationWarning) as said:
        text = new._embedding_text(chunk)
    _said(said, "VectorBlock.embedding_text")
    assert text == new.embedding_text(chunk)


def test_the_docs_give_the_removal_release_of_every_family() -> None:
    text = (DOCS / "architecture.md").read_text(encoding="utf-8")
    section = text[text.index("## Deprecations") :]
    section = section[: section.index("\n## ", 1)]
    assert f"fastaiagent {REMOVED_IN}" in section
    for old in ("MCP tool `recall`", "MemoryTools.recall", "Recalled", "Memory(windows=)",
                "Memory(window_ttl_seconds=)", "Memory.update(new, old, tier, id)", "_make_chunk",
                "Memory.store", "--project", "--user-id", "--scope", "--scope-id", "--agent", "--max",
                "participant_boost=", "neighbour_weight=", "embed_question="):  # fmt: skip
        assert re.search(re.escape(old), section), old


def test_every_page_and_docstring_names_the_same_removal_release() -> None:
    root = DOCS.parent
    said = re.compile(r"(?:removed\s+in|removes\s+them\s+all|until)\s+(?:\*\*)?fastaiagent\s+(\d+(?:\.\d+)*)")
    found: dict[str, set[str]] = {}
    for path in [*DOCS.rglob("*.md"), *(root / "src").rglob("*.py"), root / "README.md"]:
        for release in said.findall(path.read_text(encoding="utf-8")):
            found.setdefault(release, set()).add(str(path.relative_to(root)))
    assert set(found) == {REMOVED_IN}, found
    assert len(found[REMOVED_IN]) >= 5  # the pages and docstrings that say it were read
