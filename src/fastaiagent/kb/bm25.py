"""An incremental BM25 keyword index (add and remove one document at a time).

Recall indexes one message per turn and forgets chunks on demand, so the
index must change in place; libraries that rebuild the whole corpus on each
change (bm25s) would cost a full reindex per message.
"""

from __future__ import annotations

import heapq
import math
import re
import threading
from collections import Counter
from collections.abc import Iterable, Mapping

from fastaiagent._validate import fraction, number

_WORD = re.compile(r"[^\W_]+", re.UNICODE)

# Function words carry no topic; dropping them keeps "what did she do" from
# matching every turn that contains "did" and "do".
_STOPWORD_TEXT = """a about above after again against all am an and any are as at be because been before
    being below between both but by can could did do does doing down during each few for from
    further had has have having he her here hers herself him himself his how i if in into is it
    its itself just me more most my myself no nor not now of off on once only or other our ours
    ourselves out over own same she should so some such than that the their theirs them
    themselves then there these they this those through to too under until up very was we were
    what when where which while who whom why will with would you your yours yourself
    yourselves s t d ll m re ve y also oh yeah yes hey hi wow really ok okay"""
STOPWORDS = frozenset(_STOPWORD_TEXT.split())


_VOWELS = frozenset("aeiou")
_SIBILANT_ENDS = ("ss", "x", "zz", "ch", "sh")  # "boxes", "matches": the plural adds "es"


def stem(word: str) -> str:
    """A light English stemmer: the forms of a word map together ("move", "moves",
    "moved", "moving" -> "move"; "decide", "decided" -> "decid"; "plans",
    "planned" -> "plan"; "cities" -> "city"). Porter's steps in small: a plural
    or a verb ending goes, a doubled consonant it left is halved, a short stem
    it cut ("mov", "us") gets its "e" back, and a final "e" goes from a long one."""
    if len(word) <= 3:
        return word
    if word.endswith("ies") and len(word) > 4:
        return word[:-3] + "y"
    if word.endswith("s") and not word.endswith(("ss", "us", "is")):
        word = word[:-2] if word.endswith("es") and word[:-2].endswith(_SIBILANT_ENDS) else word[:-1]
    elif word.endswith(("ing", "ed")):
        word = _verb_stem(word, word[: -3 if word.endswith("ing") else -2])
    if word.endswith("e") and not word.endswith("ee") and len(word) > 4:
        word = word[:-1]
    return word


def _verb_stem(word: str, root: str) -> str:
    """``word`` without its "ing" / "ed" (``root``), or whole when too little is left."""
    if len(root) >= 4 and root[-1] == root[-2] and root[-1] not in _VOWELS and root[-1] not in "lsz":
        return root[:-1]  # "planned", "running"
    short = len(root) in (2, 3) and root[-1] not in _VOWELS and root[-1] not in "wxy"
    if short and root[-2] in _VOWELS and (len(root) == 2 or root[0] not in _VOWELS):
        return root + "e"  # "moving" -> "move", "using" -> "use"
    return root if len(root) >= 3 else word


# Han, kana and Hangul: scripts written without spaces between words (Korean has
# them between phrases), where a "word" match is a whole clause.
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]+")


def has_cjk(text: str) -> bool:
    """Whether ``text`` holds Chinese, Japanese or Korean script (tokenized as pairs)."""
    return _CJK.search(text) is not None


def tokenize(text: str) -> list[str]:
    """Lower-cased, stop-word-free, lightly stemmed word tokens; text in Chinese,
    Japanese or Korean script as overlapping character pairs (a lone character
    alone), so "伴娘是谁" and "伴娘请了我室友" share "伴娘" (stop words and stemming
    are English only: see docs/semantic.md)."""
    folded = text.casefold()
    if not _CJK.search(folded):  # the common case: one pass
        return [stem(w) for w in _WORD.findall(folded) if w not in STOPWORDS]
    tokens: list[str] = []
    for word in _WORD.findall(folded):
        last = 0
        for run in _CJK.finditer(word):
            tokens += _words(word[last : run.start()])
            chars = run.group()
            tokens += [chars] if len(chars) == 1 else [chars[i : i + 2] for i in range(len(chars) - 1)]
            last = run.end()
        tokens += _words(word[last:])
    return tokens


def _words(part: str) -> list[str]:
    return [stem(part)] if part and part not in STOPWORDS else []


