"""Archive before delete: a sweep's archive, read back read-only, copied back unchanged."""

from __future__ import annotations

import gzip
import json
import shutil
import sqlite3
from dataclasses import asdict
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import langgraph_graph as lg
import pytest

import durability
from durability.errors import ReadOnlyStoreError
from durability.model import Checkpoint, PendingWrite
from durability.settings import Settings
from durability.sweep import sweep
from durability.transfer import plan_copy

SETTINGS = Settings(waiting_retention=timedelta(days=30), finished_retention=timedelta(days=7))


def _contents(store: durability.stores.Store) -> dict[str, Any]:
    """Every thread's checkpoints (no seq or size), writes and ledger fields."""
    out: dict[str, Any] = {}
    for record in store.iter_threads():
        cps = store._select(durability.stores.rows.Select(record.thread_id, None))
        rows = [{k: v for k, v in asdict(r).items() if k not in ("seq",)} for r in cps]
        keys = [(r["namespace"], r["checkpoint_id"]) for r in rows]
        writes = store._select_writes(record.thread_id, keys)
        out[record.thread_id] = {
            "rows": rows,
            "writes": {f"{k}": [asdict(w) for w in ws] for k, ws in sorted(writes.items())},
            "ledger": (record.owner, record.started_at, record.finished_at, record.due_at),
        }
    return out


def test_a_langgraph_sweep_archive_reads_back_and_copies_back_identical(tmp_path: Path) -> None:
    """LangGraph SQLite → sweep --archive → archive:/// → copy → same rows as copying the original."""
    from langgraph.checkpoint.sqlite import SqliteSaver

    db = tmp_path / "checkpoints.db"
    saver = SqliteSaver(sqlite3.connect(db, check_same_thread=False))
    for t in ("a", "b", "c"):
        lg.start(saver, t)
    lg.resume_sync(saver, "b", "yes")
    saver.conn.close()
    original = tmp_path / "original.db"
    shutil.copy(db, original)
    url = f"langgraph+sqlite:///{db}?writable=true"
    with durability.open(url, settings=SETTINGS) as store:
        store.record_run_start("b", run_id="r1", owner="billing")
        store.mark_finished("b")
    later = datetime.now(UTC) + timedelta(days=60)
    with durability.open(url, settings=SETTINGS) as store:
        result = sweep(store, now=later, archive=tmp_path / "archive")
        assert sorted(result.deleted_ids()) == ["a", "b", "c"]
        assert list(store.iter_threads()) == []
    expected = f"sqlite:///{tmp_path / 'expected.db'}"
    durability.copy(f"langgraph+sqlite:///{original}", expected)
    back = f"sqlite:///{tmp_path / 'back.db'}"
    archive = f"archive:///{tmp_path / 'archive'}"
    durability.copy(archive, back)
    with durability.open(expected) as want, durability.open(back) as got:
        mine, theirs = _contents(got), _contents(want)
    assert {t: v["rows"] for t, v in mine.items()} == {t: v["rows"] for t, v in theirs.items()}
    assert {t: v["writes"] for t, v in mine.items()} == {t: v["writes"] for t, v in theirs.items()}
    assert mine["b"]["ledger"][0] == "billing"
    with durability.open(archive) as read:
        assert read.latest("b").status == "completed"  # type: ignore[union-attr]
        assert plan_copy(read, back).summary()["counts"]["skip"] == 3


def test_a_durability_sweep_archive_round_trips_and_the_archive_is_read_only(
    tmp_path: Path,
) -> None:
    """A SQLite store's due thread: archived with writes and ledger, then refused as a target."""
    url = f"sqlite:///{tmp_path / 's.db'}"
    with durability.open(url, settings=SETTINGS) as store:
        store.put_many(
            [Checkpoint(thread_id="t", checkpoint_id=f"c{i}", state={"i": i}) for i in range(3)]
        )
        store.put_writes(
            [
                PendingWrite(
                    thread_id="t", checkpoint_id="c2", task_id="x", idx=0, channel="n", value=5
                )
            ]
        )
        store.record_run_start("t", run_id="r", owner="ops")
        store.mark_finished("t")
        before = _contents(store)
        result = sweep(store, now=datetime.now(UTC) + timedelta(days=8), archive=tmp_path / "ar")
        assert result.deleted_ids() == ["t"]
    (path,) = (tmp_path / "ar").glob("*.jsonl.gz")
    with gzip.open(path) as lines:
        kinds = [json.loads(line)["kind"] for line in lines]
    assert kinds == ["header", "thread", "checkpoint", "checkpoint", "checkpoint", "write"]
    back = f"sqlite:///{tmp_path / 'back.db'}"
    durability.copy(f"archive:///{tmp_path / 'ar'}", back)
    with durability.open(back) as store:
        assert _contents(store)["t"]["rows"] == before["t"]["rows"]
        assert _contents(store)["t"]["ledger"] == before["t"]["ledger"]
    with (
        durability.open(f"archive:///{tmp_path / 'ar'}") as read,
        pytest.raises(ReadOnlyStoreError),
    ):
        read.put(Checkpoint(thread_id="t2"))


