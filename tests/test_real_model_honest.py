"""Honest answers with a real model: SmolLM2-135M-Instruct behind llama.cpp's server (``realllm``) answering
questions about the demo book. A model this small often ignores the passages; the tests check mechanics, never
its wisdom: no answer whose sentences are all unsupported is shown as the model's answer, every tag shown
resolves to the text its citation shows, and every unsupported sentence is in the answer, where it is marked.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from realllm import RealLLM, real_llm

from chapterverse.answering import AnswerDone, answer_events
from chapterverse import Library, ProviderConfig
from chapterverse.answering.model_turn import AgentSettings
from chapterverse.positions import find_tags

DEMO = Path(__file__).resolve().parents[1] / "src" / "chapterverse" / "demo"
QUESTIONS = [
    "What was the name of the keeper's cat?",
    "What did Marta find wedged between two boulders?",
]
"""Two turns of two rounds each (about a minute on one thread): the mechanics, not the model's wisdom, are the
subject, and each round is the same code whatever the question."""


@pytest.fixture(scope="module")
def capped_llm() -> Iterator[RealLLM]:
    """The real model with a server-side cap on each reply, so each turn ends in seconds whatever it writes."""
    with real_llm(n_predict=96) as llm:
        yield llm


@pytest.fixture(scope="module")
def library_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    location = tmp_path_factory.mktemp("real-honest") / "lib"
    Library(location).ingest([DEMO])
    return location


@pytest.mark.slow
def test_no_real_answer_with_all_sentences_unsupported_is_shown_as_answered(capped_llm: RealLLM,
                                                                            library_dir: Path) -> None:
    library = Library(library_dir)
    doc_id = library.documents()[0].id
    config = ProviderConfig(base_url=capped_llm.base_url, model=capped_llm.model, max_retries=0, timeout_s=120)
    for question in QUESTIONS:
        done = list(answer_events(library, question, doc_id=doc_id, provider=config,
                                  settings=AgentSettings(max_rounds=2, auto_summarize=False)))[-1]
        assert isinstance(done, AnswerDone)
        result = done.result
        if result.mode == "llm" and result.state == "answered":
            assert result.supported_sentences, f"shown as answered with nothing supported: {result.answer!r}"
            assert all(sentence in result.answer for sentence in result.unsupported_sentences)
        shown = {span.key for span in find_tags(result.answer)}
        assert shown == {c.tag for c in result.citations}, "every tag shown is a citation"
        for citation in result.citations:
            assert library.resolve(citation.tag).text == citation.text
