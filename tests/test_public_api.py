"""The public Python API (issue 30): ``import chapterverse`` gives a documented surface (README's example, run here
as written against a real library), costs what the CLI's quick commands cost, and refuses a mistyped library."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from hashembed import HashingEmbedder

import chapterverse

DEMO = Path(chapterverse.__file__).with_name("demo") / "the-keeper-of-gull-rock.md"


def test_every_public_name_resolves_and_is_listed() -> None:
    for name in chapterverse.__all__:
        assert getattr(chapterverse, name) is not None, name
    assert sorted(chapterverse.__all__) == dir(chapterverse)
    with pytest.raises(AttributeError):
        chapterverse.no_such_name  # noqa: B018


def test_importing_the_package_loads_none_of_its_heavy_parts() -> None:
    loaded = subprocess.run([sys.executable, "-c", "import sys, chapterverse; print(sorted(sys.modules))"],
                            capture_output=True, text=True, check=True).stdout
    assert "numpy" not in loaded and "chapterverse.library" not in loaded


def test_the_readme_example(tmp_path: Path) -> None:
    with pytest.raises(chapterverse.InputError, match="no library here"):
        chapterverse.open_library(tmp_path / "typo")
    library = chapterverse.open_library(tmp_path / "books", create=True, embedder=HashingEmbedder())  # a fast one
    library.ingest([DEMO])
    hits = library.search("the lamp in the storm", k=3)
    assert hits and all(isinstance(hit, chapterverse.Hit) for hit in hits)
    answer = chapterverse.ask(library, "Who kept the light on Gull Rock?")
    assert isinstance(answer, chapterverse.AnswerResult) and answer.citations
    for citation in answer.citations:
        assert library.resolve(citation.tag).text == citation.text
    library.close()
    assert chapterverse.open_library(tmp_path / "books").documents()[0].title == "The Keeper of Gull Rock"


def test_the_library_shows_its_documented_face() -> None:
    """What a library offers: open (``open_library``), ingest, search, resolve, its documents, remove; writing
    internals live on ``Library.writer``."""
    public = sorted(name for name in dir(chapterverse.Library) if not name.startswith("_"))
    assert public == ["close", "document", "documents", "embedder", "ingest", "printed_pages", "remove", "resolve",
                      "retriever", "search", "search_report", "writer"]


def test_every_public_name_has_an_entry_in_the_api_reference() -> None:
    """docs/reference.md renders each public name from its docstring (mkdocstrings); ``mkdocs build --strict``
    fails on an entry whose name is gone, and this on a public name without an entry."""
    reference = (Path(__file__).resolve().parents[1] / "docs" / "reference.md").read_text(encoding="utf-8")
    entries = re.findall(r"^::: chapterverse\.(\w+)$", reference, re.M)
    assert sorted(entries) == sorted(name for name in chapterverse.__all__ if name != "__version__")
    assert "`chapterverse.__version__`" in reference
