"""The chat model this server talks to: the proxy's upstream and the reader's answering model.

Read at start by the resolver every front end shares (``llm.provider_config.resolve_endpoint``): flags >
``CHAPTERVERSE_LLM_*`` and ``OPENAI_*`` environment > the library's ``config.json``
(``{"llm": {"base_url", "model", "api_key" | "api_key_env"}}``, the file ``chapterverse ask`` reads too).

``PUT /api/settings`` (server key required, see security.py) changes the live values and saves only the
values it was given to that file (0600, atomic): a key from a flag or the environment is never written
to disk. Moving the endpoint to another origin (scheme, host, port) without giving a key with it drops
the key, in memory and in the file, so no setting can redirect a stored key to a host it was not meant
for. Flags win again at the next start. URLs are shown redacted (``redaction.redact_url``), and the redacted
URL sent back (the reader's settings form does) leaves the URL as it is; the key is never shown: only a hint
such as ``sk-…abcd``.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..config import load_config, save_config
from ..errors import InputError
from ..llm.provider_config import ProviderConfig, check_base_url, mask_key, resolve_endpoint
from ..llm.limits import DEFAULT_DEADLINE_S, DEFAULT_MAX_TOKENS
from ..redaction import redact_url, register_secret, register_url_secrets

__all__ = ["Upstream", "UpstreamSettings", "SettingsChange", "TurnLimits"]

_KEY_FIELDS = ("api_key", "api_key_env")
"""Where config.json names a key; both go when a key is given or the endpoint moves."""


@dataclass(frozen=True, slots=True, repr=False)
class Upstream:
    """One consistent view of the settings (they may change between requests, never during one)."""

    base_url: str | None
    model: str | None
    api_key: str | None
    timeout_s: float
    limits: TurnLimits

    def __repr__(self) -> str:
        return f"Upstream(base_url={self.shown_url!r}, model={self.model!r}, api_key={mask_key(self.api_key)})"

    @property
    def shown_url(self) -> str | None:
        """The base URL as answers and logs show it (no userinfo, no query values)."""
        return redact_url(self.base_url) if self.base_url else None

    def provider(self, model: str | None = None) -> ProviderConfig | None:
        """A ProviderConfig for the agent, or None when no endpoint or model is known (extractive answers)."""
        name = model or self.model
        if not self.base_url or not name:
            return None
        return ProviderConfig(base_url=self.base_url, model=name, api_key=self.api_key, timeout_s=self.timeout_s,
                              max_retries=1, max_tokens=self.limits.max_tokens, deadline_s=self.limits.deadline_s,
                              deadline_setting="--llm_deadline_s", context_tokens=self.limits.context_tokens)


@dataclass(frozen=True, slots=True)
class TurnLimits:
    """What one turn with the upstream may cost (``--llm_max_tokens``, ``--llm_deadline_s``) and the model's
    window when it is set (``--llm_context_tokens``)."""

    max_tokens: int = DEFAULT_MAX_TOKENS
    deadline_s: float = DEFAULT_DEADLINE_S
    context_tokens: int | None = None


class SettingsChange(BaseModel):
    """The body of ``PUT /api/settings``: each field optional, ``""`` clears it; anything else is refused."""

    model_config = ConfigDict(extra="forbid")

    llm_base_url: str | None = Field(None, max_length=2000, description="OpenAI-compatible endpoint (http/https).")
    llm_model: str | None = Field(None, max_length=200)
    llm_api_key: str | None = Field(None, max_length=4000, description="Never returned; only its hint is.")

    @field_validator("llm_base_url")
    @classmethod
    def _valid_url(cls, value: str | None) -> str | None:
        """A malformed URL is refused here, not saved to fail every later chat."""
        if value is None or not value.strip():
            return value
        try:
            return check_base_url(value)
        except InputError as exc:
            raise ValueError(str(exc)) from None

    def changes(self) -> dict[str, str | None]:
        """``{"base_url"|"model"|"api_key": value}`` for the fields given; None clears one."""
        given = {"base_url": self.llm_base_url, "model": self.llm_model, "api_key": self.llm_api_key}
        return {key: value.strip() or None for key, value in given.items() if value is not None}


def _origin(url: str | None) -> tuple[str, str, int | None] | None:
    """Scheme, host and port: what decides who receives a request (and its key)."""
    if not url:
        return None
    parts = urlsplit(url)
    return parts.scheme, (parts.hostname or "").lower(), parts.port


class UpstreamSettings:
    def __init__(self, library_dir: Path, *, base_url: str | None = None, model: str | None = None,
                 api_key: str | None = None, timeout_s: float = 120.0, limits: TurnLimits | None = None,
                 env: Mapping[str, str] = os.environ) -> None:
        self._dir = Path(library_dir)
        self._lock = threading.Lock()
        found = resolve_endpoint(base_url=base_url, model=model, api_key=api_key, config=self._saved(), env=env)
        url = check_base_url(found.base_url) if found and found.base_url else None
        self._current = Upstream(base_url=url, model=found.model if found else None,
                                 api_key=found.api_key if found else None, timeout_s=timeout_s,
                                 limits=limits or TurnLimits())
        _register(self._current)

    def _config(self) -> dict[str, Any]:
        return load_config(self._dir) if self._dir.is_dir() else {}

    def _saved(self) -> dict[str, Any]:
        llm = self._config().get("llm")
        return dict(llm) if isinstance(llm, dict) else {}

    @property
    def current(self) -> Upstream:
        return self._current

    def update(self, change: SettingsChange) -> Upstream:
        """Apply the given fields; a move to another origin without a key drops the key. Saved to disk."""
        given = change.changes()
        with self._lock:
            current = self._current
            if current.base_url and given.get("base_url") == current.shown_url:
                del given["base_url"]  # the redacted URL GET showed, sent back by a form: unchanged, not redacted
            values = {"base_url": current.base_url, "model": current.model, "api_key": current.api_key, **given}
            drop_key = "api_key" not in given and _origin(values["base_url"]) != _origin(current.base_url)
            if drop_key:
                values["api_key"] = None
            self._save(given, drop_key=drop_key)
            self._current = Upstream(timeout_s=current.timeout_s, limits=current.limits, **values)
            _register(self._current)
            return self._current

    def _save(self, given: Mapping[str, str | None], *, drop_key: bool) -> None:
        """Write only what the request gave (and the key's removal): nothing from flags or the environment."""
        data = self._config()
        llm = dict(data.get("llm") or {})
        if drop_key or "api_key" in given:
            for key in _KEY_FIELDS:
                llm.pop(key, None)
        for key, value in given.items():
            if value:
                llm[key] = value
            else:
                llm.pop(key, None)
        data["llm"] = llm
        save_config(self._dir, data)

    def to_json(self) -> dict[str, Any]:
        current = self._current
        return {"base_url": current.shown_url, "model": current.model, "api_key_set": bool(current.api_key),
                "api_key_hint": mask_key(current.api_key) if current.api_key else None}


def _register(upstream: Upstream) -> None:
    """The key and the URL's secrets are masked in every answer and log line from now on (redaction.py)."""
    register_secret(upstream.api_key)
    register_url_secrets(upstream.base_url)
