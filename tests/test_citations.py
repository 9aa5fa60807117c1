"""Citation verification: tags, tidying, unsupported sentences, quotes, streaming, and the tag parser."""

from __future__ import annotations

import re

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from chapterverse import ResolvedSpan, Span, TagError
from chapterverse.citations import (
    MAX_TAG_LENGTH,
    CitationForms,
    DroppedTag,
    Evidence,
    StreamingTagFilter,
    strip_tags,
    verify_answer,
)
from chapterverse.positions import TAG_PATTERN, find_tags, parse_tag

MOBY = (
    "Call me Ishmael. Some years ago—never mind how long precisely—having little or no money in my purse, "
    "and nothing particular to interest me on shore, I thought I would sail about a little and see the watery "
    "part of the world."
)
QUIJOTE = (
    "En un lugar de la Mancha, de cuyo nombre no quiero acordarme, no ha mucho tiempo que vivía un hidalgo "
    "de los de lanza en astillero, adarga antigua, rocín flaco y galgo corredor."
)
DANTE = (
    "Nel mezzo del cammin di nostra vita mi ritrovai per una selva oscura, ché la diritta via era smarrita."
)
LONG = " ".join(f"Paragraph {n}: the whale number {n * 7} swam {n % 5} leagues past the ship." for n in range(300))
FILES = {1: ("Moby-Dick", MOBY), 2: ("Don Quijote", QUIJOTE), 3: ("La Divina Commedia", DANTE), 4: ("Log", LONG)}


def span_of(file: int, phrase: str) -> Span:
    """The span of ``phrase`` in one of the test files (so tests never hard-code offsets)."""
    start = FILES[file][1].index(phrase)
    return Span(file, start, start + len(phrase))


def resolve(span: Span) -> ResolvedSpan | None:
    if span.file not in FILES or span.end > len(FILES[span.file][1]):
        return None
    title, text = FILES[span.file]
    return ResolvedSpan(tag=span.key, doc_id=span.file * 10, doc_title=title, file=span.file, start=span.start,
                        end=span.end, text=text[span.start : span.end], toc_path=["Ch. 1"], file_title=title,
                        label="", source="")


ISHMAEL = span_of(1, "Call me Ishmael.")
PURSE = span_of(1, "having little or no money in my purse")
SHORE = span_of(1, "nothing particular to interest me on shore")
MANCHA = span_of(2, "En un lugar de la Mancha, de cuyo nombre no quiero acordarme")
SELVA = span_of(3, "mi ritrovai per una selva oscura")
SHOWN = (ISHMAEL, PURSE, SHORE, MANCHA, SELVA)
LOG = Span(4, 0, len(LONG))
SHOWN = (*SHOWN, LOG)
OLD_TURN = span_of(1, "sail about a little")
OUT_OF_RANGE = Span(1, 10, 10_000)


def make_evidence(*spans: Span) -> Evidence:
    evidence = Evidence(resolve)
    evidence.add_text("Search results:\n" + "\n".join(f"{s.tag} {resolve(s) and 'text'}" for s in spans))
    return evidence


@pytest.fixture
def evidence() -> Evidence:
    return make_evidence(*SHOWN, OUT_OF_RANGE)


# --- Evidence -------------------------------------------------------------------------------------


def test_evidence_records_only_well_formed_tags_verbatim() -> None:
    ev = Evidence(resolve)
    ev.add_text("see [f1-0-16] and [f1-5-3] and [F1-2-3] and f1-17-40 and [f1-20]")
    assert Span(1, 0, 16) in ev
    assert Span(1, 5, 3) not in ev and Span(1, 17, 40) not in ev
    ev.add_text("later [f2-0-5]")
    assert Span(2, 0, 5) in ev and Span(1, 0, 16) in ev


def test_evidence_asks_the_resolver_once_per_span() -> None:
    calls: list[Span] = []

    def counting(span: Span) -> ResolvedSpan | None:
        calls.append(span)
        return resolve(span)

    ev = Evidence(counting)
    ev.add_text(ISHMAEL.tag)
    verify_answer(f"One {ISHMAEL.tag}. Two {ISHMAEL.tag}. Three {ISHMAEL.tag} {PURSE.tag}.", ev)
    assert calls == [ISHMAEL]


# --- tags ------------------------------------------------------------------------------------------


