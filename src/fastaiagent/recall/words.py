"""Every word of a language recall reads, in one module: the cues of a query
(:data:`WORDS`) and the words the entity reader knows (the second half).

Most of a query is read without knowing its language: its terms (the keyword
side's tokenizer), the names of the people in the conversation (whatever they
are), the question mark that ends a message that asks (ASCII, full-width and
Arabic). A few cues need words, and those words are all here, in :data:`WORDS`:
one entry per cue, one tuple of words per language. A cue in a language that is
not listed is simply not read (the query ranks as with the cue off).

Languages covered: English (``en``) for every cue; German (``de``), Chinese
(``zh``) and Japanese (``ja``) for "now" / "at first". The date phrases of
:mod:`.dates` ("yesterday", "two weeks before 11 August 2023", month names) are
English. docs/semantic.md lists the same. To read a cue in another language, add
its words to the entry: nothing else changes.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from fastaiagent._dates import MONTHS, WEEKDAYS
from fastaiagent.kb.bm25 import STOPWORDS

WORDS: Mapping[str, Mapping[str, tuple[str, ...]]] = {
    # "How do things stand now?": the later of two statements of one fact answers.
    "latest": {
        "en": ("now", "nowadays", "currently", "current", "latest", "these days", "at the moment"),
        "de": ("jetzt", "aktuell", "aktuelle", "aktueller", "aktuellen", "aktuelles", "derzeit",
               "momentan", "inzwischen", "mittlerweile"),
        "zh": ("现在", "目前", "如今", "最新"),
        "ja": ("現在",),
    },
    # "What did I originally order?": the earlier one. "first" and "before" are left
    # out: "first place", "the week before 3 June" are no such cue.
    "earliest": {
        "en": ("originally", "initially", "at first", "to begin with", "at the outset"),
        "de": ("ursprünglich", "anfangs", "zunächst", "am anfang"),
        "zh": ("一开始", "最初", "起初", "原本", "当初"),
        "ja": ("元々", "もともと"),
    },
    # "What did you suggest ...?": a question about the agent's own words.
    "about_replies": {
        "en": ("did you", "you said", "you told", "you suggested", "you recommended",
               "you mentioned", "you proposed", "you advised", "you meant"),
    },
    # Words that pair two names ("Did Jon and Gina both ..."): the query prefers neither.
    "pair": {"en": ("and", "or", "&")},
    # Words of time before a month or a year ("in May", "since 2019"): only there is a
    # month or a year a time the query points to ("the 2024 release" is content).
    "when": {
        "en": ("in", "on", "during", "since", "before", "after", "between", "until", "till", "by",
               "from", "of", "around", "through", "throughout", "early", "late", "mid", "last",
               "next", "this", "that"),
    },
    # Seasons a year completes ("summer 2022").
    "season": {"en": ("spring", "summer", "autumn", "fall", "winter")},
}


def languages() -> list[str]:
    """Every language some cue is read in (the docs list them)."""
    return sorted({language for cue in WORDS.values() for language in cue})


def words_of(cue: str) -> tuple[str, ...]:
    """Every word of ``cue``, all languages."""
    return tuple(word for words in WORDS[cue].values() for word in words)


def alternatives(cue: str) -> str:
    """The words of ``cue`` as one regex alternation, longest first (no groups)."""
    return "|".join(re.escape(w) for w in sorted(words_of(cue), key=len, reverse=True))


def pattern(cue: str) -> re.Pattern[str]:
    """A case-blind pattern for any word of ``cue``: whole words in scripts with
    spaces, anywhere in Chinese and Japanese (no spaces between words there)."""
    spaced = [w for w in words_of(cue) if w.isascii() or not _unspaced(w)]
    unspaced = [w for w in words_of(cue) if w not in spaced]
    parts = []
    if spaced:
        parts.append(r"\b(?:" + "|".join(re.escape(w) for w in sorted(spaced, key=len, reverse=True)) + r")\b")
    parts += [re.escape(w) for w in unspaced]
    return re.compile("|".join(parts), re.IGNORECASE)


def _unspaced(word: str) -> bool:
    """Whether ``word`` is written in a script without spaces between words."""
    return any("\u3040" <= ch <= "\u30ff" or "\u3400" <= ch <= "\u9fff" for ch in word)


# --- The entity reader's words (fastaiagent.recall.entities) -----------------
#
# The one table of words the entity reader knows, per language.
#
# Everything language-specific that :mod:`fastaiagent.recall.entities` uses is
# here, so a language is added in one place (docs/how-memory-works.md lists the
# languages covered: English, German, French, Spanish, and a little Chinese and
# Japanese). The rest of the reader works from the shape of text: capitals,
# quotes, word order around a name.
#
# - :data:`DESCRIPTIONS`: what a thing is called ("sister", "puppy", "Hund"),
#   each under one canonical description with its kind; synonyms share it, so
#   "the puppy" and "the dog" both mean ``dog``.
# - :data:`CUES`: the words that introduce a name ("named", "called", "heißt").
# - :data:`POSSESSIVES` and :data:`ARTICLES`: the words before a description that
#   make it a particular one ("my sister", "der Hund").
# - :data:`NOT_NAMES`: capitalised words that name nothing: pronouns, function
#   words that open sentences, greetings, days, months, times.

def _set(words: str) -> frozenset[str]:
    return frozenset(words.split())


# canonical description: (kind, the words for it in English, German, French,
# Spanish, Chinese, Japanese; plurals where a message says them often).
_DESCRIPTIONS: dict[str, tuple[str, str]] = {
    "sister": ("person", "sister sis schwester sœur soeur hermana 姐姐 妹妹"),
    "brother": ("person", "brother bro bruder frère frere hermano 哥哥 弟弟"),
    "mother": ("person", "mother mom mum mommy mummy mama mutter mutti mère mere maman madre mamá 妈妈 母亲"),
    "father": ("person", "father dad daddy papa vater vati père pere padre papá 爸爸 父亲"),
    "wife": ("person", "wife ehefrau épouse epouse esposa mujer 妻子 老婆"),
    "husband": ("person", "husband ehemann mann mari esposo marido 丈夫 老公"),
    "partner": ("person", "partner partnerin partenaire pareja"),
    "fiancé": ("person", "fiancé fiancée fiance fiancee verlobte verlobter prometido prometida"),
    "boyfriend": ("person", "boyfriend copain novio 男朋友 彼氏"),
    "girlfriend": ("person", "girlfriend freundin copine novia 女朋友 彼女"),
    "son": ("person", "son sohn fils hijo 儿子 息子"),
    "daughter": ("person", "daughter tochter fille hija 女儿"),
    "child": ("person", "child kid enfant niño niña 孩子 子供"),
    "baby": ("person", "baby bébé bebe bebé 宝宝 赤ちゃん"),
    "friend": ("person", "friend freund buddy pal bestie ami amie amigo amiga 朋友 友達"),
    "boss": ("person", "boss manager chef chefin patron patronne jefe jefa 老板 上司"),
    "colleague": ("person", "colleague coworker co-worker teammate kollege kollegin collègue collegue colega compañero compañera 同事 同僚"),
    "neighbour": ("person", "neighbour neighbor nachbar nachbarin voisin voisine vecino vecina 邻居 隣人"),
    "roommate": ("person", "roommate flatmate housemate mitbewohner mitbewohnerin colocataire coloc 室友"),
    "cousin": ("person", "cousin cousine cousin cousine primo 表哥 表姐 いとこ"),
    "aunt": ("person", "aunt auntie tante tía tia 阿姨 姑姑 叔母"),
    "uncle": ("person", "uncle onkel oncle tío tio 叔叔 舅舅 叔父"),
    "grandmother": ("person", "grandmother grandma granny nana oma grand-mère mamie abuela 奶奶 外婆 祖母"),
    "grandfather": ("person", "grandfather grandpa opa grand-père papi abuelo 爷爷 外公 祖父"),
    "niece": ("person", "niece nichte nièce sobrina"),
    "nephew": ("person", "nephew neffe neveu sobrino"),
    "teacher": ("person", "teacher tutor lehrer lehrerin professeur prof profesor profesora 老师 先生"),
    "doctor": ("person", "doctor doc physician arzt ärztin médecin medecin médico medico 医生 医者"),
    "therapist": ("person", "therapist therapeut therapeutin thérapeute terapeuta"),
    "client": ("person", "client customer kunde kundin cliente 客户"),
    "landlord": ("person", "landlord landlady vermieter vermieterin propriétaire casero casera 房东"),
    "dog": ("pet", "dog doggy doggo puppy pup hund welpe chien chiot perro perrito cachorro 狗 小狗 犬 子犬"),
    "cat": ("pet", "cat kitty kitten katze kater kätzchen chat chaton gato gatito 猫 小猫 子猫"),
    "rabbit": ("pet", "rabbit bunny hase kaninchen lapin conejo 兔子"),
    "hamster": ("pet", "hamster hámster 仓鼠"),
    "bird": ("pet", "bird parrot budgie vogel papagei oiseau perroquet pájaro loro 鹦鹉"),
    "fish": ("pet", "fish goldfish fisch poisson pez"),
    "horse": ("pet", "horse pony pferd cheval caballo"),
    "turtle": ("pet", "turtle tortoise schildkröte tortue tortuga 乌龟"),
    "city": ("place", "city town village stadt dorf ville village ciudad pueblo 城市"),
    "restaurant": ("place", "restaurant café cafe bar pub bistro kneipe cafetería 餐厅"),
    "gym": ("place", "gym fitnessstudio salle gimnasio 健身房"),
    "school": ("place", "school university college schule uni universität école ecole université escuela universidad 学校 大学"),
    "shop": ("place", "shop store bakery laden geschäft bäckerei magasin boutique tienda 商店"),
    "park": ("place", "park parc parque 公园"),
    "company": ("organisation", "company firm startup employer business firma unternehmen entreprise société societe empresa compañía 公司 会社"),
    "team": ("organisation", "team squad équipe equipe equipo 团队 チーム"),
    "band": ("organisation", "band groupe grupo 乐队 バンド"),
    "club": ("organisation", "club verein 俱乐部"),
    "app": ("product", "app application anwendung aplicación 应用"),
    "car": ("product", "car auto wagen voiture coche"),
    "phone": ("product", "phone smartphone handy téléphone telephone teléfono móvil 手机"),
    "laptop": ("product", "laptop notebook ordinateur portátil 电脑"),
    "book": ("product", "book novel buch roman livre libro"),
    "game": ("product", "game spiel jeu juego 游戏 ゲーム"),
    "show": ("product", "show series serie série film movie película 电影 电视剧"),
    "library": ("product", "library framework tool bibliothek bibliothèque biblioteca"),
    "project": ("project", "project repo repository service projekt projet proyecto 项目 プロジェクト"),
}
DESCRIPTIONS: dict[str, tuple[str, str]] = {}
"""A description word (casefolded) -> (canonical description, kind)."""
for _canonical, (_kind, _words) in _DESCRIPTIONS.items():
    for _word in _words.split():
        DESCRIPTIONS.setdefault(_word, (_canonical, _kind))
        if _word.isascii() and _word.isalpha() and not _word.endswith("s"):
            DESCRIPTIONS.setdefault(_word + "s", (_canonical, _kind))  # "my dogs"
KIND_OF = {canonical: kind for canonical, (kind, _) in _DESCRIPTIONS.items()}
"""Canonical description -> kind."""
KINDS = ("person", "pet", "place", "organisation", "product", "project", "other")
# Han / kana descriptions: text without spaces is searched for them inside its runs.
CJK_DESCRIPTIONS = {w: d for w, d in DESCRIPTIONS.items() if "\u3040" <= w[0] <= "\u9fff"}

# Words after which a name follows ("a puppy we named Biscuit", "mein Hund heißt
# Bello", "mon chat s'appelle Minou", "mi perro se llama Toby", "我的狗叫小白").
# One word, or two ("se llama"); French elisions are read without their "s'".
CUES = _set(
    "named called nicknamed nannten namens genannt heißt heisst nommé nommée appelé appelée appelle "
    "surnommé surnommée llamado llamada apodado apodada"
) | frozenset({"se llama", "me llamo", "name is", "name's"})
# After these a lower-case word is a name too ("a puppy we named biscuit"); "called"
# alone is as often a phone call ("I called back").
STRONG_CUES = _set("named nicknamed namens genannt nommé nommée llamado llamada") | {
    "se llama", "me llamo", "name is", "name's", "heißt", "heisst", "appelle",
}
CJK_CUES = ("名叫", "叫做", "取名为", "取名叫", "取名", "名字叫", "名前は", "叫")
KANA_CUES = ("という", "って名前", "と名付け", "っていう")  # Japanese: the name comes first

# A pronoun between a cue and the name is skipped: "we named him Biscuit", "nannten ihn Bello".
CUE_OBJECTS = _set("him her it them ihn sie es le la lo")
POSSESSIVES = _set(
    "my our his her their your "
    "mein meine meinem meinen meiner meines unser unsere unserem unseren unserer "
    "sein seine seinem seinen ihr ihre ihrem ihren dein deine deinem deinen "
    "mon ma mes notre nos son sa ses leur leurs ton ta tes votre vos "
    "mi mis nuestro nuestra nuestros nuestras su sus tu tus"
)
# The user's own (and, in the agent's replies, "your"): "my sister" alone is an entity,
# "his sister" alone is not.
OWN_POSSESSIVES = _set(
    "my our your mein meine meinem meinen meiner meines unser unsere unserem unseren unserer "
    "dein deine deinem deinen mon ma mes notre nos ton ta tes votre vos "
    "mi mis nuestro nuestra nuestros nuestras tu tus"
)
ARTICLES = _set("the der die das dem den des le la les el los las")
# Between a possessive and its description nothing of these: "your family and show" is no show.
CONJUNCTIONS = _set("and or but nor und oder aber sondern et ou mais ni y o pero sino")
# Before a word, these make it a common noun ("a biscuit", "the new one"): a name the
# book knows, seen so, must be capitalised to count as the name.
DETERMINERS = ARTICLES | POSSESSIVES | _set("a an some ein eine einen einem einer un une una uno unos unas")
# Words that join the parts of a proper name: "Bank of America", "Leonardo da Vinci".
CONNECTORS = _set("of de da di del van von der den la le du des")
TITLES = _set("mr mrs ms miss dr prof sir herr frau monsieur madame mme don doña sr sra")
# The two words before a name that tell its kind ("lives in Leeds", "works at Acme").
KIND_CUES = {
    **dict.fromkeys(
        ("live in", "lives in", "living in", "lived in", "moved to", "move to", "moving to", "flew to",
         "fly to", "flying to", "trip to", "born in", "wohnt in", "wohne in", "zieht nach", "ziehen nach",
         "habite à", "vit à", "vive en", "vivo en", "vivir en"),
        "place",
    ),
    **dict.fromkeys(
        ("works at", "work at", "working at", "worked at", "works for", "work for", "job at",
         "arbeitet bei", "arbeite bei", "travaille chez", "trabaja en", "trabajo en"),
        "organisation",
    ),
}  # fmt: skip
# A name after these is a place. "in" is not one ("in Python"), nor "to" ("to Lena").
PLACE_WORDS = _set("near nearby")
ORG_SUFFIXES = _set("inc ltd llc corp co gmbh ag sa sarl plc kg")

# German writes every noun with a capital: there a lone capitalised word is a name
# only with more evidence (a cue, a relation, quotes, a known name). These words,
# frequent in German and rare elsewhere, tell a German message.
GERMAN_MARKERS = _set(
    "der das und ist nicht ich wir ihr ein eine einen einem mit auf für hat habe haben mein meine "
    "heute gestern auch sehr aber noch schon sind wurde wird mir dem kein keine zwei drei vier "
    "zum zur vom beim bisher dann kann können oder bitte danke jetzt warum bei seit uns euch "
    "unser unsere doch mal gibt geht"
)
# German nouns after "in", "nach", "aus" take an article ("in der Stadt"); a capitalised
# word without one is a place ("in Pankow", "nach Leipzig"), but for these.
GERMAN_PLACE_WORDS = _set("in nach aus")
GERMAN_NOT_PLACES = _set("hause ordnung zukunft ruhe kontakt eile wirklichkeit frage")

_NOT_NAMES = """
    i i'm i've i'll i'd me my mine we us our you your he him his she her they them their it its
    this that these those there here what who whom whose which when where why how yes no not
    hi hello hey dear thanks thank please sorry ok okay oh ah wow well so but and or if then also
    just maybe perhaps still yet anyway actually honestly sure great good nice cool lol omg btw
    fyi asap tbh imo eta ps re fwd today tomorrow yesterday tonight morning evening afternoon
    night week weekend everyone everybody someone somebody anyone nobody nothing something
    ich du er sie es wir ihr mich mir dich dir uns euch man ja nein nicht danke bitte hallo
    guten morgen abend tag heute gestern morgen übermorgen aber und oder doch auch noch schon
    wenn weil dass als wie was wer wo wann warum also dann jetzt hier dort vielleicht
    der die das ein eine mein meine dein deine sein seine unser unsere
    je tu il elle nous vous ils elles moi toi lui leur oui non merci bonjour salut bonsoir
    aujourd'hui hier demain mais et ou donc alors puis quand comme pourquoi où qui quoi
    le la les un une mon ma mes ton ta notre votre c'est
    yo tú él ella nosotros vosotros ellos ellas usted sí no gracias hola buenos buenas días
    hoy ayer mañana pero y o entonces cuando como porque dónde quién qué
    el los las un una mi mis tu su nuestro nuestra
    lunes martes miércoles jueves viernes sábado domingo enero febrero marzo abril mayo junio
    julio agosto septiembre octubre noviembre diciembre
    montag dienstag mittwoch donnerstag freitag samstag sonntag januar februar märz mai juni
    juli oktober dezember lundi mardi mercredi jeudi vendredi samedi dimanche janvier février
    mars avril juin juillet août septembre octobre novembre décembre
    true false none null nan undefined
    mondays tuesdays wednesdays thursdays fridays saturdays sundays let let's
    mon tue wed thu fri sat sun jan feb mar apr jun jul aug sep sept oct nov dec
    spring summer autumn fall winter christmas easter
