"""Fitting the retriever's fusion weights (:data:`chapterverse.search.retrieval.LEARNED_WEIGHTS`) on benchmark sets.

For every question the retriever's own candidates and features are collected (exactly what
:meth:`Retriever.search` scores), labelled by whether each candidate holds the gold evidence, and a
linear model is fit *listwise*: a softmax over each question's candidates, maximising the probability of
its gold passages (L2-regularised, every set weighted equally whatever its size). A one-dimensional
logistic regression of "gold or not" on the resulting score then sets the scale and bias, so the fused
score reads as a probability. Plain numpy; twelve weights need no more.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..embeddings import USEEmbedder
from ..library import Library, Progress
from ..search.retrieval import FusionWeights
from .retrieval import BenchQuestion, BenchSet, _first_hit, _passages

__all__ = ["Group", "collect_groups", "fit_fusion", "evaluate_weights"]


@dataclass(slots=True)
class Group:
    """One question's candidates: features (rows) and which rows hold the gold evidence."""

    features: np.ndarray
    gold: np.ndarray
    set_name: str


def collect_groups(bench: BenchSet, library: Library, doc_ids: dict[str, int], *, limit: int | None = None,
                   vectors: np.ndarray | None = None, progress: Progress | None = None) -> list[Group]:
    """Candidates and features of every question (the first ``limit``), as the default search sees them."""
    questions: list[BenchQuestion] = [q for q in bench.questions if q.source in doc_ids][:limit]
    if vectors is None:
        vectors = library.embedder.embed_queries([q.text for q in questions])
    passages = _passages(library, sorted(set(doc_ids.values())))
    retriever = library.retriever
    groups: list[Group] = []
    for number, (question, vector) in enumerate(zip(questions, vectors)):
        if progress and number % 50 == 0:
            progress(f"features {bench.name}", number, len(questions))
        doc_id = doc_ids[question.source]
        found = retriever.candidates(question.text, vector, n=retriever.weights.candidates,
                                     doc_ids=[doc_id] if bench.scoped else None)
        if found is None:
            continue
        gold = np.array([_first_hit(question, doc_id, [cid], passages) == 0 for cid in found.ids])
        groups.append(Group(found.features, gold, bench.name))
    return groups


def fit_fusion(groups: Sequence[Group], *, l2: float = 1e-3, steps: int = 2000,
               rate: float = 0.05) -> tuple[np.ndarray, float]:
    """Weights (one per feature column, so extra candidate features can be tried) and bias; groups without a
    gold candidate teach nothing and are skipped."""
    usable = [g for g in groups if g.gold.any()]
    if not usable:
        raise ValueError("no question has a gold passage among its candidates")
    sizes: dict[str, int] = {}
    for g in usable:
        sizes[g.set_name] = sizes.get(g.set_name, 0) + 1
    share = np.array([1.0 / (len(sizes) * sizes[g.set_name]) for g in usable])
    stacked = _Stacked(usable, share)
    weights = _adam(lambda w: stacked.listwise(w, l2), np.zeros(stacked.features.shape[1]), steps, rate)
    scores = stacked.features @ weights
    scale, bias = _adam(lambda p: _pointwise(p, scores, stacked.gold, stacked.row_share), np.array([1.0, 0.0]),
                        steps, rate)
    return weights * scale, float(bias)


class _Stacked:
    """All groups' rows in one matrix, so each step of the fit is a handful of numpy calls."""

    def __init__(self, groups: Sequence[Group], share: np.ndarray) -> None:
        self.features = np.concatenate([g.features for g in groups])
        self.gold = np.concatenate([g.gold for g in groups]).astype(float)
        sizes = np.array([len(g.gold) for g in groups])
        self.starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
        self.group = np.repeat(np.arange(len(groups)), sizes)
        self.share = share
        self.row_share = share[self.group]

    def listwise(self, w: np.ndarray, l2: float) -> tuple[float, np.ndarray]:
        """Softmax cross-entropy of each group's gold rows, weighted by the group's share, plus L2."""
        z = self.features @ w
        z = z - np.maximum.reduceat(z, self.starts)[self.group]
        e = np.exp(z)
        total = np.add.reduceat(e, self.starts)
        gold = np.add.reduceat(e * self.gold, self.starts)
        loss = l2 * float(w @ w) - float(self.share @ (np.log(gold) - np.log(total)))
        coef = self.row_share * (e * self.gold / gold[self.group] - e / total[self.group])
        return loss, 2 * l2 * w - coef @ self.features


def _pointwise(p: np.ndarray, scores: np.ndarray, labels: np.ndarray, weight: np.ndarray) -> tuple[float, np.ndarray]:
    z = p[0] * scores + p[1]
    q = 1 / (1 + np.exp(-np.clip(z, -30, 30)))
    loss = float(-(weight * (labels * np.log(q + 1e-12) + (1 - labels) * np.log(1 - q + 1e-12))).sum())
    d = weight * (q - labels)
    return loss, np.array([float(d @ scores), float(d.sum())])


def _adam(objective, start: np.ndarray, steps: int, rate: float) -> np.ndarray:  # type: ignore[no-untyped-def]
    x, m, v = start.astype(float), np.zeros_like(start, float), np.zeros_like(start, float)
    for t in range(1, steps + 1):
        _, g = objective(x)
        m = 0.9 * m + 0.1 * g
        v = 0.999 * v + 0.001 * g * g
        x = x - rate * (m / (1 - 0.9 ** t)) / (np.sqrt(v / (1 - 0.999 ** t)) + 1e-8)
    return x


def evaluate_weights(groups: Sequence[Group], weights: np.ndarray, bias: float = 0.0, k: int = 5) -> dict[str, float]:
    """hit@1, hit@k and misses at k of a weighting over collected groups (questions without candidates miss)."""
    ranks = []
    for g in groups:
        order = np.argsort(-(g.features @ weights + bias), kind="stable")
        hits = np.flatnonzero(g.gold[order])
        ranks.append(int(hits[0]) if len(hits) else -1)
    r = np.array(ranks)
    n = max(len(r), 1)
    return {"hit@1": float((r == 0).sum() / n), f"hit@{k}": float(((r >= 0) & (r < k)).sum() / n),
            "misses": int(len(r) - ((r >= 0) & (r < k)).sum())}


DEFAULT_EMBEDDER = USEEmbedder.name


def weights_source(weights: np.ndarray, bias: float, embedder: str = "") -> str:
    """The literal for retrieval.py: ``LEARNED_WEIGHTS`` (the default embedder) or a ``WEIGHTS_BY_EMBEDDER`` entry."""
    body = ", ".join(f"{w:.3f}" for w in weights)
    if embedder not in ("", DEFAULT_EMBEDDER):
        return f'    "{embedder}": (\n        ({body}),\n        {bias:.3f},\n    ),'
    return f"LEARNED_WEIGHTS: tuple[tuple[float, ...], float] = (\n    ({body}),\n    {bias:.3f},\n)"


def default_weights(embedder: str = "") -> tuple[np.ndarray, float]:
    """The fusion model the retriever uses today for ``embedder``."""
    w = FusionWeights.for_embedder(embedder)
    return np.asarray(w.weights), w.bias
