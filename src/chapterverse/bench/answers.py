"""The answer benchmark: scores what a user is shown by ``chapterverse ask``, not what retrieval ranks.

Every question goes through :func:`chapterverse.answering.ask.ask`, the code path of the ``ask`` command (the
one answer dispatcher, in process), and the shown answer is scored against gold answer texts:

- **answer holds gold**: the shown answer, its citation tags stripped, contains a gold answer after
  :func:`normalise` (on whole words), so an answer counts only when a reader would see the answer in it;
- **cited passages hold gold**: the same test on the cited passages' text;
- **false refusals**: answerable questions answered "not found";
- **absent refused**: questions the document does not answer that are refused. For SQuAD and FairytaleQA
  these are drawn by :func:`absent_questions`: a question of another document asked of this one.

Sets: SQuAD v1.1 files (one document per article; each question asked of its own article and, separately, of
the whole library), FairytaleQA (one document per story, its human-made sections as paragraphs, explicit
questions only) and question files of one's own (JSON lines naming a document to ingest).
"""

from __future__ import annotations

import csv
import hashlib
import json
import math
import os
import random
import re
import statistics
import time
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import paths
from ..answering import AnswerResult
from ..answering.ask import ask
from ..chunking import sentence_spans
from ..citations import strip_tags
from ..config import default_home
from ..errors import InputError
from ..library import Library, Progress
from ..llm.provider_config import ProviderConfig
from ..sources.base import ParsedDocument, ParsedFile
from .retrieval import BenchDocument, BenchSet, load_squad, open_bench_library

__all__ = [
    "AnswerQuestion",
    "AnswerSet",
    "AnswerRecord",
    "ScopeScore",
    "AnswerReport",
    "SCOPES",
    "normalise",
    "holds_gold",
    "load_squad_answers",
    "load_fairytaleqa",
    "load_question_file",
    "QUESTION_SPLITS",
    "shared_folder",
    "SHARED_PREFIX",
    "CONFIDENT",
    "RELIABILITY_BINS",
    "ReliabilityBin",
    "reliability_table",
    "set_digest",
    "default_library_dir",
    "open_answer_library",
    "sample_questions",
    "absent_questions",
    "provider_from_flags",
    "run_answers",
    "record_answer",
    "split_articles",
    "ARTICLE_HALVES",
    "score_records",
    "percentile",
    "plan_questions",
]

SCOPES = ("document", "library")
"""A question is asked of its own document, or (SQuAD) of the whole library."""

FAIRYTALEQA_ANSWER_COLUMNS = tuple(f"answer{n}" for n in range(1, 7))


@dataclass(frozen=True, slots=True)
class AnswerQuestion:
    """A question asked of one document; no gold answers means the document does not answer it."""

    id: str
    text: str
    source: str
    """The document it is asked of (a ``BenchDocument.source``)."""
    answers: tuple[str, ...] = ()
    evidence: tuple[tuple[int, int], ...] = ()
    """Gold character ranges in the document's first file when the set knows them (SQuAD answer spans,
    FairytaleQA sections): for fitting a reader, not used in scoring."""
    split: str | None = None
    """``train`` or ``test`` when the question file assigns it: a reader is fit on one half and judged on the
    other, so a question never serves both."""

    @property
    def absent(self) -> bool:
        return not self.answers


@dataclass(slots=True)
class AnswerSet:
    name: str
    documents: list[BenchDocument]
    questions: list[AnswerQuestion]
    library_scope: bool = False
    """Also ask each answerable question of the whole library (SQuAD: many articles, one answer)."""
    draws_absent: bool = False
    """Absent questions are drawn from other documents' questions (the set has none of its own)."""
    split: str | None = None
    """The half of a question file this set keeps (``train`` or ``test``); None for all of it."""


# ------------------------------------------------------------------------------------------------ matching

