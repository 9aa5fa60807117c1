"""One answer turn with a model, as a stream of events: text deltas, then the verified result.

The tool loop: the model calls retrieval tools, their results become this turn's evidence, the final answer
streams through a tag filter (a tag split across deltas is held back and only evidence tags pass), and the whole
answer is verified once more at the end. A model that answers a document question without calling any tool gets
one forced retrieval round: we run ``search_passages`` with the question ourselves and hand the result back as a
tool result. This works with every OpenAI-compatible server, unlike ``tool_choice="required"``, which many local
servers ignore. Text of a round without evidence is held back, never shown. What the model writes is cleaned
before anything else reads it (``scaffolding.TextCleaner``: chat-template tokens, our own SOURCE TEXT headers), so
neither the reader nor the answer's checks see them.

Every turn is bounded: each request carries ``max_tokens``, and the whole turn (all its rounds) ends at its
deadline (``llm.limits``). Cut while its answer shows, the turn ends with what was shown, verified, and a notice;
cut before, it raises :class:`DeadlineError` and the dispatcher answers extractively. What is sent is fitted to
the model's window when it is known (``llm.window``): the oldest history goes first, the tools' schemas when
they leave no room (we then search for the model), and each tool's result gets only the room that is left.
While the first round is held back, :class:`AnswerStatus` events say which step the turn is on.

Which path answers a question, and the extractive answer when the model fails, is
:func:`chapterverse.answering.ask.answer_events`'s business; this module is only the model's side of it.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

from ..citations import Evidence, StreamingTagFilter, library_resolver, verify_answer
from ..errors import DeadlineError, ProviderError
from ..library import Library
from ..llm.client import ChatProvider, StreamEnd, TextDelta, ToolCall
from ..llm.limits import FALLBACK_RESERVE_S, Deadline
from ..llm.prompts import load_prompt
from ..llm.provider_config import ProviderConfig
from ..llm.summaries import EXTRACTIVE_MODEL, SummaryJobs
from ..llm.tools import TOOL_SCHEMAS, ToolBox, ToolSettings
from ..llm.window import TOKEN_RATIO, answer_room, discover_window, estimate_messages
from ..scaffolding import ANSWER_FROM_SOURCE, TextCleaner
from .question import Question, as_question
from .result import AnswerDelta, AnswerDone, AnswerEvent, AnswerResult, AnswerStatus

__all__ = ["AgentSettings", "ModelTurn", "too_late", "turn_deadline"]


@dataclass(frozen=True, slots=True)
class AgentSettings:
    max_rounds: int = 4
    tools: ToolSettings = field(default_factory=ToolSettings)
    auto_summarize: bool = True
    """Start the document's summary job on its first question (off in scripted tests)."""


log = logging.getLogger(__name__)
_JOBS = SummaryJobs()
_LEAST_ANSWER = 32
"""Fewer tokens left for the answer than this, and the question does not fit the model's window."""
_SELECTION_PROMPT_TOKENS = 300
"""The selection prompt's own words, around the batch of summaries it carries (cl100k tokens, rounded up)."""
_HELD_ROUND_TOKENS = 256
"""``max_tokens`` of a round before any evidence: its text is never shown (only its tool calls count), so a
model that ignores the tools and writes an answer is not waited for longer than this."""


