"""The typed-JSON codec every checkpoint store uses.

Every store (memory, SQLite, Postgres, Redis) writes a run's state with :func:`dumps` and reads
it back with :func:`loads`, so every store round-trips exactly the same values and refuses the
same ones.

Format
======

Compact UTF-8 JSON. JSON-native values (``str``, ``int`` within 64 bits, finite ``float``,
``bool``, ``None``, ``list``, ``dict`` with ``str`` keys) are written as themselves. Every other
supported value is written as a *typed envelope*: a JSON object whose reserved key ``"$t"``
names the tag. A user ``dict`` that holds the key ``"$t"`` is written as a ``map`` envelope, so
it comes back as the same ``dict``. Output is deterministic for the same value (dicts keep their
order; sets are sorted when their items are orderable). ``dumps(None)`` is ``"null"``.

======  ==================================  ==================================================
tag     type                                fields
======  ==================================  ==================================================
dt      ``datetime``                        ``v`` ISO text (with its UTC offset when aware);
                                            ``k`` IANA zone key; ``n`` fixed-offset name;
                                            ``f`` 1 when ``fold`` is 1
tm      ``time``                            as ``dt``
d       ``date``                            ``v`` ISO text
td      ``timedelta``                       ``v`` ``[days, seconds, microseconds]``
tz      ``timezone`` (and pydantic's        ``o`` offset in microseconds; ``n`` its name when
        parsed offset)                      it has an explicit one
zi      ``zoneinfo.ZoneInfo``               ``k`` zone key
dec     ``Decimal``                         ``v`` ``str()`` of it (NaN, ``-0``, exponent kept)
uuid    ``UUID``                            ``v`` 32 hex digits
b       ``bytes``                           ``v`` base64
int     ``int`` beyond 64 bits              ``v`` hexadecimal text (no digit limit)
str     ``str`` with lone surrogates        ``v`` list of text pieces and surrogate code points
tup     ``tuple``                           ``v`` items
set     ``set``                             ``v`` items (sorted when orderable)
fset    ``frozenset``                       ``v`` items (sorted when orderable)
map     ``dict`` with a non-``str`` key     ``v`` ``[[key, value], ...]`` in dict order
        or the ``"$t"`` key
enum    ``Enum`` member                     ``c`` class path; ``v`` the member's value
dc      dataclass                           ``c`` class path; ``f`` ``{field: value}``
pyd     pydantic v2 model                   ``c`` class path; ``f`` ``{field: value}`` (extras
                                            included)
exc     exception                           ``type`` class path (never imported);
                                            ``message`` ``str()``; ``kwargs`` attributes;
                                            ``repr_kwargs`` names stored as ``repr()``
                                            (cut at 10,000 characters);
                                            ``cause`` record of ``__cause__`` or ``null``
lc      LangChain ``Serializable``          ``v`` LangChain's own ``dumpd()`` output
lg      LangGraph type                      ``c`` name in ``langgraph.types``; ``f`` fields
======  ==================================  ==================================================

A class path is ``module:qualname``. Values inside envelopes are encoded the same way, so
envelopes nest. The LangGraph types kept are ``Send``, ``Interrupt``, ``Command``,
``Overwrite``, ``TimeoutPolicy``, ``GraphOutput``, ``StateSnapshot``, ``PregelTask`` and
``StateUpdate``; the others in ``langgraph.types`` hold callables and are refused.

What is refused
===============

At write (``cannot encode ...``): any other type, including subclasses of ``dict``, ``list``,
``str``, ``int`` and the other supported types that are not enum members (``OrderedDict``,
``defaultdict``, a ``list`` subclass, a ``NamedTuple`` of your own), ``bytearray`` (convert it
with ``bytes()``), ``complex``; a NaN or infinite ``float``; a ``datetime``/``time`` whose tzinfo
is neither a ``datetime.timezone``/pydantic fixed offset nor a keyed ``ZoneInfo`` (one read with
``ZoneInfo.from_file`` has no key); a dataclass, pydantic model or enum whose class is not
importable by its path (a local class, or a name bound to another object); a LangChain object
its loader would not revive as exactly the same value (a subclass of a message class, a secret,
a kwarg it cannot serialize); nesting deeper than orjson's limit (about 250 levels).

At read (``cannot read back ...``): text that is not JSON, an unknown tag, a damaged envelope, a
zone key the host's zone database lacks, a class that cannot be resolved, a stored field the
class no longer has, a missing field with no default.

Every refusal is a :class:`~durability.errors.CodecError` whose ``path`` names where the value
is (``state.items[3].when``): ``.key`` for an identifier key, ``['key']`` (a ``repr``)
otherwise, ``[3]`` for a position, ``.field`` for a field.

Reading back
============

Dataclasses are rebuilt with ``cls.__new__`` and their fields set as ``object.__setattr__``
sets them (no ``__init__``, no ``__post_init__``; frozen and slotted classes work), pydantic
models as ``model_construct`` builds them (no validators; private attributes are not stored
and take their defaults), enum members with ``cls(value)``. An exception comes back as a :class:`CheckpointedException`; encoding that again
writes the identical record.

Default allowlist (what ``loads`` may import)
=============================================

``loads`` never imports a module the caller has not allowed. A class path resolves only from a
module already in ``sys.modules``, and the object found must be of the envelope's kind (a
dataclass type, a pydantic ``BaseModel`` subclass, an ``Enum`` subclass). Modules the caller
allows may be imported: the ``allowed_modules`` argument, :func:`allow_modules` (process-wide)
and the ``DURABILITY_CODEC_ALLOWED_MODULES`` environment variable (comma-separated, read at each
call) each name module prefixes (``"myapp"`` allows ``myapp`` and ``myapp.*``). Part of the
default allowlist: ``langchain_core.load`` (LangChain objects are revived by LangChain's own
loader with ``allowed_objects="core"``, which imports only its own core classes) and
``langgraph.types`` (the fixed set of LangGraph types above). An exception record's ``type``
is never imported.

Importing this module imports neither pydantic, LangChain nor LangGraph: objects of theirs are
recognised through ``sys.modules``.

Performance
===========

A dict or list made only of JSON-native values is written by orjson and checked in C, not
walked. orjson, with its passthrough options and no ``default``, refuses datetimes,
dataclasses, subclasses, bytes, lone surrogates, integers beyond 64 bits, keys that are not
``str`` and every type it does not know; ormsgpack, likewise, refuses what orjson would have
written its own way (tuples, enum members, UUIDs); a NaN or infinity (looked for in
ormsgpack's bytes) and a ``"$t"`` key (in the text) are the rest. Any of these, or a dict whose
own values are not all of JSON's types, sends the value to the walk. A text above 32 KiB is
checked by the walk instead of ormsgpack (which copies every byte, so a few long strings cost
it more than they cost the walk), and orjson's text is kept when the walk changes nothing.

The walk dispatches on ``type(value)``, returns JSON-native subtrees as they are (no copy), and
builds paths only while an error unwinds; orjson writes and parses the text. A value holding a
lone surrogate, an integer beyond 64 bits or a dict with a non-``str`` key is refused by orjson
and walked a second time by a stricter walk that envelopes those (about twice the cost).
``loads`` of text without ``"$t"`` (most texts hold no ``$`` at all, a memchr away) is a bare
``orjson.loads``; otherwise it walks the parsed tree in place. A LangChain object costs
LangChain's ``dumpd`` plus a trial load at write (about 0.1 ms per message).
``benchmarks/RESULTS.md`` has the figures and where the time goes.
"""

