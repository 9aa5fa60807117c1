"""Text analysis for lexical retrieval: one analyzer for indexing and querying.

Terms are lower-cased, accent-stripped Snowball stems. A document is stemmed in its own language
(detected from stopword frequencies); a query is stemmed in every language present in the
library, because a Spanish reader asks a Spanish book in Spanish but a library may mix languages.
Stopwords are dropped from queries only: documents keep them so phrase-like matches still rank.

A hyphenated word also yields its joined form (``compound_words``): "red-headed" is indexed as "red", "head"
and "redhead", so the question "Redheaded?" finds the book's "red-headed", and a question's "to-day" also
asks for "today", as a book written today spells it. Each join is one more term of its text (BM25 counts it
in the text's length: 0.2-0.9 % more terms in the novels of tests/data/longbooks and the shared Divine Comedy,
0.7 % in Treasure Island) and, being rare, weighs as rare words do; a question's hyphenated word weighs as its
parts and its joined form together.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache

import Stemmer

__all__ = ["LANGUAGES", "AnalysedQuery", "analyse_query", "compound_words", "content_words", "language_for_code",
           "detect_language", "hyphenated_words", "index_terms", "joined_form", "query_terms", "normalize",
           "word_tokens"]

_STOPWORDS: dict[str, frozenset[str]] = {
    "english": frozenset(
        "a an and are as at be been but by did do does for from had has have he her his how i if in into is it its "
        "me my not of on or our she so than that the their them then there these they this those to was we were "
        "what when where which who whom whose why will with would you your".split()
    ),
    "spanish": frozenset(
        "a al algo como con cual cuales cuando cuanto de del donde el ella ellas ellos en entre era es esa ese eso "
        "esta este esto fue fueron ha han hay la las le les lo los mas me mi muy no nos o para pero por porque que "
        "quien quienes se segun ser si sin sobre su sus tambien te tiene tu un una uno unos unas y ya yo".split()
    ),
    "italian": frozenset(
        "a ad al alla alle agli ai anche che chi ci come con cosa cui da dal dalla dei del della delle di dove e ed "
        "era erano essere fu gli ha hanno i il in io la le lo ma mi ne nel nella nei non o per perche piu qual quale "
        "quali quando quanto quanti se si sono su sua sue suo suoi tra un una uno".split()
    ),
    "french": frozenset(
        "a au aux avec ce ces dans de des du elle en est et il ils je la le les leur mais ne nous ou par pas pour "
        "qu que qui sa se ses son sont sur un une vous".split()
    ),
    "german": frozenset(
        "aber als am an auch auf aus bei das dass dem den der des die ein eine einem einen einer es fur hat ich im "
        "in ist mit nach nicht noch oder sich sie sind so und von war was wer wie wir zu zum zur".split()
    ),
    "portuguese": frozenset(
        "a ao aos as com como da das de do dos e ela ele em entre era foi isso mais mas na nas no nos o os ou para "
        "pela pelo por que quem se sem seu sua um uma".split()
    ),
}
LANGUAGES = tuple(_STOPWORDS)
_ISO = {"en": "english", "es": "spanish", "it": "italian", "fr": "french", "de": "german", "pt": "portuguese"}
_WORD = re.compile(r"\w+", re.UNICODE)
_SEPARATORS = "\u2019\u201c\u201d\u2014\u2018\u2013\u00ab\u00bb\u00bf\u00a1\u2060"
"""Punctuation that books use often and that is never part of a word (’ “ ” — ‘ – « » ¿ ¡ and the word joiner):
as spaces they cut words where ``\\w+`` does, and leave most English text ASCII. None of them changes under
``normalize`` or combines with a mark that follows it, so they can go before it."""
_ASCII_WORD_BYTES = bytes(c if _WORD.fullmatch(chr(c)) else 0x20 for c in range(128)) + b" " * 128
"""A ``bytes.translate`` table: ASCII word characters (letters, digits, underscore) kept, every other byte a space."""
_UTF8_WORD_BYTES = _ASCII_WORD_BYTES[:128] + bytes(range(128, 256))
"""The same for UTF-8 bytes: ASCII as above, and every byte of a wider character (never an ASCII byte) kept."""
_NON_ASCII_RUN = re.compile(r"[^\x00-\x7f]+")
_HYPHENS = "\u2010\u00ad"
"""Beside the hyphen-minus, what joins the parts of a compound once text is normalized: the hyphen (the
non-breaking hyphen is one under NFKD) and the soft hyphen (a line-break hint inside a word: "bed\\u00adroom" is
"bedroom"). Dashes (– —) and a doubled "--" join nothing."""
_HYPHENATED = ("-", "\u2011", "\ufe63", "\uff0d", *_HYPHENS)
"""Characters of which a text holds one if its normalized form holds a hyphen (small and full-width hyphen-minus)."""
_COMPOUND = re.compile(r"\b[^\W\d_]+(?:-[^\W\d_]+)+\b")
"""Words of letters joined by single hyphens: no digits, so "1914-1918", "555-1234" and "COVID-19" make no word."""
_MARKS_REPLACED = 16
"""Up to this many distinct combining marks are removed by one ``replace`` each (a fast scan of the text); more
(a script written with many of them) by one ``translate``, a dictionary lookup per character."""
_STOPWORD_LANGUAGES: dict[str, tuple[str, ...]] = {
    word: tuple(lang for lang, words in _STOPWORDS.items() if word in words)
    for word in frozenset().union(*_STOPWORDS.values())
}
"""Each stopword and the languages (in ``LANGUAGES`` order) whose list holds it."""
_STEM_MEMO_WORDS = 200_000
"""Distinct words a language's stem memo holds before it starts afresh (about 125 bytes each: 25 MB at most)."""


