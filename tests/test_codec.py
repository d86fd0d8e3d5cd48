"""Tests for durability.codec: what round-trips, what is refused, and the allowlist."""

from __future__ import annotations

import dataclasses
import enum
import math
import os
import subprocess
import sys
import uuid
from collections import OrderedDict, defaultdict
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta, timezone, tzinfo
from decimal import Decimal
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pydantic
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from durability import codec
from durability.codec import CheckpointedException, _decoder, allow_modules, dumps, loads
from durability.errors import CodecError
from durability.model import Checkpoint

try:
    from langchain_core.documents import Document
    from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
    from langchain_core.prompts import ChatPromptTemplate, PromptTemplate
    from langgraph.types import Command, Interrupt, Overwrite, Send

    HAVE_LANGCHAIN = True
except ImportError:  # pragma: no cover - both are installed in the dev environment
    HAVE_LANGCHAIN = False

PARIS = ZoneInfo("Europe/Paris")
NEW_YORK = ZoneInfo("America/New_York")
CEST = timezone(timedelta(hours=2), "CEST")


# --- Types the tests store (module level, so their class paths resolve) ---------------------


class Color(enum.Enum):
    RED = "red"
    GREEN = "green"


class Priority(enum.IntEnum):
    LOW = 1
    HIGH = 2


class Mode(enum.StrEnum):
    FAST = "fast"
    SAFE = "safe"


class Perm(enum.Flag):
    R = 4
    W = 2
    X = 1


class Pair(enum.Enum):
    ORIGIN = (0, 0)


@dataclass(frozen=True)
class Point:
    x: int
    y: int


@dataclass(slots=True)
class SlotPoint:
    x: float
    y: float
    label: str = "p"


@dataclass
class Line:
    start: Point
    end: Point
    tags: list[str] = field(default_factory=list)


@dataclass
class Counter:
    name: str
    count: int = field(init=False, default=0)
    seen: set[str] = field(default_factory=set)


@dataclass
class Holder:
    values: dict[str, Any]


@dataclass
class Event:
    when: datetime
    amount: Decimal
    ids: tuple[uuid.UUID, ...] = ()


class Address(pydantic.BaseModel):
    city: str
    since: datetime


class Person(pydantic.BaseModel):
    name: str
    born: date
    address: Address
    seen_at: datetime | None = None
    tags: list[str] = []


class Loose(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="allow")
    a: int


