"""Entities found in a message without an LLM, and resolved across sessions
(fastaiagent.recall.entities, fastaiagent.recall.entity_book)."""

from __future__ import annotations

import json

import pytest

from fastaiagent.errors import InvalidTypeError, InvalidValueError
from fastaiagent.kb.bm25 import tokenize
from fastaiagent.recall.entities import Mention, entity_term, mentions
from fastaiagent.recall.entity_book import EntityBook


def found(text: str, **options: object) -> dict[str, tuple[str, str | None]]:
    return {m.key: (m.kind, m.description) for m in mentions(text, **options)}  # type: ignore[arg-type]


# --- extraction -------------------------------------------------------------


def test_a_relation_names_a_person_and_what_they_are() -> None:
    assert found("I had lunch with my sister Lena yesterday.") == {"lena": ("person", "sister")}
    assert found("Lena, my sister, lives in Leeds now.")["lena"] == ("person", "sister")
    assert found("I met Lena (my sister) today") == {"lena": ("person", "sister")}
    assert found("Our dog Biscuit hates the vacuum.") == {"biscuit": ("pet", "dog")}


def test_a_naming_cue_gives_the_name_and_the_thing_it_names() -> None:
    assert found("We adopted a puppy we named Biscuit last week!") == {"biscuit": ("pet", "dog")}
    assert found("We got a kitten! We named her miso.")["miso"] == ("pet", "cat")  # lower-case after "named"
    assert "back" not in found("I called back later")  # "called" is also a phone call


def test_capitalised_names_inside_a_sentence_and_multi_word_names() -> None:
    assert set(found("I met Tom and Priya at the Bank of America office.")) == {"tom", "priya", "bank of america"}
    assert found("Thanks! I started at Acme Corp on Monday.") == {"acme corp": ("organisation", None)}
    assert found("I will ask Dr Smith.") == {"smith": ("person", None)}


def test_words_capitalised_by_their_place_are_not_names() -> None:
    assert found("Yesterday was long. Thanks for the help! Maybe Tuesday?") == {}
    assert found("I think I'll go. OK, the API is down, SELECT fails.") == {}
    assert found("Biscuit chewed through my cable.") == {}  # unknown and first: the book knows it (below)
    assert "lena" in found("Lena called. I told Lena no.")  # capitalised inside a sentence too
    assert found("Life's too short. Art's my thing.") == {}  # "'s" is "is" as often as an owner
    assert found("Whoa, your store looks great!") == {"my shop": ("place", "shop")}
    assert found("Booked Pine Hollow for the weekend.") == {"pine hollow": ("other", None)}


def test_the_words_before_a_name_tell_its_kind() -> None:
    assert found("My brother lives in Leeds and works at Acme.") == {
        "my brother": ("person", "brother"),
        "leeds": ("place", None),
        "acme": ("organisation", None),
    }
    assert found("Elle habite à Lyon.") == {"lyon": ("place", None)}
    assert found("I wrote it in Python.") == {"python": ("other", None)}


def test_code_is_not_read_for_names() -> None:
    assert found("The `AsyncSession` raised ```TooManyConnectionsError```, said Ken.") == {"ken": ("other", None)}


def test_description_alone_is_the_users_own() -> None:
    assert found("my sister called, she is stressed") == {"my sister": ("person", "sister")}
    assert found("I told Mom about it.") == {"my mother": ("person", "mother")}
    assert found("his sister called") == {}  # not the user's
    assert found("How is your dog?") == {"my dog": ("pet", "dog")}  # the agent asking the user
    mention = mentions("my dog is sick")[0]
    assert mention == Mention("my dog", "my dog", "pet", "dog") and not mention.named


def test_german_french_and_spanish() -> None:
    assert found("Meine Schwester Lena wohnt in Berlin und ich habe Hunger.") == {
        "lena": ("person", "sister"),
        "berlin": ("place", None),  # no article after "in": a place; "Hunger", "Schwester" are nouns
    }
    assert found("Mein Hund heißt Bello.")["bello"] == ("pet", "dog")
    assert found("Wir ziehen nach Leipzig, das Haus hat einen Garten.") == {"leipzig": ("place", None)}
    assert found("Ma sœur s'appelle Léa et mon chien Rex aime le parc.") == {
        "my sister": ("person", "sister"),
        "léa": ("person", "sister"),
        "rex": ("pet", "dog"),
    }
    assert found("Mi perro se llama Toby y mi hermana Ana vive en Madrid.") == {
        "my dog": ("pet", "dog"),
        "toby": ("pet", "dog"),
        "ana": ("person", "sister"),
        "madrid": ("place", None),  # "vive en": lives in
    }


def test_scripts_without_capitals_quotes_brackets_and_cues() -> None:
    assert found("我的狗叫小白，它很可爱。") == {"小白": ("pet", "dog")}
    assert found("うちにはポチという犬がいます。") == {"ポチ": ("pet", "dog")}
    assert found("最近在读《三体》。") == {"三体": ("product", None)}
    assert found('We call the project "Falcon" internally.') == {"falcon": ("project", "project")}
    assert found('She said "yes" and "whatever".') == {}  # lower-case quotes are not names


def test_bad_input_is_refused() -> None:
    with pytest.raises(InvalidTypeError):
        mentions(None)  # type: ignore[arg-type]
    assert mentions("") == []


