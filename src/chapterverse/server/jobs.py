"""Background ingest jobs: one worker thread, so ingests run one at a time and never block requests.

A job is polled through ``GET /api/jobs/{id}``; its ``done``/``total``/``message`` follow the
library's progress callback. Jobs live in memory (the last ``KEEP`` of them); what they wrote is
in the store, so losing the job list on restart loses nothing but the progress bar.

Stopping the server ends the running job at its next batch: the work hands the job's token (``cancel``)
to the library, which checks it between embedding batches, before the document is written (each document
is one transaction), so SIGTERM never waits for a large book to finish embedding, and nothing
half-written is left behind.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Literal

from ..cancel import CancelToken
from ..errors import ChapterverseError, NotFoundError, StoppingError

__all__ = ["Job", "JobManager", "JobState"]

log = logging.getLogger(__name__)

JobState = Literal["queued", "running", "done", "failed"]
KEEP = 500


@dataclass(slots=True)
class Job:
    id: int
    label: str
    state: JobState = "queued"
    done: int = 0
    total: int = 0
    message: str = ""
    document_ids: list[int] = field(default_factory=list)
    error: str | None = None
    notice: str | None = None
    """What the user should know about a job that succeeded, e.g. that the book was already in the library."""
    cancel: CancelToken = field(default_factory=CancelToken, repr=False)
    """Cancelled when the server stops; the work hands it to the library, which then ends the job at its next
    batch."""

    def progress(self, stage: str, done: int, total: int) -> None:
        """The library's ``progress(stage, done, total)`` callback: what ``GET /api/jobs/{id}`` shows."""
        self.message, self.done, self.total = stage, done, total

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "state": self.state, "done": self.done, "total": self.total, "message": self.message,
                "document_ids": list(self.document_ids), "error": self.error, "notice": self.notice}


Work = Callable[[Job], None]
"""Does the job's work, appending to ``job.document_ids``, reporting through ``job.progress`` and stopping when
``job.cancel`` says so."""


def _job_stopped(stage: str) -> ChapterverseError:
    return StoppingError(f"the server stopped; this job ended before writing its current document ({stage})")


class JobManager:
    def __init__(self) -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ingest")
        self._jobs: OrderedDict[int, Job] = OrderedDict()
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._stopping = CancelToken()

    def submit(self, label: str, work: Work) -> Job:
        with self._lock:
            job = Job(next(self._ids), label, cancel=self._stopping)
            self._jobs[job.id] = job
            while len(self._jobs) > KEEP:
                self._jobs.popitem(last=False)
        self._pool.submit(self._run, job, work)
        return job

    def get(self, job_id: int) -> Job:
        with self._lock:
            job = self._jobs.get(job_id)
        if job is None:
            raise NotFoundError(f"no job with id {job_id}")
        return job

    def shutdown(self) -> None:
        """Drop queued jobs, end the running one at its next batch, and wait for it."""
        self._stopping.cancel(_job_stopped)
        self._pool.shutdown(wait=True, cancel_futures=True)

    @staticmethod
    def _run(job: Job, work: Work) -> None:
        job.state = "running"
        try:
            work(job)
        except ChapterverseError as exc:
            job.error, job.state = str(exc), "failed"
            log.warning("job %d (%s) failed: %s", job.id, job.label, exc)
            return
        except Exception as exc:  # a worker must report, not die
            job.error, job.state = f"{type(exc).__name__}: {exc}", "failed"
            log.exception("job %d (%s) failed", job.id, job.label)
            return
        job.message, job.done = "done", job.total
        job.state = "done"
