"""`chapterverse bench ingest`: the write path without embedding, and what a chunk costs on disk.

Two workloads over the same real English passages (``bench.scale.text_pool``), each with random unit vectors
made before the clock starts (embedding is not measured: it is the embedder's speed, not the library's):

- **upserts**: many small documents, each written the way the knowledge-base API's ``/v1/rag/upsert/document``
  writes it (``KnowledgeBase.upsert``: chunking, index terms, the embedding cache, the store lock, one
  transaction), then both indexes brought up to date once;
- **upserts, batched**: the same small documents through ``KnowledgeBase.upsert_many`` (``/v1/rag/upsert/documents``)
  100 at a time: one embedding call and one transaction per batch (skipped for a checkout without it);
- **bulk**: large documents (1,000 chunks each, as ``bench scale`` builds them) through
  ``SQLiteStore.add_document``, then the vector index and the lexical index built: the non-embedding build;
  then ten small documents upserted into that library, each timed until a search finds it.

Each is reported as seconds per stage, chunks per second and bytes per chunk on disk: the SQLite file (what
is durable) and the index directories beside it (derived, rebuilt from the SQLite file when missing).
Where ``lancedb`` and ``bm25s`` import, the same chunks and vectors go to them in the same run: LanceDB with
one ``table.add`` per document and its full-text index built after the load, bm25s indexing the texts.

Every measurement runs in a fresh subprocess, alternating between the engines round by round, so a shared
machine's load falls on all of them alike. ``--against DIR`` adds another checkout's ``src`` (an older
chapterverse): this file then runs as a script with that ``src`` first on the path, which is why it imports
``chapterverse`` by absolute name and uses only what older versions also have.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from chapterverse.embeddings import Embedder

__all__ = ["run_ingest_bench", "format_report", "PresetEmbedder"]

DIM = 512
BULK_DOC_CHUNKS = 1_000
UPSERT_BATCH = 100
WORKLOADS = ("upserts", "upserts-batched", "bulk")
Echo = Callable[[str], None]


class PresetEmbedder(Embedder):
    """Embedding that costs next to nothing: each text gets one of 4,096 random unit vectors made up front,
    picked by its hash (the same text, the same vector)."""

    name = "bench-preset-512"
    batch_size = 256

    def __init__(self) -> None:
        self._dim = DIM
        table = np.random.default_rng(0).standard_normal((4096, DIM), dtype=np.float32)
        self._table = table / np.linalg.norm(table, axis=1, keepdims=True)

    def _embed_batch(self, texts: list[str]) -> np.ndarray:
        picks = [int.from_bytes(hashlib.blake2b(t.encode(), digest_size=2).digest(), "little") % 4096 for t in texts]
        vectors: np.ndarray = self._table[picks]
        return vectors


def _dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.exists() else 0


def _documents(pool: Sequence[str], chunks: int, per_document: int) -> list[list[str]]:
    """``chunks`` passages of the pool in order, ``per_document`` to a document."""
    return [[pool[i % len(pool)] for i in range(first, min(chunks, first + per_document))]
            for first in range(0, chunks, per_document)]


def _disk(workdir: Path) -> dict[str, int]:
    """Bytes of what is durable (the SQLite file with its WAL, and the vector file beside it where there is one)
    and of the derived index directories beside them."""
    durable = [*workdir.glob("library.sqlite3*"), *workdir.glob("library.vectors-*.f32")]
    sqlite = sum(p.stat().st_size for p in durable if p.is_file())
    return {"sqlite_bytes": sqlite, "index_bytes": _dir_bytes(workdir) - sqlite}


def _knowledge_module() -> Any:
    """The module holding ``KnowledgeBase`` in the chapterverse on the path: ``chapterverse.knowledgebase``,
    or ``chapterverse.server.knowledge`` in an older checkout measured with ``--against``."""
    import importlib

    try:
        return importlib.import_module("chapterverse.knowledgebase")
    except ModuleNotFoundError:
        return importlib.import_module("chapterverse.server.knowledge")


def _index_classes() -> tuple[Any, Any]:
    """(VectorIndex, LexicalIndex) of the chapterverse on the path: ``chapterverse.index``, or
    top-level modules in an older checkout measured with ``--against``."""
    import importlib

    try:
        return (importlib.import_module("chapterverse.index.vectors").VectorIndex,
                importlib.import_module("chapterverse.index.lexical").LexicalIndex)
    except ModuleNotFoundError:
        return (importlib.import_module("chapterverse.vectorindex").VectorIndex,
                importlib.import_module("chapterverse.lexicalindex").LexicalIndex)


def _indexes(workdir: Path, out: dict[str, Any]) -> None:
    """Open (build or bring up to date) the vector and the lexical index, timed on their own."""
    from chapterverse.store import SQLiteStore

    VectorIndex, LexicalIndex = _index_classes()
    store = SQLiteStore(workdir / "library.sqlite3")
    t = time.perf_counter()
    VectorIndex.open(store)
    out["vector_index_s"] = time.perf_counter() - t
    t = time.perf_counter()
    LexicalIndex.open(store)
    out["lexical_index_s"] = time.perf_counter() - t
    store.close()


def _timed_kb_writes(workdir: Path, documents: Sequence[Sequence[str]], write: Callable[[Any], int]) -> dict[str, Any]:
    """``write(knowledge_base)`` (it returns the chunks it added) timed on a new knowledge base in ``workdir``,
    then the indexes once and the bytes on disk."""
    from chapterverse.library import Library

    KnowledgeBase = _knowledge_module().KnowledgeBase

    folder = workdir / "kb-folder"
    folder.mkdir(parents=True)
    kb = KnowledgeBase(Library(workdir, embedder=PresetEmbedder()), folder)
    kb.start()
    t = time.perf_counter()
    chunks = write(kb)
    out: dict[str, Any] = {"documents": len(documents), "chunks": chunks, "store_s": time.perf_counter() - t}
    kb.close()
    kb.library.close()
    _indexes(workdir, out)
    out.update(_disk(workdir))
    return out


def measure_upserts(workdir: Path, documents: Sequence[Sequence[str]]) -> dict[str, Any]:
    """``KnowledgeBase.upsert`` of each document (its passages as one text, chunked by the library) as a
    source of its own, then the indexes once."""
    def one_by_one(kb: Any) -> int:
        return sum(kb.upsert(f"note-{i:06d}.md", "\n\n".join(passages))[1] for i, passages in enumerate(documents))

    return _timed_kb_writes(workdir, documents, one_by_one)


def measure_batched_upserts(workdir: Path, documents: Sequence[Sequence[str]]) -> dict[str, Any] | None:
    """``KnowledgeBase.upsert_many`` of the documents ``UPSERT_BATCH`` at a time, each a source of its own, then
    the indexes once; None from an older chapterverse without it."""
    knowledge = _knowledge_module()
    if not hasattr(knowledge.KnowledgeBase, "upsert_many"):
        return None
    items = [knowledge.UpsertItem(f"note-{i:06d}.md", "\n\n".join(passages)) for i, passages in enumerate(documents)]

    def batched(kb: Any) -> int:
        return sum(counts[1] for first in range(0, len(items), UPSERT_BATCH)  # (removed, added, ...) per item
                   for counts in kb.upsert_many(items[first:first + UPSERT_BATCH]))

    return _timed_kb_writes(workdir, documents, batched)


def measure_bulk(workdir: Path, documents: Sequence[Sequence[str]]) -> dict[str, Any]:
    """Each document's passages as its chunks through ``SQLiteStore.add_document``, then both indexes."""
    from chapterverse.store import NewChunk, NewDocument, NewFile, SQLiteStore

    rng = np.random.default_rng(len(documents))
    docs = []
    for number, texts in enumerate(documents):
        starts = np.cumsum([0] + [len(x) + 2 for x in texts])
        source = f"bulk-{number:05d}"
        chunks = [NewChunk(file_ordinal=0, start=int(starts[j]), end=int(starts[j]) + len(x), source=source,
                           chunk_index=j) for j, x in enumerate(texts)]  # terms: the analyzer's, as ingest
        block = rng.standard_normal((len(texts), DIM), dtype=np.float32)
        block /= np.linalg.norm(block, axis=1, keepdims=True)
        body = "\n\n".join(texts)
        docs.append(NewDocument(source=source, title=source, format="txt", content_hash=source,
                                size_bytes=len(body), language="english", files=[NewFile(body)], toc=[],
                                segments=[], chunks=chunks, vectors=block))
    store = SQLiteStore(workdir / "library.sqlite3")
    store.check_embedding_model(PresetEmbedder.name, DIM)
    t = time.perf_counter()
    for doc in docs:
        store.add_document(doc)
    out: dict[str, Any] = {"documents": len(docs), "chunks": sum(len(d.chunks) for d in docs),
                           "store_s": time.perf_counter() - t}
    store.close()
    _indexes(workdir, out)
    out.update(_disk(workdir))
    out["searchable_s"] = _searchable_after_upsert(workdir, documents[0])
    return out


