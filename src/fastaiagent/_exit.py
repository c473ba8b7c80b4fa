"""Work to finish when the interpreter exits normally, before it tears itself down.

Daemon threads are frozen where they stand when the interpreter finalizes; one
that is inside native code with threads of its own (ONNX Runtime, torch) then
has those threads destroyed under it, and the process aborts ("terminate called
without an active exception", exit code 134). Hooks registered here run from
threading's exit hooks: after the main thread ends, before ``atexit`` handlers
and before ``concurrent.futures`` refuses new work, so they can still stop and
wait for the library's background threads, using thread and connection pools
that ``atexit`` handlers would already have closed.
"""

from __future__ import annotations

import atexit
import threading
from collections.abc import Callable

_registered: set[Callable[[], None]] = set()
_lock = threading.Lock()


def at_exit(hook: Callable[[], None]) -> None:
    """Run ``hook`` once at a normal interpreter exit (registering it again does nothing)."""
    with _lock:
        if hook in _registered:
            return
        register = getattr(threading, "_register_atexit", None)  # CPython >= 3.9
        try:
            if register is None:
                raise AttributeError
            register(hook)
        except (AttributeError, RuntimeError):  # RuntimeError: already shutting down
            atexit.register(hook)
        _registered.add(hook)


__all__ = ["at_exit"]
