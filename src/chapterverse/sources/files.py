"""Opening a source file: the one place a reader's bytes come from, so every check holds for what is read.

There are three ways a path checked by name reads something else: a FIFO named ``notes.txt`` blocks ``open``
forever (a knowledge-base reload then holds its lock, and every write, status request and SIGTERM waits behind it);
a 2 GB sparse ``.txt`` was read whole before its size was compared with the 256 MB limit; and a hard link, or a
folder swapped for a symlink after the server checked the path, reads a file outside the folder it serves.

So a file is opened once, without blocking (``O_NONBLOCK``), and everything is decided on that descriptor with
``fstat``: only a regular file is read, and its size is compared with the format's limit before a byte is read.
Under a :class:`Root` (the knowledge-base folder, the server's ``--ingest_roots``) the file is reached from a
descriptor of the root one component at a time with ``O_NOFOLLOW``, so a symlink swapped in anywhere below the root
fails the open instead of leading out, and a file with more than one hard link is refused unless the root allows it.

A file's size is not its content: ``truncate -s 2G book.pdf`` makes a file of 2 GB that holds nothing, and a parser
that scans it (pdfium rebuilding a cross-reference table, pypdf looking for its end marker) spends minutes and
gigabytes on zeros that were never written. So a file most of whose bytes are holes (ranges never written, which
``SEEK_DATA``/``SEEK_HOLE`` find without reading them) is refused at opening too: what any reader then does is
bounded by what was really written.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from ..errors import SourceError, SourceTooLargeError
from ..paths import resolved

__all__ = ["Root", "SourceFile", "Source", "open_file", "opened"]

_BLOCK = 1024 * 1024
_MAX_EXTENTS = 65_536
"""Written ranges counted before a file is judged: a regular file has one, a sparse one a few; a file cut into more
is refused as unwritten (counting them is two system calls each)."""
_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a named pipe"), (stat.S_ISSOCK, "a socket"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))


@dataclass(frozen=True, slots=True)
class Root:
    """A folder a server reads from on behalf of its clients: files beneath ``path`` only, reached through no
    symlink below it. ``hardlinks``: also read a file with several hard links (``--allow_hardlinks``), whose other
    names may lie outside ``path`` (``ln /etc/secret.md kb/notes.md``)."""

    path: Path
    hardlinks: bool = False

    def __post_init__(self) -> None:
        """Resolved once here (the root itself may be a symlink the administrator chose), not once a file."""
        object.__setattr__(self, "path", resolved(self.path))


class SourceFile:
    """A regular file opened for reading; ``size`` is its ``fstat`` size at opening, within ``limit``."""

    def __init__(self, path: Path, file: BinaryIO, size: int, limit: int | None) -> None:
        self.path = path
        self.size = size
        self.limit = limit
        self._file = file

    def __enter__(self) -> SourceFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._file.close()

    def stream(self) -> BinaryIO:
        """The open file from its first byte, for readers that seek (ZIP, PDF); valid until ``close``."""
        self._file.seek(0)
        return self._file

    def head(self, size: int) -> bytes:
        """The first ``size`` bytes (fewer in a shorter file)."""
        return self.stream().read(size)

    def tail(self, size: int) -> bytes:
        """The last ``size`` bytes (the whole file when it is shorter), read from its ``fstat`` size at opening."""
        stream = self.stream()
        stream.seek(max(self.size - size, 0))
        return stream.read(size)

    def read(self) -> bytes:
        """All the bytes, never more than ``limit``: a file grown past it since opening is refused too."""
        data = self.stream().read() if self.limit is None else self.stream().read(self.limit + 1)
        self._check_size(len(data))
        return data

    def digest(self) -> str:
        """The SHA-256 of the bytes (hex), read in blocks: a large PDF is hashed in constant memory."""
        digest, total = hashlib.sha256(), 0
        stream = self.stream()
        while block := stream.read(_BLOCK):
            total += len(block)
            self._check_size(total)
            digest.update(block)
        return digest.hexdigest()

    def _check_size(self, size: int) -> None:
        """Past the limit here means grown since opening, where ``size`` was checked."""
        if self.limit is not None and size > self.limit:
            raise SourceTooLargeError(self.path, f"grew past the {self.limit}-byte limit for this format while it was "
                                                 f"read ({self.size} bytes when opened)")


Source = str | Path | SourceFile
"""What a reader takes: a path it opens itself (``open_file``), or a file already opened by its caller."""


def open_file(path: str | Path, *, root: Root | None = None, limit: int | None = None) -> SourceFile:
    """Open ``path`` for reading if it is a regular file of at most ``limit`` bytes, else SourceError saying why.

    Without ``root`` symlinks are followed (a user naming their own file); with it, see :class:`Root`.
    """
    path = Path(path)
    fd = _open_beneath(path, root) if root is not None else _open(path, path, _FILE_FLAGS)
    try:
        status = os.fstat(fd)
        _check(path, status, root, limit)
        _check_written(path, fd, status)
    except BaseException:
        os.close(fd)
        raise
    # From here the file object owns the descriptor: a Ctrl-C inside fdopen may land after it took it (and
    # closed it on its way out), so closing it here again would turn the interrupt into EBADF, or close a
    # descriptor another thread has just been given.
    return SourceFile(path, os.fdopen(fd, "rb"), status.st_size, limit)


@contextmanager
def opened(source: Source, *, limit: int | None = None) -> Iterator[SourceFile]:
    """``source`` as an open file for the duration: opened here (and closed after) when it is a path, else the
    caller's file as it is (its opener chose its limit, and closes it)."""
    if isinstance(source, SourceFile):
        yield source
        return
    with open_file(source, limit=limit) as file:
        yield file


