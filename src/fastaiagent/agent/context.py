"""RunContext: what the caller passes to a run, e.g. who the user is."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

StateT = TypeVar("StateT")


@dataclass
class RunContext(Generic[StateT]):
    """Per-run context handed to tools, middleware and ``Memory(user_id=resolver)``.

    ``state`` is yours: a dataclass, a dict, anything. ``metadata`` is free-form.
    """

    state: StateT = None  # type: ignore[assignment]
    metadata: dict[str, Any] = field(default_factory=dict)