def test_kept_tags_are_numbered_by_first_appearance_and_deduplicated(evidence: Evidence) -> None:
    answer = f"Ishmael is poor {PURSE.tag}. He introduces himself {ISHMAEL.tag} and is poor {PURSE.tag}."
    result = verify_answer(answer, evidence)
    assert result.text == answer
    assert [(c.n, c.tag, c.span) for c in result.citations] == [(1, PURSE.key, PURSE), (2, ISHMAEL.key, ISHMAEL)]
    first = result.citations[0]
    assert (first.text, first.doc_id, first.doc_title, first.toc_path) == (
        "having little or no money in my purse", 10, "Moby-Dick", ["Ch. 1"])
    assert result.dropped_tags == [] and result.found


def test_fabricated_and_previous_turn_tags_are_dropped(evidence: Evidence) -> None:
    answer = f"He sails {OLD_TURN.tag}. He owns a ship [f9-1-2]. He is poor {PURSE.tag}."
    result = verify_answer(answer, evidence)
    assert result.text == f"He sails. He owns a ship. He is poor {PURSE.tag}."
    assert result.dropped_tags == [
        DroppedTag(OLD_TURN.tag, "not_in_evidence"), DroppedTag("[f9-1-2]", "not_in_evidence")]
    assert [c.span for c in result.citations] == [PURSE]


@pytest.mark.parametrize("bad", ["[f1-293]", "[f1-2-]", "[F1-2-3]", "[f1-5-3]", "[f1-5-5]", "[f1 - 2 - 3]",
                                 "[f1-2-3-4]", "[f12:3]", "[f1-0-16; f1-]", "[f1–0–16]"])
def test_malformed_tags_are_removed_and_reported(evidence: Evidence, bad: str) -> None:
    result = verify_answer(f"Ishmael is poor {bad}, very poor {PURSE.tag}.", evidence)
    assert result.text == f"Ishmael is poor, very poor {PURSE.tag}."
    assert result.dropped_tags == [DroppedTag(bad, "malformed")]


def test_tag_shown_but_unresolvable_is_out_of_range(evidence: Evidence) -> None:
    result = verify_answer(f"Something {OUT_OF_RANGE.tag}.", evidence)
    assert result.text == "Something."
    assert result.dropped_tags == [DroppedTag(OUT_OF_RANGE.tag, "out_of_range")]


def test_a_group_of_tags_is_judged_tag_by_tag(evidence: Evidence) -> None:
    result = verify_answer(f"Poor and bored [{PURSE.key}, f9-1-2; {SHORE.key}].", evidence)
    assert result.text == f"Poor and bored {PURSE.tag}{SHORE.tag}."
    assert result.dropped_tags == [DroppedTag("[f9-1-2]", "not_in_evidence")]


def test_kept_tags_are_written_canonically(evidence: Evidence) -> None:
    padded = f"[f01-{ISHMAEL.start}-{ISHMAEL.end:03d}]"
    assert verify_answer(f"He is Ishmael {padded}.", evidence).text == f"He is Ishmael {ISHMAEL.tag}."


@pytest.mark.parametrize(
    ("raw", "clean"),
    [
        ("x [f1-2-3].", "x."),
        ("x [f1-2-3] y", "x y"),
        ("x [f1-2-3]y", "x y"),
        ("x[f1-2-3] y", "x y"),
        ("x [f1-2-3], y [F1-2]; z [f1-2-3]!", "x, y; z!"),
        ("x [f1-2-3] [f4-5-6].", "x."),
        ("x [f1-2-3][f4-5-6] y", "x y"),
        ("x [f1-2-3], [f4-5-6].", "x."),
        ("x [f1-2-3], [f4-5-6]; [f7-8-9] y", "x y"),
        ("x [f1-2-3], [not a tag", "x, [not a tag"),
        ("[f1-2-3] Start", "Start"),
        ("a.\n  [f1-2-3]  b", "a.\nb"),
        ("end [f1-2-3]\n", "end\n"),
        ("«cita» [f1-2-3] y", "«cita» y"),
        ("see [1] and [see] and [f] and [fa1-2-3] and [f1 is x]",) * 2,
        ("unclosed [f1-2-3 here", "unclosed [f1-2-3 here"),
        ("", ""),
    ],
)
def test_strip_tags_tidies_spaces(raw: str, clean: str) -> None:
    assert strip_tags(raw) == clean


# --- unsupported sentences --------------------------------------------------------------------------


