"""A SQLite library's vectors: one flat file of float16 rows beside the database, their only durable copy.

Why a file and not BLOBs in SQLite: the vector index (:mod:`chapterverse.index.vectors`) scans and rescores
vectors through a memory map, and pages of a SQLite file cannot be mapped as a matrix, so the index kept a second
float32 copy of every vector (a third of a library's bytes) and its build would spend most of its time copying
them out of SQLite. So the store writes each vector once, here, and the index maps the same rows.

Layout: ``<stem>.vectors-<n>.f16`` beside ``<stem>.sqlite3``, little-endian float16 rows of the library's
dimension, no header. Half precision halves a library's largest part (1 KB a chunk at 512 dimensions, not 2):
a unit vector's components keep 11 significant bits, and every reader upcasts them to float32 exactly, so each
score is the float32 product of one fixed vector with the query, whichever path computes it. Files of
``.f32`` rows (libraries written before) are read as such; the store's migration 7 rewrites them as float16.
The database says which file is current (meta ``vector_file``), how many of its rows are
committed (meta ``vector_rows``) and which chunks each run of rows holds (``vector_blocks``: chunks
``first_chunk .. first_chunk + count - 1`` are rows ``row .. row + count - 1``).

Crash safety: a write puts its rows after the committed ones, before the transaction that names them commits.
A process that dies loses nothing committed (the rows are in the OS's cache), but a power cut could keep the
commit (SQLite's WAL) and lose rows the OS had not yet written. So a large write fdatasyncs its rows before its
commit, and a small one, for which that fdatasync would triple the cost of an upsert (0.45 ms of 0.7 here), also
puts them in ``vector_journal`` in its own transaction: SQLite's WAL is then their redo log. Once the journaled
rows reach :data:`JOURNAL_BYTES`, one fdatasync covers them all and the journal is emptied, in the transaction of
the write that crossed the line. Opening the library compares the journal with the file and rewrites any row
that differs (what a power cut can leave), so no committed row is ever missing. Rows past ``vector_rows`` are
what a transaction that did not commit wrote; the next write overwrites them. The rows of removed documents stay until they are a fifth of the file: then the live rows are
copied to the next file (``-<n+1>``) inside the removing transaction, which switches ``vector_file``; the old file
is deleted after the commit (or at the next switch, when the process died in between). A process that mapped the
old file keeps reading it (the kernel keeps a deleted file while it is mapped) until it sees the switch.
"""

from __future__ import annotations

import os
import re
import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING

from ..errors import StoreError

if TYPE_CHECKING:
    import numpy as np

__all__ = ["VectorFile", "VectorRows", "map_rows", "row_dtype", "row_bytes", "block_rows", "SPARSE_SHARE",
           "JOURNAL_BYTES", "JOURNAL_SCHEMA", "sync_directory", "missing_file"]

SPARSE_SHARE = 0.20
"""Rows of removed documents above this share of the file make the next removal copy the live rows to a new file
(each dead row is also scanned, masked, by every search until then)."""
JOURNAL_BYTES = 1 << 20
"""Rows written without their own fdatasync, at most (1 MB: about 500 vectors of 512 dimensions; what opening a
library compares, well under a millisecond). A write of at least this much is fdatasynced at once."""
JOURNAL_SCHEMA = "CREATE TABLE vector_journal(row INTEGER PRIMARY KEY, vectors BLOB NOT NULL)"
"""Rows ``row ..`` of the current file, as written, until an fdatasync made them durable there."""


_CURRENT = ("SELECT (SELECT value FROM meta WHERE key = 'vector_file'), (SELECT value FROM meta WHERE key ="
            " 'vector_rows'), (SELECT value FROM meta WHERE key = 'vector_dim')")


_datasync = getattr(os, "fdatasync", os.fsync)
"""fdatasync where the platform has it (not macOS): the rows' bytes, without the file's times."""


@dataclass(frozen=True, slots=True)
class VectorRows:
    """Where the vectors of chunks newer than some id are: rows of ``path`` (one entry per chunk, id order)."""

    path: Path | None
    """The current file (None: the library holds no vector yet)."""
    committed: int
    """Rows of ``path`` that committed transactions wrote (live or of removed documents)."""
    dim: int
    ids: np.ndarray
    docs: np.ndarray
    rows: np.ndarray


