"""Second-stage rerankers (``chapterverse.search.rerank``) against real parts: a cross-encoder saved on disk, a rerank
HTTP server and a scripted chat model on 127.0.0.1, a real library of the demo book.

The cross-encoder has random weights (no reranker model ships here): these tests check the plumbing (what is
reordered, what is kept, what a failure does), not ranking quality.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from fakellm import Reply, fake_llm
from fakererank import fake_reranker
from hashembed import HashingEmbedder
from serverutil import running_server, settings_for, shared_embedder
from typer.testing import CliRunner

from chapterverse.cli import app
from chapterverse import InputError, Library, ProviderConfig
from chapterverse.llm.client import ChatProvider
from chapterverse.llm.reranking import LlmReranker, library_reranker, load_reranker
from chapterverse.search.rerank import CrossEncoderReranker, HttpReranker, RerankSettings

DEMO = Path(__file__).resolve().parents[1] / "src" / "chapterverse" / "demo" / "the-keeper-of-gull-rock.md"
QUERY = "who kept the lighthouse on Gull Rock"


@pytest.fixture(scope="module")
def library_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    location = tmp_path_factory.mktemp("rerank-lib")
    library = Library(location, embedder=HashingEmbedder(), chunk_size=160, chunk_overlap=16)
    library.ingest([DEMO])
    library.close()
    return location


@pytest.fixture
def library(library_dir: Path) -> Iterator[Library]:
    lib = Library(library_dir, embedder=HashingEmbedder())
    yield lib
    lib.close()


@pytest.fixture(scope="module")
def cross_encoder_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A one-layer BERT cross-encoder with random weights and a tiny vocabulary, saved like any local model."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    folder = tmp_path_factory.mktemp("tiny-cross-encoder")
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *sorted(set(DEMO.read_text().lower().split()))[:400]]
    (folder / "vocab.txt").write_text("\n".join(words) + "\n", encoding="utf-8")
    tokenizer = transformers.BertTokenizerFast(vocab_file=str(folder / "vocab.txt"))
    torch.manual_seed(7)
    config = transformers.BertConfig(vocab_size=len(words), hidden_size=16, num_hidden_layers=1,
                                     num_attention_heads=2, intermediate_size=32, max_position_embeddings=256,
                                     num_labels=1)
    transformers.BertForSequenceClassification(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def _first_stage(library: Library, k: int, threshold: float | None = None) -> list[tuple[int, float]]:
    library.reranker = None
    return [(h.chunk.id, h.score) for h in library.search(QUERY, k=k, threshold=threshold)]


# ------------------------------------------------------------------------------------- cross-encoder


@pytest.mark.slow  # torch and transformers: half a minute of imports on a busy machine
def test_cross_encoder_reorders_the_top_n_and_keeps_first_stage_scores(library: Library,
                                                                      cross_encoder_dir: Path) -> None:
    from sentence_transformers import CrossEncoder

    first = _first_stage(library, k=8)
    reranker = CrossEncoderReranker(str(cross_encoder_dir), device="cpu")
    library.reranker, library.rerank_top_n = reranker, 8
    found = library.search_report(QUERY, k=3)
    texts = {h.chunk.id: h.text for h in library.search(QUERY, k=8)}
    judge = CrossEncoder(str(cross_encoder_dir), device="cpu", local_files_only=True)
    ids = [cid for cid, _ in first]
    scores = judge.predict([(QUERY, texts[cid]) for cid in ids])
    expected = [ids[i] for i in sorted(range(len(ids)), key=lambda i: -float(scores[i]))][:3]
    assert [h.chunk.id for h in found.hits] == expected
    assert found.rerank is not None and found.rerank.applied and found.rerank.candidates == 8
    assert {h.chunk.id: h.score for h in found.hits} == {cid: s for cid, s in first if cid in expected}
    assert reranker.load() is reranker.load()  # loaded once


def test_reranking_never_brings_in_a_passage_below_the_threshold(library: Library) -> None:
    """A judge that puts the first stage's worst candidates first (what a reranker may do) still shows none
    below the threshold."""
    everything = _first_stage(library, k=40)
    threshold = sorted(s for _, s in everything)[len(everything) // 2]
    allowed = {cid for cid, _ in _first_stage(library, k=40, threshold=threshold)}
    with fake_reranker(lambda query, docs: [float(i) for i in range(len(docs))]) as server:
        library.reranker = HttpReranker(server.url)
        hits = library.search(QUERY, k=10, threshold=threshold)
    assert hits and {h.chunk.id for h in hits} <= allowed and all(h.score >= threshold for h in hits)


def test_cross_encoder_name_not_on_this_machine_is_a_clear_error(monkeypatch: pytest.MonkeyPatch,
                                                                 tmp_path: Path) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    reranker = load_reranker(RerankSettings(reranker="nobody/no-such-reranker"))
    assert isinstance(reranker, CrossEncoderReranker)
    with pytest.raises(InputError, match="never downloads models.*huggingface-cli download nobody/no-such-reranker"):
        reranker.rank("q", ["a", "b"])


# ---------------------------------------------------------------------------------------------- http


def test_http_reranker_sends_the_common_shape_and_follows_the_scores(library: Library) -> None:
    first = [cid for cid, _ in _first_stage(library, k=6)]
    with fake_reranker(lambda query, docs: [float(i) for i in range(len(docs))]) as server:
        library.reranker = HttpReranker(server.url, model="rerank-v3.5", api_key="sk-test-secret-1234")
        library.rerank_top_n = 6
        found = library.search_report(QUERY, k=6)
    assert [h.chunk.id for h in found.hits] == first[::-1]
    body = server.requests[0]
    assert body["query"] == QUERY and body["model"] == "rerank-v3.5" and body["top_n"] == 6
    assert len(body["documents"]) == 6
    assert server.headers[0]["Authorization"] == "Bearer sk-test-secret-1234"
    assert found.rerank is not None and found.rerank.applied and found.rerank.error is None


def test_tei_reranker_sends_texts_and_reads_the_bare_list(library: Library) -> None:
    first = [cid for cid, _ in _first_stage(library, k=5)]
    with fake_reranker(lambda query, docs: [0.0, 0.0, 0.0, 0.0, 1.0][:len(docs)], path="/rerank") as server:
        reranker = load_reranker(RerankSettings(reranker=f"tei:{server.url}"))
        library.reranker, library.rerank_top_n = reranker, 5
        hits = library.search(QUERY, k=5)
    assert set(server.requests[0]) >= {"query", "texts"} and "documents" not in server.requests[0]
    assert [h.chunk.id for h in hits] == [first[4], *first[:4]]  # ties keep the first-stage order


@pytest.mark.parametrize("failure", ["status", "timeout", "unreachable"])
def test_http_failure_keeps_the_first_stage_order_and_says_so(library: Library, failure: str) -> None:
    first = [cid for cid, _ in _first_stage(library, k=4)]
    if failure == "unreachable":
        with fake_reranker(lambda q, d: [0.0] * len(d)) as server:
            url = server.url
        library.reranker = HttpReranker(url, timeout_s=2)
        found = library.search_report(QUERY, k=4)
    else:
        options = {"status": 503} if failure == "status" else {"delay_s": 1.5}
        with fake_reranker(lambda q, d: [0.0] * len(d), **options) as server:  # type: ignore[arg-type]
            library.reranker = HttpReranker(server.url, timeout_s=0.3)
            found = library.search_report(QUERY, k=4)
    assert [h.chunk.id for h in found.hits] == first
    report = found.rerank
    assert report is not None and not report.applied
    expected = {"status": "HTTP 503", "timeout": "did not answer within 0.3 s", "unreachable": "cannot reach"}
    assert report.error is not None and expected[failure] in report.error


def test_rag_search_reports_the_reranker_and_its_fallback(tmp_path: Path) -> None:
    kb = tmp_path / "kb"
    kb.mkdir()
    (kb / "keeper.md").write_text(DEMO.read_text(encoding="utf-8"), encoding="utf-8")
    with fake_reranker(lambda q, docs: [-float(i) for i in range(len(docs))]) as reranker:
        settings = settings_for(tmp_path, rag_enabled=True, rag_reranker=reranker.url, rag_rerank_top_n=5,
                                rag_threshold=0.0)
        with running_server(settings) as server, server.client() as client:
            reply = client.post("/v1/rag/search", json={"query": QUERY, "top_k": 3}).json()
            assert reply["rerank"]["applied"] is True and reply["rerank"]["candidates"] == 5
            assert reply["rerank"]["reranker"] == reranker.url
            assert len(reranker.requests) == 1 and len(reranker.requests[0]["documents"]) == 5
    with running_server(settings) as server, server.client() as client:  # the endpoint is gone now
        reply = client.post("/v1/rag/search", json={"query": QUERY, "top_k": 3}).json()
    assert reply["count"] == 3 and reply["rerank"]["applied"] is False
    assert "cannot reach" in reply["rerank"]["error"]


def test_rag_search_without_a_reranker_has_no_rerank_field(tmp_path: Path) -> None:
    (tmp_path / "kb").mkdir()
    (tmp_path / "kb" / "keeper.md").write_text(DEMO.read_text(encoding="utf-8"), encoding="utf-8")
    with running_server(settings_for(tmp_path, rag_enabled=True)) as server, server.client() as client:
        reply = client.post("/v1/rag/search", json={"query": QUERY}).json()
    assert reply["count"] >= 1 and "rerank" not in reply


# ----------------------------------------------------------------------------------------------- llm


def test_llm_judge_orders_by_the_ids_it_returns(library: Library) -> None:
    first = [cid for cid, _ in _first_stage(library, k=5)]
    reply = 'Sure!\n```json\n{"thinking": "3 names the keeper", "Answer": [3, "5", 99]}\n```'
    with fake_llm(Reply.text(reply)) as fake:
        provider = ChatProvider(ProviderConfig(base_url=fake.base_url, model="judge"))
        library.reranker, library.rerank_top_n = LlmReranker(provider, token_budget=300), 5
        found = library.search_report(QUERY, k=5)
        prompt = fake.chat_requests[0].json["messages"][-1]["content"]
    assert [h.chunk.id for h in found.hits] == [first[2], first[4], first[0], first[1], first[3]]
    assert found.rerank is not None and found.rerank.applied and found.rerank.reranker == "llm:judge"
    assert QUERY in prompt and "[1] " in prompt and "[5] " in prompt
    assert len(prompt) < 300 * 4  # the passages were cut to the token budget


def test_llm_judge_with_an_unreadable_reply_falls_back(library: Library) -> None:
    first = [cid for cid, _ in _first_stage(library, k=4)]
    with fake_llm(Reply.text("I think the third one, probably.")) as fake:
        library.reranker = LlmReranker(ChatProvider(ProviderConfig(base_url=fake.base_url, model="judge")))
        found = library.search_report(QUERY, k=4)
    assert [h.chunk.id for h in found.hits] == first
    assert found.rerank is not None and not found.rerank.applied and "no usable ranking" in (found.rerank.error or "")


# ------------------------------------------------------------------------------------------ settings


def test_settings_precedence_flag_env_file(tmp_path: Path) -> None:
    file = {"reranker": "llm", "top_n": 12, "timeout_s": 3, "model": "m-file", "api_key_env": "MY_RERANK_KEY"}
    env = {"CHAPTERVERSE_RERANKER": "http://env.example/rerank", "MY_RERANK_KEY": "k-from-env-var"}
    assert RerankSettings.resolve(config=file, env={}).reranker == "llm"
    from_env = RerankSettings.resolve(config=file, env=env)
    assert from_env.reranker == "http://env.example/rerank" and from_env.top_n == 12
    assert from_env.api_key == "k-from-env-var" and from_env.model == "m-file" and from_env.timeout_s == 3.0
    assert "k-from-env-var" not in repr(from_env)
    flagged = RerankSettings.resolve(reranker="/models/bge", top_n=7, config=file, env={**env,
                                                                                      "CHAPTERVERSE_RERANK_TOP_N": "9"})
    assert (flagged.reranker, flagged.top_n) == ("/models/bge", 7)
    assert RerankSettings.resolve(config=file, env={"CHAPTERVERSE_RERANK_TOP_N": "9"}).top_n == 9
    with pytest.raises(InputError, match="unknown rerank config key.*rerankr"):
        RerankSettings.resolve(config={"rerankr": "llm"}, env={})
    assert RerankSettings.resolve(config={"top_n": 20.0}, env={}).top_n == 20
    with pytest.raises(InputError, match="top_n must be a whole number"):
        RerankSettings.resolve(config={"top_n": 2.5}, env={})
    with pytest.raises(InputError, match="top_n must be a number"):
        RerankSettings.resolve(top_n=None, config={"top_n": "lots"}, env={})
    assert load_reranker(RerankSettings(reranker="off")) is None
    with pytest.raises(InputError, match="needs a chat model"):
        load_reranker(RerankSettings(reranker="llm"))
    with pytest.raises(InputError, match="not an http"):
        load_reranker(RerankSettings(reranker="https://"))


def test_library_config_file_names_the_reranker(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"rerank": {"reranker": "tei:http://127.0.0.1:9/rerank",
                                                                 "top_n": 11}}))
    reranker, top_n = library_reranker(tmp_path)
    assert isinstance(reranker, HttpReranker) and reranker.tei and top_n == 11


def test_cli_search_with_a_reranker(tmp_path: Path) -> None:
    library_dir = tmp_path / "lib"
    Library(library_dir, embedder=shared_embedder()).ingest([DEMO])
    with fake_reranker(lambda q, docs: [float(i) for i in range(len(docs))]) as server:
        plain = CliRunner().invoke(app, ["search", QUERY, "--library", str(library_dir), "--k", "4", "--json"])
        reranked = CliRunner().invoke(app, ["search", QUERY, "--library", str(library_dir), "--k", "4", "--json",
                                            "--reranker", server.url, "--rerank-top-n", "4"])
    assert plain.exit_code == 0 and reranked.exit_code == 0, reranked.output
    tags = [r["tag"] for r in json.loads(plain.stdout)["results"]]
    assert [r["tag"] for r in json.loads(reranked.stdout)["results"]] == tags[::-1]
    assert len(server.requests) == 1
    bad = CliRunner().invoke(app, ["search", QUERY, "--library", str(library_dir), "--reranker", "tei:nowhere"])
    assert bad.exit_code == 2 and "tei: must be followed by an http(s) URL" in bad.output
