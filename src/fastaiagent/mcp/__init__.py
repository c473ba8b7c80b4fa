"""``fastaiagent mcp``: agent memory as a Model Context Protocol server.

Needs the ``mcp`` extra (the official MCP Python SDK). The tools are
remember, retrieve, update and forget over a :class:`~fastaiagent.Memory`
(``remember`` calls ``Memory.persist``, the others the verb of their name;
``recall``, the deprecated name of retrieve, is still served):

- :class:`MemoryTools` (``tools.py``): what each tool does, for the user a
  connection acts for, with the Memory verbs' guard rails;
- :func:`create_server` / :func:`http_app` (``server.py``): the SDK server,
  over stdio or streamable HTTP;
- :class:`TokenMap` (``auth.py``): bearer tokens, each acting for one user.

See ``docs/integrations.md`` for running it and a desktop host's config.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fastaiagent.mcp.auth import TokenMap, load_tokens_file, parse_token_specs
from fastaiagent.mcp.tools import MemoryTools

if TYPE_CHECKING:
    from fastaiagent.mcp.server import create_server, http_app, serve_http, serve_stdio

__all__ = [
    "MemoryTools",
    "TokenMap",
    "create_server",
    "http_app",
    "load_tokens_file",
    "parse_token_specs",
    "serve_http",
    "serve_stdio",
]
_SERVER_NAMES = ("create_server", "http_app", "serve_http", "serve_stdio")


def __getattr__(name: str) -> Any:
    # The SDK is imported on first use, so a missing extra names itself.
    if name in _SERVER_NAMES:
        from fastaiagent._optional import require

        require("mcp.server.mcpserver", "mcp")
        from fastaiagent.mcp import server

        return getattr(server, name)
    raise AttributeError(f"module 'fastaiagent.mcp' has no attribute {name!r}")