def test_uncited_claims_are_reported(evidence: Evidence) -> None:
    answer = (
        f"Ishmael has little or no money {PURSE.tag}. He later becomes the captain of a whaling ship. "
        "Who is Ishmael? The book does not say where Ishmael was born. Short claim here. "
        f"Nothing in particular interests Mr. Ishmael on shore. {SHORE.tag}\n"
        "- Queequeg is a harpooner from a distant island.\n"
        "Here is what the passages say about his reasons:\n"
        "I hope this helps you understand the opening chapter.\n"
        "2. Starbuck is the first mate of the Pequod, a quiet man.\n"
        "## Who else sails on the Pequod"
    )
    result = verify_answer(answer, evidence)
    assert result.unsupported_sentences == [
        "He later becomes the captain of a whaling ship.",
        "Queequeg is a harpooner from a distant island.",
        "Starbuck is the first mate of the Pequod, a quiet man.",
    ]
    assert all(sentence in result.text for sentence in result.unsupported_sentences)


def test_spanish_and_italian_answers(evidence: Evidence) -> None:
    answer = (
        f"¿Dónde vive el hidalgo? Vive en un lugar de la Mancha cuyo nombre no quiere recordar {MANCHA.tag}. "
        "El narrador no menciona el nombre exacto del pueblo. El hidalgo tiene un caballo muy flaco y viejo. "
        f"Dante dice que «mi ritrovai per una selva oscura» {SELVA.tag}. "
        "Il poeta incontra Virgilio subito dopo nella selva oscura. Non si dice quanti anni abbia Dante. "
        "Spero che questo ti sia utile per lo studio."
    )
    result = verify_answer(answer, evidence)
    assert result.unsupported_sentences == [
        "El hidalgo tiene un caballo muy flaco y viejo.",
        "Il poeta incontra Virgilio subito dopo nella selva oscura.",
    ]
    assert result.unverified_quotes == [] and result.found


def test_a_citation_right_after_the_period_supports_the_sentence(evidence: Evidence) -> None:
    answer = f"He has little or no money in his purse. {PURSE.tag} He wants to see the watery part of the world."
    assert verify_answer(answer, evidence).unsupported_sentences == [
        "He wants to see the watery part of the world."]


def test_initials_and_numbers_do_not_end_sentences(evidence: Evidence) -> None:
    answer = "The novel by H. Melville appeared in 1851 and cost about 1.5 dollars at the time."
    assert verify_answer(answer, evidence).unsupported_sentences == [answer]


# --- quotes --------------------------------------------------------------------------------------


def test_quote_in_curly_quotes_and_other_case_is_verified(evidence: Evidence) -> None:
    answer = f"He says he had “Little or No money in my PURSE” {PURSE.tag}."
    assert verify_answer(answer, evidence).unverified_quotes == []


def test_quote_not_in_the_cited_text_is_reported(evidence: Evidence) -> None:
    answer = f'He says "I have always loved the open sea" {PURSE.tag}, and "call me Ishmael" {ISHMAEL.tag}.'
    assert verify_answer(answer, evidence).unverified_quotes == ["I have always loved the open sea"]


def test_quote_without_any_kept_citation_is_unverified(evidence: Evidence) -> None:
    result = verify_answer('He says "call me Ishmael" [f9-0-10].', evidence)
    assert result.unverified_quotes == ["call me Ishmael"]


def test_quote_matching_tolerates_accents_dashes_ellipsis_and_a_typo(evidence: Evidence) -> None:
    answer = (
        f"«En un lugar de la mancha … no quiero acordarme» {MANCHA.tag}; "
        f"'mi ritrovai per una selva oscurra' {SELVA.tag}; “en un lugar de la Mancha, de cuyo nombre” {MANCHA.tag}."
    )
    result = verify_answer(answer.replace("lugar", "lúgar", 1), evidence)
    assert result.unverified_quotes == []


def test_quotes_in_a_long_passage() -> None:
    evidence = make_evidence(LOG)
    near = "the whale number 1057 swam 1 leagues past the shp. Paragraph 152: the whale"
    changed = "the whale number 1057 swam 9 miles past the boat. Paragraph 152: the whale"
    answer = f'The log says "{near}" and "{changed}" {LOG.tag}.'
    assert verify_answer(answer, evidence).unverified_quotes == [changed]


def test_short_quotes_apostrophes_and_titles_are_not_checked(evidence: Evidence) -> None:
    answer = f'In "Moby-Dick" the narrator\'s "purse" is empty, and he doesn\'t say it\'s "a sad thing" {PURSE.tag}.'
    result = verify_answer(answer, evidence)
    assert result.unverified_quotes == ["a sad thing"]
    assert verify_answer(f'"La Divina Commedia" si apre in una selva oscura {SELVA.tag}.', evidence).unverified_quotes == []


