"""The outbox's checks: pending rows oldest first, synced and quarantined marks, releases and
the history they keep, connection records."""

from __future__ import annotations

from datetime import timedelta

from durability.clock import FrozenClock
from durability.errors import (
    DurabilityError,
    InvalidIdError,
)
from durability.testing.suite import (
    START,
    StoreTarget,
    check,
    raises,
    requires,
    sample,
)


@check
def check_outbox(target: StoreTarget) -> None:
    """A replicating store keeps new rows pending, oldest first, until marked synced."""
    clock = FrozenClock(START)
    with target.open(clock=clock) as store:
        if store.outbox is None:
            raises(DurabilityError, lambda: store.fetch_unsynced())
            assert not store.replicates
            return
        outbox = store.outbox
        rows = [store.put(sample("t-out", n, project_id="p1" if n % 2 else "p2")) for n in range(6)]
        store.put(sample("t-out-restored", 0), synced=True)
        pending = outbox.fetch_unsynced(limit=100)
        assert [c.seq for c in pending] == [c.seq for c in rows], (
            "oldest first, restored rows excluded"
        )
        assert [c.step for c in outbox.fetch_unsynced(limit=100, project_id="p1")] == [1, 3, 5]
        assert len(outbox.fetch_unsynced(limit=2)) == 2
        one_row = rows[0].size_bytes or 0
        assert len(outbox.fetch_unsynced(limit=100, max_bytes=one_row)) == 1
        assert len(outbox.fetch_unsynced(limit=100, max_bytes=1)) == 1, "the first row always fits"
        in_flight = [(c.thread_id, c.seq or 0) for c in rows[:2]]
        assert [c.seq for c in outbox.fetch_unsynced_encoded(limit=2, exclude=in_flight)] == [
            c.seq for c in rows[2:4]
        ], "exclude skips the rows in flight, and the limit counts the rows returned"
        restored = [e for e in outbox.entries() if e.thread_id == "t-out-restored"]
        assert [e.state for e in restored] == ["synced"], "a row written as synced is never pending"


@check
@requires("outbox")
def check_outbox_marks(target: StoreTarget) -> None:
    """Attempts, synced and quarantined marks, releases and the drain's ack, as entries show them."""
    clock = FrozenClock(START)
    with target.open(clock=clock) as store:
        outbox = store.outbox
        assert outbox is not None  # @requires("outbox")
        rows = [store.put(sample("t-out", n, project_id="p1" if n % 2 else "p2")) for n in range(6)]
        keys = [(c.thread_id, c.seq or 0) for c in rows]
        outbox.record_attempt(keys[:2], "HTTP 503")
        clock.advance(timedelta(minutes=5))
        outbox.mark_synced(keys[:2])
        outbox.mark_synced(keys[:2])  # idempotent
        outbox.mark_quarantined({keys[2]: "HTTP 413 from /checkpoints/ingest: too big"})
        # A row is (thread, seq): seq is unique per thread, and per store only on some providers.
        entries = {(e.thread_id, e.seq): e for e in outbox.entries()}
        assert entries[keys[0]].state == "synced"
        assert entries[keys[0]].attempts == 1
        assert entries[keys[0]].last_error == "HTTP 503"
        assert entries[keys[0]].synced_at == clock()
        assert entries[keys[2]].state == "quarantined"
        assert entries[keys[2]].quarantined
        assert entries[keys[2]].sync_error == "HTTP 413 from /checkpoints/ingest: too big"
        assert [e.seq for e in outbox.entries(state="quarantined")] == [keys[2][1]]
        assert len(outbox.entries(state="pending")) == 3
        assert len(outbox.entries(state="pending", project_id="p1")) == 2
        assert [c.seq for c in outbox.fetch_unsynced()] == [k[1] for k in keys[3:]]
        assert outbox.release() == 1
        assert outbox.entries(state="quarantined") == []
        assert [c.seq for c in outbox.fetch_unsynced()] == [k[1] for k in keys[2:]]
        outbox.record_attempt(keys[3:4], "HTTP 503")
        outbox.mark_sent(keys[3:4])  # the drain's ack: one more attempt, no error, synced
        sent = {(e.thread_id, e.seq): e for e in outbox.entries()}[keys[3]]
        assert (sent.state, sent.attempts, sent.last_error) == ("synced", 2, None)
        assert sent.synced_at == clock()
        raises(InvalidIdError, lambda: outbox.entries(state="lost"))


@check
@requires("outbox")
def check_outbox_history(target: StoreTarget) -> None:
    """A release keeps what happened: the span the row was pending before its quarantine is in
    the history, the row is pending again from the release, and the plane's ack keeps that."""
    clock = FrozenClock(START)
    with target.open(clock=clock) as store:
        outbox = store.outbox
        assert outbox is not None  # @requires("outbox")
        row = store.put(sample("t-history", 0, project_id="p1"))
        key = (row.thread_id, row.seq or 0)
        clock.advance(timedelta(minutes=5))
        quarantined_at = clock()
        outbox.mark_quarantined({key: "HTTP 413: too big"})
        assert outbox.history() == []
        for n in (1, 2):  # released, refused again, released again: two spans
            clock.advance(timedelta(hours=1))
            released_at = clock()
            assert outbox.release([key]) == 1
            [entry] = outbox.entries(thread_id=row.thread_id)
            assert (entry.state, entry.pending_since) == ("pending", released_at)
            if n == 1:
                clock.advance(timedelta(minutes=1))
                outbox.mark_quarantined({key: "HTTP 413: too big"})
        first, second = outbox.history()
        assert (first.project_id, first.size_bytes) == ("p1", row.size_bytes)
        assert (first.created_at, first.pending_from) == (row.created_at, row.created_at)
        assert first.pending_until == quarantined_at
        assert second.pending_from == first.released_at
        assert second.pending_until == first.released_at + timedelta(minutes=1)
        assert second.released_at == released_at
        clock.advance(timedelta(minutes=1))
        outbox.mark_synced([key])
        [entry] = outbox.entries(thread_id=row.thread_id)
        assert (entry.state, entry.pending_since, entry.synced_at) == (
            "synced",
            released_at,
            clock(),
        )


@check
@requires("outbox")
def check_outbox_connections(target: StoreTarget) -> None:
    """A connection record makes a store replicate; a disconnect keeps it, forgetting drops it."""
    clock = FrozenClock(START)
    with target.open(clock=clock) as store:
        outbox = store.outbox
        assert outbox is not None  # @requires("outbox")
        assert not store.replicates
        outbox.record_connection("p1", "http://plane.example")
        assert store.replicates
        assert [(c.project_id, c.open) for c in outbox.connections()] == [("p1", True)]
        clock.advance(timedelta(seconds=1))
        outbox.record_disconnection("p1")
        assert store.replicates, "a disconnect keeps the record: the store still replicates"
        [closed] = outbox.connections()
        assert (closed.target, closed.disconnected_at) == ("http://plane.example", clock())
        outbox.record_disconnection("p-unknown")
        assert [c.project_id for c in outbox.connections()] == ["p1"]
        outbox.forget_connection("p1")
        assert not store.replicates
