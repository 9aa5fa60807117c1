"""Answers without a model: the source's own sentences that answer the question, each with its exact tag.

An extractive answer never paraphrases: every sentence in it is an exact span of a retrieved passage, so
it is verified by construction. The reader takes the sentences around the best passages
(:mod:`.sentences`), describes each by :data:`.features.FEATURES`, ranks them with the learned sentence
model (re-ranked by the meaning model where it was fit on the library's embedder) and shows the best
one to three in reading order (:mod:`.model`). Whether to answer at all is the
confidence model's calibrated probability that the sentences it would show hold the answer: from the
model's answer threshold it answers; below it, down to the unsure threshold, it says it found no direct
answer and shows the best passages that may help (cited, ``found`` false); below that, "Not found". A
question in another language than the book, about what the book is about, is never "Not found": its words
cannot be looked for in the book's, so the reader shows the passages that may help instead.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ..analysis import in_another_language
from ..citations import Citation
from ..embeddings import Embedder
from ..positions import Span, defang_tags
from ..search.relevance import ANCHORS
from ..search.retrieval import Hit
from .features import (FEATURES, absent_names, evidence_words, missing_names, missing_words, question_coverage, question_names,
                       sentence_features)
from .model import ReaderModel, load_reader_model, meaning_inputs
from .phrases import answer_phrase
from .question import Question, as_question
from .reader_library import ReaderLibrary
from .result import NOT_FOUND_PREFIX, UNSURE_PREFIX, AnswerResult, AnswerSpanOut
from .sentences import Candidate, gather_candidates

__all__ = ["Reading", "extractive_answer", "read_evidence", "confidence_features", "choose_sentences",
           "first_introduction", "stand_in_similarity", "shown_sentences", "helpful_passages", "in_context"]

PASSAGES = 8
"""Retrieved passages whose sentences the reader considers."""
EMBEDDED_SENTENCES = 16
"""Candidate sentences given their own vector. On the dev sets (FairytaleQA val, XQuAD-en, SQuAD-it: about
20-30 candidates a question) the three best sentences are the same as when every candidate is embedded,
down to 8; the rest keep their passage's cosine as the estimate of their own."""
UNSURE_PASSAGES = 3
"""Passages shown when the reader is unsure: the best-ranked sentence of each of this many retrieved passages."""
EVIDENCE_SAMPLE = 10
"""Candidate sentences whose words say which language the evidence is in."""


@dataclass(slots=True)
class Reading:
    """Everything the reader knows about one question: the evidence and its features, before any decision."""

    question: Question
    hits: list[Hit]
    candidates: list[Candidate]
    cosines: np.ndarray
    """Cosine of the question and each candidate sentence."""
    rarity: dict[str, float]
    """Rarity in the library (0..1) of each of the question's terms."""
    languages: list[str]
    features: np.ndarray = field(default_factory=lambda: np.zeros((0, len(FEATURES))))
    coverage: float = 0.0
    missing: float = 0.0
    stand_in: float = 1.0
    """How close in meaning the evidence comes to the question words it lacks: the mean, over those words,
    of the best cosine to a word of the sentences closest to the question (1.0 when none is lacking)."""
    cross_language: bool = False
    """The question is in another language than its evidence (:func:`analysis.in_another_language`): the
    words it lacks are not evidence that the book does not answer it. Never when
    :attr:`searchable_in_own_language`."""
    in_named_part: bool = False
    """The question names a part of the one book it is asked of ("in the first eclogue") and the evidence is
    that part's (:func:`part_hits`)."""
    searchable_in_own_language: bool = False
    """The scope is the whole library and the library holds text in the question's own language (among
    others): the question's words were looked for there, so lacking them is evidence after all."""
    embedder: str = ""
    query_vector: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float32))
    embedded: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    """The candidates that were given their own vector (rows of :attr:`candidates`)."""
    vectors: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), np.float32))
    """Their vectors, in the order of :attr:`embedded`."""

    def describe(self) -> None:
        """Compute the features of the candidates and the question's coverage from the evidence."""
        self.features = sentence_features(self.question, self.candidates, self.cosines, self.rarity, self.languages)
        self.coverage, self.missing = question_coverage(self.question, self.candidates, self.rarity, self.languages)

    def ranking_scores(self, model: ReaderModel) -> np.ndarray:
        """The order to show candidates in: the meaning model's scores of the embedded ones (the others,
        which the sentence model already ranked lower, come last), or the sentence model's when the meaning
        model does not fit this library's embedder."""
        scores = model.sentence_scores(self.features)
        meaning = model.meaning_for(self.embedder, len(self.query_vector))
        if meaning is None or not len(self.embedded):
            return scores
        ranked = np.full(len(scores), -np.inf)
        ranked[self.embedded] = meaning.scores(meaning_inputs(self.features[self.embedded], self.query_vector,
                                                              self.vectors))
        return ranked


