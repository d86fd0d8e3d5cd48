"""The sweep's archive step: write what a batch holds to the archive, flush it, then delete
exactly what was written (``sweep(..., archive=DIR)``, ``durability sweep --archive DIR``).

Each delete round of a batch reads every checkpoint (as the codec keeps it), its pending writes
and the thread's ledger record, writes them as one gzip member of the archive and flushes it to
disk, and only then deletes those checkpoints by key. Rows a writer adds meanwhile are not
deleted in that round: the next round archives them. Once a thread holds no checkpoint the
thread itself is deleted (its ledger record, which is archived, and what no checkpoint holds:
orphan writes, LangGraph blobs no checkpoint references). If that last delete finds a
checkpoint written in the instant since the check, the sweep fails loudly naming it.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from durability.archive.format import ArchiveWriter
from durability.errors import SweepError
from durability.model import Deleted, ThreadRecord
from durability.stores.base import Store
from durability.stores.rows import EncodedCheckpoint, EncodedWrite, Select


def archive_and_delete(
    store: Store, thread_ids: Sequence[str], writer: ArchiveWriter, now: datetime
) -> dict[str, Deleted]:
    """One archive round: archive what the threads hold, flush, delete those checkpoints."""
    store.ready()
    records: list[ThreadRecord] = []
    checkpoints: list[EncodedCheckpoint] = []
    writes: list[EncodedWrite] = []
    keys: dict[str, list[tuple[str, str]]] = {}
    for thread_id in thread_ids:
        rows = [_encoded(r) for r in store._select(Select(thread_id, None))]
        keys[thread_id] = [(r.namespace, r.checkpoint_id) for r in rows]
        found = store._select_writes(thread_id, keys[thread_id]) if rows else {}
        writes += [_encoded_write(w) for ws in found.values() for w in ws]
        checkpoints += rows
        record = store.thread(thread_id)
        if record is not None and record.started_at is not None:
            records.append(record)
    writer.write_batch(records, checkpoints, writes, now)
    return {t: store.delete_checkpoints(t, k) if k else Deleted() for t, k in keys.items()}


def delete_emptied(store: Store, thread_ids: Sequence[str]) -> dict[str, Deleted]:
    """Delete the threads the rounds emptied (ledger records, orphans); refuse a raced row."""
    removed = store.delete_threads(thread_ids)
    late = [t for t, d in removed.items() if d.checkpoints]
    if late:
        raise SweepError(
            f"the sweep failed: thread {late[0]!r} received {removed[late[0]].checkpoints} "
            "checkpoints in the instant between its last archive round and its final delete, "
            "and they were deleted without being archived; stop the runs writing to due "
            "threads (a live-thread filter can claim them), then sweep again"
        )
    return removed


def _encoded(row: object) -> EncodedCheckpoint:
    if isinstance(row, EncodedCheckpoint):
        return row
    return EncodedCheckpoint.encode(row.decode())  # type: ignore[attr-defined]


def _encoded_write(row: object) -> EncodedWrite:
    if isinstance(row, EncodedWrite):
        return row
    return EncodedWrite.encode(row.decode())  # type: ignore[attr-defined]
