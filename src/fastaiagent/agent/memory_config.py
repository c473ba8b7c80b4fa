"""MemoryConfig: every keyword of :class:`~fastaiagent.agent.memory.Memory`, checked once.

Construction is where bad values fail (before any run), so the
rest of Memory can trust the values it reads here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any, Literal

from fastaiagent import _validate as check
from fastaiagent.agent.deprecation import UNSET, renamed_keyword
from fastaiagent.agent.memory_blocks.fact_policy import FactPolicy, check_policy
from fastaiagent.agent.memory_blocks.recall_options import AUTO, RecallOptions
from fastaiagent.errors import InvalidTypeError, InvalidValueError
from fastaiagent.facts.scoping import WILDCARD
from fastaiagent.facts.validity import Clock, check_clock
from fastaiagent.facts.windows import WindowStore
from fastaiagent.llm.base import BaseLLM
from fastaiagent.plane.client import PlaneConnection, check_connection

DEFAULT_WINDOW = 20
DEFAULT_MAX_USERS = 10_000
DEFAULT_MAX_LEARNED = 200
DEFAULT_MAX_FACTS = 50
DEFAULT_WINDOW_TTL = 7 * 24 * 3600.0  # a week idle and a shared window is gone (facts stay)
EMBEDDER_NAMES = ("auto", "local", "openai")
# Memory keywords renamed so that one idea has one word (docs/architecture.md),
# old -> new. The old spelling still works, with a DeprecationWarning.
RENAMED_KEYWORDS = {"windows": "window_store", "window_ttl_seconds": "window_ttl"}

UserResolver = Callable[[Any], "str | None"]

if TYPE_CHECKING:
    from fastaiagent.kb.embedding import Embedder
    from fastaiagent.kb.protocols import VectorStore


@dataclass(frozen=True)
class MemoryConfig:
    """The checked keywords of a Memory (see its docstring for what each means)."""

    user_id: str | UserResolver | None = None
    agent_id: str | None = None
    project_id: str = ""
    window: int = DEFAULT_WINDOW
    learn: BaseLLM | None = None
    max_learned_facts: int | None = DEFAULT_MAX_LEARNED
    summarize: BaseLLM | None = None
    recall: Literal["auto"] | VectorStore | RecallOptions | None = None
    dedupe: bool = False
    semantic: Literal["auto"] | VectorStore | None = None
    embedder: str | Embedder | None = None
    max_users: int | None = DEFAULT_MAX_USERS
    plane_agent_id: str | None = None
    plane: PlaneConnection | None = None  # None: the connect() default, read at each turn
    max_facts: int = DEFAULT_MAX_FACTS
    window_store: str | WindowStore | None = None  # None: windows stay in process
    window_ttl: float | None = DEFAULT_WINDOW_TTL  # seconds (a timedelta is turned into them)
    learn_in_background: bool = True
    fact_policy: FactPolicy | None = None  # None = default_fact_policy (see fact_policy.py)
    fact_ttl: float | None = None  # seconds a learned fact holds (None: until replaced); or a timedelta
    clock: Clock | None = None  # () -> UNIX seconds or datetime; None = the system clock
    max_memory_tokens: int | None = None  # None = no budget (see memory_budget.py)
    # recall= (and dedupe=) as one RecallOptions; None when recall is off.
    recall_options: RecallOptions | None = field(init=False, default=None, compare=False)

    def __post_init__(self) -> None:
        if self.user_id is not None and not callable(self.user_id):
            check.optional_id("user_id", self.user_id)
        check.optional_id("agent_id", self.agent_id)
        check.optional_id("plane_agent_id", self.plane_agent_id)
        if check_connection(self.plane) is not None and not self.plane_agent_id:
            raise InvalidValueError(
                "plane= is the connection the plane's facts are read from: set plane_agent_id= "
                "(the agent's id on that plane) too"
            )
        if self.project_id == WILDCARD:
            raise InvalidValueError('project_id cannot be "*": a tenant is one exact id')
        check.identifier("project_id", self.project_id, allow_empty=True)
        check.positive_int("window", self.window)
        check.positive_int("max_learned_facts", self.max_learned_facts, allow_none=True)
        check.positive_int("max_users", self.max_users, allow_none=True)
        check.positive_int("max_facts", self.max_facts)
        check.positive_int("max_memory_tokens", self.max_memory_tokens, allow_none=True)
        check.boolean("dedupe", self.dedupe)
        check.boolean("learn_in_background", self.learn_in_background)
        check_policy(self.fact_policy)
        for name in ("window_ttl", "fact_ttl"):  # seconds or a timedelta, kept as seconds
            object.__setattr__(self, name, check.duration(name, getattr(self, name), allow_none=True))
        check_clock(self.clock)
        _check_embedder(self.embedder)
        _check_llm("learn", self.learn)
        _check_llm("summarize", self.summarize)
        object.__setattr__(self, "recall_options", _recall_options(self.recall, self.dedupe))
        _check_vector_option("semantic", self.semantic)
        if self.learn is not None and self.user_id is None:
            raise InvalidValueError(
                "learn= stores facts per user: set user_id= (a string or a resolver)"
            )

    @classmethod
    def from_keywords(cls, keywords: dict[str, Any]) -> MemoryConfig:
        """The config of ``Memory(**keywords)``. A keyword passed by its deprecated
        spelling (:data:`RENAMED_KEYWORDS`; :data:`~fastaiagent.agent.deprecation.UNSET`
        when not passed) still works, with a DeprecationWarning."""
        for old, new in RENAMED_KEYWORDS.items():
            value = keywords.get(old, UNSET)
            if value is not UNSET:
                default = cls.__dataclass_fields__[new].default
                keywords[new] = renamed_keyword(old, value, new, keywords[new], default, stacklevel=5)
        return cls(**{name: keywords[name] for name in KEYWORDS})

    @property
    def per_user(self) -> bool:
        """True when ``user_id`` is a resolver: one window per resolved user."""
        return callable(self.user_id)

    @property
    def static_user(self) -> str | None:
        """The fixed user of a Memory built with ``user_id="..."`` (None otherwise)."""
        return self.user_id if isinstance(self.user_id, str) else None


def _check_llm(name: str, value: Any) -> None:
    if value is not None and not isinstance(value, BaseLLM):
        raise InvalidTypeError(
            f"{name}= needs an LLM (LLMClient or BaseLLM), got {type(value).__name__}"
        )


KEYWORDS = tuple(f.name for f in fields(MemoryConfig) if f.init)


def _recall_options(recall: Any, dedupe: bool) -> RecallOptions | None:
    """``recall=`` as one RecallOptions (``dedupe=True`` turns its dedupe on); None: off."""
    if recall is None:
        return None
    if isinstance(recall, RecallOptions):
        return replace(recall, dedupe=True) if dedupe and not recall.dedupe else recall
    _check_vector_option("recall", recall)
    return RecallOptions(store=AUTO if recall == AUTO else recall, dedupe=dedupe)


def _check_vector_option(name: str, value: Any) -> None:
    if value is None or value == "auto":
        return
    if isinstance(value, str) or not (hasattr(value, "search") and hasattr(value, "add")):
        also = ", a RecallOptions" if name == "recall" else ""
        raise InvalidTypeError(
            f'{name}= must be "auto", a VectorStore instance{also} or None, got {value!r}'
        )


def _check_embedder(value: Any) -> None:
    if value is None:
        return
    if isinstance(value, str):
        if value in EMBEDDER_NAMES or value.startswith("openai:"):
            return
        raise InvalidValueError(
            f"unknown embedder {value!r}: use 'auto', 'local', 'openai', 'openai:<model>' "
            "or an Embedder instance"
        )
    if not (callable(getattr(value, "embed", None)) and hasattr(value, "dimension")):
        raise InvalidTypeError(
            f"embedder= must be a name or an Embedder (embed + dimension), got {value!r}"
        )
