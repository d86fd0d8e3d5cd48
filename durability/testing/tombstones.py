"""The tombstones' checks: an erased thread refuses every later write, on every handle."""

from __future__ import annotations

import re
import threading
import time
from datetime import timedelta

from durability.clock import FrozenClock
from durability.errors import ThreadErased
from durability.model import PendingWrite
from durability.stores import Store
from durability.testing.suite import (
    START,
    StoreTarget,
    check,
    raises,
    requires,
    sample,
    write_for,
)
from durability.testing.values import HOSTILE_IDS


def _refuses_every_write(store: Store, thread_id: str) -> None:
    """Every write path to ``thread_id`` raises :class:`ThreadErased` and writes nothing."""
    before = len(store.history(thread_id, None))
    raises(ThreadErased, lambda: store.put(sample(thread_id, 7)), contains="was erased")
    raises(ThreadErased, lambda: store.put_many([sample(thread_id, 8), sample(thread_id, 9)]))
    raises(ThreadErased, lambda: store.put(sample(thread_id, 10), synced=True))
    write = PendingWrite(thread_id=thread_id, checkpoint_id="c", task_id="t", idx=0, channel="x")
    raises(ThreadErased, lambda: store.put_writes([write]), contains="reopen")
    if store.ledger is not None:
        raises(ThreadErased, lambda: store.record_run_start(thread_id, run_id="r", owner="o"))
        raises(ThreadErased, lambda: store.acquire_lease(thread_id, "w", timedelta(minutes=1)))
    if store.capabilities.can_park:
        ask = sample(thread_id, 11)
        raises(ThreadErased, lambda: store.park(ask, deadline=START + timedelta(hours=1)))
    assert len(store.history(thread_id, None)) == before
    assert store.writes(thread_id, "c") == []


@check
@requires("tombstones")
def check_tombstone_refuses_writes(target: StoreTarget) -> None:
    """A tombstoned thread refuses every write, on this handle and another; others write on."""
    clock = FrozenClock(START)
    with target.open(clock=clock) as store, target.open(clock=clock) as other:
        assert store.tombstones is not None
        assert other.tombstones is not None
        store.put(sample("t-gone", 0))
        stone = store.tombstones.bury("t-gone", by="dpo@example.com")
        assert re.fullmatch(r"[0-9a-f]{32}", stone.hash), stone.hash
        assert stone.erased_at == START
        assert stone.erased_by == "dpo@example.com"
        assert other.tombstones.hash_of("t-gone") == stone.hash  # one secret per store
        for handle in (store, other):
            _refuses_every_write(handle, "t-gone")
        store.put(sample("t-kept", 0))  # other threads are untouched
        assert store.tombstones.get("t-kept") is None
        clock.advance(timedelta(minutes=5))
        again = other.tombstones.bury("t-gone", by="someone else")
        assert again == stone, "a second bury keeps the first tombstone"
        assert store.tombstones.count() == 1
        assert [s.hash for s in store.tombstones.all()] == [stone.hash]
        assert "t-gone" not in repr(store.tombstones.all())


@check
@requires("tombstones")
def check_tombstone_reopen(target: StoreTarget) -> None:
    """Reopening lifts the tombstone (once); a reset clears every tombstone."""
    with target.open() as store:
        assert store.tombstones is not None
        store.tombstones.bury("t-reused")
        assert store.tombstones.reopen("t-reused") is True
        assert store.tombstones.reopen("t-reused") is False
        store.put(sample("t-reused", 0))
        assert store.tombstones.count() == 0
        store.tombstones.bury("t-reused")
        digest = store.tombstones.hash_of("t-reused")
        store.reset()
        assert store.tombstones.count() == 0
        assert store.tombstones.hash_of("t-reused") == digest, "a reset keeps the secret"
        store.put(sample("t-reused", 1))


