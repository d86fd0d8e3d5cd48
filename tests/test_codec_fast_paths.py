"""The codec's fast paths write and read exactly what its full walk does.

``dumps`` writes a value made only of JSON-native parts with orjson, checked in C
(``codec._orjson_text``, ``codec._is_json_native``) or, for a large text, by the walk, and
hands anything else to the walk (``codec._dumps_walked``); ``loads`` skips the revive walk
when the text cannot hold an envelope. These tests prove the shortcuts change nothing, on
arbitrary values built from everything a shortcut could get wrong.
"""

from __future__ import annotations

import dataclasses
import enum
import uuid
from datetime import UTC, datetime
from typing import Any

import orjson
import pydantic
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from durability import codec
from durability.codec import _decoder, dumps, loads
from durability.errors import CodecError


class Shade(enum.Enum):
    DARK = "dark"


class Level(enum.IntEnum):
    ONE = 1


class Kind(enum.StrEnum):
    PLAIN = "plain"


class Label(str):
    """A ``str`` subclass: refused by the codec, written as a plain string by orjson alone."""


class Count(int):
    """An ``int`` subclass: refused by the codec, written as a plain number by orjson alone."""


class Ratio(float):
    """A ``float`` subclass: refused by the codec."""


# Values of JSON's own types, with now and then one of the things orjson alone would write
# differently from the walk (or refuse): NaN and infinities, integers beyond 64 bits, lone
# surrogates, NUL, the envelope marker as a key or a text, subclasses, enum members, UUIDs,
# bytes, orjson's raw fragments, tuples and keys that are not str. One such part among plain
# ones is what a shortcut could miss, so most values hold none, one or two.
_clean_texts = st.text(st.characters(codec="utf-8", exclude_characters="$"))
_odd_texts = st.text(st.characters(exclude_categories=()), max_size=8) | st.sampled_from(
    ["$t", '"$t"', "a$tb", "$", "\x00", "\ud800", "x\udfffy"]
)
_clean_leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**64 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    _clean_texts,
)
_odd_leaves = st.one_of(
    st.sampled_from([float("nan"), float("inf"), float("-inf")]),
    st.sampled_from([2**64, -(2**63) - 1, 2**200]),
    _odd_texts,
    st.builds(Label, st.text(max_size=3)),
    st.builds(Count, st.integers(-3, 3)),
    st.builds(Ratio, st.floats(allow_nan=False)),
    st.sampled_from([Shade.DARK, Level.ONE, Kind.PLAIN]),
    st.uuids(),
    st.binary(max_size=4),
    st.just(orjson.Fragment(b"[1]")),
)
_odd_keys = _odd_texts | st.integers() | st.none() | st.booleans() | st.builds(Label, st.text())


