"""A store of one's own: the core contract's primitives over plain dicts, and nothing else.

It holds checkpoints and pending writes in this process, keeps no ledger, parks or outbox
(those capabilities stay ``None``), and passes the core conformance checks::

    from durability.stores import register_provider
    from durability.testing import CORE_CHECKS, StoreTarget

    register_provider("mini", MinimalStore)
    for check in CORE_CHECKS:
        check(StoreTarget("mini://example"))

Everything a caller uses — id checks, encoding, ``latest``, ``history``, ``threads``, the
scans the frames read — comes from :class:`durability.stores.Store`, built on these methods.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from durability.errors import CheckpointConflict
from durability.model import Deleted, ThreadRecord
from durability.stores import Store, ThreadPage, rows
from durability.stores.rows import CheckpointKey, EncodedCheckpoint, EncodedWrite, Select

_ORDER: dict[str, tuple[Any, bool]] = {
    "seq": (lambda row: row.seq, False),
    "seq_desc": (lambda row: row.seq, True),
    "id_desc": (lambda row: row.checkpoint_id, True),
}


class _Data:
    """One store's contents, shared by every handle opened on the same URL."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.seq = 0
        self.generation: int | None = None
        self.rows: dict[str, list[EncodedCheckpoint]] = {}
        self.writes: dict[tuple[str, str, str], dict[tuple[str, int], EncodedWrite]] = {}


class MinimalStore(Store):
    """Checkpoints in dicts: ``mini://name`` (one store per name in the process)."""

    provider = "mini"
    _stores: ClassVar[dict[str, _Data]] = {}

    def __init__(self, url: str, **options: Any) -> None:
        super().__init__(url=url, **options)
        self.data = self._stores.setdefault(url, _Data())

    def _setup(self) -> None:
        pass  # nothing to create

    def _read_generation(self) -> int | None:
        return self.data.generation

    def _write_generation(self, generation: int) -> None:
        self.data.generation = generation

    def _wipe(self) -> None:
        with self.data.lock:
            self.data.rows.clear()
            self.data.writes.clear()

    def _insert(self, rows: list[EncodedCheckpoint], *, synced: bool) -> list[int]:
        with self.data.lock:
            keys = [(r.thread_id, r.namespace, r.checkpoint_id) for r in rows]
            for key in keys:
                if keys.count(key) > 1 or self._find(*key) is not None:
                    raise CheckpointConflict(f"cannot put checkpoint {key[2]!r}: already stored")
            seqs = []
            for row in rows:
                self.data.seq += 1
                row.seq = self.data.seq
                self.data.rows.setdefault(row.thread_id, []).append(row)
                seqs.append(row.seq)
            return seqs

    def _find(self, thread_id: str, namespace: str, checkpoint_id: str) -> EncodedCheckpoint | None:
        for row in self.data.rows.get(thread_id, ()):
            if row.namespace == namespace and row.checkpoint_id == checkpoint_id:
                return row
        return None

    def _select(self, query: Select) -> list[EncodedCheckpoint]:
        with self.data.lock:
            rows = [r for r in self.data.rows.get(query.thread_id, ()) if query.matches(r, r.seq)]
        key, reverse = _ORDER[query.order]
        rows.sort(key=key, reverse=reverse)
        return rows[: query.limit] if query.limit is not None else rows

    def _insert_writes(self, rows: list[EncodedWrite]) -> None:
        with self.data.lock:
            for w in rows:
                bucket = self.data.writes.setdefault(
                    (w.thread_id, w.namespace, w.checkpoint_id), {}
                )
                if w.idx < 0 or (w.task_id, w.idx) not in bucket:
                    bucket[(w.task_id, w.idx)] = w

    def _select_writes(
        self, thread_id: str, keys: list[CheckpointKey]
    ) -> Mapping[CheckpointKey, Sequence[EncodedWrite]]:
        with self.data.lock:
            return {
                (ns, cid): list(self.data.writes.get((thread_id, ns, cid), {}).values())
                for ns, cid in keys
            }

    def _thread_page(self, cursor: str | None, limit: int) -> ThreadPage:
        with self.data.lock:
            names = sorted(self.data.rows)
            start = 0 if cursor is None else bisect.bisect_right(names, cursor)
            chosen = names[start : start + limit]
            records = [self._record(name) for name in chosen]
        more = start + limit < len(names)
        return ThreadPage([r for r in records if r is not None], chosen[-1] if more else None)

    def _thread_record(self, thread_id: str) -> ThreadRecord | None:
        with self.data.lock:
            return self._record(thread_id)

    def _record(self, thread_id: str) -> ThreadRecord | None:
        rows = self.data.rows.get(thread_id)
        if not rows:
            return None
        return ThreadRecord(
            thread_id=thread_id,
            checkpoints=len(rows),
            size_bytes=sum(r.size_bytes for r in rows),
            newest_at=max(r.created_at for r in rows),
            newest_seq=rows[-1].seq,
        )

    def _delete(self, thread_id: str, keys: list[CheckpointKey] | None) -> Deleted:
        with self.data.lock:
            rows = self.data.rows.get(thread_id, [])
            doomed = {(r.namespace, r.checkpoint_id) for r in rows} if keys is None else set(keys)
            if keys is None:  # the whole thread: every write too, even of a missing checkpoint
                doomed |= {(ns, cid) for (t, ns, cid) in self.data.writes if t == thread_id}
            kept = [r for r in rows if (r.namespace, r.checkpoint_id) not in doomed]
            self.data.rows[thread_id] = kept
            if not kept:
                del self.data.rows[thread_id]
            writes = sum(len(self.data.writes.pop((thread_id, ns, cid), {})) for ns, cid in doomed)
        return Deleted(checkpoints=len(rows) - len(kept), writes=writes)

    def _set_status(self, address: rows.CheckpointAddress, change: rows.StatusChange) -> bool:
        with self.data.lock:
            row = self._find(*address)
            if row is None:
                return False
            row.apply(change)  # the new status and context; size_bytes follows
            return True
