"""Books as people bring them (issue 27): how many chunks of each book are a contents list or Gutenberg licence text.

Every book under the folder (``epub/*.epub``, ``pdf/*.pdf``, ``text/*`` files, and ``text/*/`` folders read as one
book) is read and chunked as ``chapterverse ingest`` does. A chunk counts as

- a contents list when three of its lines at least, and three in five of its lines with a letter, are titles of
  the book's own contents entries (however the reader found the page: this does not ask the EPUB reader);
- licence text when it says "Project Gutenberg" or "gutenberg.org".

Run it on the code before a change by putting that code's ``src`` first on the path (``git archive REV src``):

    PYTHONPATH=src .venv/bin/python scripts/book_pages.py ../shared/data/books
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

_LICENCE = re.compile(r"project gutenberg|gutenberg\.org", re.IGNORECASE)


def _norm(line: str) -> str:
    return " ".join(re.sub(r"[\W_]+", " ", line).casefold().split())


def _is_contents_list(text: str, titles: set[str]) -> bool:
    lines = [_norm(line) for line in text.split("\n") if any(ch.isalpha() for ch in line)]
    listed = sum(line in titles for line in lines)
    return listed >= 3 and listed >= 0.6 * len(lines)


def books(folder: Path) -> list[Path]:
    """The books under ``folder``, in name order within each format."""
    text = folder / "text"
    return [*sorted(folder.glob("epub/*.epub")), *sorted(folder.glob("pdf/*.pdf")),
            *(sorted(text.iterdir()) if text.is_dir() else [])]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path, help="e.g. ../shared/data/books")
    args = parser.parse_args()
    from chapterverse.chunking import chunk_document
    from chapterverse.sources import read_source
    from chapterverse.sources.book import read_book

    totals = [0, 0, 0]
    print(f"{'book':34} {'chunks':>7} {'contents':>8} {'licence':>7}")
    for path in books(args.folder):
        document = read_book(path) if path.is_dir() else read_source(path)
        titles = {_norm(entry.title) for entry in document.toc} - {""}
        texts = [document.files[c.file_index].text[c.start:c.end] for c in chunk_document(document)]
        row = [len(texts), sum(_is_contents_list(t, titles) for t in texts),
               sum(bool(_LICENCE.search(t)) for t in texts)]
        totals = [a + b for a, b in zip(totals, row)]
        print(f"{path.name:34} {row[0]:7} {row[1]:8} {row[2]:7}")
    print(f"{'total':34} {totals[0]:7} {totals[1]:8} {totals[2]:7}")


if __name__ == "__main__":
    sys.exit(main())