def _searchable_after_upsert(workdir: Path, passages: Sequence[str], count: int = 10) -> list[float]:
    """Seconds from ``KnowledgeBase.upsert`` of a small new document into the library until a search finds it
    (the search brings both indexes up to date first), ``count`` times; the indexes are open and current before."""
    from chapterverse.library import Library

    KnowledgeBase = _knowledge_module().KnowledgeBase

    folder = workdir / "kb-folder"
    folder.mkdir()
    library = Library(workdir, embedder=PresetEmbedder())
    kb = KnowledgeBase(library, folder)
    kb.start()
    library.search("keeper of the lighthouse", k=5)
    seconds = []
    for i in range(count):
        marker = f"quillwort{i:03d}"
        t = time.perf_counter()
        kb.upsert(f"fresh-{i}.md", f"{marker} {passages[i % len(passages)]}")
        hits = library.search(marker, k=5)
        seconds.append(time.perf_counter() - t)
        if not any(h.chunk.source == f"fresh-{i}.md" for h in hits):
            raise RuntimeError(f"the upserted document fresh-{i}.md was not found by a search for {marker}")
    kb.close()
    library.close()
    return seconds


def measure_lancedb(workdir: Path, documents: Sequence[Sequence[str]]) -> dict[str, Any]:
    """The same passages and vectors into LanceDB (one ``add`` per document, full-text index after the load)."""
    import lancedb  # type: ignore[import-not-found, import-untyped, unused-ignore]  # an optional peer, not a dependency: untyped here

    embedder = PresetEmbedder()
    batches = [[{"id": k, "source": f"doc-{d}", "text": x, "vector": v.tolist()}
                for k, (x, v) in enumerate(zip(chunks, embedder.embed(list(chunks))))]
               for d, chunks in enumerate(documents)]
    db = lancedb.connect(str(workdir / "lancedb"))
    t = time.perf_counter()
    table = db.create_table("chunks", data=batches[0])
    for batch in batches[1:]:
        table.add(batch)
    out: dict[str, Any] = {"documents": len(batches), "chunks": sum(len(b) for b in batches),
                           "store_s": time.perf_counter() - t}
    t = time.perf_counter()
    table.create_fts_index("text")
    out["lexical_index_s"] = time.perf_counter() - t
    out["vector_index_s"] = 0.0
    out.update(sqlite_bytes=0, index_bytes=_dir_bytes(workdir / "lancedb"))
    return out


