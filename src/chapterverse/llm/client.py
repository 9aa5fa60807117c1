"""Calling one OpenAI-compatible chat endpoint: completions, streams, retries, and what its failures mean.

The official ``openai`` SDK does the HTTP and SSE work with its own retries switched off; this
module owns the retry policy (bounded, exponential backoff with jitter, ``Retry-After`` honoured
up to a cap) so the limits are ours and testable, and maps every SDK failure to one of
``ProviderUnreachableError``, ``ProviderAuthError`` or ``ProviderError`` with a one-line message
that names the endpoint and never the key. Where the endpoint is, and with which key and patience,
is ``llm.provider_config``'s business (:class:`~chapterverse.llm.provider_config.ProviderConfig`).

The SDK and its HTTP client are imported by the code that calls or checks an endpoint, not with this module:
they cost more CPU than the rest of an extractive ``chapterverse ask``, which only needs to learn that no
model is configured.
"""

from __future__ import annotations

import email.utils
import logging
import random
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Self, TypeVar

from ..errors import DeadlineError, ProviderAuthError, ProviderError, ProviderUnreachableError
from ..redaction import scrub
from .provider_config import API_KEY_FIX, ProviderConfig, mask_key
from .limits import Deadline

if TYPE_CHECKING:
    import openai

__all__ = [
    "ChatProvider",
    "StreamEnd",
    "StreamEvent",
    "TextDelta",
    "ToolCall",
    "Usage",
]

log = logging.getLogger(__name__)

_NO_KEY = "not-needed"
"""Sent to servers that need no key (Ollama, llama.cpp): the SDK insists on some string."""
_RETRY_STATUSES = frozenset({408, 409, 429})
_CONNECT_RETRIES = 1
"""Connection refused / DNS failure is usually a wrong URL or a stopped server: retry once, fail fast."""

T = TypeVar("T")


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


