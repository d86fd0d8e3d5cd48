"""A conformance suite any checkpoint store can be run against.

Every check is a plain function taking a :class:`StoreTarget` and raising ``AssertionError``
on failure, so the suite runs under pytest (``tests/test_conformance.py`` parametrises it over
every provider) or from a script against a custom store::

    from durability.testing import CHECKS, StoreTarget

    target = StoreTarget("sqlite:////tmp/check.db", cross_process=True)
    for check in CHECKS:
        check(target)

A target names one isolated location (a file, a schema, a key prefix); each ``target.open()``
opens another handle on that same location, which is how reopening, several writers and
several claimers are exercised. Checks that need another process run only when
``cross_process`` is true.
"""

from __future__ import annotations

import datetime as dt
import decimal
import enum
import multiprocessing
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from durability.clock import FrozenClock
from durability.errors import (
    CheckpointConflict,
    CheckpointNotFound,
    CheckpointStoreFormatError,
    CodecError,
    DurabilityError,
    InvalidIdError,
    LeaseHeld,
    LeaseLost,
    ParkRefused,
)
from durability.model import Checkpoint, PendingWrite
from durability.settings import Settings, declare_retention
from durability.stores import Store, open_store

START = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)


@dataclass
class StoreTarget:
    """One isolated store location, and how to open handles on it."""

    url: str
    options: dict[str, Any] = field(default_factory=dict)
    cross_process: bool = False
    #: Drops every server connection the target's stores hold (``pg_terminate_backend``,
    #: ``CLIENT KILL``); ``None`` where there is no server to lose.
    kill_connections: Callable[[], object] | None = None

    def open(self, **overrides: Any) -> Store:
        """Open another handle on this location (``overrides`` win over ``options``)."""
        options = {**self.options, **overrides}
        options.setdefault("settings", Settings())
        return open_store(self.url, **options)


Check = Callable[[StoreTarget], None]
CHECKS: list[Check] = []


def check(fn: Check) -> Check:
    """Register a conformance check."""
    CHECKS.append(fn)
    return fn


def raises(
    kind: type[BaseException], fn: Callable[[], object], *, contains: str = ""
) -> BaseException:
    """Assert ``fn()`` raises ``kind`` whose message contains ``contains``; return it."""
    try:
        fn()
    except kind as exc:  # a plain helper: the suite runs without pytest too
        assert contains in str(exc), f"{kind.__name__} message {str(exc)!r} lacks {contains!r}"  # noqa: PT017
        return exc
    raise AssertionError(f"expected {kind.__name__}")


# ---------------------------------------------------------------------------- sample values


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


def _seqs(checkpoints: list[Checkpoint]) -> list[int]:
    """The stored checkpoints' seqs, asserting the store filled every one."""
    seqs = [c.seq for c in checkpoints]
    assert None not in seqs, "a stored checkpoint has no seq"
    return [s for s in seqs if s is not None]


def _cp(thread_id: str, n: int = 0, **fields: Any) -> Checkpoint:
    fields.setdefault("node_id", f"step-{n}")
    return Checkpoint(thread_id=thread_id, step=n, state={"n": n}, **fields)


# ---------------------------------------------------------------------------- checks


@check
def check_put_returns_stored_copy(target: StoreTarget) -> None:
    """put fills id, created_at, seq and size_bytes, and get returns the same checkpoint."""
    with target.open() as store:
        stored = store.put(
            _cp("t-basic", 1, run_id="r1", runner="chain", agent_path="agent:helper")
        )
        assert stored.checkpoint_id
        assert stored.seq is not None
        assert stored.size_bytes
        assert stored.created_at is not None
        assert stored.created_at.tzinfo is not None
        assert store.get("t-basic", stored.checkpoint_id) == stored
        assert store.latest("t-basic") == stored
        assert store.latest("t-missing") is None
        raises(CheckpointNotFound, lambda: store.get("t-basic", "nope"), contains="nope")
        raises(KeyError, lambda: store.get("t-missing", "nope"))


@check
def check_every_codec_type_round_trips(target: StoreTarget) -> None:
    """Every value the codec keeps comes back equal and of the same type."""
    with target.open() as store:
        state = rich_state()
        store.put(
            Checkpoint(
                thread_id="t-rich",
                state=state,
                node_input={"when": state["utc"]},
                metadata={"k": state["decimal"]},
            )
        )
        got = store.latest("t-rich")
        assert got is not None
        assert_same(state, got.state, "state")
        assert_same({"when": state["utc"]}, got.node_input, "node_input")
        assert_same({"k": state["decimal"]}, got.metadata, "metadata")


