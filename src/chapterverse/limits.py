"""How long a question or a search query may be, the same for every front end.

The CLI refuses longer ones; the server's ``--max_question_chars`` and ``--max_query_chars`` default to these
and may raise them. A question is read sentence by sentence against the library, so a 100 KB "question" is a
paste mistake that would take seconds of work to answer with noise, never a question.
"""

from __future__ import annotations

__all__ = ["MAX_QUESTION_CHARS", "MAX_QUERY_CHARS"]

MAX_QUESTION_CHARS = 4_000
"""Longest question to ``ask``, ``chat``, the reader or a model's tool loop."""
MAX_QUERY_CHARS = 2_000
"""Longest search query (``search``, ``/v1/rag/search``); the proxy retrieves with this much of a longer message."""