def normalise(text: str) -> str:
    """Casefolded, punctuation (Unicode category P) replaced by spaces, whitespace collapsed; accents are kept.

    Accents stay because they tell words apart (Spanish "él"/"el", Italian "è"/"e"), and so do combining
    marks (Devanagari vowel signs); NFC first, so a composed and a decomposed accent compare equal.
    Punctuation becomes a space rather than nothing, so "well-to-do" matches "well to do".
    """
    folded = unicodedata.normalize("NFC", text).casefold()
    return " ".join("".join(" " if unicodedata.category(c)[0] == "P" else c for c in folded).split())


def holds_gold(text: str, answers: Iterable[str]) -> bool:
    """True when ``text`` contains one of ``answers`` as whole words after :func:`normalise`.

    Whole words, so the gold "he" is not found inside "the"; an answer that normalises to nothing (pure
    punctuation) never matches.
    """
    haystack = f" {normalise(text)} "
    return any(needle and f" {needle} " in haystack for needle in map(normalise, answers))


def phrase_matches_gold(phrase: str, answers: Iterable[str]) -> bool:
    """True when an emphasised answer phrase and a gold answer agree: one holds the other as whole words
    ("Admiral" for the gold "a grey cat called Admiral", or "fourteenth of November 1911" for "1911")."""
    return any(holds_gold(phrase, [gold]) or holds_gold(gold, [phrase]) for gold in answers)


# ------------------------------------------------------------------------------------------------ loading


def load_squad_answers(path: str | Path) -> AnswerSet:
    """A SQuAD v1.1 file: one document per article, gold = the answer texts at their (re-found) offsets."""
    bench = load_squad(path)
    texts = {d.source: d.parsed.files[0].text for d in bench.documents if d.parsed is not None}
    questions = [AnswerQuestion(q.id, q.text, q.source, tuple(dict.fromkeys(texts[q.source][a:b] for a, b in q.spans)),
                                tuple(q.spans))
                 for q in bench.questions]
    return AnswerSet(bench.name, bench.documents, questions, library_scope=True, draws_absent=True)


def load_fairytaleqa(directory: str | Path, split: str) -> AnswerSet:
    """FairytaleQA's ``questions/<split>/*-questions.csv`` with ``section-stories/<split>/*-story.csv``.

    Each story is one document whose paragraphs are its sections (a blank line between sections, each
    section's own blank lines kept); only questions whose first annotator marked them explicit are kept,
    and their gold answers are the non-empty ``answer1``..``answer6``.
    """
    directory = Path(directory)
    stories = directory / "section-stories" / split
    asked = directory / "questions" / split
    if not asked.is_dir() or not stories.is_dir():
        raise InputError(f"{directory}: not a FairytaleQA directory with split {split!r} "
                         f"(needs questions/{split}/ and section-stories/{split}/)")
    documents: list[BenchDocument] = []
    questions: list[AnswerQuestion] = []
    for question_file in sorted(asked.glob("*-questions.csv")):
        stem = question_file.name.removesuffix("-questions.csv")
        story_file = stories / f"{stem}-story.csv"
        if not story_file.is_file():
            raise InputError(f"{question_file}: no story file {story_file.name} in {stories}")
        source = f"fairytaleqa-{split}/{stem}"
        parsed, sections = _fairytale_story(story_file, stem)
        documents.append(BenchDocument(source, parsed))
        questions += _fairytale_questions(question_file, source, sections)
    if not documents:
        raise InputError(f"{asked}: no question files (*-questions.csv)")
    return AnswerSet(f"fairytaleqa-{split}", documents, questions, draws_absent=True)


def _read_csv(path: Path, columns: Sequence[str]) -> list[dict[str, str]]:
    try:
        with path.open(encoding="utf-8", newline="") as handle:
            reader = csv.DictReader(handle)
            missing = [c for c in columns if c not in (reader.fieldnames or [])]
            if missing:
                raise InputError(f"{path}: not a FairytaleQA file (no column {', '.join(missing)})")
            return list(reader)
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise InputError(f"{path}: cannot read CSV: {exc}") from exc


