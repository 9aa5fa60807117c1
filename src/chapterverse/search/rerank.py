"""Second-stage rerankers: reorder the first stage's best candidates with a stronger, slower judge.

The first stage (``search.retrieval.Retriever``) ranks every passage by cheap lexical and dense features; its misses
are mostly ordering inside the right document, which a model reading query and passage together judges better.
A reranker sees the top ``top_n`` (default 30) of the first stage and returns their order; it never changes a
hit's calibrated ``score`` (what thresholds compare), and never adds or drops a passage.

Three kinds, chosen by one setting (``--reranker``, ``CHAPTERVERSE_RERANKER``, or ``reranker`` in the ``rerank``
table of the library's config file):

- a sentence-transformers ``CrossEncoder`` by local path or by a name already in the Hugging Face cache (loaded
  on first use, once, with ``local_files_only``: chapterverse never downloads a model);
- ``http(s)://...``: a rerank endpoint in the common shape that Cohere, Jina, vLLM and llama.cpp's server speak
  (``{"model", "query", "documents", "top_n"}`` -> ``{"results": [{"index", "relevance_score"}]}``), or
  ``tei:http(s)://.../rerank`` for Hugging Face TEI (``{"query", "texts"}`` -> ``[{"index", "score"}]``);
- ``llm``: the configured chat model orders the candidates' ids listwise (``llm.reranking``, which also picks
  the reranker a library is searched with), with the passages cut to fit a token budget.

A remote or model judge can fail (timeout, bad reply); the search then keeps the first stage's order and says
so in its :class:`RerankReport`, which ``/v1/rag/search`` returns and the proxy logs.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ..config import first_set
from ..errors import ChapterverseError, InputError
from ..paths import expand_user
from ..redaction import redact_url

if TYPE_CHECKING:
    import httpx

__all__ = [
    "DEFAULT_TOP_N",
    "CrossEncoderReranker",
    "HttpReranker",
    "RerankError",
    "RerankReport",
    "RerankSettings",
    "Reranker",
    "rerank_order",
]

log = logging.getLogger(__name__)

DEFAULT_TOP_N = 30
DEFAULT_TIMEOUT_S = 10.0
DEFAULT_TOKEN_BUDGET = 6000
"""What the ``llm`` kind's prompt may hold (``llm.reranking.LlmReranker``)."""
ENV_RERANKER = "CHAPTERVERSE_RERANKER"
ENV_TOP_N = "CHAPTERVERSE_RERANK_TOP_N"
ENV_MODEL = "CHAPTERVERSE_RERANK_MODEL"
ENV_API_KEY = "CHAPTERVERSE_RERANK_API_KEY"
_CONFIG_KEYS = ("reranker", "top_n", "timeout_s", "model", "api_key", "api_key_env", "token_budget")


class RerankError(ChapterverseError):
    """A reranker could not order the candidates (unreachable, timed out, unreadable reply)."""


class Reranker(Protocol):
    """Orders passages for a query. ``rank`` returns indexes into ``passages``, best first; indexes it leaves
    out keep their first-stage order after the ones it names. Raises :class:`RerankError` on failure."""

    @property
    def name(self) -> str: ...

    def rank(self, query: str, passages: Sequence[str]) -> list[int]: ...


@dataclass(frozen=True, slots=True)
class RerankReport:
    """What the second stage did for one search: the metadata a response carries."""

    reranker: str
    candidates: int
    applied: bool
    """False when the reranker failed and the first stage's order was kept."""
    error: str | None = None
    ms: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {"reranker": self.reranker, "candidates": self.candidates, "applied": self.applied,
                "error": self.error, "ms": round(self.ms, 1)}


def rerank_order(reranker: Reranker, query: str, passages: Sequence[str]) -> tuple[list[int], RerankReport]:
    """A full permutation of ``range(len(passages))`` from ``reranker``, or the identity and a report saying why.

    Indexes the reranker repeats or makes up are ignored; the ones it omits follow in their first-stage order.
    """
    started = time.perf_counter()
    identity = list(range(len(passages)))
    if len(passages) < 2:
        return identity, RerankReport(reranker.name, len(passages), True, ms=0.0)
    try:
        ranked = reranker.rank(query, passages)
    except RerankError as exc:
        ms = (time.perf_counter() - started) * 1000
        log.warning("reranker %s failed, keeping the first-stage order: %s", reranker.name, exc)
        return identity, RerankReport(reranker.name, len(passages), False, str(exc), ms)
    valid = [i for i in dict.fromkeys(ranked) if 0 <= i < len(passages)]
    chosen = set(valid)
    order = valid + [i for i in identity if i not in chosen]
    return order, RerankReport(reranker.name, len(passages), True, ms=(time.perf_counter() - started) * 1000)