def row_dtype(path: Path) -> str:
    """The dtype of a vector file's values, by its suffix: ``<f2`` (``.f16``), ``<f4`` for the older ``.f32``."""
    return "<f4" if path.suffix == ".f32" else "<f2"


def row_bytes(path: Path, dim: int) -> int:
    """Bytes of one row of ``path``."""
    return dim * (4 if path.suffix == ".f32" else 2)


def map_rows(path: Path, start: int, stop: int, dim: int) -> np.ndarray:
    """Rows ``start .. stop - 1`` of a vector file, memory-mapped read-only (pages are read when touched), in the
    file's own dtype (:func:`row_dtype`)."""
    import numpy as np

    if stop <= start:
        return np.zeros((0, dim), row_dtype(path))
    return np.memmap(path, dtype=row_dtype(path), mode="r", offset=start * row_bytes(path, dim),
                     shape=(stop - start, dim))


class VectorFile:
    """The vector file of the database at ``database``; every method that writes takes the open write
    transaction (``tx``), whose lock is what serializes writers."""

    def __init__(self, database: Path) -> None:
        self.directory = database.parent
        self.stem = database.stem

    # -- reads --------------------------------------------------------------------------------------------
    def current(self, db: sqlite3.Connection) -> tuple[Path | None, int, int]:
        """The current file, its committed row count and the width of a row (float32s), as ``db``'s
        transaction sees them."""
        return self._located(*db.execute(_CURRENT).fetchone())

    def _located(self, name: str | None, rows: str | None, dim: str | None) -> tuple[Path | None, int, int]:
        """(file, committed rows, width) from the meta values :data:`_CURRENT` reads."""
        return (None, 0, 0) if name is None else (self.directory / str(name), int(rows or 0), int(dim or 0))

    def since(self, db: sqlite3.Connection, chunk_id: int) -> VectorRows:
        """The rows of every chunk with an id above ``chunk_id`` (call inside one read transaction)."""
        import numpy as np

        path, committed, dim = self.current(db)
        blocks = db.execute(
            "SELECT first_chunk, doc_id, count, row FROM vector_blocks WHERE first_chunk >="
            " coalesce((SELECT max(first_chunk) FROM vector_blocks WHERE first_chunk <= ?), 0) ORDER BY first_chunk",
            (chunk_id,)).fetchall()
        ids, docs, rows = [], [], []
        for first, doc, count, row in blocks:
            skip = max(0, chunk_id + 1 - first)
            if skip >= count:
                continue
            ids.append(np.arange(first + skip, first + count, dtype=np.int64))
            docs.append(np.full(count - skip, doc, np.int64))
            rows.append(np.arange(row + skip, row + count, dtype=np.int64))
        empty = np.zeros(0, np.int64)
        return VectorRows(path, committed, dim, *(np.concatenate(p) if p else empty for p in (ids, docs, rows)))

    def rows_of(self, db: sqlite3.Connection, chunk_ids: Sequence[int]) -> dict[int, np.ndarray]:
        """The vector of each of ``chunk_ids`` that has one (float32), each row read on its own (a memory map of
        the file cost 0.1 ms to make, half a small upsert's store write)."""
        import numpy as np

        path, _, dim = self.current(db)
        spans: dict[int, int] = {}
        for cid in dict.fromkeys(int(c) for c in chunk_ids):
            block = db.execute("SELECT first_chunk, count, row FROM vector_blocks WHERE first_chunk <= ?"
                               " ORDER BY first_chunk DESC LIMIT 1", (cid,)).fetchone()
            if block is not None and cid < block[0] + block[1]:
                spans[cid] = block[2] + cid - block[0]
        if path is None or not spans:
            return {}
        fd = os.open(path, os.O_RDONLY)
        try:
            width = row_bytes(path, dim)
            return {cid: np.frombuffer(os.pread(fd, width, row * width), row_dtype(path)).astype(np.float32)
                    for cid, row in spans.items()}
        finally:
            os.close(fd)

    # -- writes -------------------------------------------------------------------------------------------
    def append(self, tx: sqlite3.Connection, vectors: np.ndarray) -> int:
        """Write ``vectors`` after the committed rows, durably (fdatasynced, or journaled in ``tx``); return the
        first row's number. The rows count as committed when ``tx`` commits."""
        import numpy as np

        *meta, oldest = tx.execute(f"{_CURRENT}, (SELECT min(row) FROM vector_journal)").fetchone()
        path, committed, dim = self._located(*meta)
        if path is None or not committed:  # the first rows decide the width
            path = path or self._next_file(tx, None)
            dim = vectors.shape[1]
            self._set(tx, vector_dim=dim)
        elif vectors.shape[1] != dim:
            raise ValueError(f"vectors of dimension {vectors.shape[1]}, the library's are {dim}")
        data = np.ascontiguousarray(vectors, row_dtype(path))
        unsynced = (committed - (committed if oldest is None else int(oldest))) * row_bytes(path, dim) + data.nbytes
        sync = unsynced >= JOURNAL_BYTES
        self._write_at(path, committed, data, truncate=False, sync=sync)
        if sync:  # this fdatasync made every journaled row durable too
            tx.execute("DELETE FROM vector_journal")
        else:
            tx.execute("INSERT INTO vector_journal(row, vectors) VALUES (?, ?)", (committed, data.tobytes()))
        self._set(tx, vector_rows=committed + len(data))
        return committed

    def recover(self, db: sqlite3.Connection) -> None:
        """Rewrite journaled rows that the file does not hold as written (after a power cut), then empty the
        journal. Reads only, unless something differs: a process that died left its rows in the OS's cache."""
        if self._journal_matches(db):
            return
        db.execute("BEGIN IMMEDIATE")
        try:
            path, _, dim = self.current(db)
            journal = db.execute("SELECT row, vectors FROM vector_journal").fetchall()
            if path is not None and journal:
                fd = os.open(path, os.O_RDWR)  # never made here: a missing file is no power cut (`check` says)
                try:
                    for row, blob in journal:
                        os.pwrite(fd, blob, row * row_bytes(path, dim))
                    _datasync(fd)
                finally:
                    os.close(fd)
            db.execute("DELETE FROM vector_journal")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")

    def _journal_matches(self, db: sqlite3.Connection) -> bool:
        """Whether every journaled row is in the file as written (a missing file counts as a match: there is
        nothing to repair it with, and :func:`missing_file` explains it where the rows are read)."""
        journal = db.execute("SELECT row, vectors FROM vector_journal").fetchall()
        path, _, dim = self.current(db)
        if not journal or path is None:
            return not journal
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            return True
        try:
            return all(os.pread(fd, len(blob), row * row_bytes(path, dim)) == blob for row, blob in journal)
        finally:
            os.close(fd)

    def replace_all(self, tx: sqlite3.Connection, vectors: np.ndarray) -> Path | None:
        """Make a new file of exactly ``vectors`` (rows 0 .., stored as float16) current; return the file it
        replaces (delete it with :meth:`discard` once ``tx`` has committed)."""
        old, _, _ = self.current(tx)
        path = self._next_file(tx, old)
        self._write_at(path, 0, vectors, truncate=True, sync=True)
        tx.execute("DELETE FROM vector_journal")
        self._set(tx, vector_rows=len(vectors), vector_dim=vectors.shape[1])
        return old

    def compact_if_sparse(self, tx: sqlite3.Connection) -> Path | None:
        """When removed documents' rows pass :data:`SPARSE_SHARE` of the file, copy the live rows to a new file
        (renumbering ``vector_blocks``) and return the old one (delete it with :meth:`discard` after commit)."""
        old, committed, dim = self.current(tx)
        live = int(tx.execute("SELECT coalesce(sum(count), 0) FROM vector_blocks").fetchone()[0])
        if old is None or committed - live <= SPARSE_SHARE * committed:
            return None
        blocks = tx.execute("SELECT first_chunk, count, row FROM vector_blocks ORDER BY first_chunk").fetchall()
        path = self._next_file(tx, old)
        width = row_bytes(old, dim)
        moves: list[tuple[int, int]] = []
        written = 0
        with open(old, "rb") as source, open(path, "wb") as out:
            for first, count, row in blocks:
                _copy_bytes(source.fileno(), row * width, count * width, out)
                moves.append((written, first))
                written += count
            out.flush()
            _datasync(out.fileno())
        tx.executemany("UPDATE vector_blocks SET row=? WHERE first_chunk=?", moves)
        tx.execute("DELETE FROM vector_journal")
        self._set(tx, vector_rows=written)
        return old

    def discard_all_but_current(self, tx: sqlite3.Connection) -> None:
        """Delete every vector file of this database but the current one (call holding the write lock, ``tx``)."""
        self._discard_all_but(self.current(tx)[0])

    def discard(self, path: Path | None) -> None:
        """Delete a file a committed switch left behind."""
        if path is not None:
            path.unlink(missing_ok=True)

    # -- helpers ------------------------------------------------------------------------------------------
    @staticmethod
    def _set(tx: sqlite3.Connection, **values: int) -> None:
        tx.executemany("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)",
                       [(key, str(value)) for key, value in values.items()])

    def _next_file(self, tx: sqlite3.Connection, current: Path | None) -> Path:
        """Create the file after ``current`` (empty) and name it current in ``tx``, once every other vector file
        of this database is gone (:meth:`_discard_all_but`). Its directory entry is made durable first:
        fdatasync makes a file's bytes durable, not its name, and a commit must never name a file that a power
        cut can take back."""
        self._discard_all_but(current)
        name = f"{self.stem}.vectors-{self._number(current) + 1}.f16"
        path = self.directory / name
        path.write_bytes(b"")
        sync_directory(self.directory)
        tx.execute("INSERT OR REPLACE INTO meta(key, value) VALUES ('vector_file', ?)", (name,))
        return path

    def _number(self, path: Path | None) -> int:
        found = re.fullmatch(re.escape(self.stem) + r"\.vectors-(\d+)\.f(?:16|32)", path.name) if path else None
        return int(found.group(1)) if found else 0

    def _discard_all_but(self, keep: Path | None) -> None:
        """Delete every vector file of this database but ``keep``: old files whose deletion a crash prevented,
        and files of switches that never committed (called holding the write lock, so no one is writing one)."""
        for other in self.directory.glob(f"{_glob_escape(self.stem)}.vectors-*.f[13][62]"):
            if other != keep and self._number(other):
                other.unlink(missing_ok=True)

    @staticmethod
    def _write_at(path: Path, row: int, vectors: np.ndarray, *, truncate: bool, sync: bool) -> None:
        """Write ``vectors`` at row ``row`` in the file's dtype (cutting whatever an uncommitted write left after
        them); ``sync``: fdatasync, durable before the transaction that names them commits."""
        import numpy as np

        data = np.ascontiguousarray(vectors, row_dtype(path))
        width = data.shape[1] * data.itemsize if data.ndim == 2 else 0
        fd = os.open(path, os.O_RDWR | os.O_CREAT | (os.O_TRUNC if truncate else 0), 0o644)
        try:
            end = row * width + data.nbytes
            if data.nbytes:
                os.pwrite(fd, data.tobytes(), row * width)
            if os.fstat(fd).st_size > end:
                os.ftruncate(fd, end)
            if sync:
                _datasync(fd)
        finally:
            os.close(fd)


