"""The Memory page's review forms: a fact's timeline, expire and delete a fact,
forget a user.

Imported by :func:`fastaiagent.ui.app.create_app` once the ``ui`` extra is
checked; the route functions' ``Request`` annotations resolve here. Every post
has passed :class:`~fastaiagent.ui.form_guard.FormGuard` (its origin, its size)
before a route reads its form.
"""

from __future__ import annotations

import hmac
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from fastaiagent._validate import id_problem
from fastaiagent.agent.forgetting import forgotten_words
from fastaiagent.facts.fact import Fact
from fastaiagent.facts.store import FactStore
from fastaiagent.facts.timeline import versions
from fastaiagent.trace.store import TraceStore
from fastaiagent.ui import views

EXPIRED_FORM = "This form has expired or did not come from this UI: reload the page."


async def read_form(request: Request, site: Any) -> dict[str, str] | Response:
    """The posted form (the first value of each field), or the 403 page when it
    does not carry this UI's CSRF value."""
    body = (await request.body()).decode("utf-8", "replace")
    form = {key: values[0] for key, values in parse_qs(body, keep_blank_values=True).items()}
    sent = form.get("csrf", "")
    if not hmac.compare_digest(sent.encode(), site.csrf.encode()):
        return site.error(403, EXPIRED_FORM)
    return form


def forget_user(store: FactStore, traces: TraceStore, user_id: str, project_id: str) -> dict[str, int]:
    """Forget ``user_id`` everywhere, as ``Memory(store).forget_user()`` does
    (facts, windows, summaries, recall, traces), and erase their runs from the
    UI's own trace store too (it may not be the default one). Returns how many of
    each kind went (see :meth:`~fastaiagent.agent.memory.Memory.forget_user`)."""
    from fastaiagent.agent.memory import Memory

    counts = Memory(store, project_id=project_id).forget_user(user_id)
    counts["traces"] = counts.get("traces", 0) + traces.erase_user(user_id)
    return counts


def forgot_message(user_id: str, project_id: str, counts: dict[str, int]) -> str:
    where = f" in project {project_id}" if project_id else ""
    return f"Forgot user {user_id}{where}: {forgotten_words(counts)} deleted."


def add_fact_pages(app: Any, site: Any) -> None:
    """A fact's timeline, and the forms that change memory: expire and delete a fact,
    forget a user.

    Each needs what every page needs (the token, or a loopback ``Host``) and the
    page's CSRF value; a fact's form acts on the fact's own subject only."""

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

    async def act(request: Request, fact_id: int, change: Callable[[Fact], str]) -> Any:
        """Apply ``change`` to the fact a valid form names and go where it says; else
        an error page (403 without the CSRF value, 404 for no such fact)."""
        form = await read_form(request, site)
        if isinstance(form, Response):
            return form
        fact = site.store.get(fact_id)
        if fact is None:
            return site.error(404, f"No fact #{fact_id}.", "memory")
        try:
            then = change(fact)
        except Exception as exc:
            return site.failed("fact store", exc, "memory")
        return RedirectResponse(then, status_code=303)

    @app.post("/memory/facts/{fact_id}/expire")
    async def expire(request: Request, fact_id: int) -> Any:
        def change(fact: Fact) -> str:
            site.store.expire(fact.scope, fact.scope_id, fact.project_id, fact_id, time.time())
            return f"/memory/facts/{fact_id}"

        return await act(request, fact_id, change)

    @app.post("/memory/facts/{fact_id}/delete")
    async def delete(request: Request, fact_id: int) -> Any:
        def change(fact: Fact) -> str:
            # The newest version left of the same fact keeps its timeline in view.
            left = [f.id for f in versions(site.store, fact_id) if f.id != fact_id]
            site.store.delete(fact.scope, fact.scope_id, fact.project_id, fact_id=fact_id)
            return f"/memory/facts/{left[0]}" if left else "/memory"

        return await act(request, fact_id, change)

    add_forget_user(app, site)


def add_forget_user(app: Any, site: Any) -> None:
    """``POST /memory/users/{user_id}/forget``: the CSRF value, ``confirm`` holding the
    user id as typed by the person, and ``project_id``; then back to /memory, saying
    how many facts were deleted."""

    @app.post("/memory/users/{user_id:path}/forget")
    async def forget(request: Request, user_id: str) -> Any:
        form = await read_form(request, site)
        if isinstance(form, Response):
            return form
        if not user_id or user_id == views.EVERY:
            return site.error(400, "Name one user to forget: the UI does not forget every user at once.")
        project = form.get("project_id", "")
        for name, value in (("the user id", user_id), ("the project id", project)):
            problem = id_problem(value)
            if problem is not None:  # the one id rule: nothing is forgotten, the reason is said
                return site.error(400, f"Nothing was forgotten: {name} {problem}.")
        if form.get("confirm", "") != user_id:
            return site.error(
                400, f"Nothing was forgotten: type the user id {user_id!r} exactly to confirm."
            )
        try:
            counts = await run_in_threadpool(forget_user, site.store, site.traces, user_id, project)
        except Exception as exc:
            return site.failed("fact store", exc, "memory")
        notice = site.notify(forgot_message(user_id, project, counts))
        return RedirectResponse(f"/memory?notice={notice}", status_code=303)
