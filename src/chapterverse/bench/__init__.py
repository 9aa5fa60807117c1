"""Benchmarks run by ``chapterverse bench``: retrieval quality against real question sets, and more."""
