"""The local UI (``fastaiagent ui``): the Memory page and the Traces page.

Needs the ``ui`` extra (FastAPI, uvicorn, Jinja2). Pages are rendered on the
server from templates; there is no JavaScript and no build step.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fastaiagent.ui.app import create_app
    from fastaiagent.ui.server import check_bind, serve, serve_on


def __getattr__(name: str) -> Any:
    if name == "create_app":
        from fastaiagent.ui.app import create_app

        return create_app
    if name in ("serve", "serve_on", "check_bind"):
        from fastaiagent.ui import server

        return getattr(server, name)
    raise AttributeError(f"module 'fastaiagent.ui' has no attribute {name!r}")


__all__ = ["check_bind", "create_app", "serve", "serve_on"]
