"""`Library.search` latency with small vector scans on BLAS (before) and on ``np.vecdot`` (after),
alternated per question in one process, on an existing library and a SQuAD-format question file.

    .venv/bin/python scripts/scan_latency.py LIBRARY ../shared/data/qa/xquad/xquad.en.dev.json --questions 200
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import chapterverse.index.dense as dense
from chapterverse.library import Library


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("library", type=Path)
    parser.add_argument("squad", type=Path)
    parser.add_argument("--questions", type=int, default=200)
    args = parser.parse_args()
    library = Library(args.library)
    data = json.loads(args.squad.read_text(encoding="utf-8"))["data"]
    questions = [qa["question"] for article in data for p in article["paragraphs"] for qa in p["qas"]]
    library.search("warm up", k=5)
    modes = {"BLAS (before)": 0, "vecdot (after)": dense.SMALL_SCAN_BYTES}
    timings: dict[str, list[float]] = {name: [] for name in modes}
    identical = 0
    for question in questions[:args.questions]:
        found = []
        for name, small in modes.items():
            dense.SMALL_SCAN_BYTES = small
            started = time.perf_counter()
            found.append([hit.chunk.id for hit in library.search(question, k=5)])
            timings[name].append((time.perf_counter() - started) * 1000)
        identical += found[0] == found[1]
    print(f"{library.store.count_chunks()} chunks, load average {os.getloadavg()[0]:.1f}, "
          f"identical hits {identical}/{len(timings['BLAS (before)'])}")
    for name, values in timings.items():
        ordered = sorted(values)
        print(f"{name:15s} p50 {statistics.median(values):6.2f} ms  p90 {ordered[int(0.9 * len(ordered))]:6.2f} ms")


if __name__ == "__main__":
    main()
