"""Names a package offers but imports only when first used (a PEP 562 module ``__getattr__``).

A package keeps heavy or optional imports (a database driver, the OpenTelemetry
SDK) out of its own import this way::

    __getattr__ = LazyNames(__name__, {"PostgresFactStore": "fastaiagent.facts.postgres.store"}).__getattr__
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any


class LazyNames:
    """The names of ``package`` that are imported, each from the module ``where``
    maps it to, on first use. :meth:`__getattr__` is the package's module
    ``__getattr__``: any other name raises AttributeError as for any module."""

    def __init__(self, package: str, where: Mapping[str, str]) -> None:
        self.package = package
        self.where = dict(where)

    def __getattr__(self, name: str) -> Any:
        module = self.where.get(name)
        if module is None:
            raise AttributeError(f"module {self.package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(module), name)