"""
NOT_NAMES = frozenset(_NOT_NAMES.split()) | STOPWORDS | frozenset(MONTHS) | frozenset(WEEKDAYS)
"""Casefolded words never taken as a name on their own."""

# How a learned fact names the user it is about (the extraction prompt asks for
# "The user ..."): read as the user's own "my" ("The user's sister Lena" -> "my
# sister Lena"), so the fact feeds their entities as their messages do.
_USER_POSSESSIVE = re.compile(r"\b(?:the\s+)?user(?:'|’)s\b", re.IGNORECASE)


def as_said_by_user(fact: str) -> str:
    """A learned fact's text as the user would say it: "The user's X" -> "my X"."""
    return _USER_POSSESSIVE.sub("my", fact)


__all__ = [
    "ARTICLES",
    "CJK_CUES",
    "CJK_DESCRIPTIONS",
    "CONJUNCTIONS",
    "CONNECTORS",
    "CUES",
    "CUE_OBJECTS",
    "DESCRIPTIONS",
    "DETERMINERS",
    "GERMAN_MARKERS",
    "GERMAN_NOT_PLACES",
    "GERMAN_PLACE_WORDS",
    "KANA_CUES",
    "KINDS",
    "KIND_CUES",
    "KIND_OF",
    "NOT_NAMES",
    "ORG_SUFFIXES",
    "OWN_POSSESSIVES",
    "PLACE_WORDS",
    "POSSESSIVES",
    "STRONG_CUES",
    "TITLES",
    "WORDS",
    "alternatives",
    "as_said_by_user",
    "languages",
    "pattern",
    "words_of",
]