def _write_archive(directory: Path, members: int, threads: int, payload: int) -> None:
    """An archive of ``members`` batches of ``threads`` threads, 3 checkpoints each, the last
    batch archived twice (a sweep killed between archiving a batch and deleting it)."""
    from durability.archive.format import ArchiveWriter
    from durability.stores.rows import EncodedCheckpoint, EncodedWrite

    now = datetime(2026, 1, 1, tzinfo=UTC)
    writer = ArchiveWriter(directory, source="sqlite:///x.db", provider="sqlite", now=now)
    batches = []
    for m in range(members):
        names = [f"m{m:03}-t{t:03}" for t in range(threads)]
        cps = [
            EncodedCheckpoint.encode(
                Checkpoint(thread_id=n, checkpoint_id=f"c{i}", state={"pad": "x" * payload}),
                created_at=now + timedelta(seconds=i),
            )
            for n in names
            for i in range(3)
        ]
        ws = [
            EncodedWrite.encode(
                PendingWrite(
                    thread_id=n, checkpoint_id="c2", task_id="t", idx=0, channel="n", value=1
                )
            )
            for n in names
        ]
        batches.append((cps, ws))
        writer.write_batch([], cps, ws, now)
    writer.write_batch([], *batches[-1], now)
    writer.close()


def test_a_large_archive_opens_and_reads_holding_its_index_and_a_few_batches(
    tmp_path: Path,
) -> None:
    """Opening and reading every thread never holds more than a few batches' rows: the peak is
    far below the archive's decoded size; a batch archived twice counts once; every row reads."""
    import tracemalloc

    from durability.archive.store import MEMBERS_KEPT

    members, threads, payload = 64, 20, 4000
    _write_archive(tmp_path / "ar", members, threads, payload)
    decoded = members * threads * 3 * payload
    tracemalloc.start()
    with durability.open(f"archive:///{tmp_path / 'ar'}") as read:
        records = list(read.iter_threads())
        assert len(records) == members * threads
        assert {r.checkpoints for r in records} == {3}
        for record in records:
            history = read.history(record.thread_id)
            assert [c.state["pad"] for c in history] == ["x" * payload] * 3
            assert [w.value for w in read.writes(record.thread_id, "c2")] == [1]
        assert len(read._decoded) <= MEMBERS_KEPT
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < decoded / 4, (peak, decoded)


def test_a_batch_cut_short_is_not_read(tmp_path: Path) -> None:
    """A sweep killed while writing its last batch: that batch (never deleted) is left out."""
    _write_archive(tmp_path / "ar", 2, 3, 10)
    (path,) = (tmp_path / "ar").glob("*.jsonl.gz")
    data = path.read_bytes()
    path.write_bytes(data + gzip.compress(b'{"kind":"header"}\n' * 50)[:-20])
    with durability.open(f"archive:///{tmp_path / 'ar'}") as read:
        assert len(list(read.iter_threads())) == 6


@pytest.mark.parametrize(
    "record",
    [
        b"not json",
        b"[1]",
        b'{"kind": "checkpoint", "foo": 1}',
        b'{"kind": "write"}',
        b'{"kind": "thread", "thread_id": "t"}',
    ],
)
def test_a_record_durability_never_writes_is_refused_naming_the_file(
    tmp_path: Path, record: bytes
) -> None:
    """A damaged or foreign file in the directory: opening refuses with the format error,
    naming the file and the fix, never a bare decoding error (and never the record's text)."""
    from durability.errors import CheckpointStoreFormatError

    _write_archive(tmp_path / "ar", 1, 2, 10)
    bad = tmp_path / "ar" / "zz-bad.jsonl.gz"
    bad.write_bytes(gzip.compress(record + b"\n"))
    with (
        pytest.raises(CheckpointStoreFormatError) as refused,
        durability.open(f"archive:///{tmp_path / 'ar'}") as read,
    ):
        list(read.iter_threads())
    message = str(refused.value)
    assert "zz-bad.jsonl.gz" in message
    assert "move the file out" in message


