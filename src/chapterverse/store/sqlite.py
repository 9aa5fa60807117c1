"""The embedded store: one SQLite file per library (WAL), FTS5 for its own BM25, vectors in a file beside it.

Every write is one ``BEGIN IMMEDIATE`` transaction, so a crash or an exception mid-ingest leaves the
previous state intact; WAL lets searches run while a write is in progress. Connections are per
thread; writes are serialized by SQLite's own lock (``busy_timeout``), not by Python code.

Vectors are little-endian float16 rows of one flat file beside the database (:mod:`.vectorfile`), written
before the transaction that names them commits; ``vector_blocks`` maps each run of consecutive chunk ids of
one document to its rows (a document's chunks get consecutive ids, so normally one block per document). The
store records which embedding model and dimension made them and refuses to mix. That row is the library's one
durable copy of a vector: the embedding cache holds only vectors of text the library does not (a chunk's
``text_hash`` finds the library's own), and the vector index maps the same file instead of copying it.
numpy is imported by the methods that build arrays, so commands that only read rows (``chapterverse docs``)
start without it.

A chunk row holds what the chunk adds to its file's canonical text, not what can be derived from it: its span
(code points and UTF-8 bytes, migration 6), headings, metadata and the hash of its text. Its terms are the
analyzer's terms of that span in its document's language, made when an index reads them
(:meth:`_IndexFeed.lexical_rows_since`); only terms a writer gave that differ from those are kept
(``own_terms``). The lexical index beside the file holds the postings searches read; this store's own BM25
(:meth:`SQLiteStore.lexical_search`, for benchmarks and for the retriever while a large library's lexical
index is built) reads a full-text index it derives on first use, per connection, in SQLite's temporary
database, so the library file keeps no second copy of every term (migration 8).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sqlite3
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, TypeVar

from ..errors import StoreError
from ..positions import without_nul
from .protocol import IndexFeed, LexicalRow, VectorSearch
from .sharedreads import (
    SharedReads,
    cannot_open,
    chunks_off_their_text,
    chunks_without_vectors,
    newer_schema,
    no_chat,
    refuse_unmatched_vectors,
)
from .records import (
    CHUNK_COLUMNS,
    DOC_COLUMNS,
    ChunkRecord,
    NewDocument,
    chunk_record,
    document_record,
    nul_free,
    vector_blob,
)
from .vectorfile import JOURNAL_SCHEMA, VectorFile, VectorRows, block_rows, map_rows, missing_file, row_bytes, row_dtype

if TYPE_CHECKING:
    import numpy as np

try:  # POSIX; elsewhere (Windows) lock() and locked() coordinate nothing
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

__all__ = ["SQLiteStore", "SCHEMA_VERSION"]

_T = TypeVar("_T")


_M001_INITIAL = """
        CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
        CREATE TABLE documents(
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            source TEXT NOT NULL,
            title TEXT NOT NULL,
            format TEXT NOT NULL,
            content_hash TEXT NOT NULL,
            size_bytes INTEGER NOT NULL,
            language TEXT NOT NULL,
            metadata TEXT NOT NULL,
            dynamic INTEGER NOT NULL,
            ephemeral INTEGER NOT NULL,
            created_at TEXT NOT NULL);
        CREATE INDEX documents_source ON documents(source);
        CREATE INDEX documents_hash ON documents(content_hash);
        CREATE TABLE files(
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            doc_id INTEGER NOT NULL REFERENCES documents(id) ON DELETE CASCADE,
            ordinal INTEGER NOT NULL,
            title TEXT NOT NULL,
            label TEXT NOT NULL,
            has_text INTEGER NOT NULL,
            text TEXT NOT NULL);
        CREATE INDEX files_doc ON files(doc_id, ordinal);
        CREATE TABLE toc(
            doc_id INTEGER NOT NULL REFERENCES documents(id) ON DELETE CASCADE,
            ordinal INTEGER NOT NULL,
            level INTEGER NOT NULL,
            title TEXT NOT NULL,
            file_id INTEGER NOT NULL,
            offset INTEGER NOT NULL);
        CREATE INDEX toc_doc ON toc(doc_id, ordinal);
        CREATE TABLE segments(
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            doc_id INTEGER NOT NULL REFERENCES documents(id) ON DELETE CASCADE,
            seq INTEGER NOT NULL,
            title_path TEXT NOT NULL,
            start_file INTEGER NOT NULL,
            start_offset INTEGER NOT NULL,
            end_file INTEGER NOT NULL,
            end_offset INTEGER NOT NULL,
            content_hash TEXT NOT NULL);
        CREATE INDEX segments_doc ON segments(doc_id, seq);
        CREATE TABLE chunks(
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            doc_id INTEGER NOT NULL REFERENCES documents(id) ON DELETE CASCADE,
            file_id INTEGER NOT NULL,
            start INTEGER NOT NULL,
            "end" INTEGER NOT NULL,
            text TEXT NOT NULL,
            source TEXT NOT NULL,
            chunk_index INTEGER NOT NULL,
            metadata TEXT NOT NULL,
            title_path TEXT NOT NULL,
            terms TEXT NOT NULL,
            heading_terms TEXT NOT NULL);
        CREATE INDEX chunks_doc ON chunks(doc_id);
        CREATE INDEX chunks_source ON chunks(source, chunk_index);
        CREATE INDEX chunks_file ON chunks(file_id, start);
        CREATE VIRTUAL TABLE chunks_fts USING fts5(
            terms, heading_terms, content='chunks', content_rowid='id',
            tokenize='unicode61 remove_diacritics 2');
        CREATE VIRTUAL TABLE chunks_vocab USING fts5vocab(chunks_fts, 'row');
        CREATE TRIGGER chunks_ai AFTER INSERT ON chunks BEGIN
            INSERT INTO chunks_fts(rowid, terms, heading_terms) VALUES (new.id, new.terms, new.heading_terms);
        END;
        CREATE TRIGGER chunks_ad AFTER DELETE ON chunks BEGIN
            INSERT INTO chunks_fts(chunks_fts, rowid, terms, heading_terms)
            VALUES ('delete', old.id, old.terms, old.heading_terms);
        END;
        CREATE TABLE vectors(
            chunk_id INTEGER PRIMARY KEY REFERENCES chunks(id) ON DELETE CASCADE,
            vector BLOB NOT NULL);
        CREATE TABLE embedding_cache(
            model TEXT NOT NULL,
            text_hash TEXT NOT NULL,
            vector BLOB NOT NULL,
            PRIMARY KEY(model, text_hash)) WITHOUT ROWID;
        CREATE TABLE summaries(
            segment_hash TEXT NOT NULL,
            model TEXT NOT NULL,
            prompt_version TEXT NOT NULL,
            text TEXT NOT NULL,
            dropped_tags INTEGER NOT NULL,
            created_at TEXT NOT NULL,
            PRIMARY KEY(segment_hash, model, prompt_version));
        CREATE TABLE chats(
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            doc_id INTEGER,
            title TEXT NOT NULL,
            created_at TEXT NOT NULL);
        CREATE TABLE messages(
            chat_id INTEGER NOT NULL REFERENCES chats(id) ON DELETE CASCADE,
            seq INTEGER NOT NULL,
            role TEXT NOT NULL,
            content TEXT NOT NULL,
            result TEXT,
            created_at TEXT NOT NULL,
            PRIMARY KEY(chat_id, seq));