def _fairytale_story(path: Path, stem: str) -> tuple[ParsedDocument, dict[str, tuple[int, int]]]:
    """The story as one text, and each section id's character range in it."""
    parts: list[str] = []
    sections: dict[str, tuple[int, int]] = {}
    offset = 0
    for row in _read_csv(path, ("section", "text")):
        text = row["text"].strip()
        if not text:
            continue
        sections[row["section"].strip()] = (offset, offset + len(text))
        parts.append(text)
        offset += len(text) + 2
    if not parts:
        raise InputError(f"{path}: story has no text")
    title = stem.replace("-", " ").capitalize()
    return ParsedDocument(title=title, format="text", files=[ParsedFile("\n\n".join(parts), title=title)]), sections


def _fairytale_questions(path: Path, source: str, sections: dict[str, tuple[int, int]]) -> list[AnswerQuestion]:
    stem = source.rpartition("/")[2]
    questions: list[AnswerQuestion] = []
    for row in _read_csv(path, ("question_id", "question", "ex-or-im1", "cor_section")):
        answers = tuple(dict.fromkeys(a.strip() for c in FAIRYTALEQA_ANSWER_COLUMNS if (a := row.get(c) or "").strip()))
        text = row["question"].strip()
        if row["ex-or-im1"].strip() != "explicit" or not answers or not text:
            continue
        evidence = tuple(sections[s.strip()] for s in row["cor_section"].split(",") if s.strip() in sections)
        questions.append(AnswerQuestion(f"{stem}/{row['question_id']}", text, source, answers, evidence))
    return questions


QUESTION_SPLITS = ("train", "test")
"""The halves a question file's lines may name in ``split``."""

SHARED_PREFIX = "shared:"
"""A question file's document path that starts with this names a file under the shared data folder."""


def shared_folder() -> Path:
    """The shared data folder: ``CHAPTERVERSE_SHARED``, else ``shared`` beside the repository root (the rule
    tests/conftest.py follows), so one question file names shared books on every checkout."""
    configured = os.environ.get("CHAPTERVERSE_SHARED")
    return Path(configured) if configured else Path(__file__).resolve().parents[3].parent / "shared"


def load_question_file(path: str | Path, split: str | None = None) -> AnswerSet:
    """JSON lines ``{"document": PATH, "question": ..., "answers": [...]}`` or ``{..., "absent": true}``,
    each optionally with ``"split": "train" | "test"``.

    PATH is absolute, relative to the file's folder, or ``shared:REL`` (REL under :func:`shared_folder`), and
    names one file, ingested as ``chapterverse ingest`` would. ``split`` keeps only the lines of that half
    (None: all lines). Every malformed line is an InputError naming the file, the line and the reason.
    """
    path = Path(path)
    if split is not None and split not in QUESTION_SPLITS:
        raise InputError(f"split must be one of {', '.join(QUESTION_SPLITS)}, not {split!r}")
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot read the question file: {exc}") from exc
    documents: dict[str, BenchDocument] = {}
    questions: list[AnswerQuestion] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        document, text, answers, half = _question_line(line, f"{path}:{number}", path.parent)
        if split is not None and half != split:
            continue
        source = str(document)
        documents.setdefault(source, BenchDocument(source, path=document))
        questions.append(AnswerQuestion(f"{path.stem}:{number}", text, source, answers, split=half))
    if not questions:
        raise InputError(f"{path}: no questions" + (f" in split {split!r}" if split is not None else ""))
    return AnswerSet(path.stem, list(documents.values()), questions, split=split)


