"""Old names that keep working: one way to keep them, one warning each.

When a public name is renamed (see the glossary in ``docs/architecture.md``),
the old one stays as an alias that does what the new one does and says, once
per call site, a :class:`DeprecationWarning` naming the new one and the release
that removes the old one (:data:`REMOVED_IN`, the same for every alias and for
the command line's old option spellings).
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

from fastaiagent.errors import InvalidValueError

REMOVED_IN = "2.0"
"""The release that removes every deprecated alias: Python names, the MCP tool
``recall`` and the command line's old option spellings (one constant, so every
warning, note and help text names the same release)."""

P = ParamSpec("P")
R = TypeVar("R")


class _Unset:
    """The default of a deprecated keyword: the caller did not pass it (None can be
    a value the caller meant)."""

    def __repr__(self) -> str:
        return "UNSET"


UNSET: Any = _Unset()


def deprecation_note(old: str, new: str) -> str:
    """``old is deprecated: use new (removed in fastaiagent 2.0)``: what every alias says."""
    return f"{old} is deprecated: use {new} (removed in fastaiagent {REMOVED_IN})"


def warn_renamed(old: str, new: str, *, stacklevel: int = 3) -> None:
    """Say that ``old`` is deprecated, ``new`` is its name now, and which release
    removes ``old``. ``stacklevel`` 3 points at the caller of the function that calls
    this one (the user's code)."""
    warnings.warn(deprecation_note(old, new), DeprecationWarning, stacklevel=stacklevel)


def deprecated_alias(method: Callable[P, R], old: str, new: str) -> Callable[P, R]:
    """``method`` under its old name ``old``: the same arguments and result, with a
    DeprecationWarning naming ``new``. Assign it in the class body:
    ``recall = deprecated_alias(retrieve, "MemoryTools.recall", "MemoryTools.retrieve")``."""

    @functools.wraps(method)
    def alias(*args: P.args, **kwargs: P.kwargs) -> R:
        warn_renamed(old, new)
        return method(*args, **kwargs)

    return alias


def renamed_keyword(
    old: str, old_value: Any, new: str, new_value: Any, default: Any, *, stacklevel: int = 4
) -> Any:
    """The value of keyword ``new`` (whose default is ``default``) when its old
    spelling ``old`` may be passed instead.

    ``old_value`` is :data:`UNSET` when the old spelling was not passed. Passing
    the old spelling and a new value that is not the default is an error (which
    one was meant cannot be told)."""
    if old_value is UNSET:
        return new_value
    if new_value is not default and new_value != default:
        raise InvalidValueError(f"pass {new}= only: {old}= is its deprecated spelling")
    warn_renamed(f"{old}=", f"{new}=", stacklevel=stacklevel)
    return old_value


__all__ = ["REMOVED_IN", "UNSET", "deprecated_alias", "deprecation_note", "renamed_keyword", "warn_renamed"]
