"""The SQLite library's vectors live once, as rows of one float16 file beside the database (store/vectorfile.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from chapterverse.index.vectors import VectorIndex
from chapterverse.store import SQLiteStore
from storeutil import passages_document, random_model_store

DIM = 512


def half(vectors: np.ndarray) -> np.ndarray:
    """What the store reads back of float32 vectors: each value rounded to float16, as float32."""
    return vectors.astype(np.float16).astype(np.float32)


@pytest.fixture()
def store(tmp_path: Path) -> SQLiteStore:
    s = random_model_store(tmp_path, DIM)
    yield s
    s.close()


def test_each_vector_is_stored_once_as_float16_rows(store: SQLiteStore) -> None:
    vectors = np.random.default_rng(0).standard_normal((2_000, DIM)).astype(np.float32)
    store.add_document(passages_document("a", vectors))
    files = list(store.path.parent.glob("*.vectors-*"))
    assert [f.suffix for f in files] == [".f16"] and files[0].stat().st_size == vectors.nbytes // 2
    assert np.array_equal(np.fromfile(files[0], "<f2").reshape(-1, DIM), vectors.astype(np.float16))
    assert np.array_equal(store.vectors_since(0)[2], half(vectors)), "read back as float32, exactly"
    store.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    assert store.path.stat().st_size < vectors.nbytes / 8, "the SQLite file holds no copy of them"
    index = VectorIndex.open(store)
    assert index.stats().bytes_on_disk < vectors.nbytes / 8, "nor does the index"


def test_rows_of_a_transaction_that_did_not_commit_are_invisible_and_overwritten(store: SQLiteStore) -> None:
    rng = np.random.default_rng(1)
    first = rng.standard_normal((10, DIM)).astype(np.float32)
    store.add_document(passages_document("a", first))
    with pytest.raises(RuntimeError), store.transaction() as tx:  # e.g. a process stopped mid-ingest
        store.vector_file.append(tx, rng.standard_normal((500, DIM)).astype(np.float32))
        raise RuntimeError("interrupted")
    path = store.vector_file.current(store.db)[0]
    assert path is not None and path.stat().st_size == 510 * DIM * 2, "written, but not committed"
    assert store.integrity_problems() == [] and store.vectors_since(0)[2].shape == (10, DIM)
    second = rng.standard_normal((3, DIM)).astype(np.float32)
    store.add_document(passages_document("b", second))
    assert path.stat().st_size == 13 * DIM * 2, "the next write takes their place"
    assert np.array_equal(store.vectors_since(0)[2], half(np.concatenate([first, second])))
    assert store.integrity_problems() == []


def test_a_vector_file_shorter_than_what_was_committed_is_reported(store: SQLiteStore) -> None:
    store.add_document(passages_document("a", np.ones((8, DIM), np.float32)))
    path = store.vector_file.current(store.db)[0]
    assert path is not None
    with open(path, "r+b") as f:
        f.truncate(5 * DIM * 2)
    assert f"{path.name} holds 5 vectors, 8 were committed" in store.integrity_problems()


def test_replacing_the_embedding_model_writes_a_new_file_and_deletes_the_old(store: SQLiteStore) -> None:
    store.add_document(passages_document("a", np.ones((4, DIM), np.float32)))
    old = store.vector_file.current(store.db)[0]
    new_vectors = {int(c): np.full(32, c, np.float32) for c in store.vectors_since(0)[0]}
    store.replace_embedding_model("other", 32, new_vectors)
    path, committed, dim = store.vector_file.current(store.db)
    assert old is not None and not old.exists() and path is not None and (committed, dim) == (4, 32)
    ids, _, matrix = store.vectors_since(0)
    assert np.array_equal(matrix, np.stack([new_vectors[int(c)] for c in ids]))
    assert store.integrity_problems() == []


def _journaled(store: SQLiteStore) -> int:
    return int(store.db.execute("SELECT count(*) FROM vector_journal").fetchone()[0])


def test_small_writes_are_journaled_and_a_power_cut_that_lost_their_rows_is_repaired_on_open(
        store: SQLiteStore) -> None:
    """A small write is not fdatasynced (that tripled an upsert's cost): SQLite's WAL holds its rows until one
    fdatasync covers them. If the machine stops before the OS wrote them, the commit can survive without them:
    opening the library writes them back."""
    rng = np.random.default_rng(2)
    first, second = (rng.standard_normal((3, DIM)).astype(np.float32) for _ in range(2))
    store.add_document(passages_document("a", first))
    store.add_document(passages_document("b", second))
    assert _journaled(store) == 2
    path = store.vector_file.current(store.db)[0]
    assert path is not None
    with open(path, "r+b") as f:  # what a power cut can leave: both commits kept, the second's rows never written
        f.truncate(3 * DIM * 2)
    reopened = SQLiteStore(store.path)
    assert np.array_equal(reopened.vectors_since(0)[2], half(np.concatenate([first, second])))
    assert _journaled(reopened) == 0 and reopened.integrity_problems() == []
    reopened.close()


def test_a_megabyte_of_rows_is_fdatasynced_at_once_and_empties_the_journal(store: SQLiteStore) -> None:
    rng = np.random.default_rng(4)
    store.add_document(passages_document("a", rng.standard_normal((3, DIM)).astype(np.float32)))
    assert _journaled(store) == 1
    store.add_document(passages_document("b", rng.standard_normal((1200, DIM)).astype(np.float32)))  # 1.2 MB
    assert _journaled(store) == 0
    for n in range(400):  # 3 KB each: the 342nd reaches 1 MB and its fdatasync covers all of them
        store.add_document(passages_document(f"c{n}", rng.standard_normal((3, DIM)).astype(np.float32)))
    assert _journaled(store) == 58
    assert store.integrity_problems() == []


_WRITER = """
import sys
import numpy as np
from chapterverse.store import SQLiteStore

path, name, docs, tests = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
sys.path.insert(0, tests)
from storeutil import passages_document

store = SQLiteStore(path)
for n in range(docs):
    rows = 1 + (n * 7) % 40  # small (journaled) and larger writes mixed
    source = f"{name}-{n}"
    store.add_document(passages_document(source, np.random.default_rng(sum(map(ord, source))).standard_normal(
        (rows, 512)).astype(np.float32)))
    if n % 10 == 9:  # half of each ten removed: the removals pass a fifth of the file and move it
        store.remove_documents([d.id for d in store.documents() if d.source in {f"{name}-{n - k}" for k in range(1, 6)}])
"""


def test_processes_writing_at_once_each_find_their_own_vectors(store: SQLiteStore, tmp_path: Path) -> None:
    """Three processes add and remove documents in one library at the same time (appends under SQLite's write
    lock, journaled and fdatasynced writes, removals that copy the live rows to a new file): every chunk still
    has exactly the vector its writer gave it."""
    import subprocess
    import sys

    script = tmp_path / "writer.py"
    script.write_text(_WRITER)
    tests = str(Path(__file__).parent)
    writers = [subprocess.Popen([sys.executable, str(script), str(store.path), name, "40", tests])
               for name in ("p", "q", "r")]
    assert [w.wait(timeout=120) for w in writers] == [0, 0, 0]
    ids, _, matrix = store.vectors_since(0)
    chunks = store.chunks_by_ids(ids.tolist())
    by_source: dict[str, list[int]] = {}
    for row, cid in enumerate(ids.tolist()):
        by_source.setdefault(chunks[cid].source, []).append(row)
    assert len(by_source) == 3 * 20  # each writer removed 20 of its 40
    for source, rows in by_source.items():
        expected = np.random.default_rng(sum(map(ord, source))).standard_normal((len(rows), 512))
        assert np.array_equal(matrix[rows], half(expected.astype(np.float32))), source
    assert store.integrity_problems() == []
    (current,) = store.path.parent.glob("*.f16")
    assert current.name != "library.vectors-1.f16", "the live rows were copied to a new file at least once"


def test_a_library_copied_without_its_vector_file_says_so(store: SQLiteStore, tmp_path: Path) -> None:
    import shutil

    from chapterverse import StoreError

    store.add_document(passages_document("a", np.ones((3, DIM), np.float32)))  # journaled: opening must not "repair" it
    store.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    (tmp_path / "copy").mkdir()
    shutil.copy(store.path, tmp_path / "copy" / "library.sqlite3")
    copied = SQLiteStore(tmp_path / "copy" / "library.sqlite3")
    with pytest.raises(StoreError, match="vector file is missing"):
        VectorIndex.open(copied)
    with pytest.raises(StoreError, match="vector file is missing"):
        copied.vectors_since(0)
    assert "library.vectors-1.f16 holds 0 vectors, 3 were committed" in copied.integrity_problems()
    assert not list((tmp_path / "copy").glob("*.f16")), "no empty file made in its place"
    copied.close()


def test_a_batch_of_documents_appends_its_vectors_once(store: SQLiteStore) -> None:
    """``add_documents`` writes every document's rows in one append (one journal entry, not one a document) and
    each document's chunks name its own rows."""
    rng = np.random.default_rng(6)
    blocks = [rng.standard_normal((n, DIM)).astype(np.float32) for n in (2, 1, 3)]
    ids = store.add_documents([passages_document(f"d{n}", b) for n, b in enumerate(blocks)])
    assert _journaled(store) == 1
    for doc_id, block in zip(ids, blocks):
        chunk_ids = [c.id for c in store.chunks(doc_id=doc_id)]
        found = store.vectors_since(min(chunk_ids) - 1)
        assert np.array_equal(found[2][:len(block)], half(block)) and set(found[1][:len(block)].tolist()) == {doc_id}
