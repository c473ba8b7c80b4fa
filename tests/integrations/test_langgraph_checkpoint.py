"""FastAIAgentSaver passes LangGraph's own checkpointer conformance suite
(langgraph-checkpoint-conformance, every base capability) on each backend."""

from __future__ import annotations

import asyncio
from typing import Any

from _env import require_module

require_module("langgraph.checkpoint.conformance")

from langgraph.checkpoint.conformance import checkpointer_test, validate  # noqa: E402

from fastaiagent.integrations.langgraph import FastAIAgentSaver  # noqa: E402


def test_conformance_suite_passes(fact_store: Any, backend: str) -> None:
    @checkpointer_test(name=f"FastAIAgentSaver[{backend}]")
    async def saver() -> Any:
        yield FastAIAgentSaver(fact_store)

    report = asyncio.run(validate(saver))
    failures = {name: r.failures for name, r in report.results.items() if r.failures}
    assert report.passed_all_base(), failures
    # Every base capability, and the extended ones this saver offers.
    offered = {"put", "put_writes", "get_tuple", "list", "delete_thread", "copy_thread", "prune"}
    assert all(report.results[name].passed for name in offered), failures
