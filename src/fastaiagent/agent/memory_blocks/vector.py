"""VectorBlock: recall of past messages by meaning (and keywords).

Each stored message long enough to matter becomes a chunk in a VectorStore,
tagged with the block's namespace. On each turn the query retrieves the most
relevant chunks of that namespace: by default a hybrid of dense similarity
and BM25 keyword scores, which finds both paraphrases and exact names/dates.
Messages still in the conversation window are never recalled (they are in
the prompt already), and with ``dedupe_against_upstream`` nothing an earlier
block injected is repeated.

Embeddings are batched: messages queue up and are embedded together when a
reply ends the turn, at the next recall, or once ``batch_size`` are waiting;
the embedder loads on first use, so a broken embedder or store fails inside the memory's failure
isolation instead of at construction.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields
from datetime import datetime, timezone, tzinfo
from typing import Any

from fastaiagent import trace
from fastaiagent._validate import boolean, number, text
from fastaiagent.agent.deprecation import warn_renamed
from fastaiagent.agent.memory_blocks import framing, message_ids
from fastaiagent.agent.memory_blocks.base import MemoryBlock, SharedMemoryContext, described
from fastaiagent.agent.memory_blocks.recall_options import OPTION_NAMES, REMOVED, RecallOptions
from fastaiagent.agent.memory_blocks.scoring import Scored, ScoringWeights, importance_of, rank
from fastaiagent.agent.memory_blocks.vector_history import (
    ANONYMOUS_USER,
    embed_and_store,
    link_to_previous,
    past_chunks,
    question_answered,
    said_times,
    voice_of,
)
from fastaiagent.agent.memory_blocks.vector_sides import StoreSides
from fastaiagent.errors import InvalidTypeError, InvalidValueError, MemoryIsolationError
from fastaiagent.facts import scoping
from fastaiagent.facts.index.embedding_cache import EMBEDDER_KEY, cached, holds_cache, identity_of
from fastaiagent.facts.index.reembed import stop_background_job
from fastaiagent.facts.scoping import normalize_text
from fastaiagent.facts.validity import Clock, check_clock, read_clock
from fastaiagent.facts.vectors import embedded_text, keyword_text, recorded_at
from fastaiagent.kb.bm25 import BM25Index
from fastaiagent.kb.embedding import Embedder
from fastaiagent.kb.protocols import (
    NAMESPACE_KEY,
    Chunk,
    DimensionMismatchError,
    VectorStore,
)
from fastaiagent.llm.message import ROLES, Message, SystemMessage, storable_text
from fastaiagent.recall.entity_store import add_with_entities
from fastaiagent.recall.pipeline import Settings, explain, find
from fastaiagent.recall.query import read_query
from fastaiagent.recall.weights import Ranking

DEFAULT_NAMESPACE = "default"
HEADER = "Relevant past messages:"
_MAX_PENDING = 1000
MAX_SPEAKERS = 256  # participant names kept for query cues (Message.name values)
# Extension points that were private, old name -> public name. A subclass that
# overrides an old name is still called, and warned when the class is made.
_MAKE_CHUNK = "_make_chunk"
_EMBEDDING_TEXT = "_embedding_text"
_RENAMED_HOOKS = {_MAKE_CHUNK: "make_chunk", _EMBEDDING_TEXT: "embedding_text"}


@dataclass(frozen=True)
class Recalled:
    """One recalled chunk with its final score and the similarity behind it."""

    chunk: Chunk
    score: float
    similarity: float
    reasons: tuple[tuple[str, float], ...] = ()
    """Why it ranked where it did: ``(step, how much it added)`` (:mod:`fastaiagent.recall.ranking`)."""


def _said(role: Any) -> str:
    """``user said`` for a known role; the role is never shown raw (it is store data)."""
    return f"{role} said" if role in ROLES else "earlier message"


# VectorBlock's positional parameters that are recall options, in their order (the
# rest of RecallOptions' fields are keywords); ``dedupe`` is spelled as below.
_POSITIONAL = ("top_k", "min_content_chars", "recency_weight", "importance_weight",
               "recency_half_life_seconds", "dedupe_against_upstream", "retrieval")  # fmt: skip
_BLOCK_NAME = {"dedupe": "dedupe_against_upstream"}  # RecallOptions field -> block attribute
_OPTION_NAME = {block: option for option, block in _BLOCK_NAME.items()}
_FIELDS = tuple(f.name for f in fields(RecallOptions) if f.name not in ("store", "removed"))
_DEFAULT_OPTIONS = RecallOptions()


def _chosen_options(options: RecallOptions | None, keywords: dict[str, Any]) -> RecallOptions:
    """``options``, or the keywords as options; not both (which one was meant?)."""
    unknown = sorted(set(keywords) - set(_OPTION_NAME) - OPTION_NAMES - set(REMOVED))
    if unknown:
        raise InvalidTypeError(
            f"VectorBlock got unexpected keyword(s) {', '.join(unknown)}: the recall "
            f"options are {', '.join(sorted(OPTION_NAMES - {'store', 'dedupe'}))}"
        )
    given = RecallOptions(**{_OPTION_NAME.get(k, k): v for k, v in keywords.items()})
    if options is None:
        return given
    if not isinstance(options, RecallOptions):
        raise InvalidTypeError(f"options must be a RecallOptions, got {type(options).__name__}")
    if given != _DEFAULT_OPTIONS:
        raise InvalidValueError(
            "pass the recall settings as options=RecallOptions(...) or as keywords, not both"
        )
    return options


def _chosen_store(store: VectorStore | None, options: RecallOptions) -> VectorStore:
    """The block's store: ``store``, else ``options.store`` (never "auto": a block has no
    fact store to take an index from)."""
    own = None if isinstance(options.store, str) else options.store
    if store is not None and own is not None and store is not own:
        raise InvalidValueError("pass the store as store= or in options=, not two different ones")
    chosen = store if store is not None else own
    if chosen is None or not callable(getattr(chosen, "search", None)):
        raise InvalidTypeError(
            "VectorBlock needs a VectorStore (e.g. FaissVectorStore(dimension=384))"
        )
    return chosen


class VectorBlock(MemoryBlock):
    """Semantic recall over past messages, from a (possibly shared) VectorStore.

    Recall runs through one pipeline, :mod:`fastaiagent.recall`: the query is
    read once (who it asks about, the time it names, ...), candidates come from
    the store's dense and keyword sides, one function ranks them and says why.
    ``retrieval="hybrid"`` (default) fuses dense and BM25 scores (``dense_weight``
    the dense share); ``"dense"`` is pure vector search; ``"bm25"`` ranks by
    keywords only (messages are still embedded into the store). ``cues`` (default
    on) applies the query's cues and the candidates' surroundings (the steps of
    :mod:`fastaiagent.recall.ranking`; False: fusion alone). ``embedder=None``
    resolves ``"auto"`` at first use. ``context_turns`` previous messages are
    indexed with each message's keywords (0 = none); of an agent's reply, only its
    last question and last sentence, what the user answers. A user's message is
    embedded with the last question of the message before it, the one it answers;
    a turn's recall query is that same text, so the message is embedded once.
    Blocks sharing a store see only their ``namespace``; chunks with no
    namespace tag are visible to the ``"default"`` namespace only.

    Every field of :class:`RecallOptions` is also a keyword here (``dedupe`` is
    ``dedupe_against_upstream``), or give them as one checked value,
    ``options=RecallOptions(...)`` (which may also carry the store), but not
    both ways at once; :attr:`options` reads them back. :attr:`ranking` holds the
    ranking steps' weights (:class:`~fastaiagent.recall.weights.Ranking`), for an
    experiment. To change what is stored or embedded, subclass and override
    :meth:`make_chunk` / :meth:`embedding_text`, the public extension points.
    """

    name = "vector"
    # The old (private) extension points this class or a parent overrides.
    _old_hooks: frozenset[str] = frozenset()
    # The recall options, read back as attributes (set by _apply from RecallOptions).
    top_k: int
    min_content_chars: int
    roles: tuple[str, ...]
    batch_size: int
    context_turns: int
    retrieval: str
    dense_weight: float
    cues: bool
    dedupe_against_upstream: bool
    tz: tzinfo | None
    weights: ScoringWeights
    ranking: Ranking

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        overridden = {old for old in _RENAMED_HOOKS if old in cls.__dict__}
        for old in sorted(overridden):
            warn_renamed(
                f"overriding VectorBlock.{old} ({cls.__qualname__})",
                f"an override of VectorBlock.{_RENAMED_HOOKS[old]}, the public extension point",
            )
        cls._old_hooks = cls._old_hooks | overridden

    def __init__(
        self,
        store: VectorStore | None = None,
        embedder: str | Embedder | None = None,
        top_k: int = 5,
        namespace: str = DEFAULT_NAMESPACE,
        min_content_chars: int = 10,
        recency_weight: float = 0.0,
        importance_weight: float = 0.0,
        recency_half_life_seconds: float = 3600.0,
        dedupe_against_upstream: bool = False,
        retrieval: str = "hybrid",
        *,
        clock: Clock | None = None,
        name: str = "vector",
        options: RecallOptions | None = None,
        **keywords: Any,
    ) -> None:
        """``keywords``: any other field of :class:`RecallOptions` (``dense_weight``,
        ``roles``, ``batch_size``, ``context_turns``, ``cues``, ``tz``)."""
        arguments = locals()
        boolean("dedupe_against_upstream", dedupe_against_upstream)
        positional = {key: arguments[key] for key in _POSITIONAL}
        chosen = _chosen_options(options, {**positional, **keywords})
        self.store: VectorStore = _chosen_store(store, chosen)
        self._apply(chosen)
        self.namespace = text("namespace", namespace)
        check_clock(clock)
        self.clock = clock
        self.name = text("name", name)
        self._set_embedder(embedder)
        self._cached: Any = None
        self._pending: list[Chunk] = []
        self._keywords: BM25Index | None = None
        self._keyword_chunks: dict[str, Chunk] = {}
        self._recent: deque[str] = deque(maxlen=self.context_turns or 1)
        self._last_voice: str | None = None  # who said the last message recorded (vector_history.voice_of)
        self._speakers: set[str] = set()  # names of the messages' authors (Message.name)
        self._next_id = str(uuid.uuid4())  # the id the next stored message will get
        self._lock = threading.RLock()

    def _apply(self, options: RecallOptions) -> None:
        """Keep the checked options as the block's attributes (what recall reads)."""
        for option in _FIELDS:
            setattr(self, _BLOCK_NAME.get(option, option), getattr(options, option))
        self.weights = options.weights
        self.ranking = options.ranking
        self._removed = options.removed

    @property
    def options(self) -> RecallOptions:
        """The block's recall options as they are now (one value, e.g. to build
        another block or a ``Memory(recall=...)`` the same way)."""
        weights = self.weights
        values = {option: getattr(self, _BLOCK_NAME.get(option, option)) for option in _FIELDS}
        values.update(recency_weight=weights.recency_weight, importance_weight=weights.importance_weight,
                      recency_half_life_seconds=weights.recency_half_life_seconds)  # fmt: skip
        return RecallOptions(store=self.store, removed=self._removed, **values)

    def _set_embedder(self, embedder: Any) -> None:
        """Keep ``embedder``: a name resolves on first use, an object is checked now."""
        self._embedder_spec = embedder
        self._embedder: Any = None
        if embedder is not None and not isinstance(embedder, str):
            if not callable(getattr(embedder, "embed", None)):
                raise InvalidTypeError(
                    "embedder must be 'auto', 'local', 'openai[:model]' or an object with "
                    f"embed(texts), got {type(embedder).__name__}"
                )
            self._embedder = embedder
            self._check_dimension(embedder)  # a known mismatch is a configuration error

    def __repr__(self) -> str:
        return described("VectorBlock", store=self.store, namespace=self.namespace,
                         top_k=self.top_k, retrieval=self.retrieval)  # fmt: skip

    # -- the embedder, resolved lazily --------------------------------------

    @property
    def embedder(self) -> Any:
        """The embedder; ``"auto"`` is resolved (and checked) on first access."""
        if self._embedder is None:
            from fastaiagent.kb.embedding import get_embedder

            embedder = get_embedder(self._embedder_spec or "auto")
            self._check_dimension(embedder)
            self._embedder = embedder
        return self._embedder

    def _embed(self, texts: list[str]) -> list[list[float]]:
        # A store-backed index caches vectors by text: a restart, another worker
        # or a repeated text never embeds it again (a query is often the next message).
        with self._lock:
            if self._cached is None:
                self._cached = cached(self.embedder, self.store, self.namespace)
        return list(self._cached.embed(texts))

    def _check_dimension(self, embedder: Any) -> None:
        store_dim = getattr(self.store, "dimension", None)
        dim = getattr(embedder, "dimension", None)
        if store_dim is not None and dim is not None and store_dim != dim:
            raise DimensionMismatchError(
                f"the embedder {embedder!r} makes {dim}-dimensional vectors but the store "
                f"{self.store!r} holds {store_dim}-dimensional ones; use a matching embedder "
                "or a new index"
            )

    # -- writing ---------------------------------------------------------------

    def make_chunk(self, message: Message) -> Chunk | None:
        """The chunk to store for ``message``, or None to skip it: the extension point
        for what is stored.

        Override it to add metadata (e.g. ``metadata["importance"]``, which
        ``importance_weight`` ranks by) or to skip messages; call
        ``super().make_chunk(message)`` and keep ``metadata["namespace"]`` as set
        here. The id is replaced when the chunk is queued: each message gets the id
        its predecessor announced (``next``).
        """
        content = (message.content or "").strip()
        if message.role not in self.roles or len(content) < self.min_content_chars:
            return None
        metadata: dict[str, Any] = {
            NAMESPACE_KEY: self.namespace,
            "role": message.role,
            "created_at": time.time(),
        }
        if message.name:
            metadata["speaker"] = message.name
        if len(content) > scoping.MAX_RECALL_CHARS:  # read now: a setting, like MAX_FACT_CHARS
            metadata["chars"] = len(content)
            content = content[: scoping.MAX_RECALL_CHARS]
        return Chunk(id=str(uuid.uuid4()), text=content, metadata=metadata)

    def _make_chunk(self, message: Message) -> Chunk | None:
        """Deprecated: the old, private name of :meth:`make_chunk`. A subclass that
        overrides it is still called (with a DeprecationWarning when the class is made);
        any other call warns here. Removed in :data:`~fastaiagent.agent.deprecation.REMOVED_IN`."""
        if _MAKE_CHUNK not in self._old_hooks:  # an override's super() call warned at class time
            warn_renamed("VectorBlock._make_chunk", "VectorBlock.make_chunk")
        return self.make_chunk(message)

    def on_message(self, message: Message, *, at: float | None = None) -> None:
        """Queue the message for embedding (one batch per turn).

        ``at`` (epoch seconds) is when the message was said, for a conversation
        recorded after the fact; by default it is now."""
        said_at = number("at", at, allow_none=True)
        if _MAKE_CHUNK in self._old_hooks:
            chunk = self._make_chunk(message)
        else:
            chunk = self.make_chunk(message)
        if chunk is not None and said_at is not None:
            chunk.metadata["created_at"] = said_at
        if chunk is None:
            trace.annotate({"memory.action": "noop"})
            if message.role == "assistant" and self._pending:
                self.flush()  # a short reply ("Noted.") still ends the turn
            return
        chunk.metadata.setdefault(NAMESPACE_KEY, self.namespace)
        with self._lock:
            link_to_previous(chunk, self._recent, self.context_turns, True, self._last_voice)
            self._last_voice = voice_of(chunk)
            self._assign_ids(message, chunk)
            self._pending.append(chunk)
            self._learn_speakers([chunk])
            # A reply ends a turn: embed the turn's messages together then, so
            # a shared store (and an evicted or restarted user) loses nothing.
            due = message.role == "assistant" or len(self._pending) >= self.batch_size
        trace.annotate({"memory.action": "embedded", "memory.detail": 1})
        if due:
            self.flush()

    def _assign_ids(self, message: Message, chunk: Chunk) -> None:
        """Chain the messages: each chunk knows the id its successor will get, so a
        hit can lend its score to the reply after it. A replayed message keeps
        the ids it was given (see :mod:`.message_ids`)."""
        known = message_ids.issued(self.namespace, message)
        if known is not None:
            chunk.id, chunk.metadata["next"] = known
            return
        chunk.id, self._next_id = self._next_id, str(uuid.uuid4())
        chunk.metadata["next"] = self._next_id
        message_ids.remember(self.namespace, message, chunk.id, self._next_id)

    def embedding_text(self, chunk: Chunk) -> str:
        """The text whose vector represents ``chunk``: the extension point for what is
        embedded (the keyword side indexes ``chunk.text`` and its context). By default
        the text, then the question it answers where one was recorded
        (:func:`~fastaiagent.facts.vectors.embedded_text`)."""
        return embedded_text(chunk)

    def _embedding_text(self, chunk: Chunk) -> str:
        """Deprecated: the old, private name of :meth:`embedding_text` (still called
        when a subclass overrides it, which warns when the class is made; any other call
        warns here). Removed in :data:`~fastaiagent.agent.deprecation.REMOVED_IN`."""
        if _EMBEDDING_TEXT not in self._old_hooks:
            warn_renamed("VectorBlock._embedding_text", "VectorBlock.embedding_text")
        return self.embedding_text(chunk)

    def flush(self) -> int:
        """Embed and store every queued message in one batch; returns how many."""
        with self._lock:
            pending, self._pending = self._pending, []
            if not pending:
                return 0
            try:
                self._store_batch(pending)
            except BaseException:
                # Kept for the next attempt, but bounded: a dead embedder must not grow memory.
                self._pending = (pending + self._pending)[-_MAX_PENDING:]
                raise
            return len(pending)

    def store_batch(self, chunks: list[Chunk]) -> None:
        """Embed ``chunks`` (their :meth:`embedding_text`) and store them in one batch."""
        with self._lock:
            self._store_batch(chunks)

    def _store_batch(self, chunks: list[Chunk]) -> None:
        text_of = self._embedding_text if _EMBEDDING_TEXT in self._old_hooks else self.embedding_text
        vectors = self._embed([text_of(c) for c in chunks])
        if len(vectors) != len(chunks):
            raise InvalidValueError(
                f"embedder returned {len(vectors)} vectors for {len(chunks)} texts: "
                "an Embedder must return one vector per text"
            )
        identity = identity_of(self.embedder) if holds_cache(self.store) else None
        for chunk, vector in zip(chunks, vectors, strict=True):
            chunk.vector = list(vector)
            if identity is not None:  # which model made it, for a later model change
                chunk.metadata[EMBEDDER_KEY] = identity
        add_with_entities(self.store, chunks)  # the user's entities found and kept beside them
        if self._keywords is not None:
            for chunk in chunks:
                self._index_keywords(chunk)

    def add_history(
        self, messages: Sequence[Message], *, at: Sequence[float | datetime] | None = None
    ) -> int:
        """Add a past conversation to recall without running the agent (importing a
        chat history): each kept message (``roles``, ``min_content_chars``) is
        stored as if said at ``at[i]`` (epoch seconds or aware datetimes; default
        now), indexed with the messages before it, ``batch_size`` at a time.
        Importing the same messages again stores nothing new (ids derive from
        the content: :mod:`.vector_history`). Returns how many the store did not
        hold yet."""
        now = time.time() if self.clock is None else read_clock(self.clock)
        times = said_times(len(messages), at, now)
        return embed_and_store(self, past_chunks(self, messages, times))

    # -- reading -----------------------------------------------------------------

    def _index_keywords(self, chunk: Chunk) -> None:
        assert self._keywords is not None
        stored = Chunk(chunk.id, chunk.text, None, dict(chunk.metadata))
        self._keyword_chunks[chunk.id] = stored
        # The turn before often holds the words a question uses ("what did
        # you adopt?" -> "a puppy!"): index them with the turn (BM25 alone then
        # finds much more of LoCoMo's evidence), as the stores' postings do.
        self._keywords.add(chunk.id, keyword_text(chunk))

    def keyword_index(self) -> tuple[BM25Index, dict[str, Chunk]]:
        """The in-process keyword index of this namespace and its chunks by id (for a
        store without keyword postings). Built once from the store, then kept up to
        date by flush; a restarted process or a shared store starts complete."""
        with self._lock:
            if self._keywords is None:
                self._keywords = BM25Index()
                untagged = self.reads_untagged
                for chunk in self.store.chunks(self.namespace, include_untagged=untagged):
                    self._index_keywords(chunk)
            return self._keywords, self._keyword_chunks

    def embed(self, texts: list[str]) -> list[list[float]]:
        """``texts`` embedded through the block's cache (the store's, when it keeps one)."""
        return self._embed(texts)

    @property
    def reads_untagged(self) -> bool:
        """Whether chunks with no namespace tag are this block's (the default namespace)."""
        return self.namespace == DEFAULT_NAMESPACE

    def _zone(self) -> tzinfo:
        """Whose days and months a query's dates name: ``tz=``, else the clock's (an
        aware datetime's zone), else UTC."""
        if self.tz is not None:
            return self.tz
        moment = self.clock() if self.clock is not None else None
        if isinstance(moment, datetime) and moment.tzinfo is not None:
            return moment.tzinfo
        return timezone.utc

    def _learn_speakers(self, chunks: Iterable[Chunk]) -> set[str]:
        """Remember the speakers of ``chunks`` (a restarted block learns them from
        what it recalls) and return every known one; at most :data:`MAX_SPEAKERS`."""
        with self._lock:
            for chunk in chunks:
                speaker = chunk.metadata.get("speaker")
                if isinstance(speaker, str) and speaker and len(self._speakers) < MAX_SPEAKERS:
                    self._speakers.add(speaker)
            return set(self._speakers)

    def recall(
        self, query: str, window: Sequence[Message] = (), *, replies_to: str | None = None
    ) -> list[Recalled]:
        """The ``top_k`` best chunks for ``query``, skipping messages in ``window``.

        Over-fetches and widens the search until ``top_k`` chunks outside the
        window are found or the namespace is exhausted. ``replies_to``: the
        question ``query`` answers, embedded with it (a turn passes the one its
        message will be stored with); the keyword side and
        the cues read ``query`` alone.
        """
        if replies_to is not None and not isinstance(replies_to, str):
            raise InvalidTypeError(f"replies_to must be a str or None, got {type(replies_to).__name__}")
        if not isinstance(query, str) or not query.strip():
            return []
        query = storable_text(query)  # a lone surrogate could not be looked up
        replies_to = storable_text(replies_to) if replies_to else None
        self.flush()
        in_window = {
            (m.role, normalize_text(m.content or "")) for m in window if (m.content or "").strip()
        }
        now = time.time() if self.clock is None else read_clock(self.clock)
        with self._lock:
            speakers = set(self._speakers)
        parsed = read_query(query, speakers=speakers, now=now, tz=self._zone(), replies_to=replies_to)
        # Similarity order is the final order unless recency or importance re-rank:
        # then the first top_k outside the window are all that is needed.
        needed = None if self.weights.active else self.top_k
        settings = Settings(self.retrieval, self.dense_weight, self.ranking, self.top_k, self.namespace)
        kept = find(parsed, StoreSides(self), settings, window=in_window, needed=needed,
                    speakers=self._learn_speakers)  # fmt: skip
        # A shared store may hold any created_at or importance: read what is not a
        # number as now and as 1.0.
        scored = [
            Scored(
                item=found,
                similarity=found.score,
                created_at=now if (at := recorded_at(found.chunk)) is None else at,
                importance=importance_of(found.chunk.metadata),
            )
            for found in kept
        ]
        ranked = rank(scored, self.weights, now=now)[: self.top_k]
        return [Recalled(s.item.chunk, s.score, s.similarity, s.item.reasons) for s in ranked]

    def render_with_context(self, query: str, shared: SharedMemoryContext) -> list[Message]:
        recalled = self.recall(query, getattr(shared, "window", ()), replies_to=self._question_answered())
        deduped = 0
        if self.dedupe_against_upstream and recalled:
            upstream = normalize_text(shared.upstream_text())
            kept = [r for r in recalled if normalize_text(r.chunk.text) not in upstream]
            deduped = len(recalled) - len(kept)
            recalled = kept
        attributes: dict[str, Any] = {
            "memory.scores": [round(r.score, 4) for r in recalled],
            "memory.recall.reasons": [explain(r.reasons) for r in recalled],
        }
        if self.dedupe_against_upstream:
            attributes["memory.deduped_count"] = deduped
        trace.annotate(attributes)
        if not recalled:
            return []
        return [SystemMessage(self.format(recalled))]

    def _question_answered(self) -> str | None:
        """The question the turn's message answers, the one :func:`link_to_previous`
        will store it with: the turn embeds the message once,
        as its query and as what is stored."""
        with self._lock:  # the turn's message: the user's, without a name
            return question_answered(self._recent, self._last_voice, ANONYMOUS_USER)

    def render(self, query: str) -> list[Message]:
        return self.render_with_context(query, SharedMemoryContext())

    def format(self, recalled: Sequence[Recalled]) -> str:
        """The SystemMessage text for the recalled chunks: each one quoted on one
        line with who said it, ``- "I adopted a puppy" (user said)``."""
        texts = [item.chunk.text for item in recalled]
        sources = [_said(item.chunk.metadata.get("role")) for item in recalled]
        return framing.notes_section(HEADER, texts, sources, framing.MESSAGES_PREAMBLE)

    # -- lifecycle -------------------------------------------------------------

    def clear(self) -> None:
        """Delete this namespace's chunks from the store (untagged chunks stay)."""
        with self._lock:
            self._pending.clear()
            self._recent.clear()
            self._last_voice = None
            self._speakers.clear()
            self._keywords = None
            self._keyword_chunks.clear()
            stop_background_job(self.store, self.namespace)  # it must not write back
            self.store.delete_namespace(self.namespace)

    def dump_state(self) -> dict[str, Any]:
        """Embed anything queued (the chunks themselves live in the store) and keep
        the recent turns that give the next message its keyword context."""
        self.flush()
        with self._lock:
            recent = list(self._recent)
            voice = self._last_voice
            speakers = sorted(self._speakers)
            following = self._next_id
        return {
            "version": 1,
            "namespace": self.namespace,
            "recent": recent,
            "voice": voice,
            "speakers": speakers,
            "next": following,
        }

    def load_state(self, data: Any) -> None:
        """Restore :meth:`dump_state` output saved for the same namespace."""
        if data is None:
            return
        if not isinstance(data, dict):
            raise InvalidValueError("vector block state is corrupt: not an object")
        recent = data.get("recent", [])
        if not isinstance(recent, list) or not all(isinstance(t, str) for t in recent):
            raise InvalidValueError("vector block state is corrupt: recent is not a list of str")
        speakers = data.get("speakers", [])
        if not isinstance(speakers, list) or not all(isinstance(n, str) for n in speakers):
            raise InvalidValueError("vector block state is corrupt: speakers is not a list of str")
        voice = data.get("voice")  # absent in states saved before it was kept: unknown
        if voice is not None and not isinstance(voice, str):
            raise InvalidValueError("vector block state is corrupt: voice is not a str")
        if data.get("namespace") == self.namespace:
            with self._lock:
                self._recent.clear()
                self._recent.extend(recent)
                self._last_voice = voice
                self._speakers.update(speakers[: max(0, MAX_SPEAKERS - len(self._speakers))])
                # The stored "next" is not taken over: every worker loading this
                # state would give it to its next message (see .message_ids).

    def isolated_copy(self) -> MemoryBlock:
        raise MemoryIsolationError(
            "VectorBlock writes to an external vector store and cannot be copied in isolation; "
            "build a new VectorBlock with its own store"
        )
