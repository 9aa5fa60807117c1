"""Small PDFs with a text layer, written with pypdf for tests: pages of plain lines, an outline and page labels.

This is a helper module, not a test file.
"""

from __future__ import annotations

from pathlib import Path

from pypdf import PdfWriter
from pypdf.generic import DecodedStreamObject, DictionaryObject, NameObject

__all__ = ["KEEPER_PAGES", "text_pdf"]

KEEPER_PAGES = ["A short preface about lighthouses and their keepers.",
                "The keeper lit the paraffin lamp at dusk.\nThe great lens turned all night over the reef.",
                "In the morning the keeper slept until noon."]
"""A preface (labelled i, outline "Preface") and two numbered pages (1 and 2, outline "Chapter One: The Lamp")."""


def text_pdf(path: Path, pages: list[str] = KEEPER_PAGES,
             outline: list[tuple[str, int]] | None = None) -> Path:
    """A PDF of ``pages`` (Helvetica, one text line per line) labelled i, 1, 2, ... with an outline entry on its
    first two pages: "Preface" and "Chapter One: The Lamp" (or ``outline``'s (title, page index) entries)."""
    writer = PdfWriter()
    font = DictionaryObject({NameObject("/Type"): NameObject("/Font"), NameObject("/Subtype"): NameObject("/Type1"),
                             NameObject("/BaseFont"): NameObject("/Helvetica")})
    for text in pages:
        page = writer.add_blank_page(612, 792)
        page[NameObject("/Resources")] = DictionaryObject(
            {NameObject("/Font"): DictionaryObject({NameObject("/F1"): font})})
        stream = DecodedStreamObject()
        shown = "".join(f"({line}) Tj 0 -16 Td " for line in text.split("\n"))
        stream.set_data(f"BT /F1 12 Tf 72 720 Td {shown}ET".encode())
        page.replace_contents(stream)
    writer.set_page_label(0, 0, style="/r")
    writer.set_page_label(1, len(pages) - 1, style="/D", start=1)
    for title, page_number in outline or [("Preface", 0), ("Chapter One: The Lamp", 1)]:
        writer.add_outline_item(title=title, page_number=page_number)
    with path.open("wb") as out:
        writer.write(out)
    return path
