"""Answers and their shape: the one answer dispatcher, the extractive reader (no model) and the result every answer
path returns.

:mod:`.ask` decides who answers (the extractive reader, the model's tool loop of :mod:`.model_turn`, or the reader
when the model fails) and streams the events of :mod:`.result`. Data flow inside the reader: :mod:`.question` (what is
asked) -> :mod:`.sentences` (candidate sentences around the retrieved passages) -> :mod:`.features` ->
:mod:`.model` (learned ranking and calibrated confidence) -> :mod:`.extractive` (the composed, tagged answer) with
:mod:`.phrases` (the answer phrase inside it); :mod:`.reader_library` names what the reader needs of a library.
"""

from .ask import answer_events
from .extractive import extractive_answer
from .result import (NOT_FOUND_PREFIX, UNSURE_PREFIX, AnswerDelta, AnswerDone, AnswerEvent, AnswerMeta, AnswerResult,
                     AnswerSpanOut, AnswerState, AnswerStatus)

__all__ = ["AnswerResult", "AnswerSpanOut", "AnswerState", "NOT_FOUND_PREFIX", "UNSURE_PREFIX",
           "AnswerMeta", "AnswerStatus", "AnswerDelta", "AnswerDone", "AnswerEvent", "answer_events", "extractive_answer"]
