"""The SQL store's ledger (``durability_threads``) and parks (``durability_parks``).

A lease is taken with one ``INSERT … ON CONFLICT DO UPDATE … WHERE`` the lease is free,
yours or expired, so two takers never both win; a park is claimed with ``DELETE …
RETURNING``, so of any number of claimers exactly one gets the row.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import Connection as SAConnection

from durability._util import chunks
from durability.clock import from_micros, to_micros
from durability.errors import LeaseHeld, LeaseLost, ParkRefused
from durability.model import Lease, Park, ThreadRecord
from durability.settings import Retention
from durability.stores.ledger import Ledger, RunStart, lease_held_message, lease_lost_message
from durability.stores.parks import Parks, park_exists_message, park_from_texts, park_texts
from durability.stores.rows import EncodedCheckpoint
from durability.stores.sql.engine import reconnecting
from durability.stores.sql.schema import (
    delta,
    duration,
    micros,
    parks,
    thread_key,
    threads,
    time_of,
    where_thread,
)

if TYPE_CHECKING:
    from durability.stores.sql.store import SQLStore

_NO_LEASE = {
    "lease_holder": None,
    "lease_run_id": None,
    "lease_acquired_at": None,
    "lease_expires_at": None,
}


class SQLLedger(Ledger):
    """Run starts, finished marks and leases in the ``durability_threads`` table."""

    store: SQLStore

    def _upsert(self, conn: SAConnection, thread_id: str, **values: Any) -> None:
        stmt = self.store.insert_stmt(threads).values(
            tkey=thread_key(thread_id), thread_id=thread_id, **values
        )
        conn.execute(stmt.on_conflict_do_update(index_elements=["tkey"], set_=values))

    @reconnecting
    def _start(
        self, thread_id: str, run_id: str, owner: str, retention: Retention, now: datetime
    ) -> None:
        with self.store.db.one("record a run start") as conn:
            self._upsert(
                conn,
                thread_id,
                owner=owner,
                run_id=run_id,
                started_at=to_micros(now),
                declared_waiting=duration(retention.waiting),
                declared_finished=duration(retention.finished),
            )

    @reconnecting
    def _start_many(self, starts: list[RunStart], now: datetime, action: str) -> None:
        rows = [
            {
                "tkey": thread_key(s.thread_id),
                "thread_id": s.thread_id,
                "owner": s.owner,
                "run_id": s.run_id,
                "started_at": to_micros(now),
                "declared_waiting": duration(s.retention.waiting if s.retention else None),
                "declared_finished": duration(s.retention.finished if s.retention else None),
            }
            for s in starts
        ]
        with self.store.db.write(action) as conn:
            for chunk in chunks([s.thread_id for s in starts]):
                self.store.tombstones.refuse_any(conn, chunk, action)
            self._upsert_many(conn, rows)

    @reconnecting
    def _declared(self, thread_ids: list[str]) -> dict[str, Retention | None]:
        columns = (threads.c.thread_id, threads.c.declared_waiting, threads.c.declared_finished)
        found: dict[str, Retention | None] = {}
        with self.store.db.read("read declared retentions") as conn:
            for chunk in chunks([thread_key(t) for t in thread_ids]):
                for row in conn.execute(sa.select(*columns).where(threads.c.tkey.in_(chunk))):
                    if row.declared_waiting is not None or row.declared_finished is not None:
                        found[row.thread_id] = Retention(
                            waiting=delta(row.declared_waiting),
                            finished=delta(row.declared_finished),
                        )
        return found

    @reconnecting
    def _mark_many(self, marks: list[tuple[str, datetime, datetime]]) -> None:
        rows = [
            {
                "tkey": thread_key(t),
                "thread_id": t,
                "finished_at": to_micros(finished_at),
                "due_at": to_micros(due),
            }
            for t, finished_at, due in marks
        ]
        with self.store.db.write("mark threads finished") as conn:
            self._upsert_many(conn, rows)

    def _upsert_many(self, conn: SAConnection, rows: list[dict[str, Any]]) -> None:
        """Insert or update the ledger rows (one thread each), by their thread key."""
        stmt = self.store.insert_stmt(threads)
        changed = [c for c in rows[0] if c not in ("tkey", "thread_id")]
        stmt = stmt.on_conflict_do_update(
            index_elements=["tkey"], set_={c: stmt.excluded[c] for c in changed}
        )
        for chunk in chunks(rows):
            conn.execute(stmt, chunk)

    @reconnecting
    def _mark(self, thread_id: str, finished_at: datetime, due: datetime) -> None:
        with self.store.db.one("mark a thread finished") as conn:
            self._upsert(conn, thread_id, finished_at=to_micros(finished_at), due_at=to_micros(due))

    @reconnecting
    def _unmark(self, thread_id: str) -> None:
        with self.store.db.one("unmark a finished thread") as conn:
            conn.execute(
                threads.update()
                .where(*where_thread(thread_id, threads))
                .values(finished_at=None, due_at=None)
            )

    @reconnecting
    def _acquire(
        self, thread_id: str, holder: str, run_id: str, now: datetime, expires_at: datetime
    ) -> Lease:
        values = {
            "lease_holder": holder,
            "lease_run_id": run_id,
            "lease_acquired_at": to_micros(now),
            "lease_expires_at": to_micros(expires_at),
        }
        stmt = self.store.insert_stmt(threads).values(
            tkey=thread_key(thread_id), thread_id=thread_id, **values
        )
        free = sa.or_(
            threads.c.lease_holder.is_(None),
            threads.c.lease_holder == holder,
            threads.c.lease_expires_at <= to_micros(now),
        )
        stmt = stmt.on_conflict_do_update(
            index_elements=["tkey"], set_=values, where=free
        ).returning(threads.c.lease_holder)
        with self.store.db.write("take a lease") as conn:
            if conn.execute(stmt).first() is None:
                current = lease_of(self._row(conn, thread_id))
                assert current is not None
                raise LeaseHeld(lease_held_message(thread_id, current))
        return Lease(
            thread_id=thread_id,
            holder=holder,
            run_id=run_id,
            acquired_at=now,
            expires_at=expires_at,
        )

    @reconnecting
    def _renew(self, thread_id: str, holder: str, now: datetime, expires_at: datetime) -> Lease:
        with self.store.db.write("renew a lease") as conn:
            row = conn.execute(
                threads.update()
                .where(*where_thread(thread_id, threads), threads.c.lease_holder == holder)
                .values(lease_expires_at=to_micros(expires_at))
                .returning(*threads.c)
            ).first()
            if row is None:
                current = self._row(conn, thread_id)
                raise LeaseLost(lease_lost_message(thread_id, holder, lease_of(current)))
        lease = lease_of(row)
        assert lease is not None
        return lease

    @reconnecting
    def _release(self, thread_id: str, holder: str) -> None:
        with self.store.db.one("release a lease") as conn:
            conn.execute(
                threads.update()
                .where(*where_thread(thread_id, threads), threads.c.lease_holder == holder)
                .values(**_NO_LEASE)
            )

    @reconnecting
    def _finished_due(self, now: datetime) -> list[ThreadRecord]:
        due = threads.c.due_at
        with self.store.db.read("list finished threads") as conn:
            keys = list(
                conn.execute(
                    sa.select(threads.c.tkey).where(due.isnot(None), due <= to_micros(now))
                ).scalars()
            )
            records = self.store.records(conn, keys)
        return [r for r in records if r.due_at is not None and r.due_at <= now]

    @staticmethod
    def _row(conn: SAConnection, thread_id: str) -> Any:
        return conn.execute(sa.select(threads).where(*where_thread(thread_id, threads))).first()


class SQLParks(Parks):
    """Pending parks in the ``durability_parks`` table, one row per thread."""

    store: SQLStore

    def _insert(self, row: EncodedCheckpoint, park: Park, *, synced: bool) -> int:
        with self.store.db.write("park a run") as conn:
            exists = conn.execute(
                sa.select(parks.c.tkey).where(*where_thread(park.thread_id, parks))
            ).first()
            if exists is not None:
                raise ParkRefused(park_exists_message(park.thread_id))
            seq = self.store.insert_rows(conn, [row], synced)[0]
            try:
                conn.execute(parks.insert().values(_park_values(park)))
            except sa_exc.IntegrityError as exc:  # a concurrent park won the race
                raise ParkRefused(park_exists_message(park.thread_id)) from exc
            return seq

    def _claim(self, thread_id: str) -> Park | None:
        stmt = parks.delete().where(*where_thread(thread_id, parks)).returning(*parks.c)
        with self.store.db.one("claim a park") as conn:
            row = conn.execute(stmt).first()
        return None if row is None else _park(row)

    @reconnecting
    def _get(self, thread_id: str) -> Park | None:
        with self.store.db.one("read a park") as conn:
            row = conn.execute(sa.select(parks).where(*where_thread(thread_id, parks))).first()
        return None if row is None else _park(row)

    @reconnecting
    def _pending(self) -> list[Park]:
        with self.store.db.one("list parks") as conn:
            return [_park(r) for r in conn.execute(sa.select(parks).order_by(parks.c.deadline))]


def lease_of(row: Any) -> Lease | None:
    """The lease a ``durability_threads`` row records, or ``None``."""
    if row is None or row.lease_holder is None:
        return None
    return Lease(
        thread_id=row.thread_id,
        holder=row.lease_holder,
        run_id=row.lease_run_id or "",
        acquired_at=time_of(row.lease_acquired_at),
        expires_at=from_micros(row.lease_expires_at),
    )


def _park_values(park: Park) -> dict[str, Any]:
    return {
        "tkey": thread_key(park.thread_id),
        **park_texts(park),
        "deadline": to_micros(park.deadline),
        "created_at": micros(park.created_at),
    }


def _park(row: Any) -> Park:
    return park_from_texts(row._mapping, from_micros(row.deadline), time_of(row.created_at))
