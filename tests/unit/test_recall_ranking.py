"""The order of recall's candidates once the searches have answered (recall.ranking)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from fastaiagent.kb.protocols import NAMESPACE_KEY, Chunk
from fastaiagent.recall.candidates import Candidates
from fastaiagent.recall.dates import DateCue
from fastaiagent.recall.query import read_query
from fastaiagent.recall.ranking import Ranked, rank
from fastaiagent.recall.weights import Ranking

AT = 1_700_000_000.0


@dataclass
class Options:
    """One step on at a time: the weights of recall.weights.Ranking, every other off."""

    participant: float = 0.0
    date: float = 0.0
    reply_drop: float = 0.0
    question_drop: float = 0.0
    follow_turns: int = 0


@dataclass
class Searched:
    """What the searches found, as the tests write it: chunks with their scores."""

    dense: Sequence[tuple[Chunk, float]]
    recorded: Sequence[tuple[Chunk, float]]
    keyword: Sequence[tuple[str, float]]
    chunks: dict[str, Chunk]


def rank_hybrid(
    options: Options, searched: Searched, *, speaker: str | None, when: DateCue | None, fetch: object,
    about_replies: bool = False,
) -> list[tuple[Chunk, float]]:
    """:func:`rank` over ``searched`` with ``options``' steps; the candidates are left as they were."""
    before = dict(searched.chunks)
    found = Candidates(
        searched.chunks, tuple((c.id, s) for c, s in searched.dense),
        recorded=tuple((c.id, s) for c, s in searched.recorded), keyword=tuple(searched.keyword),
    )  # fmt: skip
    query = replace(read_query("what did you say" if about_replies else "what", now=AT), when=when)
    weights = Ranking.off().with_(**vars(options))
    ranked = rank(found, query, weights, dense_weight=0.5, fetch=fetch, namespace="user:ana", speaker=speaker)  # type: ignore[arg-type]
    assert searched.chunks == before  # nothing edited in place
    return [(r.chunk, r.score) for r in ranked]


def chunk(cid: str, text: str, *, speaker: str = "Ana", after: str | None = None, ns: str = "user:ana") -> Chunk:
    metadata: dict[str, object] = {NAMESPACE_KEY: ns, "speaker": speaker, "created_at": AT}
    if after is not None:
        metadata["next"] = after
    return Chunk(cid, text, None, metadata)


def never(ids: Sequence[str]) -> list[Chunk]:
    raise AssertionError(f"no store read expected, got {list(ids)}")


def candidates() -> tuple[list[Chunk], Searched]:
    a = chunk("a", "I adopted a puppy", after="b")
    b = chunk("b", "What breed is it?", speaker="Ben", after="c")
    c = chunk("c", "A beagle, very loud", speaker="Ana")
    d = chunk("d", "Dogs are great", speaker="Ben")
    chunks = [a, b, c, d]
    searched = Searched(
        dense=[(a, 0.9), (d, 0.6), (b, 0.5)],
        recorded=[],
        keyword=[("a", 8.0), ("c", 1.0)],
        chunks={x.id: x for x in chunks},
    )
    return chunks, searched


def order(ranked: list[tuple[Chunk, float]]) -> list[str]:
    return [c.id for c, _ in ranked]


def test_both_sides_agreeing_rank_first_and_scores_stay_in_unit_range() -> None:
    _, searched = candidates()
    ranked = rank_hybrid(Options(), searched, speaker=None, when=None, fetch=never)
    assert order(ranked)[0] == "a"  # the best of both searches
    assert set(order(ranked)) == {"a", "b", "c", "d"}
    scores = [s for _, s in ranked]
    assert scores == sorted(scores, reverse=True) and all(0 < s < 1 for s in scores)


def test_the_named_speaker_rises_and_the_others_do_not() -> None:
    _, searched = candidates()
    plain = order(rank_hybrid(Options(), searched, speaker=None, when=None, fetch=never))
    _, searched = candidates()
    cued = order(rank_hybrid(Options(participant=3.0), searched, speaker="Ben", when=None, fetch=never))
    assert plain[0] == "a" and plain.index("b") > plain.index("d")
    assert cued[:2] == ["d", "b"]  # Ben's two messages lead, in their own order
    assert cued.index("a") < cued.index("c")  # Ana's keep theirs