# --- found -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "answer",
    [
        "The book does not say where Ishmael was born.",
        "The passages don't mention his age.",
        "I couldn't find that in the library.",
        "That detail is not found in the source.",
        "El libro no dice dónde nació.",
        "El texto no menciona su edad.",
        "No encuentro esa información en el libro.",
        "Il libro non menziona la sua età.",
        "Non c'è alcuna informazione su questo.",
        "Nel testo non viene specificato.",
        "",
    ],
)
def test_not_in_source_answers_are_not_found(evidence: Evidence, answer: str) -> None:
    result = verify_answer(answer, evidence)
    assert not result.found
    assert result.unsupported_sentences == []


def test_found_when_cited_or_when_claiming(evidence: Evidence) -> None:
    assert verify_answer(f"He has little or no money in his purse {PURSE.tag}, but the book does not say his age.",
                         evidence).found
    assert verify_answer("Ishmael is a sailor who goes to sea.", evidence).found
    assert not verify_answer("The book does not say [f9-9-10].", evidence).found


# --- streaming ----------------------------------------------------------------------------------------


def stream(filt: StreamingTagFilter, pieces: list[str]) -> tuple[str, list[str]]:
    outputs = [filt.feed(p) for p in pieces]
    return "".join(outputs) + filt.flush(), outputs


def test_streaming_releases_a_non_tag_bracket_promptly(evidence: Evidence) -> None:
    filt = StreamingTagFilter(evidence)
    assert filt.feed("see [") == "see"
    assert filt.feed("1") == " [1"
    assert filt.feed("] and [f") == "] and"
    assert filt.feed("o") == " [fo"
    assert filt.feed("o [f1-") == "o"
    assert filt.feed("x") == " [f1-x"
    assert filt.flush() == ""


def test_streaming_keeps_verified_and_drops_others(evidence: Evidence) -> None:
    filt = StreamingTagFilter(evidence)
    text = f"Poor {PURSE.tag}. Rich [f9-1-2]."
    out, pieces = stream(filt, list(text))
    assert out == f"Poor {PURSE.tag}. Rich."
    assert all("[" not in p or p.endswith("]") for p in pieces)
    assert filt.kept == [PURSE] and filt.dropped == [DroppedTag("[f9-1-2]", "not_in_evidence")]


def test_streaming_strip_mode_records_but_never_emits_tags(evidence: Evidence) -> None:
    filt = StreamingTagFilter(evidence, mode="strip")
    out, _ = stream(filt, [f"Poor {PURSE.tag[:5]}", f"{PURSE.tag[5:]}. Rich [f9-1", "-2]."])
    assert out == "Poor. Rich."
    assert filt.kept == [PURSE] and [d.tag for d in filt.dropped] == ["[f9-1-2]"]


def test_streaming_holds_at_most_a_tag_length(evidence: Evidence) -> None:
    for long in ("[F1 " + "2" * 200, "[f1-2-3" + " " * 100 + "x"):
        filt = StreamingTagFilter(evidence)
        out = filt.feed(long)
        assert len(long) - len(out) < MAX_TAG_LENGTH
        assert out + filt.flush() == long


def test_an_absurdly_long_well_formed_start_is_dropped_not_released(evidence: Evidence) -> None:
    forged = "[f1-" + "0" * 80 + f"-{ISHMAEL.end}]"
    filt = StreamingTagFilter(evidence)
    out = filt.feed(f"Look {forged}")
    assert len(out) > len(forged) - MAX_TAG_LENGTH
    out += filt.flush()
    assert find_tags(out) == [] and out.startswith("Look 0000")
    assert [d.reason for d in filt.dropped] == ["malformed"]


@pytest.mark.parametrize(
    ("raw", "clean"),
    [
        ("x [f1-0-1[f9-1-2]6] y", "x [f1-0-1 6] y"),
        ("x [f1-0-1 [f9-1-2]]", "x [f1-0-1 ]"),
        ("x [f1-0-1\t[f9-1-2]]", "x [f1-0-1 ]"),
        ("x [f1-0-1[f9-1-2][f9-1-2]6]", "x [f1-0-1 6]"),
        ("x [[f9-1-2]f1-0-16]", "x [ f1-0-16]"),
        ("x [f[f9-1-2]1-0-16]", "x [f 1-0-16]"),
        ("x [f1-0-1[f9-1-2]", "x [f1-0-1 "),
    ],
)
def test_dropping_a_tag_never_glues_a_new_one(evidence: Evidence, raw: str, clean: str) -> None:
    result = verify_answer(raw, evidence)
    assert result.text == clean == strip_tags(raw)
    assert find_tags(result.text) == [] and result.citations == []


