"""Each test starts with the process-wide state of a fresh process, so the order
the tests run in (pytest-randomly, several per xdist worker) never matters.

What one test can leave behind for the next in the same process: a server
paused after a failure (``fastaiagent.facts.outage``, keyed by the server's
address, so a test that met a refused ``127.0.0.1:1`` would make the next one
see "paused" instead of "cannot connect"), the plane's default connection and
its back-offs, the log throttles that keep one line per outage, tracing left on
(with a redaction policy), background re-embedding jobs still running, and what
an in-process CLI call sets (``--debug``, the levels of the loggers it quiets).
:func:`reset` puts each back; conftest calls it before each test and after it,
and :func:`before_teardown` before the test's fixtures are torn down. A module
not imported yet has no state to put back: it is left unimported.
"""

from __future__ import annotations

import logging
import sys
from typing import Any


def _loaded(name: str) -> Any:
    return sys.modules.get(name)


def before_teardown() -> None:
    """What must not outlast the test into its fixtures' teardown: a server's pause
    (a fixture's ``store.destroy()`` must reach the server) and background
    re-embedding (a job writing on would leave keys behind a destroyed store)."""
    outage = _loaded("fastaiagent.facts.outage")
    if outage is not None:
        outage.reset()
    reembed = _loaded("fastaiagent.facts.index.reembed")
    if reembed is not None:
        _stop_reembedding(reembed)


def reset() -> None:
    """Put every piece of process-wide state back as a fresh process has it."""
    before_teardown()
    plane = _loaded("fastaiagent.plane.client")
    if plane is not None:
        if plane.connection() is not None:
            plane.disconnect()  # closes its HTTP client, clears the back-offs
        else:
            plane.backoff().clear()
    for module, name in (
        ("fastaiagent.agent.composable", "_failures"),
        ("fastaiagent.agent.memory_blocks.facts", "_outages"),
    ):
        throttle = getattr(_loaded(module), name, None)
        if throttle is not None:
            with throttle._lock:
                throttle._last.clear()
    trace = _loaded("fastaiagent.trace")
    if trace is not None:
        if trace.is_enabled():
            trace.shutdown()
            trace.set_tracer(None)
        if trace.get_redaction_policy() is not None:
            trace.set_redaction_policy(None)
    failures = _loaded("fastaiagent.cli.failures")
    if failures is not None:
        failures.set_debug(False)
    cli = _loaded("fastaiagent.cli")
    for name in getattr(cli, "_CHATTY_LOGGERS", ()):
        logging.getLogger(name).setLevel(logging.NOTSET)


def _stop_reembedding(reembed: Any) -> None:
    """Cancel the background re-embedding jobs a test started (one still running
    would write to a store its test's fixtures drop) and forget them (a finished
    job keeps its index, and the matrices it holds, alive)."""
    with reembed._jobs_lock:
        jobs = list(reembed._jobs.values())
        reembed._jobs.clear()
    for job in jobs:
        job.cancel()
    for job in jobs:
        if job.state == "running":
            job.wait(10)
