"""``chapterverse mcp``: the library's read-only retrieval tools over MCP (stdio), for desktop assistants.

The tools return tagged source text, so an assistant can cite ``[f5-123-165]`` and a person can
check it with ``chapterverse resolve`` or the reader. Nothing here writes to the library.
"""

from __future__ import annotations

from typing import Any

from mcp.server.mcpserver import MCPServer

from .citations import Evidence
from .errors import ChapterverseError
from .library import Library
from .llm.tools import ToolBox
from .positions import defang_tags

__all__ = ["build_server"]


def build_server(library: Library) -> MCPServer:
    server = MCPServer("chapterverse", instructions=(
        "Search a local library of books and documents. Results are source text followed by position tags like "
        "[f5-123-165]; cite those tags verbatim after claims taken from them."))

    def toolbox(doc_id: int | None) -> ToolBox:
        return ToolBox(library, doc_id, Evidence(resolve=lambda span: None))

    @server.tool(description="List the documents in the library with their ids.")
    def list_documents() -> list[dict[str, Any]]:
        return [{"id": d.id, "title": d.title, "source": d.source, "format": d.format, "chunks": d.chunks}
                for d in library.documents()]

    @server.tool(description="Hybrid search for passages; returns source text with position tags. "
                             "doc_id restricts the search to one document.")
    def search_passages(query: str, doc_id: int | None = None) -> str:
        return toolbox(doc_id).search_passages(query)

    @server.tool(description="Summaries of every part of a document in reading order, with position tags.")
    def get_full_book_segment_summaries(doc_id: int) -> str:
        return toolbox(doc_id).get_full_book_segment_summaries()

    @server.tool(description="Source text of the parts of a document most related to a question, with tags.")
    def get_related_segment_summaries(question: str, doc_id: int) -> str:
        return toolbox(doc_id).get_related_segment_summaries(question)

    @server.tool(description="The exact text a position tag such as [f5-123-165] names, with its document and "
                             "chapter.")
    def resolve(tag: str) -> dict[str, Any]:
        """The text defanged as the other tools' is: an assistant reads it, and must not cite a tag it planted."""
        try:
            r = library.resolve(tag)
        except ChapterverseError as exc:
            return {"error": str(exc)}
        return {"tag": r.tag, "doc_id": r.doc_id, "doc_title": r.doc_title, "text": defang_tags(r.text),
                "toc_path": r.toc_path}

    return server