@check
def check_refused_value_leaves_store_unchanged(target: StoreTarget) -> None:
    """A value the codec refuses fails the put naming its path, and nothing is written."""
    with target.open() as store:
        store.put(_cp("t-refuse", 0))
        bad = [
            _cp("t-refuse", 1),
            Checkpoint(thread_id="t-refuse", state={"items": [1, {"x": float("nan")}]}),
        ]
        err = raises(CodecError, lambda: store.put_many(bad), contains="state.items[1].x")
        assert isinstance(err, ValueError)
        assert [c.step for c in store.history("t-refuse")] == [0]


@check
def check_latest_is_last_written(target: StoreTarget) -> None:
    """Latest is write order, even with equal or skewed timestamps."""
    with target.open() as store:
        same = START
        for n in range(3):
            store.put(_cp("t-order", n, created_at=same))
        latest = store.latest("t-order")
        assert latest is not None
        assert latest.step == 2
        store.put(_cp("t-order", 3, created_at=START - timedelta(days=400)))  # a skewed clock
        latest = store.latest("t-order")
        assert latest is not None
        assert latest.step == 3
        seqs = _seqs(store.history("t-order"))
        assert seqs == sorted(seqs)
        assert len(set(seqs)) == 4


@check
def check_threads_and_namespaces_are_isolated(target: StoreTarget) -> None:
    """Threads and namespaces never see each other's checkpoints or writes."""
    with target.open() as store:
        a = store.put(_cp("iso-a", 1))
        store.put(_cp("iso-b", 2))
        sub = store.put(_cp("iso-a", 3, namespace="child:1"))
        latest_root = store.latest("iso-a")
        assert latest_root is not None
        assert latest_root.checkpoint_id == a.checkpoint_id
        latest_sub = store.latest("iso-a", "child:1")
        assert latest_sub is not None
        assert latest_sub.checkpoint_id == sub.checkpoint_id
        assert [c.step for c in store.history("iso-a")] == [1]
        assert [c.step for c in store.history("iso-a", None)] == [1, 3]
        raises(CheckpointNotFound, lambda: store.get("iso-b", a.checkpoint_id))
        # The same checkpoint id may be reused in another thread or namespace.
        store.put(_cp("iso-b", 4, checkpoint_id=a.checkpoint_id))
        store.put(_cp("iso-a", 5, checkpoint_id=a.checkpoint_id, namespace="child:2"))
        raises(
            CheckpointConflict,
            lambda: store.put(_cp("iso-a", 6, checkpoint_id=a.checkpoint_id)),
            contains="already",
        )
        assert store.get("iso-a", a.checkpoint_id).step == 1


@check
def check_duplicate_in_batch_writes_nothing(target: StoreTarget) -> None:
    """A batch with a conflicting id is refused whole."""
    with target.open() as store:
        first = store.put(_cp("t-batch", 0))
        batch = [_cp("t-batch", 1), _cp("t-batch", 2, checkpoint_id=first.checkpoint_id)]
        raises(CheckpointConflict, lambda: store.put_many(batch))
        assert [c.step for c in store.history("t-batch")] == [0]


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


@check
def check_hostile_ids(target: StoreTarget) -> None:
    """Ids with unicode, line breaks, tabs, / ? % ' ; and 10 KB round-trip; a NUL or a lone surrogate in an id is refused clearly."""
    with target.open() as store:
        for i, hostile in enumerate(HOSTILE_IDS):
            stored = store.put(
                Checkpoint(
                    thread_id=hostile,
                    checkpoint_id=hostile,
                    namespace=hostile,
                    run_id=hostile,
                    state={"i": i},
                )
            )
            assert store.get(hostile, hostile, hostile) == stored
            assert store.has_thread(hostile)
        known = {r.thread_id for r in store.iter_threads()}
        assert set(HOSTILE_IDS) <= known
        err = raises(
            InvalidIdError, lambda: store.put(Checkpoint(thread_id="nul\x00id")), contains="NUL"
        )
        assert isinstance(err, ValueError)
        raises(InvalidIdError, lambda: store.put(Checkpoint(thread_id="")), contains="empty")
        raises(
            InvalidIdError,
            lambda: store.put(Checkpoint(thread_id="half \ud800 pair")),
            contains="lone surrogate",
        )
        assert not store.has_thread("nul-free")
        with_nul = store.put(
            Checkpoint(thread_id="nul-in-state", state={"text": "a\x00b", "key\x00": 1})
        )
        assert store.get("nul-in-state", with_nul.checkpoint_id).state == {
            "text": "a\x00b",
            "key\x00": 1,
        }


@check
def check_five_megabyte_state(target: StoreTarget) -> None:
    """A 5 MB state is stored and read back whole."""
    with target.open() as store:
        big = {"blob": "x" * (5 * 1024 * 1024), "items": list(range(1000))}
        stored = store.put(Checkpoint(thread_id="t-big", state=big))
        assert stored.size_bytes is not None
        assert stored.size_bytes > 5 * 1024 * 1024
        latest = store.latest("t-big")
        assert latest is not None
        assert latest.state == big


