"""The keyword tokens every backend indexes (kb.bm25.tokenize), in several scripts."""

from __future__ import annotations

from pathlib import Path

from fastaiagent.facts.sqlite.store import SQLiteFactStore
from fastaiagent.kb.bm25 import BM25Index, tokenize
from fastaiagent.kb.protocols import Chunk


def test_english_words_are_lowered_stemmed_and_stop_words_dropped() -> None:
    assert tokenize("The cats were chasing Mice") == ["cat", "chas", "mice"]


def test_the_forms_of_a_word_stem_together() -> None:
    for forms in (
        "move moves moved moving",
        "decide decides decided deciding",
        "plan plans planned planning",
        "use uses used using",
        "house houses housing",
        "box boxes boxed",
        "city cities",
        "release releases released",
    ):
        assert len(set(tokenize(forms))) == 1, forms
    # Words that only look like forms stay apart
    assert tokenize("bring thing status glass") == ["bring", "thing", "status", "glass"]


def test_chinese_and_japanese_text_becomes_character_pairs() -> None:
    assert tokenize("伴娘是谁？") == ["伴娘", "娘是", "是谁"]
    assert "伴娘" in tokenize("伴娘请了我大学室友林晓雨")
    assert tokenize("東京") == ["東京"] and tokenize("日") == ["日"]
    assert tokenize("I booked 東京 trips") == ["book", "東京", "trip"]  # mixed text: each script its way
    assert tokenize("Python3で書いた") == ["python3", "で書", "書い", "いた"]


def test_a_chinese_question_finds_its_message_by_keywords() -> None:
    index = BM25Index()
    index.add("a", "伴娘请了我大学室友林晓雨")
    index.add("b", "婚礼彩排定在周五下午三点")
    assert index.search("伴娘是谁？", 2)[0][0] == "a"
    assert index.search("彩排是什么时候？", 2)[0][0] == "b"


def test_the_stored_keyword_side_finds_chinese_too(tmp_path: Path) -> None:
    store = SQLiteFactStore(tmp_path / "m.db")
    index = store.vector_store()
    index.add([
        Chunk("a", "伴娘请了我大学室友林晓雨", [1.0, 0.0], {"namespace": "u"}),
        Chunk("b", "婚礼彩排定在周五下午三点", [0.0, 1.0], {"namespace": "u"}),
    ])  # fmt: skip
    assert [doc for doc, _ in index.keyword_search("伴娘是谁？", 2, namespace="u")] == ["a"]
    store.close()
