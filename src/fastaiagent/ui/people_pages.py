"""The Memory page's Messages and Users tabs, and the form that deletes one message.

Imported by :func:`fastaiagent.ui.app.create_app` once the ``ui`` extra is
checked. The delete is a post with the page's CSRF value (read by
:func:`fastaiagent.ui.forms.read_form`, after
:class:`~fastaiagent.ui.form_guard.FormGuard` checked its origin and size); it
names the user, so a message id of another user deletes nothing.
"""

from __future__ import annotations

from typing import Any

from fastapi import Query
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from fastaiagent._format import one_line
from fastaiagent.recall.entity_store import delete_message
from fastaiagent.ui import people, views
from fastaiagent.ui.forms import read_form


def add_people_pages(app: Any, site: Any) -> None:
    """``GET /memory/messages``, ``POST /memory/messages/delete`` and ``GET /memory/users``."""

    @app.get("/memory/messages")
    def messages(
        user: str = Query("", max_length=600),
        project_id: str = Query("", max_length=600),
        q: str = Query("", max_length=500),
        page_number: int = Query(1, alias="page"),
        mask: str | None = None,
        notice: str = Query("", max_length=64),
    ) -> Any:
        try:
            data = people.messages_page(
                site.store, user_id=user.strip(), project_id=project_id, text=q.strip(),
                page=page_number, mask_with=site.policy(views.switch_on(mask)),
            )  # fmt: skip
        except ValueError as exc:
            return site.error(400, one_line(exc), "memory")
        except Exception as exc:  # a store that is down gets a page, not a stack trace
            return site.failed("fact store", exc, "memory")
        return site.page(
            "messages.html", active="memory", tab="messages", data=data, csrf=site.csrf,
            link=people.messages_link, notice=site.notice(notice) if notice else "",
        )  # fmt: skip

    @app.post("/memory/messages/delete")
    async def delete(request: Request) -> Any:
        form = await read_form(request, site)
        if isinstance(form, Response):
            return form
        user, project, message_id = (form.get(k, "") for k in ("user", "project_id", "message_id"))
        try:
            done = await run_in_threadpool(delete_message, site.store, user, message_id, project)
        except ValueError as exc:  # a bad id (the one id rule): nothing deleted, the reason said
            return site.error(400, f"Nothing was deleted: {one_line(exc)}.")
        except Exception as exc:
            return site.failed("fact store", exc, "memory")
        if not done:
            return site.error(404, f"User {user} has no message {message_id}.", "memory")
        notice = site.notify(f"Deleted message {message_id} of user {user}.")
        return RedirectResponse(people.messages_link(user, project, notice=notice), status_code=303)

    @app.get("/memory/users")
    def users(page_number: int = Query(1, alias="page"), mask: str | None = None) -> Any:
        masked = views.switch_on(mask)
        try:
            data = people.users_page(site.store, page=page_number, mask_with=site.policy(masked))
        except ValueError as exc:
            return site.error(400, one_line(exc), "memory")
        except Exception as exc:
            return site.failed("fact store", exc, "memory")
        return site.page("users.html", active="memory", tab="users", data=data)
