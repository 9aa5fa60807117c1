"""The persistent BM25 index against the in-memory build it replaced: same scores, bit for bit, after every change."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from chapterverse.index.lexical import FORMAT, LexicalIndex, LexicalSettings, Postings
from chapterverse.store import NewChunk, NewDocument, NewFile, SQLiteStore
from storeutil import DelegatingStore, NoFeedStore

WORDS = [f"w{i:03d}" for i in range(300)] + ["whale", "whaler", "whalebone", "ship", "shipment", "captain"]
QUERIES = [["whale", "ship"], ["w001", "w002", "w250"], ["captain", "w007", "captain"], ["nothing"], ["w299"]]


def add_doc(store: SQLiteStore, rng: np.random.Generator, chunks: int, source: str, *, heading: bool = True) -> int:
    """One document of ``chunks`` chunks of Zipf-distributed words, with heading terms when ``heading``."""
    texts, chunk_rows, at = [], [], 0
    for i in range(chunks):
        words = [WORDS[min(int(r) - 1, len(WORDS) - 1)] for r in rng.zipf(1.3, int(rng.integers(5, 40)))]
        text = " ".join(words)
        title = " ".join(rng.choice(WORDS[-6:], size=int(rng.integers(0, 6)))) if heading else ""
        chunk_rows.append(NewChunk(file_ordinal=0, start=at, end=at + len(text), source=source, chunk_index=i,
                                   terms=text, heading_terms=title))
        texts.append(text)
        at += len(text) + 1
    body = "\n".join(texts)
    doc = NewDocument(source=source, title=source, format="txt", content_hash=source, size_bytes=len(body),
                      language="english", files=[NewFile(body)], toc=[], segments=[], chunks=chunk_rows,
                      vectors=np.ones((chunks, 4), np.float32) / 2)
    return store.add_document(doc)


def reference(rows: list[Any], terms: list[str], prefix: bool, s: LexicalSettings) -> np.ndarray:
    """The in-memory build the persistent index replaced (weighted ``np.bincount`` over every token), as the oracle."""
    n = max(len(rows), 1)
    counts = np.array([len(r[3].split()) for r in rows], np.int64)
    heading_counts = np.array([len(r[4].split()) for r in rows], np.int64)
    body = " ".join(r[3] for r in rows).split()
    heading = " ".join(r[4] for r in rows).split()
    vocabulary = {t: i for i, t in enumerate(dict.fromkeys(body + heading))}
    tokens = np.array([vocabulary[t] for t in body + heading], np.int64)
    prefixes: dict[str, int] = {}
    prefix_of = np.array([prefixes.setdefault(t[:s.prefix], len(prefixes)) for t in vocabulary], np.int64)
    lookup, keys = (prefixes, prefix_of[tokens]) if prefix else (vocabulary, tokens)
    order = np.arange(len(rows))
    token_rows = np.concatenate([np.repeat(order, counts), np.repeat(order, heading_counts)])
    weight = np.concatenate([np.ones(len(body)), np.full(len(heading), s.heading)])
    lengths = (counts + s.heading * heading_counts).astype(np.float64)
    unique, inverse = np.unique(keys * n + token_rows, return_inverse=True)
    tf = np.bincount(inverse, weights=weight, minlength=len(unique))
    term_ids, pair_rows = unique // n, unique % n
    df = np.bincount(term_ids, minlength=len(lookup))
    idf = np.log1p((n - df + 0.5) / (df + 0.5))
    norm = s.k1 * (1 - s.b + s.b * lengths[pair_rows] / max(float(lengths.mean()), 1e-9))
    weights = (idf[term_ids] * tf * (s.k1 + 1) / (tf + norm)).astype(np.float32)
    scores = np.zeros(len(rows), np.float32)
    for t in [lookup[t] for t in dict.fromkeys(terms) if t in lookup]:
        scores[pair_rows[term_ids == t]] += weights[term_ids == t]
    return scores


def assert_matches_fresh_build(index: LexicalIndex, store: SQLiteStore) -> None:
    rows = store.lexical_rows()
    view = index.view()
    np.testing.assert_array_equal(view.ids, [r[0] for r in rows])
    np.testing.assert_array_equal(view.docs, [r[1] for r in rows])
    np.testing.assert_array_equal(view.files, [r[2] for r in rows])
    for terms in QUERIES:
        np.testing.assert_array_equal(view.scores(terms, prefix=False), reference(rows, terms, False, index.settings))
        prefixes = [t[:index.settings.prefix] for t in terms]
        expected = reference(rows, prefixes, True, index.settings)
        np.testing.assert_array_equal(view.scores(prefixes, prefix=True), expected)
    known = {t for r in rows for t in (r[3] + " " + r[4]).split()}
    held = view.term_matches(WORDS + ["nothing"], [], prefix=False).df
    assert [bool(n) for n in held] == [w in known for w in WORDS + ["nothing"]]
    assert_term_matches(view, rows, index.settings)


def assert_term_matches(view: Any, rows: list[Any], s: LexicalSettings) -> None:
    """``term_matches`` against counting each row's tokens: the live rows in a shuffled order, a chunk id the
    index does not hold, and a term nothing holds."""
    ids = [r[0] for r in rows][::-1] + [10**9]
    terms = ["whale", "ship", "w001", "captain", "nothing"]
    stems, prefixes = view.word_matches(terms, [t[:s.prefix] for t in terms], ids)  # both in one pass
    read = Postings(view)  # a search's postings, read by its rankings first
    assert np.array_equal(view.scores(terms, prefix=False, read=read), view.scores(terms, prefix=False))
    again = view.word_matches(terms, [t[:s.prefix] for t in terms], ids, read)
    assert all(np.array_equal(a.tf, b.tf) and np.array_equal(a.df, b.df)
               for a, b in zip(again, (stems, prefixes)))
    for prefix, both in ((False, stems), (True, prefixes)):
        alone = view.term_matches([t[:s.prefix] for t in terms] if prefix else terms, ids, prefix=prefix)
        np.testing.assert_array_equal(both.tf, alone.tf)
        np.testing.assert_array_equal(both.df, alone.df)
    for prefix in (False, True):
        keys = [t[:s.prefix] for t in terms] if prefix else terms
        cut = (lambda t: t[:s.prefix]) if prefix else (lambda t: t)
        expected = np.array([[sum(cut(t) == k for t in r[3].split())
                              + s.heading * sum(cut(t) == k for t in r[4].split()) for k in keys]
                             for r in rows[::-1]] + [[0.0] * len(keys)])
        found = view.term_matches(keys, ids, prefix=prefix)
        np.testing.assert_allclose(found.tf, expected, rtol=1e-6)
        np.testing.assert_array_equal(found.df, (expected[:-1] > 0).sum(axis=0))


@pytest.fixture()
def store(tmp_path: Path) -> SQLiteStore:
    s = SQLiteStore(tmp_path / "library.sqlite3")
    yield s
    s.close()


@pytest.mark.parametrize("heading", [0.5, 0.1])
def test_scores_equal_a_fresh_in_memory_build_across_segments(store: SQLiteStore, heading: float) -> None:
    rng = np.random.default_rng(1)
    for i in range(3):
        add_doc(store, rng, 70, f"d{i}")
    settings = LexicalSettings(heading=heading, segment_rows=64)
    index = LexicalIndex.open(store, settings=settings)
    assert index.stats().last_refresh == "rebuilt" and index.stats().segments == 4
    assert index.directory == store.path.with_name("library.lexical" + ("" if heading == 0.5 else "-h0.1-p5"))
    assert_matches_fresh_build(index, store)
    tf_type = next(index.directory.glob("*.tf.npy"))
    assert np.load(tf_type, mmap_mode="r").dtype == (np.uint16 if heading == 0.5 else np.float64)


def test_reopen_maps_the_files_and_scores_alike(store: SQLiteStore) -> None:
    rng = np.random.default_rng(2)
    add_doc(store, rng, 120, "a")
    first = LexicalIndex.open(store, settings=LexicalSettings(segment_rows=50))
    again = LexicalIndex.open(SQLiteStore(store.path), settings=LexicalSettings(segment_rows=50))
    assert again.stats().last_refresh == "loaded"
    for terms in QUERIES:
        expected = first.view().scores(terms, prefix=False)
        np.testing.assert_array_equal(again.view().scores(terms, prefix=False), expected)
    assert_matches_fresh_build(again, store)


def test_writes_and_removals_are_followed_incrementally(store: SQLiteStore) -> None:
    rng = np.random.default_rng(3)
    first = add_doc(store, rng, 100, "a")
    second = add_doc(store, rng, 60, "b")
    index = LexicalIndex.open(store, settings=LexicalSettings(dead_share=0.5))
    add_doc(store, rng, 30, "c")
    assert_matches_fresh_build(index, store)  # N, the average length and every df moved: no stored number is stale
    assert index.stats().last_refresh == "appended" and index.stats().segments == 2
    store.remove_documents([second])  # 60 of the first segment's 160 rows: masked, not rewritten
    assert_matches_fresh_build(index, store)
    assert index.stats().last_refresh == "appended" and index.stats().rows == 190 and index.stats().live == 130
    store.remove_documents([first])  # the first segment holds only removed rows now: rebuilt without them
    assert_matches_fresh_build(index, store)
    stats = index.stats()
    assert index.stats().last_refresh == "compacted" and stats.rows == stats.live == 30 and stats.segments == 1
    reopened = LexicalIndex.open(store, settings=LexicalSettings(dead_share=0.5))
    assert reopened.stats().last_refresh == "loaded"
    assert_matches_fresh_build(reopened, store)
    assert len({p.name.split(".")[0] for p in index.directory.glob("*.npy")}) == 1, "replaced segments are deleted"


def test_a_removed_document_leaves_the_vocabulary(store: SQLiteStore) -> None:
    rng = np.random.default_rng(4)
    add_doc(store, rng, 20, "a", heading=False)
    index = LexicalIndex.open(store)
    lone = NewChunk(file_ordinal=0, start=0, end=5, source="z", chunk_index=0, terms="zanzibar")
    extra = store.add_document(NewDocument(source="z", title="z", format="txt", content_hash="z", size_bytes=8,
                                           language="english", files=[NewFile("zanzibar")], toc=[], segments=[],
                                           chunks=[lone], vectors=np.ones((1, 4), np.float32) / 2))
    assert index.view().term_matches(["zanzibar"], [], prefix=False).df.tolist() == [1]
    store.remove_documents([extra])
    view = index.view()
    assert view.term_matches(["zanzibar"], [], prefix=False).df.tolist() == [0]
    assert not view.scores(["zanzibar"], prefix=False).any()


def test_many_small_writes_merge_into_full_segments(store: SQLiteStore) -> None:
    rng = np.random.default_rng(5)
    settings = LexicalSettings(segment_rows=40, max_small=3)
    index = LexicalIndex.open(store, settings=settings)
    for i in range(9):
        add_doc(store, rng, 7, f"d{i}")
        index.refresh()
    assert index.stats().segments <= 5 and index.stats().live == 63
    assert_matches_fresh_build(index, store)


def test_two_openers_follow_each_other_through_the_files(store: SQLiteStore) -> None:
    rng = np.random.default_rng(6)
    add_doc(store, rng, 40, "a")
    writer = LexicalIndex.open(store)
    reader = LexicalIndex.open(SQLiteStore(store.path))
    add_doc(store, rng, 40, "b")
    writer.refresh()
    assert writer.stats().last_refresh == "appended"
    reader.refresh()
    assert reader.stats().last_refresh == "loaded" and len(reader.view()) == 80


@pytest.mark.parametrize("damage", ["truncate", "garbage-manifest", "missing-file", "wrong-ids", "other-format"])
def test_half_written_or_mismatched_index_is_detected_and_rebuilt(store: SQLiteStore, damage: str) -> None:
    rng = np.random.default_rng(7)
    add_doc(store, rng, 80, "a")
    directory = LexicalIndex.open(store).directory
    postings = next(directory.glob("*.rows.npy"))
    manifest = directory / "manifest.json"
    if damage == "truncate":  # a crash (or a full disk) mid-write would leave a short file
        postings.write_bytes(postings.read_bytes()[:-100])
    elif damage == "garbage-manifest":
        manifest.write_text('{"format": 1, "segm')
    elif damage == "missing-file":
        postings.unlink()
    elif damage == "wrong-ids":
        np.save(next(directory.glob("*.ids.npy")), np.arange(80, dtype=np.int64))
    else:
        manifest.write_text(manifest.read_text().replace(f'"format": {FORMAT}', '"format": 99'))
    (directory / "s000009.rows.npy.tmp-1").write_bytes(b"half")  # leftover of an interrupted write
    reopened = LexicalIndex.open(store)
    assert reopened.stats().last_refresh == "rebuilt"
    assert_matches_fresh_build(reopened, store)
    assert not list(directory.glob("*.tmp*"))


def test_unwritable_directory_keeps_the_index_in_memory(store: SQLiteStore, tmp_path: Path) -> None:
    add_doc(store, np.random.default_rng(8), 30, "a")
    blocker = tmp_path / "file-not-dir"
    blocker.write_text("x")
    index = LexicalIndex.open(store, blocker / "lexical")
    assert not index.persistent
    assert_matches_fresh_build(index, store)


def test_a_large_library_without_an_index_is_built_in_the_background(store: SQLiteStore) -> None:
    rng = np.random.default_rng(11)
    add_doc(store, rng, 50, "a")
    index = LexicalIndex(store)
    assert index.view_or_build(10) is None, "more than 10 chunks to build: not while a query waits"
    deadline = time.monotonic() + 60
    while index.building and time.monotonic() < deadline:
        time.sleep(0.01)
    assert index.view_or_build(10) is not None and index.stats().last_refresh == "rebuilt"
    add_doc(store, rng, 5, "b")
    assert index.view_or_build(10) is not None and index.stats().last_refresh == "appended", "appending is quick"
    assert_matches_fresh_build(index, store)
    reopened = LexicalIndex(SQLiteStore(store.path))
    assert reopened.view_or_build(10) is not None and reopened.stats().last_refresh == "loaded"


class _TermsOnlyStore:
    """What a store without a file (PostgreSQL) offers: its rows and a generation, rebuilt from in memory."""

    index_feed = None
    """It lends the indexes no feed: no index lives beside it."""

    def __init__(self, inner: SQLiteStore) -> None:
        self.inner = inner

    def generation(self) -> int:
        return self.inner.generation()

    def lexical_rows(self) -> list[tuple[int, int, int, str, str]]:
        return self.inner.lexical_rows()


def test_stores_without_a_file_are_indexed_in_memory(store: SQLiteStore) -> None:
    rng = np.random.default_rng(9)
    add_doc(store, rng, 50, "a")
    index = LexicalIndex.open(_TermsOnlyStore(store), settings=LexicalSettings(segment_rows=30))
    assert not index.persistent and index.stats().segments == 2
    assert_matches_fresh_build(index, store)
    add_doc(store, rng, 10, "b")
    assert_matches_fresh_build(index, store)
    assert index.stats().last_refresh == "rebuilt"


def test_concurrent_readers_during_writes(store: SQLiteStore) -> None:
    rng = np.random.default_rng(10)
    add_doc(store, rng, 100, "base")
    index = LexicalIndex.open(store)
    errors: list[BaseException] = []
    stop = threading.Event()

    def reader() -> None:
        try:
            while not stop.is_set():
                view = index.view()
                scores = view.scores(["whale", "w001"], prefix=False)
                assert len(scores) == len(view.ids) == len(view.docs)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=reader) for _ in range(3)]
    for t in threads:
        t.start()
    writer = SQLiteStore(store.path)
    for i in range(8):
        add_doc(writer, rng, 10, f"w{i}")
        time.sleep(0.01)
    stop.set()
    for t in threads:
        t.join()
    assert not errors
    assert_matches_fresh_build(index, store)


def test_a_build_leaves_numpys_huge_page_setting_as_it_found_it(store: SQLiteStore) -> None:
    """Segments are built in 4 KB pages; every array made after the build (int8 codes, a query's scores) gets
    numpy's own setting back, whichever it was."""
    import importlib

    toggle = importlib.import_module("numpy._core.multiarray")._set_madvise_hugepage
    for setting in (True, False):
        previous = toggle(setting)
        try:
            add_doc(store, np.random.default_rng(0), 20, f"pages-{setting}")
            LexicalIndex.open(store).refresh()
            assert toggle(setting) is setting
        finally:
            toggle(previous)


def test_the_index_lives_beside_a_store_that_lends_a_feed_and_in_memory_beside_one_that_does_not(
        store: SQLiteStore) -> None:
    rng = np.random.default_rng(12)
    add_doc(store, rng, 40, "a")
    followed = LexicalIndex.open(DelegatingStore(store))  # type: ignore[arg-type]
    in_memory = LexicalIndex.open(NoFeedStore(store.path))
    add_doc(store, rng, 10, "b")
    assert_matches_fresh_build(followed, store)
    assert_matches_fresh_build(in_memory, store)
    assert followed.incremental and followed.persistent and followed.stats().last_refresh == "appended"
    assert followed.directory == store.path.with_name("library.lexical")
    assert not in_memory.incremental and not in_memory.persistent and in_memory.stats().last_refresh == "rebuilt"
