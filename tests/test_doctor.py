"""``durability doctor`` (issue 20): every break injected by hand on every provider is found and
named and, where safe, repaired; what the seeds intend is not reported; the demo store is
whole (no error, no warning). Other tools' stores: tests/test_doctor_foreign.py.

Each test runs on a real store of each provider (memory, sqlite, postgres, redis) with an
injected clock; the breaks are made through the store's own API where it allows them (a pending
write against an absent checkpoint, a park whose checkpoint was deleted), else by hand in the
backend (a Redis index entry removed).
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import sqlalchemy as sa
from click.testing import CliRunner

import durability
from durability import Checkpoint, PendingWrite, frames
from durability.cli import cli
from durability.clock import FrozenClock
from durability.doctor import CHECKS, diagnose
from durability.doctor.model import Diagnosis
from durability.doctor.repair import RepairPlan, RepairStep, apply_repairs, plan_repairs
from durability.doctor.replica import Replica
from durability.errors import ConfigError
from durability.model import STEP_FORK_ORIGIN, STEP_RUN_END
from durability.replication import connect, disconnect
from durability.replication.client import PlaneClient
from durability.replication.wire import ids_checksum
from durability.settings import Settings
from durability.stores import Store
from durability.stores.redis.keys import thread_tag
from durability.testing import StoreTarget
from tests.conftest import PROVIDERS, make_target
from tests.plane_support import PlaneHandle, fast_backoff

T0 = datetime(2026, 3, 1, tzinfo=UTC)
LATER = T0 + timedelta(days=20)
SETTINGS = Settings(waiting_retention="30d", finished_retention="7d")


@pytest.fixture(params=PROVIDERS)
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreTarget]:
    """A fresh store location on each provider."""
    yield from make_target(request.param, tmp_path)


@pytest.fixture
def store(target: StoreTarget) -> Iterator[Store]:
    """A store on a clock frozen at ``T0``."""
    with target.open(settings=SETTINGS, clock=FrozenClock(T0)) as s:
        yield s


def put_chain(store: Store, thread: str, ids: list[str], **fields: object) -> None:
    """A thread whose rows each name the previous one as parent."""
    parent = None
    for cid in ids:
        store.put(
            Checkpoint(thread_id=thread, checkpoint_id=cid, parent_checkpoint_id=parent, **fields)
        )  # type: ignore[arg-type]
        parent = cid


def break_everything(store: Store) -> set[tuple[str, str | None]]:
    """Inject one of each break the store can hold; the (check, thread) pairs to expect."""
    expected = set()
    put_chain(store, "w", ["a"])
    store.put_writes(
        [PendingWrite(thread_id="w", checkpoint_id="ghost", task_id="t", idx=0, channel="c")]
    )
    expected.add(("writes_without_checkpoint", "w"))
    put_chain(store, "p", ["a", "b"])
    store.put(Checkpoint(thread_id="p", checkpoint_id="c", parent_checkpoint_id="gone"))
    expected.add(("missing_parent", "p"))
    assert store.ledger is not None
    store.record_run_start("orphan", run_id="r0", owner="me")
    expected.add(("ledger_without_thread", "orphan"))
    store.put(Checkpoint(thread_id="l", run_id="r1", step_type=STEP_RUN_END))
    store.acquire_lease("l", "worker-1", "1h", run_id="r1")
    expected.add(("lease_of_ended_run", "l"))
    store.put(Checkpoint(thread_id="f"))
    store.mark_finished("f")
    expected.add(("finished_past_due", "f"))
    if store.provider in ("sqlite", "postgres"):  # an outbox record whose checkpoint is gone
        from durability.stores.sql.schema import outbox_table

        with store.db.write("inject") as conn:  # type: ignore[attr-defined]
            conn.execute(outbox_table.insert().values(seq=10**9, project_id="", attempts=0))
        expected.add(("outbox_without_checkpoint", None))
    if store.provider == "redis":  # a synced and a pending record whose row is gone
        stale_outbox_records(store, "o")
        expected.add(("outbox_without_checkpoint", "o"))
    if store.tombstones is not None:
        store.put(Checkpoint(thread_id="erased"))
        store.tombstones.bury("erased")  # a tombstone, and the rows still there
        expected.add(("erased_thread_holds_rows", "erased"))
    if store.capabilities.can_park:
        _cp, _ = store.park(Checkpoint(thread_id="k", run_id="r2"), deadline=T0 + timedelta(days=1))
        expected.add(("park_past_deadline", "k"))
        store.park(Checkpoint(thread_id="k2", checkpoint_id="x"), deadline=T0 + timedelta(days=2))
        store.delete_checkpoints("k2", [("", "x")])
        expected |= {("park_without_thread", "k2"), ("park_past_deadline", "k2")}
    return expected


def stale_outbox_records(store: Any, thread: str) -> list[int]:
    """On a Redis thread: a synced record and a pending one (indexed, as the reconcile would)
    of rows the thread does not hold, copied from a real row's record; their seqs."""
    from durability.stores.redis.documents import header_time
    from durability.stores.redis.keys import member, thread_tag

    row = store.put(Checkpoint(thread_id=thread, checkpoint_id="held"))
    tag = thread_tag(thread)
    state = f"{store.prefix}{{{tag}}}:os"
    header = store.client.hget(state, f"h{row.seq}")
    synced, pending = row.seq + 1000, row.seq + 2000
    store.client.hset(f"{store.prefix}{{{tag}}}:sy", f"h{synced}", header)
    store.client.hset(state, mapping={f"h{pending}": header, f"a{pending}": 3})
    store.client.zadd(store.keys.outbox, {member(tag, pending): header_time(header)})
    return [synced, pending]


