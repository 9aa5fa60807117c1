"""What one proxied turn may cost, and what it sends fitted to the model's window.

The answer's tokens: the client's ``max_tokens`` or ``max_completion_tokens`` (chat completions) or
``max_output_tokens`` (Responses), capped by ``--llm_max_tokens``, which is also sent when the client names
none; a server with no generation cap of its own would let a looping model write until its window is full.

The window (``--llm_context_tokens``, else asked of the server: ``llm.window``) is shared out in this order: the
answer's room, then the system messages, the tools and the last user turn, then the retrieved passages (as many,
best first, as fit: :func:`fitted_hits`), then the earlier turns, the oldest dropped first. A request whose last
turn alone does not fit is refused here, 400 ``CONTEXT_WINDOW`` naming the window, before the upstream refuses it
with a reason the client may not be shown.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from starlette.concurrency import run_in_threadpool

from ...llm.limits import Deadline
from ...llm.prompts import count_tokens
from ...llm.provider_config import OPENAI_BASE_URL
from ...llm.window import TOKEN_RATIO, answer_room, discover_window, estimate_messages, estimate_tokens
from ...search.retrieval import Hit
from ..errors import ApiError
from ..state import ServerState
from ..upstream import Upstream

__all__ = ["CHAT_TOKEN_FIELDS", "RESPONSES_TOKEN_FIELDS", "TurnBudget", "answer_tokens", "turn_budget",
           "fitted_hits", "turn_deadline"]

log = logging.getLogger(__name__)

CHAT_TOKEN_FIELDS = ("max_completion_tokens", "max_tokens")
RESPONSES_TOKEN_FIELDS = ("max_output_tokens",)
_KEPT_ROLES = ("system", "developer")


def turn_deadline(state: ServerState) -> Deadline:
    """The deadline of a turn that starts now (``--llm_deadline_s``)."""
    return Deadline(state.upstream.current.limits.deadline_s, "--llm_deadline_s")


@dataclass(frozen=True, slots=True)
class TurnBudget:
    """One request's answer tokens (``field`` carries them) and the model's window (None: unknown)."""

    max_tokens: int
    field: str
    window: int | None
    fields: tuple[str, ...] = ()
    """Every field of the API that names the answer's tokens: each one the client set is capped too."""

    @property
    def answer_room(self) -> int:
        return answer_room(self.max_tokens, self.window)

    def passage_room(self, body: dict[str, Any], items: Sequence[Any]) -> int | None:
        """The cl100k tokens the context block may take: what the window leaves beside the answer, the system
        messages, the tools and the last user turn; None when the window is unknown."""
        if self.window is None:
            return None
        kept = _kept_items(items)
        used = _estimate(body, [items[i] for i in sorted(kept)])
        return max(0, int((self.window - self.answer_room - used) / TOKEN_RATIO) - 16)

    def fit(self, body: dict[str, Any], field: str) -> dict[str, Any]:
        """A copy of ``body`` (``field`` holding its messages or input items) with its answer tokens set and, when
        the window is known, its oldest turns dropped until it fits; 400 ``CONTEXT_WINDOW`` when even its last
        turn does not."""
        out = dict(body)
        if self.window is None:
            self._set(out, self.max_tokens)
            return out
        given = out.get(field)
        items = list(given) if isinstance(given, list) else given
        total = _estimate(out, items if isinstance(items, list) else [{"content": str(items)}])
        dropped = 0
        while isinstance(items, list) and total + self.answer_room > self.window:
            droppable = [i for i in range(len(items)) if i not in _kept_items(items)]
            if not droppable:
                break
            del items[droppable[0]]
            dropped += 1
            total = _estimate(out, items)
        if total + self.answer_room > self.window:
            raise ApiError(400, "CONTEXT_WINDOW",
                           f"the request takes about {total} tokens and the upstream model's window is {self.window} "
                           f"tokens, {self.answer_room} of them kept for the answer: shorten the last message "
                           f"(or set --llm_context_tokens if the model reads more)")
        if dropped:
            log.info("dropped the %d oldest message(s) to fit the model's %d-token window", dropped, self.window)
        out[field] = items
        self._set(out, max(1, min(self.max_tokens, self.window - total)))
        return out

    def _set(self, body: dict[str, Any], tokens: int) -> None:
        for name in {self.field, *(f for f in self.fields if f in body)}:
            body[name] = tokens


