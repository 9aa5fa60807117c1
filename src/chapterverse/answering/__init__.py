"""Answers and their shape: the extractive reader (no model) and the result every answer path returns.

Data flow inside: :mod:`.question` (what is asked) -> :mod:`.sentences` (candidate sentences around the
retrieved passages) -> :mod:`.features` -> :mod:`.model` (learned ranking and calibrated confidence) ->
:mod:`.extractive` (the composed, tagged answer) with :mod:`.phrases` (the answer phrase inside it).
"""

from .extractive import extractive_answer
from .result import NOT_FOUND_PREFIX, UNSURE_PREFIX, AnswerResult, AnswerSpanOut, AnswerState

__all__ = ["AnswerResult", "AnswerSpanOut", "AnswerState", "NOT_FOUND_PREFIX", "UNSURE_PREFIX", "extractive_answer"]
