"""The docs name the test behind each behaviour they state: every test a page names exists, so renaming or
removing a test without its page fails here. (``mkdocs build --strict`` in CI checks the links and the API
reference; this needs no docs tools.)"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"


def _pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _defined() -> tuple[set[str], set[str]]:
    """(test file stems, test function names) of tests/."""
    files = {path.stem for path in TESTS.glob("test_*.py")}
    functions = {name for path in TESTS.glob("test_*.py")
                 for name in re.findall(r"^(?:async )?def (test_\w+)", path.read_text(encoding="utf-8"), re.M)}
    return files, functions


def test_every_test_a_page_names_exists() -> None:
    files, functions = _defined()
    missing = []
    for page in _pages():
        text = page.read_text(encoding="utf-8")
        for file in re.findall(r"\b(test_\w+)\.py\b", text):
            if file not in files:
                missing.append(f"{page.name}: {file}.py")
        for name in re.findall(r"(?<![\w/.])(test_\w+)(?![\w.])", text):
            if name not in functions and name not in files:
                missing.append(f"{page.name}: {name}")
    assert missing == [], "pages name tests that do not exist:\n" + "\n".join(missing)


def test_the_readme_stays_a_short_guide() -> None:
    """The README is the first screen, the two commands, the tour, From Python, configuration and where to read
    more; the rest lives in docs/."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 150
    assert "bash scripts/demo.sh" in readme and "bash scripts/test.sh" in readme
    for page in re.findall(r"\]\((docs/[\w.]+\.md)", readme):
        assert (ROOT / page).is_file(), page


def test_the_reader_api_page_lists_every_reader_route() -> None:
    """docs/READER_API.md's table names each ``/api`` route of the server as ``METHOD `/api/path```, so a route
    added without its row fails here."""
    from fastapi.routing import APIRoute

    from chapterverse.server.reader import router

    table = [line for line in (ROOT / "docs" / "READER_API.md").read_text(encoding="utf-8").splitlines()
             if line.startswith("| ")]
    routes = [(method, route.path) for route in router.routes if isinstance(route, APIRoute)
              for method in sorted((route.methods or set()) - {"HEAD"})]
    assert len(routes) >= 16
    missing = [f"{method} {path}" for method, path in routes
               if not any(re.match(rf"\| {method} `{re.escape(path)}[`?]", line) for line in table)]
    assert missing == [], "routes missing from docs/READER_API.md's table:\n" + "\n".join(missing)
