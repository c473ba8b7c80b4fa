"""One user's entities, resolved across sessions.

An :class:`EntityBook` learns from each stored message's mentions
(:func:`~fastaiagent.recall.entities.mentions`) which names, aliases and
descriptions belong together, and reads a query's entities back:

- a name is its entity's id ("lena"); a longer name beginning or ending with a
  known one ("Lena Novak" after "Lena") is an alias of it, and a word ending
  a known longer name ("Hollow" after "Pine Hollow") too;
- a description learned with a name ("my sister Lena", "a puppy we named
  Biscuit") is the entity's: "my sister", "the dog", "the puppy", "der Hund"
  then mean it (synonyms share a canonical description in the one table);
- "my sister" said before any name is an entity of its own ("my sister"); when a
  name later gets that description, the two merge, and the merged id stays
  resolvable, since older messages carry its term
  (:func:`~fastaiagent.recall.entities.entity_term`);
- names the book knows are found in later text wherever they stand, also where
  :func:`mentions` alone would not take them (a sentence's first word,
  "Biscuit chewed my cable"; a German message); one the user also writes as an
  ordinary word ("sounds") counts only capitalised inside a sentence.

A store calls :meth:`EntityBook.read` with each stored message's text and marks
the message with :func:`~fastaiagent.recall.entities.entity_term` of each id it
returns; :meth:`EntityBook.resolve` gives a query's ids, whose terms find those
messages in any session; :meth:`EntityBook.release` takes a deleted message's ids.

The book is plain data (:meth:`EntityBook.to_dict` / :meth:`EntityBook.from_dict`)
so a store keeps it as one JSON document per user.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fastaiagent.errors import InvalidTypeError, InvalidValueError
from fastaiagent.recall.entities import capitalises_nouns, mentions
from fastaiagent.recall.entity_text import _NO_CASE_RUN, Mention, _words, own_key
from fastaiagent.recall.words import (
    ARTICLES,
    CJK_DESCRIPTIONS,
    DESCRIPTIONS,
    DETERMINERS,
    KIND_OF,
    KINDS,
    NOT_NAMES,
    OWN_POSSESSIVES,
)

VERSION = 1
_PARTICULAR = ARTICLES | OWN_POSSESSIVES
_LONGEST_NAME = 4  # words


@dataclass
class Entity:
    """A person or thing the user talks about: its ``id`` (the key it was first
    named by), the ``name`` as written (the longest form seen), its ``kind``, the
    other keys that name it (``aliases``), what it was described as
    (``descriptions``), in how many messages it was mentioned (``mentions``), the
    book's message count when it was last mentioned (``last_seen``), and the ids
    of entities merged into it (``merged``: older messages carry their terms)."""

    id: str
    name: str
    kind: str = "other"
    aliases: list[str] = field(default_factory=list)
    descriptions: list[str] = field(default_factory=list)
    mentions: int = 0
    last_seen: int = 0
    merged: list[str] = field(default_factory=list)

    @property
    def named(self) -> bool:
        """False for a description-only entity ("my sister" before any name)."""
        return not any(self.id == own_key(d) for d in self.descriptions)


@dataclass
class EntityBook:
    """One user's entities (see the module's docstring). Not thread-safe: a store
    updates a user's book under that user's write."""

    _entities: dict[str, Entity] = field(default_factory=dict)
    _names: dict[str, str] = field(default_factory=dict)  # key or alias -> id
    _clock: int = 0
    _german: int = 0  # messages read as German, of ...
    _read: int = 0  # ... the messages :meth:`read` took (of 4 words or more)
    _capitals: set[str] = field(default_factory=set)  # names that count only capitalised

    def read(self, text: str) -> list[str]:
        """:meth:`observe` one stored message's text: its mentions read with what
        the user's earlier messages say of the language (a short German message
        does not show that its capitals are nouns). The one call a store needs."""
        german = self._nouns_capitalised(text, learn=True)
        return self.observe(mentions(text, capitalised_nouns=german, known=self._known()), text)

    def _nouns_capitalised(self, text: str, learn: bool = False) -> bool:
        german = capitalises_nouns(text)
        if learn and len(text.split()) >= 4:
            self._read += 1
            self._german += german
        return german or 2 * self._german > self._read

    def observe(self, found: list[Mention], text: str | None = None) -> list[str]:
        """Learn from one stored message's mentions (``found``, from
        :func:`mentions`); with the message's ``text``, also the known names and
        the particular descriptions ("the dog", "my sister") it holds. Returns the
        ids of the entities the message mentions, each once, to mark the message
        with (:func:`entity_term`)."""
        wrong = next((m for m in found if not isinstance(m, Mention)), None)
        if wrong is not None:
            raise InvalidTypeError(f"found must hold Mention objects, got {type(wrong).__name__}")
        self._clock += 1
        ids: list[str] = []
        for mention in sorted(found, key=lambda m: not m.named):  # names first: "my dog" may be one
            ids.append(self._named(mention) if mention.named else self._owned(mention))
        if text:
            self._learn_common_words(text)
            ids += self._names_in(text)
            ids += [e for d in _particular_descriptions(text) for e in self._described(d, every=True)[:1]]
        unique = [self._names.get(i, i) for i in dict.fromkeys(ids)]
        for entity_id in dict.fromkeys(unique):
            entity = self._entities[entity_id]
            entity.mentions += 1
            entity.last_seen = self._clock
        return list(dict.fromkeys(unique))

    def resolve(self, text: str) -> frozenset[str]:
        """The ids of the entities ``text`` (a query) mentions by name, alias or
        description, with the ids merged into them (older messages' terms)."""
        ids = set(self._names_in(text))
        for mention in mentions(text, capitalised_nouns=self._nouns_capitalised(text), known=self._known()):
            if mention.named and mention.key in self._names:
                ids.add(self._names[mention.key])
            elif mention.description:
                ids.update(self._described(mention.description, every=True))
        for described in _descriptions_in(text):
            ids.update(self._described(described, every=True))
        return frozenset(ids).union(*(self._entities[i].merged for i in ids))

    def entities(self) -> list[Entity]:
        """Every entity, most mentioned first (copies: editing them changes nothing)."""
        ordered = sorted(self._entities.values(), key=lambda e: (-e.mentions, e.id))
        return [Entity(**_as_dict(e)) for e in ordered]

    def __len__(self) -> int:
        return len(self._entities)

    def release(self, ids: list[str]) -> list[str]:
        """A stored message that mentioned ``ids`` (what :meth:`read` returned, or the
        entity terms it was marked with, read back) is gone: each entity's mention
        count drops by one, and an entity no message mentions any more is removed.
        Returns the ids removed."""
        removed = []
        for entity_id in dict.fromkeys(self._names.get(i, i) for i in ids):
            entity = self._entities.get(entity_id)
            if entity is None:
                continue
            entity.mentions -= 1
            if entity.mentions <= 0 and self.forget(entity_id):
                removed.append(entity_id)
        return removed

    def forget(self, entity_id: str) -> bool:
        """Remove one entity (and its aliases); returns whether it was there."""
        entity = self._entities.pop(self._names.get(entity_id, entity_id), None)
        if entity is None:
            return False
        self._names = {k: v for k, v in self._names.items() if v != entity.id}
        return True

    def to_dict(self) -> dict[str, Any]:
        """The book as JSON-ready data (:meth:`from_dict` reads it back)."""
        return {
            "version": VERSION,
            "clock": self._clock,
            "german": self._german,
            "read": self._read,
            "capitals": sorted(self._capitals),
            "entities": [_as_dict(e) for e in self._entities.values()],
        }

    @classmethod
    def from_dict(cls, data: Any) -> EntityBook:
        """A book from :meth:`to_dict`'s data; a clear error for anything else."""
        if not isinstance(data, dict) or not isinstance(data.get("entities"), list):
            raise InvalidTypeError("an entity book must be a dict with an 'entities' list")
        if data.get("version") != VERSION:
            raise InvalidValueError(f"entity book version {data.get('version')!r} is not {VERSION}")
        book = cls(
            _clock=_int(data.get("clock", 0), "clock"),
            _german=_int(data.get("german", 0), "german"),
            _read=_int(data.get("read", 0), "read"),
            _capitals=set(_strings(data.get("capitals", []), "capitals")),
        )
        for row in data["entities"]:
            entity = _entity(row)
            book._entities[entity.id] = entity
            for key in (entity.id, *entity.aliases, *entity.merged):
                book._names[key] = entity.id
        return book

    def _named(self, mention: Mention) -> str:
        entity_id = self._names.get(mention.key) or self._by_part(mention.key)
        if entity_id is None:
            entity_id = mention.key
            self._entities[entity_id] = Entity(entity_id, mention.surface, mention.kind)
            self._names[entity_id] = entity_id
            self._alias_first_word(mention.key, entity_id)
        entity = self._entities[entity_id]
        if mention.key != entity_id and mention.key not in entity.aliases:
            entity.aliases.append(mention.key)
            self._names[mention.key] = entity_id
            if len(mention.surface) > len(entity.name) and entity.name in mention.surface:
                entity.name = mention.surface  # "Pine Hollow" for "Hollow"
        if entity.kind == "other" and mention.kind != "other":
            entity.kind = mention.kind
        if mention.description:
            self._describe(entity, mention.description)
        return entity_id

    def _by_part(self, key: str) -> str | None:
        """The known entity a new name is part of, or that is part of it: "lena novak"
        after "lena" (unless "lena" already has a longer name of its own), "hollow"
        (a sentence's first word dropped) after "pine hollow", and the reverse."""
        words = key.split()
        if len(words) == 1:
            longer = {i for name, i in self._names.items() if name.endswith(" " + key)}
            return longer.pop() if len(longer) == 1 else None
        for part in (words[0], words[-1]):
            known = self._names.get(part)
            if known is not None and not any(" " in a for a in (known, *self._entities[known].aliases)):
                return known
        return None

    def _alias_first_word(self, key: str, entity_id: str) -> None:
        first = key.split()[0]
        if first != key and first not in self._names and first not in NOT_NAMES and len(first) > 1:
            self._entities[entity_id].aliases.append(first)
            self._names[first] = entity_id
            self._capitals.add(first)  # "Pine" for Pine Hollow; "pine" is a tree

    def _learn_common_words(self, text: str) -> None:
        """Known names used as common words count from now on only capitalised inside
        a sentence: one the user wrote with a capital, seen in lower case ("That
        sounds great" after "Summer Sounds"), or any after an article ("a biscuit")."""
        words = _words(text)
        for index, word in enumerate(words):
            entity_id = None if word.upper else self._names.get(word.fold)
            if entity_id is None or word.fold in self._capitals:
                continue
            written_capitalised = self._entities[entity_id].name[:1].isupper()
            if written_capitalised or (index and words[index - 1].fold in DETERMINERS):
                self._capitals.add(word.fold)

    def _known(self) -> _Known:
        return _Known(self._names, self._capitals)

    def _describe(self, entity: Entity, described: str) -> None:
        if described not in entity.descriptions:
            entity.descriptions.append(described)
        if entity.kind == "other":
            entity.kind = KIND_OF.get(described, "other")
        owned = self._entities.get(own_key(described))
        if owned is None or owned is entity or len(self._described(described)) > 1:
            return
        entity.mentions += owned.mentions  # "my sister" was Lena all along
        entity.merged += [owned.id, *owned.merged]
        for key, target in list(self._names.items()):
            if target == owned.id:
                self._names[key] = entity.id
        del self._entities[owned.id]

    def _owned(self, mention: Mention) -> str:
        """"my sister": the named one so described (the latest seen), else an
        entity "my sister" of its own."""
        assert mention.description is not None
        best = self._described(mention.description)
        if best:
            return best[0]
        if mention.key not in self._entities:
            self._entities[mention.key] = Entity(mention.key, mention.surface, mention.kind, [], [mention.description])
            self._names[mention.key] = mention.key
        return mention.key

    def _described(self, described: str, every: bool = False) -> list[str]:
        """Named entities with that description, latest seen first; with ``every``
        also the description-only one (last)."""
        found = sorted(
            (e for e in self._entities.values() if described in e.descriptions and (every or e.named)),
            key=lambda e: (not e.named, -e.last_seen),
        )
        return [e.id for e in found]

    def _names_in(self, text: str) -> list[str]:
        """Known names and aliases in ``text``, up to :data:`_LONGEST_NAME` words;
        a name that is also a common word only when capitalised."""
        if not self._names:
            return []
        words = _words(text)
        firsts = {name.split(" ", 1)[0] for name in self._names}
        ids: list[str] = []
        for start in range(len(words)):
            if words[start].fold not in firsts:
                continue
            for end in range(min(len(words), start + _LONGEST_NAME), start, -1):
                key = " ".join(w.fold for w in words[start:end])
                entity_id = self._names.get(key)
                common = key in NOT_NAMES or key in self._capitals
                if entity_id and (not common or (words[start].upper and not words[start].initial)):
                    ids.append(entity_id)
                    break
        if _NO_CASE_RUN.search(text):  # names in scripts without spaces: found inside the text
            ids += [i for key, i in self._names.items() if _NO_CASE_RUN.search(key) and key in text]
        return ids


class _Known:
    """The names a book knows that count when they open a sentence (not the
    common words among them), for :func:`mentions`."""

    def __init__(self, names: dict[str, str], capitals: set[str]) -> None:
        self.names, self.capitals = names, capitals

    def __contains__(self, key: object) -> bool:
        return key in self.names and key not in self.capitals


def _descriptions_in(text: str) -> set[str]:
    """Every description ``text`` uses ("the dog", "dogs", "Hund", "狗")."""
    found = {DESCRIPTIONS[w.fold][0] for w in _words(text) if w.fold in DESCRIPTIONS}
    return found | {canonical for word, (canonical, _) in CJK_DESCRIPTIONS.items() if word in text}


def _particular_descriptions(text: str) -> list[str]:
    """Descriptions after an article or a possessive ("the dog", "meine Schwester"):
    in a stored message these mean the one the user has, not dogs in general."""
    words = _words(text)
    return [
        DESCRIPTIONS[w.fold][0]
        for i, w in enumerate(words)
        if i and w.fold in DESCRIPTIONS and words[i - 1].fold in _PARTICULAR
    ]


def _as_dict(entity: Entity) -> dict[str, Any]:
    return {
        "id": entity.id, "name": entity.name, "kind": entity.kind, "aliases": list(entity.aliases),
        "descriptions": list(entity.descriptions), "mentions": entity.mentions,
        "last_seen": entity.last_seen, "merged": list(entity.merged),
    }  # fmt: skip


def _int(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidValueError(f"entity book {name} must be an int >= 0, got {value!r}")
    return value


def _strings(value: Any, name: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise InvalidValueError(f"entity {name} must be a list of non-empty strings, got {value!r}")
    return list(value)


def _entity(row: Any) -> Entity:
    if not isinstance(row, dict) or not isinstance(row.get("id"), str) or not row["id"]:
        raise InvalidValueError(f"an entity must be a dict with a non-empty 'id', got {row!r}"[:200])
    kind = row.get("kind", "other")
    if kind not in KINDS:
        raise InvalidValueError(f"entity {row['id']!r}: kind must be one of {KINDS}, got {kind!r}")
    return Entity(
        id=row["id"],
        name=str(row.get("name") or row["id"]),
        kind=kind,
        aliases=_strings(row.get("aliases", []), "aliases"),
        descriptions=_strings(row.get("descriptions", []), "descriptions"),
        mentions=_int(row.get("mentions", 0), "mentions"),
        last_seen=_int(row.get("last_seen", 0), "last_seen"),
        merged=_strings(row.get("merged", []), "merged"),
    )


__all__ = ["VERSION", "Entity", "EntityBook"]