def _question_line(line: str, where: str, folder: Path) -> tuple[Path, str, tuple[str, ...], str | None]:
    """One line as (the document's resolved path, question, gold answers: none for an absent question, split)."""
    try:
        row = json.loads(line)
    except ValueError as exc:
        raise InputError(f"{where}: not JSON: {exc}") from exc
    if not isinstance(row, dict):
        raise InputError(f"{where}: not a JSON object")
    document, text, answers, absent = row.get("document"), row.get("question"), row.get("answers"), row.get("absent")
    split = row.get("split")
    if not isinstance(document, str) or not document.strip():
        raise InputError(f"{where}: 'document' must name a file")
    if not isinstance(text, str) or not text.strip():
        raise InputError(f"{where}: 'question' must be a non-empty string")
    if absent not in (None, True, False):
        raise InputError(f"{where}: 'absent' must be true or false")
    if split is not None and split not in QUESTION_SPLITS:
        raise InputError(f"{where}: 'split' must be one of {', '.join(QUESTION_SPLITS)}")
    if absent is True:
        if answers:
            raise InputError(f"{where}: an absent question has no 'answers'")
        answers = []
    elif not isinstance(answers, list) or not answers or not all(isinstance(a, str) and a.strip() for a in answers):
        raise InputError(f"{where}: 'answers' must be a non-empty list of non-empty strings (or give \"absent\": true)")
    return _document_path(document, where, folder), text.strip(), tuple(a.strip() for a in answers), split


def _document_path(document: str, where: str, folder: Path) -> Path:
    """The file a line names: ``shared:`` paths under the shared folder, others relative to the question file."""
    if document.startswith(SHARED_PREFIX):
        shared = shared_folder()
        if not shared.is_dir():
            raise InputError(f"{where}: document {document} is in the shared data folder, and there is none at "
                             f"{shared} (set CHAPTERVERSE_SHARED to it)")
        resolved = (shared / document.removeprefix(SHARED_PREFIX)).resolve()
    else:
        resolved = paths.resolved(folder / document)
    if not resolved.is_file():
        raise InputError(f"{where}: document {resolved} is not a file")
    return resolved


# ------------------------------------------------------------------------------------------------ library


ARTICLE_HALVES = ("all", "even", "odd")


def split_articles(answer_set: AnswerSet, keep: int) -> AnswerSet:
    """The set restricted to its articles of even (``keep=0``) or odd (``keep=1``) position: the reader is fit
    on one half of a SQuAD set and measured on the other."""
    sources = {d.source for n, d in enumerate(answer_set.documents) if n % 2 == keep}
    return AnswerSet(f"{answer_set.name}[{'even' if keep == 0 else 'odd'}]",
                     [d for d in answer_set.documents if d.source in sources],
                     [q for q in answer_set.questions if q.source in sources], answer_set.library_scope,
                     answer_set.draws_absent)


def set_digest(answer_set: AnswerSet) -> str:
    """A hash of the set's documents (sources and contents), naming a library that can be reused for it."""
    digest = hashlib.sha256()
    for doc in answer_set.documents:
        digest.update(doc.source.encode() + b"\0")
        if doc.parsed is not None:
            digest.update(doc.parsed.title.encode() + b"\0")
            for f in doc.parsed.files:
                digest.update(f.text.encode() + b"\0")
        elif doc.path is not None:
            digest.update(hashlib.sha256(doc.path.read_bytes()).digest())
    return digest.hexdigest()


def default_library_dir(answer_set: AnswerSet, embedding_model: str | None = None) -> Path:
    """Where a set's library is kept between runs when no ``--library`` is given: under the data dir, named
    by the set and a hash of its documents and embedder, so a changed set or model never reuses stale vectors."""
    key = hashlib.sha256(f"{set_digest(answer_set)}\0{embedding_model or ''}".encode()).hexdigest()[:12]
    slug = re.sub(r"[^\w.-]+", "-", answer_set.name).strip("-")
    return default_home() / "bench-answers" / f"{slug}-{key}"


def open_answer_library(answer_set: AnswerSet, directory: Path, *, progress: Progress | None = None,
                        embedding_model: str | None = None) -> tuple[Library, dict[str, int]]:
    """The set's library at ``directory`` (documents already there are reused); document source -> doc id.

    The retrieval benchmark's library machinery, so both benchmarks build the same library for a set.
    """
    return open_bench_library(BenchSet(answer_set.name, answer_set.documents, []), directory, progress=progress,
                              embedding_model=embedding_model)


