"""Where the chat model is: an OpenAI-compatible endpoint as flags, environment and the config file name it.

Any server that speaks the OpenAI chat-completions protocol (OpenAI, Ollama, vLLM, llama.cpp,
LM Studio, ...) is *configuration*, not code: a base URL, a model name and maybe a key.
:func:`resolve_endpoint` is the one resolver every front end (``ask``, ``chat``, ``serve``) reads it with,
so a config file means the same to all of them; :class:`ProviderConfig` is what a command that must call
a model gets from it (``llm.client.ChatProvider`` calls it).

The HTTP client is imported only to parse URLs, where they are checked, not with this module: an extractive
``chapterverse ask`` only needs to learn that no model is configured.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import urlsplit

from ..config import first_set, setting_value
from ..errors import InputError
from ..redaction import redact_url
from .limits import DEFAULT_DEADLINE_S, DEFAULT_MAX_TOKENS

__all__ = [
    "API_KEY_FIX",
    "OPENAI_BASE_URL",
    "Endpoint",
    "ProviderConfig",
    "check_base_url",
    "mask_key",
    "resolve_endpoint",
    "selection_config",
]

OPENAI_BASE_URL = "https://api.openai.com/v1"
ENV_BASE_URL = "CHAPTERVERSE_LLM_BASE_URL"
ENV_MODEL = "CHAPTERVERSE_LLM_MODEL"
ENV_API_KEY = "CHAPTERVERSE_LLM_API_KEY"
ENV_SELECTION_MODEL = "CHAPTERVERSE_SELECTION_MODEL"
ENV_MAX_TOKENS = "CHAPTERVERSE_LLM_MAX_TOKENS"
ENV_DEADLINE_S = "CHAPTERVERSE_LLM_DEADLINE_S"
ENV_CONTEXT_TOKENS = "CHAPTERVERSE_LLM_CONTEXT_TOKENS"

API_KEY_FIX = "set --llm-api-key or CHAPTERVERSE_LLM_API_KEY"
"""How to give a key, for every message about a missing or rejected one."""
_CONFIG_KEYS = ("base_url", "model", "api_key", "api_key_env", "headers", "timeout_s", "max_retries",
                "selection_model", "max_tokens", "deadline_s", "context_tokens")
_LIMITS = (("max_tokens", int, ENV_MAX_TOKENS), ("deadline_s", float, ENV_DEADLINE_S),
           ("context_tokens", int, ENV_CONTEXT_TOKENS))
"""The turn's limits: (config key, type, environment variable); a flag wins, then the environment, then the file."""
_MODEL_FIX = "set --llm-model or CHAPTERVERSE_LLM_MODEL"
_SECRET_HEADER = re.compile(r"auth|key|token|secret|cookie|signature", re.IGNORECASE)


def mask_key(key: str | None) -> str:
    """``sk-…abcd``: enough to tell two keys apart in a log, too little to use."""
    if not key:
        return "None"
    if len(key) < 12:
        return "***"
    return f"{key[:3]}…{key[-4:]}"


def _is_openai(base_url: str) -> bool:
    import httpx2

    return httpx2.URL(base_url).host == "api.openai.com"


def check_base_url(base_url: str) -> str:
    """``base_url`` without trailing slashes, or InputError when it is not an http(s) URL naming a host.

    Parsed, not pattern-matched: ``http://[::1`` or a port of ``99999`` must fail here, where the setting is
    made, not in every later chat request. The message shows the URL redacted (it may hold a key).
    """
    import httpx2

    url = base_url.strip().rstrip("/")
    try:
        parts = urlsplit(url)
        port_ok = parts.port is None or parts.port > 0
        httpx2.URL(url)
    except (ValueError, httpx2.InvalidURL):
        parts, port_ok = None, False
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname or not port_ok \
            or any(c.isspace() for c in url):
        raise InputError(f"LLM base URL {redact_url(url)!r} is not an http(s) URL naming a host; set "
                         "--llm-base-url or CHAPTERVERSE_LLM_BASE_URL, e.g. http://localhost:11434/v1")
    return url


