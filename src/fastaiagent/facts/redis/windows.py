"""Shared windows in Redis, on the fact store's client (its pool is fork-aware).

One hash per window, ``<prefix>:win:<agent>:<project>:<user>`` (parts escaped
as in the fact store) with fields ``v`` (version) and ``s`` (state). Redis
expires idle windows itself (PEXPIRE on every write). Loads and saves are
one script call each; outages raise
:class:`~fastaiagent.errors.StoreUnavailableError` (see
:func:`fastaiagent.facts.redis.client.unavailable`).
"""

from __future__ import annotations

from typing import Any

from fastaiagent._validate import text
from fastaiagent.errors import InvalidTypeError
from fastaiagent.facts.redis.client import unavailable
from fastaiagent.facts.redis.layout import escape_part, glob_escape, unescape_part
from fastaiagent.facts.redis.store import RedisFactStore
from fastaiagent.facts.windows import StoredWindow, WindowFront, WindowKey

# Returns {} when missing, {v} when the caller holds that version, else {v, s}.
_LOAD = """
local v = redis.call('HGET', KEYS[1], 'v')
if not v then return {} end
if v == ARGV[1] then return {v} end
return {v, redis.call('HGET', KEYS[1], 's')}
"""

# ARGV: expected version ('' = must not exist), new version, state, ttl ms ('0' = none).
# A retried call whose write already landed (same new version) succeeds again.
_SAVE = """
local v = redis.call('HGET', KEYS[1], 'v')
if v ~= ARGV[2] then
  if ARGV[1] == '' then
    if v then return 0 end
  elseif v ~= ARGV[1] then
    return 0
  end
end
redis.call('HSET', KEYS[1], 'v', ARGV[2], 's', ARGV[3])
if ARGV[4] ~= '0' then redis.call('PEXPIRE', KEYS[1], ARGV[4]) else redis.call('PERSIST', KEYS[1]) end
return 1
"""


class RedisWindowStore(WindowFront):
    """Windows in Redis next to a :class:`RedisFactStore`'s facts, on its client."""

    def __init__(self, store: RedisFactStore, *, prefix: str | None = None) -> None:
        if not isinstance(store, RedisFactStore):
            raise InvalidTypeError(
                f"RedisWindowStore needs a RedisFactStore, got {type(store).__name__}"
            )
        if prefix is not None:
            text("prefix", prefix)
        self.store = store
        self.prefix = escape_part(prefix, braces=store.cluster) if prefix else store.prefix
        self._client: Any = store.client
        self._load = self._client.register_script(_LOAD)
        self._save = self._client.register_script(_SAVE)

    def __repr__(self) -> str:
        return f"RedisWindowStore(prefix={self.prefix!r})"

    def _key(self, key: WindowKey) -> str:
        return ":".join((self.prefix, "win", *(escape_part(p) for p in key)))

    def load_window(self, key: WindowKey, known_version: str | None) -> StoredWindow | None:
        """The live stored window, in one script call (see :class:`WindowStore`)."""
        with unavailable("the window store"):
            found = self.store.run_script(
                self._load, [self._key(key)], [known_version or ""], write=False
            )
        if not found:
            return None
        return StoredWindow(found[0], found[1] if len(found) > 1 else None)

    def save_window(
        self, key: WindowKey, state: str, expected_version: str | None, ttl_seconds: float | None, version: str
    ) -> bool:
        """Compare-and-set write in one script call, which sets the expiry (see
        :class:`WindowStore`)."""
        ttl_ms = 0 if ttl_seconds is None else max(1, round(ttl_seconds * 1000))
        with unavailable("the window store"):
            args = [expected_version or "", version, state, ttl_ms]
            done = self.store.run_script(self._save, [self._key(key)], args)
        return int(done) == 1

    def window_keys(self, project_id: str | None = None, user_id: str | None = None) -> list[WindowKey]:
        """The keys of the live windows (of one project, of one user), sorted; found
        with SCAN, in bounded steps."""
        head = f"{self.prefix}:win:"
        tail = ":".join(glob_escape(escape_part(p)) if p is not None else "*" for p in (project_id, user_id))
        found = []
        with unavailable("the window store"):
            for name in self._client.scan_iter(match=f"{glob_escape(head)}*:{tail}", count=1000):
                parts = name[len(head) :].split(":")
                if len(parts) == 3:
                    found.append(WindowKey(*(unescape_part(p) for p in parts)))
        return sorted(found)

    def delete_window(self, key: WindowKey) -> bool:
        """Delete one window (see :class:`WindowStore`)."""
        with unavailable("the window store"):
            return bool(self._client.delete(self._key(key)))

    def delete_all(self, agent_id: str, project_id: str) -> int:
        """Delete an agent and project's windows (see :class:`WindowStore`)."""
        base = ":".join((self.prefix, "win", escape_part(agent_id), escape_part(project_id)))
        return self._delete_matching(glob_escape(base) + ":*")

    def delete_user_windows(self, project_id: str, user_id: str) -> int:
        """Delete a user's windows of every agent (see :class:`WindowStore`).

        Key parts are escaped (no raw ``:``), so ``<prefix>:win:*:<project>:<user>``
        matches exactly that user's windows, whatever the agent. SCAN walks the
        keyspace in bounded steps: no single call holds the server.
        """
        tail = ":".join((escape_part(project_id), escape_part(user_id)))
        return self._delete_matching(f"{glob_escape(self.prefix)}:win:*:{glob_escape(tail)}")

    def _delete_matching(self, pattern: str) -> int:
        count = 0
        with unavailable("the window store"):
            batch: list[str] = []
            for key in self._client.scan_iter(match=pattern, count=1000):
                batch.append(key)
                if len(batch) >= 500:
                    count += int(self._client.delete(*batch))
                    batch = []
            if batch:
                count += int(self._client.delete(*batch))
        return count
