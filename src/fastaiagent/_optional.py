"""Import an optional dependency, or fail with the extra that provides it."""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType

from fastaiagent.errors import MissingExtraError


def require(module: str, extra: str) -> ModuleType:
    """Import ``module``; raise MissingExtraError (an ImportError) naming ``pip install 'fastaiagent[extra]'``."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingExtraError(
            f"{module!r} is not installed; install it with: pip install 'fastaiagent[{extra}]'"
        ) from exc


def installed(module: str, extra: str) -> None:
    """Raise MissingExtraError as :func:`require` does when ``module`` is not
    installed, without importing it (a check at construction, cheap)."""
    try:
        found = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        raise MissingExtraError(
            f"{module!r} is not installed; install it with: pip install 'fastaiagent[{extra}]'"
        )
