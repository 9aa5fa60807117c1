"""One scrubber for secrets, used wherever text may leave the process: API answers, notices, SSE events, logs.

What counts as a secret:

* in a URL, the userinfo (``user:password@``) and every query value (``?api-key=...``): endpoints of
  hosted models take keys there, and a database URL carries its password there;
* the value of an ``Authorization``, ``api-key`` or ``x-api-key`` header written out as text;
* every value registered with :func:`register_secret` (the upstream key, the server key, a URL's
  password), wherever it appears: an upstream that echoes the key in its error body must not get
  it into our log through an exception message.

An upstream model's successful answers are relayed, not written by us: :func:`mask_secrets` (whole bodies,
and each whole event of a stream) and :class:`TextMasker` (a model's text as it streams) mask only the
registered values there, so that an upstream echoing the ``Authorization`` header it was sent cannot hand its
key to a client, while URLs and words that merely look like secrets in the model's text reach the client as
written.

A model writes its text in small deltas, one event each, so a key it echoes is cut across several events, and
no event holds it whole. :class:`TextMasker` masks one such text (a choice's content, a Responses text part)
across its deltas: it holds back only the end of what it was given that could begin a registered secret (the
longest suffix that is a prefix of one), so a delta whose end cannot begin one goes out whole and at once, and
gives what it held when the text ends. Which texts a stream carries, and where each ends, is
``server/proxy/streammask.py``'s.

:func:`install_log_scrubber` applies :func:`scrub` to every log record of the process at the moment
it is made (message, arguments and traceback), so no handler, however configured, can write a secret.
"""

from __future__ import annotations

import functools
import logging
import re
import threading
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit, urlunsplit

__all__ = ["MASK", "redact_url", "scrub", "register_secret", "register_url_secrets", "install_log_scrubber",
           "any_secret", "mask_secrets", "TextMasker"]

MASK = "***"
_MIN_SECRET = 4
"""Shorter registered values are not masked: they would mangle ordinary words, and guard nothing."""
_URL = re.compile(r"\b[a-zA-Z][a-zA-Z0-9+.\-]*://[^\s\"'<>]*[^\s\"'<>.,;:)\]]")
"""A URL in running text; punctuation that ends a sentence or a clause after it is not part of it."""
_HEADER = re.compile(r"(?i)\b(authorization|x-api-key|api[-_]key)(\"?'?\s*[:=]\s*\"?'?)(bearer\s+|basic\s+)?"
                     r"([^\s\"',;}]*[^\s\"',;:.)}])")
_secrets: set[str] = set()
_lock = threading.Lock()
_installed = False


def redact_url(url: str) -> str:
    """``url`` with its userinfo replaced by ``***`` and every query value by ``***``; names stay readable.

    ``http://user:pw@host/v1?api-key=k&x`` becomes ``http://***@host/v1?api-key=***&***``. A URL that does not
    parse is shown as ``<unparseable URL>``: its text might be anything.
    """
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparseable URL>"
    netloc = parts.netloc
    if "@" in netloc:
        netloc = f"{MASK}@{netloc.rsplit('@', 1)[1]}"
    query = "&".join(_masked_parameter(p) for p in parts.query.split("&")) if parts.query else ""
    return urlunsplit((parts.scheme, netloc, parts.path, query, ""))


def _masked_parameter(parameter: str) -> str:
    name, sep, _ = parameter.partition("=")
    return f"{name}={MASK}" if sep else MASK


def register_secret(value: str | None) -> None:
    """Mask ``value`` in everything :func:`scrub` sees from now on (process-wide)."""
    text = (value or "").strip()
    if len(text) >= _MIN_SECRET:
        with _lock:
            _secrets.add(text)


def register_url_secrets(url: str | None) -> None:
    """Register the password and query values of ``url``, so they are masked even where the URL is cut apart."""
    if not url:
        return
    try:
        parts = urlsplit(url)
    except ValueError:
        return
    register_secret(parts.password)
    for parameter in parts.query.split("&"):
        register_secret(parameter.partition("=")[2])


def any_secret() -> bool:
    """Whether a secret is registered (with none, a relayed stream has nothing to mask)."""
    with _lock:
        return bool(_secrets)


def scrub(text: str) -> str:
    """``text`` with URL secrets, header values and every registered secret masked."""
    text = _URL.sub(lambda m: redact_url(m.group(0)), text)
    text = _HEADER.sub(lambda m: f"{m.group(1)}{m.group(2)}{m.group(3) or ''}{MASK}", text)
    with _lock:
        known = sorted(_secrets, key=len, reverse=True)
    for secret in known:
        text = text.replace(secret, MASK)
    return text