def read_evidence(library: ReaderLibrary, asked: str | Question, *, doc_ids: Sequence[int] | None = None,
                  k: int = PASSAGES, hits: Sequence[Hit] | None = None, model: ReaderModel | None = None,
                  embedded: int | None = EMBEDDED_SENTENCES) -> Reading:
    """Retrieve (unless ``hits`` are given), gather candidate sentences and compute their features.

    ``asked``: the question, as a text or read already (:func:`.question.as_question`); the search and the
    reader both use that one reading. Only the ``embedded`` candidates ``model`` ranks best with each sentence's
    cosine estimated by its passage's are embedded, since embedding the sentences is most of the cost of an
    answer; ``None`` embeds them all (what the model is fit on, so a refit never depends on the model it replaces).
    """
    question = as_question(asked, library.store.languages())
    languages = question.query.languages
    query_vector = library.embedder.embed_query(question.text)
    found = list(hits) if hits is not None else library.search(question.query, k=k, doc_ids=doc_ids,
                                                                query_vector=query_vector)
    part = part_hits(library, question, doc_ids, query_vector, k) if hits is None else None
    if part:
        found = part
    candidates = gather_candidates(library, found, question, languages)
    estimates = np.array([c.hit.dense for c in candidates], dtype=np.float64)
    reading = Reading(question, found, candidates, estimates, library.retriever.term_rarity(question.terms),
                      list(languages), embedder=library.embedder.name, query_vector=query_vector,
                      in_named_part=bool(part))
    reading.describe()
    if candidates:
        chosen = np.arange(len(candidates))
        if embedded is not None:
            scores = (model or load_reader_model()).sentence_scores(reading.features)
            chosen = np.argsort(-scores, kind="stable")[:embedded]
        vectors = library.embedder.embed([candidates[i].text for i in chosen])
        cosines = estimates.copy()
        cosines[chosen] = vectors @ query_vector
        reading.cosines, reading.embedded, reading.vectors = cosines, chosen, vectors
        reading.describe()
    reading.stand_in = stand_in_similarity(library.embedder, reading)
    evidence = (" ".join(c.text for c in candidates[:EVIDENCE_SAMPLE])
                or " ".join(h.chunk.text for h in found[:UNSURE_PASSAGES]))
    asked_in = question.query.language(default="")
    reading.searchable_in_own_language = doc_ids is None and len(languages) > 1 and asked_in in languages
    reading.cross_language = in_another_language(question.query, evidence) and not reading.searchable_in_own_language
    return reading


PART_SEARCH = 64
"""Passages of the book searched for those inside the part a question names."""


def part_hits(library: ReaderLibrary, question: Question, doc_ids: Sequence[int] | None, query_vector: np.ndarray,
              k: int) -> list[Hit]:
    """For a question that names a part of the one book it is asked of ("Who lies under the beech tree in the
    first eclogue?"), the book's best passages inside that part (its ``n``-th contents entry at the level with
    the most entries), best first: what a reader would turn to. Empty when the question names no part, the
    book has no such entry, or none of its best passages lies there."""
    number = question.part
    if number is None or doc_ids is None or len(doc_ids) != 1:
        return []
    entries = library.store.toc(doc_ids[0])
    levels = Counter(entry.level for entry in entries)
    if not levels:
        return []
    level = max(levels, key=lambda lv: (levels[lv], -lv))
    parts = [entry for entry in entries if entry.level == level]
    if number > len(parts):
        return []
    part = parts[number - 1]
    following = next((e for e in entries if e.ordinal > part.ordinal and e.level <= level), None)

    def inside(hit: Hit) -> bool:
        chunk = hit.chunk
        if chunk.file_id != part.file_id:
            return False
        end = following.offset if following is not None and following.file_id == part.file_id else None
        return chunk.end > part.offset and (end is None or chunk.start < end)

    found = library.search(question.query, k=PART_SEARCH, doc_ids=doc_ids, query_vector=query_vector)
    return [hit for hit in found if inside(hit)][:k]


