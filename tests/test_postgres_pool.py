"""A PostgreSQL store that is let go without ``close`` closes its connection pool cleanly."""

from __future__ import annotations

import gc
import sys
import threading
import time
import uuid
from typing import Any

import pytest
from pgfixture import pg_schema_url, pg_url  # noqa: F401  (fixtures)

pytestmark = pytest.mark.postgres


def _backends(pg_url: str, application: str) -> int:
    import psycopg

    with psycopg.connect(pg_url, autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (application,))
        return int(row.fetchone()[0])  # type: ignore[index]


def test_a_store_let_go_without_close_closes_its_pool_without_errors(pg_url: str,  # noqa: F811
                                                                      pg_schema_url: str) -> None:  # noqa: F811
    """The pool's own ``__del__``, left to run on one of its worker threads, failed there ("cannot join current
    thread", printed as an ignored exception) in most of these rounds."""
    from chapterverse.store.postgres import PostgresStore

    application = f"letgo-{uuid.uuid4().hex[:8]}"
    ignored: list[tuple[str, str]] = []
    hook = sys.unraisablehook

    def record(unraisable: Any) -> None:
        ignored.append((repr(unraisable.exc_value), threading.current_thread().name))

    sys.unraisablehook = record
    try:
        for _ in range(10):
            store = PostgresStore(f"{pg_schema_url}&application_name={application}")
            store.documents()
            assert _backends(pg_url, application) >= 1
            del store
            gc.collect()
        time.sleep(0.5)  # a worker that still held the pool has let it go by now
        gc.collect()
    finally:
        sys.unraisablehook = hook
    assert ignored == []
    deadline = time.monotonic() + 10
    while _backends(pg_url, application) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _backends(pg_url, application) == 0