def mask_secrets(data: bytes) -> bytes:
    """``data`` with every registered secret masked, as written and in every form a JSON string may give it: any
    of its characters as a ``\\uXXXX`` escape (hex in either case) or a short escape (``\\/``, ``\\"``), and
    those escaped again, as JSON carried inside a JSON string (a tool call's ``arguments``) writes them. What a
    relayed answer may carry of the key the upstream was sent, whichever of these an upstream chose."""
    pattern = _encoded_pattern(_known())
    return data if pattern is None else pattern.sub(_MASK_BYTES, data)


_MASK_BYTES = MASK.encode()
_SHORT_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "\b": "b", "\f": "f", "\n": "n", "\r": "r", "\t": "t"}
"""JSON's two-character escapes, by the character they stand for."""


def _known() -> tuple[str, ...]:
    """The registered secrets, longest first (so that a secret that contains another is masked whole)."""
    with _lock:
        return tuple(sorted(_secrets, key=lambda s: (-len(s), s)))


@functools.lru_cache(maxsize=8)
def _encoded_pattern(secrets: tuple[str, ...]) -> re.Pattern[bytes] | None:
    """A bytes pattern of ``secrets`` in every form :func:`mask_secrets` masks; None when there are none.

    Each character is itself, or a run of backslashes (one for JSON, more for JSON inside JSON) before its
    ``u`` escape or short escape. A match starts at the first backslash of such a run, so what is left around
    the mask stays valid JSON at every level."""
    if not secrets:
        return None
    return re.compile(b"|".join(b"".join(_encoded_char(char) for char in secret) for secret in secrets))


def _encoded_char(char: str) -> bytes:
    code = ord(char)
    units = [code] if code < 0x10000 else [0xD800 + ((code - 0x10000) >> 10), 0xDC00 + ((code - 0x10000) & 0x3FF)]
    escaped = b"".join(rb"\\+u" + b"".join(_any_case(digit) for digit in f"{unit:04x}") for unit in units)
    forms = [re.escape(char.encode()), escaped]
    if char in _SHORT_ESCAPES:
        forms.append(rb"\\+" + re.escape(_SHORT_ESCAPES[char].encode()))
    return b"(?:" + b"|".join(forms) + b")"


def _any_case(digit: str) -> bytes:
    return f"[{digit.lower()}{digit.upper()}]".encode() if digit.isalpha() else digit.encode()


class TextMasker:
    """The registered secrets masked in one text that arrives in pieces cut anywhere (a model's streamed deltas).

    :meth:`feed` masks every whole secret in what it was still holding plus the new piece, and holds back the
    longest end of that text which could begin a secret (a proper prefix of one), so that no secret leaves in
    two halves; nothing else is held, and with no secret registered nothing is. :meth:`flush` gives what is held
    when the text ends: it begins no secret any more. Pieces put together in order give the text, masked.
    """

    def __init__(self) -> None:
        self._held = ""

    def feed(self, piece: str) -> str:
        text = self._held + piece
        pattern, secrets = _secret_pattern()
        if pattern is None:
            self._held = ""
            return text
        found = list(pattern.finditer(text))
        tail = found[-1].end() if found else 0  # a secret that began before here is masked already
        cut = len(text) - _begun_length(text[tail:], secrets)
        self._held = text[cut:]
        return pattern.sub(MASK, text[:cut])

    def flush(self) -> str:
        held, self._held = self._held, ""
        return held


def _secret_pattern() -> tuple[re.Pattern[str] | None, tuple[str, ...]]:
    """A pattern of the registered secrets, longest first (one that contains another is masked whole), and the
    secrets; no pattern when none is registered."""
    known = _known()
    return (_compiled(known) if known else None), known


@functools.lru_cache(maxsize=8)
def _compiled(secrets: tuple[str, ...]) -> re.Pattern[str]:
    return re.compile("|".join(re.escape(secret) for secret in secrets))


def _begun_length(text: str, secrets: tuple[str, ...]) -> int:
    """The length of the longest end of ``text`` that is the beginning, not the whole, of one of ``secrets``."""
    longest = 0
    for secret in secrets:
        for size in range(min(len(text), len(secret) - 1), longest, -1):
            if text.endswith(secret[:size]):
                longest = size
                break
    return longest


def install_log_scrubber() -> None:
    """Scrub every log record made in this process from now on; calling it again changes nothing."""
    global _installed
    with _lock:
        if _installed:
            return
        _installed = True
        previous = logging.getLogRecordFactory()
    logging.setLogRecordFactory(_scrubbing(previous))


def _scrubbing(previous: Callable[..., logging.LogRecord]) -> Callable[..., logging.LogRecord]:
    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = previous(*args, **kwargs)
        _scrub_record(record)
        return record

    return factory


def _scrub_record(record: logging.LogRecord) -> None:
    """Format now and scrub the result: a handler would otherwise format the raw arguments itself."""
    try:
        message = record.getMessage()
    except Exception:  # a broken format string: leave it for the handler to report as usual
        return
    record.msg, record.args = scrub(message), None
    if record.exc_info and not record.exc_text:
        record.exc_text = scrub(logging.Formatter().formatException(record.exc_info))
