"""``chapterverse bench retrieval`` end to end on a slice of XQuAD-en (real embeddings, a tiny library)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import shared_path
from typer.testing import CliRunner

from chapterverse.bench.retrieval import load_squad
from chapterverse.cli import app


@pytest.fixture(scope="module")
def xquad_slice(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The first three XQuAD-en articles (15 paragraphs, 127 questions) as their own SQuAD file."""
    data = json.loads(shared_path("qa", "xquad", "xquad.en.dev.json").read_text(encoding="utf-8"))
    path = tmp_path_factory.mktemp("bench") / "xquad-slice.json"
    path.write_text(json.dumps({"version": "1.1", "data": data["data"][:3]}), encoding="utf-8")
    return path


def test_squad_articles_keep_paragraph_offsets(xquad_slice: Path) -> None:
    bench = load_squad(xquad_slice)
    data = json.loads(xquad_slice.read_text(encoding="utf-8"))
    assert len(bench.documents) == 3 and len(bench.questions) == 127
    first = data["data"][1]["paragraphs"][1]
    answer = first["qas"][0]["answers"][0]
    offset = len(data["data"][1]["paragraphs"][0]["context"]) + 2  # paragraphs are joined by a blank line
    question = next(q for q in bench.questions if q.id == first["qas"][0]["id"])
    text = bench.documents[1].parsed.files[0].text  # type: ignore[union-attr]
    assert question.spans[0] == (offset + answer["answer_start"], offset + answer["answer_start"] + len(answer["text"]))
    assert text[question.spans[0][0]:question.spans[0][1]] == answer["text"]


def test_bench_retrieval_json(xquad_slice: Path, tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["bench", "retrieval", "--squad", str(xquad_slice), "--limit", "40", "--json",
                                      "--library", str(tmp_path)])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["questions"] == 40
    assert set(report["methods"]) == {"dense", "bm25", "chapterverse"}
    for scores in report["methods"].values():
        assert {"hit@1", "hit@5", "mrr@10", "ms_per_query"} <= set(scores)
        assert 0 <= scores["hit@1"] <= scores["hit@5"] <= 1 and scores["ms_per_query"] > 0
    assert report["methods"]["chapterverse"]["hit@5"] >= report["methods"]["bm25"]["hit@5"]
    # the kept library is reused: a second run embeds nothing and agrees
    again = CliRunner().invoke(app, ["bench", "retrieval", "--squad", str(xquad_slice), "--limit", "40", "--json",
                                     "--library", str(tmp_path)])
    assert json.loads(again.stdout)["methods"]["chapterverse"]["hit@5"] == report["methods"]["chapterverse"]["hit@5"]


