"""``chapterverse summaries --doc ID`` (issue 15): the segment summaries that ``summarize`` makes, readable, with
position tags that resolve."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from conftest import shared_path
from hashembed import HashingEmbedder
from typer.testing import CliRunner

from chapterverse.cli import app
from chapterverse import Library
from chapterverse.positions import find_tags

DEMO = Path(__file__).resolve().parents[1] / "src" / "chapterverse" / "demo"


@pytest.fixture
def library(tmp_path: Path) -> str:
    Library(tmp_path / "lib", embedder=HashingEmbedder()).ingest([DEMO])
    return str(tmp_path / "lib")


def test_before_summarize_it_says_how_to_make_them(library: str) -> None:
    result = CliRunner().invoke(app, ["summaries", "--doc", "1", "--library", library])
    assert result.exit_code == 0
    assert "(not summarised yet)" in result.output
    assert "`chapterverse summarize --doc 1` makes the missing summaries" in result.output
    segments = json.loads(CliRunner().invoke(app, ["summaries", "--doc", "1", "--json", "--library", library]).output)
    assert segments["segments"] and all(s["summary"] is None and s["model"] is None for s in segments["segments"])


def test_summaries_show_in_reading_order_with_tags_that_resolve(library: str) -> None:
    runner = CliRunner()
    assert runner.invoke(app, ["summarize", "--doc", "1", "--library", library]).exit_code == 0
    result = runner.invoke(app, ["--json", "--library", library, "summaries", "--doc", "1"])
    assert result.exit_code == 0
    payload = json.loads(result.output)
    assert payload["title"] == "The Keeper of Gull Rock"
    segments = payload["segments"]
    assert [s["seq"] for s in segments] == sorted(s["seq"] for s in segments)
    tags = [span for s in segments for span in find_tags(s["summary"])]
    assert tags and all(s["model"] == "extractive" for s in segments)
    for span in tags:
        resolved = runner.invoke(app, ["resolve", span.key, "--library", library, "--json"])
        assert resolved.exit_code == 0
        text = json.loads(resolved.output)["text"]
        assert text and text in " ".join(s["summary"] for s in segments)
    shown = runner.invoke(app, ["summaries", "--doc", "1", "--library", library]).output
    assert shown.startswith("§1 The Keeper of Gull Rock") and tags[0].tag in shown


def test_an_unknown_document_exits_2(library: str) -> None:
    result = CliRunner().invoke(app, ["summaries", "--doc", "99", "--library", library])
    assert (result.exit_code, result.output.strip()) == (2, "error: no document with id 99")


@pytest.fixture(scope="module")
def free_culture(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Lessig's *Free Culture* (PDF): a barcode on its cover, a running header and footer on every page."""
    location = tmp_path_factory.mktemp("free-culture") / "lib"
    Library(location, embedder=HashingEmbedder()).ingest([shared_path("books", "pdf", "freeculture.pdf")])
    return str(location)


def test_extractive_summaries_of_a_pdf_quote_only_whole_sentences_of_prose(free_culture: str) -> None:
    runner = CliRunner()
    assert runner.invoke(app, ["summarize", "--doc", "1", "--library", free_culture]).exit_code == 0
    shown = runner.invoke(app, ["summaries", "--doc", "1", "--library", free_culture])
    assert shown.exit_code == 0
    opening = shown.output.split("\n\n")[0]
    assert opening.startswith("§1 COVER – PREFACE\nA free\nculture is not a culture without property")
    for junk in ("❚", "❘", "❙", "PREFACE xv", "free-culture.org/get-it", "FREE CULTURE["):
        assert junk not in shown.output
    segments = json.loads(runner.invoke(app, ["summaries", "--doc", "1", "--json", "--library", free_culture]).output)
    sentences = [s for segment in segments["segments"] for s in re.split(r"\[f\d+-\d+-\d+\]", segment["summary"])
                 if s.strip()]
    assert len(sentences) > 100
    for sentence in sentences:  # none is the rest of a sentence that began on the page before
        assert not next(c for c in sentence if c.isalpha()).islower(), sentence
