"""The indexes a SQLite library keeps beside its file: derived from the store, rebuilt from it when in doubt.

Each module reads alone, and none reaches above this package (nothing here imports the library or the server).
They know the store only through its protocol (:class:`~chapterverse.store.Store`, or the role
:class:`~chapterverse.store.ChunkStore`) and the :class:`~chapterverse.store.IndexFeed` a store lends the indexes
kept beside it (a store that lends none, PostgreSQL, gets the BM25 index in memory and searches its vectors
itself), never through one store's class:

- :mod:`~chapterverse.index.files`: the directory of immutable segment files and its manifest (crash-safe
  writes, the writer lock, garbage collection) and :class:`~chapterverse.index.files.FollowedIndex`, how an
  index follows its store's generation (load, append, rebuild), written once for both indexes;
- :mod:`~chapterverse.index.topk`: exact top-k selection over large score arrays;
- :mod:`~chapterverse.index.dense`: exact dense scans (the kernel for this machine), the int8 first pass that
  narrows them without changing their result;
- :mod:`~chapterverse.index.int8codes`: the int8 codes of the memory-mapped matrices, made in process memory;
- :mod:`~chapterverse.index.vectors`: :class:`~chapterverse.index.vectors.VectorIndex`, the dense index;
- :mod:`~chapterverse.index.lexical`: :class:`~chapterverse.index.lexical.LexicalIndex`, BM25 postings.

Nothing is imported here, so that a command that never searches loads none of it.
"""