def _by_score(scores: Sequence[float]) -> list[int]:
    """Indexes by descending score; ties keep the first stage's order (``sorted`` is stable)."""
    return sorted(range(len(scores)), key=lambda i: -scores[i])


# ------------------------------------------------------------------------------------- cross-encoder


class CrossEncoderReranker:
    """A sentence-transformers ``CrossEncoder`` from a local directory or the local Hugging Face cache.

    Loaded on the first ``rank`` (a CLI search that never reranks pays nothing), once per instance, under a lock
    so that the server's worker threads share one model. ``local_files_only`` always: a name that is not on this
    machine is an InputError that says how to fetch it, never a download.
    """

    def __init__(self, model: str, *, device: str | None = None, batch_size: int = 32) -> None:
        self.model_id = model
        self.device = None if device in (None, "auto") else device
        self.batch_size = batch_size
        self._model: Any = None
        self._lock = threading.Lock()

    @property
    def name(self) -> str:
        return f"cross-encoder:{self.model_id}"

    def load(self) -> Any:
        """The model, loaded on first use; InputError when it is not on this machine."""
        with self._lock:
            if self._model is None:
                try:
                    from sentence_transformers import CrossEncoder
                except ImportError as exc:
                    raise InputError(f"reranker {self.model_id!r} needs sentence-transformers: "
                                     "pip install 'chapterverse[st]'") from exc
                try:
                    self._model = CrossEncoder(self.model_id, device=self.device, local_files_only=True)
                except (OSError, ValueError) as exc:
                    where = "directory" if expand_user(self.model_id).exists() else "name"
                    raise InputError(
                        f"reranker {self.model_id!r}: cannot load it as a local cross-encoder {where} ({exc}); "
                        "chapterverse never downloads models: give a local path, or fetch it once with "
                        f"`huggingface-cli download {self.model_id}`") from exc
            return self._model

    def rank(self, query: str, passages: Sequence[str]) -> list[int]:
        model = self.load()
        scores = model.predict([(query, p) for p in passages], batch_size=self.batch_size,
                               show_progress_bar=False, convert_to_numpy=True)
        return _by_score([float(s) for s in scores])


# ---------------------------------------------------------------------------------------------- http


