"""Time phrases in recall queries: days, offsets from a day, offsets from now."""

from __future__ import annotations

from datetime import date, datetime, timezone
from pathlib import Path

import pytest
from _vector_fakes import WordHashEmbedder

from fastaiagent.agent.memory_blocks.vector import VectorBlock
from fastaiagent.errors import InvalidTypeError
from fastaiagent.facts.sqlite.store import SQLiteFactStore
from fastaiagent.kb.backends.faiss import FaissVectorStore
from fastaiagent.llm.message import UserMessage
from fastaiagent.recall.dates import date_cue, read_times, time_spans
from fastaiagent.recall.weights import YEARS_BACK

NOW = datetime(2026, 6, 17, 15, 30, tzinfo=timezone.utc)  # a Wednesday


def days(query: str, now: datetime = NOW) -> list[tuple[date, date]]:
    """Each span as (first day, day after the last), in UTC."""
    spans = time_spans(query, now.timestamp())
    return [
        (datetime.fromtimestamp(a, timezone.utc).date(), datetime.fromtimestamp(b, timezone.utc).date())
        for a, b in spans
    ]


def at(year: int, month: int, day: int, hour: int = 12) -> float:
    return datetime(year, month, day, hour, tzinfo=timezone.utc).timestamp()


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        # a day: that day and the week after (a message about it often comes later)
        ("What did we decide on 8 May, 2023?", [(date(2023, 5, 8), date(2023, 5, 16))]),
        ("what happened on August 11th 2023", [(date(2023, 8, 11), date(2023, 8, 19))]),
        # counted from a day: from the event to a week after the day
        ("Which puppy did she get two weeks before August 11, 2023?", [(date(2023, 7, 27), date(2023, 8, 19))]),
        ("What did John do the week before August 3, 2023?", [(date(2023, 7, 26), date(2023, 8, 11))]),
        ("Where was Tim 3 days after 16 November 2023?", [(date(2023, 11, 16), date(2023, 11, 27))]),
        # counted from now
        ("what did I tell you yesterday?", [(date(2026, 6, 16), date(2026, 6, 17))]),
        ("what did we plan today", [(date(2026, 6, 17), date(2026, 6, 18))]),
        ("what did I say last week?", [(date(2026, 6, 8), date(2026, 6, 15))]),
        ("what did we buy last month?", [(date(2026, 5, 1), date(2026, 6, 1))]),
        ("what did I read last year?", [(date(2025, 1, 1), date(2026, 1, 1))]),
        ("the trip last May", [(date(2026, 5, 1), date(2026, 6, 1))]),
        ("the trip last July", [(date(2025, 7, 1), date(2025, 8, 1))]),
        ("what did I eat three days ago", [(date(2026, 6, 13), date(2026, 6, 15))]),
        ("a couple of weeks ago we met", [(date(2026, 5, 31), date(2026, 6, 7))]),
        # nothing to read, or no such day
        ("When did Melanie paint a sunrise?", []),
        ("How long ago was her birthday?", []),
        ("what was due on 31 February 2023?", []),
        ("may I ask what we did?", []),
    ],
)
def test_time_phrases_become_spans(query: str, expected: list[tuple[date, date]]) -> None:
    assert days(query) == expected


def test_last_weekend_before_a_day_is_counted_from_that_day_not_from_now() -> None:
    assert days("What did Maria do last weekend before April 10, 2023?") == [
        (date(2023, 4, 2), date(2023, 4, 18))
    ]


def test_a_named_day_is_its_own_cue_not_its_whole_month() -> None:
    cue = date_cue("Which puppy did she get two weeks before August 11, 2023?", NOW.timestamp())
    assert cue is not None and not cue.months and not cue.years
    assert cue.matches(at(2023, 7, 28))  # in the span, though July
    assert not cue.matches(at(2023, 8, 30))  # August 2023, but weeks after the day
    assert not cue.matches(at(2023, 7, 20)) and not cue.matches(at(2024, 8, 11))
    both = date_cue("What did she do on 8 May 2023 and in June 2023?", NOW.timestamp())
    assert both is not None and both.months == {6} and both.years == {2023}
    assert both.matches(at(2023, 5, 9)) and both.matches(at(2023, 6, 20))
    only_now = date_cue("what did I say yesterday?", NOW.timestamp())
    assert only_now is not None and not only_now.months and not only_now.years
    assert only_now.matches(at(2026, 6, 16)) and not only_now.matches(at(2026, 6, 10))


def test_a_week_of_a_month_with_or_without_its_year() -> None:
    dated = date_cue("Where was Tim in the second week of November 2023?", NOW.timestamp())
    assert dated is not None and not dated.months
    assert days("in the second week of November 2023") == [(date(2023, 11, 8), date(2023, 11, 22))]
    assert days("the last week of February 2024") == [(date(2024, 2, 23), date(2024, 3, 8))]
    any_year = date_cue("Which country was Tim visiting in the second week of November?")
    assert any_year is not None and any_year.yearly == ((11, 8, 21),) and not any_year.months
    assert any_year.matches(at(2023, 11, 16)) and any_year.matches(at(2019, 11, 9))
    assert not any_year.matches(at(2023, 11, 2)) and not any_year.matches(at(2023, 10, 16))


