"""Honest answers: a citation must hold what its sentence says, and a model's text nothing supports is never
shown as the answer. Exact cases with the scripted model (``fakellm``) on the demo book: the agent's result, the
command line's ``ask`` and ``chat``, the Markdown export, and the knowledge-base proxy's reply filter.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from fakellm import Call, Reply, fake_llm

from chapterverse.answering import AnswerDone, answer_events
from chapterverse.answering.ask import UNVERIFIED_NOTICE
from chapterverse.answering.marks import UNSUPPORTED_MARK
from chapterverse import Library, ProviderConfig, ResolvedSpan, Span
from chapterverse.citations import Evidence, verify_answer
from chapterverse.export import chat_markdown
from chapterverse.answering.model_turn import AgentSettings
from chapterverse.support import supports

DEMO = Path(__file__).resolve().parents[1] / "src" / "chapterverse" / "demo"
NO_AUTO = AgentSettings(auto_summarize=False)
CAT = "grey cat called Admiral"
CLOCKWORK = "At two in the morning the clockwork stopped"
RIGHT = "Marta's only companion was a grey cat called Admiral, who slept on the warm brass of the lamp room."
WRONG = "At two in the morning the clockwork stopped and Marta turned the lens by hand for six hours."
UNSUPPORTED = "The keeper was paid forty crowns a month by the harbour board of Hallvik."


@pytest.fixture(scope="module")
def library_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    location = tmp_path_factory.mktemp("honest") / "lib"
    Library(location).ingest([DEMO])
    return location


@pytest.fixture(scope="module")
def library(library_dir: Path) -> Library:
    return Library(library_dir)


def _tag_after(evidence: str, phrase: str) -> str:
    """The tag that closes the passage holding ``phrase`` in a tool result (a tag follows its passage)."""
    previous = 0
    for match in re.finditer(r"\[f\d+-\d+-\d+\]", evidence):
        if phrase in evidence[previous:match.start()]:
            return match.group()
        previous = match.end()
    raise AssertionError(f"no passage with {phrase!r} in the tool result")


def _model(answer: Any) -> Any:
    """A model that looks up the cat (chapter 1) and the storm (chapter 2), then answers ``answer(cat_tag,
    clockwork_tag)``."""
    def handler(request: dict[str, Any]) -> Reply:
        tools = "\n".join(str(m.get("content")) for m in request["messages"] if m.get("role") == "tool")
        if not tools:
            return Reply.tool_calls(Call("search_passages", {"query": "grey cat Admiral lamp room"}),
                                    Call("search_passages", {"query": "clockwork stopped two in the morning"}))
        return Reply.text(answer(_tag_after(tools, CAT), _tag_after(tools, CLOCKWORK)), chunk_size=7)
    return handler


def _ask(library: Library, handler: Any, question: str = "What happened at the lighthouse?") -> Any:
    with fake_llm(handler=handler) as fake:
        config = ProviderConfig(base_url=fake.base_url, model="m", max_retries=1, retry_base_s=0.01, timeout_s=10)
        events = list(answer_events(library, question, doc_id=library.documents()[0].id, provider=config,
                                    settings=NO_AUTO))
    done = events[-1]
    assert isinstance(done, AnswerDone)
    return done.result


# --- the check of each pair ------------------------------------------------------------------------


def test_a_span_supports_its_paraphrase_and_not_a_sentence_about_another_chapter(library: Library) -> None:
    text = library.resolve(library.search(CAT, k=1)[0].tag).text
    assert CAT in text
    assert supports("The keeper's grey cat, Admiral, slept on the warm brass of the lamp room.", text)
    assert not supports(WRONG, text)


def test_a_sentence_about_chapter_two_citing_a_chapter_one_span_loses_that_citation(library: Library) -> None:
    result = _ask(library, _model(lambda cat, clock: f"{RIGHT} {cat} {WRONG} {cat} Then the storm passed {clock}."))
    assert result.mode == "llm" and result.state == "answered"
    cat_tag = next(c.tag for c in result.citations if CAT in c.text)
    assert [d["reason"] for d in result.dropped_tags] == ["does_not_support"]
    assert result.dropped_tags[0]["tag"] == f"[{cat_tag}]"
    assert WRONG in result.unsupported_sentences
    assert f"{WRONG} [" not in result.answer, "the wrong span must not stay on its sentence"
    assert result.answer.count(f"[{cat_tag}]") == 1


def test_a_quote_without_its_closing_mark_is_checked() -> None:
    text = "Marta Olsen kept the light on Gull Rock for eleven years before the storm of 1911."
    span = Span(1, 0, len(text))

    def resolve(s: Span) -> ResolvedSpan | None:
        if s != span:
            return None
        return ResolvedSpan(tag=s.key, doc_id=1, doc_title="Gull Rock", file=s.file, start=s.start, end=s.end,
                            text=text[s.start:s.end], toc_path=["Chapter 1"], file_title="Gull Rock", label="",
                            source="gull-rock.md")

    evidence = Evidence(resolve)
    evidence.add_text(span.tag)
    kept = verify_answer(f"The book says she “kept the light on Gull Rock for eleven years {span.tag}", evidence)
    assert kept.unverified_quotes == []
    changed = verify_answer(f"The book says she “kept the light on Gull Rock for twenty happy years {span.tag}",
                            evidence)
    assert changed.unverified_quotes == ["kept the light on Gull Rock for twenty happy years"]


# --- what is shown ------------------------------------------------------------------------------------


def test_a_reply_with_no_supported_sentence_is_never_answered(library: Library) -> None:
    result = _ask(library, _model(lambda cat, clock: f"{UNSUPPORTED} {WRONG} {cat}"))
    assert not (result.mode == "llm" and result.state == "answered")
    assert result.mode == "extractive"
    assert result.notice == UNVERIFIED_NOTICE.format(which="none of its sentences")
    assert UNSUPPORTED not in result.answer and "forty crowns" in result.metadata["model_answer"]
    assert all(library.resolve(c.tag).text == c.text for c in result.citations)


def test_a_mostly_unsupported_reply_falls_back_too(library: Library) -> None:
    invented = ("The harbour board paid her forty crowns a month for the work. "
                "Her brother Nils rowed out from Hallvik with letters every single Sunday. ")
    result = _ask(library, _model(lambda cat, clock: f"{RIGHT} {cat} {invented}"))
    assert result.mode == "extractive"
    assert result.notice == UNVERIFIED_NOTICE.format(which="only 1 of its 3 sentences")


def _cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "chapterverse", *args], input=stdin, capture_output=True,
                          text=True, env={**os.environ, "COLUMNS": "300"}, timeout=300)


def test_ask_marks_the_unsupported_sentence_in_its_text(library_dir: Path) -> None:
    with fake_llm(handler=_model(lambda cat, clock: f"{RIGHT} {cat} {UNSUPPORTED}")) as fake:
        done = _cli("ask", "What happened?", "--library", str(library_dir), "--llm-base-url", fake.base_url,
                    "--llm-model", "m")
    assert done.returncode == 0, done.stderr
    assert f"{UNSUPPORTED} {UNSUPPORTED_MARK}" in done.stdout
    assert f"{RIGHT} [1]" in done.stdout and f"{RIGHT} [1] {UNSUPPORTED_MARK}" not in done.stdout
    assert f"{UNSUPPORTED_MARK} 1 sentence not supported by a cited passage" in done.stdout


def test_ask_shows_the_extractive_answer_when_nothing_the_model_wrote_is_supported(library_dir: Path) -> None:
    with fake_llm(handler=_model(lambda cat, clock: f"{UNSUPPORTED} {WRONG} {cat}")) as fake:
        done = _cli("ask", "What was the cat called?", "--library", str(library_dir), "--llm-base-url",
                    fake.base_url, "--llm-model", "m")
    assert done.returncode == 0, done.stderr
    assert "forty crowns" not in done.stdout
    assert "could not be verified" in done.stderr
    assert "Admiral" in done.stdout


def test_chat_marks_unsupported_sentences_and_export_keeps_the_marks(library_dir: Path) -> None:
    with fake_llm(handler=_model(lambda cat, clock: f"{RIGHT} {cat} {UNSUPPORTED}")) as fake:
        done = _cli("chat", "--doc", "1", "--library", str(library_dir), "--llm-base-url", fake.base_url,
                    "--llm-model", "m", stdin="What happened?\n")
    assert done.returncode == 0, done.stderr
    assert f"{UNSUPPORTED_MARK} not supported by a cited passage: {UNSUPPORTED}" in done.stdout
    chat_id = int(re.search(r"saved as chat (\d+)", done.stderr).group(1))  # type: ignore[union-attr]
    library = Library(library_dir)
    markdown = chat_markdown(library.store, chat_id, "http://127.0.0.1:8000")
    assert f"{UNSUPPORTED} {UNSUPPORTED_MARK}" in markdown
    assert f"{UNSUPPORTED_MARK} 1 sentence not supported by a cited passage" in markdown


def test_chat_replaces_an_unverified_reply_with_the_extractive_answer(library_dir: Path) -> None:
    with fake_llm(handler=_model(lambda cat, clock: f"{UNSUPPORTED} {WRONG} {cat}")) as fake:
        done = _cli("chat", "--doc", "1", "--library", str(library_dir), "--llm-base-url", fake.base_url,
                    "--llm-model", "m", stdin="What was the cat called?\n")
    assert done.returncode == 0, done.stderr
    assert "could not be verified" in done.stderr
    shown_after = done.stdout.split(UNSUPPORTED, 1)[1]
    assert "Admiral" in shown_after, "the extractive answer follows the model's streamed text"
    chat_id = int(re.search(r"saved as chat (\d+)", done.stderr).group(1))  # type: ignore[union-attr]
    markdown = chat_markdown(Library(library_dir).store, chat_id, "http://127.0.0.1:8000")
    assert "*Note: The model's answer could not be verified" in markdown and "forty crowns" not in markdown
