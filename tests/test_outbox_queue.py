"""SQLite's outbox rows queued in batches (schema version 16, decision 0150): a put writes no
outbox row; the rows above the mark get theirs before the outbox is read or changed."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

import durability
from durability import Checkpoint
from durability.settings import Settings
from durability.stores.sql import SQLStore, aggregates, outbox_queue, scans


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLStore]:
    with durability.open(f"sqlite:///{tmp_path}/q.db", settings=Settings()) as opened:
        assert isinstance(opened, SQLStore)
        opened.ready()
        yield opened


def put(store: SQLStore, cid: str, *, synced: bool = False) -> int:
    cp = Checkpoint(thread_id="t", checkpoint_id=cid, project_id="p")
    seq = store.put(cp, synced=synced).seq
    assert seq is not None
    return seq


def outbox_rows(store: SQLStore) -> list[int]:
    with sqlite3.connect(store.db.path) as raw:
        return [s for (s,) in raw.execute("SELECT seq FROM durability_outbox ORDER BY seq")]


def test_a_put_writes_no_outbox_row_and_a_read_queues_it(store: SQLStore) -> None:
    seqs = [put(store, f"c{i}") for i in range(3)]
    assert outbox_rows(store) == []
    assert [e.state for e in store.outbox.entries()] == ["pending"] * 3
    assert outbox_rows(store) == seqs


def test_the_catch_up_queues_in_batches_oldest_first(
    store: SQLStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(outbox_queue, "QUEUE_BATCH", 2)
    seqs = [put(store, f"c{i}") for i in range(5)]
    fetched = store.fetch_unsynced_encoded(limit=10)
    assert [r.seq for r in fetched] == seqs, "every row queued, drained in write order"
    assert outbox_rows(store) == seqs


def test_a_synced_put_is_never_queued_and_the_rows_before_it_are(store: SQLStore) -> None:
    first = put(store, "a")
    put(store, "restored", synced=True)
    last = put(store, "b")
    assert [e.state for e in store.outbox.entries()] == ["pending", "synced", "pending"]
    assert outbox_rows(store) == [first, last]


def test_an_acknowledgement_of_a_row_not_yet_queued_is_kept(store: SQLStore) -> None:
    seq = put(store, "a")
    store.mark_sent([("t", seq)])
    (entry,) = store.outbox.entries()
    assert (entry.state, entry.attempts, entry.synced_at is not None) == ("synced", 1, True)


def test_a_row_put_after_the_catch_up_reads_as_pending(
    store: SQLStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read meets rows put between its catch-up and its statement: above the mark, they are
    pending (never reported synced for lack of an outbox row)."""
    put(store, "a")
    store.outbox.entries()
    put(store, "b")
    monkeypatch.setattr(scans, "catch_up", lambda store: None)
    (chunk,) = store.scans.checkpoint_columns("t", columns=("checkpoint_id", "synced"))
    assert dict(zip(chunk["checkpoint_id"], chunk["synced"], strict=True)) == {
        "a": False,
        "b": False,
    }
    assert outbox_rows(store) == [1], "b has no outbox row yet"


def test_a_reset_keeps_the_mark_so_new_rows_are_queued(store: SQLStore) -> None:
    put(store, "a")
    store.outbox.entries()
    store.reset()
    seq = put(store, "b")
    assert [(e.seq, e.state) for e in store.outbox.entries()] == [(seq, "pending")]


def test_the_backlog_counts_rows_not_yet_queued(store: SQLStore) -> None:
    """The pending spans (the backlog chart) include rows put since the outbox was last read."""
    put(store, "a")
    put(store, "b")
    assert outbox_rows(store) == []
    answer = store.scans.pending_spans(1, 0)
    assert sum(answer["spans"]) == 2
    assert set(answer["ends"]) == {None}, "both still pending"


def test_the_outbox_groups_count_rows_not_yet_queued_as_pending(
    store: SQLStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A row put after the catch-up (no outbox row yet) is counted pending, never synced."""
    put(store, "a")
    store.mark_sent([("t", 1)])
    put(store, "b")
    monkeypatch.setattr(aggregates, "catch_up", lambda store: None)
    groups = store.scans.outbox_groups()
    counts = dict(zip(groups["state"], groups["rows"], strict=True))
    assert counts == {"pending": 1, "synced": 1}
