"""The customer-support REPL, driven through a pseudo-terminal like a person would."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "examples" / "customer-support-agent" / "agent.py"


class Terminal:
    """A child process on a pty: type lines, read the screen."""

    def __init__(self, *args: str, env: dict[str, str]) -> None:
        self.master, slave = pty.openpty()
        self.proc = subprocess.Popen(
            [sys.executable, str(SCRIPT), *args], stdin=slave, stdout=slave, stderr=slave, env=env, close_fds=True
        )
        os.close(slave)
        self.screen = ""

    def read_until(self, text: str, timeout: float = 60.0) -> str:
        deadline = time.monotonic() + timeout
        while text not in self.screen:
            left = deadline - time.monotonic()
            assert left > 0, f"never saw {text!r}; screen:\n{self.screen}"
            ready, _, _ = select.select([self.master], [], [], left)
            if ready:
                try:
                    chunk = os.read(self.master, 4096).decode(errors="replace")
                except OSError:  # the child closed the terminal
                    break
                self.screen += chunk
        return self.screen

    def type(self, line: str) -> None:
        os.write(self.master, (line + "\n").encode())

    def close(self) -> int:
        try:
            return self.proc.wait(timeout=30)
        finally:
            os.close(self.master)


def test_repl_remembers_the_case_and_resumes_it(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    session = tmp_path / "session.json"

    term = Terminal("--memory", str(session), env=env)
    term.read_until("you> ")
    term.type("Hi, my order 12345 is late, mail me at jo@example.com")
    term.read_until("noted order #12345")
    term.type("Where is my order?")
    term.read_until("I see order #12345 from earlier in our chat")
    term.type("/quit")
    term.read_until("bye")
    assert term.close() == 0
    assert session.is_file()

    resumed = Terminal("--memory", str(session), env=env)
    screen = resumed.read_until("you> ")
    assert "resumed a session of 4 messages" in screen
    resumed.type("Any news on my order?")
    resumed.read_until("I see order #12345 from earlier in our chat")
    resumed.type("/history")
    screen = resumed.read_until("user: Any news on my order?")
    assert "jo@example.com" in screen  # the user's words are kept as they said them
    resumed.type("/quit")
    resumed.read_until("bye")
    assert resumed.close() == 0
