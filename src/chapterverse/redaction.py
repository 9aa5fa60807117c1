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
from collections.abc import Callable, Iterator
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
    """A bytes pattern of ``secrets`` in every form :func:`mask_secrets` masks; None when there are none."""
    return re.compile(_encoded_source(secrets).encode()) if secrets else None


@functools.lru_cache(maxsize=8)
def _encoded_text_pattern(secrets: tuple[str, ...]) -> re.Pattern[str]:
    """:func:`_encoded_pattern` for text (a model's text, a tool call's decoded ``arguments``)."""
    return re.compile(_encoded_source(secrets))


def _encoded_source(secrets: tuple[str, ...]) -> str:
    """The pattern of ``secrets`` in every encoded form.

    Each character is itself, or a run of backslashes (one for JSON, more for JSON inside JSON) before its
    ``u`` escape or short escape. A match starts at the first backslash of such a run, so what is left around
    the mask stays valid JSON at every level."""
    return "|".join("".join(_encoded_char(char) for char in secret) for secret in secrets)


def _units(char: str) -> list[int]:
    """The UTF-16 code units of ``char``, as a ``\\u`` escape writes it."""
    code = ord(char)
    return [code] if code < 0x10000 else [0xD800 + ((code - 0x10000) >> 10), 0xDC00 + ((code - 0x10000) & 0x3FF)]


def _encoded_char(char: str) -> str:
    escaped = "".join(r"\\+u" + "".join(_any_case(digit) for digit in f"{unit:04x}") for unit in _units(char))
    forms = [re.escape(char), escaped]
    if char in _SHORT_ESCAPES:
        forms.append(r"\\+" + re.escape(_SHORT_ESCAPES[char]))
    return "(?:" + "|".join(forms) + ")"


def _any_case(digit: str) -> str:
    return f"[{digit.lower()}{digit.upper()}]" if digit.isalpha() else digit


class TextMasker:
    """The registered secrets masked in one text that arrives in pieces cut anywhere (a model's streamed deltas, a
    tool call's streamed ``arguments``), in every form :func:`mask_secrets` masks: as written and JSON-escaped.

    :meth:`feed` masks every whole secret in what it was still holding plus the new piece, and holds back the
    longest end of that text which could begin a secret in one of those forms (a ``\\`` that may start an
    escape, ``\\u00`` of a key's first character, ``sk-\\u00`` of a later one), so that no secret leaves in
    two halves; nothing else is held, and with no secret registered nothing is. :meth:`flush` gives what is held
    when the text ends: it begins no secret any more. Pieces put together in order give the text, masked.
    """

    def __init__(self) -> None:
        self._held = ""

    def feed(self, piece: str) -> str:
        text = self._held + piece
        secrets = _known()
        if not secrets:
            self._held = ""
            return text
        pattern = _encoded_text_pattern(secrets)
        tail = 0  # a secret that began before here is masked already
        for tail_match in pattern.finditer(text):
            tail = tail_match.end()
        cut = _begun_at(text, tail, secrets)
        self._held = text[cut:]
        return pattern.sub(MASK, text[:cut])

    def flush(self) -> str:
        held, self._held = self._held, ""
        return held


def _begun_at(text: str, start: int, secrets: tuple[str, ...]) -> int:
    """Where the longest end of ``text`` after ``start`` begins that is the beginning, not the whole, of one of
    ``secrets`` in an encoded form; ``len(text)`` when no end is."""
    for candidate in _starts(secrets).finditer(text, start):
        at = candidate.start()
        if any(_begins(text, at, secret, 0) for secret in secrets):
            return at
    return len(text)


@functools.lru_cache(maxsize=8)
def _starts(secrets: tuple[str, ...]) -> re.Pattern[str]:
    """Where an encoded secret may start: a secret's first character, or the first backslash of a run (an escape
    starts there)."""
    return re.compile("(?<!\\\\)\\\\|" + "|".join(sorted({re.escape(secret[0]) for secret in secrets})))


def _begins(text: str, at: int, secret: str, done: int) -> bool:
    """Whether ``text[at:]`` (not empty) is the rest of an encoded ``secret`` after its first ``done`` characters,
    cut before the secret's end."""
    more = done + 1 < len(secret)
    for end in _char_ends(text, at, secret[done]):
        if end < 0 or (end == len(text) and more) or (more and end < len(text) and _begins(text, end, secret,
                                                                                           done + 1)):
            return True
    return False


def _char_ends(text: str, at: int, char: str) -> Iterator[int]:
    """Where each encoded form of ``char`` that starts at ``text[at]`` ends; -1 for one that ``text`` cuts."""
    if text[at] == char:
        yield at + 1
    if text[at] != "\\":
        return
    escape = _escape_end(text, at, _units(char))
    if escape is not None:
        yield escape
    if char in _SHORT_ESCAPES:
        after = _after_backslashes(text, at)
        if after == len(text):
            yield -1
        elif text[after] == _SHORT_ESCAPES[char]:
            yield after + 1


def _escape_end(text: str, at: int, units: list[int]) -> int | None:
    """Where the ``\\uXXXX`` escapes of ``units`` that start at ``text[at]`` end; -1 when ``text`` cuts them,
    None when they are not there."""
    for unit in units:
        if at == len(text):
            return -1
        if text[at] != "\\":
            return None
        at = _after_backslashes(text, at)
        for expected in f"u{unit:04x}":
            if at == len(text):
                return -1
            if text[at].lower() != expected:
                return None
            at += 1
    return at


def _after_backslashes(text: str, at: int) -> int:
    while at < len(text) and text[at] == "\\":
        at += 1
    return at


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
