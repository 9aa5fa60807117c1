"""``chapterverse summaries --doc ID`` (issue 15): the segment summaries that ``summarize`` makes, readable, with
position tags that resolve."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hashembed import HashingEmbedder
from typer.testing import CliRunner

from chapterverse.cli import app
from chapterverse.library import Library
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