def test_bench_retrieval_table_and_bad_input(xquad_slice: Path, tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["bench", "retrieval", "--squad", str(xquad_slice), "--limit", "5",
                                      "--library", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "chapterverse" in result.stdout and "hit@5" in result.stdout
    neither = CliRunner().invoke(app, ["bench", "retrieval"])
    assert neither.exit_code == 2 and "exactly one of" in neither.output
    missing = CliRunner().invoke(app, ["bench", "retrieval", "--squad", str(tmp_path / "nope.json")])
    assert missing.exit_code == 2


def test_bench_latency_on_an_existing_library(xquad_slice: Path, tmp_path: Path) -> None:
    built = CliRunner().invoke(app, ["bench", "retrieval", "--squad", str(xquad_slice), "--limit", "1", "--json",
                                     "--library", str(tmp_path)])
    assert built.exit_code == 0, built.output
    library = next(p for p in tmp_path.iterdir() if p.is_dir())
    result = CliRunner().invoke(app, ["bench", "latency", "--library", str(library), "--squad", str(xquad_slice),
                                      "--per-file", "12", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["queries"] == 12 and report["chunks"] > 0
    assert 0 < report["search_p50_ms"] <= report["search_p99_ms"]
    assert report["total_p50_ms"] >= report["search_p50_ms"] * 0.5
    missing = CliRunner().invoke(app, ["bench", "latency", "--library", str(library), "--squad",
                                       str(tmp_path / "nope.json")])
    assert missing.exit_code == 2 and "nope.json" in missing.output


def test_bench_fit_relevance_prints_the_held_out_table_and_the_model(xquad_slice: Path, tmp_path: Path) -> None:
    one_article = CliRunner().invoke(app, ["bench", "fit-relevance", "--squad", str(xquad_slice), "--limit", "20",
                                           "--library", str(tmp_path)])
    assert one_article.exit_code == 2 and "at least two documents" in one_article.stderr
    result = CliRunner().invoke(app, ["bench", "fit-relevance", "--squad", str(xquad_slice), "--limit", "127",
                                      "--library", str(tmp_path)])
    assert result.exit_code == 0, result.output
    entry = result.stdout.strip()
    assert entry.startswith('"usem3": RelevanceModel((') and entry.endswith("),")
    weights = entry.split("((")[1].split(")")[0].split(", ")
    assert len(weights) == 6 and float(weights[0]) > 0  # the cosine counts for relevance
    table = [line for line in result.stderr.splitlines() if line.startswith("| xquad-slice")]
    assert len(table) == 1 and table[0].count("|") == 11


@pytest.mark.slow
def test_bench_retrieval_with_a_reranker_reports_it_beside_the_first_stage(xquad_slice: Path, tmp_path: Path) -> None:
    from fakererank import fake_reranker

    def args(reranker: str) -> list[str]:
        return ["bench", "retrieval", "--squad", str(xquad_slice), "--limit", "30", "--json", "--library",
                str(tmp_path), "--reranker", reranker, "--rerank-top-n", "10"]

    with fake_reranker(lambda q, docs: [-float(i) for i in range(len(docs))]) as keep:  # the first stage's order
        same = CliRunner().invoke(app, args(keep.url))
    with fake_reranker(lambda q, docs: [float(i) for i in range(len(docs))]) as flip:  # its top 10 reversed
        flipped = CliRunner().invoke(app, args(flip.url))
    assert same.exit_code == 0 and flipped.exit_code == 0, same.output + flipped.output
    methods = json.loads(same.stdout)["methods"]
    assert methods["chapterverse+rerank"] | {"ms_per_query": 0, "ms_p50": 0} == \
        methods["chapterverse"] | {"ms_per_query": 0, "ms_p50": 0}
    worse = json.loads(flipped.stdout)["methods"]
    assert worse["chapterverse+rerank"]["hit@1"] < worse["chapterverse"]["hit@1"]
    assert len(keep.requests) == 31  # one warm-up question, then each question once


def test_followup_conversations_lose_their_subject() -> None:
    from chapterverse.bench.followups import pronoun_question

    first = "When did Victoria enact its constitution?"
    assert pronoun_question(first, "On what is Victoria's constitution based ?", "Victoria (Australia)") == (
        "On what is its constitution based ?", "Victoria")
    assert pronoun_question("Who won Super Bowl 50?", "Where was the Super Bowl 50 held?", "Super Bowl 50") == (
        "Where was it held?", "Super Bowl 50")
    assert pronoun_question(first, "How many Victoria residents vote?", "Victoria") is None  # a modifier
    assert pronoun_question(first, "Who wrote the Magna Carta?", "Victoria") is None  # nothing shared


def test_bench_followups_json(xquad_slice: Path, tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["bench", "followups", "--squad", str(xquad_slice), "--json",
                                      "--library", str(tmp_path)])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["conversations"] >= 20 and report["k"] == 3
    scores = report["conditions"]
    assert set(scores) == {"asked whole", "follow-up, off", "follow-up, carry", "topic switch, off",
                           "topic switch, carry"}
    for row in scores.values():
        assert 0 <= row["injected@3"] <= row["hit@3"] <= 1
    assert scores["follow-up, carry"]["hit@3"] >= scores["follow-up, off"]["hit@3"]


def test_bench_proxy_measures_first_tokens_direct_and_through_a_real_proxy(tmp_path: Path) -> None:
    import httpx

    from chapterverse.bench.proxylatency import ANSWER, first_token_ms, measure, scripted_upstream

    with scripted_upstream() as upstream, httpx.Client() as client:
        assert first_token_ms(client, f"http://127.0.0.1:{upstream.server_address[1]}", "hello") > 0
        assert upstream.requests == 1 and upstream.injected == 0
    kb = tmp_path / "kb"
    kb.mkdir()
    demo = Path(__file__).resolve().parents[1] / "src" / "chapterverse" / "demo" / "the-keeper-of-gull-rock.md"
    (kb / "keeper.md").write_text(demo.read_text(encoding="utf-8"), encoding="utf-8")
    questions = ["Who kept the lighthouse on Gull Rock?", "What did the keeper of Gull Rock see in the storm?",
                 "How high was the lighthouse on Gull Rock?", "Who kept the Gull Rock light before him?"]
    row = measure(kb, 0, "real", questions, warmup=1)
    assert row.questions == 4 and row.injected == 1.0  # every proxied question reached the upstream with context
    assert row.proxy_p50_ms > row.direct_p50_ms > 0 and len(ANSWER) > 1