@check
def check_concurrent_writers(target: StoreTarget) -> None:
    """Writers on several handles and threads lose nothing; seqs stay unique and ordered."""
    handles = [target.open() for _ in range(4)]
    errors: list[BaseException] = []

    def write(store: Store, worker: int) -> None:
        try:
            for n in range(25):
                store.put(_cp("t-concurrent", n, node_id=f"w{worker}-{n}"))
                store.put(_cp(f"t-own-{worker}", n))
        except BaseException as exc:  # collected and re-raised below
            errors.append(exc)

    workers = [threading.Thread(target=write, args=(h, i)) for i, h in enumerate(handles)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    try:
        assert not errors, errors
        history = handles[0].history("t-concurrent")
        assert len(history) == 100
        seqs = _seqs(history)
        assert seqs == sorted(seqs)
        assert len(set(seqs)) == 100
        for worker in range(4):
            mine = [c.node_id for c in history if c.node_id.startswith(f"w{worker}-")]
            assert mine == [f"w{worker}-{n}" for n in range(25)], "one writer's order was not kept"
            assert len(handles[1].history(f"t-own-{worker}")) == 25
    finally:
        for h in handles:
            h.close()


@check
def check_setup_is_idempotent_and_reopen_keeps_data(target: StoreTarget) -> None:
    """Opening and setting up repeatedly is harmless; data survives close and reopen."""
    store = target.open()
    store.ready()
    store.ready()
    stored = store.put(_cp("t-reopen", 1))
    store.close()
    with target.open() as again:
        again.ready()
        assert again.get("t-reopen", stored.checkpoint_id) == stored
        with target.open() as third:
            assert third.latest("t-reopen") == stored


@check
def check_history_paging_and_has_thread(target: StoreTarget) -> None:
    """history pages by seq; has_thread and thread() report what is stored."""
    with target.open() as store:
        stored = [store.put(_cp("t-page", n)) for n in range(7)]
        first = store.history("t-page", limit=3)
        rest = store.history("t-page", after_seq=first[-1].seq)
        assert [c.step for c in first + rest] == list(range(7))
        assert store.has_thread("t-page")
        assert not store.has_thread("t-none")
        record = store.thread("t-page")
        assert record is not None
        assert record.checkpoints == 7
        assert record.size_bytes == sum(c.size_bytes or 0 for c in stored)
        assert record.newest_seq == stored[-1].seq
        assert store.thread("t-none") is None


@check
def check_threads_are_paged(target: StoreTarget) -> None:
    """threads() pages through every thread exactly once."""
    with target.open() as store:
        names = {f"paged-{n:03d}" for n in range(53)}
        store.put_many([_cp(name) for name in sorted(names)])
        store.record_run_start("paged-ledger-only", run_id="r", owner="test")
        seen: list[str] = []
        cursor = None
        pages = 0
        while True:
            page = store.threads(cursor=cursor, limit=10)
            seen += [r.thread_id for r in page.records]
            pages += 1
            if page.cursor is None:
                break
            cursor = page.cursor
        assert len(seen) == len(set(seen)), "a thread appeared on two pages"
        assert names | {"paged-ledger-only"} <= set(seen)
        assert pages >= 6
        raises(InvalidIdError, lambda: store.threads(limit=0))


@check
def check_pending_writes_rules(target: StoreTarget) -> None:
    """Regular writes keep the first value; special channels (idx < 0) overwrite."""
    with target.open() as store:
        cp = store.put(_cp("t-writes"))

        def w(task: str, idx: int, value: Any, channel: str = "messages") -> PendingWrite:
            return PendingWrite(
                thread_id="t-writes",
                checkpoint_id=cp.checkpoint_id,
                task_id=task,
                idx=idx,
                channel=channel,
                value=value,
            )

        store.put_writes(
            [
                w("task-1", 0, "first"),
                w("task-1", 1, {"when": START}),
                w("task-2", -3, "interrupt-1", "__interrupt__"),
            ]
        )
        store.put_writes(
            [w("task-1", 0, "second"), w("task-2", -3, "interrupt-2", "__interrupt__")]
        )
        got = {(x.task_id, x.idx): x.value for x in store.writes("t-writes", cp.checkpoint_id)}
        assert got == {
            ("task-1", 0): "first",
            ("task-1", 1): {"when": START},
            ("task-2", -3): "interrupt-2",
        }
        assert store.writes("t-writes", "other") == []
        assert store.writes("t-writes", cp.checkpoint_id, "child") == []


@check
def check_delete_thread_removes_everything(target: StoreTarget) -> None:
    """delete_thread removes checkpoints, writes and ledger records of that thread only."""
    with target.open() as store:
        cps = [store.put(_cp("t-del", n, namespace=ns)) for n, ns in enumerate(["", "", "sub"])]
        store.put_writes(
            [
                PendingWrite(
                    thread_id="t-del",
                    checkpoint_id=cps[0].checkpoint_id,
                    task_id="t",
                    idx=0,
                    channel="c",
                    value=1,
                )
            ]
        )
        store.record_run_start("t-del", run_id="r", owner="test")
        store.put(_cp("t-keep"))
        deleted = store.delete_thread("t-del")
        assert (deleted.checkpoints, deleted.writes) == (3, 1)
        assert not store.has_thread("t-del")
        assert store.thread("t-del") is None
        assert store.writes("t-del", cps[0].checkpoint_id) == []
        assert store.has_thread("t-keep")
        assert store.delete_thread("t-del").checkpoints == 0


@check
def check_newest_first_is_checkpoint_id_order(target: StoreTarget) -> None:
    """newest_first orders by checkpoint_id (greatest first), not write order; before and limit apply."""
    with target.open() as store:
        for cid in ["b", "d", "a", "c"]:
            store.put(_cp("t-ids", checkpoint_id=cid))
        store.put(_cp("t-ids", checkpoint_id="z", namespace="child"))
        assert [c.checkpoint_id for c in store.newest_first("t-ids", "")] == ["d", "c", "b", "a"]
        assert [c.checkpoint_id for c in store.newest_first("t-ids")] == ["z", "d", "c", "b", "a"]
        assert [c.checkpoint_id for c in store.newest_first("t-ids", "", before="c", limit=1)] == [
            "b"
        ]
        assert [c.checkpoint_id for c in store.newest_first("t-ids", "", limit=2)] == ["d", "c"]
        assert store.newest_first("t-none") == []
        keys = [("", "a"), ("", "d"), ("child", "z"), ("", "missing")]
        store.put_writes(
            [
                PendingWrite(
                    thread_id="t-ids", checkpoint_id="d", task_id="t", idx=i, channel="c", value=i
                )
                for i in range(2)
            ]
        )
        got = store.writes_of("t-ids", keys)
        assert [w.value for w in got[("", "d")]] == [0, 1]
        assert got[("", "a")] == []
        assert got[("", "missing")] == []


@check
def check_writes_of_many_checkpoints(target: StoreTarget) -> None:
    """writes_of returns each asked checkpoint's writes, in order, however many are asked."""
    with target.open() as store:
        ids = [f"c{i:04d}" for i in range(603)]
        with_writes = {ids[0], ids[2], ids[499], ids[500], ids[501], ids[-1]}
        store.put_writes(
            [
                PendingWrite(
                    thread_id="t-many",
                    checkpoint_id=cid,
                    task_id="t",
                    idx=i,
                    channel="c",
                    value=cid,
                )
                for cid in sorted(with_writes)
                for i in range(2)
            ]
        )
        store.put_writes(
            [
                PendingWrite(
                    thread_id="t-other", checkpoint_id=ids[0], task_id="t", idx=0, channel="c"
                )
            ]
        )
        for asked in (ids[:3], ids):  # an odd count, and more than one statement's worth
            got = store.writes_of("t-many", [("", cid) for cid in asked])
            assert sorted(got) == [("", cid) for cid in asked]
            for cid in asked:
                expected = [cid, cid] if cid in with_writes else []
                assert [w.value for w in got[("", cid)]] == expected, cid
                assert [w.idx for w in got[("", cid)]] == list(range(len(expected)))


@check
def check_set_status(target: StoreTarget) -> None:
    """set_status changes status and interrupt fields of one stored checkpoint, keeping size_bytes true."""
    with target.open() as store:
        cp = store.put(_cp("t-status"))
        assert store.set_status(
            "t-status",
            cp.checkpoint_id,
            status="interrupted",
            interrupt_reason="ask",
            interrupt_context={"q": decimal.Decimal("1.5")},
        )
        got = store.get("t-status", cp.checkpoint_id)
        assert (got.status, got.interrupt_reason, got.interrupt_context) == (
            "interrupted",
            "ask",
            {"q": decimal.Decimal("1.5")},
        )
        assert got.size_bytes == (cp.size_bytes or 0) - 2 + len('{"q":{"$t":"dec","v":"1.5"}}')
        assert store.set_status("t-status", cp.checkpoint_id, status="completed")
        back = store.get("t-status", cp.checkpoint_id)
        assert (back.status, back.interrupt_reason, back.interrupt_context, back.size_bytes) == (
            "completed",
            None,
            {},
            cp.size_bytes,
        )
        assert not store.set_status("t-status", "missing", status="completed")
        assert not store.set_status("t-status", cp.checkpoint_id, "other-ns", status="completed")


@check
def check_delete_checkpoints_and_runs(target: StoreTarget) -> None:
    """delete_checkpoints removes only the named checkpoints and their writes; runs are found by run_id."""
    with target.open() as store:
        a = store.put(_cp("t-dc", 0, run_id="run-a"))
        b = store.put(_cp("t-dc", 1, run_id="run-b"))
        c = store.put(_cp("t-dc", 2, run_id="run-a", namespace="sub"))
        other = store.put(_cp("t-dc-other", 0, run_id="run-a"))
        store.put_writes(
            [
                PendingWrite(
                    thread_id="t-dc",
                    checkpoint_id=a.checkpoint_id,
                    task_id="t",
                    idx=0,
                    channel="c",
                    value=1,
                )
            ]
        )
        found = store.checkpoints_of_runs(["run-a", "run-a", "run-none"])
        assert sorted(found) == sorted(
            [
                ("t-dc", "", a.checkpoint_id),
                ("t-dc", "sub", c.checkpoint_id),
                ("t-dc-other", "", other.checkpoint_id),
            ]
        )
        raises(InvalidIdError, lambda: store.checkpoints_of_runs([""]), contains="empty")
        deleted = store.delete_checkpoints(
            "t-dc", [("", a.checkpoint_id), ("sub", c.checkpoint_id), ("", "missing")]
        )
        assert (deleted.checkpoints, deleted.writes) == (2, 1)
        assert [x.checkpoint_id for x in store.history("t-dc", None)] == [b.checkpoint_id]
        assert store.writes("t-dc", a.checkpoint_id) == []
        assert store.has_thread("t-dc-other")
        assert store.delete_checkpoints("t-dc", []) == store.delete_checkpoints(
            "t-none", [("", "x")]
        )


@check
def check_ledger_marks(target: StoreTarget) -> None:
    """Run starts record owner and declared retention; a mark's due time is fixed at the mark."""
    clock = FrozenClock(START)
    settings = Settings(waiting_retention=timedelta(days=30), finished_retention=timedelta(days=7))
    with target.open(clock=clock, settings=settings) as store:
        declared = declare_retention(settings, waiting="10d", finished="2d")
        record = store.record_run_start(
            "t-ledger", run_id="run-1", owner="flow:f1", retention=declared
        )
        assert (record.owner, record.run_id, record.declared_waiting, record.declared_finished) == (
            "flow:f1",
            "run-1",
            timedelta(days=10),
            timedelta(days=2),
        )
        assert record.started_at == START
        assert not record.finished
        marked = store.mark_finished("t-ledger")
        assert marked.finished_at == START
        assert marked.due_at == START + timedelta(days=2)
        store.unmark_finished("t-ledger")
        unmarked = store.thread("t-ledger")
        assert unmarked is not None
        assert not unmarked.finished
        assert unmarked.due_at is None
        # A later run replaces the declared retention; an undeclared finished value is the
        # platform's capped at the thread's waiting one.
        store.record_run_start(
            "t-ledger",
            run_id="run-2",
            owner="flow:f1",
            retention=declare_retention(settings, waiting="3d"),
        )
        clock.advance(timedelta(hours=1))
        again = store.mark_finished("t-ledger")
        assert again.due_at == START + timedelta(hours=1) + timedelta(days=3)
        # Changing the platform's finished value later moves only new marks.
        store.record_run_start("t-plain", run_id="r", owner="agent")
        plain = store.mark_finished("t-plain")
        assert plain.due_at == clock() + timedelta(days=7)
    with target.open(
        clock=clock, settings=settings.update(finished_retention=timedelta(days=1))
    ) as later:
        kept = later.thread("t-plain")
        assert kept is not None
        assert kept.due_at == plain.due_at
        later.record_run_start("t-plain-2", run_id="r", owner="agent")
        assert later.mark_finished("t-plain-2").due_at == clock() + timedelta(days=1)


@check
def check_leases(target: StoreTarget) -> None:
    """A live lease keeps other holders out; an expired one can be taken over; renew detects loss."""
    clock = FrozenClock(START)
    with target.open(clock=clock) as store:
        lease = store.acquire_lease("t-lease", "worker-a", timedelta(minutes=1), run_id="run-1")
        assert lease.holder == "worker-a"
        assert lease.expires_at == START + timedelta(minutes=1)
        raises(
            LeaseHeld,
            lambda: store.acquire_lease("t-lease", "worker-b", timedelta(minutes=1)),
            contains="worker-a",
        )
        clock.advance(timedelta(seconds=30))
        renewed = store.renew_lease("t-lease", "worker-a", timedelta(minutes=1))
        assert renewed.expires_at == clock() + timedelta(minutes=1)
        record = store.thread("t-lease")
        assert record is not None
        assert record.lease is not None
        assert record.lease.holder == "worker-a"
        clock.advance(timedelta(minutes=2))
        taken = store.acquire_lease("t-lease", "worker-b", timedelta(minutes=1))
        assert taken.holder == "worker-b"
        raises(
            LeaseLost,
            lambda: store.renew_lease("t-lease", "worker-a", timedelta(minutes=1)),
            contains="worker-b",
        )
        store.release_lease("t-lease", "worker-a")  # not theirs: a no-op
        still = store.thread("t-lease")
        assert still is not None
        assert still.lease is not None
        assert still.lease.holder == "worker-b"
        store.release_lease("t-lease", "worker-b")
        released = store.thread("t-lease")
        assert released is not None
        assert released.lease is None
        raises(InvalidIdError, lambda: store.acquire_lease("t-lease", "w", timedelta(0)))


@check
def check_park_rules(target: StoreTarget) -> None:
    """Parks are refused where the store cannot hold one, without a deadline, or past the horizon."""
    clock = FrozenClock(START)
    settings = Settings(waiting_retention=timedelta(days=30))
    with target.open(clock=clock, settings=settings) as store:
        ask = Checkpoint(thread_id="t-park", node_id="approve", run_id="run-1", state={"draft": 1})
        if not store.capabilities.can_park:
            raises(
                ParkRefused,
                lambda: store.park(ask, deadline=START + timedelta(days=1)),
                contains="cannot hold a parked run",
            )
            assert not store.has_thread("t-park")
            assert store.parks() == []
            return
        raises(ParkRefused, lambda: store.park(ask, deadline=None), contains="no deadline")
        raises(
            ParkRefused,
            lambda: store.park(ask, deadline=START + timedelta(days=31)),
            contains="past",
        )
        store.record_run_start(
            "t-park-declared",
            run_id="r",
            owner="o",
            retention=declare_retention(settings, waiting="1d"),
        )
        short = ask.evolve(thread_id="t-park-declared")
        raises(
            ParkRefused,
            lambda: store.park(short, deadline=START + timedelta(days=2)),
            contains="1d",
        )
        assert not store.has_thread("t-park")
        assert not store.has_thread("t-park-declared")
        cp, park = store.park(
            ask,
            deadline=START + timedelta(days=3),
            reason="needs approval",
            context={"amount": decimal.Decimal("12.50")},
        )
        assert cp.status == "interrupted"
        assert cp.interrupt_reason == "needs approval"
        assert park.checkpoint_id == cp.checkpoint_id
        assert park.deadline == START + timedelta(days=3)
        assert store.get_park("t-park") == park
        assert store.parks() == [park]
        raises(
            ParkRefused,
            lambda: store.park(ask.evolve(checkpoint_id=""), deadline=START + timedelta(days=1)),
            contains="already has a pending park",
        )
        assert len(store.history("t-park")) == 1
        assert store.claim_park("t-park") == park
        assert store.claim_park("t-park") is None
        assert store.get_park("t-park") is None


@check
def check_park_claim_has_one_winner(target: StoreTarget) -> None:
    """Of many concurrent claimers on several handles, exactly one gets the park."""
    with target.open() as store:
        if not store.capabilities.can_park:
            return
        store.park(Checkpoint(thread_id="t-race"), deadline=store.clock() + timedelta(days=1))
    handles = [target.open() for _ in range(4)]
    results: list[object] = []
    barrier = threading.Barrier(8)

    def claim(store: Store) -> None:
        barrier.wait()
        results.append(store.claim_park("t-race"))

    workers = [threading.Thread(target=claim, args=(handles[i % 4],)) for i in range(8)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    for h in handles:
        h.close()
    assert sum(r is not None for r in results) == 1, results


def _processes() -> Any:
    """How the cross-process checks start processes: a fork server where the platform has one
    (each child is forked from a clean process that already imported the stores), else spawn."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(
        ["durability.testing", "durability.stores.sql", "durability.stores.redis"]
    )
    return ctx


def _claim_in_process(
    url: str, options: dict[str, Any], thread_id: str, start: Any, out: Any
) -> None:
    options = {k: v for k, v in options.items() if k not in ("clock",)}
    with open_store(url, settings=Settings(), **options) as store:
        start.wait()
        out.put(store.claim_park(thread_id) is not None)


@check
def check_park_claim_across_processes(target: StoreTarget) -> None:
    """Two (and more) processes race for one park: exactly one wins."""
    if not target.cross_process:
        return
    with target.open() as store:
        if not store.capabilities.can_park:
            return
        store.park(Checkpoint(thread_id="t-xrace"), deadline=store.clock() + timedelta(days=1))
    ctx = _processes()
    start = ctx.Event()
    out = ctx.Queue()
    procs = [
        ctx.Process(
            target=_claim_in_process, args=(target.url, target.options, "t-xrace", start, out)
        )
        for _ in range(3)
    ]
    for p in procs:
        p.start()
    start.set()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0, f"claimer exited with {p.exitcode}"
    wins = [out.get(timeout=10) for _ in procs]
    assert sum(wins) == 1, wins


@check
def check_outbox(target: StoreTarget) -> None:
    """A replicating store keeps new rows pending until marked synced or quarantined."""
    clock = FrozenClock(START)
    with target.open(clock=clock) as store:
        if not store.capabilities.replicates:
            raises(DurabilityError, lambda: store.fetch_unsynced())
            assert not store.replicates
            return
        rows = [store.put(_cp("t-out", n, project_id="p1" if n % 2 else "p2")) for n in range(6)]
        store.put(_cp("t-out-restored", 0), synced=True)
        pending = store.fetch_unsynced(limit=100)
        assert [c.seq for c in pending] == [c.seq for c in rows], (
            "oldest first, restored rows excluded"
        )
        assert [c.step for c in store.fetch_unsynced(limit=100, project_id="p1")] == [1, 3, 5]
        assert len(store.fetch_unsynced(limit=2)) == 2
        one_row = rows[0].size_bytes or 0
        assert len(store.fetch_unsynced(limit=100, max_bytes=one_row)) == 1
        assert len(store.fetch_unsynced(limit=100, max_bytes=1)) == 1, "the first row always fits"
        in_flight = [(c.thread_id, c.seq or 0) for c in rows[:2]]
        assert [c.seq for c in store.fetch_unsynced_encoded(limit=2, exclude=in_flight)] == [
            c.seq for c in rows[2:4]
        ], "exclude skips the rows in flight, and the limit counts the rows returned"
        keys = [(c.thread_id, c.seq or 0) for c in rows]
        store.record_attempt(keys[:2], "HTTP 503")
        clock.advance(timedelta(minutes=5))
        store.mark_synced(keys[:2])
        store.mark_synced(keys[:2])  # idempotent
        store.mark_quarantined({keys[2]: "HTTP 413 from /checkpoints/ingest: too big"})
        # A row is (thread, seq): seq is unique per thread, and per store only on some providers.
        entries = {(e.thread_id, e.seq): e for e in store.outbox()}
        assert entries[keys[0]].state == "synced"
        assert entries[keys[0]].attempts == 1
        assert entries[keys[0]].last_error == "HTTP 503"
        assert entries[keys[0]].synced_at == clock()
        assert entries[keys[2]].state == "quarantined"
        assert entries[keys[2]].quarantined
        assert entries[keys[2]].sync_error == "HTTP 413 from /checkpoints/ingest: too big"
        restored = [e for e in entries.values() if e.thread_id == "t-out-restored"]
        assert [e.state for e in restored] == ["synced"], "a row written as synced is never pending"
        assert [e.seq for e in store.outbox(state="quarantined")] == [keys[2][1]]
        assert len(store.outbox(state="pending")) == 3
        assert len(store.outbox(state="pending", project_id="p1")) == 2
        assert [c.seq for c in store.fetch_unsynced()] == [k[1] for k in keys[3:]]
        assert store.release() == 1
        assert store.outbox(state="quarantined") == []
        assert [c.seq for c in store.fetch_unsynced()] == [k[1] for k in keys[2:]]
        store.record_attempt(keys[3:4], "HTTP 503")
        store.mark_sent(keys[3:4])  # the drain's ack: one more attempt, no error, synced
        sent = {(e.thread_id, e.seq): e for e in store.outbox()}[keys[3]]
        assert (sent.state, sent.attempts, sent.last_error) == ("synced", 2, None)
        assert sent.synced_at == clock()
        raises(InvalidIdError, lambda: store.outbox(state="lost"))
        assert not store.replicates
        store.record_connection("p1", "http://plane.example")
        assert store.replicates
        assert [(c.project_id, c.open) for c in store.connections()] == [("p1", True)]
        clock.advance(timedelta(seconds=1))
        store.record_disconnection("p1")
        assert store.replicates, "a disconnect keeps the record: the store still replicates"
        [closed] = store.connections()
        assert (closed.target, closed.disconnected_at) == ("http://plane.example", clock())
        store.record_disconnection("p-unknown")
        assert [c.project_id for c in store.connections()] == ["p1"]
        store.forget_connection("p1")
        assert not store.replicates


def _write_in_process(
    url: str, options: dict[str, Any], thread_id: str, worker: int, count: int, start: Any, out: Any
) -> None:
    options = {k: v for k, v in options.items() if k not in ("clock",)}
    try:
        with open_store(url, settings=Settings(), **options) as store:
            start.wait()
            for n in range(count):
                store.put(_cp(thread_id, n, node_id=f"p{worker}-{n}"))
    except BaseException as exc:
        out.put(f"writer {worker}: {exc!r}")
        raise
    out.put(None)


@check
def check_two_processes_write_one_thread(target: StoreTarget) -> None:
    """Two processes writing one thread lose nothing; seqs stay unique and each writer's order holds."""
    if not target.cross_process:
        return
    ctx = _processes()
    start, out = ctx.Event(), ctx.Queue()
    procs = [
        ctx.Process(
            target=_write_in_process,
            args=(target.url, target.options, "t-two-procs", w, 40, start, out),
        )
        for w in range(2)
    ]
    for p in procs:
        p.start()
    start.set()
    for p in procs:
        p.join(120)
    errors = [out.get(timeout=10) for _ in procs]
    assert errors == [None, None], errors
    assert all(p.exitcode == 0 for p in procs), [p.exitcode for p in procs]
    with target.open() as store:
        history = store.history("t-two-procs")
        assert len(history) == 80
        seqs = _seqs(history)
        assert seqs == sorted(seqs)
        assert len(set(seqs)) == 80
        for w in range(2):
            mine = [c.node_id for c in history if c.node_id.startswith(f"p{w}-")]
            assert mine == [f"p{w}-{n}" for n in range(40)], "a writer's order was not kept"
        latest = store.latest("t-two-procs")
        assert latest is not None
        assert latest.seq == seqs[-1]


@check
def check_reconnects_after_lost_connections(target: StoreTarget) -> None:
    """The server drops the store's connections between writes: it reconnects and loses nothing acknowledged."""
    if target.kill_connections is None:
        return
    clock = FrozenClock(START)
    with target.open(clock=clock) as store:
        acked = [store.put(_cp("t-lost", n)) for n in range(3)]
        for n in range(3, 6):
            killed = target.kill_connections()
            assert killed, "the hook found none of the store's connections to drop"
            acked.append(store.put(_cp("t-lost", n)))
            target.kill_connections()
            latest = store.latest("t-lost")
            assert latest is not None
            assert latest.checkpoint_id == acked[-1].checkpoint_id
        target.kill_connections()
        store.put_writes(
            [
                PendingWrite(
                    thread_id="t-lost",
                    checkpoint_id=acked[-1].checkpoint_id,
                    task_id="t",
                    idx=0,
                    channel="c",
                    value=n,
                )
            ]
        )
        target.kill_connections()
        record = store.record_run_start("t-lost", run_id="r", owner="o")
        assert record.checkpoints == 6
        target.kill_connections()
        assert store.acquire_lease("t-lost", "w", timedelta(minutes=1)).holder == "w"
    with target.open() as again:
        assert [c.checkpoint_id for c in again.history("t-lost")] == [
            c.checkpoint_id for c in acked
        ]
        assert [w.value for w in again.writes("t-lost", acked[-1].checkpoint_id)] == [5]


@check
def check_thousand_threads_listed_in_pages(target: StoreTarget) -> None:
    """1,000 threads are listed across pages, each exactly once, with their totals."""
    with target.open() as store:
        names = [f"many-{n:04d}" for n in range(1000)]
        for start in range(0, 1000, 250):
            store.put_many([_cp(name, 1) for name in names[start : start + 250]])
        seen: list[str] = []
        cursor = None
        pages = 0
        while True:
            page = store.threads(cursor=cursor, limit=128)
            assert len(page.records) <= 128
            seen += [r.thread_id for r in page.records if r.thread_id.startswith("many-")]
            assert all(r.checkpoints == 1 for r in page.records)
            pages += 1
            if page.cursor is None:
                break
            cursor = page.cursor
        assert len(seen) == len(set(seen)) == 1000
        assert set(seen) == set(names)
        assert pages >= 8
        assert (
            sum(1 for r in store.iter_threads(page_size=333) if r.thread_id.startswith("many-"))
            == 1000
        )


@check
def check_format_generation(target: StoreTarget) -> None:
    """A store written in another format generation is refused until it is reset."""
    with target.open() as store:
        store.put(_cp("t-gen"))
        store._write_generation(99)
    with target.open() as other:
        raises(
            CheckpointStoreFormatError,
            lambda: other.latest("t-gen"),
            contains="durability store reset",
        )
        other.reset()
        assert other.latest("t-gen") is None
        other.put(_cp("t-gen"))
    with target.open() as fresh:
        assert fresh.latest("t-gen") is not None


__all__ = ["CHECKS", "START", "StoreTarget", "assert_same", "check", "raises", "rich_state"]