# ------------------------------------------------------------------------------------------------ questions


def sample_questions(questions: Sequence[AnswerQuestion], limit: int | None, seed: int) -> list[AnswerQuestion]:
    """At most ``limit`` of ``questions``, drawn with ``seed`` and kept in the set's order.

    A random draw rather than the first N, since a set's first questions all come from its first documents.
    """
    if limit is None or limit >= len(questions):
        return list(questions)
    chosen = set(random.Random(seed).sample(range(len(questions)), limit))
    return [q for n, q in enumerate(questions) if n in chosen]


def absent_questions(answer_set: AnswerSet, seed: int,
                     asked: Sequence[AnswerQuestion] | None = None) -> list[AnswerQuestion]:
    """For each answerable question in ``asked`` (default: all of the set's), a question of *another*
    document asked of that question's document, drawn with ``seed``.

    So there are exactly as many absent questions as answerable ones, spread over the documents as the
    answerable ones are. A drawn question may occasionally be answerable by the document anyway (two
    fairy tales with a king); that noise is the same for every reader measured.
    """
    pool = [q for q in answer_set.questions if not q.absent]
    targets = [q for q in (pool if asked is None else asked) if not q.absent]
    if len({q.source for q in pool}) < 2:
        return []
    rng = random.Random(seed)
    drawn: list[AnswerQuestion] = []
    for target in targets:
        other = rng.choice(pool)
        while other.source == target.source:
            other = rng.choice(pool)
        drawn.append(AnswerQuestion(f"absent:{other.id}@{target.source}", other.text, target.source))
    return drawn


# ------------------------------------------------------------------------------------------------ asking


def provider_from_flags(base_url: str | None, model: str | None, api_key: str | None) -> ProviderConfig | None:
    """The model to benchmark, or None (extractive) when no flag names one.

    Unlike ``ask``, environment variables alone never switch the benchmark to a model, so a run measures
    what its command line says; once a flag is given, the environment fills in the rest as for ``ask``.
    """
    if base_url is None and model is None and api_key is None:
        return None
    return ProviderConfig.resolve(base_url=base_url, model=model, api_key=api_key)


@dataclass(slots=True)
class AnswerRecord:
    """One question asked in one scope, and what the user was shown."""

    question: AnswerQuestion
    scope: str
    found: bool
    answer: str
    """The shown answer with its citation tags stripped."""
    holds_gold: bool
    cited_gold: bool
    sentences: int
    ms: float
    confidence: float | None = None
    """The reader's calibrated confidence, when the answer path reports one."""
    phrases: list[str] = field(default_factory=list)
    """The answer phrases the reader marked (``answer_spans``), when the answer path marks them."""
    gold_in_document: bool = False
    """A gold answer occurs word for word in the document: what any extractive answer can hold at best."""
    state: str = ""
    """answered / unsure / not_found (:attr:`AnswerResult.state`)."""
    passages_gold: bool = False
    """An unsure answer's passages hold a gold answer: they would have helped."""
    first_passage_gold: bool = False
    """An unsure answer's first passage (the one a reader reads first) holds a gold answer."""

    @property
    def useful(self) -> bool:
        """What a reader gets from the answer: it is right, or it is unsure with the answer in its first passage."""
        return self.holds_gold or self.first_passage_gold

    def to_json(self) -> dict[str, Any]:
        return {"id": self.question.id, "source": self.question.source, "scope": self.scope,
                "question": self.question.text, "gold": list(self.question.answers), "absent": self.question.absent,
                "found": self.found, "answer": self.answer, "holds_gold": self.holds_gold,
                "cited_gold": self.cited_gold, "sentences": self.sentences, "ms": round(self.ms, 2),
                "split": self.question.split,
                "confidence": self.confidence, "phrases": self.phrases, "gold_in_document": self.gold_in_document,
                "state": self.state, "passages_gold": self.passages_gold,
                "first_passage_gold": self.first_passage_gold, "useful": self.useful}


