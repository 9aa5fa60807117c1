"""``python -m chapterverse_dev``: refit the reader's models and thresholds that ``chapterverse`` ships.

Run from a source checkout with the test extra installed; the question sets are under ../shared/data/qa.
"""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from chapterverse.answering.model import load_reader_model
from chapterverse.bench.answers import load_question_file
from chapterverse.bench.commands import _fail, _progress
from chapterverse.errors import ChapterverseError, InputError

from .cross_encoder import open_reading_model
from .fit_answers import (FitPlan, TrainingData, collect, describe, fit_confidence, fit_reader, pick_thresholds,
                          threshold_figures, threshold_readings, training_sets, write_weights)
from .fit_reader import evaluate, export, held_out_groups, reader_training_groups, train, training_groups

__all__ = ["dev_app"]

DEV_DATA = """What each one needs (the data sets are under ../shared/data/qa):

* fit-answers: --qa DIR, the QA folder (fairytaleqa, squad-it, squad-es).

* fit-thresholds: --questions FILE (as bench answers --questions) of long books, with absent questions.

* fit-reader: --qa DIR and --questions FILE (the long-book questions' train half); torch and transformers;
  --negatives reader reads those sets' questions as fit-answers does (libraries in --library).
"""

dev_app = typer.Typer(add_completion=False, no_args_is_help=True, rich_markup_mode=None,
                      help="Refit the reader's packaged models and thresholds.", epilog=DEV_DATA)
stdout = Console()
stderr = Console(stderr=True)


@dev_app.command("fit-reader")
def fit_reader_command(
    qa: Annotated[Path, typer.Option("--qa", help="The QA dev sets folder (../shared/data/qa).")] = Path(
        "../shared/data/qa"),
    questions: Annotated[Path, typer.Option(
        "--questions", help="The long-book question file: its train half is learnt from, its test half judged.")
    ] = Path("tests/data/longbooks/questions.jsonl"),
    work: Annotated[Path, typer.Option(
        "--work", help="Where the training groups, checkpoints and the exported model are kept; a run there "
                       "resumes.")] = Path("bench-reader"),
    epochs: Annotated[float, typer.Option("--epochs", min=0.01, help="Passes over the training groups.")] = 1.0,
    threads: Annotated[int, typer.Option("--threads", min=1, help="torch threads.")] = 2,
    negatives: Annotated[str, typer.Option(
        "--negatives", help="document: each question's gold sentence against its document's word-sharing ones; "
                            "reader: against the extractive reader's best other candidates (the readings "
                            "`fit-answers` collects, in --library).")] = "document",
    library: Annotated[Path, typer.Option(
        "--library", help="Where the sets' libraries are kept (reused), for --negatives reader.")] = Path(
        "bench-libraries"),
    init: Annotated[Path | None, typer.Option(
        "--init", help="Start from this checkpoint's weights (e.g. a document-negatives run's last.pt) with a new "
                       "schedule.")] = None,
    learning_rate: Annotated[float, typer.Option("--learning-rate", min=1e-7, help="Peak learning rate.")] = 5e-5,
) -> None:
    """Train the cross-encoder reading model (the first three layers of all-MiniLM-L6-v2; needs the test
    extra: torch, transformers, onnx), export it to WORK/model as int8 ONNX, and print how well the exported
    model ranks the gold sentence first on held-out questions (see docs/BENCHMARKS.md, "Reading model")."""

    work.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()

    def say(line: str) -> None:
        stderr.print(line, markup=False, highlight=False)

    if negatives not in ("document", "reader"):
        _fail(InputError(f"--negatives must be document or reader, not {negatives!r}"))
    groups = (training_groups(qa, questions, work / "groups.pkl", progress=say) if negatives == "document"
              else reader_training_groups(qa, questions, library, work / "reader-groups.pkl", progress=say))
    checkpoint = train(groups, work, epochs=epochs, threads=threads, learning_rate=learning_rate, init=init,
                       progress=say)
    provenance = (f"bench fit-reader --negatives {negatives} --epochs {epochs}"
                  f"{f' --init {init.name}' if init else ''}: {len(groups)} groups "
                  f"({sum(g.answerable for g in groups)} answerable)")
    description = export(checkpoint, work / "model", provenance)
    model = open_reading_model(work / "model")
    held_out = {name: evaluate(model.scores, held) for name, held in held_out_groups(qa, questions).items()}
    stdout.print(json.dumps({**description, "held_out": held_out, "seconds": round(time.perf_counter() - started, 1)},
                            indent=1), markup=False, highlight=False)


