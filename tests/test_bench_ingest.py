"""``chapterverse bench ingest`` end to end on a few real passages (small upserts and a tiny bulk load)."""

from __future__ import annotations

from pathlib import Path

from conftest import shared_path

from chapterverse.bench.ingest import DIM, format_report, run_ingest_bench


def test_bench_ingest_reports_both_workloads_with_bytes_per_chunk(tmp_path: Path) -> None:
    shared = shared_path("books").parents[1]
    report = run_ingest_bench(upserts=4, passages=2, bulk_chunks=30, rounds=1, workdir=tmp_path, shared=shared,
                              echo=lambda line: None)
    rows = {(r["workload"], r["engine"]): r for r in report["rows"]}
    upserts, bulk = rows["upserts", "chapterverse"], rows["bulk", "chapterverse"]
    batched = rows["upserts-batched", "chapterverse"]
    assert upserts["documents"] == 4 and upserts["chunks"] >= 8 and bulk["chunks"] == 30
    assert (batched["documents"], batched["chunks"]) == (upserts["documents"], upserts["chunks"])
    assert {engine for workload, engine in rows if workload == "upserts-batched"} == {"chapterverse"}
    for row in (upserts, batched, bulk):
        assert row["store_s"] > 0 and row["chunks_per_s"] > 0
        assert row["sqlite_bytes_per_chunk"] >= 4 * DIM and row["index_bytes_per_chunk"] >= 4 * DIM
    assert bulk["searchable_p50_s"] > 0  # ten upserts into the bulk library, each found by a search
    assert list(tmp_path.iterdir()) == []  # the measurements' libraries are removed
    table = format_report(report)
    assert "| upserts | chapterverse | 4 |" in table and "| bulk | chapterverse | 1 | 30 |" in table
    assert table.index("| upserts |") < table.index("| upserts-batched |") < table.index("| bulk |")