def _swept_archive(tmp_path: Path, batches: int) -> Path:
    """A sweep of ``batches`` batches of finished threads (checkpoints, writes and ledger
    records), the last batch archived a second time; the archive directory."""
    from durability.archive.format import ArchiveWriter
    from durability.stores.rows import Select

    url = f"sqlite:///{tmp_path / 'swept.db'}"
    directory = tmp_path / "ar"
    with durability.open(url, settings=SETTINGS) as store:
        for t in range(batches * 3):
            thread = f"t{t:02}"
            store.put_many([Checkpoint(thread_id=thread, state={"i": i}) for i in range(t % 4 + 1)])
            store.record_run_start(thread, run_id=f"r{t}", owner=f"o{t % 2}")
            store.mark_finished(thread)
        last = [f"t{t:02}" for t in range(batches * 3 - 3, batches * 3)]
        again = [r for t in last for r in store._select(Select(t, None))]
        records = [store.thread(t) for t in last]
        sweep(store, now=datetime.now(UTC) + timedelta(days=8), archive=directory, batch_size=3)
    writer = ArchiveWriter(directory, source=url, provider="sqlite", now=datetime.now(UTC))
    writer.write_batch([r for r in records if r is not None], again, [], datetime.now(UTC))
    writer.close()
    return directory


def _threads_seen(directory: Path) -> dict[str, Any]:
    with durability.open(f"archive:///{directory}") as read:
        return {
            r.thread_id: (r.checkpoints, r.size_bytes, r.newest_at, r.newest_seq, r.owner, r.due_at)
            for r in read.iter_threads()
        } | {"contents": _contents(read)}


def test_an_archive_opens_from_its_index_and_reads_the_same_as_scanning_it(
    tmp_path: Path,
) -> None:
    """Each archive file has an index beside it; opening from it gives every thread's counts,
    bytes, newest time and seq, ledger record and rows exactly as scanning the file does."""
    directory = _swept_archive(tmp_path, 4)
    indexes = sorted(directory.glob("*.jsonl.gz.index"))
    assert len(indexes) == 2, "one per archive file"
    from_index = _threads_seen(directory)
    assert len(from_index) == 13
    for index in indexes:
        index.unlink()
    assert _threads_seen(directory) == from_index


def test_opening_an_indexed_archive_reads_the_index_not_the_batches(tmp_path: Path) -> None:
    """A batch damaged on disk is not read while opening an indexed archive (every thread is
    listed from the index); the same archive without its index stops at the damage."""
    _write_archive(tmp_path / "ar", 6, 4, 10)
    (path,) = (tmp_path / "ar").glob("*.jsonl.gz")
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    data[middle : middle + 8] = b"\xff" * 8
    path.write_bytes(bytes(data))
    with durability.open(f"archive:///{tmp_path / 'ar'}") as read:
        assert len(list(read.iter_threads())) == 24
    Path(f"{path}.index").unlink()
    with durability.open(f"archive:///{tmp_path / 'ar'}") as read:
        assert len(list(read.iter_threads())) < 24


@pytest.mark.parametrize(
    "damage",
    [
        lambda lines: lines[:-1],  # the sweep was killed between a batch and its index line
        lambda lines: [*lines[:-1], lines[-1][: len(lines[-1]) // 2]],  # a line cut short
        lambda lines: [*lines[:2], b'{"offset": 0, "length": 1}', *lines[2:]],  # out of place
        lambda lines: [
            lines[0],
            lines[1].replace(b'"threads":{', b'"threads":{"x":["1",0,null,0],'),
        ],
        lambda lines: [b'{"kind":"header","format":"durability-archive-index","version":9}'],
        lambda lines: [b"junk"],
        lambda lines: [],
    ],
)
def test_an_index_that_falls_short_is_completed_from_the_archive(
    tmp_path: Path, damage: Any
) -> None:
    """Members an index does not list, or lists in a way it cannot be read, are read from the
    archive itself: the archive reads the same."""
    directory = _swept_archive(tmp_path, 3)
    expected = _threads_seen(directory)
    for index in directory.glob("*.index"):
        index.write_bytes(b"\n".join(damage(index.read_bytes().splitlines())))
    assert _threads_seen(directory) == expected


def test_a_sweep_that_archives_nothing_leaves_no_files(tmp_path: Path) -> None:
    """The archive file and its index are both removed when no batch was written."""
    from durability.archive.format import ArchiveWriter

    writer = ArchiveWriter(
        tmp_path / "ar", source="memory://", provider="memory", now=datetime.now(UTC)
    )
    writer.close()
    assert list((tmp_path / "ar").iterdir()) == []