K1, B = 1.2, 0.75
"""Okapi BM25's term-frequency saturation and length normalisation: the defaults of
:class:`BM25Index` and the constants the stores' postings are scored with."""


def term_gain(docs: int, df: int, k1: float = K1) -> float:
    """The weight of a query term held by ``df`` of ``docs`` documents: its idf times (k1 + 1)."""
    return (k1 + 1) * math.log(1.0 + (docs - df + 0.5) / (df + 0.5))


def length_norm(docs: int, tokens: int, k1: float = K1, b: float = B) -> tuple[float, float]:
    """``(base, slope)``: a term's count ``tf`` in a document of ``length`` terms
    scores ``gain * tf / (tf + base + slope * length)``, among ``docs`` documents of
    ``tokens`` terms in all."""
    average = tokens / docs if docs else 1.0
    return k1 * (1.0 - b), k1 * b / (average or 1.0)


class BM25Index:
    """Okapi BM25 over documents identified by string ids. Thread-safe."""

    def __init__(self, k1: float = K1, b: float = B) -> None:
        # k1 >= 0 scales term-frequency saturation; b in [0, 1] is length normalisation.
        number("k1", k1, minimum=0)
        self.k1 = float(k1)
        self.b = fraction("b", b)
        self._postings: dict[str, dict[str, int]] = {}
        self._lengths: dict[str, int] = {}
        self._terms: dict[str, list[str]] = {}
        self._total_length = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._lengths)

    def __contains__(self, doc_id: object) -> bool:
        return doc_id in self._lengths

    def add(self, doc_id: str, text: str) -> None:
        """Index (or re-index) one document."""
        counts = Counter(tokenize(text))
        with self._lock:
            self._remove(doc_id)
            for term, tf in counts.items():
                self._postings.setdefault(term, {})[doc_id] = tf
            self._terms[doc_id] = list(counts)
            length = sum(counts.values())
            self._lengths[doc_id] = length
            self._total_length += length

    def add_many(self, docs: Iterable[tuple[str, str]]) -> None:
        for doc_id, text in docs:
            self.add(doc_id, text)

    def _remove(self, doc_id: str) -> bool:
        length = self._lengths.pop(doc_id, None)
        if length is None:
            return False
        self._total_length -= length
        for term in self._terms.pop(doc_id, []):
            docs = self._postings[term]
            del docs[doc_id]
            if not docs:
                del self._postings[term]
        return True

    def remove(self, doc_id: str) -> bool:
        """Forget one document; returns whether it was indexed."""
        with self._lock:
            return self._remove(doc_id)

    def clear(self) -> None:
        with self._lock:
            self._postings.clear()
            self._lengths.clear()
            self._terms.clear()
            self._total_length = 0

    def search(self, query: str, top_k: int = 10) -> list[tuple[str, float]]:
        """The ``top_k`` best-scoring documents for ``query``, best first."""
        return self.search_terms(tokenize(query), top_k)

    def search_terms(self, query_terms: Iterable[str], top_k: int = 10) -> list[tuple[str, float]]:
        """:meth:`search` of a query already tokenized (:func:`tokenize`)."""
        terms = set(query_terms)
        with self._lock:
            if not terms or not self._lengths or top_k <= 0:
                return []
            found = {term: docs for term in terms if (docs := self._postings.get(term))}
            scores = bm25_scores(found, self._lengths, self._total_length, self.k1, self.b)
        best = heapq.nlargest(top_k, scores, key=scores.__getitem__)
        return [(doc_id, scores[doc_id]) for doc_id in best]


def bm25_scores(
    postings: Mapping[str, Mapping[str, int]], lengths: Mapping[str, int], total_length: int, k1: float, b: float
) -> dict[str, float]:
    """The BM25 score of every document holding a query term. ``postings``: each query
    term's documents and term frequency there; ``lengths``: every document's length
    in terms (their number and ``total_length`` give the inverse document frequency
    and the average length)."""
    n_docs = len(lengths)
    base, slope = length_norm(n_docs, total_length, k1, b)
    scores: dict[str, float] = {}
    for docs in postings.values():
        gain = term_gain(n_docs, len(docs), k1)
        for doc_id, tf in docs.items():
            part = gain * tf / (tf + base + slope * lengths[doc_id])
            scores[doc_id] = scores.get(doc_id, 0.0) + part
    return scores
