"""Driving ``fastaiagent mcp`` with the official ``mcp`` client, over stdio and streamable HTTP.

Shared by tests/integration/test_mcp_server.py and tests/backends/test_mcp_backends.py
(pytest puts tests/ on sys.path). The scenarios are async functions over a
ClientSession, so one scenario runs unchanged on every transport and backend.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import httpx2
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CallToolResult

from _wait import wait_until

TOKEN_ALICE = "alice-token-0123456789abcdef"
TOKEN_BOB = "bob-token-0123456789abcdefgh"
TOOLS = {"remember", "retrieve", "update", "forget"}
DEPRECATED_TOOLS = {"recall": "retrieve"}  # still listed and served, marked deprecated
LISTED = TOOLS | set(DEPRECATED_TOOLS)


def cli_args(*args: str) -> list[str]:
    """``python -m fastaiagent.cli mcp ARGS``, as a host would spawn it."""
    return ["-m", "fastaiagent.cli", "mcp", *args]


@asynccontextmanager
async def stdio_session(args: Sequence[str], cwd: str) -> AsyncIterator[ClientSession]:
    """A ClientSession on a server process spawned over stdio, initialized."""
    params = StdioServerParameters(
        command=sys.executable, args=list(args), cwd=cwd, env={"HF_HUB_OFFLINE": "1", **_local_db()}
    )
    with open(os.devnull, "w") as errlog:
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            yield session


def _local_db() -> dict[str, str]:
    value = os.environ.get("FASTAIAGENT_LOCAL_DB")
    return {"FASTAIAGENT_LOCAL_DB": value} if value else {}


@asynccontextmanager
async def http_session(url: str, token: str | None = None) -> AsyncIterator[ClientSession]:
    """A ClientSession over streamable HTTP, with a bearer token when given, initialized."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=30.0) as client,
        streamable_http_client(url, http_client=client) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


@contextmanager
def serving_http(
    memory: Any,
    *,
    user_id: str | None = None,
    tokens: dict[str, str] | None = None,
    host: str = "127.0.0.1",
    allow_global_writes: bool = False,
) -> Iterator[str]:
    """The MCP server over ``memory`` on a free port in a thread; yields its /mcp URL."""
    import uvicorn

    from fastaiagent._serving import listen, url
    from fastaiagent.mcp import MemoryTools, TokenMap, create_server, http_app

    tools = MemoryTools(memory, user_id=user_id, allow_global_writes=allow_global_writes)
    app = http_app(create_server(tools), host=host, tokens=TokenMap(tokens) if tokens else None)
    sock = listen(host, 0)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        wait_until(lambda: server.started, "the MCP HTTP server is serving")
        yield f"{url(sock)}/mcp"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


async def call(session: ClientSession, tool: str, **arguments: Any) -> dict[str, Any]:
    """Call a tool that must succeed; its structured result."""
    result = await session.call_tool(tool, arguments)
    assert not result.is_error, f"{tool}({arguments}) failed: {error_text(result)}"
    assert result.structured_content is not None
    return result.structured_content


async def call_error(session: ClientSession, tool: str, **arguments: Any) -> str:
    """Call a tool that must fail as a tool error; the error text."""
    result = await session.call_tool(tool, arguments)
    assert result.is_error, (
        f"{tool}({arguments}) should have failed, got {result.structured_content}"
    )
    return error_text(result)


def error_text(result: CallToolResult) -> str:
    return " ".join(getattr(block, "text", "") for block in result.content)


async def retrieved(session: ClientSession, **arguments: Any) -> list[str]:
    """The texts ``retrieve`` returns."""
    return [fact["text"] for fact in (await call(session, "retrieve", **arguments))["facts"]]


recalled = retrieved  # the helper's name while the tool was called recall


async def round_trip(session: ClientSession) -> None:
    """remember -> retrieve -> update -> retrieve -> forget, as one user."""
    first = await call(session, "remember", text="Alice prefers tea")
    again = await call(session, "remember", text="Alice prefers tea")
    assert again["id"] == first["id"]  # the same text keeps its id
    assert await retrieved(session) == ["Alice prefers tea"]

    updated = await call(session, "update", new="Alice prefers coffee", old=first["id"])
    assert updated["id"] != first["id"]
    assert await retrieved(session) == ["Alice prefers coffee"]
    by_text = await call(
        session, "update", new="Alice prefers green tea", old="alice prefers COFFEE"
    )
    assert await retrieved(session) == ["Alice prefers green tea"] and by_text["id"] != updated["id"]

    assert (await call(session, "forget", fact="Alice prefers green tea"))["deleted"] == 1
    assert await retrieved(session) == []
    # The superseded facts stayed as history; everything=true removes them too.
    assert (await call(session, "forget", everything=True))["deleted"] == 2
    assert (await call(session, "forget", everything=True))["deleted"] == 0


async def bad_arguments_are_tool_errors(session: ClientSession) -> None:
    """Each bad call is a tool error naming what is wrong; the server keeps answering."""
    assert "text" in await call_error(session, "remember")
    assert "confidence" in await call_error(session, "remember", text="x", confidence=5)
    assert "tier" in await call_error(session, "retrieve", tier="session")
    assert "limit" in await call_error(session, "retrieve", limit=0)
    assert "empty" in await call_error(session, "remember", text="   ")
    assert "retrieve lists them" in await call_error(session, "update", new="y", old=123456)
    assert "no active user" in await call_error(session, "update", new="y", old="never said")
    assert "everything=true" in await call_error(session, "forget")
    assert "global" in await call_error(session, "remember", text="for everyone", tier="global")
    assert "nope" in await call_error(session, "nope")
    # Still serving.
    await call(session, "remember", text="still here")
    assert await retrieved(session) == ["still here"]
    await call(session, "forget", everything=True)