def measure_bm25s(workdir: Path, documents: Sequence[Sequence[str]]) -> dict[str, Any]:
    """bm25s's index of the same passages, saved (lexical only: no store, no vectors, no per-document writes)."""
    import bm25s  # type: ignore[import-not-found, import-untyped, unused-ignore]  # an optional peer, not a dependency: untyped here

    texts = [x for chunks in documents for x in chunks]
    t = time.perf_counter()
    retriever = bm25s.BM25()
    retriever.index(bm25s.tokenize(texts, stopwords="en", show_progress=False), show_progress=False)
    retriever.save(str(workdir / "bm25s"))
    return {"documents": len(documents), "chunks": len(texts), "store_s": 0.0, "vector_index_s": 0.0,
            "lexical_index_s": time.perf_counter() - t, "sqlite_bytes": 0, "index_bytes": _dir_bytes(workdir)}


# -- the driver -----------------------------------------------------------------------------------------------

ENGINES = ("chapterverse", "lancedb", "bm25s")


def _measure(task: dict[str, Any]) -> dict[str, Any] | None:
    """One measurement (in its own process): ``task`` names the engine, the workload and the passages; None when
    this chapterverse lacks the workload's API."""
    workdir = Path(task["workdir"])
    documents: list[list[str]] = task["documents"]
    if task["engine"] == "lancedb":
        return measure_lancedb(workdir, documents)
    if task["engine"] == "bm25s":
        return measure_bm25s(workdir, documents)
    if task["workload"] == "upserts":
        return measure_upserts(workdir, documents)
    if task["workload"] == "upserts-batched":
        return measure_batched_upserts(workdir, documents)
    return measure_bulk(workdir, documents)


