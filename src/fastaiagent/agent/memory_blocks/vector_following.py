"""The messages said right after a recall's best hits, ranked just below them.

A reply often answers the message before it without sharing a word with the
question ("Who's your favourite team?" / "The Wolves are solid"), so neither
search finds it. Each chunk knows the id of the message stored after it
(``metadata["next"]``); following that chain from the best hits reaches the
reply for one store read per step.

Chosen on LoCoMo conversations 0-2 and confirmed on 3-4 (docs/semantic.md):
the 3 best hits, 2 messages each, at 2.0 and 2.5 below the hit's fused score
(in standard deviations), R@5 / R@10 0.743 / 0.826 -> 0.754 / 0.834 on the
tuned half and 0.697 / 0.754 -> 0.705 / 0.760 on the confirmed one.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence

from fastaiagent.facts.vectors import recorded_at
from fastaiagent.kb.protocols import NAMESPACE_KEY, Chunk

FOLLOWED_HITS = 3  # the hits whose following messages are drawn in
MAX_FOLLOW_TURNS = 3  # each turn is one store read
# How far below its hit the n-th message after it ranks (index n - 1).
FOLLOW_DROPS = (2.0, 2.5, 3.0)
# A message said over an hour after the hit belongs to a later conversation.
SAME_CONVERSATION_SECONDS = 3600.0

Fetch = Callable[[Sequence[str]], list[Chunk]]


def draw_following(
    fused: dict[str, float],
    chunks: dict[str, Chunk],
    fetch: Fetch,
    *,
    namespace: str,
    turns: int,
) -> None:
    """Give the ``turns`` messages after each of the best hits of ``fused`` the
    hit's score minus :data:`FOLLOW_DROPS` (when that beats their own score).

    ``chunks`` holds every candidate of ``fused`` and gains the messages read
    with ``fetch``; only messages of ``namespace`` said within
    :data:`SAME_CONVERSATION_SECONDS` of the hit are drawn in."""
    best = heapq.nlargest(FOLLOWED_HITS, fused, key=fused.__getitem__)
    chain = {hit: (fused[hit], recorded_at(chunks[hit])) for hit in best}
    for drop in FOLLOW_DROPS[:turns]:
        following: dict[str, tuple[float, float | None]] = {}
        for chunk_id, origin in chain.items():
            after = chunks[chunk_id].metadata.get("next")
            if isinstance(after, str) and origin[0] > following.get(after, (float("-inf"),))[0]:
                following[after] = origin
        missing = [chunk_id for chunk_id in following if chunk_id not in chunks]
        if missing:  # a read by id is not scoped: keep this namespace's messages only
            chunks.update(
                (c.id, c) for c in fetch(missing) if c.metadata.get(NAMESPACE_KEY) == namespace
            )
        chain = {}
        for chunk_id, (score, hit_at) in following.items():
            chunk = chunks.get(chunk_id)
            at = recorded_at(chunk) if chunk is not None else None
            if at is None or hit_at is None or abs(at - hit_at) > SAME_CONVERSATION_SECONDS:
                continue
            fused[chunk_id] = max(fused.get(chunk_id, score - drop), score - drop)
            chain[chunk_id] = (score, hit_at)