def outbox_index(store: Any) -> list[bytes]:
    """The members of a Redis store's outbox index."""
    return list(store.client.zrange(store.keys.outbox, 0, -1))


def found(store: Store, now: datetime = LATER) -> set[tuple[str, str | None]]:
    return {(p.check, p.thread_id) for p in diagnose(store, now=now).problems}


def test_every_break_is_found_and_named(store: Store) -> None:
    """Each injected break is reported once, by its check, on its thread, with its fix."""
    expected = break_everything(store)
    diagnosis = diagnose(store, now=LATER)
    assert {(p.check, p.thread_id) for p in diagnosis.problems} == expected
    by_check = {p.check: p for p in diagnosis.problems}
    assert by_check["writes_without_checkpoint"].rows == 1
    assert "'ghost'" in by_check["writes_without_checkpoint"].detail
    assert by_check["writes_without_checkpoint"].fix.endswith("--fix")  # type: ignore[union-attr]
    assert "'c (parent gone)'" in by_check["missing_parent"].detail
    assert by_check["missing_parent"].fix is None
    assert by_check["ledger_without_thread"].fix.startswith("durability threads delete")  # type: ignore[union-attr]
    assert by_check["finished_past_due"].fix.startswith("durability sweep")  # type: ignore[union-attr]
    assert "r1" in by_check["lease_of_ended_run"].detail
    frame = frames.problems(store, now=LATER)
    assert frame.dtypes.astype(str).to_dict() == frames.COLUMNS["problems"]
    threads = [None if t is pd.NA else t for t in frame["thread_id"]]
    assert set(zip(frame["check"], threads, strict=True)) == expected


