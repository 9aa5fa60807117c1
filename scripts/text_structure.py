"""Plain-text structure (issue 29): do the headings found in plain-text and Markdown books match the printed chapters?

Each book of the expected-chapters JSON (a file, or a folder read as one book) is read as ``chapterverse ingest``
reads it. A book matches when the TOC holds exactly its printed chapters on one level (the entries whose title
matches the book's ``pattern``), with at most ``others`` more entries on that level and above (a preface, an
appendix, part titles: what the printed contents list besides chapters). Also shown: the title found, and how
many chunks hold Project Gutenberg's licence text (they would be searched and cited).

``--baseline REV`` runs the same measurement on the code of git revision REV (its ``src`` exported to a temporary
folder) and shows both side by side:

    PYTHONPATH=src .venv/bin/python scripts/text_structure.py ../books-cache/text scripts/text_structure_books.json \
        --baseline 265e553

The books are not in the repository: the JSON names where each one came from.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

_LICENCE = re.compile(r"project gutenberg|gutenberg\.org", re.IGNORECASE)


def measure(folder: Path, books: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per book: chapters found, TOC size, whether it matches, the title, chunks with licence text."""
    from chapterverse.chunking import chunk_document
    from chapterverse.sources import read_source
    from chapterverse.sources.book import read_book

    rows = []
    for book in books:
        path = folder / book["file"]
        document = read_book(path) if path.is_dir() else read_source(path)
        hits = [entry for entry in document.toc if re.search(book["pattern"], entry.title)]
        levels = {entry.level for entry in hits}
        level = min(levels, default=0)
        around = [entry for entry in document.toc if entry.level <= level]
        match = (len(hits) == book["chapters"] and len(levels) == 1
                 and len(around) <= book["chapters"] + book.get("others", 0))
        chunks = chunk_document(document)
        licence = sum(1 for chunk in chunks
                      if _LICENCE.search(document.files[chunk.file_index].text[chunk.start:chunk.end]))
        rows.append({"book": book["name"], "chapters": book["chapters"], "found": len(hits),
                     "levels": len(levels), "toc": len(document.toc), "match": match, "title": document.title,
                     "title_ok": document.title.casefold() == book["title"].casefold(), "licence_chunks": licence})
    return rows


def baseline(revision: str, folder: Path, expected: Path) -> list[dict[str, Any]]:
    """The rows this script gives on the code of ``revision``, run in a subprocess with that ``src`` first."""
    root = Path(__file__).resolve().parent.parent
    with tempfile.TemporaryDirectory() as tmp:
        archive = subprocess.run(["git", "-C", str(root), "archive", revision, "src"], check=True,
                                 capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
        env = {**os.environ, "PYTHONPATH": str(Path(tmp, "src"))}
        out = subprocess.run([sys.executable, __file__, str(folder), str(expected), "--json"], env=env,
                             check=True, capture_output=True, text=True).stdout
    rows: list[dict[str, Any]] = json.loads(out)
    return rows


def table(after: list[dict[str, Any]], before: list[dict[str, Any]] | None) -> str:
    """A Markdown table: chapters found of the printed ones, on one level, TOC size, match, title, licence chunks."""
    def cell(row: dict[str, Any]) -> str:
        levels = "" if row["levels"] <= 1 else f" on {row['levels']} levels"
        return f"{row['found']}{levels} / {row['toc']} {'✓' if row['match'] else '✗'}"

    head = "| Book | Chapters | " + ("Before: found / TOC | " if before else "") + "After: found / TOC | " + \
        ("Title before | " if before else "") + "Title after | Licence chunks |"
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for n, row in enumerate(after):
        old = before[n] if before else None
        licence = f"{old['licence_chunks']} → {row['licence_chunks']}" if old else str(row["licence_chunks"])
        cells = [row["book"], str(row["chapters"]), *([cell(old)] if old else []), cell(row),
                 *([_title(old)] if old else []), _title(row), licence]
        lines.append("| " + " | ".join(cells) + " |")
    matched = sum(row["match"] for row in after)
    summary = f"After: {matched}/{len(after)} books match, titles right {sum(r['title_ok'] for r in after)}/{len(after)}"
    if before:
        summary = (f"Before: {sum(r['match'] for r in before)}/{len(before)} books match, titles right "
                   f"{sum(r['title_ok'] for r in before)}/{len(before)}. " + summary)
    return "\n".join(lines) + "\n\n" + summary + "."


def _title(row: dict[str, Any]) -> str:
    title = row["title"] if len(row["title"]) <= 40 else row["title"][:37] + "..."
    return f"{title.replace('|', '/')} {'✓' if row['title_ok'] else '✗'}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path, help="the folder holding the books named in the JSON")
    parser.add_argument("expected", type=Path, help="the expected-chapters JSON")
    parser.add_argument("--baseline", metavar="REV", help="also measure the code of this git revision")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = parser.parse_args()
    books = json.loads(args.expected.read_text(encoding="utf-8"))["books"]
    rows = measure(args.folder, books)
    if args.json:
        print(json.dumps(rows))
        return
    before = baseline(args.baseline, args.folder.resolve(), args.expected.resolve()) if args.baseline else None
    print(table(rows, before))


if __name__ == "__main__":
    main()
