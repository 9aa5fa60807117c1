"""The package keeps the map of docs/ARCHITECTURE.md: each room imports only the rooms below it, and no import
inside a function body hides a cycle (a module importing one that, at import time, imports it back)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import chapterverse

PACKAGE = Path(chapterverse.__file__).parent

GROUND = {"errors", "positions", "limits", "cancel", "redaction", "config", "modelcache", "threadsafe_ast",
          "stopwatch", "paths", "scaffolding"}
"""Layer 0: modules every layer may import (``stopwatch`` times the search stages, ``paths`` resolves user-given
paths, ``scaffolding`` holds the prompt headers we write and cleans them out of answers)."""
BELOW: dict[str, set[str]] = {
    "sources": GROUND,
    "analysis": GROUND,
    "embeddings": GROUND,
    "chunking": GROUND | {"analysis"},
    "store": GROUND | {"analysis", "chunking"},
    "index": GROUND | {"store"},
    "support": GROUND | {"analysis"},
    "citations": GROUND | {"analysis", "support"},
    "search": GROUND | {"analysis", "chunking", "embeddings", "index", "store"},
    "library_writer": GROUND | {"analysis", "chunking", "embeddings", "sources", "store"},
    "library": GROUND | {"chunking", "library_writer", "search", "sources", "store"},
    "llm": GROUND | {"analysis", "chunking", "citations", "library", "search", "store"},
    "answering": GROUND | {"analysis", "chunking", "citations", "embeddings", "library", "llm", "search"},
}
"""The rooms below each room of layers 1 to 4 (the front ends, layer 5, may import any of them)."""


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _runtime_imports(path: Path) -> Iterator[tuple[str, bool]]:
    """(module imported, whether inside a function) for each chapterverse import ``path`` makes at run time."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    typing_only = {id(node) for block in ast.walk(tree) if isinstance(block, ast.If)
                   and "TYPE_CHECKING" in ast.unparse(block.test) for node in ast.walk(block)}
    in_functions = {id(node) for function in ast.walk(tree)
                    if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)) for node in ast.walk(function)}
    here = _module_name(path).split(".")
    package = here if path.name == "__init__.py" else here[:-1]
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom) or id(node) in typing_only:
            continue
        base = package[:len(package) - node.level + 1] if node.level else []
        target = ".".join([*base, node.module] if node.module else base)
        if target.split(".")[0] == "chapterverse":
            for alias in node.names:
                full = f"{target}.{alias.name}"
                yield (full if (PACKAGE.parent / (full.replace(".", "/") + ".py")).is_file() else target,
                       id(node) in in_functions)


def _modules() -> dict[str, Path]:
    return {_module_name(path): path for path in PACKAGE.rglob("*.py")}


def test_each_room_imports_only_the_rooms_below_it() -> None:
    upward = set()
    for module, path in _modules().items():
        room = _room(module)
        for target, _ in _runtime_imports(path):
            if room in BELOW and _room(target) not in BELOW[room] | {room, ""}:
                upward.add(f"{module} -> {target}")
    assert not upward, sorted(upward)


def test_no_import_inside_a_function_dodges_a_cycle() -> None:
    """Lazy imports (start-up cost, optional extras) are fine; one whose target imports its importer back is a
    cycle in hiding. A package's own ``__getattr__`` loading its submodule is not one."""
    modules = _modules()
    top_level = {module: {t for t, inside in _runtime_imports(path) if not inside} for module, path in modules.items()}
    for targets in top_level.values():  # importing a.b.c runs a and a.b first
        targets |= {".".join(t.split(".")[:n]) for t in targets for n in range(2, t.count(".") + 1)}

    def reaches(start: str, goal: str) -> bool:
        seen, todo = set(), [start]
        while todo:
            for target in top_level.get(todo.pop(), ()):
                if target == goal:
                    return True
                if target not in seen:
                    seen.add(target)
                    todo.append(target)
        return False

    dodges = {f"{module} -> {target}" for module, path in modules.items() for target, inside in _runtime_imports(path)
              if inside and not target.startswith(f"{module}.") and reaches(target, module)}
    assert not dodges, sorted(dodges)