def stand_in_similarity(embedder: Embedder, reading: Reading) -> float:
    """:attr:`Reading.stand_in`: a paraphrase ("lighthouse keeper" for "kept the light") is not a question
    about something else, and word vectors tell the two apart where shared stems cannot."""
    lacking = missing_words(reading.question, reading.candidates, reading.languages)
    present = evidence_words(reading.candidates, reading.cosines, reading.languages)
    if not lacking:
        return 1.0
    if not present:
        return 0.0
    vectors = embedder.embed([*lacking, *present])
    similarity = vectors[:len(lacking)] @ vectors[len(lacking):].T
    return float(similarity.max(axis=1).mean())


def confidence_features(reading: Reading, scores: np.ndarray) -> np.ndarray:
    """The confidence model's inputs (:data:`.model.CONFIDENCE_FEATURES`) for one reading. Across languages
    the question's missing words and names are read as found (a translated question lacks them all), so the
    confidence rests on meaning and the sentence model's score."""
    best = int(np.argmax(scores))
    row = reading.features[best]
    ranked = np.sort(scores)[::-1]
    margin = float(ranked[0] - ranked[1]) if len(ranked) > 1 else 1.0
    missing_name = not reading.cross_language and bool(
        missing_names(reading.question, reading.candidates, reading.languages))
    coverage, missing, stand_in = (1.0, 0.0, 1.0) if reading.cross_language else (
        reading.coverage, reading.missing, reading.stand_in)
    return np.array([
        float(scores[best]), row[FEATURES.index("cos")], row[FEATURES.index("overlap")], coverage,
        missing, max((h.dense for h in reading.hits), default=0.0), math.log1p(len(reading.candidates)),
        stand_in, float(missing_name), margin, float(reading.features[:, FEATURES.index("window_overlap")].max()),
    ])


def choose_sentences(scores: np.ndarray, lengths: Sequence[int], model: ReaderModel, *,
                     introduction: int | None = None) -> list[int]:
    """Indices of the sentences to show: the best, then ``introduction`` when given, then any whose softmax
    share is at least ``keep_ratio`` of the best's, up to ``max_sentences`` and ``max_chars`` in all."""
    order = [int(i) for i in np.argsort(-scores, kind="stable")]
    share = np.exp(scores - scores.max())
    if introduction is not None:
        order = [order[0], *dict.fromkeys([introduction, *order[1:]])] if order[0] != introduction else order
        share[introduction] = 1.0
    chosen = [order[0]]
    used = lengths[order[0]]
    for i in order[1:]:
        if len(chosen) >= model.max_sentences or share[i] < model.keep_ratio:
            break
        if used + lengths[i] <= model.max_chars:
            chosen.append(i)
            used += lengths[i]
    return chosen


def first_introduction(reading: Reading) -> int | None:
    """For "Who/What is X?", the earliest candidate that introduces X ("X was a ..."): definitional questions
    are rare in the training sets, so the model alone under-weighs the one sentence a reader wants shown."""
    column = reading.features[:, FEATURES.index("definition")] if len(reading.candidates) else np.zeros(0)
    introducing: list[int] = np.flatnonzero(column > 0).tolist()
    return min(introducing, key=lambda i: reading.candidates[i].span) if introducing else None


