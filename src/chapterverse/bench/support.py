"""The citation support check measured: labelled sentence-span pairs from FairytaleQA, and the check's precision
and recall on them (``chapterverse bench support``).

Pairs are built from a split's stories, reproducibly (a seeded sample), never stored:

- **paraphrase** (supports): a question of one section turned into the statement a model answers with (its
  words without the question word, then the annotator's answer: "Who had seven sons?" + "a farmer" -> "A farmer
  had seven sons."), paired with that section. ``explicit`` answers are words of the section, ``implicit`` ones
  the annotator's own summary of it.
- **extraction** (supports): one sentence of a section, its first words cut off, paired with that section.
- **wrong section** (does not support): each of those statements paired with the other section of the same
  story that shares the most content words with it (what retrieval shows a model next to the right one: the
  same people, another event). A section that holds one of the gold answers word for word is not used.

Statements of fewer than ``support.MIN_JUDGED_WORDS`` words are left out: the check does not judge them (nor
does the verifier count them as claims).

The positive class is **does not support**: the check's job is to flag a pair. Its precision is the share of
flagged pairs that truly do not support their sentence (a good citation removed costs a correct answer its
source); its recall the share of non-supporting pairs it flags (one it misses is a wrong source shown as the
sentence's). The table gives both for the other class too.
"""

from __future__ import annotations

import csv
import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..analysis import content_words, word_tokens
from ..errors import InputError
from ..support import MIN_JUDGED_WORDS, supports

__all__ = ["SupportPair", "SupportReport", "support_pairs", "measure_support"]

_ANSWER_COLUMNS = ("answer1", "answer2", "answer3", "answer4", "answer5", "answer6")
_QUESTION_WORD = re.compile(r"^(?:who|whom|whose|what|which|where|when|why|how)(?:\s+(?:many|much|long|did|does|do|"
                            r"was|were|is|are|had|has|have|could|would|will|can))?\s+", re.IGNORECASE)
_SENTENCE = re.compile(r"[^.!?]+[.!?]")
_WORDS = re.compile(r"\w+")


@dataclass(frozen=True, slots=True)
class SupportPair:
    sentence: str
    span: str
    supports: bool
    kind: str
    """paraphrase-explicit, paraphrase-implicit or extraction; ``wrong-section/...`` for the negatives."""
    story: str


@dataclass(frozen=True, slots=True)
class SupportReport:
    pairs: int
    flagged_precision: float
    flagged_recall: float
    kept_precision: float
    kept_recall: float
    by_kind: dict[str, tuple[int, int]]
    """Pairs of each kind, and how many of them the check judged right."""


def statement(question: str, answer: str) -> str:
    """The sentence a model answering ``question`` with ``answer`` would write, near enough for the words."""
    asked = question.strip().rstrip("?").strip()
    answer = answer.strip().rstrip(".")
    if re.match(r"(?i)who\s", asked):
        text = f"{answer} {asked[4:]}"
    else:
        rest = _QUESTION_WORD.sub("", asked)
        text = f"{rest}: {answer}" if rest != asked else f"{asked}: {answer}"
    return text[:1].upper() + text[1:] + "."


def _read(path: Path) -> list[dict[str, str]]:
    try:
        with path.open(encoding="utf-8", newline="") as handle:
            return list(csv.DictReader(handle))
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise InputError(f"{path}: cannot read CSV: {exc}") from exc


def _overlap(sentence: str, text: str) -> int:
    return len(set(content_words(sentence, ["english"])) & set(word_tokens(text)))


def _normal(text: str) -> str:
    return " ".join(word_tokens(text))