@dataclass(frozen=True, slots=True)
class TextDelta:
    """A piece of the answer as it arrives; pieces may split words and citation tags."""

    text: str


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamEnd:
    """A whole reply: the last event of every successful stream, with the assembled tool calls, and what
    :meth:`ChatProvider.complete` returns."""

    tool_calls: list[ToolCall]
    usage: Usage | None
    """None when the server does not report token counts."""
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
        deadline: Deadline | None = None,
    ) -> StreamEnd:
        """One whole answer; retried on 429/5xx/connection errors, then mapped to ProviderError.

        ``max_tokens`` defaults to the config's; past ``deadline`` the request is given up (DeadlineError)."""
        params = self._params(messages, tools, tool_choice, temperature, max_tokens, response_format)
        completion = self._with_retries(
            lambda: self._client.chat.completions.create(**params, timeout=self._timeout(deadline)), deadline)
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
        deadline: Deadline | None = None,
    ) -> Iterator[StreamEvent]:
        """TextDelta events as they arrive, then one StreamEnd.

        Failures before the first TextDelta are retried like ``complete``; after it, a break
        raises ProviderError("... stream interrupted ...") so the caller can fall back. At ``deadline`` the
        stream's connection is shut (the server stops writing) and DeadlineError is raised, however far it got.
        """
        params = self._params(messages, tools, tool_choice, temperature, max_tokens, response_format)
        return self._stream(params, deadline)

    def list_models(self) -> list[str]:
        """The model ids the endpoint offers (for ``--llm-model`` hints and health checks)."""
        return self._with_retries(lambda: [model.id for model in self._client.models.list()], None)

    # -- internals

    def _params(self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None,
                tool_choice: str | Mapping[str, Any] | None, temperature: float | None,
                max_tokens: int | None, response_format: Mapping[str, Any] | None) -> dict[str, Any]:
        """Only what is set, so servers that reject unknown or null fields never see them."""
        params: dict[str, Any] = {"model": self.config.model, "messages": [dict(m) for m in messages]}
        optional = {"tools": [dict(t) for t in tools] if tools else None,
                    "tool_choice": tool_choice if tools else None,
                    "temperature": temperature, "max_tokens": max_tokens or self.config.max_tokens,
                    "response_format": dict(response_format) if response_format else None}
        params.update({k: v for k, v in optional.items() if v is not None})
        return params

    def _result(self, completion: Any) -> StreamEnd:
        if not completion.choices:
            raise ProviderError(f"{self.config.shown_url} returned no choices for model {self.config.model}")
        choice = completion.choices[0]
        message = choice.message
        calls = [
            ToolCall(id=call.id or f"call_{i}", name=call.function.name or "", arguments=call.function.arguments or "")
            for i, call in enumerate(message.tool_calls or [])
            if getattr(call, "function", None) is not None
        ]
        return StreamEnd(content=message.content or "", tool_calls=calls, usage=_usage(completion.usage),
                         finish_reason=choice.finish_reason or "")

    def _timeout(self, deadline: Deadline | None) -> Any:
        """The request's timeout: the configured wait, never past ``deadline`` (DeadlineError when it passed)."""
        import httpx2

        wait = self.config.timeout_s
        if deadline is not None:
            if deadline.passed:
                raise deadline.error(self.config.shown_url)
            wait = min(wait, deadline.remaining)
        return httpx2.Timeout(wait, connect=min(wait, 10.0))

    def _with_retries(self, call: Callable[[], T], deadline: Deadline | None) -> T:
        import openai

        attempt = 0
        while True:
            try:
                return call()
            except openai.APIError as exc:
                if deadline is not None and deadline.remaining < 0.05:
                    raise deadline.error(self.config.shown_url) from exc
                delay = self._retry_delay(exc, attempt, deadline)
                if delay is None:
                    raise self._map(exc) from exc
                self._pause(exc, delay, attempt)
            attempt += 1

    def _stream(self, params: dict[str, Any], deadline: Deadline | None) -> Iterator[StreamEvent]:
        import openai

        attempt = 0
        while True:
            acc = _StreamAccumulator()
            watchdog = _Watchdog(deadline)
            try:
                yield from self._stream_once(params, acc, deadline, watchdog)
                return
            except (openai.APIError, _StreamCut) as exc:
                if watchdog.fired or (deadline is not None and deadline.remaining < 0.05):
                    raise deadline.error(self.config.shown_url) if deadline else self._map(exc) from exc
                if acc.chars:
                    raise ProviderError(f"stream from {self.config.shown_url} interrupted after {acc.chars} "
                                        f"characters: {self._reason(exc)}") from exc
                delay = self._retry_delay(exc, attempt, deadline)
                if delay is None:
                    raise self._map(exc) from exc
                self._pause(exc, delay, attempt)
            finally:
                watchdog.cancel()
            attempt += 1

    def _stream_once(self, params: dict[str, Any], acc: _StreamAccumulator, deadline: Deadline | None,
                     watchdog: _Watchdog) -> Iterator[StreamEvent]:
        chunks = self._open_stream(params, deadline)
        watchdog.watch(chunks.response)
        try:
            for chunk in chunks:
                if deadline is not None and deadline.passed:
                    raise deadline.error(self.config.shown_url)
                if text := acc.add(chunk):
                    yield TextDelta(text)
        finally:
            watchdog.cancel()
            chunks.close()
        if acc.finish_reason is None:
            raise _StreamCut("the stream ended without a finish_reason")
        yield acc.end()

    def _open_stream(self, params: dict[str, Any], deadline: Deadline | None) -> Any:
        """Ask for usage in the last chunk; servers that reject ``stream_options`` get one plain retry."""
        import openai

        if self._stream_usage:
            try:
                return self._client.chat.completions.create(
                    **params, stream=True, stream_options={"include_usage": True}, timeout=self._timeout(deadline))
            except openai.APIStatusError as exc:
                if exc.status_code not in (400, 422) or "stream_options" not in str(exc):
                    raise
                self._stream_usage = False
                log.info("%s rejects stream_options; streaming without token usage", self.config.shown_url)
        return self._client.chat.completions.create(**params, stream=True, timeout=self._timeout(deadline))

    def _retry_delay(self, exc: Exception, attempt: int, deadline: Deadline | None) -> float | None:
        """Seconds to wait before the next attempt, or None to give up now (also when the wait would pass
        ``deadline``)."""
        delay = self._backoff(exc, attempt)
        if delay is not None and deadline is not None and delay >= deadline.remaining:
            return None
        return delay

    def _backoff(self, exc: Exception, attempt: int) -> float | None:
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
            return ProviderAuthError(f"{url} rejected the API key (HTTP 401); {API_KEY_FIX}")
        if status == 403:
            return ProviderAuthError(f"{url} refused the request (HTTP 403): the API key lacks access "
                                     f"to model {self.config.model}? {API_KEY_FIX}")
        if status == 429 and (hinted := _retry_after_s(exc)) is not None:
            return ProviderError(f"{url} is rate limiting and asks to wait {hinted:.0f} s: {reason}")
        if status == 404:
            hint = "" if "/v1" in url else " (does the base URL need to end in /v1?)"
            return ProviderError(f"{url} answered {reason}; is model {self.config.model!r} available?{hint}")
        return ProviderError(f"{url} answered {reason}")


class _Watchdog:
    """Shuts a stream's connection at the deadline. A read blocked on a silent or slow server cannot be
    interrupted from its own thread, and the server writes on until its connection closes: shutting the
    socket does both (the read fails at once, the server stops generating)."""

    def __init__(self, deadline: Deadline | None) -> None:
        self._deadline = deadline
        self._timer: threading.Timer | None = None
        self.fired = False

    def watch(self, response: Any) -> None:
        if self._deadline is None:
            return
        stream = getattr(response, "extensions", {}).get("network_stream")
        sock = stream.get_extra_info("socket") if stream is not None else None
        if sock is None:
            return

        def fire() -> None:
            self.fired = True
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # already closed: the stream ended as the deadline came

        self._timer = threading.Timer(self._deadline.remaining, fire)
        self._timer.daemon = True
        self._timer.start()

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()


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
