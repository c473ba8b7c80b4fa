"""A small self-hosted plane: serves curated facts from any FactStore.

``fastaiagent plane serve --location URL --api-key KEY`` answers
``GET /public/v1/memory/facts`` the way :class:`PlaneFactBlock` reads it:

    ?agent_id=ID [&category=C] [&max=N] [&query=Q] [&score_threshold=S]
    -> {"agent_id": ID, "facts": [{"id", "fact", "category", "importance", "score"}]}

Facts are the store's active agent-scope facts for ``agent_id`` (importance is
the fact's confidence, category is ``metadata["category"]``). Without a query
they come most important first (newest first among equals); with one, a
pluggable ranker scores them against it (the ``score`` that ``score_threshold``
cuts) and the recall pipeline orders them (:func:`rank_facts`). The API key is required, as
``Authorization: Bearer KEY`` or ``X-API-Key: KEY`` (401 when missing, 403
when wrong). A store that cannot be read answers 503 with a one-line reason
(``{"detail": ...}``), which readers treat as an outage; ``GET /healthz``
reads the store too and answers 503 ``{"ok": false, "reason": ...}`` then.
"""

from __future__ import annotations

import hmac
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from fastaiagent import _serving
from fastaiagent import _validate as check
from fastaiagent._format import MAX_REASON, one_line
from fastaiagent._optional import require
from fastaiagent.errors import (
    InvalidTypeError,
    InvalidValueError,
    StoreConfigError,
    StoreUnavailableError,
    UsageError,
    is_configuration_error,
)
from fastaiagent.facts.fact import Fact
from fastaiagent.facts.factory import make_fact_store
from fastaiagent.facts.scoping import WILDCARD
from fastaiagent.facts.store import FactStore
from fastaiagent.kb.similarity import cosines
from fastaiagent.plane.protocol import FACTS_PATH, MAX_FACTS_LIMIT
from fastaiagent.recall.given import Given, rank_given
from fastaiagent.recall.query import RecallQuery, read_query
from fastaiagent.recall.weights import FETCH_FACTOR

logger = logging.getLogger("fastaiagent.plane.server")

DEFAULT_CANDIDATES = 1000

# (query, fact texts) -> one similarity in [0, 1] per text
Ranker = Callable[[str, Sequence[str]], list[float]]


def keyword_ranker(query: str, texts: Sequence[str]) -> list[float]:
    """Share of the question's content words each text contains (0..1).

    Not BM25: a Ranker's score must be a similarity in [0, 1] that
    ``score_threshold`` can cut, whatever the other facts are, and a BM25 score
    is unbounded and depends on the whole candidate set. (The order the plane
    serves comes from the recall pipeline, which does use BM25: see
    :func:`rank_facts`.)
    """
    return _word_shares(Given(texts), read_query(query, now=time.time()))


def _word_shares(given: Given, read: RecallQuery) -> list[float]:
    """Each text of ``given``: the share of ``read``'s content words it holds."""
    share = given.share(read)
    return [share.get(str(n), 0.0) for n in range(len(given.texts))]


class EmbeddingRanker:
    """Cosine similarity of embeddings, clipped to [0, 1].

    ``embedder`` is anything with ``embed(list[str]) -> list[list[float]]``
    (e.g. :func:`fastaiagent.kb.embedding.get_embedder`). Fact embeddings are
    cached by text, so a steady set of facts is embedded once.
    """

    def __init__(self, embedder: Any, cache_size: int = 10_000) -> None:
        if not hasattr(embedder, "embed"):
            raise InvalidTypeError("embedder must have an embed(texts) method")
        self.embedder = embedder
        self.cache_size = cache_size
        self._cache: OrderedDict[str, list[float]] = OrderedDict()
        self._lock = threading.Lock()

    def _vectors(self, texts: Sequence[str]) -> list[list[float]]:
        with self._lock:
            found = {t: self._cache[t] for t in texts if t in self._cache}
        missing = [t for t in dict.fromkeys(texts) if t not in found]
        if missing:
            found.update(zip(missing, (list(v) for v in self.embedder.embed(missing)), strict=True))
            with self._lock:
                for text in missing:
                    self._cache[text] = found[text]
                while len(self._cache) > self.cache_size:
                    self._cache.popitem(last=False)
        return [found[t] for t in texts]

    def __call__(self, query: str, texts: Sequence[str]) -> list[float]:
        if not texts:
            return []
        question = self.embedder.embed([query])[0]
        return [max(0.0, c) for c in cosines(question, self._vectors(texts))]


def semantic_ranker() -> Ranker:
    """An :class:`EmbeddingRanker` over the library's default embedder."""
    from fastaiagent.kb.embedding import get_embedder

    embedder = get_embedder("auto")
    embedder.embed(["warm up"])  # load the model now, not inside the first request
    return EmbeddingRanker(embedder)


