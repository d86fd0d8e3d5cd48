"""The codec's decoder: the revive walk, the envelope readers and the class allowlist."""

from __future__ import annotations

import binascii
import dataclasses
import importlib
import os
import sys
import threading
from collections.abc import Callable
from datetime import date, datetime, time, timedelta, timezone
from decimal import Decimal
from enum import Enum
from types import MemberDescriptorType, ModuleType
from typing import Any, TypeVar
from uuid import UUID
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from durability.codec._shared import (
    _ABSENT,
    _LANGGRAPH_TYPES,
    _MARK,
    _UUID_SAFETY_UNKNOWN,
    CheckpointedException,
    _is_pydantic_model,
    _key_part,
    _langchain_load,
    _new_object,
    _Refused,
    _set_attribute,
    _short_repr,
)
from durability.errors import ConfigError

#: Names module prefixes :func:`loads` may import from, comma-separated (read at each call).
ENV_ALLOWED_MODULES = "DURABILITY_CODEC_ALLOWED_MODULES"

_allowed_lock = threading.Lock()
_allowed_prefixes: tuple[str, ...] = ()


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
