"""A cross-encoder reading model as exported by ``chapterverse_dev fit-reader``: question and sentence read together.

A sentence vector is computed without the question, and word overlap cannot tell "the sun, who was just
setting" (the answer to "Who was setting?") from a line that repeats the question's words; a cross-encoder
attends across both texts at once. This runs an exported model with onnxruntime and the ``tokenizers``
library (no torch), as the reader would: it is here, beside its trainer, because no model trained so far
answers better than the shipped reader (docs/BENCHMARKS.md, "Reading model"), so none is packaged yet.

A model is a folder of ``model.onnx``, ``tokenizer.json`` and ``model.json``, which names the format, the base
model, the input length and the SHA-256 of the other two. Files that do not match their description (a partial
copy, a model fit for another tokenizer, an older format) are refused with :class:`ReadingModelError` rather
than scored with silently.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["FORMAT", "ReadingModel", "ReadingModelError", "open_reading_model", "describe_files"]

FORMAT = "chapterverse-cross-encoder/1"
"""What :class:`ReadingModel` knows how to run: a BERT-style ONNX graph over (input_ids, attention_mask,
token_type_ids) returning one logit per pair."""
THREADS = 2


class ReadingModelError(ValueError):
    """The reading model's files are missing, damaged or were made for another format."""


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def describe_files(directory: Path, **description: Any) -> dict[str, Any]:
    """``model.json`` for the model and tokenizer in ``directory`` (written by ``chapterverse_dev fit-reader``)."""
    return {"format": FORMAT, **description,
            "sha256": {name: _sha256(directory / name) for name in ("model.onnx", "tokenizer.json")}}


@dataclass(slots=True)
class ReadingModel:
    """Scores (question, sentence) pairs: a higher logit, a sentence likelier to answer the question."""

    session: Any
    tokenizer: Any
    max_length: int
    description: dict[str, Any]

    def scores(self, question: str, sentences: Sequence[str]) -> np.ndarray:
        """One logit per sentence (float64), in the order given."""
        if not sentences:
            return np.zeros(0, np.float64)
        encodings = self.tokenizer.encode_batch([(question, s) for s in sentences])
        inputs = {name: np.array([getattr(e, attribute) for e in encodings], dtype=np.int64)
                  for name, attribute in (("input_ids", "ids"), ("attention_mask", "attention_mask"),
                                          ("token_type_ids", "type_ids"))}
        (logits,) = self.session.run(None, inputs)
        return np.asarray(logits, dtype=np.float64).reshape(len(sentences))


def open_reading_model(directory: Path) -> ReadingModel:
    """The model in ``directory``, checked against its ``model.json``."""
    description = _description(directory)
    import onnxruntime
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(directory / "tokenizer.json"))
    max_length = int(description["max_length"])
    tokenizer.enable_truncation(max_length=max_length, strategy="longest_first")
    tokenizer.enable_padding()
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = THREADS
    options.inter_op_num_threads = 1
    session = onnxruntime.InferenceSession(str(directory / "model.onnx"), options,
                                           providers=["CPUExecutionProvider"])
    return ReadingModel(session, tokenizer, max_length, description)


def _description(directory: Path) -> dict[str, Any]:
    path = directory / "model.json"
    try:
        description: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ReadingModelError(f"{path}: cannot read the reading model's description ({exc})") from exc
    if description.get("format") != FORMAT:
        raise ReadingModelError(f"{path}: format {description.get('format')!r}, this chapterverse runs {FORMAT!r}; "
                                f"refit it with `python -m chapterverse_dev fit-reader`")
    for name, expected in dict(description.get("sha256", {})).items():
        file = directory / name
        if not file.is_file() or _sha256(file) != expected:
            raise ReadingModelError(f"{file}: missing or not the file the model was fit with (SHA-256 differs); "
                                    f"refit it with `python -m chapterverse_dev fit-reader`")
    return description