def test_the_entity_term_never_comes_from_text() -> None:
    term = entity_term("acme corp")
    assert term == entity_term("acme corp") != entity_term("acme")
    assert term not in tokenize("acme corp e:acme_corp ent acme_corp")


# --- resolution across sessions ---------------------------------------------


def test_a_name_an_alias_and_a_description_resolve_to_one_entity() -> None:
    book = EntityBook()
    assert book.read("We adopted a puppy! We named him Biscuit.") == ["biscuit"]
    assert book.read("Biscuit chewed through my charger cable") == ["biscuit"]  # known, so first word counts
    assert book.read("The dog keeps barking at night.") == ["biscuit"]
    for query in ("what did the dog break?", "how is the puppy?", "biscuit?", "Wie geht es dem Hund?"):
        assert book.resolve(query) == {"biscuit"}, query
    assert book.resolve("what's the weather") == frozenset()


def test_my_sister_before_her_name_merges_and_stays_resolvable() -> None:
    book = EntityBook()
    assert book.read("my sister called, she is stressed about work") == ["my sister"]
    assert book.read("I had lunch with my sister Lena.") == ["lena"]
    assert book.read("Lena Novak is coming over on Friday.") == ["lena"]
    (lena,) = book.entities()
    assert (lena.id, lena.name, lena.kind, lena.descriptions) == ("lena", "Lena Novak", "person", ["sister"])
    assert lena.mentions == 3 and lena.merged == ["my sister"] and "lena novak" in lena.aliases
    # the first message carries "my sister"'s term: a query for Lena must still reach it
    assert book.resolve("what did lena say?") == {"lena", "my sister"}
    assert book.resolve("how is my sister?") == {"lena", "my sister"}


def test_a_short_german_message_is_read_as_german_by_what_the_user_wrote_before() -> None:
    book = EntityBook()
    book.read("Hallo, wir haben endlich eine neue Wohnung gefunden.")
    book.read("Meine Katze heißt Frieda und sie ist sehr scheu.")
    assert book.read("Kein Aufzug, Altbau.") == []  # too short to tell: the user's German
    assert book.read("Frieda schläft.") == ["frieda"]


def test_a_name_used_as_a_common_word_then_needs_its_capital() -> None:
    book = EntityBook()
    book.read("Our dog Biscuit loves the park.")
    assert book.resolve("did biscuit eat?") == {"biscuit"}
    book.read("I ate a biscuit with my tea.")  # also an ordinary word for this user
    assert book.resolve("did biscuit eat?") == frozenset()
    assert book.resolve("did Biscuit eat?") == {"biscuit"}


def test_two_users_books_do_not_mix_and_round_trip_through_json() -> None:
    ana, ben = EntityBook(), EntityBook()
    ana.read("My brother Tom moved to Oslo.")
    ben.read("Our cat Miso is sick.")
    assert ben.resolve("how is Tom?") == frozenset() and ana.resolve("the cat?") == frozenset()
    copy = EntityBook.from_dict(json.loads(json.dumps(ana.to_dict())))
    assert copy.to_dict() == ana.to_dict()
    assert copy.resolve("my brother") == {"tom"} and copy.read("Tom called.") == ["tom"]


def test_forgetting_an_entity_removes_its_names() -> None:
    book = EntityBook()
    book.read("I had lunch with my sister Lena.")
    book.read("Our dog Biscuit loves the park.")
    assert book.forget("lena") and not book.forget("lena")
    assert [e.id for e in book.entities()] == ["biscuit"] and book.resolve("Lena? my sister?") == frozenset()


def test_a_damaged_book_is_refused_with_a_clear_error() -> None:
    with pytest.raises(InvalidTypeError):
        EntityBook.from_dict([])
    with pytest.raises(InvalidValueError, match="version"):
        EntityBook.from_dict({"version": 99, "entities": []})
    with pytest.raises(InvalidValueError, match="kind"):
        EntityBook.from_dict({"version": 1, "entities": [{"id": "x", "kind": "alien"}]})
    with pytest.raises(InvalidValueError, match="aliases"):
        EntityBook.from_dict({"version": 1, "entities": [{"id": "x", "aliases": "y"}]})
    with pytest.raises(InvalidTypeError):
        EntityBook().observe(["lena"])  # type: ignore[list-item]


def test_a_deleted_message_releases_its_entities() -> None:
    book = EntityBook()
    first = book.read("I had lunch with my sister Lena.")
    second = book.read("Lena and Tom went hiking.")
    assert book.release(second) == ["tom"]  # Lena is still mentioned by the first message
    assert [(e.id, e.mentions) for e in book.entities()] == [("lena", 1)]
    assert book.release(first) == ["lena"] and len(book) == 0


def test_a_name_that_is_also_a_word_the_user_writes_counts_only_capitalised_inside_a_sentence() -> None:
    book = EntityBook()
    assert book.read("We played at Sounds last night.") == ["sounds"]
    assert book.read("That sounds great!") == []  # the user writes it as a word too
    assert book.read("Sounds good, see you.") == []  # a capital opening a sentence is no evidence
    assert book.resolve("what sounds good?") == frozenset()
    assert book.resolve("When did we play at Sounds?") == {"sounds"}
