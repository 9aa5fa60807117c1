"""Where the library lives by default (:func:`default_home`), and its config file, ``<library>/config.json``:
provider settings that flags and env override, by the one precedence rule of :func:`first_set`.

Written atomically (temp file + rename) with mode 0600 because it may hold an API key.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from .errors import InputError
from .paths import expand_user

__all__ = ["default_home", "config_path", "load_config", "save_config", "first_set", "setting_value"]

CONFIG_NAME = "config.json"


def default_home() -> Path:
    """``$CHAPTERVERSE_HOME`` or the platform's user data dir."""
    env = os.environ.get("CHAPTERVERSE_HOME")
    if env:
        return expand_user(env)
    import platformdirs

    return Path(platformdirs.user_data_dir("chapterverse"))


def config_path(library_dir: Path) -> Path:
    return Path(library_dir) / CONFIG_NAME


def load_config(library_dir: Path) -> dict[str, Any]:
    path = config_path(library_dir)
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InputError(f"{path}: cannot read config: {exc}") from exc
    if not isinstance(data, dict):
        raise InputError(f"{path}: config must be a JSON object")
    return data


def save_config(library_dir: Path, data: dict[str, Any]) -> None:
    path = config_path(library_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".config-", suffix=".json")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(data, handle, indent=2, ensure_ascii=False)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def setting_value(value: object) -> str | None:
    """An env or config value, with empty strings meaning 'not set' (``FOO= cmd`` is common)."""
    if value is None:
        return None
    text = str(value).strip()
    return text or None


def first_set(*candidates: tuple[object, str]) -> tuple[str | None, str | None]:
    """The first set value and where it came from: the precedence rule every setting with flags, env and a
    config file follows (the LLM endpoint's and the reranker's), empty strings meaning 'not set'."""
    for value, source in candidates:
        text = setting_value(value)
        if text is not None:
            return text, source
    return None, None