def normalize(text: str) -> str:
    """Lower-case and strip combining marks (``canción`` -> ``cancion``) so accents never block a match."""
    decomposed = unicodedata.normalize("NFKD", text.lower())
    if decomposed.isascii():  # no combining marks: the common case, without a Python step per character
        return decomposed
    marks = [ch for ch in _non_ascii_characters(decomposed) if unicodedata.combining(ch)]
    if len(marks) > _MARKS_REPLACED:
        return decomposed.translate(dict.fromkeys(map(ord, marks)))
    for mark in marks:
        decomposed = decomposed.replace(mark, "")
    return decomposed


def _non_ascii_characters(text: str) -> set[str]:
    """The distinct characters of ``text`` beyond ASCII, found without a Python step per character: books in
    Latin scripts are mostly ASCII, and a regular expression skips the ASCII runs at C speed."""
    return set("".join(_NON_ASCII_RUN.findall(text)))


def word_tokens(text: str) -> list[str]:
    """Normalized word tokens, digits kept (years and amounts matter in questions): the runs of ``\\w``.

    Text that is ASCII once normalized (most of it, after ``_SEPARATORS``) is split without the regular
    expression: its non-word bytes become spaces, and ``split`` cuts there, ten times faster (10 against 95 us
    for three passages here). Other text does the same on its UTF-8 bytes once each distinct non-ASCII
    character that is no word character has become a space (a few ``replace`` calls in a Latin-script text):
    then every run between spaces is a run of ``\\w`` (no word character is whitespace), the same tokens.
    """
    for mark in _SEPARATORS:  # first, so that normalize too finds ASCII text and skips its step per character
        if mark in text:  # no cost on ASCII text: a wider character is never in it
            text = text.replace(mark, " ")
    normalized = normalize(text)
    if normalized.isascii():
        return normalized.encode("ascii").translate(_ASCII_WORD_BYTES).decode("ascii").split()
    for character in _non_ascii_characters(normalized):
        if not _is_word_character(character):
            normalized = normalized.replace(character, " ")
    return normalized.encode().translate(_UTF8_WORD_BYTES).decode().split()


def compound_words(text: str) -> list[str]:
    """The joined form of each hyphenated word of ``text``, normalized: "Red-headed" -> "redheaded",
    "to-morrow" -> "tomorrow", "hispano-americano" -> "hispanoamericano".

    Books spell many words both ways ("to-day" in 1890, "today" since; "e-mail" and "email"), and a reader asks
    with the spelling of their own time: the joined form beside the parts lets either spelling find the other,
    in any language, without a dictionary. Its parts stay words of their own (``word_tokens``): "red-headed"
    still answers "red".
    """
    return [joined_form(word) for word in hyphenated_words(text)]