def test_fix_repairs_the_safe_ones_and_deletes_only_with_yes(store: Store) -> None:
    """--fix releases the ended run's lease at once, drops the orphan writes only when deletes
    are allowed, and leaves every problem it has no safe repair for."""
    expected = break_everything(store)
    outboxes = store.provider in ("sqlite", "postgres", "redis")
    plan = plan_repairs(diagnose(store, now=LATER))
    assert {(s.repair, s.deletes) for s in plan.steps} == {
        ("drop_orphan_writes", True),
        ("release_ended_leases", False),
        *([("drop_orphan_outbox", False)] if outboxes else []),
    }
    result = apply_repairs(store, plan)
    assert result.applied == {
        "release_ended_leases": 1,
        **({"drop_orphan_outbox": 2 if store.provider == "redis" else 1} if outboxes else {}),
    }
    if store.provider == "redis":  # the held row stays; the stale record's index entry went
        [held] = store.outbox(thread_id="o")  # type: ignore[misc]
        tag = thread_tag("o").encode()
        assert [m for m in outbox_index(store) if m.startswith(tag)] == [
            f"{thread_tag('o')}:{held.seq:020d}".encode()
        ]
    assert [s.repair for s, _why in result.skipped] == ["drop_orphan_writes"]
    assert store.writes("w", "ghost") != []
    outbox = {("outbox_without_checkpoint", None), ("outbox_without_checkpoint", "o")}
    assert found(store) == expected - {("lease_of_ended_run", "l")} - outbox
    result = apply_repairs(store, plan_repairs(diagnose(store, now=LATER)), allow_deletes=True)
    assert result.applied == {"drop_orphan_writes": 1}
    assert store.writes("w", "ghost") == []
    assert store.latest("w") is not None  # the thread's own checkpoint stays
    fixed = {("lease_of_ended_run", "l"), ("writes_without_checkpoint", "w")}
    assert found(store) == expected - fixed - outbox


def test_the_outbox_repairs_recheck_each_record_as_they_act(store: Store) -> None:
    """Between the plan and the apply the store moves on: a re-queue of a row deleted since,
    or marked synced again, moves nothing; a Redis record whose row came back is not dropped."""
    if store.outbox is None:
        return
    gone, kept = store.put(Checkpoint(thread_id="q")), store.put(Checkpoint(thread_id="q"))
    store.outbox.mark_synced([("q", gone.seq), ("q", kept.seq)])  # type: ignore[misc]
    keys = (("", gone.checkpoint_id, gone.seq), ("", kept.checkpoint_id, kept.seq))
    step = RepairStep("requeue_missing_rows", "replica_short", "q", 2, False, keys)
    plan = RepairPlan(store.url, [step], [])
    store.delete_checkpoints("q", [("", gone.checkpoint_id)])
    assert apply_repairs(store, plan).applied == {"requeue_missing_rows": 1}
    assert [e.checkpoint_id for e in store.outbox(state="pending")] == [kept.checkpoint_id]  # type: ignore[misc]
    assert apply_repairs(store, plan).applied == {"requeue_missing_rows": 0}  # pending already
    if store.provider != "redis":
        return
    seqs = stale_outbox_records(store, "o")
    [problem] = [p for p in diagnose(store).problems if p.check == "outbox_without_checkpoint"]
    r: Any = store
    base = f"{r.prefix}{{{thread_tag('o')}}}:"
    r.client.hset(base + "c", str(seqs[0]), b"back")  # the rows are there again
    r.client.hset(base + "od", str(seqs[1]), b"back")
    result = apply_repairs(store, plan_repairs(Diagnosis(store.url, LATER, [problem], [], {})))
    assert result.applied == {"drop_orphan_outbox": 0}
    assert r.client.hexists(base + "sy", f"h{seqs[0]}")
    assert r.client.hexists(base + "os", f"h{seqs[1]}")


def test_info_findings_past_the_limit_are_counted_not_listed(store: Store) -> None:
    """With ``info_limit``, an info check lists that many findings, the longest overdue first,
    and counts the rest in the store; counts() and the frame's attrs say how many in all."""
    assert store.ledger is not None
    for i in (4, 3, 2, 1, 0):  # f0 marked last, due last
        store.put(Checkpoint(thread_id=f"f{i}"))
        store.mark_finished(f"f{i}")
        store.clock.advance(timedelta(hours=1))  # type: ignore[attr-defined]
    whole = diagnose(store, now=LATER)
    assert whole.counts()["info"] == 5
    assert whole.counted == {}
    capped = diagnose(store, now=LATER, info_limit=2)
    assert [p.thread_id for p in capped.problems] == ["f3", "f4"]
    assert capped.counted == {"finished_past_due": 5}
    assert capped.counts()["info"] == 5
    assert capped.to_dict()["counted"] == {"finished_past_due": 5}
    assert diagnose(store, now=LATER, info_limit=5).counted == {}
    frame = frames.problems(store, now=LATER, info_limit=2)
    assert len(frame) == 2
    assert frame.attrs["counted"] == {"finished_past_due": 5}
    assert frame.attrs["counts"] == {"error": 0, "warning": 0, "info": 5}
    assert frame.attrs["sampled"] == {}


