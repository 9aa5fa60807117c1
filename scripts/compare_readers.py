"""The extractive reader against the one it replaced, on the same questions in the same run.

The previous reader is read from git (commit de7168a, ``src/chapterverse/answering.py``: the best sentences
of the top passages by cosine and word overlap, "found" when the top passage's fused score reached 0.30).
Each question is asked of every reader one after the other, so machine load falls on all alike; the current
reader is also run limited to one sentence, so a gain is not read from longer answers alone.

    .venv/bin/python scripts/compare_readers.py --fairytaleqa ../shared/data/qa/fairytaleqa --limit 300
    .venv/bin/python scripts/compare_readers.py --squad ../shared/data/qa/xquad/xquad.en.dev.json --limit 300
    .venv/bin/python scripts/compare_readers.py --squad ../shared/data/qa/squad-it/squad-it.dev.json --articles odd
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import subprocess
import sys
import time
import types
from pathlib import Path

from chapterverse.answering import extractive_answer
from chapterverse.answering.model import load_reader_model
from chapterverse.bench.answers import (
    ARTICLE_HALVES,
    AnswerRecord,
    absent_questions,
    default_library_dir,
    load_fairytaleqa,
    load_squad_answers,
    open_answer_library,
    record_answer,
    sample_questions,
    score_records,
    split_articles,
)

PREVIOUS = "de7168a"
ROOT = Path(__file__).resolve().parents[1]


def previous_reader() -> types.ModuleType:
    """The replaced ``answering.py`` as a module of its own (relative imports made absolute)."""
    source = subprocess.run(["git", "-C", str(ROOT), "show", f"{PREVIOUS}:src/chapterverse/answering.py"],
                            capture_output=True, text=True, check=True).stdout
    module = types.ModuleType("previous_answering")
    sys.modules[module.__name__] = module  # dataclasses look their module up while the class is made
    exec(compile(source.replace("from .", "from chapterverse."), "previous_answering.py", "exec"), module.__dict__)
    return module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--squad", type=Path)
    parser.add_argument("--fairytaleqa", type=Path)
    parser.add_argument("--split", default="val")
    parser.add_argument("--articles", choices=ARTICLE_HALVES, default="all",
                        help="SQuAD: all articles, or the even or odd ones (the reader learns from the even ones)")
    parser.add_argument("--limit", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    answer_set = (load_squad_answers(args.squad) if args.squad else load_fairytaleqa(args.fairytaleqa, args.split))
    if args.squad and args.articles != "all":
        answer_set = split_articles(answer_set, ARTICLE_HALVES.index(args.articles) - 1)
    library, doc_ids = open_answer_library(answer_set, default_library_dir(answer_set, None))
    asked = sample_questions([q for q in answer_set.questions if not q.absent], args.limit, args.seed)
    plan = [*asked, *absent_questions(answer_set, args.seed, asked)]
    previous = previous_reader()
    one_sentence = dataclasses.replace(load_reader_model(), max_sentences=1)
    readers = {"previous": lambda q, d: previous.extractive_answer(library, q, doc_ids=[d]),
               "current": lambda q, d: extractive_answer(library, q, doc_ids=[d]),
               "current, 1 sentence": lambda q, d: extractive_answer(library, q, doc_ids=[d], model=one_sentence)}
    records: dict[str, list[AnswerRecord]] = {name: [] for name in readers}
    for reader in readers.values():
        reader(plan[0].text, doc_ids[plan[0].source])  # load the embedder and indexes outside the timings
    for question in plan:
        for name, reader in readers.items():
            started = time.perf_counter()
            result = reader(question.text, doc_ids[question.source])
            records[name].append(record_answer(question, "document", result, (time.perf_counter() - started) * 1000))
    print(f"{answer_set.name}: {len(asked)} answerable + {len(plan) - len(asked)} absent questions, "
          f"load average {os.getloadavg()[0]:.1f}")
    print(f"{'':22s} " + " ".join(f"{name:>20s}" for name in readers))
    scores = {name: score_records(rs) for name, rs in records.items()}
    for label, field in (("answer holds gold", "answer_holds_gold"), ("false refusals", "false_refusals"),
                         ("absent refused", "absent_refused"), ("answer chars median", "answer_chars_median"),
                         ("sentences median", "sentences_median"), ("ms p50", "ms_p50")):
        values = [getattr(scores[name], field) or 0.0 for name in readers]
        print(f"{label:22s} " + " ".join(f"{v:20.3f}" for v in values))


if __name__ == "__main__":
    sys.exit(main())
