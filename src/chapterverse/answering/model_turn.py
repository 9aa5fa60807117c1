"""One answer turn with a model, as a stream of events: text deltas, then the verified result.

The tool loop: the model calls retrieval tools, their results become this turn's evidence, the final answer
streams through a tag filter (a tag split across deltas is held back and only evidence tags pass), and the whole
answer is verified once more at the end. A model that answers a document question without calling any tool gets
one forced retrieval round: we run ``search_passages`` with the question ourselves and hand the result back as a
tool result. This works with every OpenAI-compatible server, unlike ``tool_choice="required"``, which many local
servers ignore. Text of a round without evidence is held back, never shown. What the model writes is cleaned
before anything else reads it (``scaffolding.TextCleaner``: chat-template tokens, our own SOURCE TEXT headers), so
neither the reader nor the answer's checks see them.

Which path answers a question, and the extractive answer when the model fails, is
:func:`chapterverse.answering.ask.answer_events`'s business; this module is only the model's side of it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from .result import AnswerDelta, AnswerDone, AnswerEvent, AnswerResult
from ..citations import Evidence, StreamingTagFilter, library_resolver, verify_answer
from ..library import Library
from ..llm.client import ChatProvider, StreamEnd, TextDelta, ToolCall
from ..llm.provider_config import ProviderConfig
from ..llm.prompts import load_prompt
from ..llm.summaries import EXTRACTIVE_MODEL, SummaryJobs
from ..llm.tools import TOOL_SCHEMAS, ToolBox, ToolSettings
from ..scaffolding import ANSWER_FROM_SOURCE, TextCleaner

__all__ = ["AgentSettings", "ModelTurn"]


@dataclass(frozen=True, slots=True)
class AgentSettings:
    max_rounds: int = 4
    tools: ToolSettings = field(default_factory=ToolSettings)
    auto_summarize: bool = True
    """Start the document's summary job on its first question (off in scripted tests)."""


_JOBS = SummaryJobs()


class ModelTurn:
    """One question answered by the model (:meth:`run`); :attr:`shown` tells whether any of its text was shown."""

    def __init__(self, library: Library, question: str, doc_id: int | None, provider: ProviderConfig, *,
                 selection: ProviderConfig | None = None, history: Sequence[dict[str, str]] = (),
                 settings: AgentSettings | None = None, summary_jobs: SummaryJobs | None = None) -> None:
        selection = selection or provider
        settings = settings or AgentSettings()
        jobs = summary_jobs or _JOBS
        self.library = library
        self.question = question
        self.doc_id = doc_id
        self.chat = ChatProvider(provider)
        self.settings = settings
        self.evidence = Evidence(resolve=library_resolver(library))
        summaries_ready = doc_id is not None and (
            jobs.ensure_started(library, doc_id, self.chat) if settings.auto_summarize
            else jobs.is_complete(library, doc_id, provider.model))
        self.summaries = "ready" if summaries_ready else "pending"
        self.tools = ToolBox(library, doc_id, self.evidence,
                             selector=ChatProvider(selection) if summaries_ready else None,
                             summary_model=provider.model if summaries_ready else EXTRACTIVE_MODEL,
                             settings=settings.tools)
        title = library.document(doc_id).title if doc_id is not None else "the whole library"
        self.system = load_prompt("answer_system")
        self.messages: list[dict[str, Any]] = [{"role": "system", "content": self.system.render(doc_title=title)},
                                               *history, {"role": "user", "content": question}]
        self.filter = StreamingTagFilter(self.evidence, mode="keep")
        self.cleaner = TextCleaner()
        self.shown = False
        self.raw_answer: list[str] = []
        self.usage = {"prompt_tokens": 0, "completion_tokens": 0, "context_tokens": 0}

    def run(self) -> Iterator[AnswerEvent]:
        """The answer's deltas and its verified result; a ProviderError when the model fails (after the client's
        retries), which the dispatcher answers extractively."""
        forced = False
        for round_no in range(self.settings.max_rounds + 1):
            last = round_no == self.settings.max_rounds
            live = bool(self.tools.calls)
            held: list[str] = []
            end: StreamEnd | None = None
            for event in self.chat.stream(self.messages, tools=None if last else TOOL_SCHEMAS):
                if isinstance(event, TextDelta):
                    if live:
                        yield from self._show(event.text)
                    else:
                        held.append(event.text)
                else:
                    end = event
            self._count(end)
            if end is not None and end.tool_calls and not last:
                self._run_tools(end.tool_calls, "".join(held))
                continue
            if not self.tools.calls and not forced:
                forced = True
                self._force_retrieval()
                continue
            for text in held:
                yield from self._show(text)
            break
        yield from self._shown(self.cleaner.flush())
        tail = self.filter.flush()
        if tail:
            self.shown = True
            yield AnswerDelta(tail)
        yield AnswerDone(self._result())

    def _show(self, text: str) -> Iterator[AnswerEvent]:
        yield from self._shown(self.cleaner.feed(text))

    def _shown(self, text: str) -> Iterator[AnswerEvent]:
        """``text``, cleaned, through the tag filter to the reader."""
        self.raw_answer.append(text)
        out = self.filter.feed(text)
        if out:
            self.shown = True
            yield AnswerDelta(out)

    def _count(self, end: StreamEnd | None) -> None:
        if end is not None and end.usage is not None:
            self.usage["prompt_tokens"] += end.usage.prompt_tokens
            self.usage["completion_tokens"] += end.usage.completion_tokens

    def _run_tools(self, calls: Sequence[ToolCall], content: str) -> None:
        self.messages.append({
            "role": "assistant", "content": content or None,
            "tool_calls": [{"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                           for c in calls],
        })
        with ThreadPoolExecutor(max_workers=max(1, min(len(calls), 4))) as pool:
            results = list(pool.map(lambda c: self.tools.execute(c.name, c.arguments), calls))
        for call, result in zip(calls, results):
            self.messages.append({"role": "tool", "tool_call_id": call.id, "content": result})

    def _force_retrieval(self) -> None:
        """The model answered without looking: look for it, and let it answer again from the source."""
        call = ToolCall(id="forced_retrieval", name="search_passages",
                        arguments=json.dumps({"query": self.question}, ensure_ascii=False))
        self._run_tools([call], "")
        self.messages.append({"role": "user", "content": ANSWER_FROM_SOURCE})

    def _result(self) -> AnswerResult:
        verified = verify_answer("".join(self.raw_answer), self.evidence)
        self.usage["context_tokens"] = self.tools.context_tokens
        return AnswerResult(
            answer=verified.text, found=verified.found, mode="llm", citations=verified.citations,
            dropped_tags=[{"tag": d.tag, "reason": d.reason} for d in verified.dropped_tags],
            unsupported_sentences=verified.unsupported_sentences, unverified_quotes=verified.unverified_quotes,
            supported_sentences=verified.supported_sentences,
            tool_calls=[{"name": c.name, "arguments": c.arguments} for c in self.tools.calls],
            usage=dict(self.usage),
            metadata={"summaries": self.summaries, "prompt_version": self.system.version,
                      "model": self.chat.config.model},
        )
