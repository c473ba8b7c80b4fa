"""What the Memory page's Messages and Users tabs show, computed from the fact store
(no web framework here): what an operator reads to answer "what do you hold about me?".

- **Messages**: one user's recalled messages (what ``Memory(recall="auto")`` and
  ``Memory.add_history`` stored), newest first, a page at a time, or those recall
  finds by the words searched (see :mod:`fastaiagent.facts.messages`);
- **Users**: every user the store holds facts or messages of, with both counts
  (and of the things they talk about: entities, :mod:`fastaiagent.recall.entity_store`)
  and when they were last active, linking to their facts, their messages and the
  form that forgets them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import urlencode

from fastaiagent._format import format_time
from fastaiagent._validate import identifier
from fastaiagent.facts import messages as stored
from fastaiagent.facts.store import FactStore
from fastaiagent.recall.entity_store import entity_counts, user_entities
from fastaiagent.trace.redaction import RedactionPolicy
from fastaiagent.ui.views import PAGE_SIZE, Subject, check_paging

MAX_USERS = 5000  # users read for the Users tab; more are counted, not listed


def _masked(text: str, policy: RedactionPolicy | None) -> str:
    return policy.redact(text) if policy is not None else text


def messages_link(user_id: str, project_id: str = "", **more: object) -> str:
    """The Messages tab of one user (``more``: ``q``, ``page``, ``mask``...)."""
    params = {"user": user_id, "project_id": project_id, **{k: str(v) for k, v in more.items()}}
    return "/memory/messages?" + urlencode({k: v for k, v in params.items() if v})


def facts_link(user_id: str, project_id: str = "", anchor: str = "") -> str:
    """The Facts tab filtered to one user (where the form that forgets them is)."""
    key = Subject("user", user_id, project_id).key
    return "/memory?" + urlencode({"scope": key}) + (f"#{anchor}" if anchor else "")


@dataclass
class MessageRow:
    id: str
    text: str
    who: str  # "user", "assistant (Ann)"
    said: str  # when, formatted ("" without a time)


@dataclass
class EntityRow:
    """One of the things a user talks about, as their Messages page lists them."""

    name: str
    kind: str
    aliases: str  # joined with ", "
    mentions: int


@dataclass
class MessagesPage:
    """One user's messages as the Messages tab shows them."""

    user_id: str  # "" until a user is chosen
    project_id: str
    user_label: str  # the id as shown (masked when secrets are)
    rows: list[MessageRow]
    total: int
    text: str
    page: int
    per_page: int
    has_next: bool
    mask: bool
    facts_link: str = ""
    forget_link: str = ""
    users: list[tuple[str, str]] = field(default_factory=list)  # (messages link, label)
    entities: list[EntityRow] = field(default_factory=list)


def _entity_rows(store: FactStore, user_id: str, project_id: str, policy: RedactionPolicy | None) -> list[EntityRow]:
    """The user's entities, most mentioned first (see :mod:`fastaiagent.recall.entity_store`)."""
    rows = [
        EntityRow(
            name=_masked(entity.name, policy),
            kind=entity.kind,
            aliases=_masked(", ".join(alias for alias in entity.aliases if alias != entity.name), policy),
            mentions=int(getattr(entity, "mentions", 0)),
        )
        for entity in user_entities(store, user_id, project_id)
    ]
    return sorted(rows, key=lambda row: (-row.mentions, row.name))


def _message_row(message: stored.StoredMessage, policy: RedactionPolicy | None) -> MessageRow:
    who = f"{message.role} ({message.speaker})" if message.speaker else message.role
    return MessageRow(
        id=message.id,
        text=_masked(message.text, policy),
        who=_masked(who, policy),
        said=format_time(message.created_at or 0),
    )


