"""Fitting and measuring the pointwise relevance model (:data:`chapterverse.search.relevance.RELEVANCE_MODELS`).

For every question the retriever's own candidates are collected with their relevance features, labelled
by whether each holds the gold answer span; every second question is also asked of the *other* documents
of its set (nothing there answers it), so the model sees off-topic questions too. A logistic regression
(Newton's method; every set weighs the same, every question within a set the same) gives the log-odds
that a passage holds the answer; :data:`~chapterverse.search.relevance.ANCHORS` maps them onto the scale users
threshold. How much the ranking adds of that logit (``in_ranking``) is the value of a small grid with the
best mean MRR@10 over the sets. Cross-validated by article: fit on the even-numbered documents of every
set, measure on the odd ones, and the other way round.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from ..library import Library, Progress
from ..search.relevance import ANCHORS, RelevanceModel, sigmoid
from .retrieval import BenchQuestion, BenchSet, _first_hit, _passages

__all__ = ["Judged", "OperatingPoint", "SetReport", "collect_judged", "fit_relevance", "cross_validate",
           "evaluate", "model_source", "RANKING_GRID"]

RANKING_GRID = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0)
"""Shares of the relevance logit the ranking may add to the fusion's."""
_K = 5
_MRR_DEPTH = 10


@dataclass(slots=True)
class Judged:
    """One search: its candidates' relevance features, their fusion logits, and which hold the answer."""

    set_name: str
    document: int
    """The question's own document (cross-validation folds split by it)."""
    off_topic: bool
    """Asked of the other documents: no candidate can hold the answer."""
    features: np.ndarray
    fusion: np.ndarray
    gold: np.ndarray


@dataclass(frozen=True, slots=True)
class OperatingPoint:
    """What ``search(k=5, threshold=t)`` returns on one set."""

    threshold: float
    recall: float
    """Share of answerable questions with an answer passage among the returned ones."""
    precision: float
    """Share of returned passages (answerable questions) that hold the answer."""
    first_precision: float
    """Share of answerable questions whose first returned passage holds the answer."""
    off_topic_empty: float
    """Share of off-topic questions that return nothing."""
    per_question: float
    """Passages returned per answerable question."""


@dataclass(frozen=True, slots=True)
class SetReport:
    set_name: str
    questions: int
    ranking: dict[str, tuple[float, float, float]]
    """``fusion`` and ``fusion+relevance``: (hit@1, hit@5, MRR@10)."""
    points: list[OperatingPoint]


def collect_judged(bench: BenchSet, library: Library, doc_ids: dict[str, int], *, limit: int | None = None,
                   progress: Progress | None = None) -> list[Judged]:
    """Every question's candidates (the first ``limit`` questions), and every second one's off-topic ones."""
    questions: list[BenchQuestion] = [q for q in bench.questions if q.source in doc_ids][:limit]
    vectors = library.embedder.embed_queries([q.text for q in questions])
    documents = sorted(set(doc_ids.values()))
    passages = _passages(library, documents)
    retriever = library.retriever
    weights, bias = np.asarray(retriever.weights.weights), retriever.weights.bias
    out: list[Judged] = []
    for number, (question, vector) in enumerate(zip(questions, vectors)):
        if progress and number % 50 == 0:
            progress(f"relevance {bench.name}", number, len(questions))
        own = doc_ids[question.source]
        scopes = [([own] if bench.scoped else None, False)]
        if number % 2 == 0 and len(documents) > 1:
            scopes.append(([d for d in documents if d != own], True))
        for scope, off_topic in scopes:
            found = retriever.candidates(question.text, vector, n=retriever.weights.candidates, doc_ids=scope)
            if found is None:
                continue
            gold = np.array([not off_topic and _first_hit(question, own, [c], passages) == 0 for c in found.ids])
            out.append(Judged(bench.name, own, off_topic, found.pointwise, found.features @ weights + bias, gold))
    return out


def fit_relevance(judged: Sequence[Judged], *, l2: float = 1e-6) -> RelevanceModel:
    """The anchored logistic model, with the ranking share of :data:`RANKING_GRID` that ranks these best."""
    weights, bias = _logistic(judged, l2)
    scale, shift = _anchor_map()
    plain = RelevanceModel(tuple(float(w) for w in weights * scale), float(bias * scale + shift), 0.0)
    best = max(RANKING_GRID, key=lambda share: _mean_mrr(judged, _with_share(plain, share)))
    return _with_share(plain, best)


def cross_validate(judged: Sequence[Judged], *, l2: float = 1e-6) -> list[tuple[RelevanceModel, list[Judged]]]:
    """Two folds by document parity: (model fit on one half, the other half's searches)."""
    folds = []
    for parity in (0, 1):
        train = [j for j in judged if j.document % 2 != parity]
        test = [j for j in judged if j.document % 2 == parity]
        if not train or not test:
            raise ValueError("cross-validation by article needs questions from at least two documents: "
                             "ask more questions (--limit) or more sets")
        folds.append((fit_relevance(train, l2=l2), test))
    return folds


