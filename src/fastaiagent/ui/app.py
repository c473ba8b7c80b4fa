"""The local UI: a FastAPI app rendering Jinja2 templates (no JavaScript at all).

Every answer is a page a person can read: a bad query parameter gets a 400
page saying which one and what it accepts, a store that fails gets a 503 page
with the reason on one line (the details go to the server log), and
``/healthz`` reads both stores, answering 503 with the reason when one fails.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import secrets
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from fastaiagent._format import MAX_REASON, one_line
from fastaiagent._optional import require
from fastaiagent.errors import StoreConfigError, StoreUnavailableError, is_configuration_error
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
    # Same-origin requests carry the page's origin (no-referrer would make a
    # browser send "Origin: null" with the UI's own forms, and those are refused);
    # no other site is ever sent a referrer.
    "Referrer-Policy": "same-origin",
    "X-Frame-Options": "DENY",
}
# What each numeric query parameter accepts, for the 400 page.
PARAMETER_RULES = {
    "page": f"a whole number from 1 to {views.MAX_PAGE_NUMBER}",
    "per_page": f"a whole number from 1 to {views.MAX_PAGE_SIZE}",
}
MAX_NOTICES = 64  # what forms did, kept until shown once; the oldest go first


def cookie_value(token: str) -> str:
    """What the UI's cookie holds for ``token``: an HMAC of it, never the token
    itself, so a cookie read from a browser cannot be used as the token (not
    as ``?token=`` nor as a bearer token, nor anywhere else it was reused); a
    new token invalidates every cookie."""
    return hmac.new(token.encode(), b"fastaiagent-ui-cookie-v1", hashlib.sha256).hexdigest()


def _host_name(host_header: str) -> str:
    if host_header.startswith("["):  # [::1]:8000
        return host_header.split("]")[0] + "]"
    return host_header.rsplit(":", 1)[0] if host_header.count(":") == 1 else host_header


def _section(path: str) -> str:
    return "traces" if path.startswith("/traces") else "memory"


@dataclass
class _Site:
    """What every route needs: the stores, the templates and the masking policy."""

    store: FactStore
    traces: TraceStore
    templates: Any
    redaction: RedactionPolicy | None
    csrf: str = ""  # the value every form that changes memory must send back
    notices: dict[str, str] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def notify(self, message: str) -> str:
        """Keep ``message`` (what a form did) for the page the form redirects to;
        returns its key, for ``?notice=``. A link cannot make up a notice."""
        key = secrets.token_urlsafe(12)
        with self.lock:
            self.notices[key] = message
            while len(self.notices) > MAX_NOTICES:
                self.notices.pop(next(iter(self.notices)))
        return key

    def notice(self, key: str) -> str:
        """The message kept under ``key``, once ("" for an unknown or shown key)."""
        with self.lock:
            return self.notices.pop(key, "")

    def policy(self, masked: bool) -> RedactionPolicy | None:
        """"Mask secrets": the app's policy, else the installed one, else the built-in patterns."""
        if not masked:
            return None
        return self.redaction or get_redaction_policy() or RedactionPolicy.default()

    def page(self, name: str, status: int = 200, **context: Any) -> Any:
        from starlette.responses import HTMLResponse

        return HTMLResponse(self.templates.get_template(name).render(**context), status_code=status)

    def error(self, status: int, message: str, active: str = "memory") -> Any:
        return self.page("error.html", status, active=active, message=message)

    def failed(self, what: str, exc: Exception, active: str) -> Any:
        """The 503 page for a store that failed (the server log keeps the details)."""
        logger.warning("%s page: the %s failed: %s", active, what, exc)
        return self.error(503, f"The {what} failed: {one_line(exc, 2 * MAX_REASON)}", active)


