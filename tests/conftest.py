"""Shared fixtures. Real data comes from ../shared and tests that need it skip cleanly without it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

SHARED = Path(os.environ.get("CHAPTERVERSE_SHARED", Path(__file__).resolve().parents[1].parent / "shared"))
DATA = SHARED / "data"


def shared_path(*parts: str) -> Path:
    """A path under ../shared/data, or skip the calling test when it is absent."""
    path = DATA.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"shared data not available: {path}")
    return path


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Never touch the real user data dir or a real provider from tests."""
    home = tmp_path_factory.mktemp("cv-home")
    monkeypatch.setenv("CHAPTERVERSE_HOME", str(home))
    for var in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "CHAPTERVERSE_LLM_BASE_URL", "CHAPTERVERSE_LLM_MODEL",
                "CHAPTERVERSE_LLM_API_KEY", "CHAPTERVERSE_STORE_URL", "CHAPTERVERSE_EMBED_API_KEY",
                "CHAPTERVERSE_EMBEDDING_MODEL", "CHAPTERVERSE_API_KEY", "CHAPTERVERSE_RERANKER",
                "CHAPTERVERSE_RERANK_TOP_N", "CHAPTERVERSE_RERANK_MODEL", "CHAPTERVERSE_RERANK_API_KEY"):
        monkeypatch.delenv(var, raising=False)
from serverutil import reader_server  # noqa: E402,F401  (fixture for the browser tests)
from realllm import real_llm_server  # noqa: E402,F401  (the real model, for the model-path tests)