class Aliased(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(populate_by_name=True)
    user_id: int = pydantic.Field(alias="userId")


class Stamp(pydantic.BaseModel):
    at: datetime


class AppError(Exception):
    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code
        self.when = datetime(2026, 1, 1, tzinfo=UTC)


class MyList(list[Any]):
    pass


class FancyDate(date):
    pass


class Weird(tzinfo):
    def utcoffset(self, dt: datetime | None) -> timedelta:
        return timedelta(hours=1)

    def dst(self, dt: datetime | None) -> timedelta:
        return timedelta(0)

    def tzname(self, dt: datetime | None) -> str:
        return "WEIRD"


if HAVE_LANGCHAIN:

    class MyHumanMessage(HumanMessage):
        pass


NotBound = dataclasses.make_dataclass("NotBound", [("a", int)])


# --- Comparing type and value, recursively --------------------------------------------------


def assert_same(got: Any, want: Any, where: str = "value") -> None:
    """Assert ``got`` equals ``want`` with the same type at every level."""
    assert type(got) is type(want), f"{where}: {type(got).__name__} != {type(want).__name__}"
    if isinstance(want, dict):
        assert len(got) == len(want), where
        for (gk, gv), (wk, wv) in zip(got.items(), want.items(), strict=True):
            assert_same(gk, wk, f"{where}.<key {wk!r}>")
            assert_same(gv, wv, f"{where}[{wk!r}]")
    elif isinstance(want, list | tuple):
        assert len(got) == len(want), where
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            assert_same(g, w, f"{where}[{i}]")
    elif isinstance(want, set | frozenset):
        assert {(type(x), x) for x in got} == {(type(x), x) for x in want}, where
    elif isinstance(want, Decimal | float):
        assert repr(got) == repr(want), where  # NaN, -0 and exponents included
    elif isinstance(want, datetime | time):
        assert_same_clock(got, want, where)
    elif isinstance(want, timezone):
        assert got == want, where
        assert got.tzname(None) == want.tzname(None), where
    elif isinstance(want, ZoneInfo):
        assert got.key == want.key, where
    elif isinstance(want, pydantic.BaseModel) and not is_langchain_object(want):
        for name in (*type(want).model_fields, *(want.model_extra or {})):
            assert_same(getattr(got, name), getattr(want, name), f"{where}.{name}")
    elif dataclasses.is_dataclass(want) and not type(want).__module__.startswith("langgraph"):
        for f in dataclasses.fields(want):
            assert_same(getattr(got, f.name), getattr(want, f.name), f"{where}.{f.name}")
    else:
        assert got == want, where


def is_langchain_object(value: Any) -> bool:
    module = sys.modules.get("langchain_core.load.serializable")
    return module is not None and isinstance(value, module.Serializable)


def assert_same_clock(got: datetime | time, want: datetime | time, where: str) -> None:
    assert got.replace(tzinfo=None) == want.replace(tzinfo=None), f"{where}: wall clock"
    assert got.fold == want.fold, f"{where}: fold"
    # pydantic's parsed offset is read back as the datetime.timezone it stands for.
    want_tz = timezone if type(want.tzinfo).__name__ == "TzInfo" else type(want.tzinfo)
    assert type(got.tzinfo) is want_tz, f"{where}: tzinfo type"
    if isinstance(want, datetime):
        assert isinstance(got, datetime)
        assert got.tzname() == want.tzname(), f"{where}: tzname"
        assert got.utcoffset() == want.utcoffset(), f"{where}: offset"
    else:
        assert got.tzname() == want.tzname(), f"{where}: tzname"
    if isinstance(want.tzinfo, ZoneInfo):
        assert got.tzinfo.key == want.tzinfo.key, f"{where}: zone key"  # type: ignore[union-attr]


def round_trip(value: Any) -> Any:
    return loads(dumps(value))


# --- What round-trips ------------------------------------------------------------------------


def nested_lists(depth: int) -> list[Any]:
    value: list[Any] = ["leaf"]
    for _ in range(depth):
        value = [value]
    return value


def nested_dicts(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {"leaf": 1}
    for i in range(depth):
        value = {f"k{i}": value}
    return value


def nested_tuples(depth: int) -> tuple[Any, ...]:
    value: tuple[Any, ...] = (1,)
    for _ in range(depth):
        value = (value, Decimal("1.5"))
    return value


def counted(counter: Counter, count: int) -> Counter:
    counter.count = count  # an init=False field, set after construction
    return counter


ROUND_TRIPS = [
    # JSON-native
    pytest.param(None, id="none"),
    pytest.param([True, False, 1, 1.0, 0, -0.0], id="bool-is-not-int"),
    pytest.param([1e308, 5e-324, -1.5], id="float-extremes"),
    pytest.param({"a": [1, {"b": None}], "c": "d"}, id="json-nested"),
    # datetime
    pytest.param(datetime(2026, 1, 2, 3, 4, 5, 678901), id="datetime-naive"),
    pytest.param(datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC), id="datetime-utc"),
    pytest.param(
        datetime(2026, 1, 2, tzinfo=timezone(timedelta(hours=-5, minutes=-30))), id="dt-fixed"
    ),
    pytest.param(datetime(2026, 6, 1, 12, tzinfo=CEST), id="datetime-fixed-named"),
    pytest.param(
        datetime(2026, 6, 1, tzinfo=timezone(timedelta(hours=1, microseconds=7))), id="dt-us"
    ),
    pytest.param(datetime(2026, 7, 1, 12, tzinfo=PARIS), id="datetime-zoneinfo"),
    pytest.param(datetime(2026, 10, 25, 2, 30, fold=1, tzinfo=PARIS), id="datetime-fold1-overlap"),
    pytest.param(datetime(2026, 10, 25, 2, 30, fold=0, tzinfo=PARIS), id="datetime-fold0-overlap"),
    pytest.param(datetime(2026, 3, 29, 2, 30, tzinfo=PARIS), id="datetime-in-dst-gap"),
    pytest.param(datetime(2026, 11, 1, 1, 30, fold=1), id="datetime-naive-fold1"),
    pytest.param(datetime.min, id="datetime-min"),
    pytest.param(datetime.max.replace(tzinfo=UTC), id="datetime-max-utc"),
    # date, time, timedelta
    pytest.param(date(2024, 2, 29), id="date"),
    pytest.param(date.min, id="date-min"),
    pytest.param(time(23, 59, 59, 999999), id="time-naive"),
    pytest.param(time(8, 0, tzinfo=timezone(timedelta(hours=9), "JST")), id="time-tz-named"),
    pytest.param(time(8, 0, tzinfo=UTC), id="time-utc"),
    pytest.param(time(8, 0, tzinfo=NEW_YORK), id="time-zoneinfo"),
    pytest.param(time(1, 30, fold=1), id="time-fold1"),
    pytest.param(timedelta(days=-3, seconds=5), id="timedelta-negative"),
    pytest.param(timedelta(microseconds=1), id="timedelta-micro"),
    pytest.param([timedelta.max, timedelta.min], id="timedelta-extremes"),
    # zones
    pytest.param(UTC, id="timezone-utc"),
    pytest.param(timezone(timedelta(hours=-3)), id="timezone-unnamed"),
    pytest.param(CEST, id="timezone-named"),
    pytest.param(PARIS, id="zoneinfo"),
    pytest.param(ZoneInfo("UTC"), id="zoneinfo-utc"),
    # Decimal, UUID
    pytest.param(Decimal("1.10"), id="decimal"),
    pytest.param(Decimal("NaN"), id="decimal-nan"),
    pytest.param(Decimal("sNaN"), id="decimal-snan"),
    pytest.param(Decimal("-0"), id="decimal-negative-zero"),
    pytest.param(Decimal("-Infinity"), id="decimal-infinity"),
    pytest.param(Decimal("1234567890123456789012345678"), id="decimal-28-digits"),
    pytest.param(Decimal("0.1234567890123456789012345678"), id="decimal-28-places"),
    pytest.param(Decimal("1E+30"), id="decimal-exponent"),
    pytest.param(uuid.UUID("12345678-1234-5678-1234-567812345678"), id="uuid"),
    pytest.param(uuid.UUID(int=0), id="uuid-nil"),
    # tuple, set, frozenset
    pytest.param((), id="tuple-empty"),
    pytest.param((1, (2, (3, ())), "x"), id="tuple-nested"),
    pytest.param([(1, 2), [3, (4,)]], id="tuple-in-list"),
    pytest.param(set(), id="set-empty"),
    pytest.param({3, 1, 2}, id="set-int"),
    pytest.param({"b", "a", "c"}, id="set-str"),
    pytest.param({(1, 2), "x", None, Color.RED}, id="set-mixed"),
    pytest.param(frozenset(), id="frozenset-empty"),
    pytest.param(frozenset({1, frozenset({2})}), id="frozenset-nested"),
    # dicts with keys JSON cannot hold
    pytest.param({1: "a", 2: "b"}, id="dict-int-keys"),
    pytest.param({(1, 2): "t", (): "empty"}, id="dict-tuple-keys"),
    pytest.param({None: 1}, id="dict-none-key"),
    pytest.param({True: "t", False: "f"}, id="dict-bool-keys"),
    pytest.param({1.5: "x", -0.0: "z"}, id="dict-float-keys"),
    pytest.param({"a": 1, 2: "b"}, id="dict-mixed-keys"),
    pytest.param({Color.RED: 1, Mode.FAST: 2}, id="dict-enum-keys"),
    pytest.param({date(2026, 1, 1): "new year"}, id="dict-date-keys"),
    pytest.param({"$t": "dt", "v": "not a date"}, id="dict-looks-like-envelope"),
    pytest.param({"a": {"$t": 1, "b": [{"$t": "map"}]}}, id="dict-envelope-key-nested"),
    # bytes
    pytest.param(b"", id="bytes-empty"),
    pytest.param(b"\x00\xff\xfe\x80", id="bytes-not-utf8"),
    pytest.param({"nested": [b"abc", (b"d",)]}, id="bytes-nested"),
    # enums
    pytest.param(Color.GREEN, id="enum"),
    pytest.param(Priority.HIGH, id="int-enum"),
    pytest.param(Mode.SAFE, id="str-enum"),
    pytest.param(Perm.R | Perm.W, id="flag-combined"),
    pytest.param(Pair.ORIGIN, id="enum-tuple-value"),
    pytest.param([Priority.LOW, 1, Mode.FAST, "fast"], id="enum-beside-its-value"),
    # dataclasses
    pytest.param(Point(1, 2), id="dataclass-frozen"),
    pytest.param(SlotPoint(1.5, -2.0), id="dataclass-slots"),
    pytest.param(Line(Point(0, 0), Point(3, 4), ["a"]), id="dataclass-nested"),
    pytest.param(counted(Counter("c", {"x"}), 5), id="dataclass-init-false"),
    pytest.param(
        Event(datetime(2026, 1, 1, tzinfo=PARIS), Decimal("9.99"), (uuid.UUID(int=5),)),
        id="dc-rich",
    ),
    pytest.param(
        Checkpoint(
            thread_id="t-1",
            state={"n": 1, "when": datetime(2026, 1, 1, tzinfo=UTC)},
            created_at=datetime(2026, 1, 1, tzinfo=UTC),
            iteration_counters={"a": 1},
        ),
        id="dataclass-model-checkpoint",
    ),
    # pydantic
    pytest.param(
        Person(
            name="Ada",
            born=date(1815, 12, 10),
            address=Address(city="London", since=datetime(2020, 1, 1, tzinfo=UTC)),
            seen_at=datetime(2026, 1, 1, 9, tzinfo=PARIS),
            tags=["x"],
        ),
        id="pydantic-nested",
    ),
    pytest.param(Stamp(at="2026-01-01T00:00:00+02:00"), id="pydantic-parsed-offset"),  # type: ignore[arg-type]
    pytest.param(Stamp(at="2026-01-01T00:00:00Z"), id="pydantic-parsed-utc"),  # type: ignore[arg-type]
    pytest.param(Loose(a=1, extra_field=[1, 2]), id="pydantic-extra"),  # type: ignore[call-arg]
    pytest.param(Aliased(userId=3), id="pydantic-alias"),
    # integers and strings
    pytest.param(2**70, id="int-2**70"),
    pytest.param(-(2**200), id="int-minus-2**200"),
    pytest.param(
        [2**63 - 1, 2**63, 2**64 - 1, 2**64, -(2**63), -(2**63) - 1], id="int-64-bit-edges"
    ),
    pytest.param(10**5000, id="int-beyond-str-digit-limit"),
    pytest.param("a\x00b", id="nul"),
    pytest.param({"k\x00": "\x00"}, id="nul-in-key"),
    pytest.param("\ud800", id="lone-surrogate"),
    pytest.param("x\udfffy\ud83d", id="lone-surrogates"),
    pytest.param("\ud83d\ude00", id="surrogate-pair-as-two-code-points"),
    pytest.param({"k\udc80": ["v\udc81", 2**80]}, id="surrogate-key-and-big-int"),
    pytest.param("😀 emoji ✓", id="emoji"),
    # shapes
    pytest.param([[], {}, (), "", {"a": []}], id="empty-containers"),
    pytest.param(nested_lists(200), id="deep-lists"),
    pytest.param(nested_dicts(200), id="deep-dicts"),
    pytest.param(nested_tuples(60), id="deep-tuples"),
    pytest.param({"blob": "x" * 5_000_000}, id="5mb-string"),
    pytest.param([{"i": i, "s": "y" * 90} for i in range(50_000)], id="5mb-list"),
]


@pytest.mark.parametrize("value", ROUND_TRIPS)
def test_round_trip(value: Any) -> None:
    assert_same(round_trip(value), value)


LANGCHAIN_ROUND_TRIPS = (
    [
        pytest.param(lambda: HumanMessage("hi", id="m1"), id="human-message"),
        pytest.param(
            lambda: AIMessage(
                content="calling",
                tool_calls=[{"name": "f", "args": {"a": 1}, "id": "c1"}],
                additional_kwargs={"x": [1, 2]},
            ),
            id="ai-message-tool-calls",
        ),
        pytest.param(lambda: SystemMessage("be brief"), id="system-message"),
        pytest.param(lambda: ToolMessage(content="42", tool_call_id="c1"), id="tool-message"),
        pytest.param(lambda: Document(page_content="p", metadata={"src": "a"}), id="document"),
        pytest.param(lambda: PromptTemplate.from_template("hi {name}"), id="prompt-template"),
        pytest.param(
            lambda: ChatPromptTemplate.from_messages([("system", "s {x}"), ("human", "{q}")]),
            id="chat-prompt-template",
        ),
        pytest.param(
            lambda: {"messages": [HumanMessage("a"), AIMessage("b")], "when": date(2026, 1, 1)},
            id="messages-in-state",
        ),
        pytest.param(lambda: Send("node", {"x": (1, 2)}), id="send"),
        pytest.param(lambda: Interrupt(value={"ask": "ok?"}, id="i-1"), id="interrupt"),
        pytest.param(
            lambda: Command(goto="n", update={"a": 1}, resume={"i-1": "yes"}), id="command"
        ),
        pytest.param(lambda: Command(goto=[Send("x", 1), Send("y", 2)]), id="command-sends"),
        pytest.param(lambda: Overwrite([1, 2]), id="overwrite"),
    ]
    if HAVE_LANGCHAIN
    else []
)


@pytest.mark.skipif(not HAVE_LANGCHAIN, reason="langchain_core/langgraph not installed")
@pytest.mark.parametrize("make", LANGCHAIN_ROUND_TRIPS)
def test_round_trip_langchain_and_langgraph(make: Any) -> None:
    value = make()
    assert_same(round_trip(value), value)


def test_pydantic_parsed_offset_comes_back_as_timezone() -> None:
    stamp = Stamp(at="2026-01-01T00:00:00+02:00")  # type: ignore[arg-type]
    parsed = stamp.at.tzinfo
    assert parsed is not None
    assert type(parsed).__name__ == "TzInfo"
    for back_tz in (round_trip(stamp).at.tzinfo, round_trip(parsed)):
        assert type(back_tz) is timezone
        assert back_tz.utcoffset(None) == timedelta(hours=2)
        assert back_tz.tzname(None) == parsed.tzname(None)


def test_zoneinfo_value_keeps_following_its_rules() -> None:
    back = round_trip(datetime(2026, 1, 15, 12, tzinfo=PARIS))
    assert back.tzinfo is PARIS
    assert back.utcoffset() == timedelta(hours=1)
    assert back.replace(month=7).utcoffset() == timedelta(hours=2)


def test_fold_selects_the_second_occurrence() -> None:
    back = round_trip(datetime(2026, 10, 25, 2, 30, fold=1, tzinfo=PARIS))
    assert back.fold == 1
    assert back.utcoffset() == timedelta(hours=1)


def test_utc_comes_back_as_the_utc_singleton() -> None:
    assert round_trip(UTC) is UTC
    assert round_trip(datetime(2026, 1, 1, tzinfo=UTC)).tzinfo is UTC


def test_envelope_key_in_user_dict_is_escaped() -> None:
    assert dumps({"$t": "dt"}) == '{"$t":"map","v":[["$t","dt"]]}'


def test_output_is_compact_text() -> None:
    assert dumps(None) == "null"
    assert dumps({"a": [1, 2.5, "x"]}) == '{"a":[1,2.5,"x"]}'
    assert isinstance(dumps(b"x"), str)


def test_loads_accepts_bytes() -> None:
    assert loads(dumps({"a": (1,)}).encode()) == {"a": (1,)}


def test_json_native_subtrees_are_not_copied() -> None:
    inner = {"a": [1, 2]}
    encoded = codec._FAST.encode({"x": inner, "y": (1,)})
    assert encoded["x"] is inner


def test_sets_are_written_deterministically() -> None:
    script = (
        "from durability.codec import dumps;"
        "print(dumps({'s': {'pear', 'apple', 'fig', 'kiwi'}, 'f': frozenset('abcdef')}))"
    )
    outputs = {
        subprocess.run(
            [sys.executable, "-c", script],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "PYTHONHASHSEED": seed},
        ).stdout
        for seed in ("1", "2", "3")
    }
    assert len(outputs) == 1


