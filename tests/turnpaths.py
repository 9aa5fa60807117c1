"""One turn of every path that puts a model in front of a source, timed: ``ask`` and ``chat`` (the CLI, each its
own process), the reader's chat, and the proxy's chat completions (streamed and not), Responses and tools mode.

    with model_paths(llm, tmp, deadline_s=10, max_tokens=128) as paths:
        turn = paths.run("proxy-stream", "Who kept the lighthouse?")
        turn.seconds, turn.first_s, turn.outcome

``seconds`` is the turn from the question to its end (``ask``'s exit, ``chat``'s "saved as chat" line, the
stream's last event);
``first_s`` the first sign of life: the CLI's first status line on its terminal (from ``ask``'s start, from
the question ``chat`` reads), the reader's first SSE event, a stream's first byte (None for a reply that is not
streamed). Used by the real-model tests and by
``scripts/bench_turns.py``.

This is a helper module, not a test file.
"""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from chapterverse import Library

__all__ = ["PATHS", "DEMO", "ModelPaths", "Turn", "model_paths"]

DEMO = Path(__file__).resolve().parents[1] / "src" / "chapterverse" / "demo"
PATHS = ("ask", "chat", "reader", "proxy", "proxy-stream", "responses", "tools")


@dataclass(frozen=True)
class Turn:
    path: str
    seconds: float
    first_s: float | None
    outcome: str
    """What it ended with: an HTTP status, a finish reason or notice, the CLI's exit status."""
    text: str = ""


