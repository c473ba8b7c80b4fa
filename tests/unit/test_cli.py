"""How the `fastaiagent` command fails: one `error: ...` line on stderr, a non-zero exit code.

In-process runs use typer's CliRunner; the ones that need a real terminal
process (driver logs on stderr, a traceback under --debug, a socket held by
someone else) run the venv's `fastaiagent` entry point.
"""

from __future__ import annotations

import os
import socket
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from fastaiagent.cli import _register, app
from fastaiagent.cli.failures import DEBUG_HINT, SQLITE_HINT, STORE_HINT, explain
from fastaiagent.errors import StoreCorruptError, StoreUnavailableError
from fastaiagent.learn import Fact, MemoryStore

EXE = str(Path(sys.executable).with_name("fastaiagent"))
DEAD_REDIS = "redis://127.0.0.1:1/0"  # nothing listens on port 1
# What the store says of a file that is not a SQLite database: the file, what is wrong, the fix.
RESTORE = (
    "restore it from a backup, or move it aside so a new one is created "
    "(the sqlite3 shell's .recover may save its rows)"
)


def damaged_line(location: str | Path, store: str = "") -> str:
    """The one stderr line for the damaged SQLite file at ``location`` (a path or a
    sqlite:/// URL); ``store`` is the server's prefix, e.g. "the fact store failed: "."""
    path = str(location).removeprefix("sqlite:///")
    return f"error: {store}the SQLite database '{path}' is damaged (file is not a database): {RESTORE}\n"


@pytest.fixture
def cli():
    _register()
    runner = CliRunner()
    return lambda *args, **kw: runner.invoke(app, list(args), **kw)


@pytest.fixture
def damaged(tmp_path) -> str:
    """A location whose file is not a SQLite database at all."""
    path = tmp_path / "damaged.db"
    path.write_text("this is not a database, it is a shopping list\n")
    return f"sqlite:///{path}"


