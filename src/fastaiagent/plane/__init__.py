"""The plane: central, curated memory served over HTTP.

:mod:`~fastaiagent.plane.client` holds :class:`PlaneConnection` (where a
plane is; pass one to a reader, or make it the process's default with
:func:`connect`), the shared HTTP client and the shared back-off;
:mod:`~fastaiagent.plane.protocol` reads a plane's answers;
:mod:`~fastaiagent.plane.server` is the self-hosted server
(``fastaiagent plane serve``). The block that injects plane facts is
:class:`fastaiagent.agent.memory_blocks.PlaneFactBlock`.
"""

from fastaiagent.plane.client import (
    PlaneConnection,
    connect,
    connection,
    disconnect,
    is_connected,
    plane_connection,
)

__all__ = [
    "PlaneConnection",
    "connect",
    "connection",
    "disconnect",
    "is_connected",
    "plane_connection",
]
