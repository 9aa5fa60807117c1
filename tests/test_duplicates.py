"""The same book twice (issue 29): a copy of content the library holds under another name is recognised and named,
not added silently, in the CLI, the reader's upload and the knowledge base's folder sync; ``--allow-duplicate``
(``allow_duplicate`` for an upload) adds it anyway. Real processes, real library files, real HTTP.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import httpx
from click.testing import Result
from cliutil import cli
from serverutil import running_server, settings_for, wait_for_job

BOOK = """# The Lamp Room

## I. Night

Maren kept the lamp of Gull Rock for eleven winters, and in all that time the light never failed.

## II. Storm

The storm of the twelfth winter broke the lower window; she mended it with sailcloth and tar.
"""


def chapterverse(*args: str) -> Result:
    """``chapterverse ARGS`` in-process (``cliutil.cli``)."""
    return cli(*args)


def documents(library: Path) -> list[dict[str, object]]:
    listed = chapterverse("docs", "--library", str(library), "--json")
    assert listed.exit_code == 0, listed.stderr
    return json.loads(listed.stdout)["documents"]  # type: ignore[no-any-return]


def test_cli_names_the_copy_and_adds_it_only_when_asked(tmp_path: Path) -> None:
    library = tmp_path / "lib"
    book = tmp_path / "book.md"
    book.write_text(BOOK, encoding="utf-8")
    copy = tmp_path / "copy.md"
    shutil.copy(book, copy)
    first = chapterverse("ingest", str(book), "--library", str(library))
    assert first.exit_code == 0, first.stderr

    again = chapterverse("ingest", str(copy), "--library", str(library))
    assert again.exit_code == 0, again.stderr
    assert "already in the library as book.md" in again.stdout and "--allow-duplicate" in again.stdout
    assert [d["source"] for d in documents(library)] == ["book.md"]

    as_json = chapterverse("ingest", str(copy), "--library", str(library), "--json")
    shown = json.loads(as_json.stdout)["documents"]
    assert [(d["source"], d["duplicate"], d["changed"]) for d in shown] == [("book.md", True, False)]

    forced = chapterverse("ingest", str(copy), "--library", str(library), "--allow-duplicate")
    assert forced.exit_code == 0, forced.stderr
    assert sorted(str(d["source"]) for d in documents(library)) == ["book.md", "copy.md"]


def test_reader_upload_of_a_held_book_names_it(tmp_path: Path) -> None:
    settings = settings_for(tmp_path, library=tmp_path / "library")
    with running_server(settings) as server, server.client() as client:
        first = client.post("/api/documents", files={"file": ("lamp.md", BOOK.encode(), "text/markdown")}).json()
        first_job = wait_for_job(client, first["job"])
        assert first_job["state"] == "done" and first_job["notice"] is None

        copy = client.post("/api/documents", files={"file": ("lamp-copy.md", BOOK.encode(), "text/markdown")})
        job = wait_for_job(client, copy.json()["job"])
        assert job["state"] == "done"
        assert job["document_ids"] == first_job["document_ids"]
        assert "already holds this book" in job["notice"] and "The Lamp Room" in job["notice"]
        assert len(client.get("/api/documents").json()["documents"]) == 1

        forced = client.post("/api/documents", data={"allow_duplicate": "true"},
                             files={"file": ("lamp-copy.md", BOOK.encode(), "text/markdown")})
        assert wait_for_job(client, forced.json()["job"])["notice"] is None
        assert len(client.get("/api/documents").json()["documents"]) == 2


def test_a_failed_upload_names_the_file_not_the_servers_temporary_folder(tmp_path: Path) -> None:
    settings = settings_for(tmp_path, library=tmp_path / "library")
    with running_server(settings) as server, server.client() as client:
        reply = client.post("/api/documents", files={"file": ("broken.epub", b"PK\x03\x04 not a zip", "x/y")})
        job = wait_for_job(client, reply.json()["job"])
    assert job["state"] == "failed"
    assert job["error"].startswith("broken.epub: ")
    assert ".uploads" not in job["error"] and str(tmp_path) not in job["error"]


def _status(client: httpx.Client) -> dict[str, object]:
    return client.get("/v1/rag/status").json()  # type: ignore[no-any-return]


def test_folder_sync_skips_a_copy_and_indexes_a_renamed_file(tmp_path: Path) -> None:
    kb = tmp_path / "kb"
    (kb / "policies").mkdir(parents=True)
    (kb / "policies" / "returns.md").write_text("Returns are accepted within 30 days of delivery.\n")
    (kb / "policies" / "returns-copy.md").write_text("Returns are accepted within 30 days of delivery.\n")
    with running_server(settings_for(tmp_path, rag_enabled=True)) as server, server.client() as client:
        sync = _status(client)["last_sync"]
        assert isinstance(sync, dict)
        assert sync["indexed"] == ["policies/returns-copy.md"] or sync["indexed"] == ["policies/returns.md"]
        held = sync["indexed"][0]
        copy = ({"policies/returns.md", "policies/returns-copy.md"} - {held}).pop()
        assert sync["duplicates"] == {copy: held}
        sources = [s["source"] for s in client.get("/v1/rag/sources").json()["items"]]
        assert sources == [held]

        (kb / copy).unlink()
        (kb / held).rename(kb / "policies" / "refunds.md")  # a rename: new content for the folder, not a copy
        time.sleep(0.01)
        reloaded = client.post("/v1/rag/reload", json={}).json()
        assert reloaded["indexed"] == ["policies/refunds.md"] and reloaded["duplicates"] == {}
        assert reloaded["removed"] == [held]