_FILE_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
"""``O_NONBLOCK``: opening a FIFO for reading would otherwise wait for a writer forever (it changes nothing for a
regular file, the only kind read after the ``fstat``)."""
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_FOLDER_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0)


def _open_beneath(path: Path, root: Root) -> int:
    """A descriptor of ``path`` reached from ``root`` one component at a time, following no symlink.

    Symlinks inside the root that lead inside it (``kb/alias.md`` -> ``kb/sub/inner.md``) are resolved first, by
    name; the open then walks the resolved path with ``O_NOFOLLOW``, so a component swapped for a symlink between
    the two is refused rather than followed.
    """
    base = os.path.join(root.path, "")  # strings, not Paths: a sync of unchanged files opens each one
    target = os.path.realpath(path)
    if not target.startswith(base):
        raise SourceError(path, f"a symbolic link leads out of {root.path}; files under a server's folders are read "
                                "only where they lie")
    *folders, name = target[len(base):].split(os.sep)
    fd = _open(path, root.path, _FOLDER_FLAGS)
    try:
        for folder in folders:
            inner = _open(path, folder, _FOLDER_FLAGS | _NOFOLLOW, beneath=fd)
            os.close(fd)
            fd = inner
        return _open(path, name, _FILE_FLAGS | _NOFOLLOW, beneath=fd)
    finally:
        os.close(fd)


def _open(path: Path, name: str | Path, flags: int, *, beneath: int | None = None) -> int:
    """``os.open(name, flags)`` (relative to the folder descriptor ``beneath``), its OSError as the SourceError
    about ``path`` that a user can act on (the system's words, "No such file or directory", where they say it)."""
    try:
        return os.open(name, flags, dir_fd=beneath)
    except OSError as exc:
        if beneath is not None and _is_link(name, beneath):
            raise SourceError(path, f"reached through a symbolic link ({name}); files under a server's folders are "
                                    "opened without following links") from exc
        if exc.errno == errno.ENXIO:
            raise SourceError(path, "not a regular file (a socket or a device); only regular files are read") from exc
        raise SourceError(path, exc.strerror or str(exc)) from exc


def _is_link(name: str | Path, folder: int) -> bool:
    """Whether ``name`` in ``folder`` is a symlink: what made ``O_NOFOLLOW`` fail (``ELOOP`` for the file,
    ``ENOTDIR`` for a folder opened with ``O_DIRECTORY``)."""
    try:
        return stat.S_ISLNK(os.lstat(name, dir_fd=folder).st_mode)
    except OSError:
        return False


def _check(path: Path, status: os.stat_result, root: Root | None, limit: int | None) -> None:
    """Refuse what ``fstat`` says must not be read: not a regular file, too large, or (under a root that does not
    allow them) a file with other hard links."""
    if not stat.S_ISREG(status.st_mode):
        kind = next((name for test, name in _KINDS if test(status.st_mode)), "a special file")
        raise SourceError(path, f"not a regular file ({kind}); only regular files are read")
    if limit is not None and status.st_size > limit:
        raise SourceTooLargeError(path, f"{status.st_size} bytes exceeds the {limit}-byte limit for this format")
    if root is not None and not root.hardlinks and status.st_nlink > 1:
        raise SourceError(path, f"has {status.st_nlink} hard links, and another name may lie outside {root.path}; "
                                "the server reads such files only with --allow_hardlinks")


def _check_written(path: Path, fd: int, status: os.stat_result) -> None:
    """Refuse a file most of whose bytes were never written (a sparse file: ``truncate -s 2G x.pdf``).

    A file with as many blocks allocated as its size has no holes and costs nothing more to judge; for any other,
    its holes are counted with ``SEEK_DATA``/``SEEK_HOLE`` (a file system without them reports one written range).
    Allocated blocks alone would not do: a compressing file system (ZFS, btrfs) allocates fewer than the size of a
    file fully written."""
    if status.st_blocks * 512 >= status.st_size or not hasattr(os, "SEEK_DATA"):
        return
    holes = _unwritten_bytes(fd, status.st_size)
    if holes * 2 > status.st_size:
        raise SourceError(path, f"{holes} of its {status.st_size} bytes were never written (a sparse file, "
                                "such as one made with truncate); it holds no document")


def _unwritten_bytes(fd: int, size: int) -> int:
    """The bytes of the file's first ``size`` that lie in holes; beyond ``_MAX_EXTENTS`` written ranges, the rest
    of the file counts as holes."""
    holes = position = 0
    for _ in range(_MAX_EXTENTS):
        try:
            data = os.lseek(fd, position, os.SEEK_DATA)
        except OSError as exc:
            if exc.errno != errno.ENXIO:  # SEEK_DATA unsupported: judged written, as the size says
                return holes
            data = size  # no data after position: a hole up to the end
        holes += min(data, size) - position
        if data >= size:
            return holes
        position = os.lseek(fd, data, os.SEEK_HOLE)
        if position >= size:
            return holes
    return holes + size - position
