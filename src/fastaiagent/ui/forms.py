"""The Memory page's review forms: a fact's timeline, expire and delete.

Imported by :func:`fastaiagent.ui.app.create_app` once the ``ui`` extra is
checked; the route functions' ``Request`` annotations resolve here.
"""

from __future__ import annotations

import hmac
import time
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

    async def checked(request: Request, fact_id: int) -> Any:
        """The fact a valid form names, or an error page (403 without the CSRF value)."""
        form = parse_qs((await request.body()).decode("utf-8", "replace"))
        sent = (form.get("csrf") or [""])[0]
        if not hmac.compare_digest(sent.encode(), site.csrf.encode()):
            return site.error(403, "This form has expired or did not come from this UI: reload the page.")
        fact = site.store.get(fact_id)
        if fact is None:
            return site.error(404, f"No fact #{fact_id}.", "memory")
        return fact

    @app.post("/memory/facts/{fact_id}/expire")
    async def expire(request: Request, fact_id: int) -> Any:
        fact = await checked(request, fact_id)
        if not isinstance(fact, Fact):
            return fact
        try:
            site.store.expire(fact.scope, fact.scope_id, fact.project_id, fact_id, time.time())
        except Exception as exc:
            return site.failed("fact store", exc, "memory")
        return RedirectResponse(f"/memory/facts/{fact_id}", status_code=303)

    @app.post("/memory/facts/{fact_id}/delete")
    async def delete(request: Request, fact_id: int) -> Any:
        fact = await checked(request, fact_id)
        if not isinstance(fact, Fact):
            return fact
        try:
            site.store.delete(fact.scope, fact.scope_id, fact.project_id, fact_id=fact_id)
        except Exception as exc:
            return site.failed("fact store", exc, "memory")
        return RedirectResponse("/memory", status_code=303)