def test_recall_reads_yesterday_at_the_blocks_clock() -> None:
    said = [at(2026, 6, 2), at(2026, 6, 9), at(2026, 6, 16)]

    def recall(clock: object) -> float:
        memory = VectorBlock(
            FaissVectorStore(dimension=64), embedder=WordHashEmbedder(), top_k=1,
            min_content_chars=1, context_turns=0, clock=clock,
        )  # fmt: skip
        for moment in said:  # the same words each time: only the day tells them apart
            memory.on_message(UserMessage("I said the plan is fine"), at=moment)
        return float(memory.recall("what plan did I say yesterday?")[0].chunk.metadata["created_at"])

    assert recall(lambda: NOW) == said[2]
    assert recall(lambda: datetime(2026, 6, 3, tzinfo=timezone.utc)) == said[0]
    assert recall(lambda: datetime(2026, 6, 10, 9, tzinfo=timezone.utc)) == said[1]
    with pytest.raises(InvalidTypeError, match="clock"):
        VectorBlock(FaissVectorStore(dimension=64), embedder=WordHashEmbedder(), clock="noon")


def test_a_cue_as_spans_for_a_store_to_list() -> None:
    def listed(query: str) -> list[tuple[date, date]]:
        cue = date_cue(query, NOW.timestamp())
        assert cue is not None
        return [
            (datetime.fromtimestamp(a, timezone.utc).date(), datetime.fromtimestamp(b, timezone.utc).date())
            for a, b in cue.ranges(NOW.timestamp())
        ]

    assert listed("What did I do in January 2022?") == [(date(2022, 1, 1), date(2022, 2, 1))]
    assert listed("in May or June 2023?") == [(date(2023, 5, 1), date(2023, 7, 1))]  # joined
    assert listed("anything from 2021") == [(date(2021, 1, 1), date(2022, 1, 1))]
    in_may = listed("What did she start in May?")  # every year up to now's
    assert len(in_may) == YEARS_BACK + 1 and in_may[-1] == (date(2026, 5, 1), date(2026, 6, 1))
    week = listed("the last week of February")  # a yearly week ends with its month
    assert (date(2024, 2, 22), date(2024, 3, 1)) in week and (date(2023, 2, 22), date(2023, 3, 1)) in week
    assert listed("what did I say yesterday?") == [(date(2026, 6, 16), date(2026, 6, 17))]


def test_a_question_naming_a_time_finds_that_times_messages_with_no_word_in_common(
    tmp_path: Path,
) -> None:
    """Through the durable SQLite index, "yesterday" ranks yesterday's messages on their own,
    so one that shares no word with the question is recalled among 300 that do not
    match either; another user's message of the same day stays theirs."""
    store = SQLiteFactStore(tmp_path / "memory.db")
    index = store.vector_store()

    def user(name: str) -> VectorBlock:
        return VectorBlock(
            index, embedder=WordHashEmbedder(), top_k=2, namespace=name, min_content_chars=1,
            clock=lambda: NOW,
        )  # fmt: skip

    ana, bob = user("user:ana"), user("user:bob")
    for i in range(300):
        ana.on_message(UserMessage(f"note {i}: the {i % 7} crates of item {i} went out"), at=at(2026, 1, 1) + i * 3600)
    ana.on_message(UserMessage("Booked the piano tuner for Thursday"), at=at(2026, 6, 16, 9))
    bob.on_message(UserMessage("Bob's own plans for the weekend"), at=at(2026, 6, 16, 10))
    found = [r.chunk.text for r in ana.recall("What did we talk about yesterday?")]
    assert found[0] == "Booked the piano tuner for Thursday"
    assert all(not text.startswith("Bob") for text in found)
    # The same question a month later names another day: that message is not forced in.
    later = user("user:ana")
    later.clock = lambda: datetime(2026, 7, 20, tzinfo=timezone.utc)
    assert "Booked the piano tuner for Thursday" not in [r.chunk.text for r in later.recall("What did we talk about yesterday?")]
    store.close()


def test_a_query_of_many_dated_phrases_is_read_whole_and_in_one_pass() -> None:
    """A 64k-character message (the largest Memory accepts) full of dates: every
    day and its offset is read, and the text left for the month cue has none of
    them. Reading each day's prefix again made this take seconds, not ms."""
    phrase = "3 days after 16 November 2023 and "
    query = phrase * (65_536 // len(phrase))
    spans = days(query)
    assert len(spans) == 65_536 // len(phrase)
    assert set(spans) == {(date(2023, 11, 16), date(2023, 11, 27))}
    assert date_cue(query, NOW.timestamp()) is not None
    assert "November" not in read_times(query, NOW.timestamp()).rest
    # Phrases that overlap ("the first week of May" and "May 8, 2023") leave one gap.
    rest = read_times("before the first week of May 8, 2023 we met", NOW.timestamp()).rest
    assert rest.split() == ["before", "the", "we", "met"]


def test_an_offset_is_read_only_right_before_its_day() -> None:
    """The offset must end where the day begins; a word cut at the reach of the
    search is not read as one ("xthree" is not "three")."""
    assert days("three days before 16 November 2023") == [(date(2023, 11, 12), date(2023, 11, 24))]
    assert days("xthree days before 16 November 2023") == [(date(2023, 11, 16), date(2023, 11, 24))]
    assert days("three days before we met on 16 November 2023") == [
        (date(2023, 11, 16), date(2023, 11, 24))
    ]
