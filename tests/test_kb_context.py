"""Chunks retrieved with their context (issue 29): a knowledge base's source paths and metadata count as evidence
(indexed and embedded beside the text), never as cited text; a JSONL line's ``metadata`` comes back in the one
shape ``add/document`` takes. The voice-assistant server's own example, over real HTTP."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
from serverutil import running_server, settings_for

from chapterverse.chunking.context import context_line

FAQ = ("Preguntas frecuentes sobre envíos. Los pedidos se entregan en 2 a 4 días laborables. El envío es gratuito "
       "a partir de 50 euros. Puede consultar el estado de su pedido en su cuenta.")
CRM = ("Cliente 456: Laura Gómez. Prefiere que la llamen por la tarde. Cliente desde 2021, compra habitual de café "
       "en grano.")
ORDER = ("Pedido 8942 — 25/08/2026. Café en grano 1 kg x2, molinillo manual x1. Total 64,90 €. Estado: enviado. "
         "Entrega estimada: 27/08/2026.")
ADDRESS = "Calle Mayor 12, 3º B, 28013 Madrid. Teléfono de contacto 600 123 456."
DOCUMENTS = [
    {"source": "faq/envios", "text": FAQ},
    {"source": "crm/cliente_456/notas", "text": CRM, "metadata": {"cliente": "456", "tipo": "nota"}},
    {"source": "pedidos/cliente_456/8942", "text": ORDER, "metadata": {"cliente": "456", "tipo": "pedido"}},
    {"source": "direcciones/cliente_456/principal", "text": ADDRESS,
     "metadata": {"cliente": "456", "tipo": "direccion"}},
]


def search(client: httpx.Client, query: str, **options: Any) -> list[dict[str, Any]]:
    reply = client.post("/v1/rag/search", json={"query": query, **options})
    assert reply.status_code == 200, reply.text
    return reply.json()["results"]  # type: ignore[no-any-return]


def test_the_order_is_found_through_its_source_and_cited_as_its_own_text(tmp_path: Path) -> None:
    with running_server(settings_for(tmp_path, rag_enabled=True)) as server, server.client() as client:
        assert client.post("/v1/rag/upsert/documents", json={"documents": DOCUMENTS}).status_code == 200
        results = search(client, "¿Qué pedido tiene el cliente 456 y cuándo llega?", top_k=3, threshold=0.25)
        assert results[0]["source"] == "pedidos/cliente_456/8942", [(r["source"], r["score"]) for r in results]
        assert results[0]["text"] == ORDER  # the context is evidence, never part of what is cited
        resolved = client.get(f"/api/resolve/{results[0]['tag']}").json()
        assert resolved["text"] == ORDER
        # a question the source path does not answer is ranked by the texts as before
        assert search(client, "¿Cuánto cuesta el envío?", top_k=1)[0]["source"] == "faq/envios"


def test_a_jsonl_lines_metadata_comes_back_flat(tmp_path: Path) -> None:
    kb = tmp_path / "kb"
    kb.mkdir()
    lines = [{"text": "Knock knock. Who's there? Lettuce.", "source": "jokes/1", "metadata": {"topic": "fun"},
              "lang": "en"}]
    (kb / "jokes.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    with running_server(settings_for(tmp_path, rag_enabled=True)) as server, server.client() as client:
        found = search(client, "knock knock lettuce", top_k=1)
    assert found[0]["metadata"] == {"topic": "fun", "lang": "en"}


def test_the_context_line_holds_what_a_user_wrote_about_a_text() -> None:
    assert context_line("pedidos/cliente_456/8942", {"cliente": "456", "tipo": "pedido"}) == \
        "pedidos cliente 456 8942 pedido"
    assert context_line("moby-dick.epub", None) == ""  # a file name alone says nothing the text does not
    assert context_line("faq/returns.md", {"tags": ["refund", "policy"], "vip": True, "n": 3}) == \
        "faq returns refund policy 3"


def test_only_a_knowledge_bases_records_are_described_by_their_source_path(tmp_path: Path) -> None:
    """A KB folder file's path is named by its user; a book's path under the folder ``ingest`` was given is not:
    its chunks are indexed and embedded as before (the dev sets' libraries read the same chunks)."""
    from hashembed import HashingEmbedder

    from chapterverse import Library
    from chapterverse.library import ORIGIN_KEY

    note = tmp_path / "customer_812" / "order.md"
    note.parent.mkdir()
    note.write_text("Order 5531 shipped on Monday.\n", encoding="utf-8")
    library = Library(tmp_path / "lib", embedder=HashingEmbedder())
    book = library.writer.ingest_file(note, source="customer_812/order.md").document
    record = library.writer.ingest_file(note, source="orders/customer_812/order.md", metadata={ORIGIN_KEY: "folder"},
                                 allow_duplicate=True).document
    headings = {row[1]: row[4] for row in library.store.lexical_rows()}
    assert "812" not in headings[book.id].split()
    assert {"812", "order"} <= set(headings[record.id].split())
    library.close()
