"""The memory file and its doors: damaged and newer files, a subject bigger than a
page, the CLI's export / import / copy, and Memory.export_user / import_user."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from _vector_fakes import WordHashEmbedder
from typer.testing import CliRunner

from _memory_sample import fill, lines
from fastaiagent.agent import Agent, Memory, RunContext
from fastaiagent.errors import InvalidValueError, SchemaVersionError
from fastaiagent.facts import Fact
from fastaiagent.facts.factory import make_fact_store
from fastaiagent.facts.transfer import export_memory, import_memory, reading
from fastaiagent.llm import AssistantMessage, UserMessage
from fastaiagent.testing import CannedLLM


@pytest.fixture
def sample(tmp_path: Path) -> tuple[str, Path]:
    location = f"sqlite:///{tmp_path / 'source.db'}"
    store = make_fact_store(location)
    fill(store)
    store.close()
    path = tmp_path / "all.jsonl"
    export_memory(location, path)
    return location, path


def _target(tmp_path: Path, name: str = "target") -> Any:
    return make_fact_store(f"sqlite:///{tmp_path / name}.db")


def test_a_cut_off_file_is_refused_before_anything_is_written(sample: tuple[str, Path], tmp_path: Path) -> None:
    _, path = sample
    cut = tmp_path / "cut.jsonl"
    cut.write_text("\n".join(path.read_text().splitlines()[:5]) + "\n")
    target = _target(tmp_path)
    with pytest.raises(InvalidValueError, match="no end line after line 5: the export was cut off, so nothing"):
        import_memory(target, cut, everything=True)
    assert target.subjects(include_superseded=True) == []


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "is empty"),
        ('{"kind": "fact"}\n', "not a fastaiagent memory export"),
        ("not json\n", "line 1: not JSON"),
        ('{"kind": "fastaiagent-memory", "version": 1}\n' + "[" * 50_000 + "\n", "line 2: not JSON \\(nested too deeply"),
        ('{"kind": "fastaiagent-memory", "version": 1}\n{"kind": "robot"}\n', "line 2: unknown kind 'robot'"),
        ('{"kind": "fastaiagent-memory", "version": 1}\n{"kind": "fact", "id": 1}\n', "line 2: a fact without"),
    ],
)
def test_a_damaged_file_is_refused_with_its_line(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(text)
    with pytest.raises(InvalidValueError, match=message):
        import_memory(_target(tmp_path), path, everything=True)


def test_a_newer_format_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    path = tmp_path / "new.jsonl"
    path.write_text('{"kind": "fastaiagent-memory", "version": 99}\n{"kind": "end"}\n')
    target = _target(tmp_path)
    with pytest.raises(SchemaVersionError, match=r"format version 99.*pip install -U fastaiagent"):
        import_memory(target, path, everything=True)
    assert target.subjects() == []


def test_vectors_of_another_size_go_to_that_size_s_index(sample: tuple[str, Path], tmp_path: Path) -> None:
    _, path = sample
    target = _target(tmp_path)
    Memory(target, recall="auto", embedder=WordHashEmbedder(dimension=8)).add_history(
        [UserMessage("hello there")]
    )
    import_memory(target, path, everything=True)
    assert sorted(target.vector_dimensions()) == [8, 16]
    assert target.vector_store().count_rows(None) == 1  # the 8-size index keeps its one message
    assert target.vector_store(16).count_rows(None) > 0


def test_a_subject_longer_than_a_page_keeps_its_order_and_history(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(reading, "PAGE", 7)
    source = _target(tmp_path, "big")
    previous = source.add(Fact("v0", scope="user", scope_id="ann", created_at=1.0))
    for n in range(1, 30):  # 30 versions, each replacing the one before; "v0" comes back twice
        text = "v0" if n % 10 == 0 else f"v{n}"
        previous = source.update(Fact(text, scope="user", scope_id="ann", created_at=1.0 + n), previous)
    buffer = io.StringIO()
    export_memory(source, buffer)
    times = [json.loads(line)["created_at"] for line in buffer.getvalue().splitlines()[1:-1]]
    assert times == sorted(times) and len(times) == 30
    target = _target(tmp_path)
    import_memory(target, io.StringIO(buffer.getvalue()), everything=True)
    (active,) = target.list_active("user", "ann")
    assert (active.fact, active.created_at) == ("v29", 30.0)
    chain = [active]
    while replaced := target.replaced(chain[-1].id):
        chain += replaced
    assert [f.fact for f in chain][:3] == ["v29", "v28", "v27"] and len(chain) == 30


def test_the_cli_exports_imports_and_copies(sample: tuple[str, Path], tmp_path: Path) -> None:
    from fastaiagent.cli import _register, app

    _register()  # every sub-command, once, through the one error guard
    runner = CliRunner()
    location, _ = sample
    out = tmp_path / "ann.jsonl"
    done = runner.invoke(app, ["memory", "export", "-l", location, "--user", "ann", "--project-id", "", "-o", str(out)])
    assert done.exit_code == 0, done.output
    assert "4 fact(s), 5 recalled message(s), 2 window(s), 1 item(s)" in done.output
    target = f"sqlite:///{tmp_path / 'cli.db'}"
    done = runner.invoke(app, ["memory", "import", str(out), "-l", target, "--progress"])
    assert done.exit_code == 0 and "imported into" in done.output
    assert "[##############################] 100%" in done.stderr
    again = runner.invoke(app, ["memory", "import", str(out), "-l", target])
    assert "0 fact(s)" in again.output and "12 already there, kept" in again.output
    copied = runner.invoke(app, ["memory", "copy", "--from", location, "--to", f"sqlite:///{tmp_path / 'c.db'}"])
    assert copied.exit_code == 0 and "7 fact(s), 10 recalled message(s)" in copied.output
    assert runner.invoke(app, ["memory", "export", "-l", location, "--user", "*", "-o", str(out)]).exit_code != 0
    missing = runner.invoke(app, ["memory", "import", str(tmp_path / "nope.jsonl"), "-l", target])
    assert missing.exit_code == 2 and "nope.jsonl: no such file" in missing.stderr


def test_a_user_downloads_their_data_and_it_is_recalled_elsewhere_without_embedding(tmp_path: Path) -> None:
    embedder = WordHashEmbedder()
    home = Memory(f"sqlite:///{tmp_path / 'home.db'}", user_id=lambda ctx: ctx.state["user"],
                  recall="auto", embedder=embedder)  # fmt: skip
    home.add_history([UserMessage("My dog Biscuit is a beagle"), AssistantMessage("Beagles are lovely, curious dogs")], user_id="ann")
    home.add_history([UserMessage("I live in Oslo")], user_id="bob")
    home.persist("prefers short answers", tier="user", id="ann")
    path = tmp_path / "ann.jsonl"
    assert home.export_user("ann", path).recall == 2
    assert "Oslo" not in path.read_text()

    fresh_embedder = WordHashEmbedder()
    away = Memory(f"sqlite:///{tmp_path / 'away.db'}", user_id=lambda ctx: ctx.state["user"],
                  recall="auto", embedder=fresh_embedder)  # fmt: skip
    assert away.import_user(path).facts == 1
    llm = CannedLLM("ok")
    Agent(name="a", llm=llm, memory=away).run("what is my dog called?", context=RunContext(state={"user": "ann"}))
    prompt = " ".join(str(m.content) for m in llm.calls[0])
    assert "Biscuit" in prompt and "prefers short answers" in prompt
    embedded = [text for call in fresh_embedder.calls for text in call]
    assert "My dog Biscuit is a beagle" not in embedded  # the stored vector was used
    with pytest.raises(InvalidValueError, match="needs one user's id"):
        away.export_user("", path)


def test_an_export_to_a_stream_round_trips(sample: tuple[str, Path], tmp_path: Path) -> None:
    location, path = sample
    stream = io.StringIO()
    export_memory(location, stream)
    stream.seek(0)
    import_memory(_target(tmp_path), stream, everything=True)
    again = tmp_path / "again.jsonl"
    export_memory(_target(tmp_path), again)
    assert lines(again) == lines(path)


def test_a_text_the_target_holds_under_another_time_is_kept_not_counted(
    sample: tuple[str, Path], tmp_path: Path
) -> None:
    _, path = sample
    target = _target(tmp_path)
    mine = target.add(Fact("is vegan", scope="user", scope_id="bob", created_at=5.0))
    counts = import_memory(target, path, everything=True)
    assert (counts.facts, counts.kept) == (6, 1)
    assert [f.id for f in target.list_active("user", "bob")] == [mine]


def _ann_lines(sample: tuple[str, Path]) -> list[str]:
    location, _ = sample
    buffer = io.StringIO()
    export_memory(location, buffer, user_id="ann", project_id="")
    return buffer.getvalue().splitlines(keepends=True)


def test_a_bad_vector_is_refused_naming_the_file_and_line(sample: tuple[str, Path], tmp_path: Path) -> None:
    raw = _ann_lines(sample)
    number = next(n for n, line in enumerate(raw, 1) if '"kind":"recall"' in line)
    bad = json.loads(raw[number - 1])
    bad["vector"] = bad["vector"][:-8] + "AAA="  # 3 bytes short of a float32
    raw[number - 1] = json.dumps(bad) + "\n"
    path = tmp_path / "bad-vector.jsonl"
    path.write_text("".join(raw))
    target = _target(tmp_path)
    with pytest.raises(InvalidValueError) as refused:
        Memory(target).import_user(path)
    assert str(refused.value) == (
        f"{path}, line {number}: a recalled message whose vector is not float32 values in base64, "
        "as an export writes it"
    )
    assert "buffer" not in str(refused.value) and target.subjects() == []


def test_an_upload_read_once_is_spooled_and_its_bytes_checked_by_line(sample: tuple[str, Path], tmp_path: Path) -> None:
    raw = "".join(_ann_lines(sample)).encode("utf-8")
    with pytest.raises(InvalidValueError, match=r"upload, line 2: not UTF-8 text"):
        import_memory(_target(tmp_path), _Upload(raw.replace(b"likes tea", b"likes t\xe9a", 1)))
    counts = import_memory(_target(tmp_path), _Upload(raw))  # read twice: spooled, not re-read
    assert (counts.facts, counts.recall, counts.windows, counts.items) == (4, 5, 2, 1)


class _Upload(io.RawIOBase):
    """An upload's body: bytes read once, no seeking back."""

    name = "upload"

    def __init__(self, data: bytes) -> None:
        self._data = io.BytesIO(data)

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def read(self, size: int = -1) -> bytes:
        return self._data.read(size)


