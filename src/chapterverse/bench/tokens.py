"""Token cost of grounded answers against putting the whole book in context (the naive approach).

For each book and question, counts (cl100k) what one answer turn sends the model: the system prompt,
the question and every tool result (the evidence). The worst case of the segment-selection path
is its context budget, which the tool never exceeds. The selection calls themselves read segment
summaries, not the book; they are reported separately when a model is configured, not here.
"""

from __future__ import annotations

import json

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..citations import Evidence
from ..library import Library
from ..llm.prompts import count_tokens, load_prompt
from ..llm.tools import ToolBox, ToolSettings

__all__ = ["TokenRow", "run_token_bench", "DEFAULT_QUESTIONS"]

DEFAULT_QUESTIONS: dict[str, list[str]] = {
    "moby-dick.epub": ["Who is Queequeg?", "What happens to the Pequod at the end?",
                       "Why does Ahab hate the white whale?", "What is ambergris used for?"],
    "don-quixote-en.epub": ["Who is Dulcinea?", "What happens with the windmills?",
                            "Who is Sancho Panza's wife?", "How does Don Quixote die?"],
}


@dataclass(slots=True)
class TokenRow:
    book: str
    book_tokens: int
    search_tokens: float
    related_tokens: float
    worst_case_tokens: int

    @property
    def search_ratio(self) -> float:
        return self.search_tokens / self.book_tokens

    @property
    def worst_case_ratio(self) -> float:
        return self.worst_case_tokens / self.book_tokens


def _book_tokens(library: Library, doc_id: int) -> int:
    return sum(count_tokens(library.store.file(f.id).text) for f in library.store.files(doc_id))


def run_token_bench(library: Library, books: Sequence[Path], questions: dict[str, list[str]] | None = None,
                    settings: ToolSettings | None = None) -> list[TokenRow]:
    questions = questions or DEFAULT_QUESTIONS
    settings = settings or ToolSettings()
    rows = []
    for book in books:
        doc = library.ingest([book])[0].document
        title = doc.title
        overhead = count_tokens(load_prompt("answer_system").render(doc_title=title))
        asked = questions.get(book.name) or ["What is this book about?"]
        search, related = [], []
        for question in asked:
            box = ToolBox(library, doc.id, Evidence(resolve=lambda span: None), settings=settings)
            box.execute("search_passages", json.dumps({"query": question}))
            search.append(overhead + count_tokens(question) + box.context_tokens)
            box = ToolBox(library, doc.id, Evidence(resolve=lambda span: None), settings=settings)
            box.execute("get_related_segment_summaries", json.dumps({"question": question}))
            related.append(overhead + count_tokens(question) + box.context_tokens)
        worst = overhead + settings.context_tokens + 200
        rows.append(TokenRow(book.name, _book_tokens(library, doc.id), sum(search) / len(search),
                             sum(related) / len(related), worst))
    return rows
