"""Import an optional dependency, or fail with the extra that provides it."""

from __future__ import annotations

import importlib
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