def _peers() -> list[str]:
    """The peer engines that import here (``lancedb``, ``bm25s``: not dependencies of chapterverse)."""
    import importlib.util

    return [name for name in ENGINES[1:] if importlib.util.find_spec(name) is not None]


def _run(task: dict[str, Any], src: Path | None) -> dict[str, Any] | None:
    """``_measure(task)`` in a fresh process, with ``src`` (another checkout's) first on the path if given, else
    the ``src`` this file belongs to: the process runs in the workload's folder, where a relative entry of the
    caller's path names nothing, and another chapterverse (the installed one) would be measured in its place."""
    env = dict(os.environ)
    first = src.resolve() if src is not None else Path(__file__).resolve().parents[2]
    inherited = [str(Path(p).resolve()) for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join([str(first), *inherited])
    code = ("import json, runpy, sys; main = runpy.run_path(sys.argv[1])['_main']; main()")
    proc = subprocess.run([sys.executable, "-c", code, __file__], input=json.dumps(task), capture_output=True,
                          text=True, check=False, env=env, cwd=task["workdir"])
    if proc.returncode != 0:
        raise RuntimeError(f"{task['engine']} {task['workload']} failed:\n{proc.stderr[-3000:]}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    measured = Path(result.pop("package"))
    if measured != first / "chapterverse":
        raise RuntimeError(f"{task['engine']} {task['workload']}: measured the chapterverse at {measured}, "
                           f"not the one at {first}")
    return dict(result["measured"]) if result["measured"] is not None else None


def _main() -> None:
    import chapterverse

    measured = _measure(json.loads(sys.stdin.read()))
    print(json.dumps({"measured": measured, "package": str(Path(chapterverse.__file__).resolve().parent)}))


def run_ingest_bench(*, upserts: int = 2_000, passages: int = 3, bulk_chunks: int = 20_000, rounds: int = 3,
                     against: Path | None = None, workdir: Path | None = None, shared: Path | None = None,
                     echo: Echo | None = None) -> dict[str, Any]:
    """Both workloads on every engine, ``rounds`` times in rotation; the median of each, with the load average."""
    import tempfile

    from chapterverse.bench.scale import _shared, text_pool

    say: Echo = echo or (lambda line: print(line, file=sys.stderr))
    pool = text_pool(_shared(shared))
    small = _documents(pool, upserts * passages, passages)
    workloads = {"upserts": small, "upserts-batched": small, "bulk": _documents(pool, bulk_chunks, BULK_DOC_CHUNKS)}
    engines: list[tuple[str, Path | None]] = [("chapterverse", None)]
    if against is not None:
        engines.append((f"chapterverse@{against.name}", against / "src"))
    engines += [(name, None) for name in _peers()]
    base = Path(tempfile.mkdtemp(prefix="chapterverse-bench-ingest-", dir=workdir))
    results: dict[tuple[str, str], list[dict[str, Any]]] = {}
    loads = []
    try:
        for r in range(rounds):
            for workload, documents in workloads.items():
                order = engines[r % len(engines):] + engines[:r % len(engines)]
                for label, src in order:
                    if (label == "bm25s" and workload == "upserts") or (
                            workload == "upserts-batched" and not label.startswith("chapterverse")):
                        continue  # no per-document writes to measure; the peers' batch writes are not measured
                    folder = base / f"{workload}-{label}-{r}"
                    folder.mkdir()
                    say(f"round {r + 1}/{rounds}: {workload} on {label}")
                    task = {"engine": label.split("@")[0], "workload": workload, "documents": documents,
                            "workdir": str(folder)}
                    measured = _run(task, src)
                    if measured is not None:
                        results.setdefault((workload, label), []).append(measured)
                    loads.append(os.getloadavg()[0])
                    shutil.rmtree(folder, ignore_errors=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    rows = [_median_row(workload, label, runs) for (workload, label), runs in results.items()]
    return {"rounds": rounds, "load_average": [round(min(loads), 2), round(max(loads), 2)], "rows": rows}


def _median_row(workload: str, engine: str, runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The median of each timing over the rounds; sizes are the same in every round."""
    row: dict[str, Any] = {"workload": workload, "engine": engine, "documents": runs[0]["documents"],
                           "chunks": runs[0]["chunks"]}
    for key in ("store_s", "vector_index_s", "lexical_index_s"):
        row[key] = round(statistics.median(r[key] for r in runs), 3)
    row["total_s"] = round(statistics.median(r["store_s"] + r["vector_index_s"] + r["lexical_index_s"]
                                             for r in runs), 3)
    row["chunks_per_s"] = round(row["chunks"] / max(row["total_s"], 1e-9), 1)
    row["store_chunks_per_s"] = round(row["chunks"] / row["store_s"], 1) if row["store_s"] else None
    row["store_ms_per_document"] = round(1000 * row["store_s"] / row["documents"], 3)
    searchable = [x for r in runs for x in r.get("searchable_s", [])]
    row["searchable_p50_s"] = round(statistics.median(searchable), 4) if searchable else None
    row["sqlite_bytes_per_chunk"] = round(runs[0]["sqlite_bytes"] / row["chunks"])
    row["index_bytes_per_chunk"] = round(runs[0]["index_bytes"] / row["chunks"])
    return row


def format_report(report: dict[str, Any]) -> str:
    """One Markdown table; ``x this`` is the engine's total time over chapterverse's, same workload."""
    head = ("| workload | engine | documents | chunks | store write s | vector index s | lexical index s | total s "
            "| chunks/s | store write ms/document | bytes/chunk: durable + derived | total time vs chapterverse "
            "| small upsert searchable s |")
    lines = [f"{report['rounds']} rounds, medians; load average {report['load_average'][0]}-"
             f"{report['load_average'][1]}", "", head, "|" + "---|" * (head.count("|") - 1)]
    ours = {r["workload"]: r["total_s"] for r in report["rows"] if r["engine"] == "chapterverse"}
    for r in sorted(report["rows"], key=lambda r: (WORKLOADS.index(r["workload"]), r["engine"])):
        lines.append(
            f"| {r['workload']} | {r['engine']} | {r['documents']:,} | {r['chunks']:,} | {r['store_s']} "
            f"| {r['vector_index_s']} | {r['lexical_index_s']} | {r['total_s']} | {r['chunks_per_s']:,} "
            f"| {r['store_ms_per_document']} "
            f"| {r['sqlite_bytes_per_chunk']:,} + {r['index_bytes_per_chunk']:,} "
            f"| {r['total_s'] / ours[r['workload']]:.2f}x | {r.get('searchable_p50_s') or '-'} |")
    return "\n".join(lines)