"""

_M002_VECTOR_BLOCKS = """
        CREATE TABLE vector_blocks(
            first_chunk INTEGER PRIMARY KEY,
            doc_id INTEGER NOT NULL REFERENCES documents(id) ON DELETE CASCADE,
            count INTEGER NOT NULL,
            vectors BLOB NOT NULL);
        CREATE INDEX vector_blocks_doc ON vector_blocks(doc_id);
        ALTER TABLE chunks ADD COLUMN text_hash BLOB;
        CREATE INDEX chunks_text_hash ON chunks(text_hash);
        DROP TRIGGER chunks_ai;
"""
"""``vector_blocks``: chunks ``first_chunk .. first_chunk + count - 1`` (one document) and their vectors, row
after row. ``chunks.text_hash``: the first 16 bytes of the SHA-256 of the chunk's text, what the embedding
cache is keyed by. The insert trigger of the full-text index goes: a write fills it with one batch."""


def _m002_vector_blocks(db: sqlite3.Connection) -> None:
    """Move per-chunk vector rows into blocks, hash every chunk's text, and drop cached vectors the library
    now holds itself."""
    for statement in filter(str.strip, _M002_VECTOR_BLOCKS.split(";")):  # executescript would commit first
        db.execute(statement)
    rows = db.execute("SELECT v.chunk_id, c.doc_id, v.vector FROM vectors v JOIN chunks c ON c.id=v.chunk_id"
                      " ORDER BY v.chunk_id")
    _insert_blob_blocks(db, rows)
    db.execute("DROP TABLE vectors")
    hashes = [(_text_hash(text), cid) for cid, text in db.execute("SELECT id, text FROM chunks")]
    db.executemany("UPDATE chunks SET text_hash=? WHERE id=?", hashes)
    db.execute("DELETE FROM embedding_cache WHERE model=(SELECT value FROM meta WHERE key='embedding_model')"
               " AND substr(text_hash, 1, 32) IN (SELECT lower(hex(text_hash)) FROM chunks)")


_M003_FTS_FOLLOWS = """
        INSERT OR REPLACE INTO meta(key, value) VALUES ('fts_through', (SELECT coalesce(max(id), 0) FROM chunks));
        DROP TRIGGER chunks_ad;
        CREATE TRIGGER chunks_ad AFTER DELETE ON chunks
        WHEN old.id <= (SELECT CAST(value AS INTEGER) FROM meta WHERE key = 'fts_through') BEGIN
            INSERT INTO chunks_fts(chunks_fts, rowid, terms, heading_terms)
            VALUES ('delete', old.id, old.terms, old.heading_terms);
        END;
"""
"""The full-text index follows the chunks when it is read, not in every write (:meth:`SQLiteStore.catch_up`):
meta ``fts_through`` is the largest chunk id it holds, and a removed chunk leaves it only if it is there."""

def _m004_vector_file(db: sqlite3.Connection) -> None:
    """Move every vector block's BLOB into the vector file (rows in chunk id order); ``vector_blocks`` keeps
    where each block's rows are."""
    import numpy as np

    database = Path(db.execute("PRAGMA database_list").fetchone()[2])
    db.execute(JOURNAL_SCHEMA)
    db.execute("CREATE TABLE vector_rows(first_chunk INTEGER PRIMARY KEY,"
               " doc_id INTEGER NOT NULL REFERENCES documents(id) ON DELETE CASCADE,"
               " count INTEGER NOT NULL, row INTEGER NOT NULL)")
    blocks = db.execute("SELECT first_chunk, doc_id, count, vectors FROM vector_blocks ORDER BY first_chunk").fetchall()
    if blocks:
        matrix = np.concatenate([np.frombuffer(b[3], "<f4").reshape(b[2], -1) for b in blocks])
        VectorFile(database).replace_all(db, matrix)
    rows = np.cumsum([0] + [b[2] for b in blocks])
    db.executemany("INSERT INTO vector_rows VALUES (?,?,?,?)",
                   ((b[0], b[1], b[2], int(row)) for b, row in zip(blocks, rows)))
    db.execute("DROP TABLE vector_blocks")
    db.execute("ALTER TABLE vector_rows RENAME TO vector_blocks")
    db.execute("CREATE INDEX vector_blocks_doc ON vector_blocks(doc_id)")


_REANALYZED_CHUNKS = 2_000
"""Chunks migration 5 reads, analyses and writes back at a time (their text in memory, not the library's)."""


def _m005_hyphenated_words(db: sqlite3.Connection) -> None:
    """Analyse every chunk's text and headings again: the analyzer now also indexes the joined form of each
    hyphenated word (``analysis.compound_words``: "red-headed" gives "redhead" too), and a library whose terms
    lack it would not find the book's "red-headed" for the question "Redheaded?", while one ingested today would.
    The full-text index is rebuilt from the new terms, and the lexical index beside the file is rebuilt too (its
    ``FORMAT`` 2 does not read the files of format 1, which hold the old terms). A library set back from
    schema 8, whose terms are derived when read, gets its heading terms analysed again."""
    from ..chunking.context import stored_terms  # what ingest writes for a chunk, not a copy of it

    stored = "terms" in {row[1] for row in db.execute("PRAGMA table_info(chunks)")}
    documents = {row[0]: document_record(row) for row in db.execute(f"SELECT {DOC_COLUMNS} FROM documents d")}
    after = 0
    while rows := db.execute(f"SELECT {CHUNK_COLUMNS} FROM chunks c JOIN documents d ON d.id=c.doc_id"
                             " WHERE c.id > ? ORDER BY c.id LIMIT ?", (after, _REANALYZED_CHUNKS)).fetchall():
        chunks = [chunk_record(row) for row in rows]
        _read_from_files(db, [c for c in chunks if not c.text and c.end > c.start])  # a library set back from 6
        if stored:
            db.executemany("UPDATE chunks SET terms=?, heading_terms=? WHERE id=?",
                           ((*stored_terms(c, documents[c.doc_id]), c.id) for c in chunks))
        else:
            db.executemany("UPDATE chunks SET heading_terms=? WHERE id=?",
                           ((stored_terms(c, documents[c.doc_id])[1], c.id) for c in chunks))
        after = chunks[-1].id
    if not after:
        return  # a new library: nothing was analysed the old way, and its generation stays 0
    if stored:
        db.execute("INSERT INTO chunks_fts(chunks_fts) VALUES ('rebuild')")
        db.execute("INSERT OR REPLACE INTO meta(key, value) VALUES ('fts_through',"
                   " (SELECT coalesce(max(id), 0) FROM chunks))")
    SQLiteStore._bump(db)


def _m006_chunk_spans(db: sqlite3.Connection) -> None:
    """A chunk's text is a span of its file's canonical text, which the library keeps already: the row names
    the span's UTF-8 bytes (``utf8_start``, ``utf8_end``) instead of holding a copy (``text`` becomes ``''``).
    A chunk whose stored text is not its file's text at its position (none is written so) keeps its text. Run
    again (a library whose version was set back), it adds nothing and leaves the spans as they are."""
    columns = {row[1] for row in db.execute("PRAGMA table_info(chunks)")}
    for column in ("utf8_start", "utf8_end"):
        if column not in columns:
            db.execute(f"ALTER TABLE chunks ADD COLUMN {column} INTEGER")
    for (file_id,) in db.execute("SELECT DISTINCT file_id FROM chunks").fetchall():
        row = db.execute("SELECT text FROM files WHERE id=?", (file_id,)).fetchone()
        if row is None:
            continue
        text = row[0]
        spans = [(cid, start, end) for cid, start, end, own in
                 db.execute('SELECT id, start, "end", text FROM chunks WHERE file_id=?', (file_id,)).fetchall()
                 if 0 <= start <= end <= len(text) and text[start:end] == own]
        at = _byte_offsets(text, [p for _, start, end in spans for p in (start, end)])
        db.executemany("UPDATE chunks SET text='', utf8_start=?, utf8_end=? WHERE id=?",
                       ((at[start], at[end], cid) for cid, start, end in spans))


