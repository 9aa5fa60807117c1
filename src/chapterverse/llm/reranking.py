"""Rerankers that take a chat model, and choosing the reranker a library is searched with.

The ``llm`` kind of second stage is a chat model judging the candidates listwise (:class:`LlmReranker`); it lives
here, beside the client it calls, so that the search stage (``search.rerank``: the protocol, the cross-encoder and
HTTP rerankers, their settings) never reaches up to the model layer. :func:`library_reranker` picks one of them
from flags, env and the library's config file.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ..config import load_config
from ..errors import ChapterverseError, InputError
from ..redaction import redact_url
from ..search.rerank import (DEFAULT_TOKEN_BUDGET, CrossEncoderReranker, HttpReranker, RerankError, Reranker,
                             RerankSettings)
from .client import ChatProvider
from .provider_config import ProviderConfig, check_base_url
from .selection import SelectionParseError, parse_selection

__all__ = ["LlmReranker", "load_reranker", "library_reranker"]

_CHARS_PER_TOKEN = 4
"""A rough count for the LLM judge's budget: a tokenizer per model is not worth its cost here."""

_JUDGE_SYSTEM = (
    "You rank passages by how well they answer a question. Each passage starts with its id in brackets. "
    'Reply with only {"Thinking": "<one short sentence>", "answer": ["<id>", ...]}: the ids of the passages '
    "that help answer the question, most useful first. Leave out passages that do not help."
)


class LlmReranker:
    """The configured chat model orders the candidates listwise: ids in, a JSON list of ids out.

    Each passage is cut so that all of them fit ``token_budget`` (counted at four characters a token); the
    reply is parsed by ``llm.selection.parse_selection``, so fences, prose and single quotes around the JSON do
    not matter. A provider failure or an unreadable reply is a RerankError.
    """

    def __init__(self, provider: ChatProvider, *, token_budget: int = DEFAULT_TOKEN_BUDGET) -> None:
        if token_budget < 200:
            raise InputError(f"rerank token_budget must be at least 200, not {token_budget}")
        self.provider = provider
        self.token_budget = token_budget

    @property
    def name(self) -> str:
        return f"llm:{self.provider.config.model}"

    def messages(self, query: str, passages: Sequence[str]) -> list[dict[str, str]]:
        """The judge's prompt: passages numbered from 1, each cut to its share of the budget."""
        share = max(80, (self.token_budget * _CHARS_PER_TOKEN - len(query) - len(_JUDGE_SYSTEM)) // len(passages))
        listed = "\n\n".join(f"[{i + 1}] {' '.join(p.split())[:share]}" for i, p in enumerate(passages))
        return [{"role": "system", "content": _JUDGE_SYSTEM},
                {"role": "user", "content": f"Question: {query}\n\nPassages:\n\n{listed}"}]

    def rank(self, query: str, passages: Sequence[str]) -> list[int]:
        try:
            reply = self.provider.complete(self.messages(query, passages), temperature=0, max_tokens=400)
            selection = parse_selection(reply.content, valid_ids=[str(i + 1) for i in range(len(passages))],
                                        max_ids=len(passages))
        except SelectionParseError as exc:
            raise RerankError(f"{self.name} answered no usable ranking: {exc}") from exc
        except ChapterverseError as exc:
            raise RerankError(f"{self.name} failed: {exc}") from exc
        return [int(i) - 1 for i in selection.ids]


def load_reranker(settings: RerankSettings, *, provider: ProviderConfig | None = None,
                  device: str | None = None) -> Reranker | None:
    """The reranker ``settings`` name (None when none is), checked but not loaded: a cross-encoder loads on first
    use. ``provider`` is the chat endpoint the ``llm`` kind judges with; InputError when it is missing."""
    spec = settings.reranker
    if spec is None or spec.strip().lower() in ("", "none", "off"):
        return None
    spec = spec.strip()
    if spec.lower() == "llm":
        if provider is None:
            raise InputError("--reranker llm needs a chat model: set --llm-model (and --llm-base-url) or "
                             "CHAPTERVERSE_LLM_MODEL")
        return LlmReranker(ChatProvider(provider), token_budget=settings.token_budget)
    tei = spec.lower().startswith("tei:")
    url = spec[4:] if tei else spec
    if url.lower().startswith(("http://", "https://")):
        try:
            url = check_base_url(url)
        except InputError as exc:
            raise InputError(f"reranker {redact_url(url)!r} is not an http(s) URL naming a host") from exc
        return HttpReranker(url, tei=tei, model=settings.model, api_key=settings.api_key,
                            timeout_s=settings.timeout_s)
    if tei:
        raise InputError(f"reranker {spec!r}: tei: must be followed by an http(s) URL, e.g. "
                         "tei:http://localhost:8080/rerank")
    return CrossEncoderReranker(spec, device=device)


def library_reranker(location: Path, *, reranker: str | None = None, top_n: int | None = None,
                     provider: ProviderConfig | None = None) -> tuple[Reranker | None, int]:
    """The reranker and top N for a library at ``location``: flags over env over its config file's ``rerank``
    table. The ``llm`` kind judges with ``provider``, else with the chat model the same config names."""
    config = load_config(location) if location.is_dir() else {}
    settings = RerankSettings.resolve(reranker=reranker, top_n=top_n, config=config.get("rerank"))
    if provider is None and (settings.reranker or "").strip().lower() == "llm":
        provider = ProviderConfig.resolve(config=config.get("llm"))
    return load_reranker(settings, provider=provider), settings.top_n