@dataclass(frozen=True, kw_only=True, repr=False)
class ProviderConfig:
    """Where the chat model lives and how patiently to talk to it. The repr masks the key."""

    base_url: str
    model: str
    api_key: str | None = None
    api_key_env: str | None = None
    """The environment variable the key was read from, kept only to name it in messages."""
    headers: Mapping[str, str] = field(default_factory=dict, hash=False)
    timeout_s: float = 60.0
    max_retries: int = 3
    retry_base_s: float = 0.5
    """First backoff step; doubled per retry, with jitter."""
    retry_cap_s: float = 30.0
    """Longest single wait; a Retry-After beyond it makes us give up instead of sleeping."""
    max_tokens: int = DEFAULT_MAX_TOKENS
    """The most tokens the model may write per request (sent as ``max_tokens`` with every one)."""
    deadline_s: float = DEFAULT_DEADLINE_S
    """The most seconds one turn may take, every round included (``llm.limits.Deadline``)."""
    deadline_setting: str = "--llm-deadline-s"
    """What sets ``deadline_s``, as messages name it."""
    context_tokens: int | None = None
    """The model's window in tokens; None: asked of the server (``llm.window``)."""

    def __post_init__(self) -> None:
        url = check_base_url(self.base_url)
        if not self.model.strip():
            raise InputError(f"no LLM model given for {redact_url(url)}; {_MODEL_FIX}")
        if self.timeout_s <= 0 or self.max_retries < 0:
            raise InputError("LLM timeout_s must be > 0 and max_retries >= 0")
        if self.max_tokens < 1 or self.deadline_s <= 0 or (self.context_tokens is not None
                                                            and self.context_tokens < 256):
            raise InputError("LLM max_tokens must be >= 1, deadline_s > 0 and context_tokens >= 256")
        object.__setattr__(self, "base_url", url)
        object.__setattr__(self, "model", self.model.strip())
        object.__setattr__(self, "headers", {str(k): str(v) for k, v in self.headers.items()})

    def __repr__(self) -> str:
        headers = {k: ("***" if _SECRET_HEADER.search(k) else v) for k, v in self.headers.items()}
        return (f"ProviderConfig(base_url={self.shown_url!r}, model={self.model!r}, "
                f"api_key={mask_key(self.api_key)}, api_key_env={self.api_key_env!r}, headers={headers!r}, "
                f"timeout_s={self.timeout_s:g}, max_retries={self.max_retries}, max_tokens={self.max_tokens}, "
                f"deadline_s={self.deadline_s:g}, context_tokens={self.context_tokens})")

    __str__ = __repr__

    @property
    def shown_url(self) -> str:
        """The base URL as messages and logs show it: without userinfo or query values (see redaction.py)."""
        return redact_url(self.base_url)

    def with_model(self, model: str) -> ProviderConfig:
        """The same endpoint and key with another model (e.g. a cheaper one for chunk selection)."""
        return replace(self, model=model)

    @classmethod
    def resolve(
        cls,
        *,
        base_url: str | None = None,
        model: str | None = None,
        api_key: str | None = None,
        config: Mapping[str, Any] | None = None,
        env: Mapping[str, str] = os.environ,
        max_tokens: int | None = None,
        deadline_s: float | None = None,
        context_tokens: int | None = None,
    ) -> ProviderConfig | None:
        """The endpoint :func:`resolve_endpoint` finds, completed for a command that must call a model.

        ``max_tokens``, ``deadline_s`` and ``context_tokens`` are the turn's limits as flags give them; each
        unset one comes from ``CHAPTERVERSE_LLM_*`` or the config file, else its default.

        Returns None when nothing names an LLM at all: chapterverse then answers extractively.
        Raises InputError (naming the fix) when an endpoint or key is configured without a model,
        or when api.openai.com would be called without a key.
        """
        found = resolve_endpoint(base_url=base_url, model=model, api_key=api_key, config=config, env=env)
        if found is None:
            return None
        if found.model is None:
            raise InputError(f"an LLM endpoint is configured ({redact_url(found.base_url or OPENAI_BASE_URL)}) "
                             f"but no model; {_MODEL_FIX}")
        url = found.base_url or OPENAI_BASE_URL
        if found.api_key is None and _is_openai(url):
            raise InputError(f"{url} needs an API key; {API_KEY_FIX} (or OPENAI_API_KEY)")
        file = _file_config(config)
        flags = {"max_tokens": max_tokens, "deadline_s": deadline_s, "context_tokens": context_tokens}
        return cls(base_url=url, model=found.model, api_key=found.api_key, api_key_env=found.api_key_env,
                   headers=_headers(file.get("headers")), **_numbers(file), **_limits(flags, env, file))


@dataclass(frozen=True, slots=True, repr=False)
class Endpoint:
    """Where the chat model is, as flags, environment and config file name it; any part may be missing."""

    base_url: str | None
    model: str | None
    api_key: str | None
    api_key_env: str | None
    """The environment variable the key came from (None: a flag or the config file)."""

    def __repr__(self) -> str:
        shown = redact_url(self.base_url) if self.base_url else None
        return f"Endpoint(base_url={shown!r}, model={self.model!r}, api_key={mask_key(self.api_key)})"