def _m007_half_vectors(db: sqlite3.Connection) -> None:
    """Rewrite a vector file of float32 rows as float16 (:mod:`.vectorfile`), every row where it was (rows of
    removed documents too, so ``vector_blocks`` stays as it is), journaled rows as journaled: half the bytes of a
    library's largest part. The old file is deleted once this has committed (:meth:`SQLiteStore._migrate`)."""
    import numpy as np

    vector_file = VectorFile(Path(db.execute("PRAGMA database_list").fetchone()[2]))
    path, committed, dim = vector_file.current(db)
    if path is None or row_dtype(path) != "<f4":
        return
    rows = np.array(map_rows(path, 0, committed, dim), np.float32)
    for row, blob in db.execute("SELECT row, vectors FROM vector_journal"):  # what a power cut may have lost
        journaled = np.frombuffer(blob, "<f4").reshape(-1, dim)
        rows[row:row + len(journaled)] = journaled
    vector_file.replace_all(db, rows)


_M008_DROPPED = """
        DROP TRIGGER IF EXISTS chunks_ad;
        DROP TABLE IF EXISTS chunks_vocab;
        DROP TABLE IF EXISTS chunks_fts;
        DELETE FROM meta WHERE key = 'fts_through';
        ALTER TABLE chunks ADD COLUMN own_terms TEXT
"""


def _m008_derived_terms(db: sqlite3.Connection) -> None:
    """A chunk's terms are derived from its text when read (:func:`_lexical_rows`), not stored: ``own_terms``
    keeps only those a writer gave that differ from the analyzer's (none that ingest writes), ``terms`` goes, and
    so does the full-text index of every term (FTS5, a quarter of the file), which searches never read: the
    store's own BM25 derives one when it is asked (:meth:`SQLiteStore.lexical_search`). The lexical index beside
    the file holds the same terms and stays valid. Run again (a library whose version was set back), it finds no
    ``terms`` and changes nothing."""
    if "terms" not in {row[1] for row in db.execute("PRAGMA table_info(chunks)")}:
        return
    for statement in filter(str.strip, _M008_DROPPED.split(";")):
        db.execute(statement)
    after = 0
    while rows := db.execute('SELECT c.id, c.doc_id, c.file_id, NULL, c.heading_terms, c.text, c.start, c."end",'
                             " d.language, c.terms FROM chunks c JOIN documents d ON d.id=c.doc_id WHERE c.id > ?"
                             " ORDER BY c.id LIMIT ?", (after, _REANALYZED_CHUNKS)).fetchall():
        derived = _derived(db, [row[:9] for row in rows])
        db.executemany("UPDATE chunks SET own_terms=? WHERE id=?",
                       ((row[9], row[0]) for row, made in zip(rows, derived) if made[3] != row[9]))
        after = rows[-1][0]
    db.execute("ALTER TABLE chunks DROP COLUMN terms")


MIGRATIONS: list[str | Callable[[sqlite3.Connection], None]] = [
    _M001_INITIAL, _m002_vector_blocks, _M003_FTS_FOLLOWS, _m004_vector_file, _m005_hyphenated_words,
    _m006_chunk_spans, _m007_half_vectors, _m008_derived_terms]
"""Each migration is one SQL script or function, applied in one transaction together with its ``user_version``."""
SCHEMA_VERSION = len(MIGRATIONS)


