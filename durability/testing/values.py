"""Sample values the conformance suite stores: one of every type the codec keeps, and a
type-exact comparison."""

from __future__ import annotations

import datetime as dt
import decimal
import enum
import threading
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo


class Colour(enum.Enum):
    """An enum whose members travel through every store."""

    RED = "red"
    BLUE = "blue"


@dataclass(frozen=True)
class Order:
    """A dataclass whose instances travel through every store."""

    order_id: uuid.UUID
    placed: datetime
    total: decimal.Decimal
    tags: frozenset[str]


try:
    import pydantic
except ImportError:  # pydantic is optional: its values join rich_state() when it is installed
    pydantic = None  # type: ignore[assignment]
else:

    class Shipment(pydantic.BaseModel):
        """A pydantic model whose instances travel through every store (pydantic installed)."""

        order: Order
        sent_at: datetime
        weight: decimal.Decimal


def _failure() -> Exception:
    """An exception with attributes (one JSON cannot hold) raised from another one."""
    try:
        try:
            raise KeyError("sku-9")
        except KeyError as missing:
            raise RuntimeError("the order could not be packed") from missing
    except RuntimeError as exc:
        exc.order_id = 42  # type: ignore[attr-defined]
        exc.handle = threading.Lock()  # type: ignore[attr-defined]  # kept as its repr()
        return exc
    raise AssertionError("unreachable")


def _installed_values() -> dict[str, Any]:
    """Values of the optional packages the codec keeps (pydantic, LangChain, LangGraph),
    for those of them that are installed."""
    values: dict[str, Any] = {}
    if pydantic is not None:
        parsed = Shipment.model_validate(
            {
                "order": Order(
                    uuid.UUID(int=8),
                    datetime(2026, 1, 2, tzinfo=UTC),
                    decimal.Decimal(1),
                    frozenset({"y"}),
                ),
                "sent_at": "2026-01-02T08:00:00+05:30",  # pydantic attaches its own fixed offset
                "weight": "1.250",
            }
        )
        values["pydantic"] = parsed
        values["pydantic_offset"] = parsed.sent_at
    try:
        from langchain_core.documents import Document
        from langchain_core.messages import AIMessage, HumanMessage
        from langchain_core.prompts import ChatPromptTemplate
    except ImportError:
        pass
    else:
        values["langchain"] = [
            HumanMessage("where is my order?", id="m1"),
            AIMessage("looking", tool_calls=[{"name": "find", "args": {"id": 42}, "id": "c1"}]),
            Document(page_content="order 42", metadata={"src": "db"}),
            ChatPromptTemplate.from_messages([("system", "be brief"), ("human", "{q}")]),
        ]
    try:
        from langgraph.types import Command, Interrupt, Send
    except ImportError:
        pass
    else:
        values["langgraph"] = [
            Send("pack", {"items": (1, 2)}),
            Interrupt(value={"ask": "ship?"}, id="i-1"),
            Command(goto="ship", resume={"i-1": "yes"}),
        ]
    return values


def rich_state() -> dict[str, Any]:
    """A state holding one of every type the codec keeps, the hard cases included (the
    pydantic, LangChain and LangGraph ones when those packages are installed)."""
    paris = ZoneInfo("Europe/Paris")
    return _installed_values() | {
        "naive": datetime(2026, 3, 1, 12, 30, 15, 123456),
        "utc": datetime(2026, 3, 1, 12, tzinfo=UTC),
        "named_offset": datetime(
            2026, 3, 1, 12, tzinfo=dt.timezone(timedelta(hours=5, minutes=30), "IST")
        ),
        "zoned_fold": datetime(2026, 10, 25, 2, 30, fold=1, tzinfo=paris),
        "date": dt.date(2026, 2, 28),
        "time": dt.time(23, 59, 59, 999999, tzinfo=paris),
        "delta": timedelta(days=-1, seconds=5, microseconds=7),
        "tz": dt.timezone(timedelta(hours=-3)),
        "zone": paris,
        "decimal": decimal.Decimal("3.1415926535897932384626433832"),
        "uuid": uuid.UUID("12345678-1234-5678-1234-567812345678"),
        "tuple": (1, ("nested", None), ()),
        "set": {1, 2, 3},
        "frozenset": frozenset({"a", "b"}),
        "int_keys": {1: "one", (2, 3): "pair", None: "none"},
        "bytes": [b"\x00\xff binary", b""],
        "enum": Colour.BLUE,
        "dataclass": Order(
            uuid.UUID(int=7),
            datetime(2026, 1, 1, tzinfo=UTC),
            decimal.Decimal("9.99"),
            frozenset({"x"}),
        ),
        "big": 2**100,
        "negative_big": -(2**80),
        "nul": "before\x00after",
        "surrogate": "lone \ud800 surrogate",
        "unicode": "naïve café 🚀 日本語",
        "envelope_lookalike": {"$t": "datetime", "v": "not really"},
        "exception": ValueError("bad value"),
        "exception_with_cause": _failure(),
        "empty": {"list": [], "dict": {}, "str": ""},
        "floats": [0.1, -0.0, 1e308, 5e-324],
    }


