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

from collections.abc import Iterable
from typing import Any

import orjson
import ormsgpack

from durability.codec._decoder import ENV_ALLOWED_MODULES, _decode, allow_modules
from durability.codec._encoder import _FAST, _STRICT
from durability.codec._shared import (
    _JSON_NATIVE_ONLY,
    _JSON_TYPES,
    _MARK_BYTES,
    _MARK_STR,
    _NON_FINITE_FLOAT,
    _ORJSON_JSON_ONLY,
    _SCREEN_LIMIT,
    CheckpointedException,
    _Refused,
)
from durability.errors import CodecError

__all__ = [
    "ENV_ALLOWED_MODULES",
    "CheckpointedException",
    "allow_modules",
    "dumps",
    "loads",
]


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
    if not value and type(value) is dict:
        # Most payloads of a checkpoint (node input and output, counters, interrupt context)
        # are empty: four of a put's six texts.
        return "{}"
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
    if text == "{}":  # an empty payload (most of a checkpoint's): a fresh dict each time
        return {}
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
