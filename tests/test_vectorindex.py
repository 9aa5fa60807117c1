"""The persistent dense index against the simplest correct method: numpy brute force over the store's vectors."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pytest

from chapterverse import StoreError
from chapterverse.store import SQLiteStore
from chapterverse.index.vectors import IndexSettings, VectorIndex
from storeutil import DelegatingStore, NoFeedStore, passages_document, random_model_store

DIM = 32


def unit(rows: np.ndarray) -> np.ndarray:
    rows = np.asarray(rows, np.float32)
    return rows / np.linalg.norm(rows, axis=-1, keepdims=True)


def add_doc(store: SQLiteStore, vectors: np.ndarray, source: str = "doc") -> int:
    """One document whose chunks are short passages, with the given vectors (made unit length)."""
    return store.add_document(passages_document(source, unit(vectors)))


@pytest.fixture()
def store(tmp_path: Path) -> SQLiteStore:
    s = random_model_store(tmp_path, DIM)
    yield s
    s.close()


def brute_force(store: SQLiteStore, q: np.ndarray, k: int, doc_ids: list[int] | None = None) -> list[tuple[int, float]]:
    ids, docs, matrix = store.load_vectors()
    scores = np.vecdot(matrix, q)  # each row's product alike, wherever it is (BLAS's ``@`` may round by position)
    if doc_ids is not None:
        scores = np.where(np.isin(docs, doc_ids), scores, -np.inf)
    top = np.argsort(-scores, kind="stable")[:k]
    return [(int(ids[i]), float(scores[i])) for i in top if np.isfinite(scores[i])]


def assert_same(found: list[tuple[int, float]], expected: list[tuple[int, float]]) -> None:
    assert [c for c, _ in found] == [c for c, _ in expected]
    assert np.allclose([s for _, s in found], [s for _, s in expected], atol=1e-5)


def test_exact_search_matches_brute_force_with_and_without_doc_filter(store: SQLiteStore, tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    docs = [add_doc(store, rng.standard_normal((150, DIM)), f"d{i}") for i in range(4)]
    index = VectorIndex.open(store)
    assert index.directory == tmp_path / "library.vectors"
    assert index.stats().last_refresh == "rebuilt" and len(index) == 600
    for q in unit(rng.standard_normal((10, DIM))):
        assert_same(index.search(q, 10), brute_force(store, q, 10))
        assert_same(index.search(q, 7, doc_ids=[docs[1], docs[3]]), brute_force(store, q, 7, [docs[1], docs[3]]))
    assert index.search(q, 10, doc_ids=[]) == []
    assert index.search(q, 10, doc_ids=[999]) == []
    assert index.search(q, 0) == []
    with pytest.raises(ValueError):
        index.search(np.ones(DIM + 1, np.float32), 3)


def test_cosines_and_vectors_are_the_stored_ones(store: SQLiteStore) -> None:
    rng = np.random.default_rng(2)
    add_doc(store, rng.standard_normal((50, DIM)))
    ids, _, matrix = store.load_vectors()
    index = VectorIndex.open(store)
    q = unit(rng.standard_normal(DIM))
    wanted = [int(ids[7]), int(ids[3]), 10**9]
    cos = index.cosines(wanted, q)
    assert cos[10**9] == 0.0 and set(cos) == set(wanted)
    assert cos[int(ids[7])] == pytest.approx(float(matrix[7] @ q), abs=1e-6)
    vecs = index.vectors(wanted)
    assert set(vecs) == {int(ids[7]), int(ids[3])}
    np.testing.assert_array_equal(vecs[int(ids[3])], matrix[3])


def test_incremental_append_mask_and_reopen(store: SQLiteStore) -> None:
    rng = np.random.default_rng(3)
    first = add_doc(store, rng.standard_normal((100, DIM)), "a")
    index = VectorIndex.open(store)
    add_doc(store, rng.standard_normal((30, DIM)), "b")
    q = unit(rng.standard_normal(DIM))
    assert_same(index.search(q, 10), brute_force(store, q, 10))
    assert index.stats().last_refresh == "appended" and index.stats().segments == 2
    small = add_doc(store, rng.standard_normal((5, DIM)), "c")
    store.remove_documents([small])  # added and removed between two refreshes: its rows are skipped
    assert_same(index.search(q, 10), brute_force(store, q, 10))
    assert index.stats().last_refresh == "appended" and len(index) == 130 and index.stats().segments == 2
    kept, dropped = add_doc(store, rng.standard_normal((10, DIM)), "d"), add_doc(store, rng.standard_normal((3, DIM)), "e")
    assert len(index) == 143 and index.stats().segments == 3  # one refresh appends both as one segment
    store.remove_documents([dropped])  # 8 of 148 rows dead (under a fifth): masked, the file stays
    assert_same(index.search(q, 10), brute_force(store, q, 10))
    # the segments map 143 of the file's 148 rows: not the rows of "c", which no refresh saw alive
    assert index.stats().last_refresh == "appended" and len(index) == 140 and index.stats().rows == 143
    assert index.vectors(range(1, 200)).keys() == set(store.load_vectors()[0].tolist())
    # a second opener (another process, a restart) maps the files without reading a vector
    again = VectorIndex.open(store)
    assert again.stats().last_refresh == "loaded"
    assert_same(again.search(q, 5, doc_ids=[kept]), brute_force(store, q, 5, [kept]))
    assert index.stats().bytes_on_disk < 148 * DIM, "the index keeps no copy of the vectors"
    del first


def test_removing_a_fifth_of_the_rows_moves_the_store_to_a_new_file_and_the_index_follows(store: SQLiteStore) -> None:
    rng = np.random.default_rng(13)
    first = add_doc(store, rng.standard_normal((100, DIM)), "a")
    second = add_doc(store, rng.standard_normal((60, DIM)), "b")
    index = VectorIndex.open(store)
    before = sorted(p.name for p in store.path.parent.glob("*.f16"))
    store.remove_documents([first])
    after = sorted(p.name for p in store.path.parent.glob("*.f16"))
    assert len(before) == len(after) == 1 and before != after, "live rows copied to a new file, the old deleted"
    assert after[0] == store.vector_file.current(store.db)[0].name
    q = unit(rng.standard_normal(DIM))
    assert_same(index.search(q, 10), brute_force(store, q, 10))  # still mapping the deleted file until refresh
    assert index.stats().last_refresh == "rebuilt" and index.stats().rows == len(index) == 60
    assert store.path.parent.joinpath(after[0]).stat().st_size == 60 * DIM * 2
    assert_same(VectorIndex.open(store).search(q, 5, doc_ids=[second]), brute_force(store, q, 5, [second]))
    assert store.integrity_problems() == []


def test_two_openers_follow_each_other_through_the_files(store: SQLiteStore, tmp_path: Path) -> None:
    rng = np.random.default_rng(4)
    add_doc(store, rng.standard_normal((40, DIM)), "a")
    writer = VectorIndex.open(store)
    reader = VectorIndex.open(SQLiteStore(store.path))
    assert reader.stats().last_refresh == "loaded"
    add_doc(store, rng.standard_normal((40, DIM)), "b")
    writer.refresh()
    assert writer.stats().last_refresh == "appended"
    reader.refresh()
    assert reader.stats().last_refresh == "loaded" and len(reader) == 80


def test_many_small_writes_merge_the_tail(store: SQLiteStore) -> None:
    rng = np.random.default_rng(5)
    index = VectorIndex.open(store, settings=IndexSettings(max_segments=3))
    for i in range(8):
        add_doc(store, rng.standard_normal((5, DIM)), f"d{i}")
        index.refresh()
    assert index.stats().segments <= 4 and len(index) == 40
    q = unit(rng.standard_normal(DIM))
    assert_same(index.search(q, 10), brute_force(store, q, 10))


def test_merging_keeps_the_largest_segment_and_the_chunk_id_order(store: SQLiteStore) -> None:
    rng = np.random.default_rng(8)
    base = rng.standard_normal((40, DIM))
    add_doc(store, base, "big")
    index = VectorIndex.open(store, settings=IndexSettings(max_segments=3))
    largest = index._current().segments[0].name
    for i in range(7):
        add_doc(store, base[i * 5:(i + 1) * 5], f"copy{i}")  # every score tied with a row of the first document
        index.refresh()
    segments = index._current().segments
    assert segments[0].name == largest and len(segments) <= 4 and len(index) == 75
    assert all(a.ids[-1] < b.ids[0] for a, b in zip(segments, segments[1:]))
    for q in unit(rng.standard_normal((5, DIM))):
        assert_same(index.search(q, 20), brute_force(store, q, 20))


@pytest.mark.parametrize("damage", ["truncate", "garbage-manifest", "missing-file", "wrong-ids", "other-model"])
def test_half_written_or_mismatched_index_is_detected_and_rebuilt(store: SQLiteStore, damage: str) -> None:
    rng = np.random.default_rng(6)
    add_doc(store, rng.standard_normal((80, DIM)))
    index = VectorIndex.open(store)
    assert index.wait_resident(timeout=10)  # damage the files only once nothing is still copying from the map
    directory = index.directory
    ids_file = next(directory.glob("*.ids.npy"))
    if damage == "truncate":  # a crash (or full disk) mid-write would leave a short file
        ids_file.write_bytes(ids_file.read_bytes()[:-100])
    elif damage == "garbage-manifest":
        (directory / "manifest.json").write_text('{"format": 1, "segm')
    elif damage == "missing-file":
        ids_file.unlink()
    elif damage == "wrong-ids":
        np.save(ids_file, np.arange(80, dtype=np.int64))
    else:  # the library was re-embedded with another model (same dimension)
        store.replace_embedding_model("other", DIM, {int(c): v for c, v in
                                                     zip(store.load_vectors()[0], unit(rng.standard_normal((80, DIM))))})
    (directory / "r000009.ids.npy.tmp-1").write_bytes(b"half")  # leftover of an interrupted write
    reopened = VectorIndex.open(store)
    assert reopened.stats().last_refresh == "rebuilt"
    q = unit(rng.standard_normal(DIM))
    assert_same(reopened.search(q, 10), brute_force(store, q, 10))
    assert not list(directory.glob("*.tmp*"))


def test_unwritable_directory_keeps_the_index_in_memory(store: SQLiteStore, tmp_path: Path) -> None:
    rng = np.random.default_rng(7)
    add_doc(store, rng.standard_normal((30, DIM)))
    blocker = tmp_path / "file-not-dir"
    blocker.write_text("x")
    index = VectorIndex.open(store, blocker / "vectors")
    assert not index.persistent
    q = unit(rng.standard_normal(DIM))
    assert_same(index.search(q, 5), brute_force(store, q, 5))


def test_concurrent_readers_during_writes(store: SQLiteStore) -> None:
    rng = np.random.default_rng(8)
    add_doc(store, rng.standard_normal((200, DIM)), "base")
    index = VectorIndex.open(store)
    queries = unit(rng.standard_normal((20, DIM)))
    errors: list[BaseException] = []
    stop = threading.Event()

    def reader() -> None:
        try:
            while not stop.is_set():
                for q in queries:
                    found = index.search(q, 5)
                    assert len(found) == 5 and all(a[1] >= b[1] for a, b in zip(found, found[1:]))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=reader) for _ in range(3)]
    for t in threads:
        t.start()
    writer = SQLiteStore(store.path)
    for i in range(10):
        add_doc(writer, rng.standard_normal((20, DIM)), f"w{i}")
        time.sleep(0.01)
    stop.set()
    for t in threads:
        t.join()
    assert not errors
    assert len(index) == 400


def test_an_index_that_kept_its_own_copy_of_the_vectors_is_rebuilt_and_its_files_deleted(store: SQLiteStore) -> None:
    """Format 1 kept a float32 copy of every vector in ``s*.vectors.npy``; the store's file is the one copy now."""
    import json

    rng = np.random.default_rng(9)
    add_doc(store, rng.standard_normal((50, DIM)))
    VectorIndex.open(store)
    directory = store.path.with_name("library.vectors")
    raw = json.loads((directory / "manifest.json").read_text())
    (directory / "manifest.json").write_text(json.dumps({**raw, "format": 1}))
    np.save(directory / "s000001.vectors.npy", np.zeros((50, DIM), np.float32))
    reopened = VectorIndex.open(store)
    assert reopened.stats().last_refresh == "rebuilt" and not list(directory.glob("s*.npy"))
    q = unit(rng.standard_normal(DIM))
    assert_same(reopened.search(q, 10), brute_force(store, q, 10))