@check
@requires("tombstones")
def check_tombstone_hostile_ids(target: StoreTarget) -> None:
    """Hostile thread ids are tombstoned and refused exactly, never a neighbour."""
    with target.open() as store:
        assert store.tombstones is not None
        for thread_id in HOSTILE_IDS[:6]:
            store.tombstones.bury(thread_id)
            erased = sample(thread_id, 0)
            raises(ThreadErased, lambda: store.put(erased))  # noqa: B023 - called at once
            store.put(sample(thread_id + "x", 0))
        assert store.tombstones.count() == 6


def _fill(store: Store, thread_id: str) -> list[int]:
    """Give the thread something in every place erasure clears; returns its checkpoints' seqs."""
    cps = store.put_many([sample(thread_id, n) for n in range(3)])
    store.put_writes([write_for(cps[0])])
    if store.ledger is not None:
        store.record_run_start(thread_id, run_id="run-1", owner="o")
        store.mark_finished(thread_id)
        store.acquire_lease(thread_id, "worker-1", timedelta(minutes=5))
    if store.capabilities.can_park:
        store.park(sample(thread_id, 9), deadline=store.clock() + timedelta(hours=1))
    return [cp.seq or 0 for cp in cps]


@check
@requires("tombstones")
def check_erase_removes_everything(target: StoreTarget) -> None:
    """Erase removes every record of the thread, lists what it dropped, and holds; twice is a no-op."""
    clock = FrozenClock(START)
    with target.open(clock=clock) as store:
        assert store.tombstones is not None
        seqs = _fill(store, "t-erase")
        store.put(sample("t-other", 0))
        if store.outbox is not None:
            store.outbox.mark_synced([("t-erase", seqs[0])])
            store.outbox.mark_quarantined({("t-erase", seqs[1]): "too big"})
        receipt = store.erase("t-erase", by="dpo")
        assert receipt.store["checkpoints"] == (4 if store.capabilities.can_park else 3)
        assert receipt.store["pending_writes"] == 1
        assert receipt.store["bytes"] > 0
        assert receipt.already_erased is False
        assert receipt.erased_by == "dpo"
        assert receipt.tombstone == store.tombstones.hash_of("t-erase")
        assert "t-erase" not in receipt.to_json()
        if store.ledger is not None:
            assert receipt.store["ledger_record"]
            assert receipt.store["finished_mark"]
            assert receipt.store["live_lease"]
        if store.outbox is not None:
            assert receipt.outbox["sent_rows_removed"] == 1
            assert len(receipt.outbox["quarantined_dropped"]) == 1
            assert len(receipt.outbox["pending_dropped"]) >= 1
            assert all(e.thread_id != "t-erase" for e in store.outbox.entries())
        assert store.thread("t-erase") is None
        assert store.history("t-erase", None) == []
        assert store.parks is None or store.parks.get("t-erase") is None
        assert store.latest("t-other") is not None
        _refuses_every_write(store, "t-erase")
        clock.advance(timedelta(hours=1))
        again = store.erase("t-erase", by="someone")
        assert again.already_erased is True
        assert again.store["checkpoints"] == 0
        assert again.erased_at == receipt.erased_at
        stone = store.tombstones.get("t-erase")
        assert stone is not None
        assert stone.receipt == receipt.to_json()


@check
@requires("tombstones")
def check_erase_while_a_run_writes(target: StoreTarget) -> None:
    """A run writing while the thread is erased is refused from then on; nothing comes back."""
    with target.open() as store, target.open() as writer:
        store.put(sample("t-busy", 0))
        refused: list[BaseException] = []

        def write() -> None:
            # Writes until refused (or for a minute): a fixed count of puts may all land
            # before the erase on a fast store.
            n, deadline = 1, time.monotonic() + 60
            while time.monotonic() < deadline:
                try:
                    writer.put(sample("t-busy", n))
                except ThreadErased as exc:
                    refused.append(exc)
                    return
                n += 1

        runner = threading.Thread(target=write)
        runner.start()
        while len(store.history("t-busy", None)) < 5:
            time.sleep(0.001)
        store.erase("t-busy")
        runner.join(timeout=60)
        assert refused, "the writer was never refused"
        assert store.history("t-busy", None) == []
        assert store.thread("t-busy") is None
