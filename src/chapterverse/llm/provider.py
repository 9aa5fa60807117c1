"""One OpenAI-compatible chat endpoint: where it is, how to call it, and what its failures mean.

Any server that speaks the OpenAI chat-completions protocol (OpenAI, Ollama, vLLM, llama.cpp,
LM Studio, ...) is *configuration*, not code: a base URL, a model name and maybe a key.

The official ``openai`` SDK does the HTTP and SSE work with its own retries switched off; this
module owns the retry policy (bounded, exponential backoff with jitter, ``Retry-After`` honoured
up to a cap) so the limits are ours and testable, and maps every SDK failure to one of
``ProviderUnreachableError``, ``ProviderAuthError`` or ``ProviderError`` with a one-line message
that names the endpoint and never the key.

The SDK and its HTTP client are imported by the code that calls or checks an endpoint, not with this module:
they cost more CPU than the rest of an extractive ``chapterverse ask``, which only needs to learn that no
model is configured.
"""

from __future__ import annotations

import email.utils
import logging
import os
import random
import re
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Self, TypeVar
from urllib.parse import urlsplit

from ..errors import InputError, ProviderAuthError, ProviderError, ProviderUnreachableError
from ..redaction import redact_url, scrub

if TYPE_CHECKING:
    import openai

__all__ = [
    "OPENAI_BASE_URL",
    "ChatProvider",
    "ChatResult",
    "Endpoint",
    "ProviderConfig",
    "StreamEnd",
    "StreamEvent",
    "TextDelta",
    "ToolCall",
    "Usage",
    "check_base_url",
    "first_set",
    "mask_key",
    "resolve_endpoint",
    "selection_config",
]

log = logging.getLogger(__name__)

OPENAI_BASE_URL = "https://api.openai.com/v1"
ENV_BASE_URL = "CHAPTERVERSE_LLM_BASE_URL"
ENV_MODEL = "CHAPTERVERSE_LLM_MODEL"
ENV_API_KEY = "CHAPTERVERSE_LLM_API_KEY"
ENV_SELECTION_MODEL = "CHAPTERVERSE_SELECTION_MODEL"

_NO_KEY = "not-needed"
"""Sent to servers that need no key (Ollama, llama.cpp): the SDK insists on some string."""

_CONFIG_KEYS = ("base_url", "model", "api_key", "api_key_env", "headers", "timeout_s", "max_retries",
                "selection_model")
_KEY_FIX = "set --llm-api-key or CHAPTERVERSE_LLM_API_KEY"
_MODEL_FIX = "set --llm-model or CHAPTERVERSE_LLM_MODEL"
_SECRET_HEADER = re.compile(r"auth|key|token|secret|cookie|signature", re.IGNORECASE)
_RETRY_STATUSES = frozenset({408, 409, 429})
_CONNECT_RETRIES = 1
"""Connection refused / DNS failure is usually a wrong URL or a stopped server: retry once, fail fast."""

T = TypeVar("T")


def mask_key(key: str | None) -> str:
    """``sk-…abcd``: enough to tell two keys apart in a log, too little to use."""
    if not key:
        return "None"
    if len(key) < 12:
        return "***"
    return f"{key[:3]}…{key[-4:]}"


