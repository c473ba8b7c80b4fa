"""The spec's import path for the FactStore conformance suite (it lives in
:mod:`fastaiagent.facts.conformance.facts`)."""

from fastaiagent.facts.conformance import FactStoreConformance

__all__ = ["FactStoreConformance"]
