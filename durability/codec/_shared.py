"""What the codec's encoder and decoder share: the marker, type tests, refusals, records."""

from __future__ import annotations

import dataclasses
import re
import sys
from collections.abc import Iterable, Sequence
from datetime import timedelta, timezone, tzinfo
from typing import Any
from uuid import SafeUUID
from zoneinfo import ZoneInfo

import orjson
import ormsgpack

_MARK = "$t"
_MARK_STR = '"$t"'
_MARK_BYTES = b'"$t"'
_NONE_TYPE = type(None)
_JSON_TYPES = frozenset({dict, list, str, int, float, bool, _NONE_TYPE})
# orjson writes integers in [-2**63, 2**64 - 1]; others are enveloped.
_INT_MIN = -(2**63)
_INT_MAX = 2**64 - 1
_SURROGATE = re.compile(r"([\ud800-\udfff])")
# With these options and no ``default``, ormsgpack refuses every value that is not JSON-native
# (tuples, enum members, UUIDs, datetimes, dataclasses, subclasses, integers beyond 64 bits,
# and any type it does not know), all of which orjson would write or the walk would envelope.
_JSON_NATIVE_ONLY = (
    ormsgpack.OPT_PASSTHROUGH_BIG_INT
    | ormsgpack.OPT_PASSTHROUGH_DATACLASS
    | ormsgpack.OPT_PASSTHROUGH_DATETIME
    | ormsgpack.OPT_PASSTHROUGH_ENUM
    | ormsgpack.OPT_PASSTHROUGH_SUBCLASS
    | ormsgpack.OPT_PASSTHROUGH_TUPLE
    | ormsgpack.OPT_PASSTHROUGH_UUID
)
# orjson hands these to ``default`` (none is given, so it refuses them) instead of writing
# them its own way.
_ORJSON_JSON_ONLY = (
    orjson.OPT_PASSTHROUGH_DATACLASS
    | orjson.OPT_PASSTHROUGH_DATETIME
    | orjson.OPT_PASSTHROUGH_SUBCLASS
)
# Above this many bytes of text the fast path checks a value with the walk, not ormsgpack:
# ormsgpack copies every byte, so a few long strings cost it more than they cost the walk.
_SCREEN_LIMIT = 32 * 1024
# ormsgpack packs a float as 0xcb and its 8 big-endian bytes; a NaN or an infinity has every
# exponent bit set, so its first two bytes are 0x7f or 0xff, then 0xf0 or more.
_NON_FINITE_FLOAT = re.compile(rb"\xcb[\x7f\xff][\xf0-\xff]")
_ONE_MICROSECOND = timedelta(microseconds=1)

# langgraph.types names kept, each rebuilt with cls(**fields).
_LANGGRAPH_TYPES = frozenset(
    {
        "Send",
        "Interrupt",
        "Command",
        "Overwrite",
        "TimeoutPolicy",
        "GraphOutput",
        "StateSnapshot",
        "PregelTask",
        "StateUpdate",
    }
)


class CheckpointedException(Exception):
    """An exception read back from a checkpoint, carrying the record that was stored.

    Attributes:
        type_name: The original class path, ``module:qualname`` (never imported).
        message: ``str()`` of the original exception.
        kwargs: The original's attributes (its ``__dict__``), decoded.
        repr_kwargs: Names in ``kwargs`` whose value JSON could not hold, stored as ``repr()``.
        cause: The record of the exception it was raised from, or ``None``.
    """

    def __init__(
        self,
        type_name: str,
        message: str,
        kwargs: dict[str, Any] | None = None,
        repr_kwargs: Sequence[str] = (),
        cause: CheckpointedException | None = None,
    ) -> None:
        super().__init__(type_name, message)
        self.type_name = type_name
        self.message = message
        self.kwargs: dict[str, Any] = dict(kwargs or {})
        self.repr_kwargs: tuple[str, ...] = tuple(repr_kwargs)
        self.cause = cause
        self.__cause__ = cause

    def __str__(self) -> str:
        return f"{self.type_name}: {self.message}"

    def __eq__(self, other: object) -> bool:
        if type(other) is not CheckpointedException:
            return NotImplemented
        return (
            self.type_name == other.type_name
            and self.message == other.message
            and self.kwargs == other.kwargs
            and self.repr_kwargs == other.repr_kwargs
            and self.cause == other.cause
        )

    def __hash__(self) -> int:
        return hash((self.type_name, self.message))


