"""The OpenAPI document is the reference for the knowledge-base and reader answers (server/response_models.py)."""

from __future__ import annotations

from fastapi import FastAPI

from chapterverse.server import rag, reader

NOT_JSON = {("post", "/api/documents/{doc_id}/ask"), ("get", "/api/chats/{chat_id}/export")}
"""Server-Sent Events and Markdown: described in docs/READER_API.md, not by a JSON schema."""


def test_every_json_route_of_the_kb_and_reader_names_its_answer_model() -> None:
    app = FastAPI()
    app.include_router(rag.router)
    app.include_router(reader.router)
    paths = app.openapi()["paths"]
    missing = []
    for path, operations in paths.items():
        for method, operation in operations.items():
            if (method, path) in NOT_JSON:
                continue
            status = "202" if "202" in operation["responses"] else "200"
            schema = operation["responses"][status]["content"]["application/json"]["schema"]
            if not schema.get("$ref", "").startswith("#/components/schemas/"):
                missing.append(f"{method.upper()} {path}")
    assert len(paths) >= 20 and not missing, missing