def check_stores(app: Any) -> None:
    """Read each of the UI's stores once (a fact by id, the newest run).

    Raises :class:`~fastaiagent.errors.StoreUnavailableError` naming the store
    that failed, with the driver's error as its cause
    (:class:`~fastaiagent.errors.StoreConfigError` when it is configured wrong).
    """
    for what, read in (
        ("fact store", lambda: app.state.fact_store.get(1)),
        ("trace store", lambda: app.state.trace_store.list_runs(limit=1)),
    ):
        try:
            read()
        except Exception as exc:  # any failure of the store is the answer here
            kind = StoreConfigError if is_configuration_error(exc) else StoreUnavailableError
            raise kind(f"the {what} failed: {one_line(exc, 2 * MAX_REASON)}") from exc


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
    every page needs it once (``?token=…``; the browser then keeps a cookie
    holding an HMAC of it, see :func:`cookie_value`) or as
    ``Authorization: Bearer``. Without a token only loopback ``Host``
    headers are served, so another site cannot reach the UI through DNS
    rebinding. "Mask secrets" uses ``redaction``, else the installed
    policy, else the built-in patterns.
    """
    fastapi = require("fastapi", "ui")
    jinja2 = require("jinja2", "ui")
    from fastapi.staticfiles import StaticFiles

    templates = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(HERE / "templates")),
        autoescape=True,  # every value is escaped: a fact holding <script> renders as text
        trim_blocks=True,
        lstrip_blocks=True,
    )
    # A fresh secret per app: a page of another origin cannot read it, so it
    # cannot forge a form post (loopback and the token do not stop that alone).
    csrf = hmac.new(secrets.token_bytes(32), b"fastaiagent-ui-csrf-v1", hashlib.sha256).hexdigest()
    site = _Site(make_fact_store(location), TraceStore(trace_db), templates, redaction, csrf)
    app = fastapi.FastAPI(title="fastaiagent", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.fact_store = site.store
    app.state.trace_store = site.traces
    app.mount("/static", StaticFiles(directory=str(HERE / "static")), name="static")
    from fastaiagent.ui.form_guard import FormGuard

    # Added first, so it runs inside the guard: Host and token are checked before it.
    app.add_middleware(FormGuard, refuse=lambda status, message: site.error(status, message))
    _add_guard(app, token, None if token else frozenset(allowed_hosts or LOOPBACK_HOSTS))
    _add_error_pages(app, site)
    _add_health(app)
    _add_memory_page(app, site)
    from fastaiagent.ui.forms import add_fact_pages  # needs the ui extra, checked above

    add_fact_pages(app, site)
    from fastaiagent.ui.people_pages import add_people_pages

    add_people_pages(app, site)
    _add_trace_pages(app, site)
    return app


def _add_guard(app: Any, token: str | None, hosts: frozenset[str] | None) -> None:
    """Loopback ``Host`` only without a token; the token once (then a cookie) with one."""
    from starlette.requests import Request
    from starlette.responses import Response

    cookie = cookie_value(token) if token else ""

    @app.middleware("http")
    async def guard(request: Request, call_next: Any) -> Any:
        if hosts is not None and _host_name(request.headers.get("host", "")) not in hosts:
            return Response("unknown host", status_code=400, media_type="text/plain")
        set_cookie = False
        if token and not request.url.path.startswith("/static/"):
            if not _admitted(request, token, cookie):
                return Response(
                    "this UI needs its token: open /?token=<token>, with the token given "
                    "to `fastaiagent ui` (--token or FASTAIAGENT_UI_TOKEN)",
                    status_code=401,
                    media_type="text/plain",
                )
            set_cookie = "token" in request.query_params
        response = await call_next(request)
        for key, value in SECURITY_HEADERS.items():
            response.headers.setdefault(key, value)
        if set_cookie:
            response.set_cookie(TOKEN_COOKIE, cookie, httponly=True, samesite="strict")
        return response


def _admitted(request: Any, token: str, cookie: str) -> bool:
    """The token as ``Authorization: Bearer`` or ``?token=``, else the cookie;
    each compared in constant time."""
    auth = request.headers.get("authorization", "")
    offered = auth[7:].strip() if auth.lower().startswith("bearer ") else request.query_params.get("token")
    if offered is not None:
        return hmac.compare_digest(offered.encode(), token.encode())
    kept = request.cookies.get(TOKEN_COOKIE) or ""
    return hmac.compare_digest(kept.encode(), cookie.encode())


def explain_invalid(errors: Any) -> str:
    """One line for FastAPI's validation errors: which parameter, what it accepts, what came."""
    first = (list(errors) or [{}])[0]
    location = first.get("loc") or ("", "parameter")
    name = str(location[-1])
    given = one_line(repr(first.get("input")), 80)
    if name in PARAMETER_RULES:
        return f"{name} must be {PARAMETER_RULES[name]}, got {given}"
    return f"{name}: {one_line(str(first.get('msg', 'invalid value')))}, got {given}"