def test_dataclass_missing_field_uses_its_default() -> None:
    back = loads('{"$t":"dc","c":"test_codec:SlotPoint","f":{"x":1.0,"y":2.0}}')
    assert back == SlotPoint(1.0, 2.0, "p")
    back = loads('{"$t":"dc","c":"test_codec:Line","f":{"start":null,"end":null}}')
    assert back.tags == []


def test_read_back_does_not_call_init_or_validators() -> None:
    back = loads('{"$t":"pyd","c":"test_codec:Address","f":{"city":5,"since":null}}')
    assert back.city == 5  # model_construct: no validation


# --- Exceptions ------------------------------------------------------------------------------


def raised(make: Any) -> BaseException:
    try:
        make()
    except BaseException as exc:
        return exc
    raise AssertionError("nothing was raised")


def test_exception_plain() -> None:
    back = round_trip(ValueError("boom"))
    assert type(back) is CheckpointedException
    assert (back.type_name, back.message, back.kwargs, back.repr_kwargs, back.cause) == (
        "builtins:ValueError",
        "boom",
        {},
        (),
        None,
    )
    assert str(back) == "builtins:ValueError: boom"


def test_exception_with_attributes() -> None:
    back = round_trip(AppError("bad", code=42))
    assert back.type_name == "test_codec:AppError"
    assert back.kwargs == {"code": 42, "when": datetime(2026, 1, 1, tzinfo=UTC)}
    assert back.repr_kwargs == ()