def _clean(value: object) -> str | None:
    """An env or config value, with empty strings meaning 'not set' (``FOO= cmd`` is common)."""
    if value is None:
        return None
    text = str(value).strip()
    return text or None


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

    def __post_init__(self) -> None:
        url = check_base_url(self.base_url)
        if not self.model.strip():
            raise InputError(f"no LLM model given for {redact_url(url)}; {_MODEL_FIX}")
        if self.timeout_s <= 0 or self.max_retries < 0:
            raise InputError("LLM timeout_s must be > 0 and max_retries >= 0")
        object.__setattr__(self, "base_url", url)
        object.__setattr__(self, "model", self.model.strip())
        object.__setattr__(self, "headers", {str(k): str(v) for k, v in self.headers.items()})

    def __repr__(self) -> str:
        headers = {k: ("***" if _SECRET_HEADER.search(k) else v) for k, v in self.headers.items()}
        return (f"ProviderConfig(base_url={self.shown_url!r}, model={self.model!r}, "
                f"api_key={mask_key(self.api_key)}, api_key_env={self.api_key_env!r}, headers={headers!r}, "
                f"timeout_s={self.timeout_s:g}, max_retries={self.max_retries})")

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
    ) -> ProviderConfig | None:
        """The endpoint :func:`resolve_endpoint` finds, completed for a command that must call a model.

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
            raise InputError(f"{url} needs an API key; {_KEY_FIX} (or OPENAI_API_KEY)")
        file = _file_config(config)
        return cls(base_url=url, model=found.model, api_key=found.api_key, api_key_env=found.api_key_env,
                   headers=_headers(file.get("headers")), **_numbers(file))


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


def first_set(*candidates: tuple[object, str]) -> tuple[str | None, str | None]:
    """The first set value and where it came from: the precedence rule every setting with flags, env and a
    config file follows (the reranker's too), empty strings meaning 'not set'."""
    for value, source in candidates:
        text = _clean(value)
        if text is not None:
            return text, source
    return None, None


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
    if key := _clean(flag):
        return key, None
    if key := _clean(env.get(ENV_API_KEY)):
        return key, ENV_API_KEY
    if (key := _clean(env.get("OPENAI_API_KEY"))) and (url_source in (None, "openai-env") or _is_openai(url)):
        return key, "OPENAI_API_KEY"
    if key_env := _clean(file.get("api_key_env")):
        if key := _clean(env.get(key_env)):
            return key, key_env
        if not _clean(file.get("api_key")):
            raise InputError(f"the LLM config reads the key from ${key_env}, which is not set; "
                             f"export {key_env} or {_KEY_FIX}")
    return _clean(file.get("api_key")), None


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


# --------------------------------------------------------------------------------------- results


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One function call requested by the model. ``arguments`` is the raw JSON text, unvalidated."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True, slots=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass(frozen=True, slots=True, kw_only=True)
class ChatResult:
    content: str
    tool_calls: list[ToolCall]
    usage: Usage | None
    """None when the server does not report token counts."""
    finish_reason: str


@dataclass(frozen=True, slots=True)
class TextDelta:
    """A piece of the answer as it arrives; pieces may split words and citation tags."""

    text: str


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamEnd:
    """The last event of every successful stream, with the assembled tool calls."""

    tool_calls: list[ToolCall]
    usage: Usage | None
    finish_reason: str
    content: str = ""
    """All text deltas joined, for callers that want the whole answer too."""


StreamEvent = TextDelta | StreamEnd


# -------------------------------------------------------------------------------------- provider


class _StreamCut(Exception):
    """The stream ended cleanly at the socket level but without a finish_reason."""


class ChatProvider:
    """Chat completions against one endpoint, with bounded retries and our own error types.

    Thread-safe: the server calls one instance from several worker threads.
    """

    def __init__(self, config: ProviderConfig, *, client: openai.OpenAI | None = None,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        import httpx2
        import openai

        self.config = config
        self._client = client or openai.OpenAI(
            base_url=config.base_url,
            api_key=config.api_key or _NO_KEY,
            default_headers=dict(config.headers),
            timeout=httpx2.Timeout(config.timeout_s, connect=min(config.timeout_s, 10.0)),
            max_retries=0,
        )
        self._sleep = sleep
        self._stream_usage = True
        """Cleared once the server rejects ``stream_options``; later streams skip it."""
        log.debug("chat provider for %r", config)

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def complete(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        tool_choice: str | Mapping[str, Any] | None = None,
        temperature: float | None = 0,
        max_tokens: int | None = None,
        response_format: Mapping[str, Any] | None = None,
    ) -> ChatResult:
        """One whole answer; retried on 429/5xx/connection errors, then mapped to ProviderError."""
        params = self._params(messages, tools, tool_choice, temperature, max_tokens, response_format)
        completion = self._with_retries(lambda: self._client.chat.completions.create(**params))
        return self._result(completion)

    def stream(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        tool_choice: str | Mapping[str, Any] | None = None,
        temperature: float | None = 0,
        max_tokens: int | None = None,
        response_format: Mapping[str, Any] | None = None,
    ) -> Iterator[StreamEvent]:
        """TextDelta events as they arrive, then one StreamEnd.

        Failures before the first TextDelta are retried like ``complete``; after it, a break
        raises ProviderError("... stream interrupted ...") so the caller can fall back.
        """
        params = self._params(messages, tools, tool_choice, temperature, max_tokens, response_format)
        return self._stream(params)

    def list_models(self) -> list[str]:
        """The model ids the endpoint offers (for ``--llm-model`` hints and health checks)."""
        return self._with_retries(lambda: [model.id for model in self._client.models.list()])

    # -- internals

    def _params(self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None,
                tool_choice: str | Mapping[str, Any] | None, temperature: float | None,
                max_tokens: int | None, response_format: Mapping[str, Any] | None) -> dict[str, Any]:
        """Only what is set, so servers that reject unknown or null fields never see them."""
        params: dict[str, Any] = {"model": self.config.model, "messages": [dict(m) for m in messages]}
        optional = {"tools": [dict(t) for t in tools] if tools else None,
                    "tool_choice": tool_choice if tools else None,
                    "temperature": temperature, "max_tokens": max_tokens,
                    "response_format": dict(response_format) if response_format else None}
        params.update({k: v for k, v in optional.items() if v is not None})
        return params

    def _result(self, completion: Any) -> ChatResult:
        if not completion.choices:
            raise ProviderError(f"{self.config.shown_url} returned no choices for model {self.config.model}")
        choice = completion.choices[0]
        message = choice.message
        calls = [
            ToolCall(id=call.id or f"call_{i}", name=call.function.name or "", arguments=call.function.arguments or "")
            for i, call in enumerate(message.tool_calls or [])
            if getattr(call, "function", None) is not None
        ]
        return ChatResult(content=message.content or "", tool_calls=calls, usage=_usage(completion.usage),
                          finish_reason=choice.finish_reason or "")

    def _with_retries(self, call: Callable[[], T]) -> T:
        import openai

        attempt = 0
        while True:
            try:
                return call()
            except openai.APIError as exc:
                delay = self._retry_delay(exc, attempt)
                if delay is None:
                    raise self._map(exc) from exc
                self._pause(exc, delay, attempt)
            attempt += 1

    def _stream(self, params: dict[str, Any]) -> Iterator[StreamEvent]:
        import openai

        attempt = 0
        while True:
            acc = _StreamAccumulator()
            try:
                yield from self._stream_once(params, acc)
                return
            except (openai.APIError, _StreamCut) as exc:
                if acc.chars:
                    raise ProviderError(f"stream from {self.config.shown_url} interrupted after {acc.chars} "
                                        f"characters: {self._reason(exc)}") from exc
                delay = self._retry_delay(exc, attempt)
                if delay is None:
                    raise self._map(exc) from exc
                self._pause(exc, delay, attempt)
            attempt += 1

    def _stream_once(self, params: dict[str, Any], acc: _StreamAccumulator) -> Iterator[StreamEvent]:
        chunks = self._open_stream(params)
        try:
            for chunk in chunks:
                if text := acc.add(chunk):
                    yield TextDelta(text)
        finally:
            chunks.close()
        if acc.finish_reason is None:
            raise _StreamCut("the stream ended without a finish_reason")
        yield acc.end()

    def _open_stream(self, params: dict[str, Any]) -> Any:
        """Ask for usage in the last chunk; servers that reject ``stream_options`` get one plain retry."""
        import openai

        if self._stream_usage:
            try:
                return self._client.chat.completions.create(
                    **params, stream=True, stream_options={"include_usage": True})
            except openai.APIStatusError as exc:
                if exc.status_code not in (400, 422) or "stream_options" not in str(exc):
                    raise
                self._stream_usage = False
                log.info("%s rejects stream_options; streaming without token usage", self.config.shown_url)
        return self._client.chat.completions.create(**params, stream=True)

    def _retry_delay(self, exc: Exception, attempt: int) -> float | None:
        """Seconds to wait before the next attempt, or None to give up now."""
        if not _retryable(exc):
            return None
        allowed = min(self.config.max_retries, _CONNECT_RETRIES) if _connect_failure(exc) else self.config.max_retries
        if attempt >= allowed:
            return None
        hinted = _retry_after_s(exc)
        if hinted is not None:
            return hinted if hinted <= self.config.retry_cap_s else None
        step = min(self.config.retry_cap_s, self.config.retry_base_s * 2.0 ** attempt)
        return step * random.uniform(0.5, 1.0)

    def _pause(self, exc: Exception, delay: float, attempt: int) -> None:
        log.warning("%s: %s; retrying in %.1f s (retry %d of at most %d)", self.config.shown_url,
                    self._reason(exc), delay, attempt + 1, self.config.max_retries)
        self._sleep(delay)

    def _reason(self, exc: BaseException) -> str:
        """One short line about what went wrong, with the key scrubbed out."""
        import openai

        if isinstance(exc, openai.APITimeoutError):
            text = f"no answer within {self.config.timeout_s:g} s"
        elif isinstance(exc, openai.APIStatusError):
            text = f"HTTP {exc.status_code}: {_server_message(exc)}"
        elif isinstance(exc, openai.APIConnectionError):
            text = _root_cause(exc)
        elif isinstance(exc, openai.APIError):
            text = exc.message
        else:
            text = str(exc)
        return _one_line(text, self.config.api_key)

    def _map(self, exc: Exception) -> ProviderError:
        """The single boundary where SDK exceptions become chapterverse errors."""
        import openai

        url, reason = self.config.shown_url, self._reason(exc)
        if isinstance(exc, openai.APIConnectionError):
            return ProviderUnreachableError(f"cannot reach {url}: {reason}")
        if not isinstance(exc, openai.APIStatusError):
            return ProviderError(f"{url} failed: {reason}")
        status = exc.status_code
        if status == 401:
            return ProviderAuthError(f"{url} rejected the API key (HTTP 401); {_KEY_FIX}")
        if status == 403:
            return ProviderAuthError(f"{url} refused the request (HTTP 403): the API key lacks access "
                                     f"to model {self.config.model}? {_KEY_FIX}")
        if status == 429 and (hinted := _retry_after_s(exc)) is not None:
            return ProviderError(f"{url} is rate limiting and asks to wait {hinted:.0f} s: {reason}")
        if status == 404:
            hint = "" if "/v1" in url else " (does the base URL need to end in /v1?)"
            return ProviderError(f"{url} answered {reason}; is model {self.config.model!r} available?{hint}")
        return ProviderError(f"{url} answered {reason}")


class _StreamAccumulator:
    """Joins streamed text and index-addressed tool-call fragments into whole tool calls."""

    def __init__(self) -> None:
        self._text: list[str] = []
        self._calls: list[dict[str, Any]] = []
        self._by_index: dict[int, dict[str, Any]] = {}
        self.chars = 0
        self.usage: Usage | None = None
        self.finish_reason: str | None = None

    def add(self, chunk: Any) -> str:
        """Fold in one chunk; return its text."""
        if getattr(chunk, "usage", None):
            self.usage = _usage(chunk.usage)
        pieces: list[str] = []
        for choice in chunk.choices or []:
            if choice.index not in (0, None) or choice.delta is None:
                continue
            if choice.delta.content:
                pieces.append(choice.delta.content)
            for position, call in enumerate(choice.delta.tool_calls or []):
                self._add_call(call, position)
            if choice.finish_reason:
                self.finish_reason = choice.finish_reason
        text = "".join(pieces)
        self._text.append(text)
        self.chars += len(text)
        return text

    def _add_call(self, call: Any, position: int) -> None:
        """OpenAI sends id and name in a call's first fragment and argument pieces after it, by index.

        A fragment with a new id at a known index starts a new call: some servers send each
        complete call at index 0.
        """
        index = call.index if isinstance(call.index, int) else position
        parts = self._by_index.get(index)
        if parts is None or (call.id and parts["id"] and call.id != parts["id"]):
            parts = {"id": "", "name": "", "arguments": []}
            self._calls.append(parts)
            self._by_index[index] = parts
        if call.id and not parts["id"]:
            parts["id"] = call.id
        function = call.function
        if function is not None:
            if function.name and not parts["name"]:
                parts["name"] = function.name
            if function.arguments:
                parts["arguments"].append(function.arguments)

    def end(self) -> StreamEnd:
        calls = [ToolCall(id=p["id"] or f"call_{i}", name=p["name"], arguments="".join(p["arguments"]))
                 for i, p in enumerate(self._calls)]
        return StreamEnd(tool_calls=calls, usage=self.usage, finish_reason=self.finish_reason or "",
                         content="".join(self._text))


# ------------------------------------------------------------------------------------ error help


def _usage(usage: Any) -> Usage | None:
    if usage is None:
        return None
    return Usage(prompt_tokens=int(usage.prompt_tokens or 0), completion_tokens=int(usage.completion_tokens or 0))


def _retryable(exc: Exception) -> bool:
    import openai

    if isinstance(exc, (openai.APIConnectionError, _StreamCut)):
        return True
    if isinstance(exc, openai.APIStatusError):
        return exc.status_code in _RETRY_STATUSES or exc.status_code >= 500
    return False


def _connect_failure(exc: Exception) -> bool:
    """Nothing listening, no such host, or no route: the request never left, and waiting rarely helps."""
    import httpx2

    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, (httpx2.ConnectError, httpx2.ConnectTimeout, ConnectionRefusedError)):
            return True
        cause = cause.__cause__ or cause.__context__
    return False


def _retry_after_s(exc: Exception) -> float | None:
    """The server's requested wait: ``retry-after-ms``, ``Retry-After`` seconds, or an HTTP date."""
    import openai

    if not isinstance(exc, openai.APIStatusError):
        return None
    headers = exc.response.headers
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            return max(0.0, float(value) * scale)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        return max(0.0, (when - datetime.now(UTC)).total_seconds())
    return None


def _server_message(exc: openai.APIStatusError) -> str:
    """The ``error.message`` of the body if there is one, else the raw body text."""
    body = exc.body
    if isinstance(body, Mapping):
        message = body.get("message") or body.get("error") or body.get("detail")
        if message:
            return str(message)
    if isinstance(body, str) and body.strip():
        return body
    return exc.response.reason_phrase or exc.message


def _root_cause(exc: BaseException) -> str:
    """The innermost cause (``[Errno 111] Connection refused``), not the SDK's 'Connection error.'"""
    import httpx2

    cause: BaseException = exc
    while cause.__cause__ is not None:
        cause = cause.__cause__
    text = str(cause) or type(cause).__name__
    if isinstance(cause, (httpx2.ConnectError, ConnectionRefusedError)) and "refused" in text.lower():
        text += " (is the server running?)"
    return text


def _one_line(text: str, key: str | None, limit: int = 300) -> str:
    """One scrubbed line: an error body may echo the key, a URL may carry a password or a key in its query."""
    if key and len(key) >= 4:
        text = text.replace(key, mask_key(key))
    text = " ".join(scrub(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
