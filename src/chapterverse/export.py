"""Chats: their titles, and their export as Markdown whose citations are deep links into the web reader."""

from __future__ import annotations

from .answering.marks import UNSUPPORTED_MARK, marked_answer, marks_legend, raised_note_numbers
from .answering.result import AnswerResult
from .positions import defang_tags
from .store import ChatStore

__all__ = ["chat_markdown", "chat_title"]

CHAT_TITLE_CHARS = 80


def chat_title(question: str) -> str:
    """A chat's title: its first question on one line, cut to 80 characters. The reader's chats and the
    command's ``chat`` are named alike, so a list of chats about one book tells them apart."""
    short = " ".join(question.split())
    return short if len(short) <= CHAT_TITLE_CHARS else short[:CHAT_TITLE_CHARS - 1] + "…"


def chat_markdown(store: ChatStore, chat_id: int, base_url: str) -> str:
    """The conversation with each citation as ``[n](base/read/doc#f5-1-9)`` followed by its quoted source text;
    an answer's notice above it, and its unsupported sentences marked (``answering.marks``).

    Only the answer's ``citations`` become links; every other tag-like string, in the answer or the quoted text,
    is defanged (``positions.defang_tags``): a chat stored before answers were defanged may hold a tag its book
    planted, and Markdown is read by people and tools that would take it for a citation. A book's own footnote
    numbers ("Pangloss[1]") are raised (``Pangloss¹``): Markdown would make ``[1]`` a link to citation 1."""
    chat = store.chat(chat_id)
    lines = [f"# {chat.title}", ""]
    base = base_url.rstrip("/")
    for message in store.messages(chat_id):
        if message.role == "user":
            lines += [f"**Question:** {message.content}", ""]
            continue
        if message.result is None:
            lines += [defang_tags(message.content), ""]
            continue
        result = AnswerResult.model_validate(message.result)
        if result.notice:
            lines += [f"*Note: {defang_tags(result.notice)}*", ""]
        answer, marked = marked_answer(result)
        answer = raised_note_numbers(answer)  # the book's "[1]": Markdown would link it to citation 1's definition
        for c in result.citations:
            answer = answer.replace(f"[{c.tag}]", f"[[{c.n}]]({base}/read/{c.doc_id}#{c.tag})")
        lines += [defang_tags(answer), ""]
        if marked:
            lines += [f"*{marks_legend(marked)}*", ""]
        lines += [f"*{UNSUPPORTED_MARK} Quotation not found in its cited passage: “{defang_tags(q)}”*"
                  for q in result.unverified_quotes]
        lines += [""] if result.unverified_quotes else []
        for c in result.citations:
            where = " › ".join(c.toc_path) or c.doc_title
            quoted = "\n".join(f"> {line}" for line in raised_note_numbers(defang_tags(c.text)).splitlines() or [""])
            lines += [f"[{c.n}]: [{c.doc_title} — {where}]({base}/read/{c.doc_id}#{c.tag})", quoted, ""]
    return "\n".join(lines).rstrip() + "\n"
