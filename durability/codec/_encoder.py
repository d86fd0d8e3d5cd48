"""The codec's encoder: leaf encoders and the walk that envelopes what JSON cannot hold."""

from __future__ import annotations

import binascii
import dataclasses
from collections.abc import Callable, Iterable
from datetime import UTC, date, datetime, time, timedelta, timezone, tzinfo
from decimal import Decimal
from enum import Enum
from math import isfinite
from typing import Any
from uuid import UUID
from zoneinfo import ZoneInfo

import orjson

from durability.codec._shared import (
    _ABSENT,
    _INT_MAX,
    _INT_MIN,
    _MARK,
    _NONE_TYPE,
    _ONE_MICROSECOND,
    _SURROGATE,
    CheckpointedException,
    _add_zone,
    _class_path,
    _fixed_offset_name,
    _importable_path,
    _is_langchain_type,
    _is_langgraph_type,
    _is_pydantic_model,
    _is_pydantic_offset,
    _key_part,
    _langchain_load,
    _langgraph_fields,
    _ordered,
    _Refused,
    _safe_str,
    _short_repr,
    _type_name,
)

#: How often a LangChain object that changes while being written is dumped again.
_LANGCHAIN_DUMPS = 3


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
        # LangGraph writes a checkpoint on a background thread while the next step runs, and
        # add_messages gives a message its id in place: a value that changed between the dump
        # and the comparison is dumped again rather than refused.
        for _ in range(_LANGCHAIN_DUMPS):
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
            if revived == value:
                return {_MARK: "lc", "v": self.encode(data)}
            if dumpd(value) == data:
                raise _Refused(
                    f"{who} would not be read back by LangChain's loader as an equal value (a "
                    "field it cannot serialize, or a secret); keep such fields out of it"
                )
        raise _Refused(
            f"{who} changed while it was being written, {_LANGCHAIN_DUMPS} times; write it "
            "from one thread, or a copy of it"
        )

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


_FAST = _Encoder(strict=False)
_STRICT = _Encoder(strict=True)