from __future__ import annotations

import binascii
import dataclasses
import importlib
import os
import re
import sys
import threading
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, date, datetime, time, timedelta, timezone, tzinfo
from decimal import Decimal
from enum import Enum
from math import isfinite
from types import MemberDescriptorType, ModuleType
from typing import Any, TypeVar
from uuid import UUID, SafeUUID
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import orjson
import ormsgpack

from durability.errors import CodecError, ConfigError

__all__ = ["CheckpointedException", "allow_modules", "dumps", "loads"]

ENV_ALLOWED_MODULES = "DURABILITY_CODEC_ALLOWED_MODULES"

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

_allowed_lock = threading.Lock()
_allowed_prefixes: tuple[str, ...] = ()


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


def allow_modules(*prefixes: str) -> None:
    """Let :func:`loads` import classes from these modules, process-wide.

    Args:
        *prefixes: Module names; each allows the module and its submodules
            (``"myapp"`` allows ``myapp`` and ``myapp.models``).

    Raises:
        ConfigError: A prefix is not a dotted module name.
    """
    for prefix in prefixes:
        if not isinstance(prefix, str) or not all(p.isidentifier() for p in prefix.split(".")):
            raise ConfigError(
                f"cannot allow the module prefix {prefix!r:.80}: it is not a dotted module "
                "name; pass names such as 'myapp' or 'myapp.models'"
            )
    global _allowed_prefixes
    with _allowed_lock:
        _allowed_prefixes = tuple(dict.fromkeys((*_allowed_prefixes, *prefixes)))


def dumps(value: Any, *, path: str = "value") -> str:
    """Encode ``value`` as compact typed JSON.

    Args:
        value: The value to encode (see the module docstring for what is supported).
        path: The name of the root in error messages, e.g. ``"state"``.

    Returns:
        The JSON text.

    Raises:
        CodecError: The value (or a part of it, named by ``path``) cannot be stored.
    """
    data = _orjson_text(value)
    if data is None:
        return _dumps_walked(value, path)
    if len(data) > _SCREEN_LIMIT:
        # The walk checks a large text, costing per value where ormsgpack costs per byte (a
        # few long strings cost it little); orjson's text stands if it keeps the value as is.
        return _dumps_walked(value, path, kept=data)
    text = data.decode()
    return text if _is_json_native(value, text) else _dumps_walked(value, path)


def _orjson_text(value: Any) -> bytes | None:
    """orjson's text of a dict or list that may be JSON-native, or None when it cannot be.

    orjson refuses datetimes, dataclasses, subclasses and every type it does not know. A dict
    holding a value of another type at its top goes to the walk without trying: looking costs
    a quarter of a failed attempt.
    """
    cls = type(value)
    if cls is list or (cls is dict and _JSON_TYPES.issuperset(map(type, value.values()))):
        try:
            return orjson.dumps(value, option=_ORJSON_JSON_ONLY)
        except TypeError:  # orjson's refusals are TypeErrors
            pass
    return None


def _is_json_native(value: Any, text: str) -> bool:
    """Whether orjson's ``text`` of ``value`` is exactly what the walk would write.

    ormsgpack refuses in C what orjson writes its own way (tuples, enum members, UUIDs); a NaN
    or infinity (orjson's ``null``) and a ``"$t"`` key (left unescaped) are looked for.
    """
    if _may_hold_envelope(text):
        return False
    try:
        packed = ormsgpack.packb(value, option=_JSON_NATIVE_ONLY)
    except TypeError:  # ormsgpack's refusals are TypeErrors
        return False
    first = packed.find(b"\xcb")  # memchr to the first float, if any: the scan starts there
    return first == -1 or _NON_FINITE_FLOAT.search(packed, first) is None