RANKERS: dict[str, Callable[[], Ranker | None]] = {
    "keyword": lambda: keyword_ranker,
    "semantic": semantic_ranker,
    "none": lambda: None,
}


@dataclass(frozen=True)
class ServedFact:
    """One fact as the plane serves it."""

    id: int | None
    fact: str
    category: str | None
    importance: float
    score: float | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "fact": self.fact,
            "category": self.category,
            "importance": self.importance,
            "score": self.score,
        }


def _category(fact: Fact) -> str | None:
    value = fact.metadata.get("category")
    return value if isinstance(value, str) else None


@dataclass(frozen=True)
class FactRequest:
    """What one request asks the plane for, as :class:`PlaneFactBlock` sends it:
    ``category`` (only that category), ``max_facts`` (1..200), ``query`` (rank by
    relevance to it) and ``score_threshold`` (the least relevance kept, 0..1)."""

    category: str | None = None
    max_facts: int = 50
    query: str | None = None
    score_threshold: float = 0.0

    def __post_init__(self) -> None:
        if self.category is not None:
            check.text("category", self.category, allow_empty=True)
        check.integer("max_facts", self.max_facts, minimum=1, maximum=MAX_FACTS_LIMIT)
        if self.query is not None:
            check.text("query", self.query, allow_empty=True)
        check.fraction("score_threshold", self.score_threshold)


def select_facts(
    store: FactStore,
    agent_id: str,
    request: FactRequest | None = None,
    *,
    project_id: str = "",
    ranker: Ranker | None = keyword_ranker,
    candidates: int = DEFAULT_CANDIDATES,
) -> list[ServedFact]:
    """The facts the plane serves for one request (see the module docstring)."""
    if not agent_id or agent_id == WILDCARD:
        raise InvalidValueError("agent_id must name one agent")
    check.identifier("agent_id", agent_id)
    check.identifier("project_id", project_id, allow_empty=True)
    facts = store.list_active("agent", agent_id, project_id, limit=candidates)
    return rank_facts(facts, request or FactRequest(), ranker)


def rank_facts(
    facts: Sequence[Fact], request: FactRequest, ranker: Ranker | None = keyword_ranker
) -> list[ServedFact]:
    """Filter, score and order facts already read from the store (no I/O but the ranker's).

    With a query, the facts come in the order of the recall pipeline
    (:func:`fastaiagent.recall.given.rank_given`: BM25 over the facts, the ranker's
    similarities as the side by meaning unless it is :func:`keyword_ranker`, and
    the cues of the query, e.g. "now" for the newest of two facts); each side puts
    its ``max_facts`` x FETCH_FACTOR best forward, the others follow by score, then
    importance. Each fact's ``score`` stays the ranker's similarity, which
    ``score_threshold`` cuts."""
    if request.category is not None:
        facts = [f for f in facts if _category(f) == request.category]
    facts = sorted(facts, key=lambda f: -float(f.confidence))  # stable: newest first among equals
    query = request.query
    if not (query and ranker is not None and facts):
        return [_served(f, None) for f in facts[: request.max_facts]]
    read = read_query(query, now=time.time())
    given = Given([f.fact for f in facts], [f.created_at for f in facts])
    dense: list[tuple[str, float]] | None = None
    if ranker is keyword_ranker:  # the keyword side is the pipeline's own: read once
        scores = _word_shares(given, read)
    else:
        scores = [float(s) for s in ranker(query, [f.fact for f in facts])]
        if len(scores) != len(facts):
            raise InvalidValueError(f"the ranker scored {len(scores)} of {len(facts)} facts")
        dense = [(str(n), s) for n, s in enumerate(scores)]
    # The facts no side ranks come in the plane's own order: by score, then importance.
    rest = [str(n) for n in sorted(range(len(facts)), key=scores.__getitem__, reverse=True)]
    served = []
    for found in rank_given(read, given, dense, fetch=request.max_facts * FETCH_FACTOR, rest=rest):
        n = int(found.chunk.id)
        if scores[n] >= request.score_threshold:
            served.append(_served(facts[n], scores[n]))
            if len(served) == request.max_facts:
                break
    return served


def _served(fact: Fact, score: float | None) -> ServedFact:
    return ServedFact(fact.id, fact.fact, _category(fact), float(fact.confidence), score)


def check_store(store: FactStore) -> None:
    """Read ``store`` once (a fact by id): StoreUnavailableError, caused by the driver's error,
    when it cannot be read (StoreConfigError when it is configured wrong)."""
    try:
        store.get(1)
    except Exception as exc:  # any failure of the store is the answer here
        kind = StoreConfigError if is_configuration_error(exc) else StoreUnavailableError
        raise kind(f"the fact store failed: {one_line(exc, 2 * MAX_REASON)}") from exc


