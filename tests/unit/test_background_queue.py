"""BackgroundQueue: memory work (summaries, fact extraction) run after the reply."""

from __future__ import annotations

import asyncio
import contextvars
import logging
import re
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from _wait import wait_until
from fastaiagent.agent.memory_blocks.background import (
    BackgroundQueue,
    current_user,
    flush_lane_everywhere,
)


def test_jobs_run_in_submission_order_and_flush_waits_for_all():
    queue = BackgroundQueue()
    seen: list[int] = []
    for i in range(200):
        queue.submit(lambda i=i: seen.append(i))
    assert queue.flush(timeout=10)
    assert seen == list(range(200))
    assert queue.pending == 0


def test_flush_times_out_on_a_slow_job_then_completes():
    queue = BackgroundQueue()
    release = threading.Event()
    done: list[str] = []
    queue.submit(lambda: (release.wait(5), done.append("slow")))
    assert queue.flush(timeout=0.05) is False
    assert queue.pending == 1
    release.set()
    assert queue.flush(timeout=5) is True
    assert done == ["slow"]


def test_a_failing_job_is_logged_and_the_next_one_runs(caplog):
    queue = BackgroundQueue()
    seen: list[str] = []

    def boom() -> None:
        raise RuntimeError("extraction exploded")

    with caplog.at_level(logging.WARNING, logger="fastaiagent.memory"):
        queue.submit(boom)
        queue.submit(lambda: seen.append("after"))
        assert queue.flush(timeout=5)
    assert seen == ["after"]
    assert queue.failures == 1
    assert "extraction exploded" in caplog.text


def test_the_submitters_context_reaches_the_job():
    var: contextvars.ContextVar[str] = contextvars.ContextVar("who", default="nobody")
    queue = BackgroundQueue()
    seen: list[str] = []
    token = var.set("alice")
    queue.submit(lambda: seen.append(var.get()))
    var.reset(token)
    queue.submit(lambda: seen.append(var.get()))
    assert queue.flush(timeout=5)
    assert seen == ["alice", "nobody"]


def test_queue_is_bounded_submit_waits_for_a_free_slot():
    queue = BackgroundQueue(max_pending=2)
    release = threading.Event()
    queue.submit(lambda: release.wait(5))  # running
    queue.submit(lambda: None)  # queued
    queue.submit(lambda: None)  # queued: the queue is now full
    blocked_done = threading.Event()

    def submit_one_more() -> None:
        queue.submit(lambda: None)
        blocked_done.set()

    thread = threading.Thread(target=submit_one_more)
    thread.start()
    assert not blocked_done.wait(0.1), "submit should wait while the queue is full"
    assert queue.pending <= 3
    release.set()
    assert blocked_done.wait(5)
    thread.join(5)
    assert queue.flush(timeout=5)


def test_flush_from_inside_a_job_is_refused_not_a_deadlock():
    queue = BackgroundQueue()
    errors: list[BaseException] = []

    def job() -> None:
        try:
            queue.flush()
        except RuntimeError as exc:
            errors.append(exc)

    queue.submit(job)
    assert queue.flush(timeout=5)
    assert len(errors) == 1


def test_close_drains_and_later_submits_run_inline():
    queue = BackgroundQueue()
    seen: list[str] = []
    queue.submit(lambda: (time.sleep(0.05), seen.append("queued")))
    assert queue.close(timeout=5)
    assert queue.closed
    queue.submit(lambda: seen.append("inline"))
    assert seen == ["queued", "inline"]


def test_idle_worker_exits_and_restarts_on_next_submit():
    queue = BackgroundQueue(idle_seconds=0.05)
    seen: list[int] = []
    queue.submit(lambda: seen.append(1))
    assert queue.flush(timeout=5)
    wait_until(lambda: queue.worker_count == 0, "the idle worker exits")
    queue.submit(lambda: seen.append(2))
    assert queue.flush(timeout=5)
    assert seen == [1, 2]


def test_aflush_does_not_hold_the_event_loop():
    # The queued job waits for a callback of the event loop: an aflush holding the
    # loop would make it wait its 10 s out (and record False).
    queue = BackgroundQueue()
    release = threading.Event()
    released: list[bool] = []
    queue.submit(lambda: released.append(release.wait(10)))

    async def main() -> bool:
        asyncio.get_running_loop().call_soon(release.set)
        return await queue.aflush(timeout=20)

    assert asyncio.run(main())
    assert released == [True]


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"max_pending": 0}, ValueError, "max_pending must be >= 1, got 0"),
        ({"max_pending": True}, TypeError, "max_pending must be an int, got bool True"),
        ({"exit_timeout": -1}, ValueError, "exit_timeout must be >= 0, got -1"),
        ({"exit_timeout": "60"}, TypeError, "exit_timeout must be a number, got str '60'"),
        ({"idle_seconds": 0}, ValueError, "idle_seconds must be > 0, got 0"),
        ({"name": ""}, ValueError, "name cannot be empty"),
    ],
)
def test_bad_arguments_raise(kwargs, error, message):
    with pytest.raises(error, match=re.escape(message)):
        BackgroundQueue(**kwargs)


