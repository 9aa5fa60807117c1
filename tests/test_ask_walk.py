"""The walk of ``chapterverse ask`` from the command to the printed answer, extractive and with a scripted model.

The question is analysed once: ``ask`` reads its words (tokens, content words, stems, language) one time and every
stage after (the search's rankings and relevance, the extractive reader, the answer begun ahead, the model's
forced search) takes that reading. Counted where the analysis starts: each call of ``analysis.word_tokens`` or
``analysis.hyphenated_words`` on the question's exact text, in every module that holds them.

The way goes downhill: no call enters a module that is still on the stack below the caller (a callback up into
a room left), traced with a profiler over the whole command (docs/ARCHITECTURE.md, "A question's way")."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from types import FrameType
from pathlib import Path
from typing import Any

import pytest
from cliutil import cli
from fakellm import Reply, fake_llm

import chapterverse
import chapterverse.index.dense
from chapterverse import analysis

DEMO = Path(__file__).resolve().parents[1] / "src" / "chapterverse" / "demo"


@pytest.fixture(scope="module")
def library(tmp_path_factory: pytest.TempPathFactory) -> chapterverse.Library:
    lib = chapterverse.open_library(tmp_path_factory.mktemp("read-once"), create=True)
    lib.ingest([DEMO])
    return lib


@pytest.fixture
def readings(monkeypatch: pytest.MonkeyPatch) -> Callable[[str], dict[str, int]]:
    """``count(question)``: from then on, how often each analysis entry has read ``question``'s exact text."""
    counts: dict[str, int] = {}
    asked: list[str] = []

    def counting(name: str, original: Callable[[str], Any]) -> Callable[[str], Any]:
        def read(text: str) -> Any:
            if asked and text == asked[0]:
                counts[name] = counts.get(name, 0) + 1
            return original(text)
        return read

    for name in ("word_tokens", "hyphenated_words"):
        original = getattr(analysis, name)
        patched = counting(name, original)
        for module in [m for key, m in list(sys.modules.items()) if key.startswith("chapterverse") and m]:
            if getattr(module, name, None) is original:
                monkeypatch.setattr(module, name, patched)

    def count(question: str) -> dict[str, int]:
        asked.append(question)
        return counts

    return count


def _modules_loaded() -> None:
    """Every module of an answer imported before the count patches them (later imports would bind the patched
    function anyway; this keeps the count independent of import order)."""
    import chapterverse.answering.ask  # noqa: F401
    import chapterverse.cli  # noqa: F401
    import chapterverse.search.retrieval  # noqa: F401


_modules_loaded()


def test_one_extractive_ask_reads_the_question_once(library: chapterverse.Library,
                                                    readings: Callable[[str], dict[str, int]]) -> None:
    question = "How far above the high-water mark did the tower stand?"
    counts = readings(question)
    result = chapterverse.ask(library, question, doc_id=library.documents()[0].id)
    assert result.state == "answered" and "forty-two feet" in result.answer
    assert counts == {"word_tokens": 1, "hyphenated_words": 1}


def test_cli_ask_reads_the_question_once(library: chapterverse.Library,
                                         readings: Callable[[str], dict[str, int]]) -> None:
    """The CLI's answer begun ahead and the dispatcher share one reading."""
    question = "For how many years did Marta keep the light on Gull Rock?"
    counts = readings(question)
    done = cli("ask", question, "--library", str(library.location), "--json")
    assert done.exit_code == 0 and "eleven years" in done.stdout, done.stderr
    assert counts == {"word_tokens": 1, "hyphenated_words": 1}


def test_cli_ask_with_a_model_reads_the_question_once(library: chapterverse.Library,
                                                      readings: Callable[[str], dict[str, int]]) -> None:
    """A model that answers without looking gets the forced search for the question: that search, and the
    extractive answer begun ahead, take the question's one reading."""
    question = "What did Marta send to the harbour master in Hallvik?"
    counts = readings(question)
    with fake_llm(handler=_model) as fake:
        done = cli("ask", question, "--library", str(library.location), "--json", "--llm-base-url", fake.base_url,
                   "--llm-model", "m")
    assert done.exit_code == 0, done.stderr
    assert '"mode": "llm"' in done.stdout and "logbook" in done.stdout
    assert any(m.get("tool_call_id") == "forced_retrieval" for m in fake.chat_requests[-1].json["messages"])
    assert counts == {"word_tokens": 1, "hyphenated_words": 1}


def _model(request: dict[str, Any]) -> Reply:
    """A model that answers without looking first, then cites the passage its forced search showed."""
    tools = [m for m in request["messages"] if m.get("role") == "tool"]
    if not tools:
        return Reply.text("I think it was a letter.")
    tag = next(line for line in tools[-1]["content"].splitlines() if "logbook to the harbour" in line)
    return Reply.text(f"She sent the logbook to the harbour master {tag[tag.rindex('['):]}.")


INDEX_HOOKS = "chapterverse.index."
"""The one package whose modules call back into each other: ``index.files.FollowedIndex`` runs the store-following
steps and calls the hooks its subclasses (``index.lexical``, ``index.vectors``) override, and ``index.int8codes``
calls back for the vector index's current segments, by design."""

BESIDE_RUN = chapterverse.index.dense.Beside.run.__code__
"""The one call back up across rooms, by design: a large dense scan runs the searching thread's BM25 ranking (handed
down as a ``Beside``) while its helper threads stream the vectors, so both cores work at once."""


def _climbs(command: Callable[[], object]) -> list[str]:
    """Each call, while ``command`` runs, into a chapterverse module that is on the calling thread's stack below
    its top: a return to a room left."""
    stacks: dict[int, list[str]] = {}
    climbs: list[str] = []

    def profile(frame: FrameType, event: str, arg: object) -> None:
        module = frame.f_globals.get("__name__", "")
        if event not in ("call", "return") or not module.startswith("chapterverse.") or \
                frame.f_code.co_name == "<module>":
            return
        stack = stacks.setdefault(threading.get_ident(), [])
        if event == "return":
            if stack:
                stack.pop()
            return
        handed_down = frame.f_back is not None and frame.f_back.f_code is BESIDE_RUN
        if stack and module != stack[-1] and module in stack and not handed_down and not (
                module.startswith(INDEX_HOOKS) and stack[-1].startswith(INDEX_HOOKS)):
            climbs.append(f"{' > '.join(dict.fromkeys(stack))} >> {module}.{frame.f_code.co_qualname}")
        stack.append(module)

    threading.setprofile(profile)
    sys.setprofile(profile)
    try:
        command()
    finally:
        sys.setprofile(None)
        threading.setprofile(None)
    return climbs


def test_cli_ask_goes_downhill(library: chapterverse.Library) -> None:
    question = "What did Marta send to the harbour master in Hallvik?"
    extractive = _climbs(lambda: cli("ask", question, "--library", str(library.location)))
    with fake_llm(handler=_model) as fake:
        with_model = _climbs(lambda: cli("ask", question, "--library", str(library.location),
                                         "--llm-base-url", fake.base_url, "--llm-model", "m"))
    assert extractive == [] and with_model == []
