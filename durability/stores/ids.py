"""The ids a store accepts: any text, but not empty, not NUL, not a lone surrogate, not huge.

Every public store call checks its ids here before touching the backend, so a refused id
leaves the store as it was. A put checks a checkpoint's other text fields (its runner, node,
status, ...) the same way: Postgres text cannot hold NUL and no store's driver can encode a lone
surrogate, so every provider refuses both at put rather than one storing what another cannot
copy (decision 0139).
"""

from __future__ import annotations

from collections.abc import Sequence

from durability._util import short
from durability.errors import InvalidIdError

#: Longest id a store accepts; longer ones are refused before anything is written.
MAX_ID_LENGTH = 65_536


def check_id(value: object, what: str, *, action: str, allow_empty: bool = False) -> str:
    """Refuse an id a store cannot hold: not a string, empty, containing NUL, or huge."""
    if not isinstance(value, str):
        raise InvalidIdError(
            f"cannot {action}: {what} must be a string, got {type(value).__name__}; pass str(value)"
        )
    if not value and not allow_empty:
        raise InvalidIdError(f"cannot {action}: {what} is empty; give a non-empty id")
    if "\x00" in value:
        raise InvalidIdError(
            f"cannot {action}: {what} {short(value)} contains a NUL character, which no store "
            "can hold; remove it (NUL is fine inside state)"
        )
    if _has_lone_surrogate(value):
        raise InvalidIdError(
            f"cannot {action}: {what} {short(value)} contains a lone surrogate (half of a UTF-16 "
            "pair), which no store can hold; pass valid text (lone surrogates are fine inside state)"
        )
    if len(value) > MAX_ID_LENGTH:
        raise InvalidIdError(
            f"cannot {action}: {what} is {len(value)} characters, over the {MAX_ID_LENGTH}-character "
            "limit; use a shorter id (a hash of the long one, say)"
        )
    return value


def check_ids(values: Sequence[str], what: str, *, action: str) -> None:
    """:func:`check_id` on every value, in one pass over their joined text when all are fine.

    The sweep checks each id it deletes twice; one by one, that was a tenth of a Postgres
    sweep's Python time. Python's UTF-8 codec refuses every surrogate code point, so two
    halves that meet in the joined text are still caught.
    """
    if all(isinstance(v, str) and 0 < len(v) <= MAX_ID_LENGTH for v in values):
        joined = "".join(values)
        if "\x00" not in joined and not _has_lone_surrogate(joined):
            return
    for value in values:
        check_id(value, what, action=action)


def check_texts(named: Sequence[tuple[str, object]], *, action: str) -> None:
    """:func:`check_id` (empty allowed) on each named value that is not ``None``, in one pass
    over their joined text when all are fine (a put checks a dozen of them)."""
    values = [value for _, value in named if value is not None]
    if all(isinstance(v, str) and len(v) <= MAX_ID_LENGTH for v in values):
        joined = "".join(values)  # type: ignore[arg-type]
        if "\x00" not in joined and not _has_lone_surrogate(joined):
            return
    for what, value in named:
        if value is not None:
            check_id(value, what, action=action, allow_empty=True)


def check_thread(thread_id: str, namespace: str, action: str) -> None:
    """Refuse a thread id or namespace a store cannot hold."""
    check_id(thread_id, "thread_id", action=action)
    check_id(namespace, "namespace", action=action, allow_empty=True)


def _has_lone_surrogate(value: str) -> bool:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False
