"""The server's modules meet at their public names (issue 30, item 7): ``responses.py`` used to import nine
underscore names of ``proxy.py``, which made a route module a library no one could change alone."""

from __future__ import annotations

import ast
from pathlib import Path

import chapterverse.server

SERVER = Path(chapterverse.server.__file__).parent


def _private_imports(path: Path) -> list[str]:
    """``module.name`` for each underscore name ``path`` imports from another chapterverse module."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("chapterverse")):
            found += [f"{node.module}.{alias.name}" for alias in node.names
                      if alias.name.startswith("_") and not alias.name.startswith("__")]
    return found


def test_no_server_module_imports_another_modules_private_names() -> None:
    found = {path.name: _private_imports(path) for path in sorted(SERVER.rglob("*.py"))}
    assert {name: names for name, names in found.items() if names} == {}
