"""The MCP server: :class:`MemoryTools` as Model Context Protocol tools.

Built on the official ``mcp`` SDK (``MCPServer``). Over stdio a connection
acts for the server's ``user_id``; over streamable HTTP with tokens, each
request acts for its bearer token's user (see :mod:`fastaiagent.mcp.auth`).
Expected failures (bad arguments, guard rails, an unknown fact) come back as
tool errors (``isError``) with one line that names the fix; the server keeps
serving. An argument a tool does not take is such an error too (the SDK would
drop it silently), and each tool's input schema says so
(``additionalProperties: false``).
"""

from __future__ import annotations

import functools
import logging
import socket
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.tools import Tool
from mcp_types import CallToolResult, InputRequiredResult, ToolAnnotations
from pydantic import Field

from fastaiagent import _serving
from fastaiagent._format import one_line
from fastaiagent._version import __version__
from fastaiagent.agent.deprecation import REMOVED_IN
from fastaiagent.errors import FastAIAgentError
from fastaiagent.mcp.auth import USER_SCOPE_KEY, BearerAuth, TokenMap
from fastaiagent.mcp.tools import (
    DEFAULT_RETRIEVE_LIMIT,
    DEPRECATED_TOOLS,
    MAX_RETRIEVE_LIMIT,
    TOOLS,
    Forgotten,
    MemoryTools,
    Remembered,
    Retrieved,
    Tier,
    Updated,
)

logger = logging.getLogger("fastaiagent.mcp")

SERVER_NAME = "fastaiagent-memory"
HTTP_PATH = "/mcp"
INSTRUCTIONS = (
    "Durable memory. Use retrieve before answering to read what is known about the user "
    "(tier 'user') or true for everyone (tier 'global'); remember new lasting facts; "
    "update a fact that changed instead of adding a contradicting one; forget on request."
)
# What the model reads about each tool, and the hints a host reads, in one place.
DESCRIPTIONS = {
    "remember": "Remember a durable fact. The same text again keeps its id.",
    "retrieve": "Retrieve active facts: the closest to query by meaning, or the newest without one.",
    "update": "Replace a fact that changed; the old one is kept as history and no longer retrieved.",
    "forget": "Delete a fact for good (history included), or every fact of the tier with "
    "everything=true.",
    "recall": "Deprecated: the old name of retrieve, kept so existing clients keep working "
    f"until fastaiagent {REMOVED_IN}; call retrieve instead (same arguments, same result).",
}
HINTS = {
    "remember": ToolAnnotations(idempotent_hint=True, destructive_hint=False),
    "retrieve": ToolAnnotations(read_only_hint=True),
    "update": ToolAnnotations(destructive_hint=False),
    "forget": ToolAnnotations(destructive_hint=True, idempotent_hint=True),
    "recall": ToolAnnotations(read_only_hint=True),
}
R = TypeVar("R")

TextArg = Annotated[str, Field(description="The fact, one short self-contained statement.")]
TierArg = Annotated[
    Tier, Field(description="'user': facts about this user; 'global': facts for everyone.")
]
ConfidenceArg = Annotated[float, Field(ge=0.0, le=1.0, description="How sure the fact is, 0 to 1.")]
QueryArg = Annotated[
    str | None, Field(description="Search by meaning; leave out to list the newest facts.")
]
LimitArg = Annotated[
    int, Field(ge=1, le=MAX_RETRIEVE_LIMIT, description="At most this many facts.")
]
OldArg = Annotated[
    int | str, Field(description="The fact to replace: its id (from retrieve) or its exact text.")
]


def connection_user(ctx: Context[Any, Any], default: str | None) -> str | None:
    """The user a tool call acts for: its HTTP request's token user, else ``default``."""
    request = ctx.request_context.request
    scope = getattr(request, "scope", None)
    if isinstance(scope, dict) and USER_SCOPE_KEY in scope:
        return str(scope[USER_SCOPE_KEY])
    return default


def _run(call: Callable[[], R]) -> R:
    """Run a tool body; an expected failure becomes a tool error with its one-line reason."""
    try:
        return call()
    except (FastAIAgentError, ValueError, TypeError, LookupError) as exc:
        raise ToolError(one_line(exc)) from exc


class _Acting:
    """Runs a tool body for the user of the calling connection (``fallback`` without a token)."""

    def __init__(self, fallback: str | None) -> None:
        self.fallback = fallback
        self._warned: set[str] = set()

    def __call__(self, ctx: Context[Any, Any], body: Callable[[str | None], R]) -> R:
        user = connection_user(ctx, self.fallback)
        return _run(lambda: body(user))

    def alias(self, tool: Callable[..., R], old: str) -> Callable[..., R]:
        """``tool`` under its deprecated name ``old``: the same arguments and result;
        the first call logs that the client should use the new name."""

        @functools.wraps(tool)
        def deprecated(*args: Any, **kwargs: Any) -> R:
            if old not in self._warned:
                self._warned.add(old)
                logger.warning(
                    "MCP tool %r is deprecated: clients should call %r (removed in fastaiagent %s)",
                    old, tool.__name__, REMOVED_IN,
                )  # fmt: skip
            return tool(*args, **kwargs)

        return deprecated


