"""One lock for every ``ast`` parse chapterverse makes from worker threads.

CPython 3.11 keeps the AST constructor's recursion depth in interpreter-wide state that every thread
shares. When two threads build AST objects at once and a garbage collection in one lets the other run
(freeing a SQLite connection drops the GIL), the count no longer balances and the parse raises
``SystemError: AST constructor recursion depth mismatch``. ``np.load`` parses every ``.npy`` header with
``ast.literal_eval``, so concurrent searches reopening the memory-mapped indexes after a write failed this
way under load (reproduced on 3.11.7: 40 errors in 48,000 loads by 8 threads; none with this lock).
Holding this lock around each parse makes them take turns; a header parse takes microseconds.
"""

from __future__ import annotations

import threading

__all__ = ["AST_LOCK"]

AST_LOCK = threading.Lock()
