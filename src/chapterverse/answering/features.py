"""The numbers the reader's model sees for each candidate sentence (:data:`FEATURES`).

Three kinds of evidence: *meaning* (cosine of question and sentence vectors, from the library's own
embedder), *words* (how much of the question's weight, each term weighted by its rarity in the library,
the sentence and its neighbours hold, and how much the sentence adds beyond the question), and *answer
type* (a who-question wants a name the question does not contain, a when-question a date, how-many a
number, where a place, why a cause; "Who is X?" wants "X, the ..." or "X was a ..."). The model ranks one
question's candidates with a softmax, so a feature's level shared by all of them carries no information
there; the confidence model (:mod:`.model`) is the one that reads absolute levels.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from functools import lru_cache

import numpy as np

from ..analysis import content_words, joined_form, word_tokens
from .question import Question, reader_terms
from .sentences import Candidate, definition_pattern

__all__ = ["FEATURES", "NUMBER_WORDS", "TIME_WORDS", "text_stems", "question_names", "absent_names", "sentence_features", "question_coverage",
           "missing_words", "missing_names", "evidence_words"]

SIMILAR_SENTENCES = 5
"""The sentences, closest to the question by cosine, whose words stand in for a missing question word."""

FEATURES: tuple[str, ...] = (
    "cos",  # cosine of question and sentence
    "overlap",  # rarity-weighted share of the question's terms in the sentence
    "prefix_overlap",  # the same over five-letter stem prefixes (inflections, cognates)
    "window_overlap",  # the same over the sentence and its neighbours in the paragraph
    "phrase_overlap",  # share of the question's word pairs found as pairs in the sentence and its neighbours
    "before_overlap",  # overlap of the sentence before it (the answer often follows the question's words)
    "after_overlap",  # overlap of the sentence after it
    "novel",  # log(1 + content words the question does not contain)
    "repeat",  # share of the sentence's content words that are the question's
    "passage_rank",  # 1 / (1 + place of its passage in the retrieval ranking)
    "passage_cos",  # cosine of question and its passage
    "length",  # log of the sentence's characters, over log(200)
    "first_in_paragraph",
    "dialogue",  # the sentence opens with a quotation mark or dash
    "who_name",  # who- or name-question and the sentence names someone the question does not
    "when_time",  # when-question and the sentence holds a date or time expression
    "number_number",  # how-many question and the sentence holds a number
    "where_place",  # where-question and the sentence holds a place phrase
    "why_cause",  # why-question and the sentence holds a cause or purpose marker
    "definition",  # "Who/What is X?" and the sentence defines X ("X, the ...", "X was a ...")
    "subject_first",  # "Who/What is X?" and X is among the sentence's first words
)

NUMBER_WORDS = frozenset(
    "one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen seventeen "
    "eighteen nineteen twenty thirty forty fifty sixty seventy eighty ninety hundred thousand million billion dozen "
    "score half once twice first second third uno dos tres cuatro cinco seis siete ocho nueve diez once doce quince "
    "veinte treinta cuarenta cincuenta cien ciento mil millon millones due tre quattro cinque sei sette otto nove "
    "dieci undici dodici quindici venti trenta quaranta cinquanta cento mille milioni deux trois quatre cinq sept huit "
    "neuf dix onze douze quinze vingt trente quarante cinquante cent zwei drei vier funf sechs sieben acht neun zehn "
    "elf zwolf zwanzig dreißig hundert tausend".split())
TIME_WORDS = frozenset(
    "january february march april may june july august september october november december monday tuesday "
    "wednesday thursday friday saturday sunday morning evening night midnight noon dawn dusk day days week weeks "
    "month months year years century winter summer spring autumn after before until when once then later ago "
    "enero febrero marzo abril mayo junio julio agosto septiembre octubre noviembre diciembre siglo ano anos dia "
    "noche manana despues antes cuando gennaio febbraio aprile maggio giugno luglio settembre ottobre novembre "
    "dicembre secolo anno anni giorno notte mattina dopo prima".split())
_CAUSE = re.compile(r"\b(because|since|so that|in order to|so as to|for fear|as a result|due to|therefore|so|"
                    r"porque|ya que|pues|debido|para que|por eso|perche|poiche|siccome|affinche|dato che|percio)\b")
_PLACE = re.compile(r"\b(in|at|into|near|under|beside|behind|inside|on|over|from|to|across|through|en|dentro|"
                    r"junto|cerca|bajo|nel|nella|sotto|presso|vicino)\s+(the|a|an|his|her|their|el|la|los|las|"
                    r"il|lo|[A-Z]\w+)\b")
_DIGIT = re.compile(r"\d")
_CAPITALISED = re.compile(r"\b[A-ZÀ-ÖØ-Þ][\w'’-]+")
_NAME_IN_QUESTION = re.compile(r"(?<!^)(?<![.?!¿¡]\s)\b[A-ZÀ-ÖØ-Þ][\w'’-]+")
"""A capitalised word that does not open the question (or a sentence in it): a name, most likely."""
_PREFIX = 5


@lru_cache(maxsize=8192)
def text_stems(text: str, languages: tuple[str, ...]) -> frozenset[str]:
    """The stems of ``text`` (cached: a sentence is also its neighbours' neighbour, and questions repeat)."""
    return frozenset(reader_terms(text, languages)) if text else frozenset()


_Compounds = tuple[tuple[frozenset[str], frozenset[str]], ...]


@lru_cache(maxsize=1024)
def _compounds(hyphenated: tuple[str, ...], languages: tuple[str, ...]) -> _Compounds:
    """Per hyphenated word of a question (``AnalysedQuery.hyphenated``), the stems of its joined form and those
    of the whole word (parts and joined form): see :func:`_whole_words`."""
    return tuple((text_stems(joined_form(word), languages), text_stems(word, languages)) for word in hyphenated)


def _whole_words(stems: frozenset[str], compounds: _Compounds) -> frozenset[str]:
    """``stems`` and, where they hold either spelling of a question's hyphenated word, all of its stems: a book
    that writes "redheaded" holds the whole of the question's "red-headed", not a third of it, and one that holds
    the parts of French "sort-elle" lacks nothing because no book writes "sortelle"."""
    for joined, whole in compounds:
        parts = whole - joined
        if joined & stems or (parts and parts <= stems):
            stems = stems | whole
    return stems


@lru_cache(maxsize=8192)
def _tokens(text: str) -> tuple[str, ...]:
    """Normalized words of a sentence (cached: accent folding is the slow part of reading a sentence)."""
    return tuple(word_tokens(text))


@lru_cache(maxsize=8192)
def _content(text: str, languages: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(content_words(text, languages))


@lru_cache(maxsize=8192)
def _pairs(text: str, languages: tuple[str, ...]) -> frozenset[tuple[str, str]]:
    """Consecutive content words of ``text``, each cut to its first five letters (a stemmer for any
    language): "rekindled the fire" and "rekindle a fire" share the pair ("rekin", "fire")."""
    return _word_pairs(_tokens(text), _content(text, languages))


def _word_pairs(tokens: Sequence[str], content: Sequence[str]) -> frozenset[tuple[str, str]]:
    """:func:`_pairs` of a text read already: its tokens and its content words."""
    kept = set(content)
    words = [w[:_PREFIX] for w in tokens if w in kept]
    return frozenset(zip(words, words[1:]))


def sentence_features(question: Question, candidates: Sequence[Candidate], cosines: np.ndarray,
                      rarity: Mapping[str, float], languages: Sequence[str]) -> np.ndarray:
    """One row of :data:`FEATURES` per candidate (float64); ``rarity``: each question term's weight (1.0 for a
    term it lacks)."""
    terms = list(question.terms)
    weights = {t: rarity.get(t, 1.0) for t in terms}
    total = sum(weights.values()) or 1.0
    prefix_weights: dict[str, float] = {}
    for t, w in weights.items():
        prefix_weights[t[:_PREFIX]] = max(prefix_weights.get(t[:_PREFIX], 0.0), w)
    prefix_total = sum(prefix_weights.values()) or 1.0
    rows = []
    langs = tuple(languages)
    question_pairs = _word_pairs(question.query.tokens, question.query.content)
    compounds = _compounds(question.query.hyphenated, langs)
    for cand, cos in zip(candidates, cosines.tolist()):
        stems, before, after = (_whole_words(text_stems(t, langs), compounds)
                                for t in (cand.text, cand.before, cand.after))
        window = stems | before | after
        pairs = _pairs(cand.before, langs) | _pairs(cand.text, langs) | _pairs(cand.after, langs)
        prefixes = {s[:_PREFIX] for s in stems}
        words = _content(cand.text, langs)
        novel = [w for w in words if w not in question.words]
        rows.append([
            cos,
            sum(w for t, w in weights.items() if t in stems) / total,
            sum(w for p, w in prefix_weights.items() if p in prefixes) / prefix_total,
            sum(w for t, w in weights.items() if t in window) / total,
            len(question_pairs & pairs) / max(len(question_pairs), 1),
            sum(w for t, w in weights.items() if t in before) / total,
            sum(w for t, w in weights.items() if t in after) / total,
            math.log1p(len(novel)), 1 - len(novel) / max(len(words), 1),
            1.0 / (1 + cand.rank), cand.hit.dense,
            math.log(max(len(cand.text), 2)) / math.log(200),
            float(cand.first_in_paragraph), float(cand.text.lstrip()[:1] in "\"“«‘'—–-"),
            *_answer_type(question, cand.text),
        ])
    return np.asarray(rows, dtype=np.float64).reshape(len(rows), len(FEATURES))


def _answer_type(question: Question, sentence: str) -> list[float]:
    """who_name, when_time, number_number, where_place, why_cause, definition, subject_first."""
    kind = question.kind
    tokens = _tokens(sentence)
    names = [m.group(0) for m in _CAPITALISED.finditer(sentence) if m.start() > 0]
    new_name = any(word_tokens(n)[0] not in question.words for n in names if word_tokens(n))
    has_number = bool(_DIGIT.search(sentence)) or any(t in NUMBER_WORDS for t in tokens)
    has_time = bool(re.search(r"\b1\d{3}\b|\b20\d{2}\b", sentence)) or any(t in TIME_WORDS for t in tokens)
    definition, subject_first = _definition(question, tokens, sentence)
    return [
        float(kind in ("who", "name") and new_name),
        float(kind == "when" and has_time),
        float(kind == "number" and has_number),
        float(kind == "where" and bool(_PLACE.search(sentence))),
        float(kind == "why" and bool(_CAUSE.search(" ".join(tokens)))),
        definition, subject_first,
    ]


def _definition(question: Question, tokens: Sequence[str], sentence: str) -> tuple[float, float]:
    """Whether the sentence introduces the subject of "Who/What is X?" ("X, a ...", "X was the ..."), and
    whether X is among its first words."""
    if not question.subject or question.subject[-1] not in tokens:
        return 0.0, 0.0
    defines = bool(definition_pattern(question.subject_pattern).search(sentence)) if question.subject_pattern else False
    return float(defines), float(tokens.index(question.subject[-1]) < 4)


def _evidence_stems(candidates: Sequence[Candidate], languages: tuple[str, ...]) -> set[str]:
    """Every stem of the candidate sentences and their neighbours: what the evidence knows."""
    found: set[str] = set()
    for cand in candidates:
        found.update(text_stems(cand.before, languages), text_stems(cand.text, languages), text_stems(cand.after, languages))
    return found


def question_coverage(question: Question, candidates: Sequence[Candidate], rarity: Mapping[str, float],
                      languages: Sequence[str]) -> tuple[float, float]:
    """How much of the question the evidence knows: the rarity-weighted share of its terms found in any
    candidate sentence, and the weight of the rarest term found nowhere (0 when all are found)."""
    found = _whole_words(frozenset(_evidence_stems(candidates, tuple(languages))),
                         _compounds(question.query.hyphenated, tuple(languages)))
    weights = {t: rarity.get(t, 1.0) for t in question.terms}
    total = sum(weights.values()) or 1.0
    missing = [w for t, w in weights.items() if t not in found]
    return sum(w for t, w in weights.items() if t in found) / total, max(missing, default=0.0)


def missing_words(question: Question, candidates: Sequence[Candidate], languages: Sequence[str]) -> list[str]:
    """The question's content words whose stems occur nowhere in the evidence ("lighthouse" in a book that
    only says "kept the light")."""
    langs = tuple(languages)
    found = _whole_words(frozenset(_evidence_stems(candidates, langs)), _compounds(question.query.hyphenated, langs))
    asked = set(question.terms)
    return [w for w in question.query.content
            if text_stems(w, langs) & asked and not text_stems(w, langs) <= found]


def question_names(question: Question) -> list[str]:
    """The names the question uses: its capitalised words but the first of each sentence ("Utterson")."""
    return [m.group(0) for m in _NAME_IN_QUESTION.finditer(question.text.strip())]


def missing_names(question: Question, candidates: Sequence[Candidate], languages: Sequence[str]) -> list[str]:
    """The names the question uses ("Tephany", "Stoorworm") that occur nowhere in the evidence: a question
    about a character the document never mentions is about another document, however generic its other
    words ("What did the king do?") are."""
    return absent_names(question_names(question), candidates, languages)


def absent_names(names: Sequence[str], candidates: Sequence[Candidate], languages: Sequence[str]) -> list[str]:
    """Those of ``names`` none of whose stems occurs in the evidence."""
    langs = tuple(languages)
    found = _evidence_stems(candidates, langs)
    return [n for n in names if text_stems(n, langs) and not text_stems(n, langs) & found]


def evidence_words(candidates: Sequence[Candidate], cosines: np.ndarray, languages: Sequence[str]) -> list[str]:
    """The distinct content words of the :data:`SIMILAR_SENTENCES` candidates closest to the question."""
    closest = [int(i) for i in np.argsort(-cosines)[:SIMILAR_SENTENCES]]
    words = (w for i in closest for w in content_words(candidates[i].text, languages) if len(w) > 2)
    return list(dict.fromkeys(words))