def extractive_answer(library: ReaderLibrary, question: str | Question, *, doc_ids: Sequence[int] | None = None,
                      k: int = PASSAGES, scope_title: str | None = None,
                      hits: Sequence[Hit] | None = None, model: ReaderModel | None = None,
                      embedded: int | None = EMBEDDED_SENTENCES) -> AnswerResult:
    """The sentences of the library that best answer ``question`` (a text, or read already), in reading order,
    each tagged (``embedded``: see :func:`read_evidence`)."""
    model = model or load_reader_model()
    reading = read_evidence(library, question, doc_ids=doc_ids, k=k, hits=hits, model=model,
                           embedded=embedded)
    not_found = f"{NOT_FOUND_PREFIX} {scope_title or 'this library'}."
    if not reading.candidates and reading.in_named_part and _related_across_languages(reading):
        return _part_passages(library, reading)
    if not reading.candidates:
        return AnswerResult(answer=not_found, found=False, mode="extractive", confidence=0.0, state="not_found")
    scores = model.sentence_scores(reading.features)
    confidence = round(model.confidence(confidence_features(reading, scores)), 4)
    if confidence < model.unsure_threshold and not _related_across_languages(reading) and not _names_met(reading):
        return AnswerResult(answer=not_found, found=False, mode="extractive", confidence=confidence,
                            state="not_found")
    if confidence < model.answer_threshold or _unjudged_across_languages(reading):
        return _unsure(library, reading, model, confidence)
    chosen = shown_sentences(reading, model)
    best = chosen[0]
    shown = sorted(chosen, key=lambda i: reading.candidates[i].span)
    citations = [_citation(library, n, reading.candidates[i]) for n, i in enumerate(shown, start=1)]
    answer = " ".join(_tagged(citations))
    spans = _answer_spans(reading, best, shown.index(best) + 1, reading.languages)
    return AnswerResult(answer=answer, found=True, mode="extractive", citations=citations, confidence=confidence,
                        answer_spans=spans, state="answered")


_POSSESSIVE = re.compile(r"['’]s$")


def _names_met(reading: Reading) -> bool:
    """Whether the question names someone or something ("What was Mr. Utterson's profession?") and the evidence
    mentions every name it uses: passages about the one the question asks of are passages that may help, never
    "Not found", however unsure the reader is of its sentence."""
    opening = reading.question.text.lstrip("¿¡\"“«( \t")  # "¿Cómo ...": its first word opens it, as without "¿"
    named = [_POSSESSIVE.sub("", name) for name in question_names(reading.question) if not opening.startswith(name)]
    return bool(named) and not absent_names(named, reading.candidates, reading.languages)


def _related_across_languages(reading: Reading) -> bool:
    """A question in another language than the book, about something the book is about: its best passage is
    relevant at the recall-oriented level (:data:`relevance.ANCHORS`), which the relevance model judges on
    meaning when words cannot match, or its evidence is the part of the book the question names ("in the first
    eclogue": :func:`part_hits`), which needs no shared word. Such a question gets passages that may help,
    never "Not found".

    Not when the question names someone or something the evidence never mentions ("Who is Queequeg?",
    "the capital of Australia"): names cross languages unchanged, so a book in any language that is about
    them holds them. Nor across a whole library that holds books in the question's own language: its words
    were looked for there and not found, and the cosine of a question to a passage in another language is
    no evidence alone (ask of the one book, ``--doc``, for its passages)."""
    recall_level = ANCHORS[0][1]
    return (reading.cross_language and not missing_names(reading.question, reading.candidates, reading.languages)
            and (reading.in_named_part or max((h.score for h in reading.hits), default=0.0) >= recall_level))


def _unjudged_across_languages(reading: Reading) -> bool:
    """A question in another language than its evidence whose best passage is not relevant even at the
    recall-oriented level (:func:`_related_across_languages`): the embedder does not relate the two languages
    (English to Latin), so the confidence, which across languages rests on meaning alone, has nothing to rest
    on. Its sentences are passages that may help, never an answer ("Whom is the ship carrying?" of Latin odes
    was answered at 0.67 with a sentence about Pyrrha)."""
    return reading.cross_language and not _related_across_languages(reading)