def test_a_sample_reads_the_chains_of_the_picked_threads_only(store: Store) -> None:
    """With ``sample``, missing_parent reads the threads of that many checkpoints picked at
    random, in a store holding more threads: each picked thread's break is found, no other,
    and the diagnosis says how many threads it read of how many."""
    for i in range(12):
        put_chain(store, f"t{i:02}", ["a", "b"])
        store.put(Checkpoint(thread_id=f"t{i:02}", checkpoint_id="c", parent_checkpoint_id="x"))
    diagnosis = diagnose(store, now=T0, sample=4, only={"missing_parent"})
    read, total, what = diagnosis.sampled["missing_parent"]
    assert (total, what) == (12, "threads")
    assert 1 <= read <= 4
    assert len({p.thread_id for p in diagnosis.problems}) == read
    counted = diagnose(store, now=T0, sample=4, thread_count=12, only={"missing_parent"})
    assert counted.sampled == diagnosis.sampled
    whole = diagnose(store, now=T0, sample=12, only={"missing_parent"})
    assert whole.sampled == {}
    assert len(whole.problems) == 12
    frame = frames.problems(store, now=T0, sample=4, only={"missing_parent"})
    assert frame.attrs["sampled"] == {"missing_parent": {"read": read, "of": 12, "what": "threads"}}
    with pytest.raises(ConfigError, match="sample=0"):
        diagnose(store, sample=0)


@pytest.mark.parametrize("provider", ["sqlite", "postgres"])
def test_a_sample_checks_some_synced_records_and_every_outbox_row(
    provider: str, tmp_path: Path
) -> None:
    """With ``sample``, outbox_without_checkpoint checks about that many synced records picked
    at random (one per checkpoint the plane took) and every outbox row; it finds only injected
    orphans and says how many records it read of how many. Without, it finds every orphan."""
    from durability.stores.sql.schema import outbox_table, synced_table

    for target in make_target(provider, tmp_path):
        with target.open(settings=SETTINGS, clock=FrozenClock(T0)) as store:
            rows = [store.put(Checkpoint(thread_id=f"t{i}")) for i in range(10)]
            assert store.outbox is not None
            store.outbox.mark_synced([(r.thread_id, r.seq) for r in rows])  # type: ignore[misc]
            orphans = {10**9 + i for i in range(10)}
            with store.db.write("inject") as conn:  # type: ignore[attr-defined]
                for seq in orphans:
                    conn.execute(synced_table.insert().values(seq=seq, attempts=1))
                conn.execute(outbox_table.insert().values(seq=7 * 10**9, project_id=""))
            only = {"outbox_without_checkpoint"}
            [whole] = diagnose(store, now=T0, only=only).problems
            assert {seq for _tag, seq in whole.keys} == orphans | {7 * 10**9}
            sampled = diagnose(store, now=T0, only=only, sample=4)
            read, total, what = sampled.sampled["outbox_without_checkpoint"]
            assert (total, what) == (20, "synced records")
            assert 1 <= read <= 4
            [found] = sampled.problems
            seqs = {seq for _tag, seq in found.keys}
            assert 7 * 10**9 in seqs
            assert seqs - {7 * 10**9} <= orphans
            assert len(seqs) <= read + 1
            assert diagnose(store, now=T0, only=only, sample=20).sampled == {}