def evaluate(folds: Iterable[tuple[RelevanceModel, Sequence[Judged]]],
             thresholds: Sequence[float] = (0.25, 0.40)) -> list[SetReport]:
    """Per set: ranking quality without and with the relevance logit, and the operating points."""
    scored: dict[str, list[tuple[Judged, np.ndarray, np.ndarray, np.ndarray]]] = {}
    for model, judged in folds:
        for j in judged:
            logits = model.logits(j.features)
            scored.setdefault(j.set_name, []).append((j, j.fusion, j.fusion + model.in_ranking * logits,
                                                      sigmoid(logits)))
    reports = []
    for name, rows in scored.items():
        answerable = [r for r in rows if not r[0].off_topic]
        ranking = {"fusion": _ranking([(r[0].gold, r[1]) for r in answerable]),
                   "fusion+relevance": _ranking([(r[0].gold, r[2]) for r in answerable])}
        points = [_operating_point(rows, t) for t in thresholds]
        reports.append(SetReport(name, len(answerable), ranking, points))
    return reports


def model_source(model: RelevanceModel, embedder: str) -> str:
    """The ``RELEVANCE_MODELS`` entry for relevance.py."""
    weights = ", ".join(f"{w:.4f}" for w in model.weights)
    return f'    "{embedder}": RelevanceModel(({weights}), {model.bias:.4f}, {model.in_ranking:g}),'


# ------------------------------------------------------------------------------------------------ fitting


def _logistic(judged: Sequence[Judged], l2: float, steps: int = 50) -> tuple[np.ndarray, float]:
    """Weighted logistic regression by Newton's method (five features need no more)."""
    x = np.column_stack([np.concatenate([j.features for j in judged]), np.ones(sum(len(j.gold) for j in judged))])
    y = np.concatenate([j.gold for j in judged]).astype(float)
    w = np.concatenate([np.full(len(j.gold), share) for j, share in zip(judged, _shares(judged))])
    ridge = 2 * l2 * np.diag([1.0] * (x.shape[1] - 1) + [0.0])
    p = np.zeros(x.shape[1])
    for _ in range(steps):
        q = sigmoid(x @ p)
        step = np.linalg.solve((x * (w * q * (1 - q))[:, None]).T @ x + ridge, x.T @ (w * (q - y)) + ridge @ p)
        p -= step
        if np.abs(step).max() < 1e-9:
            break
    return p[:-1], float(p[-1])


def _shares(judged: Sequence[Judged]) -> np.ndarray:
    """Each search's weight: every set the same in all, every search's rows the same within its set."""
    sizes: dict[str, int] = {}
    for j in judged:
        sizes[j.set_name] = sizes.get(j.set_name, 0) + 1
    return np.array([1.0 / (len(sizes) * sizes[j.set_name] * len(j.gold)) for j in judged])


def _anchor_map() -> tuple[float, float]:
    """(scale, shift) of the log-odds that put each anchor's chance on its score."""
    (p1, s1), (p2, s2) = ANCHORS
    scale = (_logit(s2) - _logit(s1)) / (_logit(p2) - _logit(p1))
    return scale, _logit(s1) - scale * _logit(p1)


def _logit(p: float) -> float:
    return math.log(p / (1 - p))


def _with_share(model: RelevanceModel, share: float) -> RelevanceModel:
    return RelevanceModel(model.weights, model.bias, share)


def _mean_mrr(judged: Sequence[Judged], model: RelevanceModel) -> float:
    by_set: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {}
    for j in judged:
        if not j.off_topic:
            by_set.setdefault(j.set_name, []).append((j.gold, j.fusion + model.in_ranking * model.logits(j.features)))
    return float(np.mean([_ranking(rows)[2] for rows in by_set.values()]))


# ------------------------------------------------------------------------------------------------ measuring


def _ranking(rows: Sequence[tuple[np.ndarray, np.ndarray]]) -> tuple[float, float, float]:
    """(hit@1, hit@5, MRR@10) of rankings by ``key`` over candidates labelled ``gold``."""
    ranks = []
    for gold, key in rows:
        hits = np.flatnonzero(gold[np.argsort(-key, kind="stable")])
        ranks.append(int(hits[0]) if len(hits) else -1)
    r = np.array(ranks)
    reciprocal = np.where((r >= 0) & (r < _MRR_DEPTH), 1 / np.maximum(r + 1, 1), 0.0)
    return float(np.mean(r == 0)), float(np.mean((r >= 0) & (r < _K))), float(np.mean(reciprocal))


def _operating_point(rows: Sequence[tuple[Judged, np.ndarray, np.ndarray, np.ndarray]],
                     threshold: float) -> OperatingPoint:
    recall, first, returned, good, empty = [], [], 0, 0, []
    for judged, _, key, score in rows:
        order = np.argsort(-key, kind="stable")
        kept = order[score[order] >= threshold][:_K]
        if judged.off_topic:
            empty.append(len(kept) == 0)
            continue
        recall.append(bool(judged.gold[kept].any()))
        first.append(bool(len(kept)) and bool(judged.gold[kept[0]]))
        returned += len(kept)
        good += int(judged.gold[kept].sum())
    return OperatingPoint(threshold, float(np.mean(recall)), good / max(returned, 1), float(np.mean(first)),
                          float(np.mean(empty)) if empty else float("nan"), returned / max(len(recall), 1))
