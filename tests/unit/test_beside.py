"""beside(): a call on a helper thread, or inline when every helper is busy."""

from __future__ import annotations

import contextvars
import multiprocessing
import threading

import pytest

from fastaiagent._beside import HELPERS, beside

WHO: contextvars.ContextVar[str] = contextvars.ContextVar("who", default="nobody")


def test_the_call_runs_on_a_helper_with_the_callers_context() -> None:
    WHO.set("alice")
    future = beside(lambda: (threading.current_thread().name, WHO.get()))
    name, who = future.result(timeout=5)
    assert name.startswith("fastaiagent-beside") and who == "alice"


def test_an_error_reaches_the_caller() -> None:
    def fail() -> None:
        raise ValueError("the store said no")

    with pytest.raises(ValueError, match="the store said no"):
        beside(fail).result(timeout=5)


def test_when_every_helper_is_busy_the_call_runs_in_the_callers_thread() -> None:
    release = threading.Event()
    busy = [beside(release.wait, 5) for _ in range(HELPERS)]
    try:
        here = beside(lambda: threading.current_thread().name)
        assert here.done() and here.result() == threading.current_thread().name
    finally:
        release.set()
    assert all(f.result(timeout=5) for f in busy)
    # the helpers are free again
    assert beside(lambda: threading.current_thread().name).result(5).startswith("fastaiagent-beside")


def _in_child(queue: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    queue.put(beside(lambda: threading.current_thread().name).result(timeout=5))


@pytest.mark.subprocess
def test_a_forked_child_gets_helpers_of_its_own() -> None:
    assert beside(lambda: 1).result(5) == 1  # the parent's helpers exist
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_in_child, args=(queue,))
    child.start()
    try:
        assert queue.get(timeout=10).startswith("fastaiagent-beside")
    finally:
        child.join(10)
    assert child.exitcode == 0