def test_exception_attribute_json_cannot_hold_is_stored_as_repr() -> None:
    exc = RuntimeError("x")
    exc.handle = Weird()  # type: ignore[attr-defined]
    exc.ok = [1, 2]  # type: ignore[attr-defined]
    back = round_trip(exc)
    assert back.repr_kwargs == ("handle",)
    assert back.kwargs["handle"] == repr(exc.handle)  # type: ignore[attr-defined]
    assert back.kwargs["ok"] == [1, 2]


def test_exception_attribute_holding_an_exception_is_its_own_record() -> None:
    exc = RuntimeError("outer")
    exc.inner = KeyError("k")  # type: ignore[attr-defined]
    inner = round_trip(exc).kwargs["inner"]
    assert type(inner) is CheckpointedException
    assert (inner.type_name, inner.message) == ("builtins:KeyError", "'k'")


def test_exception_cause_chain() -> None:
    def chain() -> None:
        try:
            try:
                raise KeyError("root")
            except KeyError as root:
                raise OSError("middle") from root
        except OSError as middle:
            raise AppError("top", code=1) from middle

    back = round_trip(raised(chain))
    assert back.type_name == "test_codec:AppError"
    assert back.cause.type_name == "builtins:OSError"
    assert back.cause.cause.type_name == "builtins:KeyError"
    assert back.cause.cause.cause is None
    assert back.__cause__ is back.cause