def _add_error_pages(app: Any, site: _Site) -> None:
    """Bad parameters and unknown paths get an (escaped) HTML page, not JSON."""
    from fastapi.exceptions import RequestValidationError
    from starlette.exceptions import HTTPException
    from starlette.requests import Request

    @app.exception_handler(RequestValidationError)
    async def bad_parameter(request: Request, exc: RequestValidationError) -> Any:
        return site.error(400, explain_invalid(exc.errors()), _section(request.url.path))

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> Any:
        message = f"No page at {request.url.path}." if exc.status_code == 404 else str(exc.detail)
        response = site.error(exc.status_code, message, _section(request.url.path))
        response.headers.update(exc.headers or {})
        return response


def _add_health(app: Any) -> None:
    from starlette.responses import JSONResponse

    @app.get("/healthz")
    def healthz() -> Any:
        try:
            check_stores(app)
        except (StoreUnavailableError, StoreConfigError) as exc:
            return JSONResponse({"status": "unavailable", "reason": str(exc)}, status_code=503)
        return {"status": "ok"}


def _memory_link(scope: str, show: bool, masked: bool, text: str = "", expired: bool = False) -> Callable[..., str]:
    def link(**changes: Any) -> str:
        params = {
            "scope": scope,
            "q": text,
            "superseded": "1" if show else "",
            "expired": "1" if expired else "",
            "mask": "1" if masked else "",
        }
        params.update({k: str(v) for k, v in changes.items()})
        return "/memory?" + urlencode({k: v for k, v in params.items() if v})

    return link


def _add_memory_page(app: Any, site: _Site) -> None:
    from fastapi import Query
    from starlette.responses import RedirectResponse

    @app.get("/")
    def index() -> Any:
        return RedirectResponse("/memory", status_code=303)

    @app.get("/memory")
    def memory(
        scope: str = "",
        superseded: str | None = None,
        mask: str | None = None,
        page_number: int = Query(1, alias="page"),
        per_page: int = views.PAGE_SIZE,
        q: str = Query("", max_length=500),
        expired: str | None = None,
        notice: str = Query("", max_length=64),
    ) -> Any:
        show, masked, with_expired = (views.switch_on(v) for v in (superseded, mask, expired))
        try:
            data = views.memory_page(
                site.store,
                subject=scope,
                show_superseded=show,
                mask_with=site.policy(masked),
                page=page_number,
                per_page=per_page,
                text=q.strip(),
                show_expired=with_expired,
            )
        except ValueError as exc:  # a bad filter or page: say which
            return site.error(400, one_line(exc), "memory")
        except Exception as exc:  # a store that is down gets a page, not a stack trace
            return site.failed("fact store", exc, "memory")
        return site.page(
            "memory.html",
            active="memory",
            data=data,
            link=_memory_link(scope, show, masked, q.strip(), with_expired),
            location=_describe(site.store),
            csrf=site.csrf,
            notice=site.notice(notice) if notice else "",
        )


def _add_trace_pages(app: Any, site: _Site) -> None:
    from fastapi import Query

    @app.get("/traces")
    def traces_page(mask: str | None = None, page_number: int = Query(1, alias="page")) -> Any:
        masked = views.switch_on(mask)
        try:
            rows, total, has_next = views.runs_page(
                site.traces, page=page_number, mask_with=site.policy(masked)
            )
        except ValueError as exc:
            return site.error(400, one_line(exc), "traces")
        except Exception as exc:
            return site.failed("trace store", exc, "traces")
        return site.page(
            "traces.html",
            active="traces",
            rows=rows,
            total=total,
            page=page_number,
            has_next=has_next,
            mask=masked,
            store_path=str(site.traces.path),
        )

    @app.get("/traces/{trace_id}")
    def trace_page(trace_id: str, mask: str | None = None) -> Any:
        masked = views.switch_on(mask)
        try:
            spans = views.trace_view(site.traces, trace_id, mask_with=site.policy(masked))
        except Exception as exc:
            return site.failed("trace store", exc, "traces")
        if spans is None:
            return site.error(404, f"No trace {trace_id!r} in the local store.", "traces")
        return site.page("trace.html", active="traces", trace_id=trace_id, spans=spans, mask=masked)


def _describe(store: FactStore) -> str:
    path = getattr(store, "path", None)
    return f"{type(store).__name__} at {path}" if path else type(store).__name__