def answer_tokens(upstream: Upstream, body: dict[str, Any], fields: Sequence[str]) -> int:
    """The tokens the request's answer may take: the client's, capped by ``--llm_max_tokens`` (its value when
    the client names none)."""
    cap = upstream.limits.max_tokens
    return min(_requested(body, fields)[1] or cap, cap)


async def turn_budget(state: ServerState, upstream: Upstream, body: dict[str, Any], fields: Sequence[str],
                      deadline: Deadline) -> TurnBudget:
    """The request's answer tokens (:func:`answer_tokens`) and the model's window."""
    field = _requested(body, fields)[0]
    if field is None:
        field = fields[0] if fields != CHAT_TOKEN_FIELDS or _is_openai(upstream) else "max_tokens"
    model = upstream.model or (str(body.get("model")) if body.get("model") else None)
    window = upstream.limits.context_tokens
    if window is None and upstream.base_url and model:
        window = await run_in_threadpool(discover_window, upstream.base_url, model, _auth(upstream),
                                         timeout_s=min(2.0, deadline.remaining))
    return TurnBudget(answer_tokens(upstream, body, fields), field, window, tuple(fields))


def fitted_hits(hits: list[Hit], room: int | None, block: Callable[[list[Hit]], str], turn: int) -> list[Hit]:
    """The best of ``hits`` whose context block (``block``) takes at most ``room`` cl100k tokens."""
    if room is None:
        return hits
    kept = list(hits)
    while kept and count_tokens(block(kept)) > room:
        kept.pop()
    if len(kept) < len(hits):
        log.info("RAG turn %d: the model's window holds %d of the %d passages retrieved", turn, len(kept), len(hits))
    return kept


def _requested(body: dict[str, Any], fields: Sequence[str]) -> tuple[str | None, int | None]:
    """The field the client set its answer tokens in, and their number; 400 for one that is not a count."""
    for name in fields:
        value = body.get(name)
        if value is None:
            continue
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ApiError(400, "BAD_INPUT", f"{name} must be a positive integer")
        return name, value
    return None, None


def _kept_items(items: Sequence[Any]) -> set[int]:
    """Positions never dropped: system and developer messages, the last user turn and what follows it."""
    last_user = max((i for i, m in enumerate(items) if isinstance(m, dict) and m.get("role") == "user"),
                    default=len(items))
    return {i for i, m in enumerate(items)
            if i >= last_user or not isinstance(m, dict) or m.get("role") in _KEPT_ROLES}


def _estimate(body: dict[str, Any], items: Sequence[Any]) -> int:
    """The prompt's model tokens: the items, the tools, the Responses API's ``instructions``."""
    messages = [m if isinstance(m, dict) else {"content": json.dumps(m)} for m in items]
    tools = body.get("tools") if isinstance(body.get("tools"), list) else None
    instructions = body.get("instructions")
    extra = estimate_tokens(instructions) if isinstance(instructions, str) else 0
    return estimate_messages(messages, tools) + extra


def _auth(upstream: Upstream) -> dict[str, str]:
    return {"Authorization": f"Bearer {upstream.api_key}"} if upstream.api_key else {}


def _is_openai(upstream: Upstream) -> bool:
    """OpenAI's own API takes ``max_completion_tokens`` (its reasoning models refuse ``max_tokens``)."""
    return (upstream.base_url or "").startswith(OPENAI_BASE_URL.removesuffix("/v1"))