def test_checkpointed_exception_encodes_to_the_identical_record() -> None:
    exc = raised(lambda: (_ for _ in ()).throw(AppError("x", 2)))
    exc.blob = object()  # type: ignore[attr-defined]
    exc.__cause__ = ValueError("why")
    state = {"error": exc, "at": datetime(2026, 1, 1, tzinfo=PARIS)}
    text = dumps(state)
    back = loads(text)
    assert dumps(back) == text
    assert loads(dumps(back)) == back


# --- What is refused -------------------------------------------------------------------------


def _paris_from_file() -> ZoneInfo:
    for root in ("/usr/share/zoneinfo", "/usr/lib/zoneinfo", "/etc/zoneinfo"):
        candidate = Path(root) / "Europe" / "Paris"
        if candidate.exists():
            with candidate.open("rb") as handle:
                return ZoneInfo.from_file(handle)
    pytest.skip("no zone file on this host")


def _local_dataclass() -> Any:
    @dataclass
    class Local:
        a: int

    return Local(1)


def _local_enum() -> Any:
    class LocalEnum(enum.Enum):
        A = 1

    return LocalEnum.A


def _local_model() -> Any:
    class LocalModel(pydantic.BaseModel):
        a: int

    return LocalModel(a=1)


def _cycle() -> Any:
    value: list[Any] = []
    value.append(value)
    return value


