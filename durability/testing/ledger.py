"""The ledger's checks: run starts, finished marks and their due times, leases."""

from __future__ import annotations

from datetime import timedelta

from durability.clock import FrozenClock
from durability.errors import (
    InvalidIdError,
    LeaseHeld,
    LeaseLost,
    ThreadErased,
)
from durability.settings import Settings, declare_retention
from durability.stores.ledger import RunStart
from durability.testing.suite import (
    START,
    StoreTarget,
    check,
    raises,
    requires,
    sample,
)


@check
@requires("ledger")
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
@requires("ledger")
def check_bulk_run_starts_and_marks_match_one_at_a_time(target: StoreTarget) -> None:
    """``record_run_starts`` and ``mark_finished_many`` record what the one-thread calls do;
    an erased thread among the starts is refused by name and nothing is written."""
    clock = FrozenClock(START)
    settings = Settings(waiting_retention=timedelta(days=30), finished_retention=timedelta(days=7))
    with target.open(clock=clock, settings=settings) as store:
        assert store.ledger is not None
        declared = declare_retention(settings, waiting="10d", finished="2d")
        starts = [
            RunStart("bulk-a", "run-a", "chat", declared),
            RunStart("bulk-b", "run-b", "chat"),
            RunStart("bulk-a", "run-a2", "chat", declared),  # listed twice: the last start wins
        ]
        assert store.ledger.record_run_starts(starts) == 2
        store.record_run_start("one-b", run_id="run-b", owner="chat")
        clock.advance(timedelta(hours=1))
        assert store.ledger.mark_finished_many(["bulk-a", "bulk-b", "bulk-b"]) == 2
        one = store.mark_finished("one-b")
        a, b = store.thread("bulk-a"), store.thread("bulk-b")
        assert a is not None
        assert b is not None
        assert (a.owner, a.run_id, a.started_at, a.declared_waiting) == (
            "chat",
            "run-a2",
            START,
            timedelta(days=10),
        )
        assert a.due_at == clock() + timedelta(days=2), "due from its declared retention"
        assert (b.finished_at, b.due_at) == (one.finished_at, one.due_at)
        assert (b.owner, b.run_id, b.started_at) == (one.owner, one.run_id, one.started_at)
        assert store.ledger.record_run_starts([]) == 0
        assert store.ledger.mark_finished_many([]) == 0
        if store.tombstones is None:
            return
        store.put(sample("bulk-erased"))
        store.erase("bulk-erased", by="test")
        raises(
            ThreadErased,
            lambda: store.ledger.record_run_starts(  # type: ignore[union-attr]
                [RunStart("bulk-new", "r", "chat"), RunStart("bulk-erased", "r", "chat")]
            ),
            contains="record run starts",
        )
        assert store.thread("bulk-new") is None, "nothing written when one start is refused"


@check
@requires("ledger")
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
@requires("ledger")
def check_ledger_records_are_threads_too(target: StoreTarget) -> None:
    """A thread known only by its ledger record is listed in pages, and a delete removes it."""
    with target.open() as store:
        store.put_many([sample(f"listed-{n:02d}") for n in range(23)])
        store.record_run_start("ledger-only", run_id="r", owner="test")
        store.record_run_start("listed-00", run_id="r", owner="test")
        seen: list[str] = []
        cursor = None
        while True:
            page = store.threads(cursor=cursor, limit=5)
            seen += [r.thread_id for r in page.records]
            if page.cursor is None:
                break
            cursor = page.cursor
        assert len(seen) == len(set(seen)), "a thread appeared on two pages"
        assert "ledger-only" in seen
        only = store.thread("ledger-only")
        assert only is not None
        assert (only.checkpoints, only.owner) == (0, "test")
        deleted = store.delete_thread("listed-00")
        assert deleted.checkpoints == 1
        assert store.thread("listed-00") is None, "the ledger record went with the thread"
        store.delete_thread("ledger-only")
        assert store.thread("ledger-only") is None
