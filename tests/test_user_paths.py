"""Paths a user gives with ``~user`` (or a link that loops) are answered, never a traceback or a 500.

``Path.expanduser`` raises ``RuntimeError`` for ``~nosuchuser/x``: the server answers such a path as any path
outside its ingest roots (404), and the CLI, given one as ``--library``, a server setting or
``$CHAPTERVERSE_HOME``, exits 2 naming it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from serverutil import running_server, settings_for

NOBODY = "~chapterverse-nosuchuser"


@pytest.mark.parametrize("given", [f"{NOBODY}/x.md", "~q", f"{NOBODY}", "/tmp/a\x00b.md"])
def test_a_path_naming_no_home_is_404_like_any_path_outside_the_roots(tmp_path: Path, given: str) -> None:
    root = tmp_path / "root"
    root.mkdir()
    with running_server(settings_for(tmp_path, ingest_roots=[root])) as server, server.client() as client:
        answer = client.post("/api/documents/path", json={"path": given})
        outside = client.post("/api/documents/path", json={"path": "/etc/passwd"})
    assert outside.status_code == 404
    assert answer.status_code == 404, answer.text
    assert answer.json()["code"] == outside.json()["code"] == "NOT_FOUND"



@pytest.mark.parametrize(("args", "env", "shown"), [
    (["--library", f"{NOBODY}/lib", "docs"], None, f"{NOBODY}/lib"),
    (["docs"], {"CHAPTERVERSE_HOME": f"{NOBODY}/home"}, f"{NOBODY}/home"),
    (["serve", "--library", f"{NOBODY}/lib"], None, f"library: Value error, {NOBODY}/lib"),
    (["serve", "--rag_enabled", "true", "--rag_kb_path", f"{NOBODY}/kb"], None, f"rag_kb_path: Value error, {NOBODY}/kb"),
    (["serve", "--ingest_roots", f"{NOBODY}/in"], None, f"ingest_roots: Value error, {NOBODY}/in"),
], ids=["library", "home", "serve-library", "serve-kb", "serve-roots"])
def test_the_cli_names_a_path_with_no_home_and_exits_2(tmp_path: Path, args: list[str], env: dict[str, str] | None,
                                                       shown: str) -> None:
    result = subprocess.run([sys.executable, "-m", "chapterverse", *args], capture_output=True, text=True,
                            timeout=120, cwd=tmp_path, env={**os.environ, "COLUMNS": "200", **(env or {})})
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stderr.strip().splitlines()[-1] == (f"error: {shown}: no home folder for {NOBODY} (no such "
                                                      "user)"), result.stderr[-2000:]


path_texts = st.one_of(st.text(max_size=40), st.builds(lambda user, rest: f"~{user}/{rest}", st.text(max_size=12),
                                                       st.text(max_size=12)))


@pytest.mark.slow  # a 150-example sweep over HTTP: the whole suite's
def test_no_path_or_path_parameter_is_a_500(tmp_path: Path) -> None:
    """A sweep of the fields that take a path or a name: the body of ``POST /api/documents/path`` and the reader's
    path parameters, with ``~user`` forms, NULs, surrogates and separators; every answer is below 500."""
    root = tmp_path / "root"
    root.mkdir()
    with running_server(settings_for(tmp_path, ingest_roots=[root])) as server, server.client() as client:
        @settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck), database=None)
        @given(text=path_texts)
        def sweep(text: str) -> None:
            answers = [client.post("/api/documents/path", json={"path": text})]
            quoted = quote(text, safe="")
            if quoted:
                answers += [client.get(f"/api/files/{quoted}"), client.get(f"/api/resolve/{quoted}"),
                            client.get(f"/api/documents/{quoted}")]
            assert all(answer.status_code < 500 for answer in answers), [(a.url, a.status_code) for a in answers]

        sweep()
