"""``chapterverse bench kb`` (issue 29): its generated knowledge base says what its questions claim, and the
command runs end to end through a real server (real embeddings, a sample of the questions)."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

from typer.testing import CliRunner

from chapterverse.bench.kbdata import KbDocument, kb_set, says
from chapterverse.cli import app


def _context(doc: KbDocument) -> str:
    """What the source path and metadata carry, as words ("pedidos cliente 456 8942 456 pedido ...")."""
    return " ".join([re.sub(r"[/_]", " ", doc.source), *doc.metadata.values()])


def test_the_set_is_the_same_on_every_call_and_of_the_size_asked() -> None:
    first, second = kb_set(), kb_set()
    assert first == second
    assert 60 <= len(first.documents) <= 150 and len(first.questions) >= 100
    assert len({d.source for d in first.documents}) == len(first.documents)
    assert len({q.id for q in first.questions}) == len(first.questions)
    kinds = Counter((q.language, q.via) for q in first.questions)
    assert all(kinds[language, via] >= 5 for language in ("es", "en") for via in ("context", "text", "none"))
    assert 12 <= sum(q.via == "none" for q in first.questions) <= 20


def test_every_question_says_truly_where_its_key_is() -> None:
    data = kb_set()
    by_source = {d.source: d for d in data.documents}
    for q in data.questions:
        if q.via == "none":
            assert q.gold == () and q.key == "", q.id
            continue
        assert q.gold and all(source in by_source for source in q.gold), q.id
        assert says(q.text, q.key), q.id  # the key is words of the question
        for doc in (by_source[source] for source in q.gold):
            if q.via == "text":
                assert says(doc.text, q.key), (q.id, doc.source)
            else:  # only the source path or the metadata carry it
                assert not says(doc.text, q.key) and says(_context(doc), q.key), (q.id, doc.source)


def test_the_issue_example_is_in_the_set() -> None:
    data = kb_set()
    order = next(d for d in data.documents if d.source == "pedidos/cliente_456/8942")
    assert order.text.startswith("Pedido 8942 — 25/08/2026") and "Entrega estimada: 27/08/2026" in order.text
    assert order.metadata["cliente"] == "456" and not says(order.text, "456")
    assert any(d.source == "direcciones/cliente_456/principal" for d in data.documents)
    asked = next(q for q in data.questions if q.text == "¿Qué pedido tiene el cliente 456 y cuándo llega?")
    assert asked.gold == ("pedidos/cliente_456/8942",) and asked.via == "context"


def test_says_matches_whole_words_only() -> None:
    assert says("Cliente nº 456\nPedido", "456") and says("SKU-1112 · Summit", "sku-1112")
    assert not says("CP 14560", "456") and not says("PRD-2045", "PRD-204")


def test_bench_kb_json_through_a_real_server(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["bench", "kb", "--limit", "15", "--json", "--workdir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["questions"] == 15 and report["documents"] == len(kb_set().documents)
    assert report["chunks"] >= report["documents"] and (report["top_k"], report["threshold"]) == (3, 0.25)
    groups = report["groups"]
    assert {"all", "context", "text", "es", "en", "none"} <= set(groups)
    for name in ("all", "context", "text", "es", "en"):
        g = groups[name]
        assert 0 <= g["hit@1"] <= g["hit@3"] <= 1 and g["kept"] <= g["hit@3"] and 0 <= g["mrr@10"] <= 1
    assert groups["text"]["hit@3"] >= 0.5  # the answering source is found and matched when its text says the key
    assert groups["none"]["hit@1"] is None and 0 <= groups["none"]["empty"] <= 1
    assert report["ms_p50"] > 0 and len(report["load_average"]["before"]) == 3
    records = report["records"]
    assert len(records) == 15 and {r["language"] for r in records} == {"es", "en"}
    assert all(r["returned"] <= 3 and (r["rank"] is None or 1 <= r["rank"] <= 10) for r in records)
    assert list(tmp_path.iterdir()) == []  # the temporary knowledge base is removed


def test_bench_kb_prints_the_table() -> None:
    result = CliRunner().invoke(app, ["bench", "kb", "--limit", "15"])
    assert result.exit_code == 0, result.output
    for words in ("hit@1", "MRR@10", "kept", "key only in source/metadata", "no record answers", "load average"):
        assert words in result.stdout, words
