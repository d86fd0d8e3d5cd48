"""The core contract's checks: every store passes them (checkpoints, pending writes, threads, deletes, the format generation)."""

from __future__ import annotations

import decimal
from datetime import timedelta
from functools import partial
from typing import Any

from durability.errors import (
    CheckpointConflict,
    CheckpointNotFound,
    CheckpointStoreFormatError,
    CodecError,
    InvalidIdError,
)
from durability.model import Checkpoint, PendingWrite
from durability.stores import Store
from durability.testing.suite import (
    START,
    StoreTarget,
    assert_writers_ordered,
    check,
    in_threads,
    raises,
    sample,
    seqs_of,
    write_for,
)
from durability.testing.values import HOSTILE_IDS, assert_same, rich_state


@check
def check_put_returns_stored_copy(target: StoreTarget) -> None:
    """put fills id, created_at, seq and size_bytes, and get returns the same checkpoint."""
    with target.open() as store:
        stored = store.put(
            sample("t-basic", 1, run_id="r1", runner="chain", agent_path="agent:helper")
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
        seq = store.put_returning_seq(sample("t-basic", 2, run_id="r1"))
        newest = store.latest("t-basic")
        assert newest is not None
        assert (newest.seq, newest.step) == (seq, 2), "put_returning_seq returns the row's seq"


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
        store.put(sample("t-refuse", 0))
        bad = [
            sample("t-refuse", 1),
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
            store.put(sample("t-order", n, created_at=same))
        latest = store.latest("t-order")
        assert latest is not None
        assert latest.step == 2
        store.put(sample("t-order", 3, created_at=START - timedelta(days=400)))  # a skewed clock
        latest = store.latest("t-order")
        assert latest is not None
        assert latest.step == 3
        seqs = seqs_of(store.history("t-order"))
        assert seqs == sorted(seqs)
        assert len(set(seqs)) == 4


@check
def check_threads_and_namespaces_are_isolated(target: StoreTarget) -> None:
    """Threads and namespaces never see each other's checkpoints or writes."""
    with target.open() as store:
        a = store.put(sample("iso-a", 1))
        store.put(sample("iso-b", 2))
        sub = store.put(sample("iso-a", 3, namespace="child:1"))
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
        store.put(sample("iso-b", 4, checkpoint_id=a.checkpoint_id))
        store.put(sample("iso-a", 5, checkpoint_id=a.checkpoint_id, namespace="child:2"))
        raises(
            CheckpointConflict,
            lambda: store.put(sample("iso-a", 6, checkpoint_id=a.checkpoint_id)),
            contains="already",
        )
        assert store.get("iso-a", a.checkpoint_id).step == 1


@check
def check_duplicate_in_batch_writes_nothing(target: StoreTarget) -> None:
    """A batch with a conflicting id is refused whole."""
    with target.open() as store:
        first = store.put(sample("t-batch", 0))
        batch = [sample("t-batch", 1), sample("t-batch", 2, checkpoint_id=first.checkpoint_id)]
        raises(CheckpointConflict, lambda: store.put_many(batch))
        assert [c.step for c in store.history("t-batch")] == [0]


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
def check_text_fields_every_store_can_hold(target: StoreTarget) -> None:
    """A NUL or a lone surrogate in a checkpoint's runner, node, status or interrupt reason is
    refused at put on every store, naming the field, and the thread is left as it was."""
    with target.open() as store:
        store.put(Checkpoint(thread_id="t-labels", node_id="first"))
        for field in ("node_id", "runner", "status", "agent_path", "interrupt_reason"):
            for bad, says in (("a\x00b", "NUL"), ("a\ud800b", "lone surrogate")):
                hostile = Checkpoint(thread_id="t-labels", **{field: bad})  # type: ignore[arg-type]
                err = raises(InvalidIdError, partial(store.put, hostile), contains=says)
                assert field in str(err)
                assert "cannot put a checkpoint" in str(err)
        assert [c.node_id for c in store.history("t-labels")] == ["first"]
        latest = store.latest("t-labels")
        assert latest is not None
        raises(
            InvalidIdError,
            lambda: store.set_status(
                "t-labels", latest.checkpoint_id, status="interrupted", interrupt_reason="why\x00"
            ),
            contains="interrupt_reason",
        )
        assert store.latest("t-labels") == latest


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
                store.put(sample("t-concurrent", n, node_id=f"w{worker}-{n}"))
                store.put(sample(f"t-own-{worker}", n))
        except BaseException as exc:  # collected and re-raised below
            errors.append(exc)

    in_threads(write, [(h, i) for i, h in enumerate(handles)])
    try:
        assert not errors, errors
        assert_writers_ordered(handles[0].history("t-concurrent"), "w", 4, 25)
        for worker in range(4):
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
    stored = store.put(sample("t-reopen", 1))
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
        stored = [store.put(sample("t-page", n)) for n in range(7)]
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
        store.put_many([sample(name) for name in sorted(names)])
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
        assert names <= set(seen)
        assert pages >= 6
        raises(InvalidIdError, lambda: store.threads(limit=0))


@check
def check_pending_writes_rules(target: StoreTarget) -> None:
    """Regular writes keep the first value; special channels (idx < 0) overwrite."""
    with target.open() as store:
        cp = store.put(sample("t-writes"))

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
    """delete_thread removes the checkpoints and writes of that thread only."""
    with target.open() as store:
        cps = [store.put(sample("t-del", n, namespace=ns)) for n, ns in enumerate(["", "", "sub"])]
        store.put_writes([write_for(cps[0])])
        store.put(sample("t-keep"))
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
            store.put(sample("t-ids", checkpoint_id=cid))
        store.put(sample("t-ids", checkpoint_id="z", namespace="child"))
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
        cp = store.put(sample("t-status"))
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
        a = store.put(sample("t-dc", 0, run_id="run-a"))
        b = store.put(sample("t-dc", 1, run_id="run-b"))
        c = store.put(sample("t-dc", 2, run_id="run-a", namespace="sub"))
        other = store.put(sample("t-dc-other", 0, run_id="run-a"))
        store.put_writes([write_for(a)])
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
def check_thousand_threads_listed_in_pages(target: StoreTarget) -> None:
    """1,000 threads are listed across pages, each exactly once, with their totals."""
    with target.open() as store:
        names = [f"many-{n:04d}" for n in range(1000)]
        for start in range(0, 1000, 250):
            store.put_many([sample(name, 1) for name in names[start : start + 250]])
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
        store.put(sample("t-gen"))
        store._write_generation(99)
    with target.open() as other:
        raises(
            CheckpointStoreFormatError,
            lambda: other.latest("t-gen"),
            contains="durability store reset",
        )
        other.reset()
        assert other.latest("t-gen") is None
        other.put(sample("t-gen"))
    with target.open() as fresh:
        assert fresh.latest("t-gen") is not None
