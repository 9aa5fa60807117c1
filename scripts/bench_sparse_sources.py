"""Time and peak memory of refusing a zero-filled PDF by every route: ``chapterverse ingest``, a knowledge-base
reload (and a write made during it), ``POST /api/documents/path`` and an upload, each on a fresh process.

    PYTHONPATH=src python scripts/bench_sparse_sources.py [--label new] [--sizes 300M,2G] [--limit 150]

Run it once per tree (PYTHONPATH picks the code measured) and compare the tables of one session. A route that
takes longer than ``--limit`` seconds is stopped and shown as ``>limit``. Memory is the peak resident size of
the process doing the work: the CLI's, or the server's above what it held before the request.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

TESTS = Path(__file__).resolve().parents[1] / "tests"


def _size(text: str) -> int:
    number, unit = re.fullmatch(r"(\d+)([MG])", text).groups()  # type: ignore[union-attr]
    return int(number) * (1 << 20 if unit == "M" else 1 << 30)


def _sparse(path: Path, size: int) -> Path:
    with path.open("wb") as out:
        out.truncate(size)
    return path


def _kib(pid: int, field: str) -> int:
    text = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(rf"{field}:\s+(\d+)", text).group(1))  # type: ignore[union-attr]


def cli(folder: Path, size: int, limit: float) -> str:
    big = _sparse(folder / "big.pdf", size)
    started = time.monotonic()
    process = subprocess.Popen([sys.executable, "-m", "chapterverse", "ingest", str(big), "--library",
                                str(folder / "lib")], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    assert process.stderr is not None
    timer = threading.Timer(limit, process.kill)
    timer.start()
    err = process.stderr.read()
    _, status, usage = os.wait4(process.pid, 0)
    timer.cancel()
    seconds = f"{time.monotonic() - started:.1f}" if time.monotonic() - started < limit else f">{limit:.0f}"
    peak = usage.ru_maxrss // 1024
    return f"{seconds} s | {peak} MiB peak | exit {os.waitstatus_to_exitcode(status)}: {err.strip()[-70:]}"


def _server(folder: Path) -> tuple[subprocess.Popen[str], str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    (folder / "kb").mkdir()
    (folder / "kb" / "faq.md").write_text("# FAQ\n\nThe refund window is 30 days.\n")
    (folder / "roots").mkdir()
    env = {**os.environ, "PYTHONPATH": f"{os.environ.get('PYTHONPATH', '')}:{TESTS}"}
    process = subprocess.Popen([sys.executable, str(TESTS / "hashserve.py"), "--rag_enabled", "true", "--rag_kb_path",
                                str(folder / "kb"), "--ingest_roots", f"{folder / 'kb'},{folder / 'roots'}",
                                "--max_upload_mb", "400", "--port", str(port), "--log_level", "warning"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True, env=env)
    url = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            if httpx.get(f"{url}/v1/rag/status", timeout=2).status_code == 200:
                return process, url
        except httpx.HTTPError:
            time.sleep(0.2)
    raise RuntimeError("the server did not start")


def _job(client: httpx.Client, job: dict, limit: float, started: float) -> str:
    while job["state"] in ("queued", "running") and time.monotonic() - started < limit:
        time.sleep(0.1)
        job = client.get(f"/api/jobs/{job['id']}").json()
    if job["state"] in ("queued", "running"):
        return f">{limit:.0f} s"
    return f"{time.monotonic() - started:.1f} s ({job['state']}: {str(job.get('error'))[-50:]})"


def server_route(route: str, folder: Path, size: int, limit: float) -> str:
    process, url = _server(folder)
    try:
        base = _kib(process.pid, "VmRSS")
        with httpx.Client(base_url=url, timeout=limit + 30) as client:
            started = time.monotonic()
            if route == "path":
                big = _sparse(folder / "roots" / "big.pdf", size)
                done = _job(client, client.post("/api/documents/path", json={"path": str(big)}).json()["job"],
                            limit, started)
            elif route == "upload":
                zeros = folder / "zeros.pdf"
                with zeros.open("wb") as out:
                    block = bytes(1 << 20)
                    for _ in range(size >> 20):
                        out.write(block)
                with zeros.open("rb") as data:
                    started = time.monotonic()
                    answer = client.post("/api/documents", files={"file": ("zeros.pdf", data)})
                done = (_job(client, answer.json()["job"], limit, started) if answer.status_code == 202
                        else f"HTTP {answer.status_code}")
            else:
                _sparse(folder / "kb" / "big.pdf", size)
                result: dict[str, str] = {}
                def reload() -> None:
                    try:
                        answer = client.post("/v1/rag/reload", json={}, timeout=limit)
                        result["reload"] = f"{time.monotonic() - started:.1f} s"
                        result["error"] = str(answer.json().get("errors", {}).get("big.pdf"))[-50:]
                    except httpx.TimeoutException:
                        result["reload"] = f">{limit:.0f} s"
                thread = threading.Thread(target=reload, daemon=True)
                thread.start()
                time.sleep(0.3)
                asked = time.monotonic()
                try:
                    client.post("/v1/rag/upsert/document", json={"text": "Gulls nest on cliffs.", "source": "g"},
                                timeout=limit)
                    write = f"{time.monotonic() - asked:.2f} s"
                except httpx.TimeoutException:
                    write = f">{limit:.0f} s"
                thread.join(limit)
                done = f"{result.get('reload', f'>{limit:.0f} s')}, write during it {write} ({result.get('error')})"
            peak = _kib(process.pid, "VmHWM")
        return f"{done} | {(peak - base) // 1024} MiB above {base // 1024} MiB"
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--label", default="")
    parser.add_argument("--sizes", default="300M,2G")
    parser.add_argument("--routes", default="cli,kb,path,upload")
    parser.add_argument("--limit", type=float, default=150)
    args = parser.parse_args()
    print(f"| code | size | route | time | memory |\n|---|---|---|---|---|", flush=True)
    for size_text in args.sizes.split(","):
        for route in args.routes.split(","):
            if route == "upload" and _size(size_text) > 400 << 20:
                continue  # over --max_upload_mb: 413 before the body is read
            with tempfile.TemporaryDirectory(prefix="bench-sparse-") as tmp:
                run = cli if route == "cli" else lambda f, s, l: server_route(route, f, s, l)
                print(f"| {args.label} | {size_text} | {route} | {run(Path(tmp), _size(size_text), args.limit)} |",
                      flush=True)


if __name__ == "__main__":
    main()