def joined_form(word: str) -> str:
    """A word of :func:`hyphenated_words` written as one ("red-headed" -> "redheaded"), for a caller that needs
    both spellings of each without reading the text twice."""
    return word.replace("-", "")


def hyphenated_words(text: str) -> list[str]:
    """The normalized words of ``text`` whose parts are joined by hyphens, each written with "-" ("red-headed").

    The pattern is tried only on the whitespace-separated pieces that hold a hyphen: a regular expression over
    a whole passage tries every letter, and tripled the cost of ``index_terms``; this adds about 10 us to a
    512-character passage that holds a hyphen, and a few ``in`` tests to one that holds none.
    """
    if not any(hyphen in text for hyphen in _HYPHENATED):
        return []
    normalized = normalize(text)
    if not normalized.isascii():
        for hyphen in _HYPHENS:
            normalized = normalized.replace(hyphen, "-")
    return [word for piece in normalized.split() if "-" in piece for word in _COMPOUND.findall(piece)]


@lru_cache(maxsize=4096)
def _is_word_character(character: str) -> bool:
    return _WORD.fullmatch(character) is not None


def language_for_code(code: str | None) -> str | None:
    """The analyzer language for an ISO code such as ``es`` or ``it-IT`` (None when unsupported)."""
    return _ISO.get((code or "")[:2].lower())


_LANGUAGE_SAMPLE = 200_000
"""Characters of a text whose stopwords say which language it is in."""


def detect_language(text: str, default: str = "english") -> str:
    """The Snowball language whose stopwords are most frequent in ``text`` (a cheap, robust guess)."""
    return _most_frequent(stopword_counts(text), default)


def _most_frequent(scores: dict[str, int], default: str) -> str:
    best = max(scores, key=scores.__getitem__)
    return best if scores[best] > 0 else default


def stopword_counts(text: str) -> dict[str, int]:
    """How many of ``text``'s words are stopwords of each language (a word counts for every language it is a
    stopword of: "de" for Spanish, French and Italian alike)."""
    return _stopword_counts(word_tokens(text[:_LANGUAGE_SAMPLE]))


def _stopword_counts(tokens: Iterable[str]) -> dict[str, int]:
    scores = dict.fromkeys(_STOPWORDS, 0)
    counts = Counter(filter(_STOPWORD_LANGUAGES.__contains__, tokens))
    for word, count in counts.items():  # each distinct stopword once, not each stopword list
        for language in _STOPWORD_LANGUAGES[word]:
            scores[language] += count
    return scores


def in_another_language(question: str | AnalysedQuery, evidence: str) -> bool:
    """Whether ``question`` is written in another language than ``evidence``: the evidence's language has at
    most half as many stopwords in the question as the question's own language. A question in English about
    an Italian book shares none of its words, which says nothing about whether the book answers it."""
    evidence_language = detect_language(evidence, default="")
    asked = question.stopwords if isinstance(question, AnalysedQuery) else stopword_counts(question)
    own = max(asked, key=asked.__getitem__)
    return (bool(evidence_language) and asked[own] > 0 and own != evidence_language
            and asked[evidence_language] * 2 <= asked[own])


class _StemMemo(dict[str, str]):
    """Stems by word; a word it lacks is stemmed where it is first looked up (``__missing__``), so looking up a
    known word costs what a dictionary's lookup costs, and a new one a call of the stemmer besides."""

    def __init__(self, stem: Callable[[str], str]) -> None:
        super().__init__()
        self._stem = stem

    def __missing__(self, word: str) -> str:
        stem = self[word] = self._stem(word)
        return stem


