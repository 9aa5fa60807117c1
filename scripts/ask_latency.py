"""Extractive `ask` latency in process on an existing library: the questions of a question file, asked of
their own document and of the whole library, three times each after one warm-up question.

    CHAPTERVERSE_HOME=~/books-lib chapterverse ingest ../shared/data/books/epub/moby-dick.epub ...
    .venv/bin/python scripts/ask_latency.py ~/books-lib tests/data/book_questions.jsonl
    .venv/bin/python scripts/ask_latency.py ~/books-lib tests/data/book_questions.jsonl --compare-embedding

A question's document is matched by file name against the library's document sources; questions whose
document is not in the library are asked of the whole library only. ``--compare-embedding`` asks each
question twice in turn, once embedding every candidate sentence and once only the reader's default number
(``EMBEDDED_SENTENCES``), and counts the answers that differ. CPU time counts numpy's threads too.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

from chapterverse.answering.extractive import EMBEDDED_SENTENCES, extractive_answer
from chapterverse.library import Library


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("library", type=Path)
    parser.add_argument("questions", type=Path)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--compare-embedding", action="store_true")
    args = parser.parse_args()
    library = Library(args.library)
    by_name = {Path(d.source).name: d.id for d in library.documents()}
    questions = [json.loads(line) for line in args.questions.read_text(encoding="utf-8").splitlines() if line]
    readers: dict[str, int | None] = {f"{EMBEDDED_SENTENCES} embedded": EMBEDDED_SENTENCES}
    if args.compare_embedding:
        readers = {"all embedded": None, **readers}
    extractive_answer(library, "warm up")
    wall: dict[tuple[str, str], list[float]] = {}
    cpu: dict[tuple[str, str], list[float]] = {}
    differing = asked = 0
    for _ in range(args.repeat):
        for question in questions:
            own = by_name.get(Path(question["document"]).name)
            for scope, doc_ids in (("own document", [own] if own else None), ("whole library", None)):
                if scope == "own document" and own is None:
                    continue
                answers = set()
                for reader, embedded in readers.items():
                    started, started_cpu = time.perf_counter(), time.process_time()
                    answers.add(extractive_answer(library, question["question"], doc_ids=doc_ids,
                                                   embedded=embedded).answer)
                    wall.setdefault((reader, scope), []).append((time.perf_counter() - started) * 1000)
                    cpu.setdefault((reader, scope), []).append((time.process_time() - started_cpu) * 1000)
                differing += len(answers) > 1
                asked += 1
    print(f"{len(library.documents())} documents, {library.store.count_chunks()} chunks, "
          f"load average {os.getloadavg()[0]:.1f}")
    for (reader, scope), values in wall.items():
        print(f"{reader:12s} {scope:14s} n={len(values):4d}  p50 {statistics.median(values):6.0f} ms  "
              f"p90 {percentile(values, 0.9):6.0f} ms  cpu p50 {statistics.median(cpu[reader, scope]):6.0f} ms")
    if args.compare_embedding:
        print(f"answers that differ between the readers: {differing} of {asked}")


if __name__ == "__main__":
    main()
