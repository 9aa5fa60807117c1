"""The sentences the extractive reader may cite are whole sentences of the book, never cut by its reading window.

The reader reads a window around each retrieved passage and splits it into sentences; the window's edges fall
wherever the arithmetic puts them. A Don Quijote answer once cited "achiller-, solo vuestra merced lleva la
palma ..." because the window began inside "bachiller". Checked on that exact paragraph, and on real chapters
of the shared Don Quijote: every candidate of a handful of questions is a sentence of its whole paragraph, so
it starts and ends at a word boundary.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import shared_path

from chapterverse.answering.extractive import read_evidence
from chapterverse.answering.question import as_question
from chapterverse.answering.sentences import Candidate, gather_candidates
from chapterverse.chunking import sentence_spans
from chapterverse import Hit, Library
from chapterverse.positions import paragraph_spans

SANSON = (
    "-Una de las cosas -dijo a esta sazón don Quijote- que más debe de dar contento a un hombre virtuoso y "
    "eminente es verse, viviendo, andar con buen nombre por las lenguas de las gentes, impreso y en estampa. Dije "
    "con buen nombre porque, siendo al contrario, ninguna muerte se le igualará.\n\n"
    "-Si por buena fama y si por buen nombre va -dijo el bachiller-, solo vuestra merced lleva la palma a todos "
    "los caballeros andantes; porque el moro en su lengua y el cristiano en la suya tuvieron cuidado de pintarnos "
    "muy al vivo la gallardía de vuestra merced, el ánimo grande en acometer los peligros, la paciencia en las "
    "adversidades y el sufrimiento, así en las desgracias como en las heridas, la honestidad y continencia en los "
    "amores tan platónicos de vuestra merced y de mi señora doña Dulcinea del Toboso.\n\n"
    "-Nunca -dijo a este punto Sancho Panza- he oído llamar con don a mi señora Dulcinea, sino solamente la "
    "señora Dulcinea del Toboso, y ya en esto anda errada la historia.\n"
)
"""Don Quijote II, 3, as the shared book has it."""
CHAPTERS = ["02-Segunda_Parte/03-Capítulo_03.md", "01-Primera_Parte/01-Capítulo_1.md",
            "01-Primera_Parte/08-Capítulo_8.md"]
QUESTIONS = ["¿Quién es Dulcinea del Toboso?", "¿Quién es el bachiller Sansón Carrasco?",
             "¿Cómo se llama el caballo de don Quijote?", "¿Qué pasó con los molinos de viento?",
             "¿Dónde vivía don Quijote?", "¿Por qué lloraba Sancho?"]
LANGS = ["spanish"]
_WORD = re.compile(r"\w")


def test_a_passage_that_starts_mid_sentence_yields_the_whole_sentence(tmp_path: Path) -> None:
    """The passage starts 400 code points after the "b" of "bachiller", where the old window began."""
    (tmp_path / "sanson.md").write_text(SANSON, encoding="utf-8")
    library = Library(tmp_path / "home")
    library.ingest([tmp_path / "sanson.md"])
    found = library.search("Dulcinea del Toboso", k=1)[0]
    text = library.store.file(found.chunk.file_id).text
    sentence_start = text.index("-Si por buena fama")
    sentence_end = text.index("del Toboso.") + len("del Toboso.")
    start = text.index("bachiller") + 1 + 400
    passage = replace(found, chunk=replace(found.chunk, start=start, end=sentence_end, text=text[start:sentence_end]))

    candidates = gather_candidates(library, [passage], as_question("¿Quién es Dulcinea del Toboso?", LANGS), LANGS)

    assert [c.text for c in candidates] == [text[sentence_start:sentence_end]]
    assert (candidates[0].span.start, candidates[0].span.end) == (sentence_start, sentence_end)


@pytest.fixture(scope="module")
def chapters(tmp_path_factory: pytest.TempPathFactory) -> tuple[Library, list[int]]:
    book = shared_path("books", "text", "don-quijote-es")
    library = Library(tmp_path_factory.mktemp("quijote"))
    results = library.ingest([book / chapter for chapter in CHAPTERS])
    return library, [r.document.id for r in results]


def test_every_candidate_of_real_chapters_is_a_whole_sentence(chapters: tuple[Library, list[int]]) -> None:
    library, doc_ids = chapters
    candidates = [c for q in QUESTIONS for c in read_evidence(library, q, doc_ids=doc_ids).candidates]
    assert len(candidates) > 50, "the questions give the check something to look at"
    cut = [c.text for c in candidates if not _whole_sentence(library, c)]
    assert not cut, cut


def _whole_sentence(library: Library, candidate: Candidate) -> bool:
    """Whether the candidate starts and ends at word boundaries and is a sentence of its whole paragraph."""
    text = library.store.file(candidate.span.file).text
    start, end = candidate.span.start, candidate.span.end
    paragraph = next(p for p in paragraph_spans(text) if p[0] <= start < p[1])
    return (not _inside_word(text, start) and not _inside_word(text, end)
            and (start, end) in sentence_spans(text, *paragraph))


def _inside_word(text: str, i: int) -> bool:
    """Whether a cut before ``text[i]`` splits a word."""
    return 0 < i < len(text) and bool(_WORD.match(text, i - 1)) and bool(_WORD.match(text, i))