def test_what_the_seeds_intend_reports_nothing(store: Store) -> None:
    """Owned session-thread marks, a run starting, a fork origin, a latest-only restore and a
    thread pruned to its latest are not breaks."""
    store.mark_finished("owned-session")  # a flow's mark in the deployment's ledger
    store.unmark_finished("owned-session")
    store.mark_finished("owned-2")
    put_chain(store, "src", ["s1", "s2"])
    store.put(
        Checkpoint(
            thread_id="fork",
            checkpoint_id="f0",
            parent_checkpoint_id="s1",
            step_type=STEP_FORK_ORIGIN,
        )
    )
    put_chain(store, "fork", ["f0x", "f1"])
    store.put(
        Checkpoint(thread_id="restored", checkpoint_id="r9", parent_checkpoint_id="r8"), synced=True
    )
    put_chain(store, "restored", ["r10"])
    for ns in ("", "inner"):  # pruned to the latest of each namespace
        store.put(
            Checkpoint(
                thread_id="pruned", namespace=ns, checkpoint_id="z", parent_checkpoint_id="y"
            )
        )
    assert found(store, now=T0 + timedelta(hours=1)) == set()
    store.record_run_start("starting", run_id="r", owner="me")  # younger than the grace
    assert found(store, now=T0 + timedelta(seconds=5)) == set()
    frame = frames.problems(store, now=T0 + timedelta(seconds=5))
    assert frame.empty
    assert frame.dtypes.astype(str).to_dict() == frames.COLUMNS["problems"]


def test_a_store_of_another_generation_is_named_alone(target: StoreTarget) -> None:
    """A format-generation mismatch is the one problem reported, with the reset command."""
    with target.open(settings=SETTINGS) as store:
        store.put(Checkpoint(thread_id="t"))
        store._write_generation(99)
    with target.open(settings=SETTINGS) as store:
        diagnosis = diagnose(store)
    [problem] = diagnosis.problems
    assert problem.check == "format_generation"
    assert "generation 99" in problem.detail
    assert problem.fix is not None
    assert problem.fix.startswith("durability store reset")
    assert set(diagnosis.skipped) == {c.name for c in CHECKS}


