"""MCP server overhead: a tool call round trip over stdio and HTTP vs the direct verb.

For ``retrieve`` (list the newest 10 facts of a user holding 50) and ``remember``
(a new fact each call), it times
- direct: ``Memory.retrieve`` / ``Memory.persist`` in this process;
- in_process: the SDK's in-memory ``Client`` on the server object (the protocol
  and the SDK's own work, without a transport);
- stdio: ``ClientSession.call_tool`` to ``fastaiagent mcp`` spawned over stdio;
- http: the same to ``fastaiagent mcp --transport http`` (a separate process,
  bearer token on every request), over streamable HTTP.
Calls are sequential (one client), on SQLite by default. The overhead is the
transport's p50 minus the direct p50. Results go to bench/results/mcp_server.json.

    python bench/mcp_server.py             # 2,000 calls per case
    python bench/mcp_server.py --quick     # 300 calls per case
    python bench/mcp_server.py --location postgres://postgres@127.0.0.1:5432/test
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import httpx2
from mcp import Client, ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

sys.path.insert(0, str(Path(__file__).parent))
from _common import summary, time_calls, write_results

from fastaiagent import Memory
from fastaiagent.mcp import MemoryTools, create_server

TOKEN = "bench-token-" + uuid.uuid4().hex
SEEDED = 50


async def time_async(fn: Callable[[int], Awaitable[Any]], count: int, warmup: int) -> list[float]:
    """Milliseconds per awaited call of ``fn(i)`` after a warm-up."""
    for i in range(warmup):
        await fn(-1 - i)
    samples = []
    for i in range(count):
        start = time.perf_counter()
        await fn(i)
        samples.append((time.perf_counter() - start) * 1000)
    return samples


async def measure_session(
    session: ClientSession, count: int, warmup: int, tag: str
) -> dict[str, Any]:
    async def retrieve(_: int) -> None:
        result = await session.call_tool("retrieve", {"limit": 10})
        assert not result.is_error and len(result.structured_content["facts"]) == 10

    async def remember(i: int) -> None:
        result = await session.call_tool("remember", {"text": f"{tag} fact {i}"})
        assert not result.is_error

    return {
        "retrieve": summary(await time_async(retrieve, count, warmup)),
        "remember": summary(await time_async(remember, count, warmup)),
    }


def server_args(location: str) -> list[str]:
    return ["-m", "fastaiagent.cli", "mcp", "--location", location, "--no-semantic"]


async def in_process(location: str, user: str, count: int, warmup: int) -> dict[str, Any]:
    memory = Memory(location)
    server = create_server(MemoryTools(memory, user_id=user))
    try:
        async with Client(server) as client:
            return await measure_session(client.session, count, warmup, "in-process")
    finally:
        memory.location.close()


async def over_stdio(location: str, user: str, count: int, warmup: int) -> dict[str, Any]:
    params = StdioServerParameters(
        command=sys.executable, args=[*server_args(location), "--user", user]
    )
    with open(os.devnull, "w") as errlog:
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            return await measure_session(session, count, warmup, "stdio")


def start_http(location: str, user: str) -> tuple[subprocess.Popen[str], str]:
    process = subprocess.Popen(
        [
            sys.executable,
            *server_args(location),
            "--transport",
            "http",
            "--port",
            "0",
            "--token",
            f"{TOKEN}={user}",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert process.stdout is not None
    banner = process.stdout.readline()  # printed once the port is bound
    if "/mcp" not in banner:
        process.kill()
        raise SystemExit(f"the HTTP server did not start: {banner!r}")
    return process, banner.split()[4]


async def over_http(url: str, count: int, warmup: int) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=30.0) as client,
        streamable_http_client(url, http_client=client) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        return await measure_session(session, count, warmup, "http")


def direct(memory: Memory, user: str, count: int, warmup: int) -> dict[str, Any]:
    return {
        "retrieve": summary(
            time_calls(lambda _: memory.retrieve(tier="user", id=user, limit=10), count, warmup)
        ),
        "remember": summary(
            time_calls(
                lambda i: memory.persist(f"direct fact {i}-{time.perf_counter_ns()}", "user", user),
                count,
                warmup,
            )
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="300 calls per case instead of 2,000")
    parser.add_argument("--location", help="fact store (default: a fresh SQLite file)")
    options = parser.parse_args()
    count, warmup = (300, 30) if options.quick else (2000, 100)
    location = options.location or f"sqlite:///{tempfile.mkdtemp(prefix='bench-mcp-')}/facts.db"
    user = f"bench-{uuid.uuid4().hex[:8]}"
    memory = Memory(location)
    for i in range(SEEDED):
        memory.persist(f"seeded fact {i}", "user", user)
    results: dict[str, Any] = {"location": location.split("@")[-1], "calls": count}
    try:
        results["direct"] = direct(memory, user, count, warmup)
        results["in_process"] = anyio.run(in_process, location, user, count, warmup)
        results["stdio"] = anyio.run(over_stdio, location, user, count, warmup)
        process, url = start_http(location, user)
        try:
            results["http"] = anyio.run(over_http, url, count, warmup)
        finally:
            process.terminate()
            process.wait(timeout=20)
        for transport in ("in_process", "stdio", "http"):
            for op in ("retrieve", "remember"):
                overhead = results[transport][op]["p50_ms"] - results["direct"][op]["p50_ms"]
                results[transport][op]["overhead_p50_ms"] = round(overhead, 4)
    finally:
        memory.forget(tier="user", id=user)
        memory.location.close()
    path = write_results("mcp_server_quick" if options.quick else "mcp_server", results)
    for case in ("direct", "in_process", "stdio", "http"):
        for op in ("retrieve", "remember"):
            row = results[case][op]
            extra = (
                f"  overhead p50 {row['overhead_p50_ms']:.3f} ms"
                if "overhead_p50_ms" in row
                else ""
            )
            print(
                f"{case:7s} {op:9s} p50 {row['p50_ms']:.3f} ms  p99 {row['p99_ms']:.3f} ms{extra}"
            )
    print(f"-> {path}")


if __name__ == "__main__":
    main()