@pytest.mark.slow
def test_scale_bench_measures_a_small_synthetic_library(tmp_path: Path) -> None:
    from chapterverse.bench.scale import _passages, build_library, format_report, measure_size

    text = " ".join(f"the whale number {i} swam past the ship and the captain watched" for i in range(400))
    pool = _passages(text)
    assert pool and all(250 <= len(p) <= 500 for p in pool)
    lines: list[str] = []
    info = build_library(tmp_path / "lib", 2_000, pool, None, DIM, "test-random", lines.append)
    assert info["reused"] is False
    assert build_library(tmp_path / "lib", 2_000, pool, None, DIM, "test-random", lines.append)["reused"]
    rng = np.random.default_rng(11)
    np.save(tmp_path / "q.npy", unit(rng.standard_normal((12, DIM))))
    row = measure_size({"directory": str(tmp_path / "lib"), "chunks": 2_000, "vectors": "random",
                        "questions": [f"where did whale {i} swim?" for i in range(12)],
                        "query_vectors": str(tmp_path / "q.npy")})
    assert row["exact_agrees_with_brute_force"] == 1.0 and row["dense_recall_at_10"] == 1.0 and row["resident"]
    for key in ("startup_s", "lexical_open_s", "first_hybrid_ms", "lexical_p50_ms", "fts5_p50_ms", "dense_p50_ms",
                "hybrid_p99_ms", "brute_force_p50_ms", "resident_after_open_s", "paired_dense_p50_ms", "paired_brute_force_p50_ms", "rss_mb", "bytes_per_chunk", "lexical_bytes_per_chunk",
                "lexical_build_s", "lexical_refresh_after_append_s", "hybrid_after_remove_ms"):
        assert row[key] > 0, key
    assert row["lexical_refresh"] == "rebuilt" and row["lexical_segments"] == 1
    again = measure_size({"directory": str(tmp_path / "lib"), "chunks": 2_000, "vectors": "random",
                          "questions": ["where did the whale swim?"], "query_vectors": str(tmp_path / "q.npy")})
    assert again["lexical_refresh"] == again["index_refresh"] == "loaded", "the write was undone and followed"
    machine = {"cpu": "test", "cores": 2, "memory_gb": 1, "python": "3", "numpy": "2"}
    assert "| 2,000 | random |" in format_report({"machine": machine, "sizes": [row]})