class ModelTurn:
    """One question answered by the model (:meth:`run`); :attr:`shown` tells whether any of its text was shown."""

    def __init__(self, library: Library, question: str | Question, doc_id: int | None, provider: ProviderConfig, *,
                 selection: ProviderConfig | None = None, history: Sequence[dict[str, str]] = (),
                 settings: AgentSettings | None = None, summary_jobs: SummaryJobs | None = None,
                 started: float | None = None) -> None:
        self.deadline = turn_deadline(provider, started)
        selection = selection or provider
        settings = settings or AgentSettings()
        jobs = summary_jobs or _JOBS
        self.library = library
        self.question = as_question(question, library.store.languages())
        """The question, read once: the forced search hands this reading on to ``Library.search``."""
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
                             settings=settings.tools, deadline=self.deadline, asked=self.question.query)
        title = library.document(doc_id).title if doc_id is not None else "the whole library"
        self.system = load_prompt("answer_system")
        self.messages: list[dict[str, Any]] = [{"role": "system", "content": self.system.render(doc_title=title)},
                                               *history, {"role": "user", "content": self.question.text}]
        self.history_left = len(history)
        """History messages still in :attr:`messages` (after the system message); the oldest go when over."""
        self.window: int | None = None
        self.answer_tokens = provider.max_tokens
        self.notices: list[str] = []
        self.stopped: str | None = None
        """Why the turn ended early (``deadline``), for the result's metadata."""
        self.filter = StreamingTagFilter(self.evidence, mode="keep")
        self.cleaner = TextCleaner()
        self.shown = False
        self.raw_answer: list[str] = []
        self.usage = {"prompt_tokens": 0, "completion_tokens": 0, "context_tokens": 0}

    def run(self) -> Iterator[AnswerEvent]:
        """The answer's deltas and its verified result; a ProviderError when the model fails (after the client's
        retries), which the dispatcher answers extractively: a DeadlineError when the deadline came before any of
        the answer showed. Cut at the deadline while it shows, the answer ends there, with a notice."""
        model = self.chat.config.model
        yield AnswerStatus("model", f"asking {model}")
        threading.Thread(target=self._warm_retrieval, name="warm-retrieval", daemon=True).start()
        try:
            yield from self._rounds(model)
        except DeadlineError:
            if not self.shown:
                raise
            self.stopped = "deadline"
            # true whether its text stands (shown as far as it came, verified) or gives way to the extractive
            # answer, whose notice this one then leads
            self.notices.append(f"The model's answer was cut at {self.deadline.describe()}.")
        yield from self._shown(self.cleaner.flush())
        tail = self.filter.flush()
        if tail:
            self.shown = True
            yield AnswerDelta(tail)
        yield AnswerDone(self._result())

    def _warm_retrieval(self) -> None:
        """Load the embedding model while the model reads its first prompt: the search it asks for, or the
        extractive answer that replaces a turn cut at its deadline, then need not wait for it."""
        try:
            self.library.embedder.embed_query(self.question.text)
        except Exception as exc:  # the search that needs it raises this again, where it is reported
            log.debug("warming retrieval failed: %s", exc)

    def _rounds(self, model: str) -> Iterator[AnswerEvent]:
        """The tool rounds and the answer's; forced retrieval first when the tools' schemas leave no room."""
        if self.deadline.passed:  # what came before the turn (a slow start) took its time: the model is not asked
            raise DeadlineError(too_late(self.deadline, model))
        self._learn_window()
        forced = not self._fits(TOOL_SCHEMAS)
        if forced:
            yield AnswerStatus("search", "searching the book")
            self._force_retrieval()
        for round_no in range(self.settings.max_rounds + 1):
            last = round_no == self.settings.max_rounds
            tools = None if last or not self._fits(TOOL_SCHEMAS) else TOOL_SCHEMAS
            live = bool(self.tools.calls)
            if live:
                yield AnswerStatus("write", f"{model} is writing the answer")
            held: list[str] = []
            end: StreamEnd | None = None
            max_tokens = self._max_tokens(tools)
            for event in self.chat.stream(self.messages, tools=tools, deadline=self.deadline,
                                          max_tokens=max_tokens if live else min(max_tokens, _HELD_ROUND_TOKENS)):
                if isinstance(event, TextDelta):
                    if live:
                        yield from self._show(event.text)
                    else:
                        held.append(event.text)
                else:
                    end = event
            self._count(end)
            if end is not None and end.tool_calls and tools is not None:
                yield from self._statuses(end.tool_calls)
                self._run_tools(end.tool_calls, "".join(held))
                continue
            if not self.tools.calls and not forced:
                forced = True
                yield AnswerStatus("search", "searching the book")
                self._force_retrieval()
                continue
            for text in held:
                yield from self._show(text)
            break

    @staticmethod
    def _statuses(calls: Sequence[ToolCall]) -> Iterator[AnswerStatus]:
        for call in calls:
            try:
                arguments = json.loads(call.arguments or "{}")
            except ValueError:
                arguments = {}
            query = arguments.get("query") or arguments.get("question") if isinstance(arguments, dict) else None
            what = f": {' '.join(str(query).split())[:80]}" if query else ""
            yield AnswerStatus("search", f"searching the book{what}")

    # -- the model's window

    def _learn_window(self) -> None:
        """The window (the setting, else the server's word, asked within a short time) and the answer's room."""
        config = self.chat.config
        self.window = config.context_tokens or discover_window(
            config.base_url, config.model, _auth_headers(config), timeout_s=min(2.0, self.deadline.remaining))
        self.answer_tokens = answer_room(config.max_tokens, self.window)
        if self.window is not None:  # the selector reads batches of part summaries: each must fit too
            fitting = int((self.window - self.answer_tokens) / TOKEN_RATIO) - _SELECTION_PROMPT_TOKENS
            self.tools.settings = replace(self.tools.settings,
                                          batch_tokens=max(1, min(self.tools.settings.batch_tokens, fitting)))

    def _room(self, tools: Sequence[dict[str, Any]] | None) -> int | None:
        """Model tokens the window has left for more of the prompt once the answer's room is kept; None when the
        window is unknown."""
        if self.window is None:
            return None
        return self.window - self.answer_tokens - estimate_messages(self.messages, tools)

    def _fits(self, tools: Sequence[dict[str, Any]] | None) -> bool:
        """Whether the messages (less their oldest history, if need be) and ``tools`` fit beside the answer."""
        room = self._room(tools)
        while room is not None and room < 0 and self.history_left:
            del self.messages[1]
            self.history_left -= 1
            room = self._room(tools)
        return room is None or room >= 0

    def _max_tokens(self, tools: Sequence[dict[str, Any]] | None) -> int:
        """``max_tokens`` for the next request: the configured one, less what the window cannot hold."""
        config = self.chat.config
        self._fits(tools)
        room = self._room(tools)
        if room is None:
            return config.max_tokens
        left = min(config.max_tokens, self.answer_tokens + room)
        if left < _LEAST_ANSWER:
            raise ProviderError(f"the question and its passages do not fit {config.model}'s {self.window}-token "
                                f"window (estimated); set --llm-context-tokens if the model reads more")
        return left

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
        room = self._room(TOOL_SCHEMAS if self._fits(TOOL_SCHEMAS) else None)
        self.tools.room_tokens = None if room is None else int(room / TOKEN_RATIO) // len(calls) - 16
        with ThreadPoolExecutor(max_workers=max(1, min(len(calls), 4))) as pool:
            results = list(pool.map(lambda c: self.tools.execute(c.name, c.arguments), calls))
        for call, result in zip(calls, results):
            self.messages.append({"role": "tool", "tool_call_id": call.id, "content": result})

    def _force_retrieval(self) -> None:
        """The model answered without looking: look for it, and let it answer again from the source."""
        call = ToolCall(id="forced_retrieval", name="search_passages",
                        arguments=json.dumps({"query": self.question.text}, ensure_ascii=False))
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
            usage=dict(self.usage), notice=" ".join(self.notices) or None,
            metadata={"summaries": self.summaries, "prompt_version": self.system.version,
                      "model": self.chat.config.model, "window": self.window, "stopped": self.stopped},
        )


def turn_deadline(provider: ProviderConfig, started: float | None = None) -> Deadline:
    """The deadline of a turn with ``provider``'s model, counted from ``started`` (``time.monotonic()``; now when
    None), its last seconds kept for the extractive answer that replaces an answer cut before it began."""
    return Deadline(provider.deadline_s, provider.deadline_setting,
                    reserve_s=min(FALLBACK_RESERVE_S, provider.deadline_s / 4),
                    started=time.monotonic() if started is None else started)


def too_late(deadline: Deadline, model: str) -> str:
    """Why ``model`` was not asked: what came before its turn took the time the deadline left it."""
    return f"{deadline.describe()} had passed before {model} could be asked"


def _auth_headers(config: ProviderConfig) -> dict[str, str]:
    """The headers a window discovery sends: the endpoint's own, and its key."""
    headers = dict(config.headers)
    if config.api_key:
        headers["Authorization"] = f"Bearer {config.api_key}"
    return headers