class HttpReranker:
    """A rerank endpoint: the common Cohere/Jina/vLLM/llama.cpp shape, or TEI's (``tei=True``).

    Both reply shapes are read whatever was sent (``{"results": [{"index", "relevance_score"}]}`` and a bare
    ``[{"index", "score"}]``). Every failure (connection, timeout, HTTP error, unreadable body) is a RerankError,
    whose message names the endpoint without its userinfo or query and never the key.
    """

    def __init__(self, url: str, *, tei: bool = False, model: str | None = None, api_key: str | None = None,
                 timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        if timeout_s <= 0:
            raise InputError(f"rerank timeout_s must be > 0, not {timeout_s}")
        self.url = url
        self.tei = tei
        self.model = model
        self._api_key = api_key
        self.timeout_s = timeout_s
        self._client: httpx.Client | None = None
        self._lock = threading.Lock()

    def client(self) -> httpx.Client:
        """One connection pool for every search: a client per request would build its TLS context each time
        (tens of milliseconds)."""
        import httpx

        with self._lock:
            if self._client is None:
                headers = {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}
                self._client = httpx.Client(timeout=self.timeout_s, headers=headers)
            return self._client

    @property
    def name(self) -> str:
        return ("tei:" if self.tei else "") + redact_url(self.url)

    def body(self, query: str, passages: Sequence[str]) -> dict[str, Any]:
        """The request body in the endpoint's shape."""
        if self.tei:
            return {"query": query, "texts": list(passages), "raw_scores": False, "return_text": False}
        body: dict[str, Any] = {"query": query, "documents": list(passages), "top_n": len(passages)}
        if self.model:
            body["model"] = self.model
        return body

    def rank(self, query: str, passages: Sequence[str]) -> list[int]:
        import httpx

        try:
            reply = self.client().post(self.url, json=self.body(query, passages))
        except httpx.TimeoutException as exc:
            raise RerankError(f"{self.name} did not answer within {self.timeout_s:g} s") from exc
        except httpx.HTTPError as exc:
            raise RerankError(f"cannot reach {self.name}: {type(exc).__name__}") from exc
        if reply.status_code >= 400:
            raise RerankError(f"{self.name} answered HTTP {reply.status_code}")
        try:
            data = reply.json()
        except ValueError as exc:
            raise RerankError(f"{self.name} answered with a body that is not JSON") from exc
        return _by_score(_scores(data, len(passages), self.name))


def _scores(data: Any, count: int, name: str) -> list[float]:
    """One score per passage from either reply shape; passages the reply leaves out score below all others."""
    items = data.get("results", data.get("data")) if isinstance(data, Mapping) else data
    if not isinstance(items, list):
        raise RerankError(f"{name} answered without a results list")
    scores = [float("-inf")] * count
    for item in items:
        if not isinstance(item, Mapping):
            raise RerankError(f"{name} answered a result that is not an object")
        index, score = item.get("index"), item.get("relevance_score", item.get("score"))
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < count \
                or isinstance(score, bool) or not isinstance(score, (int, float)):
            raise RerankError(f"{name} answered a result without a valid index and score: {dict(item)!r:.80}")
        scores[index] = float(score)
    return scores


# ------------------------------------------------------------------------------------------ settings


@dataclass(frozen=True, slots=True, repr=False)
class RerankSettings:
    """Which reranker, how many candidates and how patiently: flags > env > the config file's ``rerank`` table."""

    reranker: str | None
    top_n: int = DEFAULT_TOP_N
    timeout_s: float = DEFAULT_TIMEOUT_S
    model: str | None = None
    """The model name sent to an HTTP endpoint (Cohere and Jina need one; llama.cpp and TEI do not)."""
    api_key: str | None = None
    token_budget: int = DEFAULT_TOKEN_BUDGET

    def __repr__(self) -> str:
        return (f"RerankSettings(reranker={self.reranker!r}, top_n={self.top_n}, timeout_s={self.timeout_s:g}, "
                f"model={self.model!r}, api_key={'***' if self.api_key else None})")

    @classmethod
    def resolve(cls, *, reranker: str | None = None, top_n: int | None = None,
                config: Mapping[str, Any] | None = None, env: Mapping[str, str] = os.environ) -> RerankSettings:
        """Field by field, with the precedence (and the empty-means-unset rule) of ``config.first_set``."""
        file = dict(config or {})
        unknown = sorted(set(file) - set(_CONFIG_KEYS))
        if unknown:
            raise InputError(f"unknown rerank config key(s) {', '.join(unknown)}; valid keys: {', '.join(_CONFIG_KEYS)}")
        spec = first_set((reranker, "flag"), (env.get(ENV_RERANKER), "env"), (file.get("reranker"), "file"))[0]
        count = first_set((top_n, "flag"), (env.get(ENV_TOP_N), "env"), (file.get("top_n"), "file"))[0]
        key_env = first_set((file.get("api_key_env"), "file"))[0]
        key = first_set((env.get(ENV_API_KEY), "env"), (env.get(key_env) if key_env else None, "env"),
                        (file.get("api_key"), "file"))[0]
        return cls(reranker=spec, top_n=_number("top_n", count, int, DEFAULT_TOP_N),
                   timeout_s=_number("timeout_s", file.get("timeout_s"), float, DEFAULT_TIMEOUT_S),
                   model=first_set((env.get(ENV_MODEL), "env"), (file.get("model"), "file"))[0], api_key=key,
                   token_budget=_number("token_budget", file.get("token_budget"), int, DEFAULT_TOKEN_BUDGET))


def _number(key: str, value: object, kind: type[int] | type[float], default: float) -> Any:
    if value is None:
        return default
    try:
        number: float = float(str(value))
    except (TypeError, ValueError) as exc:
        raise InputError(f"rerank {key} must be a number, not {value!r}") from exc
    if kind is int:
        if not number.is_integer():
            raise InputError(f"rerank {key} must be a whole number, not {value!r}")
        number = int(number)
    if number <= 0:
        raise InputError(f"rerank {key} must be > 0, not {value!r}")
    return number