def reply_and_statement() -> Searched:
    """The agent's long reply echoes the user's short statement: it scores higher."""
    said = chunk("said", "My router is an Eero 6 mesh", speaker="Dana")
    reply = Chunk("reply", "Mesh routers like the Eero 6 work well with it", None,
                  {NAMESPACE_KEY: "user:ana", "role": "assistant", "created_at": AT})  # fmt: skip
    filler = [chunk(f"f{i}", f"other message {i}") for i in range(4)]
    return Searched(
        dense=[(reply, 0.8), (said, 0.7), *[(f, 0.1) for f in filler]],
        recorded=[],
        keyword=[("reply", 6.0), ("said", 5.5), *[(f.id, 1.0) for f in filler]],
        chunks={x.id: x for x in [said, reply, *filler]},
    )


def test_the_agent_s_reply_ranks_below_the_user_s_own_words() -> None:
    plain = order(rank_hybrid(Options(), reply_and_statement(), speaker=None, when=None, fetch=never))
    dropped = Options(reply_drop=1.0)
    cued = order(rank_hybrid(dropped, reply_and_statement(), speaker=None, when=None, fetch=never))
    assert plain[:2] == ["reply", "said"] and cued[:2] == ["said", "reply"]
    # A question about what the agent said keeps the replies where they were
    about = rank_hybrid(dropped, reply_and_statement(), speaker=None, when=None, fetch=never, about_replies=True)
    assert order(about)[:2] == ["reply", "said"]


def test_a_message_that_asks_drops_below_one_that_does_not() -> None:
    _, searched = candidates()
    plain = order(rank_hybrid(Options(), searched, speaker=None, when=None, fetch=never))
    _, searched = candidates()
    dropped = order(rank_hybrid(Options(question_drop=5.0), searched, speaker=None, when=None, fetch=never))
    assert plain.index("b") < plain.index("c")
    assert dropped[-1] == "b"


def test_the_reply_after_a_hit_is_read_from_its_namespace_only() -> None:
    a = chunk("a", "I adopted a puppy", after="b")
    searched = Searched(dense=[(a, 0.9)], recorded=[], keyword=[("a", 5.0)], chunks={"a": a})
    reads: list[list[str]] = []

    def fetch(ids: Sequence[str]) -> list[Chunk]:
        reads.append(list(ids))
        return [chunk("b", "A beagle!", speaker="Ben", after="x", ns="user:other")] if "b" in ids else []

    ranked = rank_hybrid(Options(follow_turns=1), searched, speaker=None, when=None, fetch=fetch)
    assert reads == [["b"]]
    assert order(ranked) == ["a"]  # another user's message is never drawn in

    def fetch_own(ids: Sequence[str]) -> list[Chunk]:
        return [chunk("b", "A beagle!", speaker="Ben")] if "b" in ids else []

    searched = Searched(dense=[(a, 0.9)], recorded=[], keyword=[("a", 5.0)], chunks={"a": a})
    ranked = rank_hybrid(Options(follow_turns=1), searched, speaker=None, when=None, fetch=fetch_own)
    assert order(ranked) == ["a", "b"]  # drawn in just below its hit


def test_cues_leave_scores_alone_when_the_query_names_nothing() -> None:
    _, searched = candidates()
    plain = rank_hybrid(Options(), searched, speaker=None, when=None, fetch=never)
    cued = rank_hybrid(Options(participant=2.0, date=1.0), searched, speaker=None, when=None, fetch=never)
    assert cued == plain
    by_ben = dict((c.id, s) for c, s in rank_hybrid(Options(participant=2.0), searched, speaker="Ben", when=None, fetch=never))
    assert by_ben["b"] > dict((c.id, s) for c, s in plain)["b"] and by_ben["a"] == dict((c.id, s) for c, s in plain)["a"]


def test_the_ranking_reads_as_a_list_however_far_it_is_read() -> None:
    """Results are built as they are read (a door reads a few): indexing, slicing,
    negative indexes and iteration give the same results in the same order."""
    chunks = {f"c{i}": chunk(f"c{i}", f"fact number {i}") for i in range(12)}
    found = Candidates(
        chunks,
        tuple((f"c{i}", 0.9 - i / 20) for i in range(12)),
        keyword=(("c7", 3.0), ("c2", 1.0)),
    )
    query = read_query("fact", now=AT)

    def ranking() -> Sequence[Ranked]:
        return rank(
            found,
            query,
            Ranking(),
            dense_weight=0.5,
            fetch=lambda ids: [],
            namespace="user:ana",
            speaker=None,
        )

    whole = list(ranking())
    assert len(whole) == 12 and [r.score for r in whole] == sorted(
        (r.score for r in whole), reverse=True
    )
    partly = ranking()
    assert partly[3] == whole[3] and partly[-1] == whole[-1] and partly[2:5] == whole[2:5]
    assert list(partly) == whole and len(partly) == 12
    try:
        partly[12]
    except IndexError:
        pass
    else:
        raise AssertionError("an index past the end must raise IndexError")