def test_streaming_rejects_unknown_mode(evidence: Evidence) -> None:
    with pytest.raises(ValueError, match="mode"):
        StreamingTagFilter(evidence, mode="drop")  # type: ignore[arg-type]


TOKENS = [PURSE.tag, ISHMAEL.tag, OLD_TURN.tag, OUT_OF_RANGE.tag, "[f9-1-2]", "[f1-293]", "[F1-2-3]", "[f1-5-3]",
          f"[{PURSE.key}, {SHORE.key}]", "[1]", "[see]", "[f", "[f1-", "[f1-0-1", "6]", f"-{ISHMAEL.end}]", "0" * 30,
          " ", "  ", "\t", "\n", ".", ",", "!", "?", "word", "Él", "«", "»", "“", "”", '"']
texts = st.lists(st.one_of(st.sampled_from(TOKENS), st.text(alphabet="[]fF1-2 ;,.\n\tab", max_size=6)),
                 max_size=25).map("".join)


def split(text: str, cuts: list[int]) -> list[str]:
    points = sorted({0, len(text), *(c % (len(text) + 1) for c in cuts)})
    return [text[a:b] for a, b in zip(points, points[1:])]


HALF_TAG = re.compile(r"\[(?:f(?:\d+(?:-\d+)?(?:-\d*)?)?)?$")


@settings(max_examples=400, deadline=None)
@given(text=texts, cuts=st.lists(st.integers(min_value=0, max_value=10_000), max_size=12),
       mode=st.sampled_from(["keep", "strip"]))
@example(text="x [f1-2-3] [f1-2-3]\n", cuts=[3], mode="keep")
@example(text="[f1-2-3]\t\t[f1-2-3] a", cuts=[1, 9], mode="strip")
@example(text="a [f[f1-2-3]", cuts=[4], mode="keep")
def test_streaming_equals_batch_filter_for_any_split(text: str, cuts: list[int], mode: str) -> None:
    evidence = make_evidence(*SHOWN, OUT_OF_RANGE)
    filt = StreamingTagFilter(evidence, mode="keep" if mode == "keep" else "strip")
    out, pieces = stream(filt, split(text, cuts))
    whole = StreamingTagFilter(make_evidence(*SHOWN, OUT_OF_RANGE), mode="keep")
    batch = whole.feed(text) + whole.flush()
    assert out == (batch if mode == "keep" else strip_tags(text))
    assert filt.kept == whole.kept and filt.dropped == whole.dropped
    verified = verify_answer(text, make_evidence(*SHOWN, OUT_OF_RANGE))  # the same, less what does not support
    assert verified.dropped_tags[:len(filt.dropped)] == filt.dropped
    assert {d.reason for d in verified.dropped_tags[len(filt.dropped):]} <= {"does_not_support"}
    assert [c.span for c in verified.citations] == [s for s in dict.fromkeys(filt.kept) if s in find_tags(verified.text)]
    assert set(find_tags(out)) <= (set(filt.kept) if mode == "keep" else set())
    shown = ""
    for piece in pieces:
        shown += piece
        half = HALF_TAG.search(shown)
        assert half is None or not TAG_PATTERN.match(out, half.start()), f"half a tag shown: {shown!r}"


FORMS = CitationForms({1: ISHMAEL, 2: PURSE, 3: SHORE}, frozenset(SHOWN))
FORM_TOKENS = ["[1]", "[2, 3]", "[3][1]", "[7]", "`", "```\n", f"({PURSE.key})", f"【{SHORE.key}】", "(f9-1-2)",
               f"[source: {ISHMAEL.key}]", f"{PURSE.key}", "f9-1-2", "(see", "[note]", "f", "for", "]"]
form_texts = st.lists(st.one_of(st.sampled_from(TOKENS + FORM_TOKENS), st.text(alphabet="[]()【】`f1-2 ,.\n", max_size=6)),
                      max_size=25).map("".join)


@settings(max_examples=400, deadline=None)
@given(text=form_texts, cuts=st.lists(st.integers(min_value=0, max_value=10_000), max_size=12),
       mode=st.sampled_from(["keep", "strip"]))