def _story_pairs(story: str, sections: dict[str, str], rows: list[dict[str, str]],
                 rng: random.Random) -> list[SupportPair]:
    """The pairs of one story: each usable question and one extraction per section, with their wrong sections."""
    pairs: list[SupportPair] = []
    claims: list[tuple[str, str, str, list[str]]] = []  # shorter sentences are not judged (MIN_JUDGED_WORDS)
    for row in rows:
        cited = [s.strip() for s in (row.get("cor_section") or "").split(",") if s.strip()]
        answers = [a.strip() for c in _ANSWER_COLUMNS if (a := (row.get(c) or "")).strip()]
        question = (row.get("question") or "").strip()
        if len(cited) != 1 or cited[0] not in sections or not answers or not question:
            continue
        kind = "paraphrase-" + ("explicit" if (row.get("ex-or-im1") or "").strip() == "explicit" else "implicit")
        claims.append((statement(question, answers[0]), cited[0], kind, answers))
    for section_id, text in sections.items():
        sentences = [s.strip() for s in _SENTENCE.findall(text) if len(s.split()) >= 10]
        if sentences:
            words = rng.choice(sentences).split()
            cut = words[min(3, len(words) // 4):]
            claims.append((" ".join(cut)[:1].upper() + " ".join(cut)[1:], section_id, "extraction", []))
    for sentence, section_id, kind, answers in claims:
        if len(_WORDS.findall(sentence)) < MIN_JUDGED_WORDS:
            continue
        pairs.append(SupportPair(sentence, sections[section_id], True, kind, story))
        others = [(sid, t) for sid, t in sections.items()
                  if sid != section_id and not any(_normal(a) in _normal(t) for a in answers)]
        if others:
            _, wrong = max(others, key=lambda item: (_overlap(sentence, item[1]), item[0]))
            pairs.append(SupportPair(sentence, wrong, False, f"wrong-section/{kind}", story))
    return pairs


def support_pairs(directory: str | Path, split: str, *, stories: int | None = None, seed: int = 0) -> list[SupportPair]:
    """The labelled pairs of ``stories`` stories (all when None) of FairytaleQA's ``split``, sampled with
    ``seed``."""
    directory = Path(directory)
    asked = directory / "questions" / split
    told = directory / "section-stories" / split
    if not asked.is_dir() or not told.is_dir():
        raise InputError(f"{directory}: not a FairytaleQA directory with split {split!r}")
    files = sorted(asked.glob("*-questions.csv"))
    rng = random.Random(seed)
    if stories is not None and stories < len(files):
        files = sorted(rng.sample(files, stories))
    pairs: list[SupportPair] = []
    for question_file in files:
        stem = question_file.name.removesuffix("-questions.csv")
        story_file = told / f"{stem}-story.csv"
        if not story_file.is_file():
            raise InputError(f"{question_file}: no story file {story_file.name} in {told}")
        sections = {row["section"].strip(): row["text"].strip() for row in _read(story_file)
                    if (row.get("text") or "").strip() and (row.get("section") or "").strip()}
        pairs += _story_pairs(stem, sections, _read(question_file), rng)
    return pairs


def measure_support(pairs: Sequence[SupportPair],
                    check: Callable[[str, str], bool] = supports) -> SupportReport:
    """Precision and recall of ``check`` (sentence, span -> supports) on ``pairs``, for both classes."""
    verdicts = [check(p.sentence, p.span) for p in pairs]
    flagged_right = sum(1 for p, v in zip(pairs, verdicts) if not v and not p.supports)
    kept_right = sum(1 for p, v in zip(pairs, verdicts) if v and p.supports)
    flagged = sum(1 for v in verdicts if not v)
    negatives = sum(1 for p in pairs if not p.supports)
    by_kind: dict[str, tuple[int, int]] = {}
    for p, v in zip(pairs, verdicts):
        total, right = by_kind.get(p.kind, (0, 0))
        by_kind[p.kind] = (total + 1, right + (v == p.supports))
    return SupportReport(
        pairs=len(pairs),
        flagged_precision=flagged_right / flagged if flagged else 1.0,
        flagged_recall=flagged_right / negatives if negatives else 1.0,
        kept_precision=kept_right / (len(pairs) - flagged) if len(pairs) > flagged else 1.0,
        kept_recall=kept_right / (len(pairs) - negatives) if len(pairs) > negatives else 1.0,
        by_kind=dict(sorted(by_kind.items())))
