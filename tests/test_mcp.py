"""`chapterverse mcp` spoken to by the official MCP client over real stdio."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import anyio
import pytest

mcp = pytest.importorskip("mcp")
from mcp.client.session import ClientSession  # noqa: E402
from mcp.client.stdio import StdioServerParameters, stdio_client  # noqa: E402

from chapterverse import Library  # noqa: E402

DEMO = Path(__file__).resolve().parents[1] / "src" / "chapterverse" / "demo"


def test_mcp_tools_search_and_resolve(tmp_path: Path) -> None:
    Library(tmp_path).ingest([DEMO])
    params = StdioServerParameters(command=sys.executable, args=["-m", "chapterverse", "mcp", "--library",
                                                                 str(tmp_path)])

    async def session() -> tuple[set[str], str, dict]:
        async with stdio_client(params) as (read, write), ClientSession(read, write) as client:
            await client.initialize()
            names = {t.name for t in (await client.list_tools()).tools}
            found = await client.call_tool("search_passages", {"query": "cat called Admiral"})
            text = found.content[0].text
            tag = text[text.index("[f"):text.index("]", text.index("[f")) + 1]
            resolved = await client.call_tool("resolve", {"tag": tag})
            return names, text, json.loads(resolved.content[0].text)

    names, text, resolved = anyio.run(session)
    assert {"search_passages", "resolve", "list_documents", "get_full_book_segment_summaries"} <= names
    assert "Admiral" in text
    assert resolved["text"] and resolved["text"] in text
