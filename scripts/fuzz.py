"""Coverage-guided fuzzing (atheris/libFuzzer) of the parsers that read untrusted text, for a bounded time.

    .venv/bin/pip install -e ".[fuzz]"                         # atheris 3.0.0: a manylinux wheel, no clang
    .venv/bin/python scripts/fuzz.py --seconds 60              # every target, 60 s each
    .venv/bin/python scripts/fuzz.py --seconds 60 --target jsonl

Targets, each with the property it checks (a violated property or an unexpected exception is a crash):

* ``tags``: ``parse_tag`` raises only TagError and round-trips what it accepts; ``find_tags`` never raises.
* ``citations``: the streaming tag filter, fed the answer in fuzzer-chosen pieces, writes exactly what
  ``verify_answer`` writes for the whole answer, and neither shows a tag absent from the evidence.
* ``selection``: ``parse_selection`` returns a selection of valid ids or raises SelectionParseError.
* ``jsonl``: ``read_jsonl`` returns storable chunks or raises SourceError (BadLinesError with line numbers).

Each target runs in its own process (libFuzzer exits when it is done). A crash leaves its input in
``--artifacts`` (default ``fuzz-artifacts/``); turn it into a regression test. Not part of the test run:
the hypothesis properties in tests/ cover the same ground in seconds; this digs deeper when given minutes.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the modules under test are imported only once atheris instruments them
    from chapterverse.citations import Evidence, Resolver
    from chapterverse.positions import Span

TARGETS = ("tags", "citations", "selection", "jsonl")
SEEDS = {
    "tags": [b"[f1-0-16]", b" f12-3-40 ", b"see [f1-0-16] and [F2-5-9] [f3-9-1]", b"[f" + b"9" * 16 + b"-1-2]"],
    "citations": [b"\x03\x05\x09\x20Call me Ishmael [f1-0-16]. Poor [f1-17-31], rich [f9-1-2] [f1-10-9999].",
                  b"\x01\x02\"Some years ago\" [f1-17-31] [f1-[f1-0-16] [f1-0-16]."],
    "selection": [b'{"Thinking": "x", "answer": ["1", "seg-3", "9"]}', b"```json\n{'answer': [1, 2,]}\n```",
                  b'Sure! {thinking: "a", Answer: "1, 2"}'],
    "jsonl": [b'{"text": "a", "source": "s", "chunk_index": 2, "page": [1, {"x": null}]}\n\n{"text": "b"}\r\n',
              b'\xef\xbb\xbf{"text": "\\ud83d\\ude00", "chunk_index": 0}\n["x"]'],
}
"""Starting inputs: libFuzzer mutates from these instead of from nothing."""
TOKENS = {
    "tags": [b"[f", b"-", b"]", b"[F", b"999999999999999"],
    "citations": [b"[f1-0-16]", b"[f1-17-31]", b"[f9-1-2]", b"[f1-", b"\xe2\x80\x9c", b". ", b"\n"],
    "selection": [b'"answer"', b'"Thinking"', b"```json", b"{", b"}", b"[", b"]", b"'", b",", b"1e400", b"\\"],
    "jsonl": [b'"text"', b'"source"', b'"chunk_index"', b"NaN", b"-Infinity", b'"\\ud800"', b'"\\udc00"',
              b"2147483648", b"[[[[[[[[[[[[[[[[", b"\xef\xbb\xbf", b"\\u0000", b"true", b"null", b"\n"],
}
"""libFuzzer dictionary entries: the tokens that matter to each parser, so mutations reach its edge cases."""
_TEXT = "Call me Ishmael. Some years ago, having little or no money in my purse, I thought I would sail."


def _resolver() -> Resolver:
    from chapterverse.citations import ResolvedSpan

    def resolve(span: Span) -> ResolvedSpan | None:
        inside = span.file == 1 and span.end <= len(_TEXT)
        return ResolvedSpan(tag=span.key, doc_id=1, doc_title="Moby-Dick", file=span.file, start=span.start,
                            end=span.end, text=_TEXT[span.start : span.end], toc_path=[], file_title="Moby-Dick",
                            label="", source="moby-dick.txt") if inside else None

    return resolve


_EVIDENCE_TEXT = "results: [f1-0-16] [f1-17-31] [f1-33-70] [f1-10-9999]"
"""What the citations target's tool result showed: three real spans and one beyond the end of the text."""


def _evidence() -> Evidence:
    from chapterverse.citations import Evidence

    evidence = Evidence(_resolver())
    evidence.add_text(_EVIDENCE_TEXT)
    return evidence


def _check_tags(data: bytes) -> None:
    from chapterverse.errors import TagError
    from chapterverse.positions import find_tags, parse_tag

    text = data.decode("utf-8", "replace")
    try:
        span = parse_tag(text)
    except TagError:
        span = None
    if span is not None and parse_tag(span.tag) != span:
        raise AssertionError(f"parse_tag does not round-trip {text!r}")
    for found in find_tags(text):
        if parse_tag(found.tag) != found:
            raise AssertionError(f"find_tags gave {found} that does not round-trip")


def _check_citations(data: bytes) -> None:
    import atheris

    from chapterverse.citations import StreamingTagFilter, verify_answer
    from chapterverse.positions import find_tags

    fdp = atheris.FuzzedDataProvider(data)
    cuts = sorted(fdp.ConsumeIntListInRange(fdp.ConsumeIntInRange(0, 8), 0, 256))
    text = fdp.ConsumeUnicodeNoSurrogates(fdp.remaining_bytes())
    points = sorted({0, len(text), *(min(c, len(text)) for c in cuts)})
    filt = StreamingTagFilter(_evidence())
    streamed = "".join(filt.feed(text[a:b]) for a, b in zip(points, points[1:])) + filt.flush()
    batch = verify_answer(text, _evidence())
    if streamed != batch.text:
        raise AssertionError(f"streamed {streamed!r} != batch {batch.text!r} for {text!r} cut at {points}")
    shown = set(find_tags(batch.text))
    if not shown <= {c.span for c in batch.citations} or not shown <= set(find_tags(_EVIDENCE_TEXT)):
        raise AssertionError(f"a tag absent from the evidence was shown: {shown} for {text!r}")