WRITE_REFUSALS = [
    pytest.param(object, "state", "convert it", id="object"),
    pytest.param(lambda: {"fn": round_trip}, "state.fn", "convert it", id="function"),
    pytest.param(lambda: [1, complex(1, 2)], "state[1]", "convert it", id="complex"),
    pytest.param(lambda: bytearray(b"x"), "state", "bytes(value)", id="bytearray"),
    pytest.param(lambda: {"x": OrderedDict(a=1)}, "state.x", "dict(value)", id="ordered-dict"),
    pytest.param(lambda: {"x": defaultdict(list)}, "state.x", "dict(value)", id="defaultdict"),
    pytest.param(lambda: (1, MyList()), "state[1]", "list(value)", id="list-subclass"),
    pytest.param(lambda: float("nan"), "state", "store None or a string", id="nan"),
    pytest.param(lambda: [float("inf")], "state[0]", "store None or a string", id="inf"),
    pytest.param(lambda: {"a": -math.inf}, "state.a", "store None or a string", id="-inf"),
    pytest.param(
        lambda: {"items": [0, Holder({"v": [1.0, float("nan")]})]},
        "state.items[1].values.v[1]",
        "store None or a string",
        id="nan-deep-in-dataclass",
    ),
    pytest.param(
        lambda: {"my key": {3: [float("inf")]}}, "state['my key'][3][0]", "None", id="inf-path"
    ),
    pytest.param(lambda: {"t": (1, {math.nan})}, "state.t[1][0]", "None", id="nan-in-set"),
    pytest.param(
        lambda: {"when": datetime(2026, 1, 1, tzinfo=Weird())}, "state.when", "astimezone", id="tz"
    ),
    pytest.param(lambda: [time(1, tzinfo=Weird())], "state[0]", "astimezone", id="time-weird-tz"),
    pytest.param(Weird, "state", "use one of those", id="bare-custom-tzinfo"),
    pytest.param(
        lambda: {"when": datetime(2026, 1, 1, tzinfo=_paris_from_file())},
        "state.when",
        "ZoneInfo(key)",
        id="zoneinfo-from-file",
    ),
    pytest.param(_paris_from_file, "state", "ZoneInfo(key)", id="bare-zoneinfo-from-file"),
    pytest.param(lambda: {"obj": _local_dataclass()}, "state.obj", "module level", id="local-dc"),
    pytest.param(lambda: [_local_enum()], "state[0]", "module level", id="local-enum"),
    pytest.param(_local_model, "state", "module level", id="local-pydantic-model"),
    pytest.param(lambda: NotBound(1), "state", "module level", id="path-resolves-elsewhere"),
    pytest.param(_cycle, "state", "break the cycle", id="cycle"),
    pytest.param(lambda: {"at": Stamp}, "state.at", "convert it", id="a-class"),
    pytest.param(lambda: [FancyDate(2026, 1, 1)], "state[0]", "plain date", id="date-subclass"),
    pytest.param(lambda: nested_lists(300), "state", "flatten it", id="too-deep"),
]
if HAVE_LANGCHAIN:
    WRITE_REFUSALS += [
        pytest.param(
            lambda: {"m": [MyHumanMessage("x")]},
            "state.m[0]",
            "use the LangChain class itself",
            id="langchain-message-subclass",
        ),
        pytest.param(
            lambda: HumanMessage("x", additional_kwargs={"at": datetime(2026, 1, 1)}),
            "state",
            "JSON-serializable values",
            id="langchain-unserializable-kwarg",
        ),
        pytest.param(
            lambda: Send("n", object()), "state.arg", "convert it", id="langgraph-send-bad-arg"
        ),
    ]


@pytest.mark.parametrize(("make", "path", "fix"), WRITE_REFUSALS)
def test_write_refusal(make: Any, path: str, fix: str) -> None:
    value = make()
    with pytest.raises(CodecError) as caught:
        dumps(value, path="state")
    message = str(caught.value)
    assert caught.value.path == path
    assert message.startswith(f"cannot encode {path}: ")
    assert fix in message
    assert len(message) < 600


@pytest.mark.skipif(not HAVE_LANGCHAIN, reason="needs the langgraph extra (LangChain)")
def test_a_message_given_its_id_while_being_written_is_written_not_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """LangGraph writes a checkpoint on a background thread while add_messages gives the same
    message its id: the value changed between the dump and the check is dumped again."""
    import langchain_core.load

    message = HumanMessage("Refund order 42")
    real_dumpd = langchain_core.load.dumpd
    calls = []

    def dumpd_then_assign_id(value: Any) -> Any:
        data = real_dumpd(value)
        calls.append(data)
        if len(calls) == 1:
            message.id = "assigned-meanwhile"  # what the graph's next step does
        return data

    monkeypatch.setattr(langchain_core.load, "dumpd", dumpd_then_assign_id)
    back = loads(dumps({"m": [message]}, path="state"), path="state")
    assert back["m"][0] == message
    assert back["m"][0].id == "assigned-meanwhile"


@pytest.mark.skipif(not HAVE_LANGCHAIN, reason="needs the langgraph extra (LangChain)")
def test_a_message_that_never_stops_changing_is_refused_by_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import langchain_core.load

    message = HumanMessage("Refund order 42")
    real_dumpd = langchain_core.load.dumpd

    def dumpd_then_change(value: Any) -> Any:
        data = real_dumpd(value)
        message.id = uuid.uuid4().hex
        return data

    monkeypatch.setattr(langchain_core.load, "dumpd", dumpd_then_change)
    with pytest.raises(CodecError, match="changed while it was being written, 3 times"):
        dumps(message, path="state")


