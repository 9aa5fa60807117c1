"""Search results show whole sentences (the trial on a fresh clone): a retrieval chunk starts where its window
fell, often mid-sentence, and a hit that began "y le dejaron asido de manera..." told a reader nothing of who or
where. ``chapterverse search`` and the reader's ``/api/search`` show the sentences the chunk cuts, and their tag
names exactly the text shown. Against a real chapter of Don Quijote, a real library and a real server."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import shared_path
from serverutil import Server, running_server, settings_for, shared_embedder
from typer.testing import CliRunner

from chapterverse.cli import app
from chapterverse import Library
from chapterverse.positions import parse_tag

QUERIES = ("Rocinante", "el nombre de su rocín", "libros de caballerías", "la sobrina y el ama")
SENTENCE_END = re.compile(r"[.?!…]+[»”\"'’)\]]*\s*$")


@pytest.fixture(scope="module")
def chapter(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A library holding the first chapter of Don Quijote, embedded by the default model."""
    source = shared_path("books", "text", "don-quijote-es", "01-Primera_Parte", "01-Capítulo_1.md")
    location = tmp_path_factory.mktemp("passages") / "lib"
    library = Library(location, embedder=shared_embedder())
    library.ingest([source])
    library.close()
    return location


@pytest.fixture(scope="module")
def server(chapter: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with running_server(settings_for(tmp_path_factory.mktemp("srv"), library=chapter),
                        embedder=shared_embedder()) as running:
        yield running


def canonical_of(library: Path, file_id: int) -> str:
    opened = Library(library, embedder=shared_embedder())
    try:
        return opened.store.file(file_id).text
    finally:
        opened.close()


def assert_whole_sentences(library: Path, results: list[dict[str, Any]]) -> None:
    """Each hit's text is exactly what its tag names and begins where a sentence (or a paragraph) begins."""
    assert results
    for hit in results:
        span = parse_tag(hit["tag"])
        start, end = span.start, span.end
        canonical = canonical_of(library, span.file)
        assert canonical[start:end] == hit["text"]
        before = canonical[:start]
        assert before.strip() == "" or before.endswith("\n\n") or SENTENCE_END.search(before), (
            f"{hit['tag']} starts mid-sentence: …{before[-60:]!r} | {hit['text'][:60]!r}")
        assert SENTENCE_END.search(hit["text"]) or canonical[end:].startswith("\n\n") or end == len(canonical), (
            f"{hit['tag']} ends mid-sentence: {hit['text'][-60:]!r} | {canonical[end:end + 40]!r}…")


def test_the_chunks_themselves_cut_sentences(chapter: Path) -> None:
    """What the fix is for: the retrieval chunks these queries find do start mid-sentence."""
    library = Library(chapter, embedder=shared_embedder())
    try:
        cut = [h for q in QUERIES for h in library.search(q, k=5)
               if not SENTENCE_END.search(library.store.file(h.chunk.file_id).text[:h.chunk.start] or ".")]
    finally:
        library.close()
    assert cut


@pytest.mark.parametrize("query", QUERIES)
def test_search_command_shows_whole_sentences(chapter: Path, query: str) -> None:
    result = CliRunner().invoke(app, ["search", query, "--k", "5", "--json", "--library", str(chapter)])
    assert result.exit_code == 0, result.output
    assert_whole_sentences(chapter, json.loads(result.output)["results"])


def test_search_command_prints_the_tag_of_the_text_it_shows(chapter: Path) -> None:
    result = CliRunner().invoke(app, ["search", "Rocinante", "--k", "3", "--library", str(chapter)])
    assert result.exit_code == 0, result.output
    for tag, text in re.findall(r"^\d+\. \[(f\d+-\d+-\d+)\] .*\(relevance [\d.]+\)\n(.+)$", result.output, re.M):
        resolved = CliRunner().invoke(app, ["resolve", tag, "--json", "--library", str(chapter)])
        assert json.loads(resolved.output)["text"].startswith(text)


@pytest.mark.parametrize("query", QUERIES)
def test_reader_search_shows_whole_sentences(server: Server, chapter: Path, query: str) -> None:
    with server.client() as client:
        reply = client.get("/api/search", params={"q": query, "k": 5})
    assert reply.status_code == 200, reply.text
    assert_whole_sentences(chapter, reply.json()["results"])


CAROL = ("His colour changed though, when, without a pause,\nit came on through the heavy door, and passed into\n"
         "the room before his eyes. Upon its coming in, the\ndying flame leaped up, as though it cried, {o}I know\n"
         "him; Marley{a}s\nGhost!{c} and fell again.\n\nThe same face: the very same.")


@pytest.mark.parametrize(("opening", "apostrophe", "closing"), [("\"", "'", "\""), ("“", "’", "”"), ("‘", "’", "’"),
                                                                 ("'", "'", "'")])
def test_a_hit_cut_inside_dialogue_shows_the_whole_sentence(opening: str, apostrophe: str, closing: str) -> None:
    """Issue 29 saw a hit begin "Marley's\\nGhost!' and fell again.": a chunk cut there is shown from the start
    of its sentence, whatever quotation marks the book uses."""
    from chapterverse.search.passages import whole_sentences

    text = CAROL.format(o=opening, a=apostrophe, c=closing)
    cut = text.index("Marley")
    start, end = whole_sentences(text, cut, text.index("The same face"))
    assert text[start:end].startswith("Upon its coming in, the\ndying flame")
    assert text[start:end].rstrip().endswith("and fell again.")


def test_search_verbose_says_where_the_time_went(chapter: Path) -> None:
    """``search --verbose`` logs the stages of its search (rankings, features, chunk reads...) with their times,
    so a slow search shows which stage grew; without it nothing of the kind is printed."""
    quiet = CliRunner().invoke(app, ["search", "Rocinante", "--k", "3", "--library", str(chapter)])
    verbose = CliRunner().invoke(app, ["search", "Rocinante", "--k", "3", "--verbose", "--library", str(chapter)])
    assert quiet.exit_code == verbose.exit_code == 0, verbose.output
    line = next(line for line in verbose.output.splitlines() if line.startswith("DEBUG: search for 3 hits"))
    stages = dict(re.findall(r"([a-z ]+) ([\d.]+) ms", line.split(": ", 2)[2]))
    for stage in ("lexical", "dense", "word matches", "ranking", "chunk reads", "titles"):
        assert stage in {name.strip() for name in stages}, line
    assert "chunk reads" not in quiet.output