def _dumps_walked(value: Any, path: str, kept: bytes | None = None) -> str:
    """Encode ``value`` through the walk, which envelopes what JSON cannot hold.

    ``kept`` is orjson's text of ``value`` when already written: it is the answer if the walk
    keeps the value as it is.
    """
    try:
        try:
            walked = _FAST.encode(value)
            if walked is value and kept is not None:
                return kept.decode()
            return orjson.dumps(walked).decode()
        except orjson.JSONEncodeError:
            # orjson refuses lone surrogates, integers beyond 64 bits and non-str dict keys;
            # the strict walk envelopes them (it is slower, so only such values pay for it).
            return orjson.dumps(_STRICT.encode(value)).decode()
    except _Refused as refused:
        where = path + "".join(reversed(refused.parts))
        raise CodecError(f"cannot encode {where}: {refused.reason}", path=where) from None
    except RecursionError:
        raise CodecError(
            f"cannot encode {path}: it refers to itself or is nested too deeply; break the "
            "cycle or flatten it",
            path=path,
        ) from None
    except orjson.JSONEncodeError as exc:
        if "recursion" not in str(exc).lower():
            raise CodecError(
                f"cannot encode {path}: orjson refused the encoded value ({str(exc)[:100]}); "
                "keep dict keys and names free of lone surrogates",
                path=path,
            ) from None
        raise CodecError(
            f"cannot encode {path}: it is nested too deeply for JSON (orjson keeps about 250 "
            "levels, envelopes included); flatten it",
            path=path,
        ) from None


def loads(
    text: str | bytes,
    *,
    path: str = "value",
    allowed_modules: Iterable[str] | None = None,
) -> Any:
    """Decode text written by :func:`dumps` back into the same value.

    Args:
        text: The JSON text (``str`` or UTF-8 ``bytes``).
        path: The name of the root in error messages, e.g. ``"state"``.
        allowed_modules: Module prefixes this call may import classes from, on top of
            :func:`allow_modules` and ``DURABILITY_CODEC_ALLOWED_MODULES``.

    Returns:
        The decoded value.

    Raises:
        CodecError: The text (or an envelope in it, named by ``path``) cannot be read back.
    """
    try:
        data = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise CodecError(
            f"cannot read back {path}: the stored text is not valid JSON ({str(exc)[:120]}); "
            "it was damaged or not written by durability.codec, restore it from a copy",
            path=path,
        ) from None
    if not _may_hold_envelope(text):
        return data  # no envelope anywhere: orjson's result is the value
    if isinstance(allowed_modules, str):
        allowed: tuple[str, ...] = (allowed_modules,)
    else:
        allowed = tuple(allowed_modules or ())
    try:
        return _decode(data, allowed)
    except _Refused as refused:
        where = path + "".join(reversed(refused.parts))
        raise CodecError(
            f"cannot read back {where}: {refused.reason}", path=where
        ) from refused.__cause__
    except RecursionError:
        raise CodecError(
            f"cannot read back {path}: it is nested too deeply to decode", path=path
        ) from None


def _may_hold_envelope(text: str | bytes) -> bool:
    # A search for one character runs at memchr speed, and most texts hold no "$" at all; the
    # search for the marker is several times slower on JSON, where '"' is everywhere.
    if isinstance(text, str):
        return "$" in text and _MARK_STR in text
    return b"$" in text and _MARK_BYTES in text


# ---------------------------------------------------------------------------------------------
# Shared helpers


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


# ---------------------------------------------------------------------------------------------
# Encoding: leaf encoders


def _enc_float(value: float) -> float:
    if isfinite(value):
        return value
    raise _Refused(f"float {value} is not a number JSON can hold; store None or a string instead")


def _enc_datetime(value: datetime) -> dict[str, Any]:
    tz = value.tzinfo
    if tz is None or tz is UTC:
        # orjson writes these exactly as isoformat() does, in a third of the time (an aware
        # isoformat() asks its tzinfo for the offset); it would round an offset's seconds away.
        out: dict[str, Any] = {_MARK: "dt", "v": orjson.dumps(value)[1:-1].decode()}
    else:
        out = {_MARK: "dt", "v": value.isoformat()}
        _add_zone(out, tz)
    if value.fold:
        out["f"] = 1
    return out


def _enc_time(value: time) -> dict[str, Any]:
    out: dict[str, Any] = {_MARK: "tm", "v": value.isoformat()}
    tz = value.tzinfo
    if tz is not None and tz is not UTC:
        _add_zone(out, tz)
    if value.fold:
        out["f"] = 1
    return out


def _enc_date(value: date) -> dict[str, Any]:
    return {_MARK: "d", "v": value.isoformat()}


def _enc_timedelta(value: timedelta) -> dict[str, Any]:
    return {_MARK: "td", "v": [value.days, value.seconds, value.microseconds]}