def test_flush_refuses_a_negative_timeout():
    with pytest.raises(ValueError, match=re.escape("timeout must be >= 0, got -1")):
        BackgroundQueue().flush(timeout=-1)


def test_submit_needs_a_callable():
    with pytest.raises(TypeError, match="submit needs a callable taking no arguments"):
        BackgroundQueue().submit("not callable")  # type: ignore[arg-type]


@pytest.mark.subprocess
def test_pending_jobs_finish_at_normal_interpreter_exit(tmp_path):
    """No learned fact is lost on a normal exit: queued work runs before shutdown."""
    out = tmp_path / "done.txt"
    script = textwrap.dedent(
        f"""
        import time
        from fastaiagent.agent.memory_blocks.background import BackgroundQueue

        queue = BackgroundQueue()
        def job(i):
            time.sleep(0.05)
            with open({str(out)!r}, "a") as handle:
                handle.write(f"{{i}}\\n")
        for i in range(5):
            queue.submit(lambda i=i: job(i))
        # no flush: the script just ends
        """
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60)
    assert out.read_text().split() == ["0", "1", "2", "3", "4"]


# -- lanes: one user's jobs in order, several users at once ---------------------


def test_each_lanes_jobs_run_in_order_while_lanes_run_in_parallel():
    queue = BackgroundQueue(workers=3)
    seen: dict[str, list[int]] = {"a": [], "b": [], "c": []}
    running: set[str] = set()
    overlap = threading.Event()
    lock = threading.Lock()

    def job(lane: str, i: int) -> None:
        with lock:
            assert lane not in running, "two jobs of one lane ran at once"
            running.add(lane)
            if len(running) > 1:
                overlap.set()
        overlap.wait(2)  # hold until another lane runs beside this one
        with lock:
            running.discard(lane)
            seen[lane].append(i)

    for i in range(5):
        for lane in seen:
            queue.submit(lambda lane=lane, i=i: job(lane, i), lane=lane)
    assert queue.flush(timeout=20)
    assert overlap.is_set()
    assert seen == {lane: [0, 1, 2, 3, 4] for lane in seen}
    assert queue.worker_count <= 3


def test_parallelism_is_bounded_by_workers():
    queue = BackgroundQueue(workers=2)
    gate = threading.Event()
    lock = threading.Lock()
    state = {"now": 0, "most": 0}

    def job() -> None:
        with lock:
            state["now"] += 1
            state["most"] = max(state["most"], state["now"])
        gate.wait(5)
        with lock:
            state["now"] -= 1

    for user in range(6):
        queue.submit(job, lane=f"u{user}")
    wait_until(lambda: state["now"] == 2, "two lanes run")
    assert queue.pending == 6
    gate.set()
    assert queue.flush(timeout=10)
    assert state["most"] == 2


def test_flush_lane_waits_for_that_user_only():
    queue = BackgroundQueue(workers=2)
    release_bob = threading.Event()
    done: list[str] = []
    queue.submit(lambda: (release_bob.wait(10), done.append("bob")), lane="bob")
    queue.submit(lambda: done.append("alice"), lane="alice")
    assert queue.flush_lane("alice", timeout=5) is True
    assert done == ["alice"]
    assert queue.pending_in("bob") == 1
    assert queue.flush_lane("bob", timeout=0.05) is False
    release_bob.set()
    assert queue.flush(timeout=5)
    assert queue.pending_in("bob") == 0


def test_the_lane_defaults_to_the_user_of_the_run_in_progress():
    queue = BackgroundQueue(workers=2)
    release = threading.Event()
    token = current_user.set("bob")
    try:
        queue.submit(lambda: release.wait(10))
    finally:
        current_user.reset(token)
    assert queue.pending_in("bob") == 1
    assert flush_lane_everywhere("alice", timeout=5) is True
    release.set()
    assert flush_lane_everywhere("bob", timeout=5) is True
    assert queue.pending == 0


def test_bad_workers_raise():
    with pytest.raises(ValueError, match=re.escape("workers must be >= 1, got 0")):
        BackgroundQueue(workers=0)


@pytest.mark.subprocess
def test_a_forked_child_starts_with_an_empty_queue_of_its_own(tmp_path):
    script = textwrap.dedent(
        """
        import os, threading
        from fastaiagent.agent.memory_blocks.background import BackgroundQueue

        queue = BackgroundQueue(workers=2)
        gate = threading.Event()
        queue.submit(lambda: gate.wait(10), lane="parent")
        pid = os.fork()
        if pid == 0:
            seen = []
            queue.submit(lambda: seen.append("child"), lane="x")
            ok = queue.flush(timeout=10) and seen == ["child"] and queue.pending == 0
            os._exit(0 if ok else 1)
        _, status = os.waitpid(pid, 0)
        gate.set()
        assert queue.flush(timeout=10)
        raise SystemExit(os.waitstatus_to_exitcode(status))
        """
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60)
