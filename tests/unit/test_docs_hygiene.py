"""What a newcomer reads stays readable: the docs' shape, checked from the files.

- Benchmark figures live in docs/ and bench/README.md, never in the source: a
  figure in a comment goes stale when the ranking changes, unseen.
- docs/semantic.md is a guide (MAX_GUIDE_LINES); the measurements are in
  docs/research/ and bench/README.md.
- docs/index.md and mkdocs.yml's nav name every page; the README says where to start.
- The shipped conformance suites name their extra when pytest or hypothesis is missing.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "fastaiagent"
DOCS = ROOT / "docs"
MAX_GUIDE_LINES = 350
# R@5, S@10, hit@3, recall@10, MRR: the names benchmark figures go by.
FIGURE = re.compile(r"\b[RS]@\d|\b(?:hit|recall)@\d|\bMRR\b", re.IGNORECASE)
NAV_PAGE = re.compile(r"^\s*-\s*(?:[^:\n]+:\s*)?([\w/.-]+\.md)\s*$", re.MULTILINE)


def source_files() -> list[Path]:
    return [p for p in SRC.rglob("*") if p.is_file() and p.suffix in {".py", ".html", ".js", ".css"}]


def test_no_benchmark_figure_in_the_source():
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in source_files()
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if FIGURE.search(line)
    ]
    assert found == [], "benchmark figures belong in docs/ or bench/README.md:\n" + "\n".join(found)


def test_the_figure_pattern_finds_what_it_is_for():
    assert all(FIGURE.search(text) for text in ("LoCoMo R@5 0.74", "hit@1 0.8", "MRR 0.6", "S@10"))
    assert not any(FIGURE.search(text) for text in ("user@example.org", "R@ndom", "alice@1host"))


def test_semantic_recall_is_a_guide_not_a_log():
    lines = (DOCS / "semantic.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= MAX_GUIDE_LINES, f"docs/semantic.md has {len(lines)} lines"


def docs_pages() -> set[str]:
    return {p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md")}


def test_every_page_is_in_the_nav_and_the_index():
    nav = set(NAV_PAGE.findall((ROOT / "mkdocs.yml").read_text(encoding="utf-8")))
    index = (DOCS / "index.md").read_text(encoding="utf-8")
    linked = set(re.findall(r"\]\(([\w/.-]+\.md)(?:#[\w-]*)?\)", index))
    assert nav == docs_pages()
    assert linked == docs_pages() - {"index.md"}


def test_the_readme_says_where_to_start_and_mkdocs_names_no_made_up_repository():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    start = re.search(r"\*\*Where to start:\*\*(.+?)\n\n", readme, re.DOTALL)
    assert start is not None and start.start() < readme.index("## Quick start")
    assert "(docs/how-memory-works.md)" in start.group(1)
    assert "example.invalid" not in (ROOT / "mkdocs.yml").read_text(encoding="utf-8")


@pytest.mark.subprocess
@pytest.mark.parametrize("missing", ["pytest", "hypothesis"])
def test_the_conformance_suites_name_their_extra_when_a_tool_is_missing(missing):
    # A Python where the module cannot be imported, as without the conformance extra.
    code = f"import sys; sys.modules[{missing!r}] = None; import fastaiagent.facts.conformance"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("fastaiagent.errors.MissingExtraError: ")
    assert f"{missing!r} is not installed" in last
    assert "pip install 'fastaiagent[conformance]'" in last