class _MemoStemmer:
    """A Snowball stemmer that stems each distinct word once.

    A library's words repeat (the 16,625 English passages ``bench scale`` draws from hold 1.5 M words, 37,260
    distinct ones), and a dictionary lookup costs a fifth of the stemmer's call (about 50 against 270 ns a word
    here), so ingest stems only the words it has not seen. New words keep coming, though (about 12 a document
    over ``bench ingest``'s 2,000, 2 or 3 in most chunks), so a chunk with one costs one more call per new word,
    no more (``_StemMemo``). PyStemmer's own cache is off: every word it is given is new to it, and filling (and
    emptying) a cache of words that never come again made a new word cost 2.5 instead of 0.4 us. The memo starts
    afresh once it holds more than ``_STEM_MEMO_WORDS`` words, so numbers and typos cannot grow it without bound;
    a call keeps its own reference to it, so a thread that starts it afresh never takes a word from under another.
    """

    def __init__(self, language: str) -> None:
        self._stemmer = Stemmer.Stemmer(language, 0)  # no cache of its own: it is only given words the memo lacks
        self._memo = _StemMemo(self._stemmer.stemWord)

    def stems(self, tokens: list[str]) -> list[str]:
        memo = self._memo
        if len(memo) > _STEM_MEMO_WORDS:
            memo = self._memo = _StemMemo(self._stemmer.stemWord)
        return list(map(memo.__getitem__, tokens))


@lru_cache(maxsize=16)
def _stemmer(language: str) -> _MemoStemmer:
    return _MemoStemmer(language)


def _stems(tokens: list[str], language: str) -> list[str]:
    return _stemmer(language).stems(tokens)


def index_terms(text: str, language: str) -> str:
    """The space-joined stems stored in the full-text index for ``text``: its words', then those of the joined
    forms of its hyphenated words (``compound_words``)."""
    return " ".join(_stems(word_tokens(text) + compound_words(text), language))


def content_words(text: str, languages: Iterable[str]) -> list[str]:
    """Distinct normalized words of ``text`` that are not stopwords in any of ``languages``."""
    return _content(word_tokens(text), languages)


def _content(tokens: Iterable[str], languages: Iterable[str]) -> list[str]:
    stop = frozenset().union(*(_STOPWORDS.get(lang, frozenset()) for lang in languages))
    return [t for t in dict.fromkeys(tokens) if t not in stop]


def query_terms(query: str, languages: Iterable[str]) -> list[str]:
    """Distinct stems of the query's content words in each of ``languages`` (all words if all are stopwords),
    and of the joined forms of its hyphenated words (``compound_words``)."""
    return _query_terms(word_tokens(query), compound_words(query), languages)


def _query_terms(tokens: list[str], joined: list[str], languages: Iterable[str]) -> list[str]:
    langs = list(dict.fromkeys(languages)) or ["english"]
    words = list(dict.fromkeys((_content(tokens, langs) or tokens) + joined))
    terms: list[str] = []
    for lang in langs:
        terms.extend(_stems(words, lang))
    return list(dict.fromkeys(terms))


@dataclass(frozen=True, slots=True)
class AnalysedQuery:
    """A question or search text read once, for every stage that reads it: the search's rankings and relevance,
    the extractive reader and the language checks. Made by :func:`analyse_query`; a stage given one never reads
    the text again."""

    text: str
    languages: tuple[str, ...]
    """The languages it was read in (the library's): its content words and stems are theirs."""
    tokens: tuple[str, ...]
    """:func:`word_tokens` of the text."""
    content: tuple[str, ...]
    """:func:`content_words` of the text in :attr:`languages`."""
    hyphenated: tuple[str, ...]
    """:func:`hyphenated_words` of the text."""
    terms: tuple[str, ...]
    """:func:`query_terms` of the text in :attr:`languages`: what BM25 looks for."""
    stopwords: dict[str, int] = field(compare=False)
    """:func:`stopword_counts` of the text: which language it is written in (left out of equality and hashing:
    it follows from the text)."""

    def language(self, default: str = "english") -> str:
        """:func:`detect_language` of the text."""
        return _most_frequent(self.stopwords, default)


def analyse_query(text: str, languages: Sequence[str]) -> AnalysedQuery:
    """``text`` tokenized, stemmed in each of ``languages`` and its language counted, once."""
    tokens = word_tokens(text)
    hyphenated = hyphenated_words(text)
    sample = tokens if len(text) <= _LANGUAGE_SAMPLE else word_tokens(text[:_LANGUAGE_SAMPLE])
    return AnalysedQuery(text=text, languages=tuple(languages), tokens=tuple(tokens),
                         content=tuple(_content(tokens, languages)), hyphenated=tuple(hyphenated),
                         terms=tuple(_query_terms(tokens, [joined_form(w) for w in hyphenated], languages)),
                         stopwords=_stopword_counts(sample))