def _check_selection(data: bytes) -> None:
    from chapterverse.llm.selection import SelectionParseError, parse_selection

    valid = {"1", "2", "seg-3"}
    try:
        selection = parse_selection(data.decode("utf-8", "replace"), valid_ids=valid, max_ids=2)
    except SelectionParseError:
        return
    if not set(selection.ids) <= valid or len(selection.ids) > 2 or set(selection.invalid_ids) & valid:
        raise AssertionError(f"bad selection {selection}")


def _jsonl_checker(folder: Path) -> Callable[[bytes], None]:
    from chapterverse.errors import BadLinesError, SourceError
    from chapterverse.sources.jsonl import MAX_CHUNK_INDEX, read_jsonl

    path = folder / "f.jsonl"

    def check(data: bytes) -> None:
        path.write_bytes(data)
        try:
            document = read_jsonl(path)
        except BadLinesError as exc:
            if not exc.bad_lines or min(exc.bad_lines) < 1:
                raise AssertionError(f"bad line numbers {exc.bad_lines}") from exc
            return
        except SourceError:
            return
        for file, chunk in zip(document.files, document.prechunked or [], strict=True):
            if not (file.text.strip() and 0 <= chunk.chunk_index <= MAX_CHUNK_INDEX):
                raise AssertionError(f"unstorable chunk {chunk} from {data!r}")
            json.dumps([file.text, chunk.source, chunk.metadata], ensure_ascii=False, allow_nan=False).encode()

    return check


def _escape(token: bytes) -> str:
    """A dictionary entry in libFuzzer's syntax: printable ASCII as is, anything else (and quotes) as \\xNN."""
    return "".join(chr(b) if 32 <= b < 127 and b not in b'"\\' else f"\\x{b:02x}" for b in token)


def _fuzz_one(target: str, seconds: int, artifacts: Path, workdir: Path) -> None:
    """Run one target under libFuzzer in this process, which libFuzzer ends (so ``workdir`` is the parent's
    to clean up: corpus, dictionary and scratch files all live there)."""
    import atheris

    with atheris.instrument_imports():
        import chapterverse.citations  # noqa: F401
        import chapterverse.llm.selection  # noqa: F401
        import chapterverse.positions  # noqa: F401
        import chapterverse.sources.jsonl  # noqa: F401
    checks = {"tags": _check_tags, "citations": _check_citations, "selection": _check_selection,
              "jsonl": _jsonl_checker(workdir)}
    artifacts.mkdir(parents=True, exist_ok=True)
    corpus = workdir / "corpus"
    corpus.mkdir()
    for n, seed in enumerate(SEEDS[target]):
        (corpus / f"seed{n}").write_bytes(seed)
    tokens = workdir / "tokens.dict"
    tokens.write_text("".join(f'"{_escape(token)}"\n' for token in TOKENS[target]), encoding="ascii")
    atheris.Setup([sys.argv[0], f"-max_total_time={seconds}", f"-artifact_prefix={artifacts}/{target}-",
                   "-max_len=4096", "-print_final_stats=1", f"-dict={tokens}", str(corpus)], checks[target])
    atheris.Fuzz()


_STAT = re.compile(r"stat::(number_of_executed_units|new_units_added|peak_rss_mb):\s*(\d+)")


def _run_child(target: str, seconds: int, artifacts: Path) -> subprocess.CompletedProcess[str]:
    with tempfile.TemporaryDirectory(prefix=f"fuzz-{target}-") as workdir:
        return subprocess.run([sys.executable, __file__, "--child", target, "--seconds", str(seconds),
                               "--artifacts", str(artifacts), "--workdir", workdir], capture_output=True, text=True)


def _run_all(targets: list[str], seconds: int, artifacts: Path) -> int:
    """Each target in a child process; prints runs, coverage growth and crashes. Exit 1 on any crash."""
    failed = 0
    for target in targets:
        child = _run_child(target, seconds, artifacts)
        stats = dict(_STAT.findall(child.stderr))
        crashed = child.returncode != 0
        failed += crashed
        print(f"{target}: {stats.get('number_of_executed_units', '?')} runs in {seconds} s, "
              f"{stats.get('new_units_added', '?')} new coverage units, peak RSS {stats.get('peak_rss_mb', '?')} MB, "
              f"{'CRASH (exit ' + str(child.returncode) + ')' if crashed else 'no crash'}")
        if crashed:
            print("\n".join(child.stderr.splitlines()[-30:]))
    return 1 if failed else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", choices=TARGETS, action="append", help="default: every target")
    parser.add_argument("--seconds", type=int, default=60, help="fuzzing time per target")
    parser.add_argument("--artifacts", type=Path, default=Path("fuzz-artifacts"), help="where crash inputs go")
    parser.add_argument("--child", choices=TARGETS, help=argparse.SUPPRESS)
    parser.add_argument("--workdir", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _fuzz_one(args.child, args.seconds, args.artifacts.resolve(), args.workdir)
        return
    sys.exit(_run_all(args.target or list(TARGETS), args.seconds, args.artifacts.resolve()))


if __name__ == "__main__":
    main()
