"""The readers against corpora built to break parsers: never crash, never hang, fail only typed.

Each file is read in a worker subprocess with a 20 s budget and a 2 GiB address-space limit, so a hang, a
memory blow-up or a crash in native code (libxml2, pdfium) fails the test with the file's name instead of
blocking, swapping or killing the run.
"""

from __future__ import annotations

import importlib.util
import json
import queue
import select
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from conftest import shared_path

from chapterverse.errors import EncryptedSourceError
from chapterverse.sources import read_source

PER_FILE_SECONDS = 20.0
PER_WORKER_BYTES = 2 * 1024**3
WORKERS = 2

_WORKER = r"""
import json, os, resource, sys
resource.setrlimit(resource.RLIMIT_AS, (int(sys.argv[1]), int(sys.argv[1])))
results = os.fdopen(os.dup(1), "w")
os.dup2(2, 1)  # library chatter on stdout must not corrupt the result stream
from chapterverse.errors import SourceError
from chapterverse.sources import read_source

def summary(document):
    bad = [e.title for e in document.toc if not (0 <= e.file_index < len(document.files)
           and 0 <= e.offset <= len(document.files[e.file_index].text))]
    return {"ok": True, "files": len(document.files), "toc": len(document.toc),
            "warnings": len(document.warnings), "bad_toc": bad}

for line in sys.stdin:
    job = json.loads(line)
    try:
        result = summary(read_source(job["path"], password=job.get("password")))
    except SourceError as exc:
        result = {"ok": False, "error": type(exc).__name__, "reason": exc.reason}
    except BaseException as exc:
        result = {"ok": False, "error": "untyped " + type(exc).__name__, "reason": repr(exc)[:300]}
    results.write(json.dumps(result) + "\n")
    results.flush()
"""


class _Worker:
    """One reader subprocess, fed one job at a time so each job gets its own deadline."""

    def __init__(self) -> None:
        self.process = subprocess.Popen([sys.executable, "-c", _WORKER, str(PER_WORKER_BYTES)], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)

    def run(self, job: dict[str, Any]) -> dict[str, Any]:
        assert self.process.stdin is not None and self.process.stdout is not None
        try:
            self.process.stdin.write(json.dumps(job) + "\n")
            self.process.stdin.flush()
        except BrokenPipeError:
            return {"ok": False, "error": "worker died before the job"}
        ready, _, _ = select.select([self.process.stdout], [], [], PER_FILE_SECONDS)
        line = self.process.stdout.readline() if ready else ""
        if line:
            return json.loads(line)
        self.stop()
        return {"ok": False, "error": "hang" if not ready else f"crash (exit {self.process.returncode})"}

    def stop(self) -> None:
        self.process.kill()
        self.process.wait()