def run(*args: str, env: dict[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if k != "FASTAIAGENT_DEBUG"}
    return subprocess.run(
        [EXE, *args], capture_output=True, text=True, timeout=timeout, env={**environment, **(env or {})}
    )


@pytest.fixture
def taken_port():
    """A port some other program is listening on."""
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen(1)
        yield other.getsockname()[1]


# -- store failures -----------------------------------------------------------------


def test_a_damaged_database_is_one_line_and_exit_1(cli, damaged):
    result = cli("learn", "list", "--location", damaged)
    assert result.exit_code == 1
    assert result.stdout == ""
    # One line naming the file and the one fix (no second hint appended after it).
    assert result.stderr == damaged_line(damaged)
    assert SQLITE_HINT not in result.stderr


def test_a_store_that_is_down_is_one_line_naming_the_fix(cli):
    result = cli("learn", "list", "--location", DEAD_REDIS)
    assert result.exit_code == 1
    lines = result.stderr.splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("error: cannot reach Redis for the fact store: ")
    # The store's message names the server and the fix; the CLI adds no second one.
    assert lines[0].endswith(f"(Redis at {DEAD_REDIS}; check that the server is up and the URL's host and port)")
    assert STORE_HINT not in lines[0]


@pytest.mark.subprocess
def test_postgres_down_prints_one_line_and_no_pool_retries():
    done = run("learn", "list", "--location", "postgres://127.0.0.1:1/x")
    assert done.returncode == 1
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr  # the pool's per-retry warnings stay quiet
    assert lines[0].startswith("error: cannot connect to Postgres for the fact store (postgres://127.0.0.1:1/x): ")
    # However long the driver's reason, the fix at the end is not cut off, and no second one follows.
    assert lines[0].endswith("; check that the server is up and the URL's host, port, user, password and database")
    assert STORE_HINT not in lines[0]


@pytest.mark.subprocess
def test_debug_flag_or_env_shows_the_traceback(cli, damaged):
    flagged = cli("--debug", "learn", "list", "--location", damaged)
    assert isinstance(flagged.exception, StoreCorruptError)
    assert isinstance(flagged.exception.__cause__, sqlite3.DatabaseError)  # the driver's error is kept
    assert "error:" not in flagged.stderr
    by_env = cli("learn", "list", "--location", damaged, env={"FASTAIAGENT_DEBUG": "1"})
    assert isinstance(by_env.exception, StoreCorruptError)
    assert isinstance(by_env.exception.__cause__, sqlite3.DatabaseError)
    done = run("learn", "list", "--location", damaged, env={"FASTAIAGENT_DEBUG": "1"})
    assert done.returncode == 1
    assert "Traceback" in done.stderr
    # Both errors: the driver's, then the library's raised from it.
    assert "DatabaseError: file is not a database" in done.stderr
    assert "direct cause" in done.stderr and "StoreCorruptError: the SQLite database" in done.stderr
    assert len(done.stderr.splitlines()) > 5


@pytest.mark.subprocess
def test_without_debug_no_traceback_reaches_the_terminal(damaged):
    done = run("learn", "list", "--location", damaged)
    assert (done.returncode, done.stdout, done.stderr) == (1, "", damaged_line(damaged))


# -- bad options, missing things ----------------------------------------------------------


def test_bad_options_exit_2_with_the_rule(cli, tmp_path):
    location = f"sqlite:///{tmp_path / 'facts.db'}"
    result = cli("learn", "list", "--location", location, "--limit", "0")
    assert (result.exit_code, result.stderr) == (2, "error: --limit must be >= 1, got 0\n")
    unknown = cli("learn", "list", "--location", "bogus://x")
    assert unknown.exit_code == 2
    assert unknown.stderr.startswith("error: unsupported location 'bogus://x': use 'sqlite'")
    assert len(unknown.stderr.splitlines()) == 1
    mining = cli("learn", "--location", location, "--limit", "-3", "--model", "m")
    assert (mining.exit_code, mining.stderr) == (2, "error: --limit must be >= 1, got -3\n")


def test_a_fact_that_does_not_exist_exits_1(cli, tmp_path):
    store = MemoryStore(tmp_path / "facts.db")
    new = store.add(Fact("Prefers Slack", scope="user", scope_id="alice"))
    store.close()
    result = cli("learn", "supersede", "999", str(new), "--location", f"sqlite:///{tmp_path / 'facts.db'}")
    assert result.exit_code == 1 and result.stderr.startswith("error: no fact #999 in user:alice: ")


@pytest.mark.subprocess
def test_a_missing_extra_names_the_package_to_install(tmp_path):
    # A Python where the redis driver cannot be imported (as when the extra is not installed).
    code = "import sys; sys.modules['redis'] = None; from fastaiagent.cli import main; main()"
    done = subprocess.run(
        [sys.executable, "-c", code, "learn", "list", "--location", "redis://127.0.0.1:6379/0"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert done.stderr.startswith("error: ")
    assert "pip install 'fastaiagent[redis]'" in done.stderr
    assert len(done.stderr.splitlines()) == 1


def test_an_unexpected_error_says_how_to_see_the_traceback():
    assert explain(RuntimeError("boom\n  at line 3")) == (f"unexpected RuntimeError: boom at line 3 ({DEBUG_HINT})", 1)
    assert explain(KeyError("no fact #7")) == ("no fact #7", 1)


def _from(error: Exception, cause: BaseException) -> Exception:
    """``error`` as if raised ``from cause``."""
    error.__cause__ = cause
    return error


def test_explain_reads_the_whole_cause_chain():
    corrupt = _from(StoreCorruptError(f"the SQLite database '/d/m.db' is damaged (file is not a database): {RESTORE}"),
                    sqlite3.DatabaseError("file is not a database"))
    # A store error the UI or the plane wrapped keeps its own fix, and only that one.
    wrapped = _from(StoreUnavailableError(f"the fact store failed: {corrupt}"), corrupt)
    assert explain(wrapped) == (f"the fact store failed: {corrupt}", 1)
    assert explain(corrupt) == (str(corrupt), 1)
    # A raw SQLite error deeper down gets the SQLite hint, not the server one.
    deep = _from(StoreUnavailableError("the trace store failed: disk I/O error"),
                 _from(RuntimeError("disk I/O error"), sqlite3.OperationalError("disk I/O error")))
    assert explain(deep) == (f"the trace store failed: disk I/O error; {SQLITE_HINT}", 1)
    # An outage the library did not word from a driver's error (a paused server) gets the server hint.
    paused = StoreUnavailableError("cannot reach Postgres for the fact store: paused after a failure")
    assert explain(paused) == (f"{paused}; {STORE_HINT}", 1)


def test_a_long_message_keeps_its_fix():
    redis_errors = pytest.importorskip("redis.exceptions")
    fix = "check that the server is up and the URL's host and port"
    reason = "x" * 2000
    long = _from(StoreUnavailableError(f"cannot reach Redis: {reason}; {fix}"), redis_errors.ConnectionError(reason))
    message, code = explain(long)
    assert code == 1 and message.startswith("cannot reach Redis: xxx") and message.endswith(f"; {fix}")
    assert "…" in message and len(message) <= 600


def test_every_command_fails_through_the_one_guard():
    _register()
    seen: list[str] = []

    def walk(typer_app: typer.Typer, prefix: str) -> None:
        callbacks = [(f"{prefix}(callback)", typer_app.registered_callback)]
        callbacks += [(f"{prefix}{c.name or c.callback.__name__}", c) for c in typer_app.registered_commands]
        for name, info in callbacks:
            if info is not None and info.callback is not None:
                assert getattr(info.callback, "__fastaiagent_guarded__", False), name
                seen.append(name)
        for group in typer_app.registered_groups:
            walk(group.typer_instance, f"{prefix}{group.name} ")

    walk(app, "")
    assert {"ui", "demo", "version", "learn (callback)", "learn list", "plane serve"} <= set(seen)


# -- serving: host and port are checked before anything is printed ---------------------------------


@pytest.mark.parametrize("command", [["ui"], ["plane", "serve", "--api-key", "k"]])
def test_a_port_out_of_range_is_refused_before_serving(cli, command):
    result = cli(*command, "--port", "99999")
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr == "error: --port must be <= 65535, got 99999\n"
    negative = cli(*command, "--port", "-1")
    assert negative.stderr == "error: --port must be >= 0, got -1\n"


@pytest.mark.subprocess
@pytest.mark.parametrize("command", [["ui"], ["plane", "serve", "--api-key", "k"]])
def test_a_port_in_use_is_one_line(taken_port, tmp_path, command):
    location = f"sqlite:///{tmp_path / 'facts.db'}"
    done = run(*command, "--location", location, "--port", str(taken_port), timeout=30)
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == (
        f"error: port {taken_port} on 127.0.0.1 is already in use: stop the other server "
        "or pass --port with a free port\n"
    )


def test_a_host_this_machine_does_not_have_is_refused(cli):
    result = cli("plane", "serve", "--api-key", "k", "--host", "192.0.2.1", "--port", "0")
    assert result.exit_code == 2
    assert result.stderr == (
        "error: '192.0.2.1' is not an address of this machine: pass --host 127.0.0.1 "
        "(or an address it has)\n"
    )


@pytest.mark.parametrize("command", [["ui"], ["plane", "serve", "--api-key", "k"]])
def test_a_damaged_store_stops_serving_before_it_starts(cli, damaged, command):
    result = cli(*command, "--location", damaged, "--port", "0")
    assert (result.exit_code, result.stdout) == (1, "")
    # The store's own fix, not the server hint (the wrapper's direct cause is no sqlite3 error).
    assert result.stderr == damaged_line(damaged, "the fact store failed: ")
    assert STORE_HINT not in result.stderr and SQLITE_HINT not in result.stderr


def test_ui_checks_the_trace_store_too(cli, tmp_path):
    (tmp_path / "traces.db").write_text("not sqlite")
    result = cli(
        "ui", "--location", f"sqlite:///{tmp_path / 'f.db'}", "--trace-db", str(tmp_path / "traces.db"),
        "--port", "0",
    )
    assert result.exit_code == 1
    assert result.stderr == damaged_line(tmp_path / "traces.db", "the trace store failed: ")
    assert STORE_HINT not in result.stderr


def test_plane_serve_names_the_rankings(cli):
    result = cli("plane", "serve", "--api-key", "k", "--ranking", "magic")
    assert result.exit_code == 2
    assert result.stderr == "error: --ranking must be one of 'keyword', 'semantic', 'none', got 'magic'\n"


def test_help_documents_the_debug_switch(cli):
    result = cli("--help")
    assert result.exit_code == 0 and "--debug" in result.stdout and "FASTAIAGENT_DEBUG" in result.stdout