class _Refused(Exception):
    """A refusal inside a walk; ``parts`` collects the path as the exception unwinds."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.parts: list[str] = []


def _short_repr(value: object, limit: int = 60) -> str:
    try:
        text = repr(value)
    except Exception:
        return f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _key_part(key: object) -> str:
    if type(key) is str and key.isidentifier():
        return "." + key
    return f"[{_short_repr(key)}]"


def _type_name(cls: type) -> str:
    if cls.__module__ == "builtins":
        return cls.__qualname__
    return f"{cls.__module__}.{cls.__qualname__}"


def _class_path(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def _importable_path(cls: type, kind: str) -> str:
    """The class path of ``cls``, refusing a class that path would not resolve to."""
    path = _class_path(cls)
    fix = "define it at module level under a name that stays bound to it"
    if "<locals>" in cls.__qualname__:
        raise _Refused(f"the {kind} {path} is a local class, not importable by its path; {fix}")
    found: Any = sys.modules.get(cls.__module__)
    for part in cls.__qualname__.split("."):
        found = getattr(found, part, None)
    if found is not cls:
        raise _Refused(f"the {kind} {path} is not importable by its path; {fix}")
    return path


def _is_pydantic_offset(cls: type) -> bool:
    # pydantic_core's TzInfo: a fixed offset pydantic attaches to a value it parses.
    return cls.__name__ == "TzInfo" and cls.__module__.startswith("pydantic_core")


def _fixed_offset_name(tz: tzinfo) -> str | None:
    """The explicit name of a fixed offset, or None when it is the default ``UTC+hh:mm``."""
    offset = tz.utcoffset(None)
    name = tz.tzname(None)
    if offset is None or name is None:
        raise _Refused(f"its fixed offset {_type_name(type(tz))} has no offset or name")
    return None if name == timezone(offset).tzname(None) else name


def _add_zone(out: dict[str, Any], tz: tzinfo) -> None:
    cls = type(tz)
    if cls is ZoneInfo:
        key = tz.key  # type: ignore[attr-defined]  # ZoneInfo
        if key is None:
            raise _Refused(
                "its tzinfo is a ZoneInfo read from a file, which has no key to store; "
                "use ZoneInfo(key) instead"
            )
        out["k"] = key
    elif cls is timezone or _is_pydantic_offset(cls):
        name = _fixed_offset_name(tz)
        if name is not None:
            out["n"] = name
    else:
        raise _Refused(
            f"its tzinfo {_type_name(cls)} is neither a fixed offset (datetime.timezone) nor "
            "an IANA zone (zoneinfo.ZoneInfo); convert it with .astimezone(ZoneInfo(key)) "
            "or .replace(tzinfo=timezone(offset))"
        )


_ABSENT = object()
_new_object = object.__new__
# Sets an attribute past a class's own __setattr__, so works on frozen and slotted classes.
_set_attribute = object.__setattr__
_UUID_SAFETY_UNKNOWN = SafeUUID.unknown  # an enum member's lookup is slow on a hot path


def _ordered(value: set[Any] | frozenset[Any]) -> Iterable[Any]:
    # Set order depends on hashing, which varies between processes for str; sorting makes
    # the text deterministic whenever the items are orderable.
    try:
        return sorted(value)
    except TypeError:
        return value


def _safe_str(value: BaseException) -> str:
    try:
        return str(value)
    except Exception:
        return f"<str() failed for {_type_name(type(value))}>"


def _is_langgraph_type(cls: type) -> bool:
    return (
        cls.__module__ == "langgraph.types"
        and cls.__qualname__ in _LANGGRAPH_TYPES
        and getattr(sys.modules.get("langgraph.types"), cls.__qualname__, None) is cls
    )


def _langgraph_fields(cls: type) -> tuple[str, ...]:
    if issubclass(cls, tuple):  # the NamedTuples
        return tuple(cls._fields)  # type: ignore[attr-defined]
    if dataclasses.is_dataclass(cls):
        return tuple(field.name for field in dataclasses.fields(cls))
    return tuple(cls.__slots__)  # type: ignore[attr-defined]  # Send


def _is_langchain_type(cls: type) -> bool:
    module = sys.modules.get("langchain_core.load.serializable")
    return module is not None and issubclass(cls, module.Serializable)


def _is_pydantic_model(cls: type) -> bool:
    module = sys.modules.get("pydantic")
    return module is not None and issubclass(cls, module.BaseModel)


def _langchain_load(data: Any) -> Any:
    from langchain_core._api import suppress_langchain_beta_warning
    from langchain_core.load import load

    # LangChain marks load() as beta and would warn from inside this module on every
    # first call; the context variable silences only that, only here.
    with suppress_langchain_beta_warning():
        return load(data, allowed_objects="core")
