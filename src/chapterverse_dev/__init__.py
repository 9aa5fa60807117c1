"""Development tools that ship with the source, not with the package: fitting the reader's models and
thresholds on question sets (``python -m chapterverse_dev --help``).

What users run to measure a library stays in ``chapterverse bench``; what refits the weights
``chapterverse`` ships (``answering/reader_weights.json``, the reading model) is here. These tools need the
test extra (torch, transformers, onnx) and the question sets in ``../shared``.
"""