def test_the_demo_store_is_whole(replicated_demo: str) -> None:
    """`durability doctor` on the demo store finds no error and no warning, says "is whole" and
    exits 0, in text and in JSON. What it notes (severity info) is the sweep's pending work,
    kept on purpose: the demo's six weeks never ran a sweep, so that plan_retention and the
    sweep preview have something to show (decision 0115)."""
    result = CliRunner().invoke(cli, ["doctor", replicated_demo, "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["clean"]
    assert report["counts"]["error"] == report["counts"]["warning"] == 0
    assert {p["severity"] for p in report["problems"]} == {"info"}
    assert {p["check"] for p in report["problems"]} == {"finished_past_due", "park_past_deadline"}
    assert all(p["fix"].startswith("durability sweep") for p in report["problems"])
    assert "missing_parent" in report["checks"]
    text = CliRunner().invoke(cli, ["doctor", replicated_demo])
    assert text.exit_code == 0, text.output
    verdict = text.output.splitlines()[0]
    assert " is whole: " in verdict
    assert "error" not in verdict
    assert "warning" not in verdict
    assert "WARNING" not in text.output
    assert "ERROR" not in text.output


def test_the_demos_notes_after_a_sweep_are_what_it_spares(
    replicated_demo: str, tmp_path: Path
) -> None:
    """On a copy of the demo store, `durability sweep` acts on the notes: what the doctor still
    notes is only what the sweep spares on purpose (finished threads whose rows the plane does
    not hold yet) and parks past their deadline whose threads wait out their retention."""
    import shutil

    source = Path(replicated_demo.removeprefix("sqlite:///"))
    for suffix in ("", "-wal"):
        if Path(f"{source}{suffix}").exists():
            shutil.copy(f"{source}{suffix}", tmp_path / f"demo.db{suffix}")
    url = f"sqlite:///{tmp_path / 'demo.db'}"
    before = json.loads(CliRunner().invoke(cli, ["doctor", url, "--json"]).output)
    swept = CliRunner().invoke(cli, ["sweep", url, "--json"])
    assert swept.exit_code == 0, swept.output
    spared = {s["thread_id"] for s in json.loads(swept.output)["spared"]["finished"]}
    after = json.loads(CliRunner().invoke(cli, ["doctor", url, "--json"]).output)
    assert after["clean"]
    assert len(after["problems"]) < len(before["problems"])
    marks = {p["thread_id"] for p in after["problems"] if p["check"] == "finished_past_due"}
    assert marks <= spared
    assert {p["check"] for p in after["problems"]} <= {"finished_past_due", "park_past_deadline"}


def test_the_cli_names_each_break_and_exits_1(tmp_path: Path) -> None:
    """The table names the check, the thread and the fix; --json carries the same."""
    url = f"sqlite:///{tmp_path / 'broken.db'}"
    with durability.open(url) as store:
        store.put(Checkpoint(thread_id="w"))
        store.put_writes(
            [PendingWrite(thread_id="w", checkpoint_id="ghost", task_id="t", idx=0, channel="c")]
        )
    result = CliRunner().invoke(cli, ["doctor", url])
    assert result.exit_code == 1
    assert "writes_without_checkpoint" in result.output
    assert "--fix" in result.output
    as_json = json.loads(CliRunner().invoke(cli, ["doctor", url, "--json"]).output)
    assert [p["check"] for p in as_json["problems"]] == ["writes_without_checkpoint"]
    assert as_json["problems"][0]["thread_id"] == "w"
    preview = CliRunner().invoke(cli, ["doctor", url, "--fix"], input="n\n")
    assert "drop_orphan_writes on thread 'w': 1 rows (deletes state)" in preview.output
    assert preview.exit_code == 1  # declined: the writes stay
    fixed = CliRunner().invoke(cli, ["doctor", url, "--fix", "--yes", "--json"])
    assert fixed.exit_code == 0, fixed.output
    assert json.loads(fixed.output)["applied"] == {"drop_orphan_writes": 1}


def test_a_redis_index_that_disagrees_is_found(tmp_path: Path) -> None:
    """An index entry removed and a stray one added are both named (opened without the
    reconcile that would repair them)."""
    for target in make_target("redis", tmp_path):
        with target.open(settings=SETTINGS) as store:
            store.put(Checkpoint(thread_id="t"))
            store.mark_finished("t")
            client, keys = store.client, store.keys  # type: ignore[attr-defined]
            client.zrem(keys.finished, *client.zrange(keys.finished, 0, -1))
            client.zadd(keys.threads, {"f" * 32: 0})
        with target.open(settings=SETTINGS, reconcile=False) as store:
            problems = diagnose(store).problems
        assert {(p.check, p.detail.split(" index")[0]) for p in problems} == {
            ("redis_index_mismatch", "the 'finished'"),
            ("redis_index_mismatch", "the 'threads'"),
        }
        result = CliRunner().invoke(cli, ["doctor", target.url, "--fix", "--json"])
        assert result.exit_code == 0, result.output
        report = json.loads(result.output)
        # the stray threads entry is gone already: reading the threads drops it
        assert report["applied"] == {"rebuild_redis_indexes": 1}
        assert report["after"]["problems"] == []


def test_a_replica_short_of_rows_the_store_marks_synced_is_named(
    target: StoreTarget, plane: PlaneHandle, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Against a real plane: rows drained for real are whole; rows marked synced by hand (the
    plane never got them) are named, thread by thread; a row deleted locally is not a gap;
    --fix re-queues the missing rows (SQL) and the next drain makes the replica whole."""
    with target.open(settings=SETTINGS) as store:
        if store.outbox is None:
            assert "replica_short" in diagnose(store).skipped
            return
        put_chain(store, "whole", ["w1", "w2", "w3"])
        put_chain(store, "thinned", ["t1", "t2"])
        drain_until_sent(store, plane)
        store.delete_checkpoints("thinned", [("", "t1")])
        short = [store.put(Checkpoint(thread_id="whole", checkpoint_id="w4"))]
        short.append(store.put(Checkpoint(thread_id="short", checkpoint_id="s1")))
        store.outbox.mark_synced([(c.thread_id, c.seq) for c in short])  # type: ignore[misc]
        replica = Replica.of(PlaneClient(plane.url, plane.key, http=plane.http()))
        diagnosis = diagnose(store, plane=replica)
        problems = diagnosis.problems
        monkeypatch.setenv("DOCTOR_TEST_KEY", plane.key)
        result = CliRunner().invoke(
            cli,
            [
                "doctor",
                target.url,
                "--plane",
                plane.url,
                "--api-key-env",
                "DOCTOR_TEST_KEY",
                "--json",
            ],
        )
        assert result.exit_code == 1, result.output
        assert plane.key not in result.output
        assert {p["thread_id"] for p in json.loads(result.output)["problems"]} == {"short", "whole"}
        repaired = apply_repairs(store, plan_repairs(diagnosis))
        # re-queued, sent again by the next drain: the replica is whole
        assert repaired.applied == {"requeue_missing_rows": 2}
        assert {e.checkpoint_id for e in store.outbox(state="pending")} == {"w4", "s1"}
        assert diagnose(store).problems == []  # indexed as pending rows are
        drain_until_sent(store, plane)
        assert diagnose(store, plane=replica).problems == []
    assert {(p.check, p.thread_id, p.rows) for p in problems} == {
        ("replica_short", "short", 1),
        ("replica_short", "whole", 1),
    }
    assert all("'w4'" in p.detail or "'s1'" in p.detail for p in problems)


def drain_until_sent(store: Store, plane: PlaneHandle) -> None:
    """Connect, wait until the outbox holds nothing pending, disconnect."""
    connect(store, plane.url, plane.key, http=plane.http(), backoff=fast_backoff())
    deadline = time.monotonic() + 15
    while store.outbox(state="pending") and time.monotonic() < deadline:  # type: ignore[misc]
        time.sleep(0.02)
    disconnect(store, timeout=5)
    assert store.outbox(state="pending") == []  # type: ignore[misc]


def test_requeue_races_a_live_drain_and_a_writer(target: StoreTarget, plane: PlaneHandle) -> None:
    """Rows the plane lacks are re-queued while a drain is connected and a writer puts rows into
    the same threads: every row reaches the plane once, none is left pending, and the replica
    is whole afterwards (each row moves in one statement or one script of its thread)."""
    with target.open(settings=SETTINGS) as store:
        if store.outbox is None:
            return
        lost = [store.put(Checkpoint(thread_id=f"race-{n % 3}")) for n in range(30)]
        store.outbox.mark_synced([(c.thread_id, c.seq) for c in lost])  # type: ignore[misc]
        replica = Replica.of(PlaneClient(plane.url, plane.key, http=plane.http()))
        diagnosis = diagnose(store, plane=replica)
        assert {(p.thread_id, p.rows) for p in diagnosis.problems} == {
            (f"race-{n}", 10) for n in range(3)
        }
        plan = plan_repairs(diagnosis)
        connect(store, plane.url, plane.key, http=plane.http(), backoff=fast_backoff())
        writer = threading.Thread(
            target=lambda: [store.put(Checkpoint(thread_id=f"race-{n % 3}")) for n in range(60)]
        )
        writer.start()
        repaired = apply_repairs(store, plan)
        writer.join()
        deadline = time.monotonic() + 15
        while store.outbox(state="pending") and time.monotonic() < deadline:
            time.sleep(0.02)
        disconnect(store, timeout=5)
        assert repaired.applied == {"requeue_missing_rows": 30}
        assert store.outbox(state="pending") == []
        assert diagnose(store, plane=replica).problems == []
        counts = {
            i["execution_id"]: i["count"]
            for i in replica.client.digest(["race-0", "race-1", "race-2"])
        }
    assert counts == {f"race-{n}": 30 for n in range(3)}


def test_the_digest_route_refuses_bad_input_by_name(plane: PlaneHandle) -> None:
    """401 without a key; 422 naming the rule for every malformed body; never a 5xx."""
    url, headers = plane.url + "/public/v1/checkpoints/digest", {"X-API-Key": plane.key}
    with plane.http() as http:
        assert http.post(url, json={"execution_ids": ["a"]}).status_code == 401
        for body in (
            b"",
            b"[]",
            b'{"execution_ids": "a"}',
            b'{"execution_ids": []}',
            b'{"execution_ids": ["a", 1]}',
            b'{"execution_ids": ["a\\u0000"]}',
            b'{"execution_ids": ["a", "b"], "ids": true}',
            b'{"execution_ids": ["a"], "ids": 1}',
            b"\xff\xfe",
        ):
            answer = http.post(url, content=body, headers=headers)
            assert answer.status_code == 422, body
            assert "execution_ids must be" in answer.json()["detail"]
        answer = http.post(
            url, json={"execution_ids": ["nothing-here"], "ids": True}, headers=headers
        )
    assert answer.json()["items"] == [
        {
            "execution_id": "nothing-here",
            "count": 0,
            "checksum": ids_checksum([]),
            "checkpoint_ids": [],
        }
    ]


def test_a_flows_owned_session_threads_on_a_per_run_store_are_not_breaks(store: Store) -> None:
    """A real flow whose agent ran on a per-run store: the deployment's ledger marks the owned
    session thread it holds no checkpoint of (seed 004), and neither store reports a break."""
    from durability.runs import AgentNode, Flow, Runner

    agents = durability.open(
        f"memory://agents-{uuid.uuid4().hex}", settings=SETTINGS, clock=store.clock
    )
    triage = Runner("triage", [("classify", lambda s, c: {**s, "category": "billing"})])
    flow = Flow("support", [AgentNode("triage", triage, "{flow_run_id}-triage", store=agents)])
    result = flow.start(store, {"customer": "c-1"}, thread_id="session-1", deployment_store=store)
    owned = store.thread(f"{result.run_id}-triage")
    assert owned is not None
    assert owned.finished
    assert owned.checkpoints == 0
    assert found(store, now=T0 + timedelta(hours=1)) == set()
    assert found(agents, now=T0 + timedelta(hours=1)) == set()


def test_the_sqlite_checks_probe_one_index_entry_per_row(tmp_path: Path) -> None:
    """On the rebuilt SQLite table (migration 15) every query the doctor sends finds a
    checkpoint by one index search: none walks a thread's rows by its hash alone (quadratic in a
    long thread) and none leans on an automatic index SQLite builds per query."""
    url = f"sqlite:///{tmp_path / 'plans.db'}"
    with durability.open(url) as store:
        put_chain(store, "long", [f"c{i}" for i in range(50)])
        store.put_writes(
            [PendingWrite(thread_id="long", checkpoint_id="c1", task_id="t", idx=0, channel="c")]
        )
        sent: list[str] = []
        engine = store.db.engine  # type: ignore[attr-defined]

        def capture(_conn: Any, _cursor: Any, statement: str, *_rest: Any) -> None:
            if statement.lstrip().upper().startswith("SELECT"):
                sent.append(statement)

        sa.event.listen(engine, "before_cursor_execute", capture)
        try:
            assert diagnose(store).problems == []
        finally:
            sa.event.remove(engine, "before_cursor_execute", capture)
        plans = []
        with sqlite3.connect(tmp_path / "plans.db") as conn:
            for statement in sent:
                marks = statement.count("?")
                explained = conn.execute(f"EXPLAIN QUERY PLAN {statement}", [None] * marks)
                plans += [row[-1] for row in explained]
    by_ids = "USING INDEX ix_durability_checkpoints_ids (thread_id=? AND namespace=? AND checkpoint_id=?)"
    # the two anti-joins: a write's checkpoint, a row's parent
    assert [p.split(" USING")[0] for p in plans if p.endswith(by_ids)] == [
        "SEARCH durability_checkpoints",
        "SEARCH parent",
    ]
    assert not [p for p in plans if "AUTOMATIC" in p]


def test_postgres_computes_the_checkpoint_key_the_store_writes(tmp_path: Path) -> None:
    """The parent probe on Postgres hashes the parent's id in the query: the same key the
    store computes in Python for every id it can hold (Postgres text holds no NUL)."""
    from durability.stores.sql.schema import checkpoint_key, postgres_checkpoint_key
    from durability.testing import HOSTILE_IDS

    for target in make_target("postgres", tmp_path):
        with target.open(settings=SETTINGS) as store:
            ids = [i for i in HOSTILE_IDS if "\x00" not in i]
            with store.db.read("hash ids") as conn:  # type: ignore[attr-defined]
                for thread in ids:
                    parts = [sa.literal(p) for p in (thread, "ns é", ids[-1])]
                    query = sa.select(postgres_checkpoint_key(*parts))
                    assert conn.execute(query).scalar_one() == checkpoint_key(
                        thread, "ns é", ids[-1]
                    )