def record_answer(question: AnswerQuestion, scope: str, result: AnswerResult, ms: float) -> AnswerRecord:
    """What the user was shown for ``question``, scored against its gold answers."""
    shown = strip_tags(result.answer).strip()
    cited = " ".join(c.text for c in result.citations)
    confidence = getattr(result, "confidence", None)
    return AnswerRecord(
        question, scope, result.found, shown,
        holds_gold=result.found and holds_gold(shown, question.answers),
        cited_gold=result.found and holds_gold(cited, question.answers),
        sentences=len(sentence_spans(shown)), ms=ms,
        confidence=float(confidence) if confidence is not None else None,
        phrases=[str(getattr(span, "text", span)) for span in getattr(result, "answer_spans", None) or []],
        state=str(getattr(result, "state", None) or ("answered" if result.found else "not_found")),
        passages_gold=getattr(result, "state", None) == "unsure" and holds_gold(cited, question.answers),
        first_passage_gold=getattr(result, "state", None) == "unsure" and bool(result.citations)
        and holds_gold(result.citations[0].text, question.answers))


def _ask_timed(library: Library, question: AnswerQuestion, scope: str, doc_id: int | None,
               provider: ProviderConfig | None) -> AnswerRecord:
    started = time.perf_counter()
    result = ask(library, question.text, doc_id=doc_id, provider=provider)
    return record_answer(question, scope, result, (time.perf_counter() - started) * 1000)


# ------------------------------------------------------------------------------------------------ scoring


CONFIDENT = 0.9
"""An answer shown with at least this confidence reads as sure to a user; when it is wrong it misleads."""

RELIABILITY_BINS = ((0.0, 0.5), (0.5, 0.7), (0.7, 0.9), (0.9, 0.99), (0.99, 1.0))
"""Confidence ranges of the reliability table, each [low, high) and the last [0.99, 1]: finer near 1, where a
reader that learnt on short texts puts most of its answers to long books."""


@dataclass(frozen=True, slots=True)
class ReliabilityBin:
    """The shown answers whose confidence fell in [low, high) and the share of them that hold gold."""

    low: float
    high: float
    answers: int
    right: float | None
    """None when no answer fell in the bin."""

    def to_json(self) -> dict[str, Any]:
        return {"low": self.low, "high": self.high, "answers": self.answers, "right": _round(self.right)}


def reliability_table(records: Sequence[AnswerRecord]) -> list[ReliabilityBin]:
    """The shown answers with a confidence, binned by :data:`RELIABILITY_BINS`: how often each level is right.

    An absent question that was answered counts as a wrong answer, so the table says how far a user can
    trust an answer shown at that confidence. A reliable reader's table rises with confidence. Answers
    without a confidence (the model path) are left out; with none, every bin is empty.
    """
    shown = [r for r in records if r.found and r.confidence is not None]
    bins: list[ReliabilityBin] = []
    for low, high in RELIABILITY_BINS:
        last = high == RELIABILITY_BINS[-1][1]
        inside = [r for r in shown if r.confidence is not None
                  and low <= r.confidence and (r.confidence < high or (last and r.confidence <= high))]
        right = [r.holds_gold and not r.question.absent for r in inside]
        bins.append(ReliabilityBin(low, high, len(inside), _share(right) if inside else None))
    return bins


