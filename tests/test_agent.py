"""Model answers end to end: a real library, the deterministic OpenAI-compatible server over real HTTP.

Each test scripts an (often adversarial) model and asserts what a user would see: the streamed
text, the kept and dropped citations, the notices.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from fakellm import Call, FakeLLM, Reply, fake_llm

from chapterverse.answering import AnswerDelta, AnswerDone, AnswerMeta, answer_events
from chapterverse import Library, ProviderConfig
from chapterverse.answering.model_turn import AgentSettings
from chapterverse.llm.client import ChatProvider
from chapterverse.llm.summaries import summarize_document, summary_status
from chapterverse.positions import find_tags

DEMO = Path(__file__).resolve().parents[1] / "src" / "chapterverse" / "demo"
NO_AUTO = AgentSettings(auto_summarize=False)


@pytest.fixture(scope="module")
def library(tmp_path_factory: pytest.TempPathFactory) -> Library:
    lib = Library(tmp_path_factory.mktemp("agent-lib"))
    lib.ingest([DEMO])
    return lib


@pytest.fixture(scope="module")
def doc_id(library: Library) -> int:
    return library.documents()[0].id


def _config(fake: FakeLLM, **kw: Any) -> ProviderConfig:
    return ProviderConfig(base_url=fake.base_url, model="fake-model", max_retries=kw.pop("max_retries", 1),
                          retry_base_s=0.01, timeout_s=kw.pop("timeout_s", 10), **kw)


def _run(library: Library, doc_id: int, question: str, config: ProviderConfig | None,
         history: list[dict[str, str]] | None = None) -> tuple[list[str], Any, list[AnswerMeta]]:
    deltas, metas, result = [], [], None
    for event in answer_events(library, question, doc_id=doc_id, provider=config, history=history or [],
                               settings=NO_AUTO):
        if isinstance(event, AnswerDelta):
            deltas.append(event.text)
        elif isinstance(event, AnswerMeta):
            metas.append(event)
        elif isinstance(event, AnswerDone):
            result = event.result
    return deltas, result, metas


def _last_tool_text(request: dict[str, Any]) -> str | None:
    tools = [m for m in request["messages"] if m.get("role") == "tool"]
    return tools[-1]["content"] if tools else None


def _cat_tag(text: str) -> str:
    """The tag of the passage that names the cat, as the tool result shows it (a tag follows its passage)."""
    previous_end = 0
    for match in re.finditer(r"\[f\d+-\d+-\d+\]", text):
        if "cat called Admiral" in text[previous_end:match.start()]:
            return match.group()
        previous_end = match.end()
    raise AssertionError("the tool result does not show the cat passage")


def test_answer_keeps_evidence_tags_and_drops_fabricated_and_malformed(library: Library, doc_id: int) -> None:
    def model(request: dict[str, Any]) -> Reply:
        evidence = _last_tool_text(request)
        if evidence is None:
            return Reply.tool_call("search_passages", {"query": "cat name"})
        tag = _cat_tag(evidence)
        return Reply.text(f"The keeper's cat was called Admiral {tag}. It slept on the lamp [f999-1-2] "
                          f"and on the stairs [f1-293].", chunk_size=3)

    with fake_llm(handler=model) as fake:
        deltas, result, metas = _run(library, doc_id, "What was the cat called?", _config(fake))
    streamed = "".join(deltas)
    assert metas[0].mode == "llm"
    assert result.mode == "llm" and result.found
    assert [c.n for c in result.citations] == [1]
    assert "Admiral" in result.citations[0].text
    assert library.resolve(result.citations[0].tag).text == result.citations[0].text
    assert {d["tag"]: d["reason"] for d in result.dropped_tags} == {
        "[f999-1-2]": "not_in_evidence", "[f1-293]": "malformed"}
    assert "f999" not in streamed and "[f1-293" not in streamed
    assert re.findall(r"\[f[^\]]*$", streamed) == []
    assert streamed.strip() == result.answer.strip()
    assert result.tool_calls == [{"name": "search_passages", "arguments": {"query": "cat name"}}]
    assert result.usage["context_tokens"] > 0


def test_model_that_skips_tools_gets_one_forced_retrieval_round(library: Library, doc_id: int) -> None:
    replies = []

    def model(request: dict[str, Any]) -> Reply:
        evidence = _last_tool_text(request)
        replies.append(evidence)
        if evidence is None:
            return Reply.text("From memory: the cat was called Tom [f1-0-10].")
        return Reply.text(f"The cat was called Admiral {_cat_tag(evidence)}.")

    with fake_llm(handler=model) as fake:
        deltas, result, _ = _run(library, doc_id, "What was the cat called?", _config(fake))
    assert "Tom" not in "".join(deltas), "text written before any evidence must never be shown"
    assert len(replies) == 2 and replies[1] is not None
    assert result.tool_calls[0]["name"] == "search_passages"
    assert "Admiral" in result.answer and len(result.citations) == 1


def test_tags_from_a_previous_turn_are_dropped(library: Library, doc_id: int) -> None:
    old_tag = "[f1-574-726]"
    history = [{"role": "user", "content": "Who was the cat?"},
               {"role": "assistant", "content": f"Admiral {old_tag}."}]

    def model(request: dict[str, Any]) -> Reply:
        if _last_tool_text(request) is None:
            return Reply.tool_call("search_passages", {"query": "supply boat"})
        return Reply.text(f"As I said before, the cat was Admiral {old_tag}.")

    with fake_llm(handler=model) as fake:
        _, result, _ = _run(library, doc_id, "Remind me of the cat?", _config(fake), history)
    tool_text = _last_tool_text(fake.chat_requests[-1].json) or ""
    if old_tag not in tool_text:
        assert result.citations == []
        assert result.dropped_tags == [{"tag": old_tag, "reason": "not_in_evidence"}]
        assert result.unsupported_sentences, "a claim left without its citation is flagged"


def test_invented_quote_is_marked_unverified(library: Library, doc_id: int) -> None:
    def model(request: dict[str, Any]) -> Reply:
        evidence = _last_tool_text(request)
        if evidence is None:
            return Reply.tool_call("search_passages", {"query": "cat Admiral"})
        tag = _cat_tag(evidence)
        return Reply.text(f'She wrote that "the cat Admiral hated the sea and all its fish" {tag}. '
                          f'The text says "a grey cat called Admiral" {tag}.')

    with fake_llm(handler=model) as fake:
        _, result, _ = _run(library, doc_id, "What about the cat?", _config(fake))
    assert result.unverified_quotes == ["the cat Admiral hated the sea and all its fish"]


def test_not_in_book_answer_is_not_found(library: Library, doc_id: int) -> None:
    def model(request: dict[str, Any]) -> Reply:
        if _last_tool_text(request) is None:
            return Reply.tool_call("search_passages", {"query": "capital of Mongolia"})
        return Reply.text("The book does not say.")

    with fake_llm(handler=model) as fake:
        _, result, _ = _run(library, doc_id, "What is the capital of Mongolia?", _config(fake))
    assert result.found is False and result.citations == []


def test_malformed_tool_arguments_come_back_as_an_error_the_model_can_fix(library: Library, doc_id: int) -> None:
    script = [Reply.tool_call("search_passages", '{"query": "cat'),
              Reply.tool_call("search_passages", {"query": "cat"})]

    def model(request: dict[str, Any]) -> Reply:
        if script:
            return script.pop(0)
        return Reply.text(f"Admiral {_cat_tag(_last_tool_text(request) or '')}.")

    with fake_llm(handler=model) as fake:
        _, result, _ = _run(library, doc_id, "Cat?", _config(fake))
        first_tool_result = [m for m in fake.chat_requests[1].json["messages"] if m["role"] == "tool"][0]
    assert first_tool_result["content"].startswith("Error: the arguments were not valid JSON")
    assert len(result.citations) == 1


def test_failing_model_falls_back_to_an_extractive_answer_with_notice(library: Library, doc_id: int) -> None:
    with fake_llm(default=Reply.error(500, "boom")) as fake:
        _, result, _ = _run(library, doc_id, "What was the cat called?", _config(fake, max_retries=1))
    assert result.mode == "extractive"
    assert result.notice and "could not answer" in result.notice
    assert result.citations and "Admiral" in result.citations[0].text


def test_unreachable_model_falls_back_quickly(library: Library, doc_id: int) -> None:
    config = ProviderConfig(base_url="http://127.0.0.1:9/v1", model="m", max_retries=1, retry_base_s=0.01,
                            timeout_s=2)
    _, result, _ = _run(library, doc_id, "What was the cat called?", config)
    assert result.mode == "extractive" and "127.0.0.1:9" in (result.notice or "")


def test_segment_selection_returns_source_text_of_chosen_segments(library: Library, doc_id: int) -> None:
    def summarizer(request: dict[str, Any]) -> Reply:
        prompt = request["messages"][-1]["content"]
        tag = find_tags(prompt.split("TEXT:", 1)[1])[0].tag
        return Reply.text(f"A keeper tends a lighthouse with her cat {tag}. Invented [f777-0-5].")

    with fake_llm(handler=summarizer) as fake:
        counts = summarize_document(library, doc_id, ChatProvider(_config(fake)))
    assert counts["removed_tags"] == counts["done"] >= 1
    assert summary_status(library, doc_id, "fake-model") == (counts["total"], counts["total"])

    selection_replies = ["Sorry, I think part one.", None]

    def model(request: dict[str, Any]) -> Reply:
        content = request["messages"][-1]["content"]
        if "PARTS:" in content or content.startswith("Your reply was not valid JSON"):
            reply = selection_replies.pop(0)
            if reply is None:
                seg = library.store.segments(doc_id)[0].id
                reply = f'```json\n{{"Thinking": "the cat is in part {seg}", "answer": [{seg}]}}\n```'
            return Reply.text(reply)
        evidence = _last_tool_text(request)
        if evidence is None:
            return Reply.tool_call("get_related_segment_summaries", {"question": "Who is the cat?"})
        return Reply.text(f"Admiral {_cat_tag(evidence)}.")

    with fake_llm(handler=model) as fake:
        _, result, _ = _run(library, doc_id, "Who is the cat?", _config(fake))
        tool_text = [m for r in fake.chat_requests for m in r.json["messages"] if m["role"] == "tool"][-1]["content"]
    assert result.metadata["summaries"] == "ready"
    assert "A keeper tends a lighthouse" not in tool_text, "the tool returns source text, never summaries"
    assert "Her only companion was a grey cat called Admiral" in tool_text
    assert len(result.citations) == 1