def missing_file(exc: FileNotFoundError) -> StoreError:
    """The error of a library whose vector file is gone (copied without it, or deleted), read twice."""
    return StoreError(f"{exc.filename}: the library's vector file is missing; a library is its SQLite file and this "
                      "file together (docs/DEPLOY.md, backup), or ingest its documents again")


def sync_directory(directory: Path) -> None:
    """fsync ``directory``, making the names of files created or renamed in it durable."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory descriptors
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover - filesystems that refuse it
        pass
    finally:
        os.close(fd)


def _copy_bytes(source: int, offset: int, length: int, out: IO[bytes]) -> None:
    """Append ``length`` bytes of ``source`` from ``offset`` to ``out``, in pieces of at most 8 MB."""
    while length > 0:
        piece = os.pread(source, min(length, 8 << 20), offset)
        if not piece:
            raise OSError(f"the vector file ends {length} bytes short of its rows")
        out.write(piece)
        offset += len(piece)
        length -= len(piece)


def _glob_escape(text: str) -> str:
    """``text`` with glob's special characters matched literally."""
    return re.sub(r"([*?\[])", r"[\1]", text)


def block_rows(chunks: Iterable[tuple[int, int]], first_row: int) -> list[tuple[int, int, int, int]]:
    """(first chunk, doc, count, row) of each run of consecutive chunk ids of one document in ``chunks`` ((chunk
    id, doc id) in id order), whose vectors are rows ``first_row ..`` in the same order."""
    blocks: list[list[int]] = []
    for cid, doc in chunks:
        if blocks and cid == blocks[-1][0] + blocks[-1][2] and doc == blocks[-1][1]:
            blocks[-1][2] += 1
        else:
            row = blocks[-1][3] + blocks[-1][2] if blocks else first_row
            blocks.append([cid, doc, 1, row])
    return [(b[0], b[1], b[2], b[3]) for b in blocks]
