"""Segment-selection replies: what models really send, and that nothing else ever escapes as an error."""

from __future__ import annotations

import json

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from chapterverse.llm.selection import Selection, SelectionParseError, parse_selection


@pytest.mark.parametrize(
    "reply",
    [
        '{"Thinking": "3 and 7 talk about whales", "answer": ["3", "7"]}',
        '```json\n{"Thinking": "3 and 7 talk about whales", "answer": ["3", "7"]}\n```',
        'Sure! Here is my selection:\n```\n{"Thinking": "3 and 7 talk about whales", "answer": [3, 7]}\n```\nThanks.',
        "{'Thinking': '3 and 7 talk about whales', 'answer': ['3', '7',],}",
        '{"thinking": "3 and 7 talk about whales", "Answer": "3, 7"}',
        '{"THINKING": "3 and 7 talk about whales", "ANSWER": [3.0, "7", "3"]}',
        '{Thinking: "3 and 7 talk about whales", answer: ["3", "7"]}',
        '{"Thinking": "3 and 7 talk\nabout whales", "answer": ["3", "7"]}',
        '{"Thinking": "3 and 7 talk about whales", "answer": ["3", "7"]',
        '{"Thinking": "3 and 7 talk about whales", "answer": "[3, 7]"}',
    ],
)
def test_tolerated_replies(reply: str) -> None:
    selection = parse_selection(reply, valid_ids=["3", "7", "9"])
    assert selection.ids == ["3", "7"]
    assert selection.invalid_ids == []
    assert selection.thinking.replace("\n", " ") == "3 and 7 talk about whales"


def test_single_id_as_number_or_string() -> None:
    assert parse_selection('{"answer": 3}').ids == ["3"]
    assert parse_selection('{"answer": "c12"}').ids == ["c12"]


def test_empty_selection_is_valid() -> None:
    assert parse_selection('{"Thinking": "nothing fits", "answer": []}') == Selection("nothing fits", [], [])
    assert parse_selection('{"Thinking": "nothing fits", "answer": null}').ids == []


def test_ids_are_deduplicated_checked_and_capped() -> None:
    reply = '{"Thinking": "", "answer": ["1", "2", "99", "2", "3", "4", "5", "6", "98", "1"]}'
    selection = parse_selection(reply, valid_ids={"1", "2", "3", "4", "5", "6"}, max_ids=4)
    assert selection.ids == ["1", "2", "3", "4"]
    assert selection.invalid_ids == ["99", "98"]
    assert parse_selection(reply).ids == ["1", "2", "99", "3", "4"]


def test_the_first_object_with_an_answer_wins() -> None:
    reply = 'I considered {"note": "not this"} and then {"answer": ["2"]} and {"answer": ["5"]}'
    assert parse_selection(reply).ids == ["2"]


def test_braces_inside_strings_do_not_confuse_the_scanner() -> None:
    reply = '{"Thinking": "the {brace} and \\"quote\\" and ]", "answer": ["4"]}'
    selection = parse_selection(reply)
    assert selection.ids == ["4"] and selection.thinking == 'the {brace} and "quote" and ]'


def test_answer_list_is_salvaged_when_thinking_breaks_the_json() -> None:
    reply = '{"Thinking": "he says "call me Ishmael" here", "answer": ["3", "7"]}'
    assert parse_selection(reply) == Selection("", ["3", "7"], [])


def test_non_string_thinking_is_kept_as_json() -> None:
    assert parse_selection('{"Thinking": ["a", "b"], "answer": []}').thinking == '["a", "b"]'


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        ("I think segments 3 and 7.", "not valid JSON: no JSON object found"),
        ('{"Thinking": "cut off here', "not valid JSON: the JSON object is not closed"),
        ('{"answer": [3, 7', "not valid JSON"),
        ('{"answer" ["3"]}', "not valid JSON: Expecting ':' delimiter"),
        ('{"Thinking": "x"}', 'no "answer" key'),
        ('{"answer": [{"id": 3}]}', '"answer" must list ids'),
        ('{"answer": [true]}', '"answer" must list ids'),
    ],
)
def test_unparseable_replies_raise_a_short_retry_message(reply: str, message: str) -> None:
    with pytest.raises(SelectionParseError, match=message) as info:
        parse_selection(reply)
    assert isinstance(info.value, ValueError)
    assert len(str(info.value)) < 200
    assert str(info.value).endswith('Reply with only {"Thinking": "...", "answer": ["<id>", ...]}.')


def test_negative_max_ids_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="max_ids"):
        parse_selection('{"answer": []}', max_ids=-1)


ids = st.lists(st.one_of(st.integers(min_value=0, max_value=10**6).map(str),
                         st.from_regex(r"[a-z][a-z0-9_-]{0,8}", fullmatch=True)), max_size=8)
prose = st.text(alphabet=st.characters(blacklist_characters="{}[]\"'`", blacklist_categories=["Cs"]), max_size=40)


@settings(max_examples=300, deadline=None)
@given(thinking=st.text(max_size=80), chosen=ids, before=prose, after=prose, fenced=st.booleans(),
       max_ids=st.integers(min_value=0, max_value=6))
def test_round_trip_through_prose_and_fences(thinking: str, chosen: list[str], before: str, after: str,
                                              fenced: bool, max_ids: int) -> None:
    body = json.dumps({"Thinking": thinking, "answer": chosen}, ensure_ascii=False)
    reply = f"{before}\n```json\n{body}\n```\n{after}" if fenced else f"{before} {body} {after}"
    valid = set(chosen[::2])
    selection = parse_selection(reply, valid_ids=valid, max_ids=max_ids)
    distinct = list(dict.fromkeys(chosen))
    assert selection.thinking == thinking
    assert selection.ids == [i for i in distinct if i in valid][:max_ids]
    assert selection.invalid_ids == [i for i in distinct if i not in valid]


@settings(max_examples=500, deadline=None)
@given(st.one_of(st.text(max_size=120), st.text(alphabet='{}[]"\':,0123456789 answerThinkg\\\n', max_size=80)))
@example('{"answer": [1e400]}')
@example("{'answer': {1, 2}}")
@example('{"answer": ' + "[" * 300 + "]" * 300 + "}")
@example('{"answer": ' + "[" * 100_000 + "]" * 100_000 + "}")
def test_any_reply_parses_or_raises_selection_parse_error(reply: str) -> None:
    try:
        selection = parse_selection(reply, valid_ids={"1", "2"})
    except SelectionParseError as exc:
        assert len(str(exc)) < 300
        return
    assert all(isinstance(i, str) and i for i in selection.ids + selection.invalid_ids)
    assert len(selection.ids) <= 5