def unknown_arguments(tool: str, given: Any, accepted: tuple[str, ...]) -> str | None:
    """The tool error for arguments ``tool`` does not take (None when there are none):
    it names them and lists the ones it takes."""
    unknown = sorted(set(given or ()) - set(accepted))
    if not unknown:
        return None
    names = ", ".join(unknown)
    takes = ", ".join(accepted) or "no arguments"
    message = (
        f"{tool} does not take {'argument' if len(unknown) == 1 else 'arguments'} {names} "
        f"(it takes {takes}); nothing was done"
    )
    if any("user" in name.lower() for name in unknown):
        message += (
            ". The user a call acts for is the connection's (the server's --user, "
            "or the token), never an argument"
        )
    return message


class MemoryServer(MCPServer[Any]):
    """The SDK server, refusing a call that passes an argument its tool does not take.

    The SDK's argument models ignore unknown keys, so ``remember(text=...,
    user_id="bob")`` would store the fact for the connection's user as if the
    argument were honoured; here it is a tool error naming the argument, and
    nothing runs.
    """

    accepted: dict[str, tuple[str, ...]]
    """Each tool's argument names, from its input schema."""

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None = None
    ) -> CallToolResult | InputRequiredResult:
        accepted = self.accepted.get(name)
        refused = None if accepted is None else unknown_arguments(name, arguments, accepted)
        if refused is not None:
            logger.info("Tool %r refused unknown arguments: %r", name, sorted(arguments))
            raise ToolError(refused)
        return await super().call_tool(name, arguments, context)


def _tool(fn: Callable[..., Any], name: str, **options: Any) -> Tool:
    """``fn`` as a tool whose input schema admits its arguments only."""
    tool = Tool.from_function(
        fn, name=name, description=DESCRIPTIONS[name], annotations=HINTS[name], **options
    )
    tool.parameters["additionalProperties"] = False
    return tool


def create_server(tools: MemoryTools, *, name: str = SERVER_NAME) -> MCPServer[Any]:
    """An ``MCPServer`` with the remember / retrieve / update / forget tools over ``tools``,
    and ``recall``, the deprecated name of retrieve. A call with an argument its tool
    does not take is refused (see :class:`MemoryServer`)."""
    act = _Acting(tools.user_id)

    def remember(
        ctx: Context[Any, Any],
        text: TextArg,
        tier: TierArg = "user",
        confidence: ConfidenceArg = 1.0,
    ) -> Remembered:
        return act(ctx, lambda user: tools.remember(user, text, tier, confidence))

    def retrieve(
        ctx: Context[Any, Any],
        query: QueryArg = None,
        tier: TierArg = "user",
        limit: LimitArg = DEFAULT_RETRIEVE_LIMIT,
    ) -> Retrieved:
        return act(ctx, lambda user: tools.retrieve(user, query, tier, limit))

    def update(
        ctx: Context[Any, Any],
        new: TextArg,
        old: OldArg,
        tier: TierArg = "user",
        confidence: ConfidenceArg = 1.0,
    ) -> Updated:
        return act(ctx, lambda user: tools.update(user, new, old, tier, confidence))

    def forget(
        ctx: Context[Any, Any],
        tier: TierArg = "user",
        fact: Annotated[
            str | None, Field(description="The exact text of the fact to delete.")
        ] = None,
        everything: Annotated[bool, Field(description="Delete every fact of the tier.")] = False,
    ) -> Forgotten:
        return act(ctx, lambda user: tools.forget(user, tier, fact, everything))

    # Served in the order of tools.TOOLS, which --help lists (a test checks both agree).
    defined = {tool.__name__: tool for tool in (remember, retrieve, update, forget)}
    current = {name: defined[name] for name in TOOLS}
    listed = [_tool(tool, tool_name) for tool_name, tool in current.items()]
    listed += [
        _tool(act.alias(current[new], old), old, meta={"deprecated": True, "replaced_by": new})
        for old, new in DEPRECATED_TOOLS.items()
    ]
    # WARNING: the SDK configures root logging when no handler is set; INFO would log every request.
    server = MemoryServer(
        name, instructions=INSTRUCTIONS, version=__version__, log_level="WARNING", tools=listed
    )
    server.accepted = {tool.name: tuple(tool.parameters.get("properties", ())) for tool in listed}
    return server


def http_app(server: MCPServer[Any], *, host: str, tokens: TokenMap | None = None) -> Any:
    """The streamable HTTP ASGI app at ``/mcp``; with ``tokens``, every request needs one."""
    app = server.streamable_http_app(streamable_http_path=HTTP_PATH, host=host)
    return BearerAuth(app, tokens) if tokens else app


def serve_stdio(server: MCPServer[Any]) -> None:
    """Serve over stdin/stdout until the host closes the pipe."""
    server.run("stdio")


def serve_http(app: Any, sock: socket.socket) -> None:
    """Serve ``app`` (from :func:`http_app`) on a listening socket until interrupted."""
    _serving.run(app, sock)