def _enc_timezone(value: tzinfo) -> dict[str, Any]:
    offset = value.utcoffset(None)
    if offset is None:
        raise _Refused(f"the fixed offset {_type_name(type(value))} has no offset")
    out: dict[str, Any] = {_MARK: "tz", "o": offset // _ONE_MICROSECOND}
    name = _fixed_offset_name(value)
    if name is not None:
        out["n"] = name
    return out


def _enc_zoneinfo(value: ZoneInfo) -> dict[str, Any]:
    if value.key is None:
        raise _Refused("a ZoneInfo read from a file has no key to store; use ZoneInfo(key) instead")
    return {_MARK: "zi", "k": value.key}


def _enc_decimal(value: Decimal) -> dict[str, Any]:
    return {_MARK: "dec", "v": str(value)}


def _enc_uuid(value: UUID) -> dict[str, Any]:
    return {_MARK: "uuid", "v": value.hex}  # 3x faster than str(), and as exact


def _enc_bytes(value: bytes) -> dict[str, Any]:
    # binascii is what base64.b64encode and b64decode(validate=True) call, minus their wrapping.
    return {_MARK: "b", "v": binascii.b2a_base64(value, newline=False).decode("ascii")}


def _enc_int_strict(value: int) -> int | dict[str, Any]:
    if _INT_MIN <= value <= _INT_MAX:
        return value
    return {_MARK: "int", "v": hex(value)}


def _has_surrogate(text: str) -> bool:
    return not text.isascii() and _SURROGATE.search(text) is not None


def _enc_str_strict(value: str) -> str | dict[str, Any]:
    if not _has_surrogate(value):
        return value
    pieces: list[str | int] = []
    for i, piece in enumerate(_SURROGATE.split(value)):
        if i % 2:
            pieces.append(ord(piece))
        elif piece:
            pieces.append(piece)
    return {_MARK: "str", "v": pieces}


def _unsupported(cls: type) -> str:
    name = _type_name(cls)
    for base in (dict, list, tuple, set, frozenset, str, int, float, bytes):
        if issubclass(cls, base):
            return (
                f"{name} is a subclass of {base.__name__}, and only the exact type is "
                f"stored; convert it with {base.__name__}(value)"
            )
    for clock in (datetime, date, time, timedelta, Decimal, UUID):
        if issubclass(cls, clock):
            return (
                f"{name} is a subclass of {clock.__name__}, and only the exact type is "
                f"stored; convert it to a plain {clock.__name__}"
            )
    if issubclass(cls, tzinfo):
        return (
            f"the tzinfo {name} is neither a fixed offset (datetime.timezone) nor an IANA zone "
            "(zoneinfo.ZoneInfo); use one of those"
        )
    if cls is bytearray or cls is memoryview:
        return f"{name} is not stored; convert it with bytes(value)"
    return (
        f"{name} is not a type the codec stores; convert it to one it does (JSON types, "
        "datetime, Decimal, UUID, bytes, tuple, set, an enum, a dataclass, a pydantic model)"
    )


# ---------------------------------------------------------------------------------------------
# Encoding: the walk


class _Encoder:
    """A walk that turns a value into a JSON-native tree for orjson.

    The fast walk passes ``str``, ``int`` and dict keys through untouched and lets orjson
    check them; the strict walk envelopes lone surrogates, integers beyond 64 bits and dicts
    with non-str keys itself.
    """

    __slots__ = ("plain", "strict", "table")

    def __init__(self, *, strict: bool) -> None:
        self.strict = strict
        plain: set[type] = {bool, _NONE_TYPE}
        if not strict:
            plain |= {str, int}
        self.plain = frozenset(plain)
        self.table: dict[type, Callable[[Any], Any]] = {
            dict: self.dict_,
            list: self.list_,
            tuple: self.tuple_,
            set: self.set_,
            frozenset: self.frozenset_,
            float: _enc_float,
            datetime: _enc_datetime,
            date: _enc_date,
            time: _enc_time,
            timedelta: _enc_timedelta,
            timezone: _enc_timezone,
            ZoneInfo: _enc_zoneinfo,
            Decimal: _enc_decimal,
            UUID: _enc_uuid,
            bytes: _enc_bytes,
            CheckpointedException: self.checkpointed_,
        }
        if strict:
            self.table[str] = _enc_str_strict
            self.table[int] = _enc_int_strict

    def encode(self, value: Any) -> Any:
        cls = type(value)
        if cls in self.plain:
            return value
        return (self.table.get(cls) or self.resolve(cls))(value)

    def resolve(self, cls: type) -> Callable[[Any], Any]:
        """Find (and remember) the encoder for a type outside the fixed table."""
        encoder: Callable[[Any], Any]
        if issubclass(cls, Enum):
            encoder = self.enum_encoder(cls)
        elif issubclass(cls, BaseException):
            encoder = self.exception_
        elif _is_langgraph_type(cls):
            encoder = self.langgraph_encoder(cls)
        elif _is_langchain_type(cls):
            encoder = self.langchain_
        elif _is_pydantic_model(cls):
            encoder = self.pydantic_encoder(cls)
        elif dataclasses.is_dataclass(cls):
            encoder = self.dataclass_encoder(cls)
        elif _is_pydantic_offset(cls):
            encoder = _enc_timezone
        else:
            raise _Refused(_unsupported(cls))
        self.table[cls] = encoder
        return encoder

    def dict_(self, value: dict[Any, Any]) -> Any:
        if _MARK in value:
            return self.map_(value)
        plain, table, strict = self.plain, self.table, self.strict
        out: dict[str, Any] | None = None
        key: Any = None
        try:
            for key, item in value.items():
                # Only the strict walk checks keys: orjson refuses a non-str key itself,
                # which sends the value to the strict walk.
                if strict and (type(key) is not str or _has_surrogate(key)):
                    break
                cls = type(item)
                if cls in plain or (cls is float and isfinite(item)):
                    continue
                # Nested containers are the common case: call their walk directly.
                if cls is dict:
                    new = self.dict_(item)
                elif cls is list:
                    new = self.list_(item)
                else:
                    new = (table.get(cls) or self.resolve(cls))(item)
                if new is not item:
                    if out is None:
                        out = value.copy()
                    out[key] = new
            else:
                return value if out is None else out
        except _Refused as refused:
            refused.parts.append(_key_part(key))
            raise
        return self.map_(value)

    def map_(self, value: dict[Any, Any]) -> dict[str, Any]:
        pairs: list[list[Any]] = []
        for key, item in value.items():
            try:
                pairs.append([self.encode(key), self.encode(item)])
            except _Refused as refused:
                refused.parts.append(_key_part(key))
                raise
        return {_MARK: "map", "v": pairs}

    def list_(self, value: list[Any]) -> list[Any]:
        plain, table = self.plain, self.table
        out: list[Any] | None = None
        index = 0
        try:
            for index, item in enumerate(value):
                cls = type(item)
                if cls in plain or (cls is float and isfinite(item)):
                    continue
                if cls is dict:
                    new = self.dict_(item)
                elif cls is list:
                    new = self.list_(item)
                else:
                    new = (table.get(cls) or self.resolve(cls))(item)
                if new is not item:
                    if out is None:
                        out = value.copy()
                    out[index] = new
        except _Refused as refused:
            refused.parts.append(f"[{index}]")
            raise
        return value if out is None else out

    def items_(self, value: Iterable[Any]) -> list[Any]:
        plain, table = self.plain, self.table
        out: list[Any] = []
        try:
            for item in value:
                cls = type(item)
                out.append(item if cls in plain else (table.get(cls) or self.resolve(cls))(item))
        except _Refused as refused:
            refused.parts.append(f"[{len(out)}]")  # the items before it are all in ``out``
            raise
        return out

    def tuple_(self, value: tuple[Any, ...]) -> dict[str, Any]:
        return {_MARK: "tup", "v": self.items_(value)}

    def set_(self, value: set[Any]) -> dict[str, Any]:
        return {_MARK: "set", "v": self.items_(_ordered(value))}

    def frozenset_(self, value: frozenset[Any]) -> dict[str, Any]:
        return {_MARK: "fset", "v": self.items_(_ordered(value))}

    def attrs_(self, value: object, names: Iterable[str]) -> dict[str, Any]:
        """Encode the named attributes of ``value`` (absent ones are left out)."""
        plain, table = self.plain, self.table
        out: dict[str, Any] = {}
        name = ""
        try:
            for name in names:
                item = getattr(value, name, _ABSENT)
                if item is _ABSENT:
                    continue
                cls = type(item)
                out[name] = item if cls in plain else (table.get(cls) or self.resolve(cls))(item)
        except _Refused as refused:
            refused.parts.append("." + name)
            raise
        return out

    def enum_encoder(self, cls: type[Enum]) -> Callable[[Enum], dict[str, Any]]:
        path = _importable_path(cls, "enum")

        def encode(value: Enum) -> dict[str, Any]:
            return {_MARK: "enum", "c": path, "v": self.encode(value.value)}

        return encode

    def dataclass_encoder(self, cls: type) -> Callable[[Any], dict[str, Any]]:
        path = _importable_path(cls, "dataclass")
        names = tuple(field.name for field in dataclasses.fields(cls))

        def encode(value: Any) -> dict[str, Any]:
            return {_MARK: "dc", "c": path, "f": self.attrs_(value, names)}

        return encode

    def pydantic_encoder(self, cls: type) -> Callable[[Any], dict[str, Any]]:
        path = _importable_path(cls, "pydantic model")
        names = tuple(cls.model_fields)  # type: ignore[attr-defined]  # a pydantic model

        def encode(value: Any) -> dict[str, Any]:
            extra = value.__pydantic_extra__
            fields = (*names, *extra) if extra else names
            return {_MARK: "pyd", "c": path, "f": self.attrs_(value, fields)}

        return encode

    def langgraph_encoder(self, cls: type) -> Callable[[Any], dict[str, Any]]:
        name = cls.__qualname__
        names = _langgraph_fields(cls)

        def encode(value: Any) -> dict[str, Any]:
            return {_MARK: "lg", "c": name, "f": self.attrs_(value, names)}

        return encode

    def langchain_(self, value: Any) -> dict[str, Any]:
        from langchain_core.load import dumpd

        cls = type(value)
        who = _type_name(cls)
        fix = "keep its fields to JSON-serializable values, or store a plain dict"
        if not cls.__module__.startswith("langchain"):
            base = next(b for b in cls.__mro__ if b.__module__.startswith("langchain"))
            who += f" (a subclass of {_type_name(base)})"
            fix = "use the LangChain class itself, or a plain dict"
        data = dumpd(value)
        try:
            revived = _langchain_load(data)
        except Exception as exc:
            raise _Refused(
                f"{who} is a LangChain object its loader will not revive "
                f"({type(exc).__name__}); {fix}"
            ) from None
        if type(revived) is not cls:
            raise _Refused(
                f"{who} would be read back by LangChain's loader as "
                f"{_type_name(type(revived))}; use the LangChain class itself, or a plain dict"
            )
        if revived != value:
            raise _Refused(
                f"{who} would not be read back by LangChain's loader as an equal value (a "
                "field it cannot serialize, or a secret); keep such fields out of it"
            )
        return {_MARK: "lc", "v": self.encode(data)}

    def exception_(self, value: BaseException) -> dict[str, Any]:
        kwargs: dict[str, Any] = {}
        reprs: list[str] = []
        for name, item in getattr(value, "__dict__", {}).items():
            try:
                kwargs[name] = self.encode(item)
            except _Refused:
                kwargs[name] = _short_repr(item, limit=10_000)
                reprs.append(name)
        cause = value.__cause__
        return {
            _MARK: "exc",
            "type": _class_path(type(value)),
            "message": _safe_str(value),
            "kwargs": kwargs,
            "repr_kwargs": reprs,
            "cause": None if cause is None else self.encode(cause),
        }

    def checkpointed_(self, value: CheckpointedException) -> dict[str, Any]:
        kwargs: dict[str, Any] = {}
        for name, item in value.kwargs.items():
            try:
                kwargs[name] = self.encode(item)
            except _Refused as refused:
                refused.parts.append(f".kwargs{_key_part(name)}")
                raise
        return {
            _MARK: "exc",
            "type": value.type_name,
            "message": value.message,
            "kwargs": kwargs,
            "repr_kwargs": list(value.repr_kwargs),
            "cause": None if value.cause is None else self.encode(value.cause),
        }


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


_FAST = _Encoder(strict=False)
_STRICT = _Encoder(strict=True)


# ---------------------------------------------------------------------------------------------
# Decoding


def _decode(value: Any, allowed: tuple[str, ...]) -> Any:
    """Decode a parsed JSON value, reviving every envelope in it (containers in place)."""
    cls = type(value)
    if cls is dict:
        return _envelope(value, allowed) if _MARK in value else _decode_dict(value, allowed)
    if cls is list:
        return _decode_list(value, allowed)
    return value


def _decode_dict(value: dict[str, Any], allowed: tuple[str, ...]) -> dict[str, Any]:
    key = item = None
    try:
        for key, item in value.items():
            cls = type(item)
            if cls is dict:
                if _MARK in item:  # an envelope, decoded right here to save a call
                    value[key] = _DECODERS[item[_MARK]](item, allowed)
                else:
                    _decode_dict(item, allowed)
            elif cls is list:
                _decode_list(item, allowed)
    except _Refused as refused:
        refused.parts.append(_key_part(key))
        raise
    except RecursionError:
        raise
    except Exception as exc:  # the envelope ``item`` itself could not be read back
        unreadable = _unreadable(item, exc)
        unreadable.parts.append(_key_part(key))
        raise unreadable from exc
    return value


def _decode_list(value: list[Any], allowed: tuple[str, ...]) -> list[Any]:
    index = 0
    item = None
    try:
        for index, item in enumerate(value):
            cls = type(item)
            if cls is dict:
                if _MARK in item:
                    value[index] = _DECODERS[item[_MARK]](item, allowed)
                else:
                    _decode_dict(item, allowed)
            elif cls is list:
                _decode_list(item, allowed)
    except _Refused as refused:
        refused.parts.append(f"[{index}]")
        raise
    except RecursionError:
        raise
    except Exception as exc:
        unreadable = _unreadable(item, exc)
        unreadable.parts.append(f"[{index}]")
        raise unreadable from exc
    return value


def _decode_items(value: Any, allowed: tuple[str, ...]) -> list[Any]:
    if type(value) is not list:
        raise TypeError(f"expected a list, found {type(value).__name__}")
    return _decode_list(value, allowed)


def _decode_fields(value: Any, allowed: tuple[str, ...]) -> dict[str, Any]:
    # Field and attribute names are identifiers, so the dict walk names them ``.name``.
    if type(value) is not dict:
        raise TypeError(f"expected an object, found {type(value).__name__}")
    return _decode_dict(value, allowed)


def _envelope(value: dict[str, Any], allowed: tuple[str, ...]) -> Any:
    try:
        return _DECODERS[value[_MARK]](value, allowed)
    except (_Refused, RecursionError):
        raise
    except Exception as exc:
        raise _unreadable(value, exc) from exc


def _unreadable(envelope: Any, exc: Exception) -> _Refused:
    """The refusal for an envelope whose decoder failed (or that has no decoder)."""
    tag = envelope.get(_MARK)
    if type(tag) is not str or tag not in _DECODERS:
        return _Refused(
            f"the envelope tag {_short_repr(tag)} is unknown: the data was written by a newer "
            "durability or not by durability.codec; upgrade durability on this host"
        )
    return _Refused(
        f"the {tag!r} envelope is damaged ({type(exc).__name__}: {str(exc)[:100]}); "
        "restore the checkpoint from a copy"
    )


def _text(value: Any) -> str:
    if type(value) is not str:
        raise TypeError(f"expected a string, found {type(value).__name__}")
    return value


def _zone(key: Any) -> ZoneInfo:
    try:
        return ZoneInfo(_text(key))
    except (ZoneInfoNotFoundError, ValueError):
        raise _Refused(
            f"the zone key {_short_repr(key)} is not in this host's zone database; install "
            "the tzdata package or update the system zone files"
        ) from None


_Clock = TypeVar("_Clock", datetime, time)


def _with_zone(value: _Clock, envelope: dict[str, Any]) -> _Clock:
    fold = envelope.get("f", 0)
    if "k" in envelope:
        return value.replace(tzinfo=_zone(envelope["k"]), fold=fold)
    if "n" in envelope:
        offset = value.utcoffset()
        if offset is None:
            raise ValueError("a zone name is stored without an offset")
        return value.replace(tzinfo=timezone(offset, _text(envelope["n"])), fold=fold)
    return value.replace(fold=fold) if fold else value


def _dec_datetime(value: dict[str, Any], allowed: tuple[str, ...]) -> datetime:
    return _with_zone(datetime.fromisoformat(value["v"]), value)


def _dec_time(value: dict[str, Any], allowed: tuple[str, ...]) -> time:
    return _with_zone(time.fromisoformat(value["v"]), value)


def _dec_date(value: dict[str, Any], allowed: tuple[str, ...]) -> date:
    return date.fromisoformat(value["v"])


def _dec_timedelta(value: dict[str, Any], allowed: tuple[str, ...]) -> timedelta:
    days, seconds, micros = value["v"]
    if not all(type(part) is int for part in (days, seconds, micros)):
        raise TypeError("timedelta parts must be integers")
    return timedelta(days, seconds, micros)


def _dec_timezone(value: dict[str, Any], allowed: tuple[str, ...]) -> timezone:
    offset = value["o"]
    if type(offset) is not int:
        raise TypeError("the offset must be an integer")
    if "n" in value:
        return timezone(timedelta(microseconds=offset), _text(value["n"]))
    return timezone(timedelta(microseconds=offset))


def _dec_zoneinfo(value: dict[str, Any], allowed: tuple[str, ...]) -> ZoneInfo:
    return _zone(value["k"])


def _dec_decimal(value: dict[str, Any], allowed: tuple[str, ...]) -> Decimal:
    return Decimal(_text(value["v"]))


def _dec_uuid(value: dict[str, Any], allowed: tuple[str, ...]) -> UUID:
    digits = value["v"]
    if type(digits) is str and len(digits) == 32 and digits.isascii() and digits.isalnum():
        # What the codec writes, built as UUID.__setstate__ builds it: a third faster than
        # UUID(digits), which first strips braces, dashes and "urn:uuid:" it never finds here.
        uuid = _new_object(UUID)
        _set_attribute(uuid, "int", int(digits, 16))
        _set_attribute(uuid, "is_safe", _UUID_SAFETY_UNKNOWN)
        return uuid
    return UUID(digits)


def _dec_bytes(value: dict[str, Any], allowed: tuple[str, ...]) -> bytes:
    return binascii.a2b_base64(_text(value["v"]), strict_mode=True)


def _dec_int(value: dict[str, Any], allowed: tuple[str, ...]) -> int:
    return int(_text(value["v"]), 16)


def _dec_str(value: dict[str, Any], allowed: tuple[str, ...]) -> str:
    pieces = value["v"]
    if type(pieces) is not list:
        raise TypeError("the pieces must be a list")
    return "".join(_text(p) if type(p) is str else chr(p) for p in pieces)


def _dec_tuple(value: dict[str, Any], allowed: tuple[str, ...]) -> tuple[Any, ...]:
    return tuple(_decode_items(value["v"], allowed))


def _dec_set(value: dict[str, Any], allowed: tuple[str, ...]) -> set[Any]:
    return set(_decode_items(value["v"], allowed))


def _dec_frozenset(value: dict[str, Any], allowed: tuple[str, ...]) -> frozenset[Any]:
    return frozenset(_decode_items(value["v"], allowed))


def _dec_map(value: dict[str, Any], allowed: tuple[str, ...]) -> dict[Any, Any]:
    pairs = value["v"]
    if type(pairs) is not list:
        raise TypeError("the pairs must be a list")
    out: dict[Any, Any] = {}
    for raw_key, raw_item in pairs:
        key = _decode(raw_key, allowed)
        try:
            out[key] = _decode(raw_item, allowed)
        except _Refused as refused:
            refused.parts.append(_key_part(key))
            raise
    return out


def _is_allowed(module: str, allowed: tuple[str, ...]) -> bool:
    from_env = tuple(p.strip() for p in os.environ.get(ENV_ALLOWED_MODULES, "").split(","))
    return any(
        prefix and (module == prefix or module.startswith(prefix + "."))
        for prefix in (*allowed, *_allowed_prefixes, *from_env)
    )


# class path -> (kind, module name, module, reader). A hit is used only while the module is
# still the one in sys.modules, so the cache never lets through what resolving would refuse.
_readers: dict[str, tuple[str, str, ModuleType, Callable[[Any, tuple[str, ...]], Any]]] = {}


def _reader(
    path: Any, kind: str, allowed: tuple[str, ...]
) -> Callable[[Any, tuple[str, ...]], Any]:
    """The function that rebuilds a value of the class ``path`` names from its stored form."""
    hit = _readers.get(path)
    if hit is not None and hit[0] == kind and sys.modules.get(hit[1]) is hit[2]:
        return hit[3]
    module_name, module, cls = _resolve(path, kind, allowed)
    read = _READER_FACTORIES[kind](cls, path)
    _readers[path] = (kind, module_name, module, read)
    return read


def _resolve(path: Any, kind: str, allowed: tuple[str, ...]) -> tuple[str, ModuleType, type]:
    """The class a stored class path names, importing its module only if it is allowed."""
    module_name, sep, qualname = path.partition(":")
    if not sep or not module_name or not qualname:
        raise ValueError(f"the class path {_short_repr(path)} is not module:qualname")
    module = sys.modules.get(module_name)
    if module is None:
        if not _is_allowed(module_name, allowed):
            raise _Refused(
                f"the {kind} {path} cannot be resolved: module {module_name!r} is not imported "
                "in this process and not allowed to be imported; import it before reading, "
                f"or allow it with loads(..., allowed_modules=[{module_name!r}]), "
                f"durability.codec.allow_modules({module_name!r}) or "
                f"{ENV_ALLOWED_MODULES}={module_name}"
            )
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise _Refused(
                f"the {kind} {path} cannot be resolved: importing {module_name!r} failed "
                f"({_short_repr(exc, 100)}); install the package that defines it"
            ) from exc
    found: Any = module
    for part in qualname.split("."):
        found = getattr(found, part, _ABSENT)
        if found is _ABSENT:
            raise _Refused(
                f"the {kind} {path} cannot be resolved: {module_name} has no {qualname}; "
                "the class was renamed or removed, restore it or migrate the stored data"
            )
    if not _is_kind(found, kind):
        raise _Refused(
            f"the {kind} {path} cannot be resolved: {module_name}.{qualname} is not a {kind}"
        )
    return module_name, module, found


def _is_kind(found: Any, kind: str) -> bool:
    if not isinstance(found, type):
        return False
    if kind == "dataclass":
        return dataclasses.is_dataclass(found)
    if kind == "enum":
        return issubclass(found, Enum)
    return _is_pydantic_model(found)


def _unknown_field(path: str, name: str) -> _Refused:
    refused = _Refused(
        f"the stored field {name!r} is not a field of {path} any more; add the field back "
        "or migrate the stored data"
    )
    refused.parts.append(_key_part(name))
    return refused


def _missing_field(path: str, name: str) -> _Refused:
    return _Refused(
        f"the stored {path} has no field {name!r} and the class gives it no default; give "
        "the field a default or migrate the stored data"
    )


def _dataclass_reader(cls: Any, path: str) -> Callable[[Any, tuple[str, ...]], Any]:
    known = {field.name: field for field in dataclasses.fields(cls)}
    setters = {name: _field_setter(cls, name) for name in known}
    in_dict = _IN_DICT in setters.values()
    new = cls.__new__  # runs no __init__

    def read(stored: Any, allowed: tuple[str, ...]) -> Any:
        if type(stored) is not dict:
            raise TypeError("the fields must be an object")
        obj = new(cls)
        namespace = obj.__dict__ if in_dict else None
        for name, item in stored.items():
            setter = setters.get(name)
            if setter is None:
                raise _unknown_field(path, name)
            if type(item) is dict or type(item) is list:
                try:
                    item = _decode(item, allowed)
                except _Refused as refused:
                    refused.parts.append("." + name)
                    raise
            if setter is _IN_DICT:
                namespace[name] = item  # type: ignore[index]  # in_dict: a dict is there
            else:
                setter(obj, item)
        if len(stored) != len(known):
            for name, field in known.items():
                if name in stored:
                    continue
                if field.default is not dataclasses.MISSING:
                    _set_attribute(obj, name, field.default)
                elif field.default_factory is not dataclasses.MISSING:
                    _set_attribute(obj, name, field.default_factory())
                else:
                    raise _missing_field(path, name)
        return obj

    return read


_IN_DICT = object()


def _field_setter(cls: type, name: str) -> Any:
    """How to set a field past the class's own __setattr__, as ``object.__setattr__`` would.

    A slot's own setter, or ``_IN_DICT`` for a field kept in the instance's dict: each a third
    of ``object.__setattr__``'s cost, which stays for any other kind of class attribute.
    """
    attribute = next((vars(k)[name] for k in cls.__mro__ if name in vars(k)), None)
    if type(attribute) is MemberDescriptorType:
        return attribute.__set__
    kind = type(attribute)
    if cls.__dictoffset__ and not (hasattr(kind, "__set__") or hasattr(kind, "__delete__")):
        return _IN_DICT
    return lambda obj, value: _set_attribute(obj, name, value)


def _pydantic_reader(cls: Any, path: str) -> Callable[[Any, tuple[str, ...]], Any]:
    names = tuple(cls.model_fields)
    known = frozenset(names)
    required = tuple(name for name, field in cls.model_fields.items() if field.is_required())
    required_set = frozenset(required)
    keeps_extra = cls.model_config.get("extra") == "allow"
    construct = _pydantic_constructor(cls, names)

    def read(stored: Any, allowed: tuple[str, ...]) -> Any:
        stored = _decode_fields(stored, allowed)
        # Each check is one set comparison in C; the name is looked for only when one fails.
        if not (keeps_extra or stored.keys() <= known):
            raise _unknown_field(path, next(name for name in stored if name not in known))
        if not stored.keys() >= required_set:
            raise _missing_field(path, next(name for name in required if name not in stored))
        if construct is not None and len(stored) == len(names):
            return construct(stored)
        return cls.model_construct(**stored)  # no validators run

    return read


def _pydantic_constructor(
    cls: Any, names: tuple[str, ...]
) -> Callable[[dict[str, Any]], Any] | None:
    """What ``model_construct`` does with every field given by name, in a third of the time.

    None for a model where it does more: one with private attributes or a post-init hook, a
    root model, one keeping extra fields, one where an alias could claim another field's name.
    """
    claimed = [
        alias
        for name, field in cls.model_fields.items()
        for alias in (field.alias, field.validation_alias)
        if alias is not None and alias != name
    ]
    if (
        cls.__pydantic_post_init__
        or cls.__pydantic_root_model__
        or cls.model_config.get("extra") == "allow"
        or not all(type(alias) is str and alias not in names for alias in claimed)
    ):
        return None
    new = cls.__new__

    def construct(fields: dict[str, Any]) -> Any:
        if tuple(fields) != names:  # model_construct keeps the class's field order
            fields = {name: fields[name] for name in names}
        model = new(cls)
        _set_attribute(model, "__dict__", fields)
        _set_attribute(model, "__pydantic_fields_set__", set(names))
        _set_attribute(model, "__pydantic_extra__", None)
        _set_attribute(model, "__pydantic_private__", None)
        return model

    return construct


def _enum_reader(cls: Any, path: str) -> Callable[[Any, tuple[str, ...]], Any]:
    def read(stored: Any, allowed: tuple[str, ...]) -> Any:
        return cls(_decode(stored, allowed))

    return read


_READER_FACTORIES: dict[str, Callable[[Any, str], Callable[[Any, tuple[str, ...]], Any]]] = {
    "dataclass": _dataclass_reader,
    "pydantic model": _pydantic_reader,
    "enum": _enum_reader,
}


def _dec_dataclass(value: dict[str, Any], allowed: tuple[str, ...]) -> Any:
    return _reader(value["c"], "dataclass", allowed)(value["f"], allowed)


def _dec_pydantic(value: dict[str, Any], allowed: tuple[str, ...]) -> Any:
    return _reader(value["c"], "pydantic model", allowed)(value["f"], allowed)


def _dec_enum(value: dict[str, Any], allowed: tuple[str, ...]) -> Any:
    return _reader(value["c"], "enum", allowed)(value["v"], allowed)


def _dec_exception(value: dict[str, Any], allowed: tuple[str, ...]) -> CheckpointedException:
    try:
        kwargs = _decode_fields(value["kwargs"], allowed)
    except _Refused as refused:
        refused.parts.append(".kwargs")
        raise
    reprs = _decode_items(value["repr_kwargs"], allowed)
    cause = value["cause"]
    if cause is not None:
        cause = _decode(cause, allowed)
        if type(cause) is not CheckpointedException:
            raise TypeError("cause must be an exception record")
    return CheckpointedException(
        _text(value["type"]),
        _text(value["message"]),
        kwargs=kwargs,
        repr_kwargs=[_text(r) for r in reprs],
        cause=cause,
    )


def _dec_langchain(value: dict[str, Any], allowed: tuple[str, ...]) -> Any:
    data = _decode(value["v"], allowed)
    try:
        return _langchain_load(data)
    except ImportError:
        raise _Refused(
            "it is a LangChain object and langchain-core is not installed; install it"
        ) from None
    except Exception as exc:
        raise _Refused(
            f"LangChain's loader refused it ({type(exc).__name__}: {str(exc)[:100]}); "
            "install the langchain-core version that wrote it"
        ) from exc


def _dec_langgraph(value: dict[str, Any], allowed: tuple[str, ...]) -> Any:
    name = _text(value["c"])
    if name not in _LANGGRAPH_TYPES:
        raise _Refused(
            f"{_short_repr(name)} is not a LangGraph type the codec keeps; upgrade durability"
        )
    try:
        module = importlib.import_module("langgraph.types")
    except ImportError:
        raise _Refused(
            f"it is a LangGraph {name} and langgraph is not installed; install it"
        ) from None
    return getattr(module, name)(**_decode_fields(value["f"], allowed))


_DECODERS: dict[str, Callable[[dict[str, Any], tuple[str, ...]], Any]] = {
    "dt": _dec_datetime,
    "tm": _dec_time,
    "d": _dec_date,
    "td": _dec_timedelta,
    "tz": _dec_timezone,
    "zi": _dec_zoneinfo,
    "dec": _dec_decimal,
    "uuid": _dec_uuid,
    "b": _dec_bytes,
    "int": _dec_int,
    "str": _dec_str,
    "tup": _dec_tuple,
    "set": _dec_set,
    "fset": _dec_frozenset,
    "map": _dec_map,
    "enum": _dec_enum,
    "dc": _dec_dataclass,
    "pyd": _dec_pydantic,
    "exc": _dec_exception,
    "lc": _dec_langchain,
    "lg": _dec_langgraph,
}
