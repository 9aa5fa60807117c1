"""Canonical text cut into exact spans: retrieval chunks, sentences and reading segments.

Everything here returns offsets into the canonical texts (``sources`` made them) and never builds text:

- :mod:`.chunks`: retrieval chunks of at most ``chunk_size`` code points, what the indexes hold.
- :mod:`.sentences`: sentences, for quoting and scoring evidence.
- :mod:`.segments`: reading segments of ~20 k characters that follow the TOC, and their tagged text.
- :mod:`.boundaries`: where a cut may fall, the rules the three share.
"""

from .chunks import DEFAULT_SEPARATORS, ChunkSpec, chunk_document, split_text
from .segments import SegmentSpec, build_segments, segment_paragraphs, tagged_source_text, tagged_text
from .sentences import sentence_spans

__all__ = [
    "DEFAULT_SEPARATORS",
    "ChunkSpec",
    "SegmentSpec",
    "build_segments",
    "chunk_document",
    "segment_paragraphs",
    "sentence_spans",
    "split_text",
    "tagged_source_text",
    "tagged_text",
]