def assert_same(expected: Any, actual: Any, path: str = "value") -> None:
    """Assert equal values of the same types, recursively (``==`` alone ignores types)."""
    if isinstance(expected, BaseException):
        _assert_same_exception(expected, actual, path)
        return
    if type(expected).__name__ == "TzInfo":  # pydantic's parsed offset comes back as a timezone
        assert type(actual) is dt.timezone, f"{path}: {type(actual).__name__}"
        assert actual.utcoffset(None) == expected.utcoffset(None), f"{path}: offset"
        assert actual.tzname(None) == expected.tzname(None), f"{path}: name"
        return
    assert type(actual) is type(expected), (
        f"{path}: {type(actual).__name__} != {type(expected).__name__}"
    )
    if isinstance(expected, dict):
        assert set(actual) == set(expected), f"{path}: keys differ"
        for key in expected:
            assert_same(expected[key], actual[key], f"{path}[{key!r}]")
    elif isinstance(expected, list | tuple):
        assert len(actual) == len(expected), f"{path}: lengths differ"
        for i, (e, a) in enumerate(zip(expected, actual, strict=True)):
            assert_same(e, a, f"{path}[{i}]")
    elif isinstance(expected, datetime | dt.time):
        assert actual == expected, f"{path}: {actual!r} != {expected!r}"
        assert actual.fold == expected.fold, f"{path}: fold {actual.fold} != {expected.fold}"
        if expected.tzinfo is not None:
            assert_same(expected.tzinfo, actual.tzinfo, f"{path}.tzinfo")
        else:
            assert actual.tzinfo is None, f"{path}: tzinfo {actual.tzinfo!r} != None"
    elif pydantic is not None and isinstance(expected, pydantic.BaseModel):
        # Field by field, so a nested value of the wrong type is named (LangChain objects too).
        for name in type(expected).model_fields:
            assert_same(getattr(expected, name), getattr(actual, name), f"{path}.{name}")
    elif isinstance(expected, float) and expected == 0:
        assert str(actual) == str(expected), f"{path}: {actual!r} != {expected!r}"
    else:
        assert actual == expected, f"{path}: {actual!r} != {expected!r}"


def _assert_same_exception(expected: BaseException, actual: Any, path: str) -> None:
    """An exception comes back as a CheckpointedException carrying its record: class path,
    message, attributes (``repr()`` of those JSON cannot hold, named in ``repr_kwargs``) and
    the record of its cause."""
    assert type(actual).__name__ == "CheckpointedException", f"{path}: {type(actual).__name__}"
    assert actual.type_name.endswith(type(expected).__qualname__), f"{path}: {actual.type_name}"
    assert actual.message == str(expected), f"{path}: {actual.message!r}"
    attributes = vars(expected)
    assert set(actual.kwargs) == set(attributes), f"{path}: attributes {set(actual.kwargs)}"
    for name, value in attributes.items():
        if name in actual.repr_kwargs:
            assert actual.kwargs[name] == repr(value), f"{path}.kwargs[{name!r}]"
        else:
            assert_same(value, actual.kwargs[name], f"{path}.kwargs[{name!r}]")
    if expected.__cause__ is None:
        assert actual.cause is None, f"{path}: cause {actual.cause!r}"
    else:
        _assert_same_exception(expected.__cause__, actual.cause, f"{path}.cause")


#: Ids a store must hold as they are: unicode, URL and SQL metacharacters, braces, 10 KB.
HOSTILE_IDS = [
    "unicode-ünï-çødé-🚀",
    "slash/and/more/",
    "query?x=1&y=2#frag",
    "percent%20%2F%00encoded",
    "quote'; DROP TABLE durability_checkpoints; --",
    'double"quote\\backslash',
    "{hash}tag}{",
    "..",
    " spaced  ",
    "line\nbreak",
    "carriage\rreturn",
    "tab\there",
    "line\u2028separator",
    "next\u0085line",
    "x" * 10_000,
]
