"""``fastaiagent mcp``: serve memory to MCP hosts and agents (stdio or streamable HTTP)."""

from __future__ import annotations

import os
import re
import socket
import sys
from typing import Any

import typer

from fastaiagent._optional import require
from fastaiagent._serving import listen
from fastaiagent._serving import url as socket_url
from fastaiagent._validate import one_of, optional_id
from fastaiagent._validate import port as port_option
from fastaiagent.agent.memory import Memory
from fastaiagent.cli.failures import checking_options
from fastaiagent.cli.options import (
    USER_FLAG,
    agent_option,
    location_option,
    project_option,
    user_option,
)
from fastaiagent.errors import InvalidValueError
from fastaiagent.ui.server import is_loopback

TOKENS_ENV = "FASTAIAGENT_MCP_TOKENS"
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 7870
TRANSPORTS = ("stdio", "http")


def _tokens(specs: list[str], tokens_file: str | None) -> Any:
    """The TokenMap of --token, --tokens-file and the environment variable (None when empty)."""
    from fastaiagent.mcp.auth import TokenMap, load_tokens_file, parse_token_specs

    tokens = TokenMap()
    parse_token_specs(specs, tokens)
    parse_token_specs([s for s in re.split(r"[\s,]+", os.environ.get(TOKENS_ENV, "")) if s], tokens)
    if tokens_file:
        load_tokens_file(tokens_file, tokens)
    return tokens if len(tokens) else None


def check_connection_options(transport: str, host: str, tokens: Any, user_id: str | None) -> None:
    """Who a connection acts for must be fixed by the server, and tokens guard remote binds."""
    if transport == "stdio":
        if tokens is not None:
            raise InvalidValueError(
                f"tokens are for --transport http; over stdio the connection acts for {USER_FLAG} "
                f"(unset {TOKENS_ENV} or drop --token/--tokens-file)"
            )
        return
    if tokens is not None and user_id is not None:
        raise InvalidValueError(
            f"pass either {USER_FLAG} (one user, no tokens, loopback only) or tokens (each acts "
            "for its own user), not both"
        )
    if tokens is None and not is_loopback(host):
        raise InvalidValueError(
            f"refusing to serve MCP on {host!r} without a token: anyone who can reach that "
            "address could read and change your facts. Pass --token TOKEN=USER (or "
            f"--tokens-file, or set {TOKENS_ENV}), or bind 127.0.0.1."
        )


# The command's options, named once here so the command itself stays short.
_LOCATION = location_option()
_TRANSPORT = typer.Option(
        "stdio", help="stdio (desktop/IDE hosts) or http (streamable HTTP)."
    )
_HOST = typer.Option(
        DEFAULT_HOST, help="HTTP: address to bind; other than loopback needs a token."
    )
_PORT = typer.Option(DEFAULT_PORT, help="HTTP: port to listen on (0 picks a free one).")
_AGENT_ID = agent_option("The global tier's id (off without it).")
_PROJECT_ID = project_option("", "Tenant partition applied to every tier.")
_USER_ID = user_option("The user a connection without a token acts for (stdio, or HTTP on loopback).")
_TOKEN = typer.Option(
        [], "--token", help=f"HTTP: TOKEN=USER, repeatable (also {TOKENS_ENV}, comma-separated)."
    )
_TOKENS_FILE = typer.Option(
        None, "--tokens-file", help='HTTP: a file of TOKEN=USER lines or a JSON {"TOKEN": "USER"}.'
    )
_GLOBAL_WRITES = typer.Option(
        False,
        "--global-writes",
        help="Let clients write and forget global facts (read by every user).",
    )
_SEMANTIC = typer.Option(
        True, "--semantic/--no-semantic", help="Let retrieve search by meaning (needs an embedder)."
    )
_EMBEDDER = typer.Option(
        "auto", help="Embedder for retrieve by meaning: auto, local, openai[:model]."
    )


def mcp(
    location: str = _LOCATION,
    transport: str = _TRANSPORT,
    host: str = _HOST,
    port: int = _PORT,
    agent_id: str | None = _AGENT_ID,
    project_id: str = _PROJECT_ID,
    user_id: str | None = _USER_ID,
    token: list[str] = _TOKEN,
    tokens_file: str | None = _TOKENS_FILE,
    global_writes: bool = _GLOBAL_WRITES,
    semantic: bool = _SEMANTIC,
    embedder: str = _EMBEDDER,
) -> None:
    """Serve memory as MCP tools (``--help`` lists them all: :func:`mcp_help`)."""
    require("mcp.server.mcpserver", "mcp")
    from fastaiagent.mcp.server import create_server
    from fastaiagent.mcp.tools import MemoryTools

    # Bad options exit 2 before anything is served; a store that cannot be read
    # (checked once, here) or a taken port exits 1.
    with checking_options():
        one_of("--transport", transport, TRANSPORTS)
        optional_id(USER_FLAG, user_id)
        tokens = _tokens(token, tokens_file)
        check_connection_options(transport, host, tokens, user_id)
        port_number = port_option("--port", port)
        memory = Memory(
            location,
            agent_id=agent_id,
            project_id=project_id,
            semantic="auto" if semantic else None,
            embedder=embedder,
        )
        tools = MemoryTools(memory, user_id=user_id, allow_global_writes=global_writes)
    try:
        tools.check_store()
        memory.warm()  # the embedding model loads now, not in the first retrieve
        with checking_options():
            sock = listen(host, port_number) if transport == "http" else None
        _serve(create_server(tools), sock, host, tokens, user_id)
    except KeyboardInterrupt:
        pass
    finally:
        memory.location.close()


def _serve(
    server: Any, sock: socket.socket | None, host: str, tokens: Any, user_id: str | None
) -> None:
    """Announce (stderr over stdio: stdout is the protocol) and serve until stopped."""
    from fastaiagent.mcp.server import http_app, serve_http, serve_stdio

    if sock is None:
        who = f"user {user_id!r}" if user_id else "no user (global tier only)"
        print(f"fastaiagent MCP server on stdio, acting for {who}", file=sys.stderr)
        serve_stdio(server)
        return
    who = f"{len(tokens)} token(s)" if tokens else f"user {user_id!r}" if user_id else "no user"
    typer.echo(f"fastaiagent MCP server on {socket_url(sock)}/mcp for {who}  (Ctrl+C to stop)")
    serve_http(http_app(server, host=host, tokens=tokens), sock)


def mcp_help() -> str:
    """The command's help: every tool the server serves, from the list the server reads."""
    from fastaiagent.mcp.tools import served_tools

    return f"Serve memory as MCP tools: {served_tools()}."


def register(app: typer.Typer) -> None:
    """Add the ``mcp`` command to the ``fastaiagent`` CLI."""
    app.command("mcp", help=mcp_help())(mcp)
