"""What a model's answers come to once they are verified (``chapterverse bench honest``): each question asked
with the model and, in the same run, without it, and counted as a reader would meet the answers.

Per path: how many answers were shown as answered, unsure or not found; how many of them are the model's own
text (mode ``llm``) and how many gave way to the extractive answer because too little of the model's text was
supported (``answering.ask.verified_enough``) or because the model failed; the model's sentences with a
supporting citation and without one (its own answer's, where it gave way; an empty one counted apart); the citation pairs dropped because their span did not support their
sentence; answers shown as answered with no supported sentence (the rule says 0); citations whose tag resolves
to the text they show; and how many answers hold a gold answer (``holds_gold``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..answering import AnswerResult
from ..answering.ask import ask
from ..citations import strip_tags
from ..errors import ChapterverseError
from ..library import Library
from ..llm.provider_config import ProviderConfig
from .answers import AnswerQuestion, AnswerSet, holds_gold, sample_questions

__all__ = ["PathCounts", "HonestyReport", "run_honesty"]


@dataclass(slots=True)
class PathCounts:
    """One path's answers, counted."""

    questions: int = 0
    answered: int = 0
    unsure: int = 0
    not_found: int = 0
    model_text: int = 0
    unverified_fallbacks: int = 0
    failure_fallbacks: int = 0
    supported_sentences: int = 0
    unsupported_sentences: int = 0
    dropped_pairs: int = 0
    answered_all_unsupported: int = 0
    empty_model_text: int = 0
    citations: int = 0
    citations_resolving: int = 0
    holds_gold: int = 0
    seconds: list[float] = field(default_factory=list)

    def add(self, result: AnswerResult, answers: Sequence[str], seconds: float, library: Library) -> None:
        self.questions += 1
        self.seconds.append(seconds)
        state = result.state or ("answered" if result.found else "not_found")
        self.answered += state == "answered"
        self.unsure += state == "unsure"
        self.not_found += state == "not_found"
        self.model_text += result.mode == "llm"
        notice = result.notice or ""
        self.unverified_fallbacks += notice.startswith("The model's answer could not be verified")
        self.failure_fallbacks += notice.startswith("The model could not answer")
        model = result.metadata if "model_answer" in result.metadata else None  # the model's, when it gave way
        supported = model["model_supported_sentences"] if model else result.supported_sentences
        unsupported = model["model_unsupported_sentences"] if model else result.unsupported_sentences
        dropped = model["model_dropped_tags"] if model else result.dropped_tags
        self.supported_sentences += len(supported)
        self.unsupported_sentences += len(unsupported)
        self.dropped_pairs += sum(1 for d in dropped if d.get("reason") == "does_not_support")
        self.empty_model_text += model is not None and not str(model["model_answer"]).strip()
        self.answered_all_unsupported += (result.mode == "llm" and state == "answered"
                                          and not result.supported_sentences and bool(result.unsupported_sentences))
        for citation in result.citations:
            self.citations += 1
            try:
                self.citations_resolving += library.resolve(citation.tag).text == citation.text
            except ChapterverseError:
                pass
        self.holds_gold += bool(answers) and holds_gold(strip_tags(result.answer), answers)


@dataclass(slots=True)
class HonestyReport:
    name: str
    model: str
    paths: dict[str, PathCounts]


def run_honesty(answer_set: AnswerSet, library: Library, doc_ids: dict[str, int], provider: ProviderConfig, *,
                limit: int | None, seed: int) -> HonestyReport:
    """Ask ``limit`` answerable questions of ``answer_set`` (drawn with ``seed``) with the model and without."""
    asked: list[AnswerQuestion] = sample_questions([q for q in answer_set.questions if q.answers], limit, seed)
    paths = {"model": PathCounts(), "extractive": PathCounts()}
    for question in asked:
        doc_id = doc_ids[question.source]
        for name, chosen in (("model", provider), ("extractive", None)):
            started = time.perf_counter()
            result = ask(library, question.text, doc_id=doc_id, provider=chosen)
            paths[name].add(result, question.answers, time.perf_counter() - started, library)
    return HonestyReport(answer_set.name, provider.model, paths)
