"""The int8 first pass of a dense search (:func:`chapterverse.index.dense._code_products`'s one SimSIMD call)
written into place by ``cdist(..., out=...)`` (before issue 28: drops a reference to ``None`` per call) against
a new result copied into place (after), alternated in one process on random codes of 512 dimensions; checks
that both give the same products.

    .venv/bin/python scripts/code_scan_copy.py --rows 1000 10000 100000
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable

import numpy as np
import simsimd

Scan = Callable[[np.ndarray, np.ndarray, np.ndarray], None]


def into_out(query: np.ndarray, codes: np.ndarray, out: np.ndarray) -> None:
    simsimd.cdist(query, codes, metric="dot", out=out, out_dtype="float32")


def copied(query: np.ndarray, codes: np.ndarray, out: np.ndarray) -> None:
    out[...] = simsimd.cdist(query, codes, metric="dot", out_dtype="float32")


def per_call_us(scan: Scan, query: np.ndarray, codes: np.ndarray, out: np.ndarray, calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        scan(query, codes, out)
    return (time.perf_counter() - start) / calls * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[1_000, 10_000, 100_000])
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()
    # `into_out` drops one of None's references a call: lend None enough of them to outlive the timing, and
    # leave with os._exit so that the interpreter never frees them.
    _lent = [None] * 50_000_000
    rng = np.random.default_rng(0)
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    for rows in args.rows:
        codes = rng.integers(-127, 128, (rows, 512), dtype=np.int8)
        query = rng.integers(-127, 128, (1, 512), dtype=np.int8)
        before, after = np.empty((1, rows), np.float32), np.empty((1, rows), np.float32)
        into_out(query, codes, before)
        copied(query, codes, after)
        assert np.array_equal(before, after), "the two calls must give the same products"
        calls = max(20, 2_000_000 // rows)
        times: dict[str, list[float]] = {"before": [], "after": []}
        for round_ in range(args.rounds):
            order = [("before", into_out, before), ("after", copied, after)]
            for name, scan, out in order if round_ % 2 == 0 else order[::-1]:
                times[name].append(per_call_us(scan, query, codes, out, calls))
        old, new = statistics.median(times["before"]), statistics.median(times["after"])
        print(f"{rows:>9,} rows: out= {old:8.1f} us, copied {new:8.1f} us a call (medians of {args.rounds}); "
              f"copied/out= {new / old:.3f}")
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    os._exit(0)


if __name__ == "__main__":
    main()