def _mostly(clean: st.SearchStrategy[Any], odd: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.integers(0, 9).flatmap(lambda roll: odd if roll == 0 else clean)


_values = st.recursive(
    _mostly(_clean_leaves, _odd_leaves),
    lambda children: _mostly(
        st.lists(children, max_size=5) | st.dictionaries(_clean_texts, children, max_size=5),
        st.lists(children, max_size=3).map(tuple)
        | st.dictionaries(_odd_keys, children, min_size=1, max_size=3)
        | st.builds(
            lambda items, marked: {**items, "$t": marked},
            st.dictionaries(_clean_texts, children, max_size=3),
            children,
        ),
    ),
    max_leaves=25,
)


def _walked(value: Any) -> str | None:
    """The text the walk writes, or None where it refuses the value."""
    try:
        return codec._dumps_walked(value, "value")
    except CodecError:
        return None


def _fast(value: Any) -> str | None:
    """The text the fast path takes, or None where it steps aside for the walk."""
    data = codec._orjson_text(value)
    if data is None:
        return None
    text = data.decode()
    return text if codec._is_json_native(value, text) else None


# Texts above the limit are checked by the walk rather than ormsgpack; a limit of 0 sends
# every generated value down that branch.
_LIMITS = pytest.mark.parametrize(
    "limit", [codec._SCREEN_LIMIT, 0], ids=["ormsgpack-checks", "the-walk-checks"]
)


@_LIMITS
@settings(max_examples=300, deadline=None)
@given(value=_values)
def test_fast_write_is_the_walk_or_steps_aside(limit: int, value: Any) -> None:
    walked = _walked(value)
    fast = _fast(value)
    assert fast is None or fast == walked
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(codec, "_SCREEN_LIMIT", limit)
        if walked is None:
            with pytest.raises(CodecError):
                dumps(value)
        else:
            assert dumps(value) == walked


# JSON-native values whose packed form cannot hold a byte sequence that looks like a NaN
# (no floats, small ints, short strings and containers), so the fast path must take them all.
_plain_texts = st.text(st.characters(codec="utf-8", exclude_characters="$"), max_size=20)
_plain = st.recursive(
    st.none() | st.booleans() | st.integers(-32, 127) | _plain_texts,
    lambda children: (
        st.lists(children, max_size=10) | st.dictionaries(_plain_texts, children, max_size=10)
    ),
    max_leaves=30,
)


@settings(max_examples=200, deadline=None)
@given(st.lists(_plain, max_size=10) | st.dictionaries(_plain_texts, _plain, max_size=10))
def test_fast_write_takes_every_json_native_value(value: Any) -> None:
    assert _fast(value) == orjson.dumps(value).decode()


@pytest.mark.parametrize(
    "value",
    [
        pytest.param(
            {"x": [0.5, -0.0, 1e308, -1e308, 5e-324, 2.2250738585072014e-308]}, id="floats"
        ),
        pytest.param({"n": [2**64 - 1, -(2**63)]}, id="64-bit-edges"),
        pytest.param({"nul": "a\x00b", "k\x00": None}, id="nul"),
        pytest.param({"price": "$5", "$": "dollar", "t$": 1}, id="dollar-signs"),
    ],
)
def test_fast_write_takes_json_native_edge_values(value: Any) -> None:
    assert _fast(value) == _walked(value)


@pytest.mark.parametrize(
    "value",
    [
        pytest.param([float("nan")], id="nan"),
        pytest.param({"a": [1.0, float("-inf")]}, id="-inf"),
        pytest.param([(1, 2)], id="tuple"),
        pytest.param([2**64], id="beyond-64-bits"),
        pytest.param({1: "a"}, id="int-key"),
        pytest.param({"a": {"$t": "dt", "v": "x"}}, id="marker-key"),
        pytest.param([Label("x")], id="str-subclass"),
        pytest.param({Label("k"): 1}, id="str-subclass-key"),
        pytest.param([Level.ONE], id="int-enum"),
        pytest.param([uuid.UUID(int=1)], id="uuid"),
        pytest.param(["\ud800"], id="lone-surrogate"),
        pytest.param([b"x"], id="bytes"),
        pytest.param([orjson.Fragment(b"1")], id="fragment"),
    ],
)
def test_fast_write_steps_aside_for_what_orjson_would_change(value: Any) -> None:
    assert _fast(value) is None


@settings(max_examples=300, deadline=None)
@given(_values)
def test_fast_read_is_the_full_walk(value: Any) -> None:
    text = _walked(value)
    if text is None:
        return
    for stored in (text, text.encode()):
        assert loads(stored) == codec._decode(orjson.loads(stored), ())
        assert type(loads(stored)) is type(value)


def test_fast_read_skips_only_texts_without_the_marker() -> None:
    assert not codec._may_hold_envelope('{"price":"5"}')
    assert not codec._may_hold_envelope('{"price":"$5"}')
    assert codec._may_hold_envelope('{"a":{"$t":"d","v":"2026-01-01"}}')
    assert codec._may_hold_envelope(b'[{"$t":"d","v":"2026-01-01"}]')


# --- Pydantic models read back without model_construct's per-field loop --------------------


class Place(pydantic.BaseModel):
    city: str
    since: datetime


class Customer(pydantic.BaseModel):
    name: str
    place: Place
    tier: str = "standard"
    tags: list[str] = []


class Renamed(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(populate_by_name=True)
    user_id: int = pydantic.Field(alias="userId")


class AliasClaimsAField(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(populate_by_name=True)
    a: int = pydantic.Field(alias="b")
    b: int = 0


class ChoosesAnAlias(pydantic.BaseModel):
    a: int = pydantic.Field(validation_alias=pydantic.AliasChoices("x", "y"))


class KeepsExtras(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="allow")
    a: int


class HasPrivate(pydantic.BaseModel):
    a: int
    _seen: int = pydantic.PrivateAttr(default=3)


class PostInit(pydantic.BaseModel):
    a: int

    def model_post_init(self, context: Any) -> None:
        object.__setattr__(self, "__pydantic_fields_set__", {"a", "hooked"})


class Numbers(pydantic.RootModel[list[int]]):
    pass


def _constructed_alike(got: pydantic.BaseModel, want: pydantic.BaseModel) -> None:
    assert type(got) is type(want)
    assert list(got.__dict__.items()) == list(want.__dict__.items())  # order too
    assert got.model_fields_set == want.model_fields_set
    assert got.__pydantic_extra__ == want.__pydantic_extra__
    assert got.__pydantic_private__ == want.__pydantic_private__
    assert repr(got) == repr(want)


@pytest.mark.parametrize("model", [Customer, Place, Renamed])
def test_pydantic_models_built_directly(model: type[pydantic.BaseModel]) -> None:
    assert _decoder._pydantic_constructor(model, tuple(model.model_fields)) is not None


@pytest.mark.parametrize(
    "model", [AliasClaimsAField, ChoosesAnAlias, KeepsExtras, HasPrivate, PostInit, Numbers]
)
def test_pydantic_models_left_to_model_construct(model: type[pydantic.BaseModel]) -> None:
    assert _decoder._pydantic_constructor(model, tuple(model.model_fields)) is None


_when = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    "value",
    [
        pytest.param(Customer(name="Ada", place=Place(city="London", since=_when)), id="nested"),
        pytest.param(
            Customer(name="Ada", place=Place(city="x", since=_when), tags=["a"]), id="set"
        ),
        pytest.param(Renamed(userId=3), id="alias"),
        pytest.param(AliasClaimsAField(b=1), id="alias-claims-a-field"),
        pytest.param(KeepsExtras(a=1, more=[1]), id="extras"),  # type: ignore[call-arg]
        pytest.param(HasPrivate(a=1), id="private"),
        pytest.param(PostInit(a=1), id="post-init"),
        pytest.param(ChoosesAnAlias(x=1), id="alias-choices"),  # type: ignore[call-arg]
        pytest.param(Numbers([1, 2]), id="root-model"),
    ],
)
def test_pydantic_read_back_as_model_construct_builds_it(value: pydantic.BaseModel) -> None:
    got = loads(dumps(value))
    fields = {**value.__dict__, **(value.__pydantic_extra__ or {})}
    want = type(value).model_construct(**fields)
    _constructed_alike(got, want)


def test_pydantic_fields_stored_in_another_order_come_back_in_the_class_order() -> None:
    text = (
        '{"$t":"pyd","c":"test_codec_fast_paths:Customer","f":{"tags":[],"tier":"gold",'
        '"place":{"$t":"pyd","c":"test_codec_fast_paths:Place",'
        '"f":{"since":{"$t":"dt","v":"2026-01-01T00:00:00+00:00"},"city":"x"}},"name":"Ada"}}'
    )
    want = Customer.model_construct(
        name="Ada", place=Place.model_construct(city="x", since=_when), tier="gold", tags=[]
    )
    _constructed_alike(loads(text), want)
    _constructed_alike(loads(text).place, want.place)


def test_pydantic_fields_left_out_take_their_defaults() -> None:
    text = (
        '{"$t":"pyd","c":"test_codec_fast_paths:Customer","f":{"name":"Ada",'
        '"place":{"$t":"pyd","c":"test_codec_fast_paths:Place",'
        '"f":{"city":"x","since":{"$t":"dt","v":"2026-01-01T00:00:00+00:00"}}}}}'
    )
    got = loads(text)
    _constructed_alike(
        got,
        Customer.model_construct(name="Ada", place=Place.model_construct(city="x", since=_when)),
    )
    assert got.model_fields_set == {"name", "place"}


# --- Dataclass fields set as object.__setattr__ would set them -------------------------------


class Celsius:
    """A data descriptor as a dataclass field: reading back must go through its ``__set__``."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.slot = "_" + name

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        return 20.0 if obj is None else getattr(obj, self.slot)

    def __set__(self, obj: Any, value: float) -> None:
        object.__setattr__(obj, self.slot, round(float(value), 1))


@dataclasses.dataclass
class Reading:
    place: str
    temperature: Celsius = Celsius()  # the descriptor is the point


@dataclasses.dataclass
class Base:
    kind: str
    note: str = ""


@dataclasses.dataclass(slots=True)
class SlottedChild(Base):
    size: int = 0


@dataclasses.dataclass(frozen=True, slots=True)
class FrozenSlots:
    a: int
    b: list[int]


@dataclasses.dataclass(frozen=True)
class FrozenDict:
    a: int
    b: dict[str, int]


@pytest.mark.parametrize(
    "value",
    [
        pytest.param(Reading("kitchen", 21.5), id="descriptor-field"),
        pytest.param(SlottedChild("box", note="n", size=3), id="dict-base-slotted-child"),
        pytest.param(FrozenSlots(1, [2]), id="frozen-slots"),
        pytest.param(FrozenDict(1, {"x": 2}), id="frozen-dict"),
    ],
)
def test_dataclass_fields_read_back_as_object_setattr_sets_them(value: Any) -> None:
    got = loads(dumps(value))
    assert type(got) is type(value)
    assert got == value
    want = object.__new__(type(value))
    for field in dataclasses.fields(value):
        object.__setattr__(want, field.name, getattr(value, field.name))
    assert getattr(got, "__dict__", None) == getattr(want, "__dict__", None)


def test_dataclass_field_setters_pick_the_slot_the_dict_or_the_descriptor() -> None:
    assert _decoder._field_setter(Base, "kind") is _decoder._IN_DICT
    for name in ("kind", "size"):  # slots=True makes a slot of the inherited field too
        assert _decoder._field_setter(SlottedChild, name) == SlottedChild.__dict__[name].__set__
    descriptor = _decoder._field_setter(Reading, "temperature")
    assert descriptor is not _decoder._IN_DICT
    reading = Reading.__new__(Reading)
    descriptor(reading, 3.14)
    assert reading.temperature == 3.1