READ_REFUSALS = [
    pytest.param('{"a":', "state", "not valid JSON", id="not-json"),
    pytest.param('{"a": {"$t": "nope"}}', "state.a", "upgrade durability", id="unknown-tag"),
    pytest.param('[{"$t": 5}]', "state[0]", "upgrade durability", id="non-string-tag"),
    pytest.param('{"a": [{"$t": "dt", "v": 5}]}', "state.a[0]", "restore", id="damaged-datetime"),
    pytest.param('{"$t": "uuid", "v": "zz"}', "state", "restore", id="damaged-uuid"),
    pytest.param('{"$t": "td", "v": [1, 2]}', "state", "restore", id="damaged-timedelta"),
    pytest.param('{"$t": "b", "v": "***"}', "state", "restore", id="damaged-base64"),
    pytest.param('{"$t": "tup"}', "state", "restore", id="envelope-missing-field"),
    pytest.param('{"$t": "map", "v": [[[1], 2]]}', "state", "restore", id="unhashable-map-key"),
    pytest.param(
        '{"when": {"$t": "dt", "v": "2026-01-01T00:00:00+00:00", "k": "Mars/Olympus_Mons"}}',
        "state.when",
        "tzdata",
        id="unknown-zone-key",
    ),
    pytest.param('{"$t": "zi", "k": "../../etc/passwd"}', "state", "tzdata", id="bad-zone-key"),
    pytest.param(
        '{"x": {"$t": "dc", "c": "no_such_module_for_codec_tests:Foo", "f": {}}}',
        "state.x",
        "allow_modules('no_such_module_for_codec_tests')",
        id="class-module-not-allowed",
    ),
    pytest.param(
        '{"$t": "dc", "c": "datetime:datetime", "f": {}}', "state", "is not a dataclass", id="kind"
    ),
    pytest.param(
        '{"$t": "enum", "c": "test_codec:Point", "v": 1}', "state", "is not a enum", id="not-enum"
    ),
    pytest.param(
        '{"$t": "pyd", "c": "test_codec:Point", "f": {}}', "state", "not a pydantic", id="not-pyd"
    ),
    pytest.param(
        '{"$t": "dc", "c": "test_codec:Gone", "f": {}}', "state", "renamed or removed", id="gone"
    ),
    pytest.param('{"$t": "dc", "c": "no-colon", "f": {}}', "state", "restore", id="bad-path"),
    pytest.param(
        '{"$t": "dc", "c": "test_codec:Point", "f": {"x": 1, "y": 2, "z": 3}}',
        "state.z",
        "migrate the stored data",
        id="dataclass-field-removed",
    ),
    pytest.param(
        '{"$t": "dc", "c": "test_codec:Point", "f": {"x": 1}}',
        "state",
        "give the field a default",
        id="dataclass-field-missing",
    ),
    pytest.param(
        '{"$t": "pyd", "c": "test_codec:Address", "f": {"city": "x", "since": null, "zip": 1}}',
        "state.zip",
        "migrate the stored data",
        id="pydantic-field-removed",
    ),
    pytest.param(
        '{"$t": "pyd", "c": "test_codec:Address", "f": {"city": "x"}}',
        "state",
        "give the field a default",
        id="pydantic-field-missing",
    ),
    pytest.param(
        '{"$t": "enum", "c": "test_codec:Color", "v": "blue"}', "state", "restore", id="no-member"
    ),
    pytest.param(
        '{"$t": "exc", "type": "builtins:ValueError", "message": 1}',
        "state",
        "restore",
        id="damaged-exception",
    ),
    pytest.param(
        '{"a": {"$t": "tup", "v": [1, {"$t": "d", "v": "2026-13-01"}]}}',
        "state.a[1]",
        "restore",
        id="damaged-inside-tuple",
    ),
    pytest.param(
        '{"$t": "lg", "c": "Pregel", "f": {}}', "state", "upgrade durability", id="lg-unknown"
    ),
    pytest.param(
        '{"$t": "lc", "v": {"lc": 1, "type": "constructor", '
        '"id": ["langchain", "schema", "messages", "Nope"], "kwargs": {}}}',
        "state",
        "LangChain's loader refused it",
        id="lc-not-revivable",
    ),
]


@pytest.mark.parametrize(("text", "path", "fix"), READ_REFUSALS)
def test_read_refusal(text: str, path: str, fix: str) -> None:
    with pytest.raises(CodecError) as caught:
        loads(text, path="state")
    message = str(caught.value)
    assert caught.value.path == path
    assert message.startswith(f"cannot read back {path}: ")
    assert fix in message
    assert len(message) < 600


# --- The allowlist ---------------------------------------------------------------------------