def test_a_subject_bigger_than_memory_s_share_is_spilled_and_stays_exact(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fastaiagent.facts.transfer import spill, writing

    monkeypatch.setattr(spill, "SPILL_AFTER", 10)
    monkeypatch.setattr(spill, "WRITE_BATCH", 3)  # most lookups go to the table on disk
    monkeypatch.setattr(writing, "BATCH", 7)  # the target's subject is read in pages of 7
    source = _target(tmp_path, "big")
    previous = source.add(Fact("v0", scope="user", scope_id="ann", created_at=1.0))
    for n in range(1, 60):
        previous = source.update(Fact(f"v{n}", scope="user", scope_id="ann", created_at=1.0 + n), previous)
    for n in range(40):
        source.add(Fact(f"other {n}", scope="user", scope_id="ann", created_at=100.0 + n))
    path = tmp_path / "ann.jsonl"
    export_memory(source, path, user_id="ann")
    target = _target(tmp_path)
    assert Memory(target).import_user(path).facts == 100
    again = Memory(target).import_user(path)  # the held facts are looked up on disk now
    assert (again.facts, again.kept) == (0, 100)
    active = target.list_active("user", "ann", limit=None)
    assert len(active) == 41 and len(target.replaced(next(f.id for f in active if f.fact == "v59"))) == 1


def test_messages_of_many_namespaces_wait_in_one_bounded_batch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from _memory_sample import message
    from fastaiagent.facts.transfer import writing

    monkeypatch.setattr(writing, "BATCH", 5)
    flushed: list[int] = []
    real = writing.Importer._flush

    def counting(self: Any, key: Any) -> None:
        flushed.append(self._pending)
        real(self, key)

    monkeypatch.setattr(writing.Importer, "_flush", counting)
    source = _target(tmp_path, "many")
    source.vector_store().add([message(f"user:u{n}", 0, f"hello {n}") for n in range(23)])
    path = tmp_path / "all.jsonl"
    export_memory(source, path)
    assert import_memory(_target(tmp_path), path, everything=True).recall == 23
    assert max(flushed) <= 5  # never more than a batch waits, whatever the namespaces