class ModelPaths:
    def __init__(self, llm_base_url: str, model: str, library: Path, doc_id: int, inject_url: str, tools_url: str,
                 deadline_s: float, max_tokens: int) -> None:
        self.llm_base_url = llm_base_url
        self.model = model
        self.library = library
        self.doc_id = doc_id
        self.inject_url = inject_url
        self.tools_url = tools_url
        self.deadline_s = deadline_s
        self.max_tokens = max_tokens
        self._src = ""

    def run(self, path: str, question: str) -> Turn:
        """One turn of ``path``; ``ask@SRC`` and ``chat@SRC`` run the CLI from source tree ``SRC`` (a baseline
        checkout's ``src``) instead of this one."""
        name, _, self._src = path.partition("@")
        runner = {"ask": self._ask, "chat": self._chat, "reader": self._reader, "proxy": self._proxy,
                  "proxy-stream": self._proxy_stream, "responses": self._responses, "tools": self._tools}[name]
        turn = runner(question)
        return Turn(path, turn.seconds, turn.first_s, turn.outcome, turn.text)

    # -- the CLI

    def _cli(self, path: str, args: list[str], stdin: str | None) -> Turn:
        """The command as its own process, its stderr a terminal (where its status line shows), stdout a pipe."""
        flags = ["--library", str(self.library), "--llm-base-url", self.llm_base_url, "--llm-model", self.model,
                 "--llm-deadline-s", str(self.deadline_s), "--llm-max-tokens", str(self.max_tokens)]
        terminal, stderr = pty.openpty()
        process = subprocess.Popen([sys.executable, "-m", "chapterverse", *args, *flags], stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE, stderr=stderr, text=True,
                                   env={**os.environ, "COLUMNS": "200",
                                        **({"PYTHONPATH": self._src} if self._src else {})})
        os.close(stderr)
        started = time.monotonic()
        marks: dict[str, float] = {}
        seen: list[str] = []

        def read_terminal() -> None:
            while True:
                try:
                    piece = os.read(terminal, 4096).decode("utf-8", "replace")
                except OSError:  # the process is gone and the terminal closed
                    return
                if not piece:
                    return
                seen.append(piece)
                text = "".join(seen)
                for mark in ("chat about", "…", "saved as chat"):
                    if mark in text and mark not in marks:
                        marks[mark] = time.monotonic()

        reader = threading.Thread(target=read_terminal, daemon=True)
        reader.start()
        assert process.stdin is not None and process.stdout is not None
        if stdin:
            process.stdin.write(stdin)
        process.stdin.close()
        out = process.stdout.read()
        process.wait(timeout=600)
        seconds = time.monotonic() - started
        reader.join(timeout=5)
        os.close(terminal)
        asked = marks.get("chat about", started)  # the chat reads its question (waiting on stdin) right after
        first = marks["…"] - asked if "…" in marks else None
        ended = marks["saved as chat"] - started if "saved as chat" in marks else seconds  # the chat's turn is
        return Turn(path, ended, first, f"exit {process.returncode}", out + "".join(seen))  # over; its summary
        # job may still hold the process

    def _ask(self, question: str) -> Turn:
        return self._cli("ask", ["ask", question, "--json"], None)

    def _chat(self, question: str) -> Turn:
        return self._cli("chat", ["chat", "--doc", str(self.doc_id)], question + "\n")

    # -- the reader

    def _reader(self, question: str) -> Turn:
        started = time.monotonic()
        first = None
        outcome = "no end"
        text = ""
        with httpx.stream("POST", f"{self.inject_url}/api/documents/{self.doc_id}/ask", json={"question": question},
                          timeout=600) as reply:
            event = ""
            for line in reply.iter_lines():
                if line.startswith("event:"):
                    event = line[6:].strip()
                    first = first if first is not None else time.monotonic() - started
                elif line.startswith("data:") and event in ("done", "error"):
                    data = json.loads(line[5:])
                    outcome = event if event == "error" else f"done ({data.get('mode')})"
                    text = json.dumps(data)
        return Turn("reader", time.monotonic() - started, first, outcome, text)

    # -- the proxy

    def _post(self, path: str, url: str, route: str, body: dict[str, Any]) -> Turn:
        started = time.monotonic()
        reply = httpx.post(f"{url}{route}", json=body, timeout=600)
        return Turn(path, time.monotonic() - started, None, f"HTTP {reply.status_code}", reply.text)

    def _stream(self, path: str, url: str, route: str, body: dict[str, Any]) -> Turn:
        started = time.monotonic()
        first = None
        pieces: list[str] = []
        with httpx.stream("POST", f"{url}{route}", json={**body, "stream": True}, timeout=600) as reply:
            for text in reply.iter_text():
                first = first if first is not None else time.monotonic() - started
                pieces.append(text)
            status = reply.status_code
        whole = "".join(pieces)
        finish = "length" if '"finish_reason": "length"' in whole or "response.incomplete" in whole else "stop"
        return Turn(path, time.monotonic() - started, first, f"HTTP {status} {finish}", whole)

    def _messages(self, question: str) -> list[dict[str, str]]:
        return [{"role": "user", "content": question}]

    def _proxy(self, question: str) -> Turn:
        return self._post("proxy", self.inject_url, "/v1/chat/completions",
                          {"model": self.model, "messages": self._messages(question)})

    def _proxy_stream(self, question: str) -> Turn:
        return self._stream("proxy-stream", self.inject_url, "/v1/chat/completions",
                            {"model": self.model, "messages": self._messages(question)})

    def _responses(self, question: str) -> Turn:
        return self._stream("responses", self.inject_url, "/v1/responses", {"model": self.model, "input": question})

    def _tools(self, question: str) -> Turn:
        return self._stream("tools", self.tools_url, "/v1/chat/completions",
                            {"model": self.model, "messages": self._messages(question)})


@contextmanager
def model_paths(llm_base_url: str, model: str, root: Path, *, deadline_s: float, max_tokens: int,
                **server: Any) -> Iterator[ModelPaths]:
    """Every path over the demo book with the model at ``llm_base_url``: a CLI library, a server with the reader
    and the knowledge base (inject), another in tools mode; ``server`` are more of their settings."""
    from serverutil import running_server, settings_for, shared_embedder

    library = root / "library"
    lib = Library(library)
    lib.ingest([DEMO])
    doc_id = lib.documents()[0].id
    lib.close()
    common = {"llm_base_url": llm_base_url, "llm_model": model, "llm_deadline_s": deadline_s,
              "llm_max_tokens": max_tokens, "rag_enabled": True, **server}
    with ExitStack() as stack:
        servers = []
        for mode in ("inject", "tools"):
            folder = root / mode
            (folder / "kb").mkdir(parents=True)
            (folder / "kb" / "keeper.md").write_text((DEMO / "the-keeper-of-gull-rock.md").read_text("utf-8"),
                                                     encoding="utf-8")
            settings = settings_for(folder, library=library if mode == "inject" else folder / "reader",
                                    rag_mode=mode, **common)
            servers.append(stack.enter_context(running_server(settings, embedder=shared_embedder())))
        yield ModelPaths(llm_base_url, model, library, doc_id, servers[0].url, servers[1].url, deadline_s,
                         max_tokens)
