"""The model's window: how many tokens it reads and writes in one request, learnt once per endpoint, and what we
send fitted to it.

The window is a setting when one is given (``--llm-context-tokens``, ``--llm_context_tokens``); otherwise it is
asked of the server, in a short time, and kept per endpoint and model: llama.cpp's ``GET /props``
(``default_generation_settings.n_ctx``) or its ``/v1/models`` (``meta.n_ctx``), else Ollama's ``POST /api/show``
(``num_ctx`` in the model's parameters; without one, Ollama reads at most :data:`OLLAMA_DEFAULT_CTX` of a
``/v1`` request whatever the model could, so that is its window). A server that says nothing has no known
window and gets no fitting: only its own refusal then tells, and that is relayed.

Tokens are counted with ``cl100k`` (offline, ``prompts.count_tokens``), which is not the model's tokenizer:
:data:`TOKEN_RATIO` and a few tokens per message of the chat template's scaffolding make the estimate err
on the long side.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

from ..redaction import redact_url
from .prompts import count_tokens

__all__ = ["DISCOVERY_TIMEOUT_S", "OLLAMA_DEFAULT_CTX", "TOKEN_RATIO", "answer_room", "discover_window",
           "estimate_messages", "estimate_tokens", "forget_windows"]

log = logging.getLogger(__name__)

TOKEN_RATIO = 1.4
"""Model tokens per cl100k token, rounded up from the worst measured: SmolLM2's tokenizer reads tag-dense
source text as 1.34 times as many tokens (Spanish prose 1.23, Italian 1.19, English 1.05)."""
MESSAGE_TOKENS = 8
"""The chat template's tokens around each message (role markers, separators)."""
PROMPT_TOKENS = 16
"""The template's tokens around the whole prompt (the assistant's opening)."""
DISCOVERY_TIMEOUT_S = 2.0
"""The most one discovery may take, all of its requests together; a turn never waits on it longer."""
OLLAMA_DEFAULT_CTX = 2048
"""What Ollama reads of an OpenAI-compatible request for a model without ``num_ctx`` in its parameters."""
_KEEP_FOUND_S = 600.0
_KEEP_UNKNOWN_S = 60.0

_cache: dict[tuple[str, str], tuple[int | None, float]] = {}
_lock = threading.Lock()


def estimate_tokens(text: str) -> int:
    """The model tokens ``text`` takes, estimated on the long side."""
    return math.ceil(count_tokens(text) * TOKEN_RATIO)


def estimate_messages(messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None = None) -> int:
    """The model tokens a request's prompt takes: each message's text (and tool calls), the tools' schemas."""
    import json

    total = PROMPT_TOKENS
    for message in messages:
        total += MESSAGE_TOKENS + estimate_tokens(_message_text(message))
    if tools:
        total += estimate_tokens(json.dumps(list(tools), ensure_ascii=False))
    return total


def _message_text(message: Mapping[str, Any]) -> str:
    import json

    content = message.get("content")
    if isinstance(content, str):
        text = content
    elif isinstance(content, list):
        text = "\n".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
    else:
        text = ""
    if message.get("tool_calls"):
        text += json.dumps(message["tool_calls"], ensure_ascii=False)
    return text


def answer_room(max_tokens: int, window: int | None) -> int:
    """The tokens kept for the answer: ``max_tokens``, but at most a quarter of a known window, so that a small
    window still holds the passages the answer is to cite."""
    if window is None:
        return max_tokens
    return max(1, min(max_tokens, window // 4))


def discover_window(base_url: str, model: str, headers: Mapping[str, str] | None = None, *,
                    timeout_s: float = DISCOVERY_TIMEOUT_S) -> int | None:
    """The window of ``model`` at ``base_url`` as the server states it, or None; asked once per endpoint and
    model (again after a while: the server may restart with another), never for longer than ``timeout_s``."""
    key = (base_url, model)
    now = time.monotonic()
    with _lock:
        found = _cache.get(key)
    if found is not None and found[1] > now:
        return found[0]
    window = _ask(base_url, model, dict(headers or {}), now + timeout_s)
    keep = _KEEP_FOUND_S if window is not None else _KEEP_UNKNOWN_S
    with _lock:
        _cache[key] = (window, time.monotonic() + keep)
    if window is not None:
        log.info("%s: model %s reads %d tokens", redact_url(base_url), model, window)
    else:
        log.info("%s: the model's window is unknown (set --llm-context-tokens to fit requests to it)",
                 redact_url(base_url))
    return window


def forget_windows() -> None:
    """Drop what was learnt (tests that restart a server on the same port)."""
    with _lock:
        _cache.clear()


def _ask(base_url: str, model: str, headers: dict[str, str], until: float) -> int | None:
    import httpx2

    root = base_url.removesuffix("/v1")
    with httpx2.Client(headers=headers, follow_redirects=False) as client:
        for probe in (_llamacpp_props, _llamacpp_models, _ollama_show):
            left = until - time.monotonic()
            if left <= 0.05:
                return None
            try:
                window = probe(client, root, base_url, model, httpx2.Timeout(left))
            except (httpx2.HTTPError, ValueError, TypeError, KeyError, AttributeError):
                continue
            if window is not None:
                return window
    return None


def _positive(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _llamacpp_props(client: Any, root: str, base_url: str, model: str, timeout: Any) -> int | None:
    reply = client.get(f"{root}/props", timeout=timeout)
    if reply.status_code != 200:
        return None
    return _positive(reply.json().get("default_generation_settings", {}).get("n_ctx"))


def _llamacpp_models(client: Any, root: str, base_url: str, model: str, timeout: Any) -> int | None:
    reply = client.get(f"{base_url}/models", timeout=timeout)
    if reply.status_code != 200:
        return None
    entries = [e for e in reply.json().get("data") or [] if isinstance(e, dict)]
    named = [e for e in entries if e.get("id") == model] or (entries if len(entries) == 1 else [])
    meta = named[0].get("meta") if named else None
    return _positive(meta.get("n_ctx")) if isinstance(meta, dict) else None


def _ollama_show(client: Any, root: str, base_url: str, model: str, timeout: Any) -> int | None:
    reply = client.post(f"{root}/api/show", json={"model": model}, timeout=timeout)
    if reply.status_code != 200:
        return None
    data = reply.json()
    for line in str(data.get("parameters") or "").splitlines():
        name, _, value = line.partition(" ")
        if name == "num_ctx" and value.strip().isdigit():
            return _positive(int(value.strip()))
    trained = [v for k, v in (data.get("model_info") or {}).items() if str(k).endswith(".context_length")]
    limit = _positive(trained[0]) if trained else None
    return min(limit, OLLAMA_DEFAULT_CTX) if limit is not None else None
