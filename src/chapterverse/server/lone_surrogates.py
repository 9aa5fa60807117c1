"""Request bodies that parse as JSON but hold no text: unpaired UTF-16 surrogate escapes.

JSON may spell a lone surrogate (``"\\ud800"``). Python decodes it into a ``str`` that no UTF-8 encoder
accepts, so it used to fail far from the request, in the store, the embedder or the upstream call, as
a 500. Checked once here, for every router, it is the client's 400 instead.
"""

from __future__ import annotations

import json
import re

from fastapi import Request

from .errors import ApiError

__all__ = ["require_text_body", "lone_surrogate"]

_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
"""Any surrogate escape, paired or not: nearly no body has one, so nearly no body is parsed twice."""
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})


def lone_surrogate(raw: bytes) -> str | None:
    """The first unpaired surrogate a JSON body decodes to (as ``\\udXXX``), or None.

    A body that is not JSON yields None: the endpoint reports that in its own words.
    """
    if _SURROGATE_ESCAPE.search(raw) is None:
        return None
    try:
        json.dumps(json.loads(raw), ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"\\u{ord(exc.object[exc.start]):04x}"
    except (ValueError, RecursionError):
        return None
    return None


async def require_text_body(request: Request) -> None:
    """Dependency: 400 when a request body holds an unpaired surrogate escape.

    Only for routes that read their whole JSON body anyway: a book upload must stream to disk under its
    size limit, so it never gets this dependency.
    """
    if request.method not in _BODY_METHODS:
        return
    found = lone_surrogate(await request.body())
    if found:
        raise ApiError(400, "BAD_INPUT", f"the request body holds an unpaired surrogate escape ({found}), "
                                         "which is not text; send valid UTF-16 pairs or plain UTF-8")