def test_vectors_written_without_a_recorded_model_are_indexed(tmp_path: Path) -> None:
    bare = SQLiteStore(tmp_path / "bare.sqlite3")
    rng = np.random.default_rng(12)
    add_doc(bare, rng.standard_normal((20, 16)))
    index = VectorIndex.open(bare)
    q = unit(rng.standard_normal(16))
    assert_same(index.search(q, 5), brute_force(bare, q, 5))
    assert VectorIndex.open(bare).stats().last_refresh == "loaded"


@pytest.mark.slow
def test_large_scans_split_across_two_threads_score_exactly_like_one() -> None:
    from chapterverse.index.dense import inner_products, scan_tuning

    rng = np.random.default_rng(7)
    matrix = rng.standard_normal((scan_tuning().cached_scan_bytes // 256 + 1001, 64)).astype(np.float32)
    vector = rng.standard_normal(64).astype(np.float32)
    assert np.array_equal(inner_products(matrix, vector), np.vecdot(matrix, vector))
    assert np.allclose(inner_products(matrix[:1000], vector), np.vecdot(matrix[:1000], vector), rtol=1e-5,
                       atol=1e-5)


def test_int8_codes_are_made_in_the_background_and_follow_writes(store: SQLiteStore) -> None:
    rng = np.random.default_rng(13)
    add_doc(store, rng.standard_normal((80, DIM)), "a")
    index = VectorIndex.open(store)
    q = unit(rng.standard_normal(DIM))
    index.search(q, 5)
    assert not index._codes.making and not index.stats().resident, "one search (a CLI call) pays for no codes"
    index.search(q, 5)
    assert index._codes.making or index.stats().resident, "a second search starts making them"
    assert index.wait_resident(timeout=10) and index.stats().resident
    assert index._current().segments[0].codes is not None, "the snapshot searches the codes first"
    second = add_doc(store, rng.standard_normal((40, DIM)), "b")
    assert_same(index.search(q, 10), brute_force(store, q, 10))  # the new segment is scanned in float32 or coded
    assert index.wait_resident(timeout=10) and index.stats().segments == 2
    assert_same(index.search(q, 10), brute_force(store, q, 10))
    store.remove_documents([second])
    assert_same(index.search(q, 10), brute_force(store, q, 10))
    assert index.wait_resident(timeout=10) and all(index._codes.codes_of(s.name) is s.codes
                                                   for s in index._current().segments)

    float32_only = VectorIndex.open(store, settings=IndexSettings(resident_bytes=0))
    assert not float32_only.wait_resident(timeout=10) and not float32_only.stats().resident
    assert float32_only._current().segments[0].codes is None
    assert_same(float32_only.search(q, 10), brute_force(store, q, 10))


def _overlapping_documents(store: SQLiteStore, rng: np.random.Generator) -> tuple[np.ndarray, list[int], VectorIndex]:
    """Three documents sharing rows (so scores tie across them), the third removed, and the index over them with
    its int8 codes in memory: enough rows that the int8 pass narrows the scan."""
    base = rng.standard_normal((1500, DIM))
    docs = [add_doc(store, base[:1000], "a"), add_doc(store, base, "b"), add_doc(store, base[500:], "c")]
    store.remove_documents([docs[2]])
    index = VectorIndex.open(store)
    assert index.wait_resident(timeout=30) and index.stats().resident
    return base, docs, index


def test_searching_the_codes_first_finds_exactly_what_brute_force_finds(store: SQLiteStore) -> None:
    """Enough rows that the int8 pass narrows the scan, removed documents, doc filters narrow and broad, ties."""
    rng = np.random.default_rng(15)
    base, docs, index = _overlapping_documents(store, rng)
    for trial in range(40):
        q = unit(rng.standard_normal(DIM) if trial % 2 else base[trial] + 0.3 * rng.standard_normal(DIM))
        for k in (1, 10, 60):
            assert_same(index.search(q, k), brute_force(store, q, k))
        assert_same(index.search(q, 10, [docs[1]]), brute_force(store, q, 10, [docs[1]]))
        assert_same(index.search(q, 10, docs), brute_force(store, q, 10, docs))


def test_a_failed_quantization_keeps_float32_scans_and_is_not_retried(store: SQLiteStore,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    import chapterverse.index.int8codes as int8codes

    rng = np.random.default_rng(14)
    add_doc(store, rng.standard_normal((30, DIM)), "a")
    index = VectorIndex.open(store)
    attempts: list[int] = []

    def no_memory(*args: object, **kwargs: object) -> np.ndarray:
        attempts.append(1)
        raise MemoryError("no room for the copy")

    monkeypatch.setattr(int8codes, "quantize", no_memory)
    assert not index.wait_resident(timeout=10)
    monkeypatch.undo()
    add_doc(store, rng.standard_normal((10, DIM)), "b")
    q = unit(rng.standard_normal(DIM))
    assert_same(index.search(q, 10), brute_force(store, q, 10))
    assert not index.wait_resident(timeout=10) and len(attempts) == 1 and not index.stats().resident


def test_the_int8_pass_narrows_the_scan_to_a_superset_of_the_exact_top_k() -> None:
    from chapterverse.index.dense import quantize, top_candidates

    rng = np.random.default_rng(16)
    matrix = unit(rng.standard_normal((20_000, 128)))
    matrix[1::2] = matrix[::2]  # every score tied with its neighbour's
    codes = quantize(matrix)
    dead = np.zeros(len(matrix), bool)
    dead[rng.choice(len(matrix), 2_000, replace=False)] = True
    for trial in range(30):
        q = unit(matrix[trial * 7] + 0.5 * rng.standard_normal(128))
        scores = np.where(dead, -np.inf, matrix @ q)
        for k in (1, 10, 60):
            rows = top_candidates(codes, q, k, dead)
            assert rows is not None and len(rows) < len(matrix) // 8, "the first pass narrows the scan"
            assert np.all(np.diff(rows) > 0) and not dead[rows].any()
            exact = np.argsort(-scores, kind="stable")[:k]
            assert set(exact) <= set(rows.tolist())
    assert top_candidates(codes, np.zeros(128, np.float32), 10, None) is None, "a zero query is scanned exactly"


def test_the_half_precision_pass_keeps_the_exact_top_k_of_a_float16_matrix() -> None:
    """Before the int8 codes exist, a float16 matrix is narrowed by SimSIMD's half-precision products; what the
    rows left score is the full float32 scan's top k, ties, subnormal components and dead rows included."""
    from chapterverse.index.dense import _half_products_exact_in_float32, half_candidates, inner_products
    from chapterverse.index.topk import top_k

    if not _half_products_exact_in_float32():
        pytest.skip("SimSIMD sums float16 products in float16 on this CPU: the full scan serves")
    rng = np.random.default_rng(17)
    matrix = unit(rng.standard_normal((20_000, 128))).astype(np.float16)
    matrix[1::2] = matrix[::2]  # every score tied with its neighbour's,
    matrix[1::4, 0] = np.nextafter(matrix[1::4, 0], np.float16(2))  # or a float16 step apart
    matrix[100:200, :40] = np.float16(3e-6)  # subnormal in float16
    dead = np.zeros(len(matrix), bool)
    dead[rng.choice(len(matrix), 2_000, replace=False)] = True
    for trial in range(30):
        q = unit(matrix[trial * 7].astype(np.float32) + (0.5 if trial % 2 else 1e-3) * rng.standard_normal(128))
        full = np.where(dead, -np.inf, inner_products(matrix, q))
        for k in (1, 10, 60):
            rows = half_candidates(matrix, q, k, dead)
            assert rows is not None and len(rows) < len(matrix) // 8, "the first pass narrows the scan"
            assert np.all(np.diff(rows) > 0) and not dead[rows].any()
            scores = inner_products(matrix[rows], q)
            best = top_k(scores, k)
            assert np.array_equal(rows[best], top_k(full, k)) and np.array_equal(scores[best], full[rows[best]])
    assert half_candidates(matrix.astype(np.float32), q, 10, None) is None, "a float32 matrix is scanned as it is"


def test_a_chunk_without_a_vector_leaves_the_others_indexed(store: SQLiteStore) -> None:
    """A damaged library with a chunk whose vector is gone: the rows that have one are still indexed, found as
    brute force finds them, and no file is left behind that the manifest does not name."""
    rng = np.random.default_rng(5)
    add_doc(store, rng.standard_normal((30, DIM)), "a")
    add_doc(store, rng.standard_normal((20, DIM)), "b")
    with store.transaction() as tx:  # the second document's block loses its last vector
        tx.execute("UPDATE vector_blocks SET count = count - 1"
                   " WHERE first_chunk = (SELECT max(first_chunk) FROM vector_blocks)")
    index = VectorIndex.open(store, settings=IndexSettings(resident_bytes=0))
    assert index.stats().rows == 49
    q = unit(rng.standard_normal(DIM))
    assert_same(index.search(q, 10), brute_force(store, q, 10))
    assert sorted(p.name for p in index.directory.iterdir() if ".tmp" in p.name) == []


def test_the_index_follows_whatever_store_lends_it_a_feed_not_a_class(store: SQLiteStore, tmp_path: Path) -> None:
    rng = np.random.default_rng(21)
    add_doc(store, rng.standard_normal((40, DIM)), "a")
    index = VectorIndex.open(DelegatingStore(store))  # type: ignore[arg-type]
    add_doc(store, rng.standard_normal((10, DIM)), "b")
    q = unit(rng.standard_normal(DIM))
    assert_same(index.search(q, 10), brute_force(store, q, 10))
    assert index.directory == tmp_path / "library.vectors" and index.stats().last_refresh == "appended"
    with pytest.raises(StoreError, match="NoFeedStore: the memory-mapped vector index serves SQLite libraries"):
        VectorIndex(NoFeedStore(store.path))


def split_every_scan(monkeypatch: pytest.MonkeyPatch) -> None:
    """Scans of any size split in two parts, as a 100 k-chunk library's are on two cores."""
    from chapterverse.index import dense

    monkeypatch.setattr(dense, "SMALL_SCAN_BYTES", 0)
    monkeypatch.setattr(dense, "MIN_PART_ROWS", 100)
    monkeypatch.setattr(dense, "scan_tuning", lambda: dense.ScanTuning(cached_scan_bytes=0, threads=2))


@pytest.fixture
def split_scans(monkeypatch: pytest.MonkeyPatch) -> None:
    split_every_scan(monkeypatch)


def test_a_split_int8_pass_with_work_beside_keeps_the_rows_of_one_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    """A search's BM25 ranking runs on its own thread while the helper scans the codes (``Beside``): once, there;
    and the rows the split pass keeps are those of one pass over all rows, dead rows and ties included, also
    where a part has fewer live rows than ``k``."""
    from chapterverse.index.dense import Beside, quantize, top_candidates

    rng = np.random.default_rng(21)
    matrix = unit(rng.standard_normal((5_000, 64)))
    matrix[1::2] = matrix[::2]
    codes = quantize(matrix)
    dead = np.zeros(len(matrix), bool)
    dead[rng.choice(len(matrix), 500, replace=False)] = True
    mostly_dead = np.ones(len(matrix), bool)
    mostly_dead[[5, 700, 1_200, 4_000, 4_100, 4_900]] = False  # the first of two parts holds three live rows
    first_dead = np.ones(len(matrix), bool)
    first_dead[[4_100, 4_900]] = False  # and none
    queries = [unit(matrix[trial * 11] + 0.3 * rng.standard_normal(64)) for trial in range(10)]
    cases = [(q, k, d) for q in queries
             for k, d in ((10, dead), (1, dead), (4, mostly_dead), (3, first_dead), (10, None))]
    one_pass = [top_candidates(codes, q, k, d) for q, k, d in cases]
    split_every_scan(monkeypatch)
    ran_on: list[int] = []
    for (q, k, d), expected in zip(cases, one_pass):
        work = Beside(lambda: ran_on.append(threading.get_ident()) or len(ran_on))
        split = top_candidates(codes, q, k, d, work)
        assert expected is not None and split is not None and np.array_equal(split, expected)
        assert work.done and work.result() == len(ran_on), "run once, by the scan, not again by result()"
    assert len(ran_on) == len(cases) and set(ran_on) == {threading.get_ident()}


def test_work_beside_an_unsplit_scan_runs_when_its_result_is_asked_for() -> None:
    from chapterverse.index.dense import Beside, quantize, top_candidates

    rng = np.random.default_rng(22)
    codes = quantize(unit(rng.standard_normal((2_000, 32))))
    work = Beside(lambda: "ranked")
    top_candidates(codes, unit(rng.standard_normal(32)), 5, None, work)  # too small to split: nothing ran beside
    assert not work.done
    assert work.result() == "ranked" and work.done


def test_search_with_work_beside_a_split_scan_finds_what_brute_force_finds(store: SQLiteStore,
                                                                          split_scans: None) -> None:
    from chapterverse.index.dense import Beside

    rng = np.random.default_rng(23)
    base, docs, index = _overlapping_documents(store, rng)
    for trial in range(20):
        q = unit(rng.standard_normal(DIM) if trial % 2 else base[trial] + 0.3 * rng.standard_normal(DIM))
        for doc_ids in (None, docs):  # every row, and a filter broad enough to scan as every row
            work = Beside(lambda: 42)
            assert_same(index.search(q, 10, doc_ids, beside=work), brute_force(store, q, 10, doc_ids))
            assert work.done and work.result() == 42


def test_float16_converts_to_float32_bit_for_bit_as_numpy_converts() -> None:
    from chapterverse.index.dense import to_single

    every = np.arange(1 << 16, dtype=np.uint16).view(np.float16)  # normal, subnormal, zeros, infinities, NaNs
    assert np.array_equal(to_single(every).view(np.uint32), every.astype(np.float32).view(np.uint32))
    rows = every.reshape(256, 256)[:, ::3]  # two-dimensional, not contiguous
    assert to_single(rows).shape == rows.shape
    assert np.array_equal(to_single(rows).view(np.uint32), rows.astype(np.float32).view(np.uint32))
    assert to_single(np.ones(3)).dtype == np.float32


def test_concurrent_searches_with_work_beside_split_scans_each_find_their_own_top_k(store: SQLiteStore,
                                                                                   split_scans: None) -> None:
    """Searches on several threads share the scan's helper: each runs its own work once and gets its own hits."""
    from concurrent.futures import ThreadPoolExecutor

    from chapterverse.index.dense import Beside

    rng = np.random.default_rng(24)
    add_doc(store, rng.standard_normal((1500, DIM)), "a")
    index = VectorIndex.open(store)
    assert index.wait_resident(timeout=30)
    queries = unit(rng.standard_normal((40, DIM)))

    def search(i: int) -> tuple[list[tuple[int, float]], int]:
        work = Beside(lambda: i)
        return index.search(queries[i], 10, beside=work), work.result()

    with ThreadPoolExecutor(4) as pool:
        found = list(pool.map(search, range(len(queries))))
    for i, (hits, ran) in enumerate(found):
        assert ran == i
        assert_same(hits, brute_force(store, queries[i], 10))