@dataclass(slots=True)
class ScopeScore:
    """The metrics of one scope. Rates over answerable questions count a refusal as a miss."""

    questions: int
    absent: int
    answered: float
    answer_holds_gold: float
    cited_holds_gold: float
    gold_in_document: float
    """The ceiling of answer_holds_gold: the share of answerable questions whose gold the document holds
    word for word (FairytaleQA's answers are often paraphrases)."""
    false_refusals: float
    absent_refused: float | None
    """None when the scope asked no absent question."""
    answer_chars_mean: float
    answer_chars_median: float
    sentences_median: float
    """Lengths are of the answers shown (found), whether the question was answerable or not."""
    ms_p50: float
    ms_p99: float
    phrase_marked: float = 0.0
    """Share of the shown answers to answerable questions with an emphasised answer phrase."""
    phrase_matches_gold: float | None = None
    """Of those phrases, the share that agrees with a gold answer (:func:`phrase_matches_gold`)."""
    unsure: float = 0.0
    """Share of answerable questions answered "unsure" (passages that may help, not an answer)."""
    unsure_passages_gold: float | None = None
    """Of those, the share whose passages hold a gold answer."""
    absent_unsure: float | None = None
    """Share of absent questions answered "unsure" (refused, but with passages)."""
    useful: float = 0.0
    """Share of answerable questions whose answer is useful (:attr:`AnswerRecord.useful`): right, or unsure with
    the answer in the first passage shown."""
    confidently_wrong: float = 0.0
    """Share of answerable questions answered wrong (the answer does not hold gold) with confidence at least
    :data:`CONFIDENT`: the answers that mislead most."""
    reliability: list[ReliabilityBin] = field(default_factory=list)
    """:func:`reliability_table` of the scope's shown answers."""

    def to_json(self) -> dict[str, Any]:
        return {"questions": self.questions, "absent": self.absent, "answered": _round(self.answered),
                "answer_holds_gold": _round(self.answer_holds_gold), "cited_holds_gold": _round(self.cited_holds_gold),
                "gold_in_document": _round(self.gold_in_document),
                "false_refusals": _round(self.false_refusals), "absent_refused": _round(self.absent_refused),
                "answer_chars_mean": _round(self.answer_chars_mean, 1),
                "answer_chars_median": _round(self.answer_chars_median, 1),
                "sentences_median": self.sentences_median, "ms_p50": _round(self.ms_p50, 1),
                "ms_p99": _round(self.ms_p99, 1), "phrase_marked": _round(self.phrase_marked),
                "phrase_matches_gold": _round(self.phrase_matches_gold),
                "unsure": _round(self.unsure),
                "unsure_passages_gold": _round(self.unsure_passages_gold), "absent_unsure": _round(self.absent_unsure),
                "confidently_wrong": _round(self.confidently_wrong), "useful": _round(self.useful),
                "reliability": [b.to_json() for b in self.reliability]}


def _round(value: float | None, digits: int = 4) -> float | None:
    return None if value is None else round(value, digits)


def _share(flags: Sequence[bool]) -> float:
    return sum(flags) / len(flags) if flags else 0.0


def percentile(values: Sequence[float], share: float) -> float:
    """Nearest-rank percentile: p99 of 100 timings is the 99th slowest, an observed value."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered), max(1, math.ceil(len(ordered) * share))) - 1]


def score_records(records: Sequence[AnswerRecord]) -> ScopeScore:
    """The metrics of one scope's records."""
    answerable = [r for r in records if not r.question.absent]
    absent = [r for r in records if r.question.absent]
    shown = [r for r in records if r.found]
    lengths = [len(r.answer) for r in shown]
    answered = [r for r in answerable if r.found]
    marked = [r for r in answered if r.phrases]
    unsure = [r for r in answerable if r.state == "unsure"]
    return ScopeScore(
        questions=len(answerable), absent=len(absent),
        answered=_share([r.found for r in answerable]),
        answer_holds_gold=_share([r.holds_gold for r in answerable]),
        cited_holds_gold=_share([r.cited_gold for r in answerable]),
        gold_in_document=_share([r.gold_in_document for r in answerable]),
        false_refusals=_share([not r.found for r in answerable]),
        absent_refused=_share([not r.found for r in absent]) if absent else None,
        answer_chars_mean=statistics.fmean(lengths) if lengths else 0.0,
        answer_chars_median=statistics.median(lengths) if lengths else 0.0,
        sentences_median=statistics.median([r.sentences for r in shown]) if shown else 0.0,
        ms_p50=statistics.median([r.ms for r in records]) if records else 0.0,
        ms_p99=percentile([r.ms for r in records], 0.99),
        phrase_marked=_share([bool(r.phrases) for r in answered]),
        phrase_matches_gold=_share([phrase_matches_gold(r.phrases[0], r.question.answers) for r in marked])
        if marked else None,
        unsure=_share([r.state == "unsure" for r in answerable]),
        unsure_passages_gold=_share([r.passages_gold for r in unsure]) if unsure else None,
        absent_unsure=_share([r.state == "unsure" for r in absent]) if absent else None,
        useful=_share([r.useful for r in answerable]),
        confidently_wrong=_share([r.found and not r.holds_gold and (r.confidence or 0.0) >= CONFIDENT
                                  for r in answerable]),
        reliability=reliability_table(records),
    )


