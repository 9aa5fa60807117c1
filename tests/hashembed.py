"""A deterministic embedder for tests that are not about embedding quality."""

from __future__ import annotations

import hashlib
import re

import numpy as np

from chapterverse.embeddings import Embedder


class HashingEmbedder(Embedder):
    """Bag of hashed words: deterministic, fast, and similar texts still get similar vectors."""

    name = "test-hashing-64"

    @property
    def dim(self) -> int:
        return 64

    def _embed_batch(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), 64), np.float32)
        for i, text in enumerate(texts):
            for word in re.findall(r"\w+", text.lower()):
                out[i, int(hashlib.blake2b(word.encode(), digest_size=2).hexdigest(), 16) % 64] += 1
            out[i, 0] += 1e-3
        return out
