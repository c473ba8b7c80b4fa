"""The local UI: a FastAPI app rendering Jinja2 templates (no JavaScript at all)."""

from __future__ import annotations

import hmac
import logging
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from fastaiagent._optional import require
from fastaiagent.facts.factory import make_fact_store
from fastaiagent.facts.store import FactStore
from fastaiagent.trace.redaction import RedactionPolicy, get_redaction_policy
from fastaiagent.trace.store import TraceStore
from fastaiagent.ui import views

logger = logging.getLogger("fastaiagent.ui")

HERE = Path(__file__).parent
TOKEN_COOKIE = "fastaiagent_ui_token"
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1", "[::1]"})
# No scripts, no framing, nothing loaded from elsewhere.
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; "
        "base-uri 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
}


def _host_name(host_header: str) -> str:
    if host_header.startswith("["):  # [::1]:8000
        return host_header.split("]")[0] + "]"
    return host_header.rsplit(":", 1)[0] if host_header.count(":") == 1 else host_header


def _flag(value: str | None) -> bool:
    return (value or "").lower() in ("1", "true", "on", "yes")


def create_app(
    location: Any = "sqlite",
    *,
    trace_db: str | Path | None = None,
    token: str | None = None,
    redaction: RedactionPolicy | None = None,
    allowed_hosts: set[str] | frozenset[str] | None = None,
) -> Any:
    """The UI as an ASGI app.

    ``location`` is where facts live (``"sqlite"``, ``sqlite:///path``,
    ``postgres://…``, ``redis://…`` or a FactStore). ``trace_db`` is the
    local trace store (default beside the fact database). With ``token``
    every page needs it once (``?token=…``, kept in a cookie) or as
    ``Authorization: Bearer``. Without a token only loopback ``Host``
    headers are served, so another site cannot reach the UI through DNS
    rebinding. "Mask secrets" uses ``redaction``, else the installed
    policy, else the built-in patterns.
    """
    fastapi = require("fastapi", "ui")
    jinja2 = require("jinja2", "ui")
    from fastapi import Request
    from fastapi.responses import HTMLResponse, RedirectResponse, Response
    from fastapi.staticfiles import StaticFiles

    store: FactStore = make_fact_store(location)
    traces = TraceStore(trace_db)
    hosts = None if token else frozenset(allowed_hosts or LOOPBACK_HOSTS)
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(HERE / "templates")),
        autoescape=True,  # every value is escaped: a fact holding <script> renders as text
        trim_blocks=True,
        lstrip_blocks=True,
    )

    def mask_policy() -> RedactionPolicy:
        return redaction or get_redaction_policy() or RedactionPolicy.default()

    app = fastapi.FastAPI(title="fastaiagent", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.fact_store = store
    app.state.trace_store = traces
    app.mount("/static", StaticFiles(directory=str(HERE / "static")), name="static")

    def page(name: str, status: int = 200, **context: Any) -> Any:
        html = env.get_template(name).render(**context)
        return HTMLResponse(html, status_code=status)

    @app.middleware("http")
    async def guard(request: Request, call_next: Any) -> Any:
        if hosts is not None and _host_name(request.headers.get("host", "")) not in hosts:
            return Response("unknown host", status_code=400, media_type="text/plain")
        set_cookie = False
        if token and not request.url.path.startswith("/static/"):
            offered = request.query_params.get("token") or request.cookies.get(TOKEN_COOKIE) or ""
            auth = request.headers.get("authorization", "")
            if auth.lower().startswith("bearer "):
                offered = auth[7:].strip()
            if not hmac.compare_digest(offered.encode(), token.encode()):
                return Response(
                    "this UI needs its token: open the URL printed by `fastaiagent ui`",
                    status_code=401,
                    media_type="text/plain",
                )
            set_cookie = "token" in request.query_params
        response = await call_next(request)
        for key, value in SECURITY_HEADERS.items():
            response.headers.setdefault(key, value)
        if set_cookie and token:
            response.set_cookie(TOKEN_COOKIE, token, httponly=True, samesite="strict")
        return response

    @app.get("/")
    def index() -> Any:
        return RedirectResponse("/memory", status_code=303)

    @app.get("/healthz")
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/memory")
    def memory(
        scope: str = "",
        superseded: str | None = None,
        mask: str | None = None,
        page_number: int = fastapi.Query(1, alias="page"),
        per_page: int = views.PAGE_SIZE,
    ) -> Any:
        show, masked = _flag(superseded), _flag(mask)
        try:
            data = views.memory_page(
                store,
                subject=scope,
                show_superseded=show,
                mask_with=mask_policy() if masked else None,
                page=page_number,
                per_page=per_page,
            )
        except ValueError as exc:
            return page("error.html", 400, active="memory", message=str(exc))
        except Exception as exc:  # a store that is down gets a page, not a stack trace
            logger.warning("memory page: the fact store failed: %s", exc)
            return page("error.html", 503, active="memory", message=f"The fact store failed: {exc}")

        def link(**changes: Any) -> str:
            params = {"scope": scope, "superseded": "1" if show else "", "mask": "1" if masked else ""}
            params.update({k: str(v) for k, v in changes.items()})
            return "/memory?" + urlencode({k: v for k, v in params.items() if v})

        return page("memory.html", active="memory", data=data, link=link, location=_describe(store))

    @app.get("/traces")
    def traces_page(
        mask: str | None = None, page_number: int = fastapi.Query(1, alias="page")
    ) -> Any:
        masked = _flag(mask)
        rows, total, has_next = views.runs_page(
            traces, page=page_number, mask_with=mask_policy() if masked else None
        )
        return page(
            "traces.html",
            active="traces",
            rows=rows,
            total=total,
            page=max(1, page_number),
            has_next=has_next,
            mask=masked,
            store_path=str(traces.path),
        )

    @app.get("/traces/{trace_id}")
    def trace_page(trace_id: str, mask: str | None = None) -> Any:
        masked = _flag(mask)
        spans = views.trace_view(traces, trace_id, mask_with=mask_policy() if masked else None)
        if spans is None:
            return page("error.html", 404, active="traces", message=f"No trace {trace_id!r} in the local store.")
        return page("trace.html", active="traces", trace_id=trace_id, spans=spans, mask=masked)

    return app


def _describe(store: FactStore) -> str:
    path = getattr(store, "path", None)
    return f"{type(store).__name__} at {path}" if path else type(store).__name__