def resolve_endpoint(
    *,
    base_url: str | None = None,
    model: str | None = None,
    api_key: str | None = None,
    config: Mapping[str, Any] | None = None,
    env: Mapping[str, str] = os.environ,
) -> Endpoint | None:
    """Merge flags > CHAPTERVERSE_LLM_* env > OPENAI_* env > config file, field by field.

    The one resolver every front end uses (``ask``, ``chat``, ``serve``), so a config file means the same to
    all of them (``api_key_env`` included). None when nothing names an LLM at all. What a missing part means
    is the front end's business: the CLI defaults to OpenAI, the server answers without an upstream.
    """
    file = _file_config(config)
    url, url_source = first_set((base_url, "flag"), (env.get(ENV_BASE_URL), "env"),
                             (env.get("OPENAI_BASE_URL"), "openai-env"), (file.get("base_url"), "file"))
    name, _ = first_set((model, "flag"), (env.get(ENV_MODEL), "env"), (file.get("model"), "file"))
    explicit_key = first_set((api_key, ""), (env.get(ENV_API_KEY), ""), (env.get("OPENAI_API_KEY"), ""),
                          (file.get("api_key"), ""))[0]
    if url is None and name is None and explicit_key is None:
        return None
    key, key_env = _resolve_key(api_key, env, file, url or OPENAI_BASE_URL, url_source)
    return Endpoint(base_url=url, model=name, api_key=key, api_key_env=key_env)


def selection_config(
    main: ProviderConfig | None,
    *,
    model: str | None = None,
    config: Mapping[str, Any] | None = None,
    env: Mapping[str, str] = os.environ,
) -> ProviderConfig | None:
    """The endpoint for chunk selection: the main one, with its model swapped when one is named.

    Precedence: ``model`` (flag) > CHAPTERVERSE_SELECTION_MODEL > config ``selection_model``.
    """
    if main is None:
        return None
    name = first_set((model, ""), (env.get(ENV_SELECTION_MODEL), ""), ((config or {}).get("selection_model"), ""))[0]
    return main.with_model(name) if name else main



def _file_config(config: Mapping[str, Any] | None) -> Mapping[str, Any]:
    """The ``[llm]`` table of the config file; unknown keys are typos, so they are errors."""
    config = config or {}
    unknown = sorted(set(config) - set(_CONFIG_KEYS))
    if unknown:
        raise InputError(f"unknown LLM config key(s) {', '.join(unknown)}; valid keys: {', '.join(_CONFIG_KEYS)}")
    return config


def _resolve_key(flag: str | None, env: Mapping[str, str], file: Mapping[str, Any],
                 url: str, url_source: str | None) -> tuple[str | None, str | None]:
    """The key and the env var it came from.

    OPENAI_API_KEY is only sent to OpenAI itself or to the URL in OPENAI_BASE_URL: a key set
    globally for OpenAI must not leak to some other server named by a flag or the config file.
    """
    if key := setting_value(flag):
        return key, None
    if key := setting_value(env.get(ENV_API_KEY)):
        return key, ENV_API_KEY
    openai_key = setting_value(env.get("OPENAI_API_KEY"))
    if openai_key and (url_source in (None, "openai-env") or _is_openai(url)):
        return openai_key, "OPENAI_API_KEY"
    if key_env := setting_value(file.get("api_key_env")):
        if key := setting_value(env.get(key_env)):
            return key, key_env
        if not setting_value(file.get("api_key")):
            raise InputError(f"the LLM config reads the key from ${key_env}, which is not set; "
                             f"export {key_env} or {API_KEY_FIX}")
    return setting_value(file.get("api_key")), None


def _headers(value: object) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InputError("LLM config 'headers' must be a table of header names to strings")
    return {str(k): str(v) for k, v in value.items()}


def _numbers(file: Mapping[str, Any]) -> dict[str, Any]:
    """timeout_s and max_retries from the file, checked here so a typo names its key."""
    out: dict[str, Any] = {}
    for key, kind in (("timeout_s", float), ("max_retries", int)):
        if file.get(key) is None:
            continue
        try:
            out[key] = kind(file[key])
        except (TypeError, ValueError) as exc:
            raise InputError(f"LLM config {key} must be a number, not {file[key]!r}") from exc
    return out



def _limits(flags: Mapping[str, float | int | None], env: Mapping[str, str],
            file: Mapping[str, Any]) -> dict[str, Any]:
    """The turn's limits that flags, the environment or the config file set, checked so a typo names its source."""
    out: dict[str, Any] = {}
    for key, kind, variable in _LIMITS:
        if flags.get(key) is not None:
            out[key] = flags[key]
            continue
        value, source = first_set((env.get(variable), variable), (file.get(key), f"LLM config {key}"))
        if value is None:
            continue
        try:
            out[key] = kind(value)
        except ValueError as exc:
            raise InputError(f"{source} must be a number, not {value!r}") from exc
    return out