def shown_sentences(reading: Reading, model: ReaderModel) -> list[int]:
    """The candidates an answer shows, best first (what the confidence model judges; reading non-empty)."""
    return choose_sentences(reading.ranking_scores(model), [len(c.text) for c in reading.candidates], model,
                            introduction=first_introduction(reading))


def helpful_passages(reading: Reading, model: ReaderModel) -> list[int]:
    """When unsure: the best-ranked sentence of each of the :data:`UNSURE_PASSAGES` best-ranking retrieved
    passages, best first. One a passage, so that the reader is pointed at different places of the book."""
    chosen: dict[int, int] = {}
    for i in np.argsort(-reading.ranking_scores(model), kind="stable").tolist():
        chosen.setdefault(reading.candidates[i].rank, int(i))
        if len(chosen) == UNSURE_PASSAGES:
            break
    return list(chosen.values())


def _unsure(library: ReaderLibrary, reading: Reading, model: ReaderModel, confidence: float) -> AnswerResult:
    """No answer the reader would stand by, but evidence about the question: the passages that may help,
    cited (``found`` false, so nothing reads them as the answer). The first, the reader's best guess, comes
    with the sentences before and after it in its paragraph (:func:`in_context`): a nearly right sentence is
    often one sentence from the answer ("There were three of them"). The others are a line each."""
    chosen = helpful_passages(reading, model)
    citations = [_citation(library, n, reading.candidates[i], context=n == 1) for n, i in enumerate(chosen, start=1)]
    return AnswerResult(answer="\n".join([UNSURE_PREFIX, *_tagged(citations)]), found=False, mode="extractive",
                        citations=citations, confidence=confidence, state="unsure")


def _part_passages(library: ReaderLibrary, reading: Reading) -> AnswerResult:
    """Unsure, with the best passages of the part the question names, whole: a question in another language
    about verse that has no sentence short enough to show alone (Latin hexameters run a page without a full
    stop) still gets the lines it asks about."""
    citations = [Citation.of(n, hit.span, library.resolve(hit.span)).retrieved(hit.chunk.source, hit.chunk.chunk_index,
                                                                               hit.score)
                 for n, hit in enumerate(reading.hits[:UNSURE_PASSAGES], start=1)]
    return AnswerResult(answer="\n".join([UNSURE_PREFIX, *_tagged(citations)]), found=False, mode="extractive",
                        citations=citations, confidence=0.0, state="unsure")


def _tagged(citations: Sequence[Citation]) -> list[str]:
    """Each cited sentence followed by its own tag: the text of an answer, or of unsure passages. A tag-like
    string the book wrote itself is defanged (``positions.defang_tags``): only the tags appended here cite."""
    return [f"{defang_tags(c.text)}{Span(c.file, c.start, c.end).tag}" for c in citations]


CONTEXT_CHARS = 600
"""The most a passage shown in context spans; a longer one is shown as its sentence alone."""


def in_context(candidate: Candidate) -> Span:
    """The span of ``candidate``'s sentence with the sentences before and after it in its paragraph, or of the
    sentence alone when that would exceed :data:`CONTEXT_CHARS`. Exact: one range of the stored text."""
    span = candidate.span
    if candidate.context is None or candidate.context[1] - candidate.context[0] > CONTEXT_CHARS:
        return span
    return Span(span.file, *candidate.context)


def _citation(library: ReaderLibrary, n: int, candidate: Candidate, *, context: bool = False) -> Citation:
    span, chunk = in_context(candidate) if context else candidate.span, candidate.hit.chunk
    return Citation.of(n, span, library.resolve(span)).retrieved(chunk.source, chunk.chunk_index, candidate.hit.score)


def _answer_spans(reading: Reading, best: int, citation: int, languages: Sequence[str]) -> list[AnswerSpanOut]:
    candidate = reading.candidates[best]
    phrase = answer_phrase(candidate.text, reading.question, languages)
    if phrase is None:
        return []
    span = Span(candidate.span.file, candidate.span.start + phrase[0], candidate.span.start + phrase[1])
    return [AnswerSpanOut(tag=span.key, text=defang_tags(candidate.text[phrase[0]:phrase[1]]), citation=citation)]
