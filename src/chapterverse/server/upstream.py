"""The chat model this server talks to: the proxy's upstream and the reader's answering model.

Read at start from flags > ``CHAPTERVERSE_LLM_*`` environment > the library's ``config.json``
(``{"llm": {"base_url", "model", "api_key"}}``, the file the CLI reads too). ``PUT /api/settings``
changes the live values and saves them to that file (0600, atomic); flags win again at the next
start. The key is never returned or logged: only a hint such as ``sk-…abcd``.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..config import load_config, save_config
from ..errors import InputError
from ..llm.provider import ENV_API_KEY, ENV_BASE_URL, ENV_MODEL, ProviderConfig, mask_key

__all__ = ["Upstream", "UpstreamSettings"]

_FILE_KEYS = ("base_url", "model", "api_key")


@dataclass(frozen=True, slots=True, repr=False)
class Upstream:
    """One consistent view of the settings (they may change between requests, never during one)."""

    base_url: str | None
    model: str | None
    api_key: str | None
    timeout_s: float

    def __repr__(self) -> str:
        return f"Upstream(base_url={self.base_url!r}, model={self.model!r}, api_key={mask_key(self.api_key)})"

    def provider(self, model: str | None = None) -> ProviderConfig | None:
        """A ProviderConfig for the agent, or None when no endpoint or model is known (extractive answers)."""
        name = model or self.model
        if not self.base_url or not name:
            return None
        return ProviderConfig(base_url=self.base_url, model=name, api_key=self.api_key, timeout_s=self.timeout_s,
                              max_retries=1)


def _first(*values: object) -> str | None:
    for value in values:
        text = str(value).strip() if value is not None else ""
        if text:
            return text
    return None


class UpstreamSettings:
    def __init__(self, library_dir: Path, *, base_url: str | None = None, model: str | None = None,
                 api_key: str | None = None, timeout_s: float = 120.0, env: Mapping[str, str] = os.environ) -> None:
        self._dir = Path(library_dir)
        self._lock = threading.Lock()
        saved = self._saved()
        self._current = Upstream(
            base_url=_first(base_url, env.get(ENV_BASE_URL), saved.get("base_url")),
            model=_first(model, env.get(ENV_MODEL), saved.get("model")),
            api_key=_first(api_key, env.get(ENV_API_KEY), saved.get("api_key")),
            timeout_s=timeout_s,
        )
        if self._current.base_url:
            ProviderConfig(base_url=self._current.base_url, model="check")  # InputError on a malformed URL

    def _saved(self) -> dict[str, Any]:
        llm = load_config(self._dir).get("llm") if self._dir.is_dir() else None
        return dict(llm) if isinstance(llm, dict) else {}

    @property
    def current(self) -> Upstream:
        return self._current

    def update(self, changes: Mapping[str, str | None]) -> Upstream:
        """Apply ``{"base_url"|"model"|"api_key": value}``; None leaves a value, "" clears it. Saved to disk."""
        unknown = set(changes) - set(_FILE_KEYS)
        if unknown:
            raise InputError(f"unknown setting(s) {', '.join(sorted(unknown))}")
        with self._lock:
            values = {"base_url": self._current.base_url, "model": self._current.model,
                      "api_key": self._current.api_key}
            for key, value in changes.items():
                if value is not None:
                    values[key] = value.strip() or None
            if values["base_url"]:
                ProviderConfig(base_url=values["base_url"], model="check")
            data = load_config(self._dir) if self._dir.is_dir() else {}
            llm = {k: v for k, v in (data.get("llm") or {}).items() if k not in _FILE_KEYS}
            llm.update({k: v for k, v in values.items() if v})
            data["llm"] = llm
            save_config(self._dir, data)
            self._current = Upstream(timeout_s=self._current.timeout_s, **values)
            return self._current

    def to_json(self) -> dict[str, Any]:
        current = self._current
        return {"base_url": current.base_url, "model": current.model, "api_key_set": bool(current.api_key),
                "api_key_hint": mask_key(current.api_key) if current.api_key else None}
