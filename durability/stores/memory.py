"""The in-process store (``memory://``): a real backend, not a stub.

It keeps encoded rows, exactly as the other providers do, so every value goes through the
codec and the fast tests catch codec bugs; one lock makes it safe for threads. It lives with
its process: it holds no parked run (no other worker could read it) and no outbox, and the
sweep reports its waiting horizon as skipped. ``memory://name`` shares one store per name
within the process; plain ``memory://`` is a fresh store every time.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, ClassVar

from durability.clock import to_micros
from durability.errors import CheckpointConflict, LeaseHeld, LeaseLost
from durability.model import Deleted, Lease, ThreadRecord, Tombstone
from durability.settings import Retention
from durability.stores import rows
from durability.stores.base import Store, ThreadPage, conflict_message
from durability.stores.ledger import Ledger, lease_held_message, lease_lost_message
from durability.stores.rows import CheckpointKey, EncodedCheckpoint, EncodedWrite, Select
from durability.stores.scans import (
    CHECKPOINT_COLUMNS,
    THREAD_COLUMNS,
    Columns,
    Scans,
    column_chunks,
    row_scalars,
    thread_row,
)
from durability.stores.sealing import Reseal
from durability.stores.tombstones import EraseRequest, Tombstones, new_secret


@dataclass
class _LedgerRow:
    owner: str | None = None
    run_id: str | None = None
    started_at: datetime | None = None
    retention: Retention = field(default_factory=Retention)
    finished_at: datetime | None = None
    due_at: datetime | None = None
    lease: Lease | None = None


@dataclass
class _Data:
    lock: threading.RLock = field(default_factory=threading.RLock)
    seq: int = 0
    generation: int | None = None
    rows: dict[str, list[EncodedCheckpoint]] = field(default_factory=dict)
    ids: dict[tuple[str, str, str], EncodedCheckpoint] = field(default_factory=dict)
    writes: dict[tuple[str, str, str], dict[tuple[str, int], EncodedWrite]] = field(
        default_factory=dict
    )
    ledger: dict[str, _LedgerRow] = field(default_factory=dict)
    secret: str = field(default_factory=new_secret)
    tombstones: dict[str, Tombstone] = field(default_factory=dict)
    erase_requests: dict[tuple[str, str], EraseRequest] = field(default_factory=dict)


_ORDER = {
    "seq": (lambda r: r.seq or 0, False),
    "seq_desc": (lambda r: r.seq or 0, True),
    "id_desc": (lambda r: r.checkpoint_id, True),
}


class MemoryStore(Store):
    """Checkpoints in a dict, encoded through the codec, guarded by one lock."""

    provider = "memory"
    _named: ClassVar[dict[str, _Data]] = {}
    _named_lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, url: str = "memory://", **kwargs: Any) -> None:
        super().__init__(url=url, **kwargs)
        name = url.partition("://")[2].strip("/")
        if name:
            with MemoryStore._named_lock:
                self._data = MemoryStore._named.setdefault(name, _Data())
        else:
            self._data = _Data()
        self.ledger = MemoryLedger(self)
        self.scans = MemoryScans(self)
        self.tombstones = MemoryTombstones(self)

    def _setup(self) -> None:
        pass

    def _read_generation(self) -> int | None:
        return self._data.generation

    def _write_generation(self, generation: int) -> None:
        self._data.generation = generation

    def _has_any_checkpoint(self) -> bool:
        return bool(self._data.ids)

    def _wipe(self) -> None:
        d = self._data
        with d.lock:
            d.rows.clear()
            d.ids.clear()
            d.writes.clear()
            d.ledger.clear()
            d.tombstones.clear()
            d.erase_requests.clear()

    # ------------------------------------------------------------------ checkpoints

    def _insert(self, rows: list[EncodedCheckpoint], *, synced: bool) -> list[int]:
        d = self._data
        with d.lock:
            self._refuse_erased({r.thread_id for r in rows}, "put a checkpoint")
            keys = [(r.thread_id, r.namespace, r.checkpoint_id) for r in rows]
            for key in keys:
                if key in d.ids or keys.count(key) > 1:
                    raise CheckpointConflict(conflict_message(*key))
            seqs = []
            for key, row in zip(keys, rows, strict=True):
                d.seq += 1
                stored = replace(row, seq=d.seq)
                d.rows.setdefault(row.thread_id, []).append(stored)
                d.ids[key] = stored
                seqs.append(d.seq)
            return seqs

    def _select(self, query: Select) -> list[EncodedCheckpoint]:
        with self._data.lock:
            rows = [r for r in self._data.rows.get(query.thread_id, ()) if query.matches(r, r.seq)]
        key, reverse = _ORDER[query.order]
        rows.sort(key=key, reverse=reverse)
        return rows if query.limit is None else rows[: query.limit]

    def _refuse_erased(self, thread_ids: set[str], action: str) -> None:
        """Refuse a write to a tombstoned thread (called under the lock)."""
        if self._data.tombstones:
            assert self.tombstones is not None
            for thread_id in thread_ids:
                stone = self._data.tombstones.get(self.tombstones.hash_of(thread_id))
                if stone is not None:
                    raise self.tombstones.refusal(thread_id, action, stone)

    def _insert_writes(self, rows: list[EncodedWrite]) -> None:
        with self._data.lock:
            self._refuse_erased({w.thread_id for w in rows}, "store a pending write")
            for w in rows:
                bucket = self._data.writes.setdefault(
                    (w.thread_id, w.namespace, w.checkpoint_id), {}
                )
                key = (w.task_id, w.idx)
                if w.idx < 0 or key not in bucket:
                    bucket[key] = w

    def _select_writes(
        self, thread_id: str, keys: list[CheckpointKey]
    ) -> Mapping[CheckpointKey, Sequence[EncodedWrite]]:
        writes = self._data.writes
        with self._data.lock:
            return {
                (ns, cid): list(writes.get((thread_id, ns, cid), {}).values()) for ns, cid in keys
            }

    def _reseal(self, changes: Sequence[Reseal]) -> None:
        with self._data.lock:
            for change in changes:
                address = (change.thread_id, change.namespace, change.checkpoint_id)
                row = self._data.ids.get(address)
                if row is not None and row.state == change.old:
                    row.state, row.size_bytes = change.new, row.size_bytes + change.delta

    def _set_status(self, address: rows.CheckpointAddress, change: rows.StatusChange) -> bool:
        with self._data.lock:
            row = self._data.ids.get(address)
            if row is None:
                return False
            row.apply(change)
            return True

    # ------------------------------------------------------------------ threads

    def _thread_page(self, cursor: str | None, limit: int) -> ThreadPage:
        with self._data.lock:
            names = sorted(set(self._data.rows) | set(self._data.ledger))
            start = 0 if cursor is None else bisect.bisect_right(names, cursor)
            chosen = names[start : start + limit]
            records = [r for r in (self._record(t) for t in chosen) if r is not None]
        more = start + limit < len(names)
        return ThreadPage(records, chosen[-1] if more and chosen else None)

    def _thread_record(self, thread_id: str) -> ThreadRecord | None:
        with self._data.lock:
            return self._record(thread_id)

    def _record(self, thread_id: str) -> ThreadRecord | None:
        rows = self._data.rows.get(thread_id, [])
        ledger = self._data.ledger.get(thread_id)
        if not rows and ledger is None:
            return None
        ledger = ledger or _LedgerRow()
        return ThreadRecord(
            thread_id=thread_id,
            owner=ledger.owner,
            run_id=ledger.run_id,
            started_at=ledger.started_at,
            declared_waiting=ledger.retention.waiting,
            declared_finished=ledger.retention.finished,
            finished_at=ledger.finished_at,
            due_at=ledger.due_at,
            lease=ledger.lease,
            checkpoints=len(rows),
            size_bytes=sum(r.size_bytes for r in rows),
            newest_at=max((r.created_at for r in rows), default=None),
            newest_seq=rows[-1].seq if rows else None,
        )

    def _delete(self, thread_id: str, keys: list[CheckpointKey] | None) -> Deleted:
        d = self._data
        with d.lock:
            rows = d.rows.get(thread_id, [])
            doomed = {(r.namespace, r.checkpoint_id) for r in rows} if keys is None else set(keys)
            kept = [r for r in rows if (r.namespace, r.checkpoint_id) not in doomed]
            if kept:
                d.rows[thread_id] = kept
            else:
                d.rows.pop(thread_id, None)
            for namespace, checkpoint_id in doomed:
                d.ids.pop((thread_id, namespace, checkpoint_id), None)
            if keys is None:
                doomed = {(k[1], k[2]) for k in d.writes if k[0] == thread_id}
                d.ledger.pop(thread_id, None)
            writes = sum(len(d.writes.pop((thread_id, ns, cid), {})) for ns, cid in doomed)
        return Deleted(checkpoints=len(rows) - len(kept), writes=writes)


class MemoryLedger(Ledger):
    """The memory store's ledger: a record per thread beside its rows."""

    store: MemoryStore

    def _row(self, thread_id: str) -> _LedgerRow:
        return self.store._data.ledger.setdefault(thread_id, _LedgerRow())

    def _start(
        self, thread_id: str, run_id: str, owner: str, retention: Retention, now: datetime
    ) -> None:
        with self.store._data.lock:
            row = self._row(thread_id)
            row.owner, row.run_id, row.started_at, row.retention = owner, run_id, now, retention

    def _mark(self, thread_id: str, finished_at: datetime, due: datetime) -> None:
        with self.store._data.lock:
            row = self._row(thread_id)
            row.finished_at, row.due_at = finished_at, due

    def _unmark(self, thread_id: str) -> None:
        with self.store._data.lock:
            row = self.store._data.ledger.get(thread_id)
            if row is not None:
                row.finished_at = row.due_at = None

    def _acquire(
        self, thread_id: str, holder: str, run_id: str, now: datetime, expires_at: datetime
    ) -> Lease:
        with self.store._data.lock:
            row = self._row(thread_id)
            current = row.lease
            if current is not None and current.holder != holder and current.live(now):
                raise LeaseHeld(lease_held_message(thread_id, current))
            row.lease = Lease(
                thread_id=thread_id,
                holder=holder,
                run_id=run_id,
                acquired_at=now,
                expires_at=expires_at,
            )
            return row.lease

    def _renew(self, thread_id: str, holder: str, now: datetime, expires_at: datetime) -> Lease:
        with self.store._data.lock:
            row = self.store._data.ledger.get(thread_id)
            current = row.lease if row else None
            if row is None or current is None or current.holder != holder:
                raise LeaseLost(lease_lost_message(thread_id, holder, current))
            row.lease = replace(current, expires_at=expires_at)
            return row.lease

    def _release(self, thread_id: str, holder: str) -> None:
        with self.store._data.lock:
            row = self.store._data.ledger.get(thread_id)
            if row is not None and row.lease is not None and row.lease.holder == holder:
                row.lease = None


