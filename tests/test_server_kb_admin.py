"""What a knowledge-base admin relies on when writing to ``/v1/rag`` twice, removing what the folder holds, or
misspelling a query parameter: over real HTTP against a real uvicorn, the knowledge base a real SQLite library
(``serve --rag_enabled --rag_kb_path KB --library LIB``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from serverutil import Server, ok, running_server, settings_for, wait_for_job

from chapterverse.sources.text import decode_text

FAQ = "# FAQ\n\nThe refund window is 30 days from the date of purchase.\n"
PRODUCTS = (
    '{"text": "The Lumen desk lamp uses a 9 watt LED bulb.", "source": "products/lamp"}\n'
    '{"text": "The Ferro kettle boils one litre in three minutes.", "source": "products/kettle"}\n'
)
HOURS = "Opening hours: the Madrid shop opens at nine and closes at eight, Monday to Saturday."


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    root = tmp_path_factory.mktemp("kb-admin")
    (root / "kb").mkdir()
    (root / "kb" / "faq.md").write_text(FAQ, encoding="utf-8")
    (root / "kb" / "products.jsonl").write_text(PRODUCTS, encoding="utf-8")
    settings = settings_for(root, rag_enabled=True, library=root / "library", ingest_roots=[root])
    with running_server(settings) as running:
        yield running


@pytest.fixture(scope="module")
def client(server: Server) -> Iterator[httpx.Client]:
    with server.client() as c:
        yield c



def chunks(client: httpx.Client, **params: str) -> list[dict[str, Any]]:
    return ok(client.get("/v1/rag/chunks", params=params))["items"]  # type: ignore[no-any-return]


# --------------------------------------------------------------------------------------- the same text twice


def test_adding_the_same_text_to_the_same_source_again_stores_nothing_and_says_so(client: httpx.Client) -> None:
    """A script that adds its notes on every run stored each one again: a search then answered the same sentence
    three times, filling top_k and the proxy's injected context."""
    body = {"text": HOURS, "source": "api/hours", "metadata": {"lang": "en"}}
    first = ok(client.post("/v1/rag/add/document", json=body))
    again = ok(client.post("/v1/rag/add/document", json=body))
    assert (first["added"], first["unchanged"]) == (1, 0)
    assert again == {"added": 0, "unchanged": 1, "sources": ["api/hours"], "doc_id": first["doc_id"],
                     "total_after": first["total_after"]}
    assert len(chunks(client, source_exact="api/hours")) == 1
    other = ok(client.post("/v1/rag/add/document", json={**body, "metadata": {"lang": "es"}}))
    assert other["added"] == 1 and len(chunks(client, source_exact="api/hours")) == 2, "other metadata: another record"
    ok(client.post("/v1/rag/remove", json={"source_prefix": "api/hours", "exact": True}))


def test_a_search_answers_a_text_held_twice_once(client: httpx.Client) -> None:
    """The same sentence under two sources is two records, but one of them is all a search needs: the second
    would take the place of another relevant chunk in top_k."""
    for source in ("api/shop-a", "api/shop-b"):
        ok(client.post("/v1/rag/add/document", json={"text": HOURS, "source": source}))
    found = ok(client.post("/v1/rag/search", json={"query": "When does the Madrid shop open?", "top_k": 3,
                                                   "threshold": 0}))["results"]
    assert [r["text"] for r in found].count(HOURS) == 1 and len(found) == 3, found
    assert found[0]["source"] in ("api/shop-a", "api/shop-b")
    assert {c["source"] for c in chunks(client, source_prefix="api/shop-")} == {"api/shop-a", "api/shop-b"}


def test_an_unchanged_upsert_keeps_the_chunk_and_its_index(client: httpx.Client) -> None:
    """Re-upserting the same text removed the chunk and added it again under a new index and tag, so every
    citation a client held of it stopped resolving."""
    body = {"source": "api/menu", "text": "Soup of the day: lentils.", "metadata": {"v": 1}}
    first = ok(client.post("/v1/rag/upsert/document", json=body))
    before = chunks(client, source_exact="api/menu")
    again = ok(client.post("/v1/rag/upsert/document", json=body))
    assert again == {"removed": 0, "added": 0, "unchanged": 1, "sources": ["api/menu"],
                     "total_after": first["total_after"], "mode": "upsert"}
    assert chunks(client, source_exact="api/menu") == before
    changed = ok(client.post("/v1/rag/upsert/document", json={**body, "metadata": {"v": 2}}))
    assert (changed["removed"], changed["added"], changed["unchanged"]) == (1, 1, 0)
    batch = ok(client.post("/v1/rag/upsert/documents", json={"documents": [
        {"source": "api/menu", "text": "Soup of the day: lentils.", "metadata": {"v": 2}},
        {"source": "api/menu-2", "text": "Dessert: flan."}]}))
    assert batch["documents"] == [{"source": "api/menu", "removed": 0, "added": 0, "unchanged": 1},
                                  {"source": "api/menu-2", "removed": 0, "added": 1, "unchanged": 0}]
    assert (batch["removed"], batch["added"], batch["unchanged"]) == (0, 1, 1)
    assert [c["index"] for c in chunks(client, source_exact="api/menu")] != [c["index"] for c in before]