def messages_page(
    store: FactStore,
    *,
    user_id: str = "",
    project_id: str = "",
    text: str = "",
    page: int = 1,
    per_page: int = PAGE_SIZE,
    mask_with: RedactionPolicy | None = None,
) -> MessagesPage:
    """The Messages tab: ``user_id``'s messages newest first (``text``: those recall
    finds by these words, best first, on one page); without a user, the users who
    have messages to choose from. InvalidValueError for a bad id or page."""
    page, per_page = check_paging(page, per_page)
    project = identifier("project_id", project_id, allow_empty=True)
    empty = MessagesPage("", project, "", [], 0, text, page, per_page, False, mask_with is not None)
    if not user_id:
        empty.users = [
            (messages_link(u.user_id, u.project_id), _masked(_label(u.user_id, u.project_id), mask_with))
            for u in stored.message_users(store)[:MAX_USERS]
        ]
        return empty
    user = identifier("user", user_id)
    if text:
        found = stored.search_messages(store, user, text, project, limit=per_page + 1)
        has_next, found = False, found[:per_page]
    else:
        offset = (page - 1) * per_page
        found = stored.list_messages(store, user, project, limit=per_page + 1, offset=offset)
        has_next, found = len(found) > per_page, found[:per_page]
    return MessagesPage(
        user_id=user,
        project_id=project,
        user_label=_masked(user, mask_with),
        rows=[_message_row(m, mask_with) for m in found],
        total=stored.count_messages(store, user, project),
        text=text,
        page=page,
        per_page=per_page,
        has_next=has_next,
        mask=mask_with is not None,
        facts_link=facts_link(user, project),
        forget_link=facts_link(user, project, "forget-user"),
        entities=_entity_rows(store, user, project, mask_with),
    )


def _label(user_id: str, project_id: str) -> str:
    return f"{user_id} (project {project_id})" if project_id else user_id


@dataclass
class UserRow:
    label: str  # the id (and project) as shown
    facts: int
    messages: int
    entities: int
    last_active: str
    facts_link: str
    messages_link: str
    forget_link: str


@dataclass
class UsersPage:
    rows: list[UserRow]
    total: int
    page: int
    per_page: int
    has_next: bool
    mask: bool


def users_page(
    store: FactStore, *, page: int = 1, per_page: int = PAGE_SIZE, mask_with: RedactionPolicy | None = None
) -> UsersPage:
    """The Users tab: every user with facts (history included) or recalled messages,
    by project then id, with both counts and when they were last active (their
    newest fact or message)."""
    page, per_page = check_paging(page, per_page)
    facts = {
        (c.project_id, c.scope_id): c.count
        for c in store.subjects(include_superseded=True)
        if c.scope == "user"
    }
    said = {(u.project_id, u.user_id): u.messages for u in stored.message_users(store)}
    things = entity_counts(store)
    everyone = sorted(set(facts) | set(said))
    shown = everyone[(page - 1) * per_page : page * per_page]
    rows = [
        UserRow(
            label=_masked(_label(user, project), mask_with),
            facts=facts.get((project, user), 0),
            messages=said.get((project, user), 0),
            entities=things.get((project, user), 0),
            last_active=format_time(_last_active(store, user, project)),
            facts_link=facts_link(user, project),
            messages_link=messages_link(user, project),
            forget_link=facts_link(user, project, "forget-user"),
        )
        for project, user in shown
    ]
    has_next = len(everyone) > page * per_page
    return UsersPage(rows, len(everyone), page, per_page, has_next, mask_with is not None)


def _last_active(store: FactStore, user_id: str, project_id: str) -> float:
    """When the user's newest fact or message was recorded (0: never)."""
    newest = store.browse(
        scope="user", scope_id=user_id, project_id=project_id, include_superseded=True,
        include_expired=True, limit=1,
    )  # fmt: skip
    said = stored.list_messages(store, user_id, project_id, limit=1)
    times = [f.created_at for f in newest] + [m.created_at or 0 for m in said]
    return max(times, default=0)
