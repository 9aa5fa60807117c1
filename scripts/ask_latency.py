"""Extractive `ask` latency in process on an existing library: the questions of a question file, asked of
their own document and of the whole library, three times each after one warm-up question.

    CHAPTERVERSE_HOME=~/books-lib chapterverse ingest ../shared/data/books/epub/moby-dick.epub ...
    .venv/bin/python scripts/ask_latency.py ~/books-lib tests/data/book_questions.jsonl

A question's document is matched by file name against the library's document sources; questions whose
document is not in the library are asked of the whole library only.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

from chapterverse.answering import extractive_answer
from chapterverse.library import Library


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("library", type=Path)
    parser.add_argument("questions", type=Path)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    library = Library(args.library)
    by_name = {Path(d.source).name: d.id for d in library.documents()}
    questions = [json.loads(line) for line in args.questions.read_text(encoding="utf-8").splitlines() if line]
    extractive_answer(library, "warm up")
    timings: dict[str, list[float]] = {"own document": [], "whole library": []}
    for _ in range(args.repeat):
        for question in questions:
            own = by_name.get(Path(question["document"]).name)
            for scope, doc_ids in (("own document", [own] if own else None), ("whole library", None)):
                if scope == "own document" and own is None:
                    continue
                started = time.perf_counter()
                extractive_answer(library, question["question"], doc_ids=doc_ids)
                timings[scope].append((time.perf_counter() - started) * 1000)
    print(f"{len(library.documents())} documents, {library.store.count_chunks()} chunks, "
          f"load average {os.getloadavg()[0]:.1f}")
    for scope, values in timings.items():
        if values:
            print(f"{scope:14s} n={len(values):4d}  p50 {statistics.median(values):6.0f} ms  "
                  f"p90 {percentile(values, 0.9):6.0f} ms")


if __name__ == "__main__":
    main()
