"""Drive `fastaiagent mcp` the way an MCP host does: spawn it over stdio and call its tools.

    pip install 'fastaiagent[mcp]'
    python examples/integrations/mcp/client.py [LOCATION]

LOCATION is any --location (default: this example's own file,
``.fastaiagent-examples/mcp/memory.db`` in the current folder). The server acts
for the user given by --user; the client cannot choose another user, which
is what makes one server safe for many hosts. The user is new on every run
(``alice-<random>``), so the final ``forget`` deletes only what this run wrote.
"""

from __future__ import annotations

import sys
import uuid
from pathlib import Path

import anyio
from mcp import ClientSession, StdioServerParameters, stdio_client


def facts(result) -> list[str]:
    return [fact["text"] for fact in result.structured_content["facts"]]


async def main(location: str) -> None:
    server = StdioServerParameters(
        command=sys.executable,  # a desktop host would run the `fastaiagent` command
        args=[
            "-m",
            "fastaiagent.cli",
            "mcp",
            "--location",
            location,
            "--user",
            f"alice-{uuid.uuid4().hex[:8]}",
            "--no-semantic",
        ],
    )
    async with stdio_client(server) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        tools = await session.list_tools()
        print("tools:", ", ".join(tool.name for tool in tools.tools))

        first = await session.call_tool("remember", {"text": "Alice prefers window seats"})
        print("remembered #", first.structured_content["id"])
        print("retrieve:", facts(await session.call_tool("retrieve", {})))

        await session.call_tool(
            "update", {"new": "Alice prefers aisle seats", "old": first.structured_content["id"]}
        )
        print("after update:", facts(await session.call_tool("retrieve", {})))

        refused = await session.call_tool("retrieve", {"tier": "session"})
        print("a bad argument is a tool error:", refused.is_error)

        gone = await session.call_tool("forget", {"everything": True})
        print("forgot", gone.structured_content["deleted"], "facts (history included)")


if __name__ == "__main__":
    if len(sys.argv) > 1:
        anyio.run(main, sys.argv[1])
    else:
        folder = Path(".fastaiagent-examples") / "mcp"
        folder.mkdir(parents=True, exist_ok=True)
        anyio.run(main, f"sqlite:///{folder / 'memory.db'}")
