"""The Memory page's review forms: a fact's timeline, expire and delete.

Imported by :func:`fastaiagent.ui.app.create_app` once the ``ui`` extra is
checked; the route functions' ``Request`` annotations resolve here.
"""

from __future__ import annotations

import hmac
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs

from starlette.requests import Request
from starlette.responses import RedirectResponse

from fastaiagent.facts.fact import Fact
from fastaiagent.ui import views


def add_fact_pages(app: Any, site: Any) -> None:
    """A fact's timeline, and the two forms that change memory: expire and delete.

    Both need what every page needs (the token, or a loopback ``Host``) and the
    page's CSRF value; each acts on the fact's own subject only."""
    @app.get("/memory/facts/{fact_id}")
    def fact_page(fact_id: int, mask: str | None = None) -> Any:
        try:
            policy = site.policy(views.switch_on(mask))
            history = views.fact_history(site.store, fact_id, mask_with=policy)
        except Exception as exc:
            return site.failed("fact store", exc, "memory")
        if history is None:
            return site.error(404, f"No fact #{fact_id}.", "memory")
        return site.page("fact.html", active="memory", history=history, csrf=site.csrf)

    async def act(request: Request, fact_id: int, change: Callable[[Fact], object], then: str) -> Any:
        """Apply ``change`` to the fact a valid form names, then go to ``then``; else an
        error page (403 without the CSRF value, 404 for no such fact)."""
        form = parse_qs((await request.body()).decode("utf-8", "replace"))
        sent = (form.get("csrf") or [""])[0]
        if not hmac.compare_digest(sent.encode(), site.csrf.encode()):
            return site.error(403, "This form has expired or did not come from this UI: reload the page.")
        fact = site.store.get(fact_id)
        if fact is None:
            return site.error(404, f"No fact #{fact_id}.", "memory")
        try:
            change(fact)
        except Exception as exc:
            return site.failed("fact store", exc, "memory")
        return RedirectResponse(then, status_code=303)

    @app.post("/memory/facts/{fact_id}/expire")
    async def expire(request: Request, fact_id: int) -> Any:
        def change(fact: Fact) -> None:
            site.store.expire(fact.scope, fact.scope_id, fact.project_id, fact_id, time.time())

        return await act(request, fact_id, change, f"/memory/facts/{fact_id}")

    @app.post("/memory/facts/{fact_id}/delete")
    async def delete(request: Request, fact_id: int) -> Any:
        def change(fact: Fact) -> None:
            site.store.delete(fact.scope, fact.scope_id, fact.project_id, fact_id=fact_id)

        return await act(request, fact_id, change, "/memory")