def read_in_subprocesses(jobs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Outcome per job path; a worker that hangs or dies is replaced and the run goes on."""
    pending: queue.Queue[dict[str, Any]] = queue.Queue()
    for job in jobs:
        pending.put(job)
    outcomes: dict[str, dict[str, Any]] = {}

    def drain() -> None:
        worker = _Worker()
        while True:
            try:
                job = pending.get_nowait()
            except queue.Empty:
                break
            outcome = worker.run(job)
            outcomes[job["path"]] = outcome
            if worker.process.poll() is not None:
                worker = _Worker()
        worker.stop()

    threads = [threading.Thread(target=drain) for _ in range(WORKERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return outcomes


def _untyped(outcomes: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Outcomes that are neither a document with sane TOC offsets nor a SourceError subclass."""
    typed = {"SourceError", "UnsupportedFormatError", "EncryptedSourceError", "SourceTooLargeError", "BadLinesError"}
    return {Path(path).name: o for path, o in outcomes.items()
            if (o["ok"] and o["bad_toc"]) or (not o["ok"] and o.get("error") not in typed)}


@pytest.mark.slow
def test_epubcheck_corpus() -> None:
    folder = shared_path("robustness", "epub")
    outcomes = read_in_subprocesses([{"path": str(p)} for p in sorted(folder.glob("*.epub"))])
    assert len(outcomes) >= 350
    assert _untyped(outcomes) == {}
    by_verdict: dict[str, list[str]] = {}
    for path, outcome in outcomes.items():
        by_verdict.setdefault(Path(path).stem.rsplit("-", 1)[-1], []).append(outcome)
    # Files EPUBCheck accepts must read; fatal ones fail typed or come with a warning.
    assert all(o["ok"] and o["files"] >= 1 for o in by_verdict["valid"] + by_verdict["warning"])
    assert all(not o["ok"] or o["warnings"] for o in by_verdict["fatal"])


@pytest.mark.slow
def test_pdfjs_corpus() -> None:
    folder = shared_path("robustness", "pdf")
    manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
    outcomes = read_in_subprocesses([{"path": str(folder / entry["file"])} for entry in manifest])
    assert len(outcomes) == len(manifest)
    assert _untyped(outcomes) == {}
    for entry in manifest:
        outcome = outcomes[str(folder / entry["file"])]
        if entry["category"] in ("outline", "notext"):
            assert outcome["ok"], (entry["file"], outcome)
        if entry.get("password"):
            assert outcome.get("error") == "EncryptedSourceError", (entry["file"], outcome)


@pytest.mark.slow
def test_pdf_samples_corpus() -> None:
    folder = shared_path("robustness", "pdf-samples")
    outcomes = read_in_subprocesses([{"path": str(p)} for p in sorted(folder.glob("*.pdf"))])
    assert _untyped(outcomes) == {}
    failed = {Path(p).name: o["error"] for p, o in outcomes.items() if not o["ok"]}
    assert failed == {
        "005-libreoffice-writer-password__libreoffice-writer-password.pdf": "EncryptedSourceError",
        # pdfium and pypdf both reject its broken page tree.
        "017-unreadable-meta-data__unreadablemetadata.pdf": "SourceError",
    }
    outline = outcomes[str(folder / "006-pdflatex-outline__pdflatex-outline.pdf")]
    assert outline["toc"] == 9


def _password_cases() -> list[tuple[str, str]]:
    manifest = json.loads((shared_path("robustness", "pdf") / "manifest.json").read_text(encoding="utf-8"))
    return [(entry["file"], entry["password"]) for entry in manifest if entry.get("password")]


def test_encrypted_pdfs_open_with_their_password() -> None:
    folder = shared_path("robustness", "pdf")
    for name, password in _password_cases():
        if name == "bug1782186.pdf" and importlib.util.find_spec("cryptography") is None:
            # "Hello" is its owner password: pdfium refuses it and pypdf needs AES from 'cryptography'.
            with pytest.raises(EncryptedSourceError, match="cryptography"):
                read_source(folder / name, password=password)
            continue
        document = read_source(folder / name, password=password)
        assert len(document.files) >= 1, name
        with pytest.raises(EncryptedSourceError, match=name.replace(".", r"\.")):
            read_source(folder / name)


def test_password_protected_sample() -> None:
    path = shared_path("robustness", "pdf-samples", "005-libreoffice-writer-password__libreoffice-writer-password.pdf")
    with pytest.raises(EncryptedSourceError, match="password is needed"):
        read_source(path)
    with pytest.raises(EncryptedSourceError, match="does not open"):
        read_source(path, password="wrong")
    document = read_source(path, password="openpassword")
    assert document.files[0].text.startswith("Lorem ipsum")



def test_page_pdfium_cannot_load_is_kept_with_a_warning() -> None:
    document = read_source(shared_path("robustness", "pdf", "Pages-tree-refs.pdf"))
    assert len(document.files) == 2
    assert document.files[0].has_text and not document.files[1].has_text
    assert document.warnings == ["page 2: pdfium failed (Failed to load page.) and so did pypdf; kept empty"]
