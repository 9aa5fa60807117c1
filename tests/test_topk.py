"""top_k must equal a full sort by (score descending, position ascending) on every kind of data."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chapterverse.index.topk import SAMPLED_FROM, top_k


def reference(scores: np.ndarray, k: int, positive: bool = False) -> np.ndarray:
    finite = np.isfinite(scores) & (scores > 0 if positive else True)
    key = np.where(finite, scores, -np.inf)
    order = [i for i in sorted(range(len(scores)), key=lambda i: (-key[i], i)) if finite[i]]
    return np.asarray(order[:max(k, 0)], np.int64)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from([-np.inf, np.nan, -1.0, 0.0, 0.25, 0.5, 1.0, 2.0]), max_size=80),
       st.integers(-1, 90), st.booleans())
def test_small_arrays_with_ties_and_non_finite_scores(values: list[float], k: int, positive: bool) -> None:
    scores = np.asarray(values, np.float32)
    assert top_k(scores, k, positive=positive).tolist() == reference(scores, k, positive).tolist()


@pytest.mark.parametrize("kind", ["random", "ascending", "descending", "few distinct", "all equal", "mostly zero"])
@pytest.mark.parametrize("k", [1, 60, 500])
def test_sampled_path_is_exact(kind: str, k: int) -> None:
    rng = np.random.default_rng(7)
    n = SAMPLED_FROM * 5 + 13
    scores = {
        "random": rng.standard_normal(n),
        "ascending": np.arange(n, dtype=np.float64),
        "descending": -np.arange(n, dtype=np.float64),
        "few distinct": rng.integers(0, 4, n).astype(np.float64),
        "all equal": np.ones(n),
        "mostly zero": np.where(rng.random(n) < 0.001, rng.random(n), 0.0),
    }[kind].astype(np.float32)
    for positive in (False, True):
        expected = np.lexsort((np.arange(n), -scores))
        keep = scores[expected] > 0 if positive else np.ones(n, bool)
        assert top_k(scores, k, positive=positive).tolist() == expected[keep][:k].tolist()


def test_dead_rows_are_never_returned() -> None:
    scores = np.linspace(0, 1, SAMPLED_FROM * 2, dtype=np.float32)
    scores[-10:] = -np.inf
    top = top_k(scores, 20)
    assert len(top) == 20 and not np.isin(top, np.arange(len(scores) - 10, len(scores))).any()
