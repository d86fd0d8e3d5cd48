"""Small helpers shared across the package: redacting URLs, shortening values, chunking."""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from typing import TypeVar

#: How many values one statement, IN list or script batch of a store takes.
CHUNK = 500

_T = TypeVar("_T")


def chunks(values: Sequence[_T], size: int = CHUNK) -> Iterator[list[_T]]:
    """``values`` in consecutive slices of at most ``size``."""
    for start in range(0, len(values), size):
        yield list(values[start : start + size])


#: Query parameters that carry a password (libpq's ``password`` and ``sslpassword``, redis-py's
#: ``password``): masked as the one in the user info is.
_SECRET_PARAMETER = re.compile(r"([?&](?:ssl)?password=)[^&#]*", re.IGNORECASE)


def redact_url(url: str) -> str:
    """``url`` with any password replaced by ``***`` (URLs appear in messages and reprs)."""
    url = _SECRET_PARAMETER.sub(r"\1***", url)
    scheme, sep, rest = url.partition("://")
    if not sep or "@" not in rest.split("/", 1)[0]:
        return url
    netloc, slash, path = rest.partition("/")
    userinfo, _, host = netloc.rpartition("@")
    user, colon, _password = userinfo.partition(":")
    masked = f"{user}:***" if colon else user
    return f"{scheme}://{masked}@{host}{slash}{path}"


def short(value: str, limit: int = 60) -> str:
    """``repr(value)``, cut to ``limit`` characters with the full length said (for messages)."""
    return repr(value) if len(value) <= limit else repr(value[:limit]) + f"… ({len(value)} chars)"