@dataclass(slots=True)
class AnswerReport:
    name: str
    mode: str
    """"extractive", or the model's name."""
    documents: int
    seed: int
    limit: int | None
    scopes: dict[str, ScopeScore]
    records: list[AnswerRecord] = field(default_factory=list)
    library_seconds: float = 0.0
    split: str | None = None
    """The half of a question file asked (None: all of it)."""

    def to_json(self) -> dict[str, Any]:
        return {"set": self.name, "split": self.split, "mode": self.mode, "documents": self.documents,
                "seed": self.seed, "limit": self.limit, "library_seconds": round(self.library_seconds, 1),
                "scopes": {name: score.to_json() for name, score in self.scopes.items()}}


def plan_questions(answer_set: AnswerSet, limit: int | None, seed: int) -> list[tuple[AnswerQuestion, str]]:
    """(question, scope) pairs to ask: sampled answerable questions in their document and, for library-scope
    sets, in the whole library; then the absent questions: drawn ones (when the set draws them) and the
    set's own (sampled alike)."""
    answerable = sample_questions([q for q in answer_set.questions if not q.absent], limit, seed)
    absent = absent_questions(answer_set, seed, answerable) if answer_set.draws_absent else []
    absent += sample_questions([q for q in answer_set.questions if q.absent], limit, seed)
    plan = [(q, "document") for q in answerable] + [(q, "document") for q in absent]
    if answer_set.library_scope:
        plan += [(q, "library") for q in answerable]
    return plan


def _document_text(library: Library, doc_id: int, texts: dict[int, str]) -> str:
    """The document's canonical text (its files joined), read once per run."""
    if doc_id not in texts:
        texts[doc_id] = "\n\n".join(library.store.file(f.id).text for f in library.store.files(doc_id))
    return texts[doc_id]


def run_answers(answer_set: AnswerSet, library: Library, doc_ids: dict[str, int], *, limit: int | None = None,
                seed: int = 0, provider: ProviderConfig | None = None,
                progress: Progress | None = None) -> AnswerReport:
    """Ask the set's questions (``limit`` answerable ones, drawn with ``seed``) as ``ask`` would; score them.

    The first question is asked once untimed, so loading the embedder and the indexes is not in p50/p99.
    """
    plan = [(q, scope) for q, scope in plan_questions(answer_set, limit, seed) if q.source in doc_ids]
    if plan:
        ask(library, plan[0][0].text, doc_id=doc_ids[plan[0][0].source], provider=provider)
    records: list[AnswerRecord] = []
    texts: dict[int, str] = {}
    for number, (question, scope) in enumerate(plan):
        if progress and number % 10 == 0:
            progress(f"asking {answer_set.name}", number, len(plan))
        doc_id = doc_ids[question.source] if scope == "document" else None
        record = _ask_timed(library, question, scope, doc_id, provider)
        record.gold_in_document = holds_gold(_document_text(library, doc_ids[question.source], texts),
                                             question.answers)
        records.append(record)
    if progress:
        progress(f"asking {answer_set.name}", len(plan), len(plan))
    scopes = {scope: score_records([r for r in records if r.scope == scope])
              for scope in SCOPES if any(r.scope == scope for r in records)}
    mode = provider.model if provider is not None else "extractive"
    return AnswerReport(answer_set.name, mode, len(doc_ids), seed, limit, scopes, records, split=answer_set.split)