def create_plane_app(
    location: Any,
    api_key: str | Sequence[str],
    *,
    project_id: str = "",
    ranker: Ranker | None = keyword_ranker,
    candidates: int = DEFAULT_CANDIDATES,
) -> Any:
    """A FastAPI app serving ``location``'s curated facts (a store or a location string)."""
    fastapi = require("fastapi", "ui")
    keys = [api_key] if isinstance(api_key, str) else list(api_key)
    if not keys or not all(isinstance(k, str) and k.strip() for k in keys):
        raise InvalidValueError("the plane needs at least one non-empty API key")
    check.identifier("project_id", project_id, allow_empty=True)
    store = make_fact_store(location)
    app = fastapi.FastAPI(title="fastaiagent plane", docs_url=None, redoc_url=None)
    _add_health(app, store)
    _add_unexpected_errors(app)
    _add_facts_route(app, store, keys, project_id=project_id, ranker=ranker, candidates=candidates)
    app.state.store = store
    return app


def _add_health(app: Any, store: FactStore) -> None:
    from starlette.responses import JSONResponse

    @app.get("/healthz")
    def healthz() -> Any:
        try:
            check_store(store)
        except (StoreUnavailableError, StoreConfigError) as exc:
            return JSONResponse({"ok": False, "reason": str(exc)}, status_code=503)
        return {"ok": True}


def _add_unexpected_errors(app: Any) -> None:
    """A bug answers 500 with one fixed line of JSON; the error and its traceback go to
    the server log only (an exception's text may hold any data it was handed)."""
    from starlette.requests import Request
    from starlette.responses import JSONResponse

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> Any:
        logger.error("plane: %s failed", request.url.path, exc_info=exc)
        return JSONResponse({"detail": "internal error (logged on the plane server)"}, status_code=500)


def _check_key(keys: list[str], authorization: str | None, x_api_key: str | None) -> None:
    from fastapi import HTTPException

    given = x_api_key
    if authorization and authorization.lower().startswith("bearer "):
        given = authorization[7:].strip()
    if not given:
        raise HTTPException(401, "missing API key", headers={"WWW-Authenticate": "Bearer"})
    if not any(hmac.compare_digest(given.encode(), k.encode()) for k in keys):
        raise HTTPException(403, "this API key is not allowed to read these facts")


def _add_facts_route(
    app: Any, store: FactStore, keys: list[str], *, project_id: str, ranker: Ranker | None, candidates: int
) -> None:
    from fastapi import Header, HTTPException, Query

    @app.get(FACTS_PATH)
    def facts(
        agent_id: str = Query(..., min_length=1, max_length=500),
        category: str | None = Query(None, min_length=1),
        max: int = Query(50, ge=1, le=MAX_FACTS_LIMIT),
        query: str | None = Query(None, max_length=10_000),
        score_threshold: float = Query(0.0, ge=0.0, le=1.0),
        authorization: str | None = Header(None),
        x_api_key: str | None = Header(None),
    ) -> dict[str, Any]:
        _check_key(keys, authorization, x_api_key)
        if agent_id == WILDCARD:
            raise HTTPException(400, 'agent_id must name one agent ("*" is not allowed)')
        problem = check.id_problem(agent_id)
        if problem is not None:  # a bad id is the reader's mistake, not an outage (503)
            raise HTTPException(400, f"agent_id {problem}")
        try:
            found = store.list_active("agent", agent_id, project_id, limit=candidates)
        except Exception as exc:  # an outage or a damaged store: readers back off on 503
            logger.warning("plane: the fact store failed: %s", exc)
            raise HTTPException(503, f"the fact store failed: {one_line(exc, 2 * MAX_REASON)}") from exc
        request = FactRequest(category, max, query, score_threshold)
        served = rank_facts(found, request, ranker)
        return {"agent_id": agent_id, "facts": [s.to_dict() for s in served]}


class RunningPlane:
    """A plane served by uvicorn in a background thread (tests, examples)."""

    def __init__(self, app: Any, host: str = "127.0.0.1", port: int = 0) -> None:
        uvicorn = require("uvicorn", "ui")
        self._socket = _serving.listen(host, port)
        self.host, self.port = host, self._socket.getsockname()[1]
        config = uvicorn.Config(app, log_level="warning", lifespan="off", access_log=False)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._socket]}, daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self._socket.close()
                raise UsageError("the plane server did not start (see the log above)")
            time.sleep(0.01)

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def stop(self) -> None:
        """Stop serving and wait for the thread to end."""
        self._server.should_exit = True
        self._thread.join(timeout=10)
        self._socket.close()

    def __enter__(self) -> RunningPlane:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_plane(
    location: Any,
    api_key: str | Sequence[str],
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    **options: Any,
) -> RunningPlane:
    """Serve ``location`` in a background thread; ``port=0`` picks a free port."""
    return RunningPlane(create_plane_app(location, api_key, **options), host, port)