# ------------------------------------------------------------------------------------ the folder's documents


def test_removing_a_folder_file_is_refused_and_says_to_delete_the_file(client: httpx.Client) -> None:
    """It was removed, and came back at the next reload or restart, re-indexed from the file. A prefix that also
    matches text added over the API is refused whole: nothing is removed."""
    ok(client.post("/v1/rag/add/document", json={"text": "The lamp ships with a spare bulb.", "source": "products/note"}))
    for body in ({"source_prefix": "faq.md", "exact": True}, {"source_prefix": "products/"}):
        refused = client.post("/v1/rag/remove", json=body)
        assert refused.status_code == 409 and refused.json()["code"] == "FOLDER_DOCUMENT", refused.text
        message = refused.json()["message"]
        assert "delete" in message and "nothing was removed" in message, message
    assert "products.jsonl" in message
    assert "faq.md" in client.post("/v1/rag/remove", json={"source_prefix": "faq"}).json()["message"]
    assert len(chunks(client, source_exact="faq.md")) == 1 and len(chunks(client, source_prefix="products/")) == 3
    assert ok(client.post("/v1/rag/remove", json={"source_prefix": "products/note", "exact": True}))["removed"] == 1
    upsert = client.post("/v1/rag/upsert/document", json={"source": "faq.md", "text": "Refunds: 60 days."})
    assert upsert.status_code == 409 and upsert.json()["code"] == "FOLDER_DOCUMENT", upsert.text
    assert chunks(client, source_exact="faq.md")[0]["text"].startswith("# FAQ")


def test_removing_one_line_of_a_folder_file_lasts_until_the_file_changes(client: httpx.Client) -> None:
    """One line of a JSONL file is an edit of its document, kept as chunk edits are; the rewritten document was
    stored under the remaining line's source, so the next sync took it for a deleted file and re-indexed both."""
    removed = ok(client.post("/v1/rag/remove", json={"source_prefix": "products/kettle", "exact": True}))
    assert removed["removed"] == 1
    sync = ok(client.post("/v1/rag/reload", json={}))
    assert sync["removed"] == [] and sync["indexed"] == [], sync
    assert [c["source"] for c in chunks(client, source_prefix="products/")] == ["products/lamp"]


# ------------------------------------------------------------------------------------------ query parameters


@pytest.mark.parametrize(("method", "path", "params", "names"), [
    ("GET", "/v1/rag/chunks", {"limt": "1", "source": "faq"},
     ("'limt'", "'source'", "source_prefix", "source_exact", "limit", "offset", "include_text")),
    ("GET", "/v1/rag/status", {"verbose": "1"}, ("'verbose'", "no query parameters")),
    ("POST", "/v1/rag/search", {"top_k": "1"}, ("'top_k'", "no query parameters")),
])
def test_unknown_query_parameters_are_refused_naming_those_the_endpoint_takes(
        client: httpx.Client, method: str, path: str, params: dict[str, str], names: tuple[str, ...]) -> None:
    """``GET /v1/rag/chunks?limt=1&source=faq`` listed every chunk of the knowledge base, 3,265 of them."""
    body = {"query": "refund window"} if method == "POST" else None
    refused = client.request(method, path, params=params, json=body)
    assert refused.status_code == 422 and refused.json()["code"] == "BAD_INPUT", refused.text
    assert all(name in refused.json()["message"] for name in names), refused.json()["message"]
    assert ok(client.get("/v1/rag/chunks", params={"limit": "1", "source_prefix": "faq"}))["total"] == 1


# ------------------------------------------------------------------------------------------- byte-order marks


def test_a_byte_order_mark_is_not_part_of_the_text(client: httpx.Client, server: Server) -> None:
    """``jq -Rs '{text: .}' notes.txt`` sends a Windows file's BOM as the text's first character, and it stayed in
    the first chunk (and what the proxy injected); files are decoded without it, a doubled one included."""
    added = ok(client.post("/v1/rag/add/document", json={"text": "\ufeffLockers are free for guests.",
                                                         "source": "api/bom"}))
    assert chunks(client, source_exact="api/bom")[0]["text"] == "Lockers are free for guests."
    assert ok(client.post("/v1/rag/add/document", json={"text": "Lockers are free for guests.",
                                                        "source": "api/bom"}))["unchanged"] == added["added"]
    upload = server.settings.rag_kb_path.parent / "notes.txt"
    upload.write_bytes(b"\xef\xbb\xbf\xef\xbb\xbfTowels are lent at the pool.\n")
    job = client.post("/api/documents/path", json={"path": str(upload)}).json()["job"]
    doc_id = wait_for_job(client, job)["document_ids"][0]
    files = ok(client.get(f"/api/documents/{doc_id}"))["files"]
    texts = [ok(client.get(f"/api/files/{f['id']}"))["text"] for f in files]
    assert texts and not texts[0].startswith("\ufeff"), texts
    assert decode_text(b"\xef\xbb\xbf\xef\xbb\xbfA\xe9") == ("A\xe9", "cp1252")
