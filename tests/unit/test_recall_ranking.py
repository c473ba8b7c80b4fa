"""The order of recall's candidates once the searches have answered (vector_ranking)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from fastaiagent.agent.memory_blocks.vector_ranking import (
    Searched,
    boost_cues,
    lend_to_next,
    rank_hybrid,
)
from fastaiagent.kb.protocols import NAMESPACE_KEY, Chunk

AT = 1_700_000_000.0


@dataclass
class Options:
    dense_weight: float = 0.5
    neighbour_weight: float = 0.0
    participant_boost: float = 0.0
    date_boost: float = 0.0
    reply_drop: float = 0.0
    question_drop: float = 0.0
    follow_turns: int = 0
    surroundings: bool = False
    namespace: str = "user:ana"


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
    cued = order(rank_hybrid(Options(participant_boost=3.0), searched, speaker="Ben", when=None, fetch=never))
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


def test_lending_reaches_the_next_message_only_when_it_is_a_candidate() -> None:
    chunks, _ = candidates()
    by_id = {c.id: c for c in chunks}
    assert lend_to_next([("a", 8.0)], by_id, 0.0) == [("a", 8.0)]
    assert dict(lend_to_next([("a", 8.0)], by_id, 0.25)) == {"a": 8.0, "b": 2.0}
    assert dict(lend_to_next([("c", 1.0)], by_id, 0.25)) == {"c": 1.0}  # c has no next


def test_cues_leave_scores_alone_when_the_query_names_nothing() -> None:
    chunks, _ = candidates()
    fused = {c.id: 0.0 for c in chunks}
    boost_cues(fused, {c.id: c for c in chunks}, None, 2.0, None, 1.0)
    assert fused == {"a": 0.0, "b": 0.0, "c": 0.0, "d": 0.0}
    boost_cues(fused, {c.id: c for c in chunks}, "Ben", 2.0, None, 1.0)
    assert fused == {"a": 0.0, "b": 2.0, "c": 0.0, "d": 2.0}
