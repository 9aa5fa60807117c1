"""Book structure: does each book of the structure set get its title and its top-level contents?

Every book of ``scripts/structure_set.json`` (EPUB, PDF, plain text, Markdown, a folder of chapters) is read as
``chapterverse ingest`` reads it. A row shows the title found (right when it equals the expected one, case and
spacing folded), the number of top-level contents entries found against the book's own (under a lone top entry
named as the book, the entries below it), and whether the first and last of them start with the expected names. A book whose file is absent (no shared data folder) is skipped
and listed as such.

``--baseline REV`` runs the same measurement on the code of git revision REV (its ``src`` exported to a temporary
folder) and shows both side by side:

    CHAPTERVERSE_SHARED=/work/shared PYTHONPATH=src .venv/bin/python scripts/text_structure.py --baseline main

A script, not a ``chapterverse bench`` command: it checks the readers' output against hand-written expectations
about particular books, where the bench commands measure the product on question sets through a library.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SHARED_PREFIX = "shared:"


def shared_folder() -> Path:
    """``CHAPTERVERSE_SHARED``, else ``shared`` beside the repository (the rule tests/conftest.py follows)."""
    configured = os.environ.get("CHAPTERVERSE_SHARED")
    return Path(configured) if configured else ROOT.parent / "shared"


def book_path(name: str) -> Path:
    """A set entry's path: ``shared:REL`` under the shared folder, else relative to the repository."""
    if name.startswith(SHARED_PREFIX):
        return shared_folder() / name[len(SHARED_PREFIX):]
    return ROOT / name


def _fold(text: str) -> str:
    return " ".join(text.split()).casefold()


def measure(books: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per book present: title found and right, top-level entries found, first and last right."""
    from chapterverse.sources import read_source
    from chapterverse.sources.book import read_book

    rows = []
    for book in books:
        path = book_path(book["path"])
        if not path.exists():
            rows.append({"book": path.name, "skipped": True})
            continue
        document = read_book(path) if path.is_dir() else read_source(path)
        names = top_level(document.title, document.toc)
        ends_right = (not names and book["contents"] == 0) or (
            bool(names) and "first" in book and _fold(names[0]).startswith(_fold(book["first"]))
            and _fold(names[-1]).startswith(_fold(book["last"])))
        rows.append({"book": path.name, "skipped": False, "title": document.title,
                     "title_ok": _fold(document.title) == _fold(book["title"]), "found": len(names),
                     "expected": book["contents"], "ends_ok": ends_right,
                     "first": names[0] if names else "", "last": names[-1] if names else ""})
    return rows


def top_level(title: str, toc: list[Any]) -> list[str]:
    """The names of the top-level entries; below a lone top entry named as the book (a Markdown ``# Title``),
    those of the level under it: that entry is the book itself, not a part of its contents."""
    level = min((entry.level for entry in toc), default=0)
    names = [entry.title for entry in toc if entry.level == level]
    if len(names) == 1 and _fold(names[0]) == _fold(title) and len(toc) > 1:
        names = [entry.title for entry in toc if entry.level == level + 1]
    return names


def baseline(revision: str, expected: Path) -> list[dict[str, Any]]:
    """The rows this script gives on the code of ``revision``, run in a subprocess with that ``src`` first."""
    with tempfile.TemporaryDirectory() as tmp:
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", revision, "src"], check=True,
                                 capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
        env = {**os.environ, "PYTHONPATH": str(Path(tmp, "src"))}
        out = subprocess.run([sys.executable, __file__, "--set", str(expected), "--json"], env=env,
                             check=True, capture_output=True, text=True).stdout
    rows: list[dict[str, Any]] = json.loads(out)
    return rows


def _right(row: dict[str, Any]) -> bool:
    return bool(row["title_ok"] and row["found"] == row["expected"] and row["ends_ok"])


def _cells(row: dict[str, Any]) -> list[str]:
    title = row["title"] if len(row["title"]) <= 32 else row["title"][:29] + "..."
    return [f"{title.replace('|', '/')} {'✓' if row['title_ok'] else '✗'}",
            f"{row['found']} / {row['expected']} {'✓' if row['found'] == row['expected'] else '✗'}",
            "✓" if row["ends_ok"] else "✗"]


def table(after: list[dict[str, Any]], before: list[dict[str, Any]] | None) -> str:
    """A Markdown table: per book the title found, top-level entries found / expected, first and last right."""
    heads = ["Title", "Contents found / expected", "First and last"]
    head = ["Book"] + ([f"Before: {h.lower()}" for h in heads] + [f"After: {h.lower()}" for h in heads]
                       if before else heads)
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    skipped = [row["book"] for row in after if row["skipped"]]
    for n, row in enumerate(after):
        if row["skipped"]:
            continue
        cells = [row["book"], *(_cells(before[n]) if before else []), *_cells(row)]
        lines.append("| " + " | ".join(cells) + " |")
    summary = _summary("After" if before else "Measured", after)
    if before:
        summary = _summary("Before", before) + " " + summary
    if skipped:
        summary += f" Skipped (not on this machine): {', '.join(skipped)}."
    return "\n".join(lines) + "\n\n" + summary


def _summary(label: str, rows: list[dict[str, Any]]) -> str:
    present = [row for row in rows if not row["skipped"]]
    contents = sum(row["found"] == row["expected"] and row["ends_ok"] for row in present)
    return (f"{label}: titles right {sum(row['title_ok'] for row in present)}/{len(present)}, contents right "
            f"{contents}/{len(present)}, both {sum(_right(row) for row in present)}/{len(present)}.")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--set", type=Path, default=ROOT / "scripts" / "structure_set.json",
                        help="the structure set's JSON (default: scripts/structure_set.json)")
    parser.add_argument("--baseline", metavar="REV", help="also measure the code of this git revision")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = parser.parse_args()
    books = json.loads(args.set.read_text(encoding="utf-8"))["books"]
    rows = measure(books)
    if args.json:
        print(json.dumps(rows))
        return
    before = baseline(args.baseline, args.set.resolve()) if args.baseline else None
    print(table(rows, before))


if __name__ == "__main__":
    main()
