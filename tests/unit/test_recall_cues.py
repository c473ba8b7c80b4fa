"""Recall beyond keyword search: calibrated fusion, participant and date cues, the next message."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from _vector_fakes import WordHashEmbedder

from fastaiagent.agent.memory_blocks.recall_options import RecallOptions
from fastaiagent.agent.memory_blocks.vector import MAX_SPEAKERS, VectorBlock
from fastaiagent.errors import InvalidTypeError, InvalidValueError
from fastaiagent.facts.vectors import embedded_text
from fastaiagent.kb.backends.faiss import FaissVectorStore
from fastaiagent.kb.hybrid import calibrated_fuse, standardized, unit_score
from fastaiagent.kb.protocols import NAMESPACE_KEY, Chunk
from fastaiagent.llm.message import AssistantMessage, SystemMessage, UserMessage
from fastaiagent.recall.dates import date_cue
from fastaiagent.recall.query import read_query
from fastaiagent.recall.weights import SIGNALS


# What the one reading of a query (recall.query.read_query) says, cue by cue.
def named_participant(query: str, names: set[str]) -> str | None:
    return read_query(query, speakers=names, now=0.0).speaker


def without_names(query: str, names: set[str]) -> str:
    return read_query(query, speakers=names, now=0.0).embedded


def asks_about_replies(query: str) -> bool:
    return read_query(query, now=0.0).about_replies


def time_order(query: str) -> int:
    return read_query(query, now=0.0).time_order


FILLER = [
    "the weather was grey all week",
    "my manager moved the meeting to Friday",
    "we need to buy more coffee filters",
    "the train was late again this morning",
]


# A ranking step's weight by its old option name (a single step off is an experiment on
# VectorBlock.ranking since RecallOptions keeps one switch, ``cues``).
STEPS = {"participant_boost": "participant", "date_boost": "date", "reply_drop": "reply_drop",
         "follow_turns": "follow_turns", "surroundings": "signals", "time_order": "time_order"}  # fmt: skip


def block(**options) -> VectorBlock:
    options.setdefault("embedder", WordHashEmbedder())
    steps = {STEPS[name]: options.pop(name) for name in list(options) if name in STEPS}
    if "signals" in steps:
        steps["signals"] = SIGNALS if steps["signals"] else None
    memory = VectorBlock(FaissVectorStore(dimension=64), top_k=3, min_content_chars=1, **options)
    memory.ranking = memory.ranking.with_(**steps)
    return memory


def ts(year: int, month: int, day: int = 10) -> float:
    return datetime(year, month, day, tzinfo=timezone.utc).timestamp()


def texts(recalled) -> list[str]:
    return [r.chunk.text for r in recalled]


# -- fusion -----------------------------------------------------------------


def test_calibrated_fusion_keeps_the_other_keyword_hits_apart_from_one_outlier():
    # Divided by the best score, one outlier squeezes b and c together near 0;
    # standardised, the dense side still decides between them.
    dense = [("a", 0.30), ("b", 0.60), ("c", 0.20)]
    keyword = [("a", 40.0), ("b", 2.0), ("c", 1.8)]
    fused = calibrated_fuse(dense, keyword, dense_weight=0.5)
    assert max(fused, key=fused.__getitem__) == "a"
    assert fused["b"] > fused["c"]


def test_a_document_found_by_one_side_gets_the_other_sides_lowest_score():
    fused = calibrated_fuse([("a", 0.9), ("b", 0.1)], [("a", 3.0), ("k", 1.0)], dense_weight=0.5)
    # k has no cosine: it gets b's (the lowest) dense z-score, -1.
    assert fused["k"] == pytest.approx(0.5 * -1.0 + 0.5 * -1.0)
    assert set(fused) == {"a", "b", "k"}


def test_a_complete_keyword_side_scores_every_other_candidate_zero():
    # Three near-equal keyword hits, standardised among themselves, spread around their
    # own mean: "k" falls to the bottom, below every message that matches no keyword.
    dense = [("d", 0.9), ("e", 0.5), ("f", 0.4), ("g", 0.3), ("h", 0.2)]
    keyword = [("i", 3.2), ("j", 3.0), ("k", 2.9)]

    def order(fused: dict[str, float]) -> str:
        return "".join(sorted(fused, key=fused.__getitem__, reverse=True))

    assert order(calibrated_fuse(dense, keyword, dense_weight=0.5)) == "diefjghk"
    # Told the search found every message holding a query term, the others score 0:
    # each hit stands above the matchless messages the dense side does not put first.
    complete = calibrated_fuse(dense, keyword, dense_weight=0.5, keyword_complete=True)
    assert order(complete) == "dijkefgh"


def test_standardized_scores_and_their_unit_form():
    assert standardized([1.0, 3.0]) == [-1.0, 1.0]
    assert standardized([2.0, 2.0]) == [0.0, 0.0]
    assert standardized([5.0]) == [1.0]  # a lone hit is a strong hit
    assert 0.0 < unit_score(-3.0) < unit_score(0.0) == 0.5 < unit_score(3.0) < 1.0


def test_the_messages_of_a_named_time_are_ranked_on_their_own_scale():
    # r is the best message of the day the query names, far below the overall best by
    # cosine: standardised among that day's messages it stands with a, before b and c.
    dense = [("a", 0.9), ("b", 0.8), ("c", 0.7)]
    recorded = [("r", 0.3), ("s", 0.1), ("b", 0.05)]
    fused = calibrated_fuse(dense, [], dense_weight=1.0, recorded=recorded)
    assert sorted(fused, key=fused.__getitem__, reverse=True) == ["r", "a", "b", "s", "c"]
    assert fused["b"] == pytest.approx(calibrated_fuse(dense, [], dense_weight=1.0)["b"])  # its better standing
    assert calibrated_fuse(dense, [], dense_weight=1.0, recorded=()) == calibrated_fuse(dense, [], dense_weight=1.0)


def test_fusion_weight_is_checked():
    with pytest.raises(InvalidValueError, match="dense_weight"):
        calibrated_fuse([], [], dense_weight=1.5)


# -- query cues -------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("What did you suggest to fix the E74 error?", True),
        ("Which type checker did you recommend?", True),
        ("the cable you recommended, which one was it?", True),
        ("What you said about slowapi", True),
        ("Can you tell me my email address?", False),  # asks the agent, about the user
        ("Do you know my order number?", False),
        ("Which router do I have?", False),
        ("Where did your team ship it?", False),
    ],
)
def test_a_query_asks_about_the_agent_s_replies_only_about_what_it_said(query: str, expected: bool) -> None:
    assert asks_about_replies(query) is expected


def test_named_participant_is_the_one_name_as_written():
    names = {"Melanie", "Caroline"}
    assert named_participant("What books has Melanie read?", names) == "Melanie"
    assert named_participant("What is Melanie's favourite book?", names) == "Melanie"
    assert named_participant("what books has melanie read?", names) is None
    assert named_participant("What did Mel read?", names) is None
    assert named_participant("What did we read?", names) is None


def test_of_two_names_the_subject_is_the_participant():
    names = {"Jon", "Gina", "Ann"}
    assert named_participant("What did Jon say about Gina's progress?", names) == "Jon"
    assert named_participant("What does Jon tell Gina he won't do?", names) == "Jon"
    assert named_participant("According to Gina, what makes Jon a mentor?", names) == "Gina"
    assert named_participant("What did Gina's sister tell Jon?", names) == "Jon"
    assert named_participant("What did Ann tell Jon and Gina?", names) == "Ann"


def test_a_pair_of_names_prefers_neither():
    names = {"Jon", "Gina", "Melanie", "Caroline"}
    assert named_participant("What do Melanie and Caroline share?", names) is None
    assert named_participant("How do Jon & Gina both destress?", names) is None
    assert named_participant("Did Jon, Gina and Melanie dance?", names) is None
    assert named_participant("What did Jon's and Gina's shops sell?", names) is None


def test_without_names_keeps_the_topic_and_never_empties_the_query():
    names = ["Melanie", "Caroline"]
    assert without_names("What books has Melanie read?", names) == "What books has read?"
    assert without_names("Is Caroline's dog OK?", names) == "Is dog OK?"
    assert without_names("Melanie?", names) == "Melanie?"


def test_date_cue_reads_months_and_years_not_the_verb_may():
    cue = date_cue("What did she start in December 2023?")
    assert cue is not None and cue.months == {12} and cue.years == {2023}
    assert cue.matches(ts(2023, 12)) and not cue.matches(ts(2022, 12))
    assert not cue.matches(ts(2023, 11))
    assert date_cue("may I ask what we did?") is None
    only_year = date_cue("what happened in 2021?")
    assert only_year is not None and only_year.matches(ts(2021, 3))


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("Where do migrations run now?", 1),
        ("What is my current address?", 1),
        ("How do I take my coffee these days?", 1),
        ("现在的总预算是多少？", 1),
        ("Wie lautet meine aktuelle Adresse?", 1),
        ("What colour did I originally order?", -1),
        ("一开始预计有多少位宾客？", -1),
        ("Wie hoch war die Miete ursprünglich?", -1),
        ("What did I order originally, and what do I have now?", 0),  # both ends
        ("What do you know about my dog?", 0),  # "know" is not "now"
        ("Where did migrations run in March?", 0),
        ("Who won first place?", 0),  # "first" is no cue
    ],
)
def test_a_query_asks_for_the_latest_or_the_earliest_only_in_those_words(query: str, expected: int) -> None:
    assert time_order(query) == expected


# -- through VectorBlock -----------------------------------------------------


def participants(**options) -> list[str]:
    memory = block(**options)
    memory.on_message(UserMessage("Ana, I read your books, I read books every day", name="Ben"))
    memory.on_message(UserMessage("I finished a book about whales", name="Ana"))
    for text in FILLER:
        memory.on_message(UserMessage(text, name="Ben"))
    return texts(memory.recall("What books has Ana read?"))


def test_a_named_participants_own_messages_come_first():
    assert participants()[0] == "I finished a book about whales"
    # Without the cue, Ben's message (more words in common) wins.
    assert participants(participant_boost=0.0)[0].startswith("Ana, I read your books")


def test_a_question_about_two_people_prefers_its_subjects_messages():
    memory = block()
    memory.on_message(UserMessage("Ana, your book club sounds fun, tell me about it", name="Ben"))
    memory.on_message(UserMessage("I told Ben our book club reads about whales", name="Ana"))
    for text in FILLER:
        memory.on_message(UserMessage(text, name="Ben"))
    assert texts(memory.recall("What did Ana tell Ben about her book club?"))[0].startswith(
        "I told Ben"
    )
    assert texts(memory.recall("What did Ben tell Ana about her book club?"))[0].startswith(
        "Ana, your book club"
    )


def test_the_embedded_query_leaves_the_participants_name_out():
    embedder = WordHashEmbedder()
    memory = block(embedder=embedder)
    memory.on_message(UserMessage("I read a book about whales", name="Ana"))
    memory.recall("What books has Ana read?")
    # The search vector is the first of the call; the message as said rides along,
    # for the record that follows (one embedder call for both).
    assert ["What books has read?", "What books has Ana read?"] in embedder.calls
    assert not any(call[0] == "What books has Ana read?" for call in embedder.calls)


def test_unnamed_messages_leave_the_query_as_it_is():
    embedder = WordHashEmbedder()
    memory = block(embedder=embedder)
    memory.on_message(UserMessage("Ana lent me a book about whales"))
    memory.recall("What book did Ana lend?")
    assert ["What book did Ana lend?"] in embedder.calls


def camping(**options) -> list[str]:
    memory = block(**options)
    memory.on_message(UserMessage("camping trip, so much camping by the lake"), at=ts(2023, 3))
    memory.on_message(UserMessage("we went camping with the kids"), at=ts(2023, 7))
    for i, text in enumerate(FILLER):
        memory.on_message(UserMessage(text), at=ts(2023, 7, 12 + i))
    return texts(memory.recall("When did we go camping in July?"))


def test_a_question_about_a_month_prefers_what_was_said_then():
    assert camping()[0] == "we went camping with the kids"
    assert camping(date_boost=0.0)[0].startswith("camping trip")


def test_messages_are_dated_now_unless_told_when():
    memory = block()
    memory.on_message(UserMessage("recorded later"), at=ts(2020, 1))
    memory.on_message(UserMessage("recorded live"))
    memory.flush()
    dates = {c.text: c.metadata["created_at"] for c in memory.store.chunks("default")}
    assert dates["recorded later"] == ts(2020, 1)
    assert dates["recorded live"] > ts(2025, 1)


def test_two_workers_loading_one_state_never_share_a_message_id():
    # Both would take the "next" id the state carries: one message would overwrite
    # the other. The link from the last message to the next is the price (#31).
    store = FaissVectorStore(dimension=64)
    embedder = WordHashEmbedder()
    first = VectorBlock(store, embedder=embedder, min_content_chars=1, context_turns=0)
    first.on_message(UserMessage("which pet did we choose at the shelter, the pet with spots?"))
    state = first.dump_state()
    workers = [VectorBlock(store, embedder=embedder, min_content_chars=1, context_turns=0) for _ in range(2)]
    for n, worker in enumerate(workers):
        worker.load_state(state)
        worker.on_message(AssistantMessage(f"Biscuit, a beagle with brown patches ({n})"))
        worker.flush()
    texts = sorted(c.text for c in store.chunks("default"))
    assert len(texts) == 3 and texts[0].startswith("Biscuit") and texts[1].startswith("Biscuit")


def test_a_replayed_message_is_stored_once():
    store = FaissVectorStore(dimension=64)
    worker = VectorBlock(store, embedder=WordHashEmbedder(), min_content_chars=1, context_turns=0)
    said = UserMessage("my locker code is 4471")
    for _ in range(3):  # a turn re-applied after lost compare-and-set writes
        worker.on_message(said)
        worker.flush()
    assert [c.text for c in store.chunks("default")] == ["my locker code is 4471"]


def test_speakers_survive_a_restart_through_the_state():
    store = FaissVectorStore(dimension=64)
    first = VectorBlock(store, embedder=WordHashEmbedder(), min_content_chars=1)
    first.on_message(UserMessage("I read a book about whales", name="Ana"))
    second = VectorBlock(store, embedder=first.embedder, min_content_chars=1)
    second.load_state(first.dump_state())
    assert second.dump_state()["speakers"] == ["Ana"]


def test_removed_ranking_options_warn_name_the_release_and_are_still_checked():
    for removed in ({"participant_boost": 0.0}, {"neighbour_weight": 0.5}, {"embed_question": False},
                    {"surroundings": False}):  # fmt: skip
        with pytest.warns(DeprecationWarning, match=r"removed in fastaiagent 2\.0"):
            RecallOptions(**removed)
    with pytest.warns(DeprecationWarning), pytest.raises(InvalidValueError, match="participant_boost"):
        RecallOptions(participant_boost=-1.0)
    with pytest.warns(DeprecationWarning), pytest.raises(InvalidValueError, match="neighbour_weight"):
        RecallOptions(neighbour_weight=1.5)
    with pytest.warns(DeprecationWarning), pytest.raises(InvalidTypeError, match="date_boost"):
        VectorBlock(FaissVectorStore(dimension=64), embedder=WordHashEmbedder(), date_boost="high")
    with pytest.warns(DeprecationWarning):  # mapped onto its step's weight for one release
        mapped = VectorBlock(FaissVectorStore(dimension=64), embedder=WordHashEmbedder(), reply_drop=0)
    assert mapped.ranking.reply_drop == 0.0 and mapped.options.ranking.reply_drop == 0.0
    assert not RecallOptions(cues=False).ranking.participant and RecallOptions().ranking.participant


def test_bad_times_are_refused():
    with pytest.raises(InvalidTypeError, match="at must be a number"):
        block().on_message(UserMessage("hello there"), at="yesterday")  # type: ignore[arg-type]
    with pytest.raises(InvalidTypeError, match="at must be a number"):
        block().on_message(SystemMessage("not stored"), at="yesterday")  # type: ignore[arg-type]
    with pytest.raises(InvalidValueError, match="speakers"):
        block().load_state({"namespace": "default", "recent": [], "speakers": "Ana"})


def test_a_restarted_block_without_state_learns_the_speakers_from_what_it_recalls():
    store = FaissVectorStore(dimension=64)
    embedder = WordHashEmbedder()
    first = VectorBlock(store, embedder=embedder, min_content_chars=1, top_k=3)
    first.on_message(UserMessage("Ana, I read your books, I read books every day", name="Ben"))
    first.on_message(UserMessage("I finished a book about whales", name="Ana"))
    for text in FILLER:
        first.on_message(UserMessage(text, name="Ben"))
    first.flush()
    restarted = VectorBlock(store, embedder=embedder, min_content_chars=1, top_k=3)
    assert texts(restarted.recall("What books has Ana read?"))[0] == "I finished a book about whales"
    assert restarted.dump_state()["speakers"] == ["Ana", "Ben"]


def test_speaker_names_kept_are_bounded():
    memory = block()
    for i in range(MAX_SPEAKERS + 10):
        memory.on_message(UserMessage(f"message number {i}", name=f"person{i}"))
    assert len(memory.dump_state()["speakers"]) == MAX_SPEAKERS


def test_a_chunk_whose_time_is_not_a_number_is_recalled_not_fatal() -> None:
    """A shared store keeps a str ``created_at`` on write; recall reads it as now."""
    embedder = WordHashEmbedder()
    store = FaissVectorStore(dimension=64)
    text = "hiking in the hills"
    metadata = {NAMESPACE_KEY: "default", "created_at": "last week"}
    store.add([Chunk("x", text, embedder.embed([text])[0], metadata)])
    block = VectorBlock(store, embedder=embedder, min_content_chars=1, recency_weight=0.5)
    assert [r.chunk.text for r in block.recall("hiking yesterday")] == [text]


def test_importance_that_is_not_a_number_counts_as_one_and_a_number_ranks() -> None:
    """A shared store may hold any JSON as ``importance``: recall reads what is not a
    finite number as 1.0, and a real importance still re-ranks."""
    embedder = WordHashEmbedder()
    store = FaissVectorStore(dimension=64)
    rows = {"odd": ["high"], "low": 0.0, "text": "0.9", "nan": float("nan")}
    for key, value in rows.items():
        text = f"hiking trip {key}"
        metadata = {NAMESPACE_KEY: "default", "importance": value}
        store.add([Chunk(key, text, embedder.embed([text])[0], metadata)])
    block = VectorBlock(store, embedder=embedder, min_content_chars=1, importance_weight=0.9)
    ranked = [r.chunk.id for r in block.recall("hiking trip")]
    assert ranked[-1] == "low"
    assert set(ranked) == set(rows)


def test_a_chunk_whose_role_is_not_a_str_is_recalled_beside_a_window() -> None:
    """A shared store may hold any JSON as ``role``: the window check skips it (it
    cannot be a window message) and the note names no role."""
    embedder = WordHashEmbedder()
    store = FaissVectorStore(dimension=64)
    text = "hiking in the hills"
    metadata = {NAMESPACE_KEY: "default", "role": ["user"]}
    store.add([Chunk("x", text, embedder.embed([text])[0], metadata)])
    block = VectorBlock(store, embedder=embedder, min_content_chars=1)
    recalled = block.recall("hiking", window=[UserMessage("something else")])
    assert [r.chunk.text for r in recalled] == [text]
    assert block.format(recalled).endswith(f'- "{text}" (earlier message)')


def test_a_lone_surrogate_is_stored_replaced_and_later_messages_are_recalled(tmp_path) -> None:
    """A message with a lone surrogate (JSON's "\\ud800") used to fail its batch,
    and, kept for the next try, every later write and recall of the user."""
    from fastaiagent.facts.sqlite.store import SQLiteFactStore

    store = SQLiteFactStore(tmp_path / "memory.db")
    memory = VectorBlock(store.vector_store(), embedder=WordHashEmbedder(), min_content_chars=1)
    memory.on_message(UserMessage("broken \ud800 text"))
    memory.on_message(AssistantMessage("noted"))
    memory.on_message(UserMessage("we went hiking in the hills"))
    memory.on_message(AssistantMessage("nice"))
    found = texts(memory.recall("hiking \udc00 hills"))
    assert found[0] == "we went hiking in the hills"
    assert "broken \ufffd text" in {c.text for c in store.vector_store().chunks("default")}
    store.close()


def test_a_name_is_a_name_wherever_it_stands() -> None:
    # No rule for names that open a sentence (it followed one benchmark's group chat):
    # a speaker's name written as theirs is a name, in any place of the query.
    names = {"Will", "Grace", "Bill", "Ana"}
    assert named_participant("Will the refund arrive before Friday?", names) == "Will"
    assert named_participant("grace period for the loan?", names) is None  # not as written
    assert named_participant("Bill split: how is everyone paying Will back?", names) == "Bill"  # the first subject
    assert named_participant("Ana's sister moved where?", names) == "Ana"  # an owner opens it
    assert without_names("Which games is Bill bringing?", names) == "Which games is bringing?"


def test_a_month_or_year_is_a_time_only_where_the_query_says_when() -> None:
    now = datetime(2026, 6, 1, tzinfo=timezone.utc).timestamp()
    for content in ("What changed in the 2024 release?", "Do we use 2048-bit keys?",
                    "What caused the March incident?", "June weekend plans: which dates?"):  # fmt: skip
        assert date_cue(content, now) is None, content
    for when, months, years in (
        ("What did she start in December 2023?", {12}, {2023}),
        ("What did I say in May?", {5}, set()),
        ("Which state did she visit in summer 2021?", set(), {2021}),
        ("Where was the photo shared on December 1,2023 taken?", {12}, {2023}),
        ("What happened May 2023?", {5}, {2023}),
    ):
        cue = date_cue(when, now)
        assert cue is not None and (set(cue.months), set(cue.years)) == (months, years), when


def test_dates_in_a_query_are_read_in_the_memorys_time_zone() -> None:
    from zoneinfo import ZoneInfo

    from fastaiagent.agent.memory_blocks.recall_options import RecallOptions

    la = ZoneInfo("America/Los_Angeles")
    now = datetime(2024, 3, 2, 1, 0, tzinfo=la).timestamp()  # 09:00 UTC on March 2
    said = datetime(2024, 3, 1, 20, 0, tzinfo=la).timestamp()  # March 1 in LA, March 2 in UTC
    assert date_cue("what did I say yesterday?", now, la).matches(said)  # type: ignore[union-attr]
    assert not date_cue("what did I say yesterday?", now).matches(said)  # type: ignore[union-attr]
    month_end = datetime(2024, 3, 31, 20, 0, tzinfo=la).timestamp()  # April 1 in UTC
    assert date_cue("what did I say in March?", now, la).matches(month_end)  # type: ignore[union-attr]
    assert not date_cue("what did I say in March?", now).matches(month_end)  # type: ignore[union-attr]
    block = VectorBlock(FaissVectorStore(dimension=64), embedder=WordHashEmbedder(),
                        options=RecallOptions(tz="America/Los_Angeles"))  # fmt: skip
    assert block.options.tz == la
    with pytest.raises(InvalidValueError, match="not a time zone this machine knows"):
        RecallOptions(tz="Nowhere/City")
    with pytest.raises(InvalidTypeError, match="tz must be a time zone name"):
        RecallOptions(tz=5)  # type: ignore[arg-type]


def test_a_clock_with_a_time_zone_sets_whose_yesterday_it_is() -> None:
    from zoneinfo import ZoneInfo

    la = ZoneInfo("America/Los_Angeles")
    now = datetime(2024, 3, 2, 9, 0, tzinfo=timezone.utc)  # 01:00 on March 2 in Los Angeles
    said = {
        "I bought a red bike!": datetime(2024, 3, 2, 4, 0, tzinfo=timezone.utc),  # March 1 in LA only
        "I bought a red bike": datetime(2024, 3, 1, 3, 0, tzinfo=timezone.utc),  # March 1 in UTC only
    }
    for zone, expected in ((la, "I bought a red bike!"), (timezone.utc, "I bought a red bike")):
        memory = block(clock=lambda zone=zone: now.astimezone(zone), follow_turns=0, surroundings=False)
        for text, at in said.items():
            memory.on_message(UserMessage(text), at=at.timestamp())
        assert texts(memory.recall("what did I buy yesterday?"))[0] == expected, zone


SUPPORT_CHAT = [
    UserMessage("Hi, my order is late."),
    AssistantMessage(
        "Your parcel left our Kansas City warehouse on Monday and is with the courier now. "
        "Parcels from there usually take three days. Would you like a refund or a replacement?"
    ),
    UserMessage("A replacement please."),
    UserMessage("My sister moved to Denver last year."),
]


@pytest.mark.parametrize("fed", ["live", "imported"])
def test_a_reply_lends_the_message_after_it_only_its_last_sentence(fed: str):
    memory = block(retrieval="bm25", reply_drop=0.0)
    if fed == "live":
        for message in SUPPORT_CHAT:
            memory.on_message(message)
        memory.flush()
    else:
        memory.add_history(SUPPORT_CHAT)
    # The answer is indexed with what it answers ...
    assert texts(memory.recall("refund or replacement?"))[:1] == ["A replacement please."]
    # ... not with the rest of the reply, words the user never said.
    assert "A replacement please." not in texts(memory.recall("Kansas City warehouse courier"))


def test_the_last_sentence_of_a_reply_in_any_script():
    from fastaiagent.agent.memory_blocks.vector_history import as_context

    def reply(text: str) -> Chunk:
        return Chunk("r", text, None, {"role": "assistant"})

    assert as_context(reply("Done. Anything else?")) == "Anything else?"
    # its last question too, when a closing remark follows it
    assert as_context(reply("Two options. Which suits you? I'll book it.")) == "Which suits you? I'll book it."
    assert as_context(reply("好的，已经改了。你想要什么颜色？")) == "你想要什么颜色？"
    assert as_context(reply("version 2.0.1 is out")) == "version 2.0.1 is out"  # no sentence end
    said = Chunk("u", "Done. Anything else?", None, {"role": "user"})
    assert as_context(said) == "Done. Anything else?"  # a user's message is context whole


def test_a_message_keeps_the_question_it_answers():
    from collections import deque

    from fastaiagent.agent.memory_blocks.vector_history import link_to_previous, voice_of

    def said(role: str, text: str) -> Chunk:
        role, _, name = role.partition(":")
        return Chunk(text, text, None, {"role": role, **({"speaker": name} if name else {})})

    def linked(turns: list[tuple[str, str]], context_turns: int = 1, embed_question: bool = True) -> list[dict]:
        recent: deque[str] = deque(maxlen=context_turns or 1)
        chunks, voice = [said(role, text) for role, text in turns], None
        for chunk in chunks:
            link_to_previous(chunk, recent, context_turns, embed_question, voice)
            voice = voice_of(chunk)
        return [{k: v for k, v in c.metadata.items() if k != "speaker"} for c in chunks]

    reply = "Thanks. Which headphones are they? I'll check the order."
    _, answer = linked([("assistant", reply), ("user", "The Aura 300.")])
    assert answer["replies_to"] == "Which headphones are they?"  # asked mid-reply too
    assert answer["context"] == "Which headphones are they? I'll check the order."
    _, friend = linked([("user:Ana", "Nice! What's your favourite team? Mine's the Owls."), ("user:Ben", "Wolves.")])
    assert friend["replies_to"] == "What's your favourite team?"  # between two people too
    _, again = linked([("user", "What's my plan? Also, can I pay yearly?"), ("user", "And by card?")])
    assert "replies_to" not in again  # the asker goes on: nothing is answered
    _, agent = linked([("user", "Which plan am I on?"), ("assistant", "You are on Pro.")])
    assert "replies_to" not in agent  # the agent's replies are embedded as they are
    _, statement = linked([("assistant", "Done, the refund is on its way."), ("user", "Great, thanks.")])
    assert "replies_to" not in statement  # nothing was asked
    _, alone = linked([("assistant", "Which colour?"), ("user", "Green.")], context_turns=0)
    assert alone == {"role": "user", "replies_to": "Which colour?"}  # no keywords, still the question
    _, off = linked([("assistant", "Which colour?"), ("user", "Green.")], embed_question=False)
    assert off == {"role": "user", "context": "Which colour?"}  # switched off: keywords only


def test_an_answer_is_found_by_the_question_it_answers():
    # "Green ones, the Aura 300." shares no word with the question; the agent asked it.
    def ranked(context_turns: int) -> list[str]:
        memory = block(retrieval="dense", context_turns=context_turns)
        memory.on_message(UserMessage("My old headphones case was blue and broken."))
        memory.on_message(AssistantMessage("Sorry about that. Which headphones do you have now?"))
        memory.on_message(UserMessage("Green ones, the Aura 300."))
        memory.on_message(AssistantMessage("Noted, thanks."))
        return [t for t in texts(memory.recall("Which headphones do I have?")) if t.startswith(("Green", "My"))]

    expected = ["Green ones, the Aura 300.", "My old headphones case was blue and broken."]
    assert ranked(context_turns=1) == expected
    assert ranked(context_turns=0) == expected  # embedded with its question either way
    embedder = WordHashEmbedder()
    asked = block(embedder=embedder)
    asked.on_message(AssistantMessage("Sorry about that. Which headphones do you have now?"))
    asked.recall("Green ones.")  # asked directly: a query, nothing it answers
    asked.render("Green ones.")  # a turn: the message answers the agent's question
    assert embedder.calls[-2:] == [["Green ones."], ["Green ones. Which headphones do you have now?"]]
    asked.on_message(UserMessage("Which plan am I on?"))
    asked.render("And can I pay by card?")  # goes on from the user's own question: answers nothing
    assert embedder.calls[-1] == ["And can I pay by card?"]
    restarted = block(embedder=embedder)
    restarted.load_state(asked.dump_state())  # who spoke last is kept with the recent turns
    restarted.render("Or by bank transfer?")
    assert embedder.calls[-1] == ["Or by bank transfer?"]
    with pytest.raises(InvalidValueError, match="voice is not a str"):
        restarted.load_state({**asked.dump_state(), "voice": 3})
    given = VectorBlock(FaissVectorStore(dimension=64), embedder=WordHashEmbedder())
    with pytest.raises(InvalidTypeError, match="replies_to"):
        given.recall("Which headphones?", replies_to=3)  # type: ignore[arg-type]


def test_a_turn_that_answers_a_question_embeds_its_message_once(tmp_path):
    # Its query is embedded with the question it answers: the vector it is then stored with.
    from fastaiagent import Agent, Memory
    from fastaiagent.testing import CannedLLM

    embedder = WordHashEmbedder()
    memory = Memory(f"sqlite:///{tmp_path / 'm.db'}", user_id="ann", recall="auto", embedder=embedder)
    agent = Agent(name="a", llm=CannedLLM("Noted. Which headphones do you have?"), memory=memory)
    agent.run("My headphones crackle in the left ear.")
    embedder.calls.clear()
    agent.run("Green ones, the Aura 300.")
    assert embedder.calls == [["Green ones, the Aura 300. Which headphones do you have?"]]  # the reply: cached
    index = memory.location.vector_store()  # type: ignore[attr-defined]
    answer = next(c for c in index.read_namespaces(["user:ann"]) if c.text == "Green ones, the Aura 300.")
    assert answer.metadata["replies_to"] == "Which headphones do you have?"
    (hit,) = index.search(embedder.embed([embedded_text(answer)])[0], 1, namespace="user:ann")
    assert hit.chunk.id == answer.id and hit.score == pytest.approx(1.0, abs=1e-5)  # stored with that vector


def first_recalled(query: str, earlier: str, later: str, time_order: float) -> str:
    """The first message recalled for ``query`` of ``earlier`` (January), ``later`` (May)
    and filler between."""
    memory = block(time_order=time_order, clock=lambda: ts(2025, 6))
    memory.on_message(UserMessage(earlier), at=ts(2025, 1))
    for i, filler in enumerate(FILLER):
        memory.on_message(UserMessage(filler), at=ts(2025, 2 + i))
    memory.on_message(UserMessage(later), at=ts(2025, 5))
    memory.flush()
    return texts(memory.recall(query))[0]


@pytest.mark.parametrize("time_order", [0.5, 0.0])
def test_now_prefers_the_later_of_two_statements_and_originally_the_earlier(time_order: float):
    ci = "Our database migrations run in CI, the migrations job on every merge."
    release = "We changed it: migrations run in the release command."
    # The earlier statement matches more of the words; "now" asks for the later one.
    now = first_recalled("Where do the database migrations run now?", ci, release, time_order)
    assert now == (release if time_order else ci)  # its own weight, not the date boost's
    short, long = "Migrations run in the release step.", "Migrations run in our CI pipeline on every merge."
    # The later statement is the closer match; "originally" asks for the earlier one.
    originally = first_recalled("Where did migrations run originally?", long, short, time_order)
    assert originally == (long if time_order else short)


def test_a_query_read_again_later_reads_its_time_phrase_at_the_new_moment() -> None:
    # The reading of a text is kept between calls; "yesterday" must still move with now.
    day = 86_400.0
    first = read_query("what did I eat yesterday", now=100 * day)
    later = read_query("what did I eat yesterday", now=200 * day)
    assert first.when is not None and later.when is not None
    assert first.when.spans != later.when.spans
    assert later.when.matches(199.5 * day) and not later.when.matches(99.5 * day)
    assert later.now == 200 * day and first.terms == later.terms