@pytest.fixture
def stored_foreign(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, str]:
    """A module on sys.path but not imported, and text holding one of its dataclasses."""
    name = "codec_foreign_fixture_mod"
    (tmp_path / f"{name}.py").write_text(
        "import dataclasses, enum\n"
        "@dataclasses.dataclass\n"
        "class Foreign:\n"
        "    a: int\n"
        "class Shade(enum.Enum):\n"
        "    DARK = 1\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv(codec.ENV_ALLOWED_MODULES, raising=False)
    monkeypatch.setattr(_decoder, "_allowed_prefixes", _decoder._allowed_prefixes)
    module = __import__(name)
    text = dumps({"x": [module.Foreign(1), module.Shade.DARK]})
    del sys.modules[name]
    yield name, text
    sys.modules.pop(name, None)


def test_unimported_module_is_not_imported_by_default(stored_foreign: tuple[str, str]) -> None:
    name, text = stored_foreign
    with pytest.raises(CodecError) as caught:
        loads(text, path="state")
    assert name not in sys.modules
    assert caught.value.path == "state.x[0]"
    message = str(caught.value)
    assert f"{name}:Foreign" in message
    assert f"allowed_modules=['{name}']" in message
    assert f"allow_modules('{name}')" in message
    assert codec.ENV_ALLOWED_MODULES in message


def test_allowed_by_argument(stored_foreign: tuple[str, str]) -> None:
    name, text = stored_foreign
    back = loads(text, allowed_modules=[name])
    assert type(back["x"][0]).__name__ == "Foreign"
    assert back["x"][0].a == 1
    assert back["x"][1].name == "DARK"
    assert name in sys.modules


def test_allowed_by_argument_as_a_single_string(stored_foreign: tuple[str, str]) -> None:
    name, text = stored_foreign
    assert loads(text, allowed_modules=name)["x"][0].a == 1


def test_allowed_process_wide(stored_foreign: tuple[str, str]) -> None:
    name, text = stored_foreign
    allow_modules(name)
    assert loads(text)["x"][0].a == 1


def test_allowed_by_environment(
    stored_foreign: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    name, text = stored_foreign
    monkeypatch.setenv(codec.ENV_ALLOWED_MODULES, f"other_pkg, {name}")
    assert loads(text)["x"][0].a == 1


def test_already_imported_module_needs_no_allowing(stored_foreign: tuple[str, str]) -> None:
    name, text = stored_foreign
    __import__(name)
    assert loads(text)["x"][0].a == 1


def test_prefix_allows_submodules_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(codec.ENV_ALLOWED_MODULES, raising=False)
    sub = '{"$t": "dc", "c": "nonexistent_codec_pkg.sub:Foo", "f": {}}'
    with pytest.raises(CodecError, match=r"importing 'nonexistent_codec_pkg\.sub' failed"):
        loads(sub, allowed_modules=["nonexistent_codec_pkg"])
    sibling = '{"$t": "dc", "c": "nonexistent_codec_pkgx:Foo", "f": {}}'
    with pytest.raises(CodecError, match="not allowed to be imported"):
        loads(sibling, allowed_modules=["nonexistent_codec_pkg"])


def test_allow_modules_refuses_a_bad_prefix() -> None:
    with pytest.raises(ValueError, match="not a dotted module name"):
        allow_modules("not a module")


def test_import_loads_no_optional_library() -> None:
    script = (
        "import sys, durability.codec;"
        "print(sorted(m for m in ('pydantic', 'langchain_core', 'langgraph', 'pandas')"
        " if m in sys.modules))"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"


# --- Property: arbitrary nested values round-trip -------------------------------------------

_texts = st.text(st.characters(exclude_categories=()), max_size=8) | st.sampled_from(
    ["$t", "v", "", "\x00"]
)
_zones = (
    st.none()
    | st.just(UTC)
    | st.sampled_from([PARIS, NEW_YORK, CEST])
    | st.builds(
        timezone, st.timedeltas(min_value=timedelta(hours=-23), max_value=timedelta(hours=23))
    )
)
_finite = st.floats(allow_nan=False, allow_infinity=False)
_hashables = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    _finite,
    _texts,
    st.binary(max_size=8),
    st.dates(),
    st.uuids(),
    st.decimals(allow_nan=False),
    st.sampled_from([*Color, *Priority, *Mode, Perm.R | Perm.X]),
    st.builds(Point, st.integers(), st.integers()),
    st.timedeltas(),
)
_leaves = st.one_of(
    _hashables,
    st.decimals(),
    st.datetimes(timezones=_zones),
    st.times(timezones=_zones),
    _zones,
    st.builds(SlotPoint, _finite, _finite, _texts),
    st.builds(Address, city=_texts, since=st.datetimes(timezones=_zones)),
)
_values = st.recursive(
    _leaves,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.lists(children, max_size=3).map(tuple),
        st.dictionaries(_texts, children, max_size=4),
        st.dictionaries(_hashables, children, max_size=3),
        st.sets(_hashables, max_size=4),
        st.frozensets(_hashables, max_size=3),
        st.builds(Holder, st.dictionaries(_texts, children, max_size=3)),
    ),
    max_leaves=20,
)


@settings(max_examples=200, deadline=None)
@given(_values)
def test_property_round_trip(value: Any) -> None:
    assert_same(round_trip(value), value)
