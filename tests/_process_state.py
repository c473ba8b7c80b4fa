"""Each test starts with the process-wide state of a fresh process, so the order
the tests run in (pytest-randomly, several per xdist worker) never matters.

What one test can leave behind for the next in the same process: a server
paused after a failure (``fastaiagent.facts.outage``, keyed by the server's
address, so a test that met a refused ``127.0.0.1:1`` would make the next one
see "paused" instead of "cannot connect"), the plane's default connection and
its back-offs, the log throttles that keep one line per outage, tracing left on
(with a redaction policy), and background re-embedding jobs still running.
:func:`reset` puts each back; conftest calls it before each test and after it,
and :func:`before_teardown` before the test's fixtures are torn down.
"""

from __future__ import annotations


def before_teardown() -> None:
    """What must not outlast the test into its fixtures' teardown: a server's pause
    (a fixture's ``store.destroy()`` must reach the server) and background
    re-embedding (a job writing on would leave keys behind a destroyed store)."""
    from fastaiagent.facts import outage
    from fastaiagent.facts.index import reembed

    outage.reset()
    _stop_reembedding(reembed)


def reset() -> None:
    """Put every piece of process-wide state back as a fresh process has it."""
    from fastaiagent import trace
    from fastaiagent.agent import composable
    from fastaiagent.agent.memory_blocks import facts
    from fastaiagent.plane import client as plane
    from fastaiagent.trace import redaction

    before_teardown()
    if plane.connection() is not None:
        plane.disconnect()  # closes its HTTP client, clears the back-offs
    else:
        plane.backoff().clear()
    for throttle in (composable._failures, facts._outages):
        with throttle._lock:
            throttle._last.clear()
    if trace.is_enabled():
        trace.shutdown()
        trace.set_tracer(None)
    if redaction.get_redaction_policy() is not None:
        redaction.set_redaction_policy(None)


def _stop_reembedding(reembed: object) -> None:
    """Cancel the background re-embedding jobs a test started (one still running
    would write to a store its test's fixtures drop) and forget them (a finished
    job keeps its index, and the matrices it holds, alive)."""
    with reembed._jobs_lock:  # type: ignore[attr-defined]
        jobs = list(reembed._jobs.values())  # type: ignore[attr-defined]
        reembed._jobs.clear()  # type: ignore[attr-defined]
    for job in jobs:
        job.cancel()
    for job in jobs:
        if job.state == "running":
            job.wait(10)