@dev_app.command("fit-thresholds")
def fit_thresholds_command(
    questions: Annotated[Path, typer.Option(
        "--questions", help='Question file (JSON lines, as bench answers --questions) of long books, with absent '
                            'questions.')],
    library: Annotated[Path, typer.Option("--library", help="Where the set's library is kept (reused).")] = Path(
        "bench-libraries"),
    absent_refused: Annotated[float, typer.Option(
        "--absent-refused", min=0.5, max=1.0, help="Share of the absent questions the answer threshold must "
                                                   "refuse.")] = 0.9,
    write: Annotated[bool, typer.Option("--write", help="Rewrite the packaged thresholds.")] = False,
    split: Annotated[str, typer.Option(
        "--split", help='The lines of the question file to fit on ("split" of each line: train, test; all: every '
                        'line).')] = "train",
) -> None:
    """Pick the answer threshold of the packaged confidence model on a question file: the lowest (at least
    0.5) that refuses --absent-refused of its absent questions and answers at most 2 % of its answerable ones
    wrong at confidence >= 0.9; the unsure threshold is kept (at most the answer threshold). Fit on the train
    lines by default, so that the test lines measure it."""
    try:
        answer_set = load_question_file(questions, None if split == "all" else split)
        model = load_reader_model()
        read = threshold_readings(answer_set, library / answer_set.name, model)
    except ChapterverseError as exc:
        _fail(exc)
        return
    kinds = [f"{answer_set.name}:{'answerable' if a else 'absent'}" for a in read["answerable"]]
    answer, _ = pick_thresholds(read["confidence"], read["right"], read["answerable"], read["helpful"], kinds,
                                absent_refused=absent_refused)
    first_fit = model.provenance.split(THRESHOLD_MARK)[0]
    model = replace(model, answer_threshold=answer, unsure_threshold=min(model.unsure_threshold, answer),
                    provenance=f"{first_fit}{THRESHOLD_MARK}bench fit-thresholds --questions {questions.name} "
                               f"--absent-refused {absent_refused}")
    figures = threshold_figures(read["confidence"], read["right"], read["answerable"], read["helpful"], kinds, model)
    stdout.print(json.dumps({k: round(v, 4) for k, v in figures.items()}), markup=False, highlight=False)
    if write:
        write_weights(model)


THRESHOLD_MARK = "; answer threshold picked by "
"""Joins a fit's provenance and that of the threshold picked on a question file after it."""


REFIT_MARK = "; confidence and thresholds refit by "
"""Joins the provenance of the fit a --confidence-only refit kept and the refit's own."""


@dev_app.command("fit-answers")
def fit_answers_command(
    qa: Annotated[Path, typer.Option("--qa", help="The QA dev sets folder (../shared/data/qa).")] = Path(
        "../shared/data/qa"),
    library: Annotated[Path, typer.Option("--library", help="Where the sets' libraries are kept (reused).")] = Path(
        "bench-libraries"),
    fairytaleqa_limit: Annotated[int, typer.Option("--fairytaleqa-limit", min=1,
                                                   help="FairytaleQA train questions to learn from (default: all 6,412).")] = 10_000,
    squad_limit: Annotated[int, typer.Option("--squad-limit", min=1,
                                             help="Questions of each SQuAD half (it, es) to learn from.")] = 1500,
    in_domain_limit: Annotated[int, typer.Option(
        "--in-domain-limit", min=1, help="FairytaleQA train questions asked of their story without the answering "
                                         "sections (an eighth as many of each SQuAD half, without the answer's "
                                         "paragraph).")] = 1500,
    long_limit: Annotated[int, typer.Option(
        "--long-limit", min=1, help="FairytaleQA train questions asked of long documents (and as many absent).")
    ] = 1500,
    per_document: Annotated[int, typer.Option(
        "--long-documents", min=2, help="Stories joined into each long document.")] = 8,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the question sample.")] = 0,
    confidence_only: Annotated[bool, typer.Option(
        "--confidence-only", help="Keep the packaged sentence, meaning and composition models; refit the "
                                  "confidence model and its two thresholds.")] = False,
    write: Annotated[bool, typer.Option("--write", help="Rewrite the packaged answering/reader_weights.json.")] = False,
) -> None:
    """Fit the extractive reader (sentence ranking, composition, confidence and its answer and unsure
    thresholds) on dev questions; print the weights and the training figures, and with --write replace the
    packaged ones."""
    plan = FitPlan(fairytaleqa_limit, squad_limit, in_domain_limit, long_limit, per_document, seed)
    data = TrainingData()
    progress = _progress(stderr.is_terminal)
    started = time.perf_counter()
    for name, load, limit in training_sets(qa, plan):
        collect(load(), library / name, limit, seed, data, progress=progress, kind=name)
    provenance = (f"bench fit-answers --fairytaleqa-limit {fairytaleqa_limit} --squad-limit {squad_limit} "
                  f"--in-domain-limit {in_domain_limit} --long-limit {long_limit} --long-documents {per_document} "
                  f"--seed {seed}{' --confidence-only' if confidence_only else ''}: {sum(data.answerable)} "
                  f"answerable and {len(data.answerable) - sum(data.answerable)} absent questions")
    if confidence_only:
        base = load_reader_model()
        first_fit = base.provenance.split(REFIT_MARK)[0]
        model, figures = fit_confidence(data, replace(base, provenance=f"{first_fit}{REFIT_MARK}{provenance}"))
    else:
        model, figures = fit_reader(data, provenance)
    figures["seconds"] = time.perf_counter() - started
    stdout.print(describe(model), markup=False, highlight=False)
    stdout.print(json.dumps({k: round(v, 4) for k, v in figures.items()}), markup=False, highlight=False)
    if write:
        write_weights(model)