class MemoryTombstones(Tombstones):
    """The memory store's tombstones: a dict by keyed hash, under the store's lock."""

    store: MemoryStore

    def _load_secret(self) -> str:
        return self.store._data.secret

    def _get(self, thread_id: str, digest: str) -> Tombstone | None:
        with self.store._data.lock:
            return self.store._data.tombstones.get(digest)

    def _bury(self, thread_id: str, stone: Tombstone) -> Tombstone:
        with self.store._data.lock:
            return self.store._data.tombstones.setdefault(stone.hash, stone)

    def _lift(self, thread_id: str, digest: str) -> bool:
        with self.store._data.lock:
            return self.store._data.tombstones.pop(digest, None) is not None

    def _record_receipt(self, thread_id: str, digest: str, receipt: str) -> None:
        with self.store._data.lock:
            stone = self.store._data.tombstones.get(digest)
            if stone is not None:
                self.store._data.tombstones[digest] = replace(stone, receipt=receipt)

    def _put_request(self, request: EraseRequest) -> EraseRequest:
        with self.store._data.lock:
            key = (request.tombstone, request.project_id)
            return self.store._data.erase_requests.setdefault(key, request)

    def _requests(self) -> list[EraseRequest]:
        with self.store._data.lock:
            return list(self.store._data.erase_requests.values())

    def _update_request(self, request: EraseRequest) -> None:
        with self.store._data.lock:
            key = (request.tombstone, request.project_id)
            if key in self.store._data.erase_requests:
                self.store._data.erase_requests[key] = request

    def _drop_request(self, digest: str, project_id: str) -> None:
        with self.store._data.lock:
            self.store._data.erase_requests.pop((digest, project_id), None)

    def _count(self) -> int:
        return len(self.store._data.tombstones)

    def _all(self) -> list[Tombstone]:
        with self.store._data.lock:
            return list(self.store._data.tombstones.values())


class MemoryScans(Scans):
    """Column reads straight from the memory store's rows."""

    store: MemoryStore

    def _checkpoint_columns(
        self, thread_id: str | None, columns: tuple[str, ...], chunk_size: int
    ) -> Iterator[Columns]:
        data = self.store._data
        with data.lock:
            names = [thread_id] if thread_id is not None else list(data.rows)
            rows = [r for name in names for r in data.rows.get(name, ())]
        # Memory keeps no outbox: synced and sync_error are unknown.
        scalars = ((*row_scalars(r)[:11], None, None, r.runner) for r in rows)
        return column_chunks(CHECKPOINT_COLUMNS, scalars, chunk_size)

    def _thread_columns(self, chunk_size: int) -> Iterator[Columns]:
        data = self.store._data
        with data.lock:
            names = set(data.rows) | set(data.ledger)
            found = [
                (
                    self.store._record(name),
                    [
                        (r.seq or 0, to_micros(r.created_at), r.status, r.run_id)
                        for r in data.rows.get(name, ())
                    ],
                )
                for name in names
            ]
        rows = (thread_row(record, points) for record, points in found if record is not None)
        return column_chunks(THREAD_COLUMNS, rows, chunk_size)
