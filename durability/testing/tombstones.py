"""The tombstones' checks: an erased thread refuses every later write, on every handle."""

from __future__ import annotations

import re
from datetime import timedelta

from durability.clock import FrozenClock
from durability.errors import ThreadErased
from durability.model import PendingWrite
from durability.stores import Store
from durability.testing.suite import START, StoreTarget, check, raises, requires, sample
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
