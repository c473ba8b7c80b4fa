"""Conformance suites: pytest classes that check a store keeps the contracts.

- :class:`FactStoreConformance` (``facts.py``): the FactStore protocol, scoping
  and isolation, with validity (``validity.py``, :class:`ValidityConformance`);
- :class:`StoredVectorIndexConformance` (``vectors.py``): a store-backed vector
  index (namespaces, keyword postings, cached embeddings).

Subclass one in your test module and give it a ``store`` (or ``index``) fixture;
see docs/backends.md, "Writing your own store". The suites need pytest and
hypothesis: ``pip install 'fastaiagent[conformance]'``.
"""

from __future__ import annotations

from typing import Any

from fastaiagent._optional import require

# The suites are pytest classes with hypothesis state machines: neither comes with the
# library, so a missing one is named here, with the extra that brings both.
require("pytest", "conformance")
require("hypothesis", "conformance")

from fastaiagent.facts.conformance.facts import FactStoreConformance  # noqa: E402  (after the check)
from fastaiagent.facts.conformance.validity import ValidityConformance  # noqa: E402


def __getattr__(name: str) -> Any:
    if name == "StoredVectorIndexConformance":  # numpy only when asked for
        from fastaiagent.facts.conformance.vectors import StoredVectorIndexConformance

        return StoredVectorIndexConformance
    raise AttributeError(f"module 'fastaiagent.facts.conformance' has no attribute {name!r}")


__all__ = ["FactStoreConformance", "StoredVectorIndexConformance", "ValidityConformance"]
