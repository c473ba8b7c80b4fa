"""MemoryTools: what the MCP tools do, with no MCP in it.

Each method takes the user the *connection* acts for (fixed by the server's
configuration or by an authenticated token, never by a tool argument) and
calls the matching :class:`~fastaiagent.agent.memory.Memory` verb, so the
scoping and the guard rails are the verbs' own. What is added here is the
policy of a shared server: the user tier needs a connection user, the global
tier needs the server's ``agent_id`` and, for writes, ``allow_global_writes``
(global facts are read by every user of the agent), and forgetting every fact
of a tier has to be asked for (``everything=True``).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from fastaiagent._format import one_line
from fastaiagent._validate import boolean, optional_id
from fastaiagent.agent.deprecation import REMOVED_IN, deprecated_alias, warn_renamed
from fastaiagent.agent.memory import Memory
from fastaiagent.errors import (
    FastAIAgentError,
    InvalidValueError,
    NotFoundError,
    PolicyError,
    StoreUnavailableError,
)
from fastaiagent.facts.fact import Fact

Tier = Literal["user", "global"]
DEFAULT_RETRIEVE_LIMIT = 10
MAX_RETRIEVE_LIMIT = 100

# The tools the server serves, in the order it lists them; the server and
# ``fastaiagent mcp --help`` both read these, so they cannot disagree.
TOOLS = ("remember", "retrieve", "update", "forget")
# Old tool name -> the tool it still calls (served and listed, marked deprecated).
DEPRECATED_TOOLS = {"recall": "retrieve"}


def served_tools() -> str:
    """Every tool served, in words: the current ones, then each deprecated name with
    its replacement and the release that removes it."""
    old = "; ".join(
        f"{name} (deprecated: use {new}; removed in fastaiagent {REMOVED_IN})"
        for name, new in DEPRECATED_TOOLS.items()
    )
    return ", ".join(TOOLS) + (f"; and {old}" if old else "")


class FactOut(BaseModel):
    """One active fact as a tool returns it."""

    id: int = Field(description="The fact's id (pass it to update as old).")
    text: str
    tier: Tier
    confidence: float
    created_at: float = Field(description="UNIX seconds.")
    metadata: dict[str, Any] = Field(default_factory=dict)


class Remembered(BaseModel):
    """The result of ``remember``."""

    id: int = Field(description="The fact's id; the same text remembered again keeps its id.")
    tier: Tier


class Retrieved(BaseModel):
    """The result of ``retrieve``: newest first, or closest first with a query."""

    tier: Tier
    query: str | None
    facts: list[FactOut]


# The names from before the tool was named for what it does (it reads facts:
# retrieve); each still works, with a DeprecationWarning (see __getattr__).
_RENAMED = {
    "Recalled": "Retrieved",
    "DEFAULT_RECALL_LIMIT": "DEFAULT_RETRIEVE_LIMIT",
    "MAX_RECALL_LIMIT": "MAX_RETRIEVE_LIMIT",
}


class Updated(BaseModel):
    """The result of ``update``."""

    id: int = Field(description="The new fact's id (the old one is kept as history).")
    tier: Tier


class Forgotten(BaseModel):
    """The result of ``forget``."""

    deleted: int = Field(description="How many facts were deleted, history included.")
    tier: Tier


class MemoryTools:
    """The remember / retrieve / update / forget tools over one :class:`Memory`.

    ``user_id`` is the user of a connection that carries no token (stdio, or
    HTTP on loopback without tokens); ``None`` leaves such connections without
    a user tier. ``allow_global_writes`` lets clients write and forget the
    agent's global facts, which every user reads.
    """

    def __init__(
        self,
        memory: Memory,
        *,
        user_id: str | None = None,
        allow_global_writes: bool = False,
    ) -> None:
        if not isinstance(memory, Memory):
            raise InvalidValueError(
                f"memory must be a fastaiagent Memory, got {type(memory).__name__}"
            )
        self.memory = memory
        self.user_id = optional_id("user_id", user_id)
        self.allow_global_writes = boolean("allow_global_writes", allow_global_writes)

    def check_store(self) -> None:
        """Read the fact store once (a fact by id), so a server whose store cannot be
        used fails when it starts instead of at every call. The store's own error
        (a :class:`~fastaiagent.errors.FastAIAgentError` naming the file or URL)
        is raised as it is; any other becomes
        :class:`~fastaiagent.errors.StoreUnavailableError` naming the store."""
        store = self.memory.location
        try:
            store.get(1)
        except FastAIAgentError:
            raise
        except Exception as exc:  # a custom store's own failure
            raise StoreUnavailableError(
                f"the fact store {store!r} cannot be read: {one_line(exc)}"
            ) from exc

    def _subject(self, verb: str, tier: str, user: str | None, *, write: bool) -> str:
        """The id a tier is filed under for this connection."""
        if tier == "user":
            if not user:
                raise PolicyError(
                    f"{verb}: this connection acts for no user, so it has no user tier; start the "
                    "server with --user, or connect over HTTP with a token mapped to a user"
                )
            return user
        agent_id = self.memory.config.agent_id
        if not agent_id:
            raise PolicyError(f"{verb}: the global tier needs the server started with --agent-id")
        if write and not self.allow_global_writes:
            raise PolicyError(
                f"{verb}: global facts are read-only here because every user of the agent reads "
                "them; start the server with --global-writes to allow it"
            )
        return agent_id

    def remember(
        self, user: str | None, text: str, tier: str = "user", confidence: float = 1.0
    ) -> Remembered:
        """Store ``text`` as a durable fact of ``tier``."""
        subject = self._subject("remember", tier, user, write=True)
        fact_id = self.memory.persist(text, tier, subject, confidence=confidence)
        return Remembered(id=fact_id, tier=tier)  # type: ignore[arg-type]

    def retrieve(
        self,
        user: str | None,
        query: str | None = None,
        tier: str = "user",
        limit: int = DEFAULT_RETRIEVE_LIMIT,
    ) -> Retrieved:
        """Active facts of ``tier``: newest first, or the closest to ``query`` by meaning
        (:meth:`Memory.retrieve <fastaiagent.agent.memory.Memory.retrieve>`)."""
        subject = self._subject("retrieve", tier, user, write=False)
        if query is not None and not query.strip():
            query = None  # an empty query asks for the list
        if query is not None and self.memory.config.semantic is None:
            raise PolicyError(
                "retrieving by meaning is off on this server (started with --no-semantic); "
                "leave out query to list the newest facts"
            )
        facts = self.memory.retrieve(query, tier=tier, id=subject, limit=limit)
        return Retrieved(tier=tier, query=query, facts=[_out(fact, tier) for fact in facts])  # type: ignore[arg-type]

    recall = deprecated_alias(retrieve, "MemoryTools.recall", "MemoryTools.retrieve")

    def update(
        self,
        user: str | None,
        new: str,
        old: int | str,
        tier: str = "user",
        confidence: float = 1.0,
    ) -> Updated:
        """Replace ``old`` (an active fact's id or text) with ``new``; the old fact stays as history."""
        subject = self._subject("update", tier, user, write=True)
        if isinstance(old, int) and not isinstance(old, bool):
            self._check_own(old, tier, subject)
        new_id = self.memory.update(new, old=old, tier=tier, id=subject, confidence=confidence)
        return Updated(id=new_id, tier=tier)  # type: ignore[arg-type]

    def _check_own(self, fact_id: int, tier: str, subject: str) -> None:
        """Refuse an id outside this connection's tier, saying nothing of whose it is."""
        fact = self.memory.location.get(fact_id) if fact_id > 0 else None
        scope = "user" if tier == "user" else "agent"
        mine = fact is not None and (fact.scope, fact.scope_id, fact.project_id) == (
            scope,
            subject,
            self.memory.config.project_id,
        )
        if not mine or fact is None or not fact.active:
            raise NotFoundError(
                f"no active {tier} fact #{fact_id} for this connection: pass the id or text of "
                "one of its facts (retrieve lists them)"
            )

    def forget(
        self,
        user: str | None,
        tier: str = "user",
        fact: str | None = None,
        everything: bool = False,
    ) -> Forgotten:
        """Delete one fact (by its text) or, with ``everything``, every fact of the tier."""
        subject = self._subject("forget", tier, user, write=True)
        if fact is None and not everything:
            raise InvalidValueError(
                "forget needs fact= (the text of the fact to delete) or everything=true to delete "
                f"every {tier} fact of this connection"
            )
        if fact is not None and everything:
            raise InvalidValueError("pass fact= or everything=true, not both")
        deleted = self.memory.forget(tier, subject, fact=fact)
        return Forgotten(deleted=deleted, tier=tier)  # type: ignore[arg-type]


def _out(fact: Fact, tier: str) -> FactOut:
    return FactOut(
        id=int(fact.id or 0),
        text=fact.fact,
        tier=tier,  # type: ignore[arg-type]
        confidence=fact.confidence,
        created_at=fact.created_at,
        metadata=dict(fact.metadata),
    )


def __getattr__(name: str) -> Any:
    # A deprecated module name: the new one's value, and a warning pointing at the import.
    new = _RENAMED.get(name)
    if new is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warn_renamed(f"{__name__}.{name}", f"{__name__}.{new}")
    return globals()[new]