@contextmanager
def read_transaction(db: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """One read transaction on ``db`` (or the one already open), so that several reads see one state of the
    library (WAL): the vector file's meta and its blocks, an index's generation and its rows."""
    if db.in_transaction:
        yield db
        return
    db.execute("BEGIN")
    try:
        yield db
    finally:
        db.execute("COMMIT")


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _text_hash(text: str) -> bytes:
    """What ``chunks.text_hash`` holds: 16 bytes of the SHA-256 the embedding cache's hex keys spell out."""
    return hashlib.sha256(text.encode()).digest()[:16]


def _byte_offsets(text: str, positions: Iterable[int]) -> dict[int, int]:
    """The UTF-8 byte offset in ``text`` of each code-point position (one pass over the text, in order)."""
    if text.isascii():
        return {p: p for p in positions}
    offsets: dict[int, int] = {}
    at = size = 0
    for position in sorted(set(positions)):
        size += len(text[at:position].encode())
        offsets[position] = size
        at = position
    return offsets


_MMAP_BYTES = 0x7FFF0000
"""How much of the library file a connection maps (SQLite's own upper limit; address space, not memory)."""

_WHOLE_FILE_READS = 8
"""Chunks of one file read at once from which the file's whole text is read (and sliced), not each span."""


def _read_from_files(db: sqlite3.Connection, records: Sequence[ChunkRecord]) -> None:
    """Give each record the text of its span, slicing its file's text (read once a file)."""
    texts: dict[int, str] = {}
    for record in records:
        if record.file_id not in texts:
            texts[record.file_id] = db.execute("SELECT text FROM files WHERE id=?", (record.file_id,)).fetchone()[0]
        record.text = texts[record.file_id][record.start:record.end]


_LEXICAL_COLUMNS = ('c.id, c.doc_id, c.file_id, c.own_terms, c.heading_terms, c.text, c.start, c."end",'
                    " d.language")
"""Columns of ``chunks c JOIN documents d`` that :func:`_derived` makes a lexical row of."""


def _lexical_rows(db: sqlite3.Connection, where: str, args: Sequence[Any]) -> list[LexicalRow]:
    """``lexical_rows()`` of the chunks ``where`` selects (``ORDER BY`` and ``LIMIT`` included)."""
    rows = db.execute(f"SELECT {_LEXICAL_COLUMNS} FROM chunks c JOIN documents d ON d.id=c.doc_id {where}",
                      args).fetchall()
    return _derived(db, rows)


def _derived(db: sqlite3.Connection, rows: Sequence[Sequence[Any]]) -> list[LexicalRow]:
    """(chunk id, doc id, file id, terms, heading terms) of rows of :data:`_LEXICAL_COLUMNS`: a chunk's own terms
    where it has them, else the analyzer's terms of its text in its document's language (what ingest indexes),
    each file's text read once."""
    from ..analysis import index_terms

    texts: dict[int, str] = {}
    out: list[LexicalRow] = []
    for cid, doc, file_id, own, heading, text, start, end, language in rows:
        if own is None:
            if not text and end > start:
                if file_id not in texts:
                    texts[file_id] = db.execute("SELECT text FROM files WHERE id=?", (file_id,)).fetchone()[0]
                text = texts[file_id][start:end]
            own = index_terms(text, language)
        out.append((cid, doc, file_id, own, heading))
    return out


def _json(value: object, empty: str) -> str:
    """``value`` as stored JSON; ``empty`` without calling the encoder (most chunks have no metadata)."""
    return json.dumps(value, ensure_ascii=False) if value else empty


def _insert_blob_blocks(tx: sqlite3.Connection, rows: Iterable[tuple[int, int, bytes]]) -> None:
    """Write (chunk id, doc id, vector bytes) rows, in id order, as one block per run of consecutive ids of
    one document (schema 2's BLOB blocks, which migration 4 moves into the vector file)."""
    run: list[tuple[int, int, bytes]] = []

    def flush() -> None:
        if run:
            tx.execute("INSERT INTO vector_blocks(first_chunk, doc_id, count, vectors) VALUES (?,?,?,?)",
                       (run[0][0], run[0][1], len(run), b"".join(r[2] for r in run)))
            run.clear()

    for row in rows:
        if run and (row[0] != run[-1][0] + 1 or row[1] != run[-1][1]):
            flush()
        run.append(row)
    flush()


def _hold(path: Path) -> IO[bytes]:
    """An open handle of ``path`` holding its exclusive ``flock``.

    A holder removes the file when it lets go, so after the lock is granted the path must still name the file
    that was locked; otherwise the lock is on a removed file and the next holder would not see it: try again.
    """
    while True:
        handle = open(path, "a+b")  # noqa: SIM115 - returned open, or closed below
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            if os.stat(path).st_ino == os.fstat(handle.fileno()).st_ino:
                return handle
        except FileNotFoundError:
            pass
        handle.close()


class _IndexFeed:
    """What a SQLite library lends the indexes beside its file (:class:`~chapterverse.store.protocol.IndexFeed`):
    reads of the calling thread's connection, so that those inside :meth:`read_transaction` see one state."""

    def __init__(self, store: SQLiteStore) -> None:
        self._store = store

    @property
    def path(self) -> Path:
        return self._store.path

    def read_transaction(self) -> AbstractContextManager[sqlite3.Connection]:
        return read_transaction(self._store.db)

    def lexical_rows_since(self, after: int, *, through: int | None = None, limit: int) -> list[LexicalRow]:
        """``lexical_rows()`` of the chunks with ``after`` < id (<= ``through``), ``limit`` at most, in id order."""
        where = "WHERE c.id > ?"
        args: list[int] = [after]
        if through is not None:
            where += " AND c.id <= ?"
            args.append(through)
        return _lexical_rows(self._store.db, where + " ORDER BY c.id LIMIT ?", [*args, limit])

    def vector_rows_since(self, chunk_id: int) -> VectorRows:
        return self._store.vector_file.since(self._store.db, chunk_id)

    def vector_file_state(self) -> tuple[Path | None, int, int]:
        return self._store.vector_file.current(self._store.db)

    def last_edit(self) -> int:
        row = self._store.db.execute("SELECT value FROM meta WHERE key='last_edit'").fetchone()
        return int(row[0]) if row else 0


class SQLiteStore(SharedReads):
    """A library in one SQLite file."""

    url: str
    lists_terms = True
    _P = "?"

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.url = f"sqlite:///{self.path}"
        self._local = threading.local()
        self.vector_file = VectorFile(self.path)
        """Where the vectors are (the vector index maps its rows: ``index_feed.vector_rows_since(chunk_id)``)."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._migrate()
            self.vector_file.recover(self.db)
        except sqlite3.Error as exc:
            raise cannot_open(str(self.path), exc) from exc

    # -- connections and transactions -------------------------------------------------------
    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=30)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        db.execute("PRAGMA foreign_keys=ON")
        db.execute("PRAGMA busy_timeout=30000")
        # Checkpoint every 40 MB of WAL, not every 4 MB: a 1,000-chunk document (about 5 MB) then no longer
        # pays a checkpoint (and its fsyncs) in every commit; 100 k chunks in bulk were written in 6.9 s instead
        # of 11.8 s here. After a checkpoint the WAL file is cut back to 64 MB at most.
        db.execute("PRAGMA wal_autocheckpoint=10000")
        db.execute("PRAGMA journal_size_limit=67108864")
        # Read pages through a memory map, not a read() each: a chunk's text is a span of its file's text, a chain
        # of overflow pages that SQLite walks from the first page to the span's bytes, so a span near the end of
        # a 500 KB file costs a hundred page reads into the connection's cache; mapped, each is a pointer.
        db.execute(f"PRAGMA mmap_size={_MMAP_BYTES}")
        return db

    @property
    def db(self) -> sqlite3.Connection:
        conn = getattr(self._local, "db", None)
        if conn is None:
            conn = self._local.db = self._connect()
        return conn

    def _rows(self, query: str, args: Sequence[Any] = ()) -> list[Any]:
        return self.db.execute(query, args).fetchall()

    def _one(self, query: str, args: Sequence[Any] = ()) -> Any:
        return self.db.execute(query, args).fetchone()

    def _source_prefix(self, prefix: str) -> tuple[str, list[Any]]:
        return "substr(c.source, 1, ?)=?", [len(prefix), prefix]

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One IMMEDIATE transaction: all or nothing. Committed data survives a crash (WAL + fsync at checkpoint)."""
        db = self.db
        db.execute("BEGIN IMMEDIATE")
        try:
            yield db
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")

    @property
    def vector_search(self) -> VectorSearch | None:
        """None: vectors are searched in process, by the memory-mapped index beside the file (``chapterverse.index.vectors``)."""
        return None

    @property
    def index_feed(self) -> IndexFeed | None:
        """What the memory-mapped indexes beside the file follow this library by (``chapterverse.index``)."""
        return _IndexFeed(self)

    def close(self) -> None:
        conn = getattr(self._local, "db", None)
        if conn is not None:
            conn.close()
            self._local.db = None
            self._local.fts_generation = None  # the derived full-text index went with the connection

    # -- locks between processes ------------------------------------------------------------
    def _lock_path(self, name: str) -> Path:
        return self.path.with_name(f"{self.path.name}.lock-{re.sub(r'[^A-Za-z0-9_.-]', '_', name)}")

    @contextmanager
    def lock(self, name: str) -> Iterator[None]:
        """Hold the library-wide lock ``name`` for the block: every process using this file waits for it.

        ``flock`` of ``<database>.lock-<name>``, a file that exists only while the lock is held (the kernel
        releases the lock if the process dies). Not reentrant.
        """
        if fcntl is None:  # pragma: no cover - Windows
            yield
            return
        path = self._lock_path(name)
        handle = _hold(path)
        try:
            yield
        finally:
            path.unlink(missing_ok=True)
            handle.close()

    def locked(self, name: str) -> bool:
        """Whether a process (this one included) holds ``lock(name)`` now."""
        if fcntl is None:  # pragma: no cover - Windows
            return False
        try:
            handle = open(self._lock_path(name), "rb")  # noqa: SIM115 - closed below
        except FileNotFoundError:
            return False
        with handle:
            try:
                fcntl.flock(handle.fileno(), fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
            return False

    def _migrate(self) -> None:
        db = self.db
        version = db.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise newer_schema(str(self.path), version, SCHEMA_VERSION)
        for number in range(version, SCHEMA_VERSION):
            migration = MIGRATIONS[number]
            try:
                if isinstance(migration, str):
                    db.executescript(f"BEGIN IMMEDIATE;\n{migration}\nPRAGMA user_version={number + 1};\nCOMMIT;")
                    continue
                db.execute("BEGIN IMMEDIATE")
                if int(db.execute("PRAGMA user_version").fetchone()[0]) == number:  # not done by another process
                    migration(db)
                    db.execute(f"PRAGMA user_version={number + 1}")
                db.execute("COMMIT")
            except sqlite3.Error:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise
        if version and version < SCHEMA_VERSION:
            self._discard_old_vector_files()
            self._give_back_freed_pages()

    def _discard_old_vector_files(self) -> None:
        """Delete the vector files the current one replaced (migration 7's float32 file), under the write lock."""
        with self.transaction() as tx:
            self.vector_file.discard_all_but_current(tx)

    def _give_back_freed_pages(self) -> None:
        """VACUUM after migrations that left a quarter of the file free (migration 4 moves every vector out:
        a library of Moby-Dick stayed 29 MB beside its 7.2 MB vector file). Skipped, to be done at a later open,
        when another connection holds the file."""
        db = self.db
        free, pages = (db.execute(f"PRAGMA {name}").fetchone()[0] for name in ("freelist_count", "page_count"))
        if free * 4 > pages:
            try:
                db.execute("VACUUM")
                db.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # in WAL mode the file shrinks at a checkpoint
            except sqlite3.OperationalError as exc:
                import logging  # here: quick commands (`docs`, `resolve`) start without the logging module

                logging.getLogger(__name__).info("%s: not compacted after its migration (%s)", self.path, exc)

    # -- meta -------------------------------------------------------------------------------
    def set_meta(self, key: str, value: str) -> None:
        with self.transaction() as tx:
            tx.execute("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", (key, value))

    @staticmethod
    def _bump(tx: sqlite3.Connection) -> None:
        tx.execute(
            "INSERT INTO meta(key, value) VALUES ('generation', '1') "
            "ON CONFLICT(key) DO UPDATE SET value = CAST(value AS INTEGER) + 1"
        )

    def check_embedding_model(self, name: str, dim: int) -> None:
        """Record the embedding model on first use; refuse vectors from any other."""
        stored = self.get_meta("embedding_model")
        if stored is None:
            with self.transaction() as tx:
                tx.execute("INSERT OR REPLACE INTO meta VALUES ('embedding_model', ?)", (name,))
                tx.execute("INSERT OR REPLACE INTO meta VALUES ('embedding_dim', ?)", (str(dim),))
            return
        self._refuse_another_model(str(self.path), name, dim)

    def replace_embedding_model(self, name: str, dim: int, vectors: dict[int, np.ndarray]) -> None:
        """Swap every chunk's vector (a new vector file) and the recorded model in one transaction."""
        import numpy as np

        with self.transaction() as tx:
            tx.execute("DELETE FROM vector_blocks")
            chunks = [(cid, doc) for cid, doc in tx.execute("SELECT id, doc_id FROM chunks ORDER BY id")
                      if cid in vectors]
            matrix = np.array([vectors[cid] for cid, _ in chunks], "<f4").reshape(len(chunks), dim)
            replaced = self.vector_file.replace_all(tx, matrix)
            tx.executemany("INSERT INTO vector_blocks(first_chunk, doc_id, count, row) VALUES (?,?,?,?)",
                           block_rows(chunks, 0))
            # The batches cached while re-embedding are the library's own vectors now: no second copy.
            tx.execute("DELETE FROM embedding_cache WHERE model=? AND substr(text_hash, 1, 32) IN"
                       " (SELECT lower(hex(text_hash)) FROM chunks)", (name,))
            tx.execute("INSERT OR REPLACE INTO meta VALUES ('embedding_model', ?)", (name,))
            tx.execute("INSERT OR REPLACE INTO meta VALUES ('embedding_dim', ?)", (str(dim),))
            self._bump(tx)
        self.vector_file.discard(replaced)

    # -- writes -----------------------------------------------------------------------------
    def add_document(self, doc: NewDocument, *, replace: Sequence[int] = ()) -> int:
        """Insert a whole document (and remove ``replace`` ids) atomically; return its id."""
        return self.add_documents([doc], replace=replace)[0]

    def add_documents(self, docs: Sequence[NewDocument], *, replace: Sequence[int] = ()) -> list[int]:
        """Insert every document (and remove ``replace`` ids) in one transaction; return their ids in order."""
        refuse_unmatched_vectors(docs)
        clean = [nul_free(doc) for doc in docs]
        with self.transaction() as tx:
            for old in replace:
                tx.execute("DELETE FROM documents WHERE id=?", (old,))
            replaced = self.vector_file.compact_if_sparse(tx) if replace else None
            rows = self._append_vectors(tx, clean)
            doc_ids = [self._insert_document(tx, doc, row) for doc, row in zip(clean, rows)]
            self._bump(tx)
        self.vector_file.discard(replaced)
        return doc_ids

    def _append_vectors(self, tx: sqlite3.Connection, docs: Sequence[NewDocument]) -> list[int]:
        """Every document's vectors written to the vector file in one append (a batch of small documents then
        pays one write and one journal entry, not one each); the first row of each document's."""
        import numpy as np

        blocks = [np.asarray(d.vectors, "<f4").reshape(len(d.chunks), -1) for d in docs if d.chunks]
        at = self.vector_file.append(tx, np.concatenate(blocks)) if blocks else 0
        rows = []
        for doc in docs:
            rows.append(at)
            at += len(doc.chunks)
        return rows

    def _insert_document(self, tx: sqlite3.Connection, doc: NewDocument, row: int) -> int:
        """The document's rows, its chunks naming vectors ``row ..`` of the vector file (:meth:`_append_vectors`)."""
        cur = tx.execute(
            "INSERT INTO documents(source, title, format, content_hash, size_bytes, language, metadata, dynamic,"
            " ephemeral, created_at) VALUES (?,?,?,?,?,?,?,?,?,?)",
            (doc.source, doc.title, doc.format, doc.content_hash, doc.size_bytes, doc.language,
             json.dumps(doc.metadata, ensure_ascii=False), int(doc.dynamic), int(doc.ephemeral), _now()),
        )
        doc_id = int(cur.lastrowid or 0)
        file_ids = [
            int(tx.execute(
                "INSERT INTO files(doc_id, ordinal, title, label, has_text, text) VALUES (?,?,?,?,?,?)",
                (doc_id, ordinal, f.title, f.label, int(f.has_text), f.text),
            ).lastrowid or 0)
            for ordinal, f in enumerate(doc.files)
        ]
        tx.executemany(
            "INSERT INTO toc(doc_id, ordinal, level, title, file_id, offset) VALUES (?,?,?,?,?,?)",
            ((doc_id, i, level, title, file_ids[fo], off) for i, (level, title, fo, off) in enumerate(doc.toc)),
        )
        tx.executemany(
            "INSERT INTO segments(doc_id, seq, title_path, start_file, start_offset, end_file, end_offset,"
            " content_hash) VALUES (?,?,?,?,?,?,?,?)",
            ((doc_id, s.seq, json.dumps(s.title_path, ensure_ascii=False), file_ids[s.start_ordinal],
              s.start_offset, file_ids[s.end_ordinal], s.end_offset, s.content_hash) for s in doc.segments),
        )
        self._insert_chunks(tx, doc, doc_id, file_ids, row)
        return doc_id

    def _insert_chunks(self, tx: sqlite3.Connection, doc: NewDocument, doc_id: int, file_ids: list[int],
                       row: int) -> None:
        """The chunks, one batch, and the block naming their vectors' rows (a chunk's terms are stored only when
        the writer gave its own: :func:`_derived`).

        Chunk ids are given, not left to AUTOINCREMENT row by row: the next ``len(chunks)`` ids (the write
        transaction holds the only write lock, and ``sqlite_sequence`` follows explicit ids), so the vectors
        are one block of rows of the vector file. Cached vectors of these texts are dropped: from now on the library holds them
        (``cached_vectors`` finds them here).
        """
        if not doc.chunks:
            return
        first = 1 + int(tx.execute(
            "SELECT max(coalesce((SELECT seq FROM sqlite_sequence WHERE name='chunks'), 0),"
            " coalesce((SELECT max(id) FROM chunks), 0))").fetchone()[0])
        texts = [doc.files[c.file_ordinal].text[c.start:c.end] for c in doc.chunks]
        positions: dict[int, list[int]] = {}
        for c in doc.chunks:
            positions.setdefault(c.file_ordinal, []).extend((c.start, c.end))
        at = {ordinal: _byte_offsets(doc.files[ordinal].text, spots) for ordinal, spots in positions.items()}
        tx.executemany(
            'INSERT INTO chunks(id, doc_id, file_id, start, "end", text, source, chunk_index, metadata, title_path,'
            " own_terms, heading_terms, text_hash, utf8_start, utf8_end) VALUES (?,?,?,?,?,'',?,?,?,?,?,?,?,?,?)",
            ((first + i, doc_id, file_ids[c.file_ordinal], c.start, c.end, c.source, c.chunk_index,
              _json(c.metadata, "{}"), _json(c.title_path, "[]"), c.terms, c.heading_terms, _text_hash(text),
              at[c.file_ordinal][c.start], at[c.file_ordinal][c.end])
             for i, (c, text) in enumerate(zip(doc.chunks, texts))),
        )
        tx.execute("INSERT INTO vector_blocks(first_chunk, doc_id, count, row) VALUES (?,?,?,?)",
                   (first, doc_id, len(doc.chunks), row))
        if tx.execute("SELECT 1 FROM embedding_cache LIMIT 1").fetchone() is not None:
            tx.executemany("DELETE FROM embedding_cache WHERE model=(SELECT value FROM meta WHERE"
                           " key='embedding_model') AND text_hash=?",
                           ((hashlib.sha256(t.encode()).hexdigest(),) for t in texts))

    def remove_documents(self, doc_ids: Sequence[int]) -> int:
        """Remove documents (and everything derived from them) atomically; return how many existed."""
        with self.transaction() as tx:
            removed = sum(tx.execute("DELETE FROM documents WHERE id=?", (i,)).rowcount for i in doc_ids)
            replaced = self.vector_file.compact_if_sparse(tx) if removed else None
            if removed:
                self._bump(tx)
        self.vector_file.discard(replaced)
        return removed

    def update_chunk_metadata(self, chunk_id: int, metadata: dict[str, Any], heading_terms: str,
                              vector: np.ndarray) -> bool:
        """New metadata, heading terms and vector for one chunk, in place (see the protocol), in one transaction.

        The vector goes to a new row of the vector file (rows are never rewritten: a reader may
        map the old one), and the chunk's block is split around it; its old row is dead space, copied away with
        removed documents' (:meth:`VectorFile.compact_if_sparse`). Meta ``last_edit`` records this generation,
        so the indexes beside the file, which follow by appending, rebuild (:meth:`_IndexFeed.last_edit`)."""
        import numpy as np

        heading_terms = without_nul(heading_terms)
        with self.transaction() as tx:
            if tx.execute("UPDATE chunks SET metadata=?, heading_terms=? WHERE id=?",
                          (_json(metadata, "{}"), heading_terms, chunk_id)).rowcount == 0:
                return False
            row = self.vector_file.append(tx, np.asarray(vector, "<f4").reshape(1, -1))
            self._move_vector(tx, chunk_id, row)
            replaced = self.vector_file.compact_if_sparse(tx)
            self._bump(tx)
            tx.execute("INSERT OR REPLACE INTO meta(key, value) SELECT 'last_edit', value FROM meta"
                       " WHERE key='generation'")
        self.vector_file.discard(replaced)
        return True

    @staticmethod
    def _move_vector(tx: sqlite3.Connection, chunk_id: int, row: int) -> None:
        """Point ``chunk_id``'s vector at ``row``: its block becomes those before it, itself, and those after."""
        first, doc, count, at = tx.execute(
            "SELECT first_chunk, doc_id, count, row FROM vector_blocks WHERE first_chunk <= ?"
            " ORDER BY first_chunk DESC LIMIT 1", (chunk_id,)).fetchone()
        before = chunk_id - first
        tx.execute("DELETE FROM vector_blocks WHERE first_chunk=?", (first,))
        blocks = [(first, doc, before, at), (chunk_id, doc, 1, row),
                  (chunk_id + 1, doc, count - before - 1, at + before + 1)]
        tx.executemany("INSERT INTO vector_blocks(first_chunk, doc_id, count, row) VALUES (?,?,?,?)",
                       [b for b in blocks if b[2] > 0])

    # -- document reads ---------------------------------------------------------------------
    def titles(self, doc_ids: Sequence[int]) -> dict[int, str]:
        ids = list(dict.fromkeys(doc_ids))
        marks = ",".join("?" * len(ids))
        return dict(self.db.execute(f"SELECT id, title FROM documents WHERE id IN ({marks})", ids).fetchall())

    def file_slice(self, file_id: int, start: int, end: int) -> str | None:
        """The exact text of a span, or None when the file is unknown or the span is out of range."""
        row = self.db.execute(
            "SELECT length(text), substr(text, ?, ?) FROM files WHERE id=?", (start + 1, end - start, file_id)
        ).fetchone()
        if row is None or end > row[0] or start < 0:
            return None
        return str(row[1])

    # -- chunks -----------------------------------------------------------------------------
    def chunks_by_ids(self, chunk_ids: Sequence[int]) -> dict[int, ChunkRecord]:
        ids = list(chunk_ids)
        rows = []
        with read_transaction(self.db) as db:  # the rows and the spans they name, of one state of the library
            for i in range(0, len(ids), 500):
                part = ids[i:i + 500]
                marks = ",".join("?" * len(part))
                rows += db.execute(f"SELECT {CHUNK_COLUMNS} FROM chunks c JOIN documents d ON d.id=c.doc_id"
                                   f" WHERE c.id IN ({marks})", part).fetchall()
            return {r.id: r for r in self._chunk_records(rows)}

    def chunks(self, *, doc_id: int | None = None, source_prefix: str | None = None, source_exact: str | None = None,
               limit: int | None = None, offset: int = 0) -> list[ChunkRecord]:
        with read_transaction(self.db):
            return super().chunks(doc_id=doc_id, source_prefix=source_prefix, source_exact=source_exact,
                                  limit=limit, offset=offset)

    def _chunk_records(self, rows: Sequence[Any]) -> list[ChunkRecord]:
        """Records of ``chunks`` rows, the text of each that names a span of its file's text read from there:
        by its UTF-8 bytes (SQLite's incremental BLOB reads, which read only the pages of those bytes), or, for
        many chunks of one file, from the file's text read once. Call it in the read transaction of ``rows``."""
        records = [chunk_record(r) for r in rows]
        spanned: dict[int, list[ChunkRecord]] = {}
        for record in records:
            if not record.text and record.end > record.start:
                spanned.setdefault(record.file_id, []).append(record)
        few = [r.id for group in spanned.values() if len(group) < _WHOLE_FILE_READS for r in group]
        ranges: dict[int, tuple[int, int]] = {}
        for i in range(0, len(few), 500):
            part = few[i:i + 500]
            marks = ",".join("?" * len(part))
            ranges.update((r[0], (r[1], r[2])) for r in self.db.execute(
                f"SELECT id, utf8_start, utf8_end FROM chunks WHERE id IN ({marks}) AND utf8_start IS NOT NULL", part))
        for file_id, group in spanned.items():
            if len(group) >= _WHOLE_FILE_READS:
                _read_from_files(self.db, group)
                continue
            with self.db.blobopen("files", "text", file_id, readonly=True) as blob:
                for record in group:
                    start, end = ranges[record.id]
                    blob.seek(start)
                    record.text = blob.read(end - start).decode()
        return records

    def source_counts(self) -> list[tuple[str, int, bool]]:
        rows = self.db.execute(
            "SELECT c.source, count(*), max(d.dynamic) FROM chunks c JOIN documents d ON d.id=c.doc_id"
            " GROUP BY c.source ORDER BY c.source"
        )
        return [(r[0], r[1], bool(r[2])) for r in rows]

    # -- search primitives ------------------------------------------------------------------
    def lexical_search(self, terms: Sequence[str], *, k: int, doc_ids: Sequence[int] | None = None,
                       heading_weight: float = 0.5, prefix: bool = False) -> list[tuple[int, float]]:
        """BM25 over stemmed terms (any term may match); higher score is better.

        ``prefix``: each term matches every indexed term that starts with it (FTS5 ``"term"*``), scored
        as one term, as if the index held only those prefixes.
        """
        if not terms:
            return []
        self._derive_full_text()
        star = "*" if prefix else ""
        match = " OR ".join('"' + t.replace('"', '""') + '"' + star for t in terms)
        sql = (
            "SELECT rowid, -bm25(chunks_fts, 1.0, ?) AS score FROM temp.chunks_fts WHERE chunks_fts MATCH ?"
        )
        args: list[Any] = [heading_weight, match]
        if doc_ids is not None:
            marks = ",".join("?" * len(doc_ids))
            sql += f" AND rowid IN (SELECT id FROM chunks WHERE doc_id IN ({marks}))"
            args += list(doc_ids)
        sql += " ORDER BY bm25(chunks_fts, 1.0, ?) LIMIT ?"
        args += [heading_weight, k]
        try:
            return [(int(r[0]), float(r[1])) for r in self.db.execute(sql, args)]
        except sqlite3.OperationalError as exc:
            raise StoreError(f"{self.path}: full-text search failed: {exc}") from exc

    def document_frequencies(self, terms: Sequence[str]) -> dict[str, int]:
        """How many chunks hold each of ``terms`` (0 for those none holds): the idf of a query word where no
        in-process lexical index is at hand (``chapterverse.search.relevance``)."""
        if not terms:
            return {}
        self._derive_full_text()
        marks = ",".join("?" * len(terms))
        found = dict(self.db.execute(f"SELECT term, doc FROM temp.chunks_vocab WHERE term IN ({marks})",
                                     list(terms)))
        return {t: int(found.get(t, 0)) for t in terms}

    def lexical_rows(self) -> list[LexicalRow]:
        """(chunk id, doc id, file id, terms, heading terms) of every chunk in id order, terms derived from the
        chunks' text where they kept none of their own (:func:`_derived`)."""
        with read_transaction(self.db) as db:
            return _lexical_rows(db, "ORDER BY c.id", ())

    def _derive_full_text(self) -> None:
        """Make this connection's full-text index (FTS5, in the temporary database) of every chunk's terms, unless
        it holds the library's current generation already: the store's own BM25 is read by benchmarks and by the
        retriever while a large library's lexical index is built, never by a search otherwise, so the library file
        keeps no copy of it. Contentless: BM25 reads only the index."""
        generation = self.generation()
        if getattr(self._local, "fts_generation", None) == generation:
            return
        db = self.db
        with read_transaction(db):
            generation = self.generation()
            rows = _lexical_rows(db, "ORDER BY c.id", ())
            db.execute("DROP TABLE IF EXISTS temp.chunks_vocab")
            db.execute("DROP TABLE IF EXISTS temp.chunks_fts")
            db.execute("CREATE VIRTUAL TABLE temp.chunks_fts USING fts5(terms, heading_terms, content='',"
                       " tokenize='unicode61 remove_diacritics 2')")
            db.execute("CREATE VIRTUAL TABLE temp.chunks_vocab USING fts5vocab(temp, chunks_fts, 'row')")
            db.executemany("INSERT INTO temp.chunks_fts(rowid, terms, heading_terms) VALUES (?,?,?)",
                           ((cid, terms, heading) for cid, _, _, terms, heading in rows))
        self._local.fts_generation = generation

    def load_vectors(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(chunk ids, doc ids, float32 matrix) of every stored vector, in chunk id order."""
        return self.vectors_since(0)

    # -- embedding cache --------------------------------------------------------------------
    def cached_vectors(self, model: str, text_hashes: Sequence[str]) -> dict[str, np.ndarray]:
        """The vectors ``model`` made of the texts with these SHA-256 hex digests: from the cache, and from the
        library's own chunks when ``model`` made the library's vectors."""
        import numpy as np

        found: dict[str, np.ndarray] = {}
        hashes = list(dict.fromkeys(text_hashes))
        for i in range(0, len(hashes), 500):
            part = hashes[i:i + 500]
            marks = ",".join("?" * len(part))
            rows = self.db.execute(
                f"SELECT text_hash, vector FROM embedding_cache WHERE model=? AND text_hash IN ({marks})",
                [model, *part],
            )
            found.update((r[0], np.frombuffer(r[1], dtype="<f4")) for r in rows)
        missing = [h for h in hashes if h not in found]
        if missing and model == self.get_meta("embedding_model"):
            found.update(self._library_vectors(missing))
        return found

    def _library_vectors(self, hex_hashes: Sequence[str]) -> dict[str, np.ndarray]:
        """Vectors of chunks whose text has one of these SHA-256 hex digests (one chunk per digest)."""
        by_key = {bytes.fromhex(h)[:16]: h for h in hex_hashes}
        keys = list(by_key)
        chunk_of: dict[int, str] = {}
        for i in range(0, len(keys), 500):
            part = keys[i:i + 500]
            marks = ",".join("?" * len(part))
            rows = self.db.execute(f"SELECT text_hash, min(id) FROM chunks WHERE text_hash IN ({marks})"
                                   " GROUP BY text_hash", part)
            chunk_of.update((int(r[1]), by_key[bytes(r[0])]) for r in rows)
        return {chunk_of[cid]: vec for cid, vec in self._vectors_by_ids(list(chunk_of)).items()}

    def _vectors_by_ids(self, chunk_ids: Sequence[int]) -> dict[int, np.ndarray]:
        """The stored vector of each known chunk id (float32, as written): only its row is read."""
        if not chunk_ids:  # every upsert asks for the texts the library already holds: usually none
            return {}
        return self._read_vectors(lambda db: self.vector_file.rows_of(db, chunk_ids))

    def cache_vectors(self, model: str, vectors: dict[str, np.ndarray]) -> None:
        with self.transaction() as tx:
            tx.executemany(
                "INSERT OR IGNORE INTO embedding_cache(model, text_hash, vector) VALUES (?,?,?)",
                ((model, h, vector_blob(v)) for h, v in vectors.items()),
            )

    # -- summaries --------------------------------------------------------------------------
    def summaries(self, segment_hashes: Sequence[str], model: str, prompt_version: str) -> dict[str, str]:
        found: dict[str, str] = {}
        hashes = list(dict.fromkeys(segment_hashes))
        for i in range(0, len(hashes), 500):
            part = hashes[i:i + 500]
            marks = ",".join("?" * len(part))
            rows = self.db.execute(
                f"SELECT segment_hash, text FROM summaries WHERE model=? AND prompt_version=?"
                f" AND segment_hash IN ({marks})",
                [model, prompt_version, *part],
            )
            found.update((r[0], r[1]) for r in rows)
        return found

    def put_summary(self, segment_hash: str, model: str, prompt_version: str, text: str, dropped_tags: int) -> None:
        with self.transaction() as tx:
            tx.execute(
                "INSERT OR REPLACE INTO summaries VALUES (?,?,?,?,?,?)",
                (segment_hash, model, prompt_version, without_nul(text), dropped_tags, _now()),
            )

    # -- chats ------------------------------------------------------------------------------
    def create_chat(self, doc_id: int | None, title: str) -> int:
        with self.transaction() as tx:
            return int(tx.execute("INSERT INTO chats(doc_id, title, created_at) VALUES (?,?,?)",
                                  (doc_id, without_nul(title), _now())).lastrowid or 0)

    def add_message(self, chat_id: int, role: str, content: str, result: dict[str, Any] | None = None) -> None:
        with self.transaction() as tx:
            # Checked, not left to the foreign key: an unknown chat is the caller's NotFoundError, as on PostgreSQL.
            if tx.execute("SELECT 1 FROM chats WHERE id=?", (chat_id,)).fetchone() is None:
                raise no_chat(chat_id)
            seq = tx.execute("SELECT coalesce(max(seq), -1) + 1 FROM messages WHERE chat_id=?", (chat_id,)).fetchone()[0]
            tx.execute(
                "INSERT INTO messages VALUES (?,?,?,?,?,?)",
                (chat_id, seq, role, without_nul(content), json.dumps(result, ensure_ascii=False) if result else None,
                 _now()),
            )

    # -- integrity --------------------------------------------------------------------------
    def integrity_problems(self) -> list[str]:
        """Disagreements between rows, the lexical index and the vectors (empty when consistent)."""
        db = self.db
        problems = []
        if db.execute("PRAGMA integrity_check").fetchone()[0] != "ok":
            problems.append("sqlite integrity_check failed")
        missing = db.execute(
            "SELECT count(*) FROM chunks c WHERE NOT EXISTS (SELECT 1 FROM vector_blocks b WHERE b.first_chunk ="
            " (SELECT max(first_chunk) FROM vector_blocks WHERE first_chunk <= c.id) AND c.id < b.first_chunk + b.count)"
        ).fetchone()[0]
        if missing:
            problems.append(chunks_without_vectors(missing))
        problems += self._vector_file_problems(db)
        bad_spans = self._chunks_off_their_text(db)
        if bad_spans:
            problems.append(chunks_off_their_text(bad_spans))
        return problems

    @staticmethod
    def _chunks_off_their_text(db: sqlite3.Connection) -> int:
        """Chunks whose own text is not their file's text at their position, or whose UTF-8 bytes name other text
        than their position does (each file's text read once)."""
        bad = 0
        for (file_id,) in db.execute("SELECT DISTINCT file_id FROM chunks").fetchall():
            row = db.execute("SELECT text FROM files WHERE id=?", (file_id,)).fetchone()
            if row is None:
                continue
            text: str = row[0]
            encoded = text.encode()
            for start, end, own, lo, hi in db.execute(
                    'SELECT start, "end", text, utf8_start, utf8_end FROM chunks WHERE file_id=?', (file_id,)):
                span = text[start:end] if 0 <= start <= end <= len(text) else None
                if lo is None:
                    bad += span != own
                else:
                    bad += span is None or own != "" or encoded[lo:hi] != span.encode()
        return bad

    def _vector_file_problems(self, db: sqlite3.Connection) -> list[str]:
        """Blocks whose rows the vector file does not hold, rows two blocks claim, a file shorter than what
        was committed, a dimension other than the embedding model's."""
        path, committed, dim = self.vector_file.current(db)
        problems = []
        blocks = db.execute("SELECT row, count FROM vector_blocks ORDER BY row").fetchall()
        if blocks and path is None:
            return [f"{len(blocks)} vector blocks but no vector file"]
        if any(row + count > committed for row, count in blocks):
            problems.append(f"vector blocks name rows past the {committed} committed")
        if any(a[0] + a[1] > b[0] for a, b in zip(blocks, blocks[1:])):
            problems.append("two vector blocks claim the same rows")
        if path is not None:
            held = path.stat().st_size // row_bytes(path, dim) if path.exists() and dim else 0
            if held < committed:
                problems.append(f"{path.name} holds {held} vectors, {committed} were committed")
        recorded = int(self.get_meta("embedding_dim") or 0)
        if recorded and dim and recorded != dim:
            problems.append(f"the vector file holds {dim} values per chunk, the embedding model makes {recorded}")
        return problems

    def rebuild_lexical_index(self) -> None:
        """Bump the generation: every index derived from the chunks (the files beside the library, this store's
        full-text index) is made again from them at its next read."""
        with self.transaction() as tx:
            self._bump(tx)

    def catch_up(self) -> None:
        """Nothing to bring up: the store keeps no index of its own that follows writes lazily (the full-text
        index is derived when it is read, :meth:`_derive_full_text`)."""

    # -- feed for the persistent vector index (chapterverse.index.vectors) ----------------------
    def vectors_since(self, chunk_id: int, *, limit: int | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(chunk ids, doc ids, float32 matrix) of the vectors of chunks with id > ``chunk_id``, in id order.

        Chunk ids only grow (AUTOINCREMENT), so a reader that remembers the largest id it has seen gets exactly
        what was written since; ``limit`` pages through a large library without holding it all in memory.
        """
        import numpy as np

        def located(db: sqlite3.Connection) -> tuple[VectorRows, np.ndarray | None]:
            found = self.vector_file.since(db, chunk_id)
            return found, None if found.path is None else map_rows(found.path, 0, found.committed, found.dim)

        found, mapped = self._read_vectors(located)
        rows = found.rows if limit is None else found.rows[:limit]
        if mapped is None:
            matrix = np.zeros((0, found.dim), np.float32)
        elif len(rows) and rows[-1] - rows[0] == len(rows) - 1 and bool(np.all(np.diff(rows) == 1)):
            # one run (no removal or edit since): a slice, not a gather
            matrix = np.array(mapped[rows[0]:rows[-1] + 1], np.float32)
        else:
            matrix = np.array(mapped[rows], np.float32)
        return found.ids[:len(rows)], found.docs[:len(rows)], matrix

    def _read_vectors(self, read: Callable[[sqlite3.Connection], _T]) -> _T:
        """``read(db)`` of the vector file in one read transaction. The file that transaction names may have been
        replaced and deleted meanwhile (a removal that copied the live rows away,
        :meth:`VectorFile.compact_if_sparse`): then it is read once more, from the new state."""
        def attempt() -> _T:
            with read_transaction(self.db) as db:
                return read(db)

        try:
            return attempt()
        except FileNotFoundError:
            try:
                return attempt()
            except FileNotFoundError as exc:
                raise missing_file(exc) from exc


    def document_ids(self) -> np.ndarray:
        """The id of every document, ascending."""
        import numpy as np

        rows = self.db.execute("SELECT id FROM documents ORDER BY id").fetchall()
        return np.fromiter((r[0] for r in rows), np.int64, len(rows))