@example(text=f"a ({PURSE.key}) [2] `[1]` [1]", cuts=[3, 5, 17], mode="strip")
def test_other_citation_forms_read_the_same_for_any_split(text: str, cuts: list[int], mode: str) -> None:
    """With this turn's forms a streamed reply still reads exactly as the whole one, cites only the evidence, and
    in strip mode leaves no citation it read in the text."""
    def run(pieces: list[str]) -> tuple[str, StreamingTagFilter]:
        filt = StreamingTagFilter(make_evidence(*SHOWN, OUT_OF_RANGE), mode="keep" if mode == "keep" else "strip",
                                  forms=FORMS)
        return "".join(filt.feed(p) for p in pieces) + filt.flush(), filt

    out, streamed = run(split(text, cuts))
    whole, batch = run([text])
    assert out == whole and streamed.kept == batch.kept and streamed.dropped == batch.dropped
    assert set(streamed.kept) <= set(SHOWN)
    assert set(find_tags(out)) <= (set(streamed.kept) if mode == "keep" else set())


def test_other_citation_forms_stand_for_this_turns_items_only() -> None:
    """``[n]`` is read only in a citation's place and in range, a tag's other forms only for the evidence, and
    nothing inside code; in keep mode each becomes the canonical tag."""
    cases = {
        "Poor [2]. Rich [2, 3].": ("Poor. Rich.", [PURSE, PURSE, SHORE]),
        f"Poor ({PURSE.key}), sailor 【{ISHMAEL.key}】 [source: {SHORE.key}].": ("Poor, sailor.",
                                                                             [PURSE, ISHMAEL, SHORE]),
        f"Poor {PURSE.key}.": ("Poor.", [PURSE]),
        f"Poor {PURSE.key}, {SHORE.key}. Rich [2], [3]; then": ("Poor. Rich; then", [PURSE, SHORE, PURSE, SHORE]),
        "[1] Poor [7]. `a[1]` and [text][1] f9-1-2 (f9-1-2)": ("[1] Poor [7]. `a[1]` and [text][1] f9-1-2 (f9-1-2)",
                                                               []),
        "```\nx[1]\n```\nPoor [2].": ("```\nx[1]\n```\nPoor.", [PURSE]),
        "for fun f1-2-3x, [2024] (see) [note]": ("for fun f1-2-3x, [2024] (see) [note]", []),
    }
    for raw, (spoken, kept) in cases.items():
        filt = StreamingTagFilter(make_evidence(*SHOWN), mode="strip", forms=FORMS)
        assert (filt.feed(raw) + filt.flush(), filt.kept) == (spoken, kept), raw
    keep = StreamingTagFilter(make_evidence(*SHOWN), mode="keep", forms=FORMS)
    assert keep.feed(f"Poor [2] ({SHORE.key}).") + keep.flush() == f"Poor {PURSE.tag} {SHORE.tag}."


@settings(max_examples=300, deadline=None)
@given(text=texts)
def test_verify_answer_never_leaves_a_dropped_tag(text: str) -> None:
    result = verify_answer(text, make_evidence(*SHOWN, OUT_OF_RANGE))
    assert set(find_tags(result.text)) <= {c.span for c in result.citations}
    assert all(sentence in result.text for sentence in result.unsupported_sentences)


# --- the tag parser in positions.py -----------------------------------------------------------------


@settings(max_examples=500)
@given(st.one_of(st.text(max_size=40), texts))
def test_parse_tag_raises_only_tag_error(text: str) -> None:
    try:
        span = parse_tag(text)
    except TagError:
        return
    assert span.end > span.start >= 0
    assert parse_tag(span.tag) == span


@given(st.one_of(st.text(max_size=60), texts))
def test_find_tags_never_raises_and_round_trips(text: str) -> None:
    for span in find_tags(text):
        assert parse_tag(span.tag) == span == parse_tag(span.key)


@given(st.integers(min_value=0, max_value=10**12), st.integers(min_value=0, max_value=10**12),
       st.integers(min_value=1, max_value=10**6))
def test_span_tag_round_trip(file: int, start: int, length: int) -> None:
    span = Span(file, start, start + length)
    assert parse_tag(span.tag) == span == parse_tag(span.key)
    assert find_tags(f"x{span.tag}y{span.tag}") == [span, span]


def test_regression_huge_numbers_raise_tag_error() -> None:
    with pytest.raises(TagError):
        parse_tag("[f" + "1" * 5000 + "-1-2]")


def test_regression_find_tags_survives_huge_numbers() -> None:
    assert find_tags("[f" + "1" * 5000 + "-1-2]") == []
