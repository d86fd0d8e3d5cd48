"""The Redis store's ledger (fields of the thread's meta hash) and parks (its ``p`` hash).

Each operation is one script over the thread's slot, then the cross-slot ``finished`` or
``parks`` index is brought in line. A claim carries a token, so a claim sent again after a
dropped connection recognises its own win.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from durability.clock import from_micros, to_micros
from durability.errors import CheckpointConflict, LeaseHeld, LeaseLost, ParkRefused
from durability.model import Lease, Park, ThreadRecord
from durability.settings import Retention
from durability.stores.base import conflict_message
from durability.stores.ledger import Ledger, lease_held_message, lease_lost_message
from durability.stores.parks import Parks, park_exists_message
from durability.stores.redis import documents as docs
from durability.stores.redis.keys import IndexOps, member, thread_tag
from durability.stores.rows import EncodedCheckpoint

if TYPE_CHECKING:
    from durability.stores.redis.store import RedisStore


class RedisLedger(Ledger):
    """Run starts, finished marks and leases in each thread's meta hash."""

    store: RedisStore

    def _set(
        self, action: str, thread_id: str, values: dict[str, Any], drop: Sequence[str] = ()
    ) -> None:
        args: list[Any] = [thread_id]
        for field, value in values.items():
            args += [field, value]
        if drop:
            args += ["--", *drop]
        self.store.eval(action, "ledger", thread_tag(thread_id), args)

    def _start(
        self, thread_id: str, run_id: str, owner: str, retention: Retention, now: datetime
    ) -> None:
        values: dict[str, Any] = {"ow": owner, "ri": run_id, "st": to_micros(now)}
        drop = []
        for field, value in (("dw", retention.waiting), ("df", retention.finished)):
            if value is None:
                drop.append(field)
            else:
                values[field] = value // timedelta(microseconds=1)
        self._set("record a run start", thread_id, values, drop)
        self.store.index("index a thread", add=IndexOps(threads={thread_tag(thread_id): 0}))

    def _mark(self, thread_id: str, finished_at: datetime, due: datetime) -> None:
        tag = thread_tag(thread_id)
        self._set(
            "mark a thread finished",
            thread_id,
            {"fa": to_micros(finished_at), "da": to_micros(due)},
        )
        add = IndexOps(threads={tag: 0}, finished={tag: to_micros(due)})
        self.store.index("index a finished thread", add=add)

    def _unmark(self, thread_id: str) -> None:
        tag = thread_tag(thread_id)
        self.store.eval("unmark a finished thread", "unmark", tag, [])
        self.store.forget(IndexOps(finished={tag: 0}), [tag])

    def _acquire(
        self, thread_id: str, holder: str, run_id: str, now: datetime, expires_at: datetime
    ) -> Lease:
        tag = thread_tag(thread_id)
        args = [thread_id, holder, run_id, to_micros(now), to_micros(expires_at)]
        out = self.store.eval("take a lease", "lease_acquire", tag, args)
        if out[0] == b"held":
            raise LeaseHeld(lease_held_message(thread_id, docs.lease(thread_id, out[1:])))
        self.store.index("index a thread", add=IndexOps(threads={tag: 0}))
        return Lease(
            thread_id=thread_id,
            holder=holder,
            run_id=run_id,
            acquired_at=now,
            expires_at=expires_at,
        )

    def _renew(self, thread_id: str, holder: str, now: datetime, expires_at: datetime) -> Lease:
        args = [holder, to_micros(expires_at)]
        out = self.store.eval("renew a lease", "lease_renew", thread_tag(thread_id), args)
        if out[0] == b"lost":
            current = docs.lease(thread_id, out[1:]) if len(out) > 1 else None
            raise LeaseLost(lease_lost_message(thread_id, holder, current))
        acquired = out[2].decode()
        return Lease(
            thread_id=thread_id,
            holder=holder,
            run_id=out[1].decode(),
            acquired_at=from_micros(int(acquired)) if acquired else None,
            expires_at=expires_at,
        )

    def _release(self, thread_id: str, holder: str) -> None:
        self.store.eval("release a lease", "lease_release", thread_tag(thread_id), [holder])

    def _finished_due(self, now: datetime) -> list[ThreadRecord]:
        store = self.store

        def due(_retry: bool) -> list[bytes]:
            return list(store.client.zrangebyscore(store.keys.finished, "-inf", to_micros(now)))

        tags = [t.decode() for t in store.run("list finished threads", due)]
        if not tags:
            return []
        records = store.records(tags)
        stale = [t for t, r in zip(tags, records, strict=True) if r is None or r.due_at is None]
        if stale:
            store.forget(IndexOps(finished=dict.fromkeys(stale, 0)), stale)
        return [r for r in records if r is not None and r.due_at is not None and r.due_at <= now]


class RedisParks(Parks):
    """Pending parks in each thread's ``p`` hash, indexed by deadline."""

    store: RedisStore

    def _insert(self, row: EncodedCheckpoint, park: Park, *, synced: bool) -> int:
        tag = thread_tag(park.thread_id)
        deadline = to_micros(park.deadline)
        args = [
            "1" if synced else "0",
            park.thread_id,
            docs.park_doc(park),
            deadline,
            *docs.row_args(row, docs.doc(row)),
        ]
        out = self.store.eval("park a run", "park", tag, args)
        if out[0] == b"erased":
            assert self.store.tombstones is not None
            raise self.store.tombstones.refusal(park.thread_id, "park a run")
        if out[0] == b"park_exists":
            raise ParkRefused(park_exists_message(park.thread_id))
        if out[0] == b"conflict":
            raise CheckpointConflict(
                conflict_message(row.thread_id, row.namespace, row.checkpoint_id)
            )
        seq = int(out[2])
        add = IndexOps(threads={tag: 0}, parks={tag: deadline})
        if not synced:
            add.outbox[member(tag, seq)] = int(out[1])
        self.store.index("index a park", add=add)
        return seq

    def _claim(self, thread_id: str) -> Park | None:
        tag = thread_tag(thread_id)
        found = self.store.eval("claim a park", "claim", tag, [uuid.uuid4().hex])
        self.store.forget(IndexOps(parks={tag: 0}), [tag])
        if found is None:
            return None
        park = docs.unpark(found)
        return park if park.thread_id == thread_id else None

    def _get(self, thread_id: str) -> Park | None:
        found, claimed = self.store.eval(
            "read a park", "park_read", thread_tag(thread_id), [], write=False
        )
        if found is None or claimed is not None:
            return None
        park = docs.unpark(found)
        return park if park.thread_id == thread_id else None

    def _pending(self) -> list[Park]:
        store = self.store
        tags = [
            t.decode()
            for t in store.run(
                "list parks", lambda _r: store.client.zrange(store.keys.parks, 0, -1)
            )
        ]
        if not tags:
            return []
        raw = store.eval_many("list parks", "park_read", [(t, []) for t in tags], write=False)
        found, stale = [], []
        for tag, (park, claimed) in zip(tags, raw, strict=True):
            if park is None or claimed is not None:
                stale.append(tag)
            else:
                found.append(docs.unpark(park))
        if stale:
            store.forget(IndexOps(parks=dict.fromkeys(stale, 0)), stale)
        return found
