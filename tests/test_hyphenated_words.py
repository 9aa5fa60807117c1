"""A word a book hyphenates and a question writes joined, or the other way round, still matches (issue 27: "Who
founded the Redheaded League?" asked of Conan Doyle, who writes "Red-headed League", found the wrong passage):
in a real SQLite library, by search and by ask, and in a library whose terms were written before the analyzer
knew compounds, once it is opened again."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import pytest
from hashembed import HashingEmbedder
from pgfixture import pg_schema_url, pg_url  # noqa: F401  (fixtures, found by name)

import chapterverse
from chapterverse import Library

BOOK = """\
# The League

Mr. Jabez Wilson answered an advertisement of the Red-headed League, founded by the American millionaire \
Ezekiah Hopkins, which paid four pounds a week to red-headed men for purely nominal services.

The League of Nations was founded after the war, and its delegates met in Geneva to argue about the \
borders of the new states until late in the evening.

A chess league was founded in the spring by the members of the club, who met every Tuesday in the back \
room of a bookshop near the station.

The fog lay on the river, and a redheaded boy sold newspapers by the bridge, shouting the news of the \
morning to the clerks who hurried past him.

Nobody in the village owned a clock, so the baker rang his bell at six, and the whole street woke to the \
smell of bread.
"""

JOINED = """\
# Letters

The mail coach left the inn at dawn, carrying letters, parcels and two sleepy passengers along the muddy \
road to the city, where the postmaster waited for it with his ledger open.

The knight's chain mail rusted in the rain on the long march home, and his squire spent the whole evening \
scrubbing every ring of it with sand and oil by the fire.

Maria wrote the email to her lawyer on Friday, after she had read the contract three times and marked every \
clause she did not understand with a pencil.

Nobody in the village owned a clock, so the baker rang his bell at six, and the whole street woke to the \
smell of bread.
"""
"""A book that writes "email" joined, where the question's "e-mail" also says "mail": a word other passages hold."""


@pytest.fixture()
def library(tmp_path: Path) -> Library:
    (tmp_path / "league.md").write_text(BOOK, encoding="utf-8")
    library = Library(tmp_path / "lib", embedder=HashingEmbedder(), chunk_size=300, chunk_overlap=0)
    library.ingest([tmp_path / "league.md"])
    return library


def _texts(library: Library, ids: list[int]) -> list[str]:
    chunks = library.store.chunks_by_ids(ids)
    return [chunks[i].text for i in ids]


def test_the_joined_spelling_finds_the_hyphenated_one(library: Library) -> None:
    found = _texts(library, [cid for cid, _ in library.retriever.lexical("Redheaded", k=5)])
    assert found and "Red-headed League" in found[0]
    assert "Ezekiah Hopkins" in library.search("Who founded the Redheaded League?", k=1)[0].text
    answer = chapterverse.ask(library, "Who founded the Redheaded League?")
    assert answer.citations and "Ezekiah Hopkins" in answer.citations[0].text
    library.close()


def test_the_hyphenated_spelling_finds_the_joined_one(tmp_path: Path) -> None:
    (tmp_path / "letters.md").write_text(JOINED, encoding="utf-8")
    library = Library(tmp_path / "lib", embedder=HashingEmbedder(), chunk_size=300, chunk_overlap=0)
    library.ingest([tmp_path / "letters.md"])
    found = _texts(library, [cid for cid, _ in library.retriever.lexical("e-mail", k=5)])
    assert found and "the email to her lawyer" in found[0]
    assert "the email to her lawyer" in library.search("Who got the e-mail?", k=1)[0].text
    for question in ("Who got the e-mail?", "When did Maria write the e-mail?"):
        # the reader reads the book's "email" as the whole of the question's "e-mail", not as a missing "mail"
        answer = chapterverse.ask(library, question)
        assert answer.state == "answered", question
        assert answer.citations and "the email to her lawyer" in answer.citations[0].text, question
    library.close()


@pytest.mark.parametrize("kind", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_a_library_indexed_before_compounds_is_analysed_again_when_opened(
        kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> None:
    """A library written by the analyzer before compounds (its stored terms, and the lexical index beside a SQLite
    file, lack "redhead") finds the hyphenated word once opened by this version: its store migrates the terms, and
    the lexical index of the old format is rebuilt from them."""
    from chapterverse import analysis
    from chapterverse.index import lexical
    from chapterverse.store import open_store

    location = str(tmp_path / "lib" / "library.sqlite3") if kind == "sqlite" else request.getfixturevalue(
        "pg_schema_url")
    (tmp_path / "league.md").write_text(BOOK, encoding="utf-8")
    with monkeypatch.context() as old:
        old.setattr(analysis, "hyphenated_words", lambda text: [])
        old.setattr(lexical, "FORMAT", 1)
        before = Library(tmp_path / "lib", embedder=HashingEmbedder(), chunk_size=300, chunk_overlap=0,
                         store=open_store(location))
        before.ingest([tmp_path / "league.md"])
        old_found = _texts(before, [cid for cid, _ in before.retriever.lexical("Redheaded", k=5)])
        assert not any("Red-headed" in text for text in old_found)  # the old library, as its users saw it
        before.close()
    _forget_the_last_migration(location)

    after = Library(tmp_path / "lib", embedder=HashingEmbedder(), store=open_store(location))
    found = _texts(after, [cid for cid, _ in after.retriever.lexical("Redheaded", k=5)])
    assert found and "Red-headed League" in found[0]
    assert after.store.lexical_search(["redhead"], k=5)  # the store's own full-text index has the new terms too
    assert after.store.integrity_problems() == []
    after.close()


def _forget_the_last_migration(location: str) -> None:
    """The library's schema as it was before the migration that analyses terms again."""
    if location.endswith(".sqlite3"):
        with closing(sqlite3.connect(location)) as db:
            db.execute("PRAGMA user_version=4")
        return
    import psycopg

    with psycopg.connect(location) as conn:
        conn.execute("DELETE FROM schema_migrations WHERE version = 2")
