"""The search stage: a question -> the passages that may answer it, each with a relevance score and its tag.

- :mod:`.retrieval`: the first stage, BM25 and dense candidates fused into one ranking (:class:`.retrieval.Retriever`);
- :mod:`.relevance`: the pointwise relevance model that gives each hit its 0..1 score;
- :mod:`.rerank`: the optional second stage (a cross-encoder or a model) that reorders the first stage's best;
- :mod:`.passages`: hits as the CLI, the reader and the knowledge-base API show them.

Nothing is imported here, so that a command that never searches loads none of it.
"""
