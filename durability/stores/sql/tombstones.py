"""The SQL store's tombstones: one row per erased thread, by the keyed hash of its id.

A put checks the table inside its own statement (see ``Statements.insert``) or, in a
transaction, right after its insert (:meth:`SQLTombstones.refuse_any`). An erase takes the
checkpoint and write tables' ``SHARE ROW EXCLUSIVE`` lock on Postgres before it writes its
tombstone, so a put in flight finishes first (and is erased), and one that starts after sees the
tombstone; on SQLite writers queue on the database lock anyway.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection as SAConnection

from durability.model import Tombstone
from durability.stores.sql.engine import reconnecting
from durability.stores.sql.schema import (
    SECRET_KEY,
    erase_requests,
    meta_table,
    micros,
    time_of,
    tombstones,
)
from durability.stores.tombstones import EraseRequest, Tombstones, new_secret

if TYPE_CHECKING:
    from durability.stores.sql.store import SQLStore


class SQLTombstones(Tombstones):
    """Tombstones in the ``durability_tombstones`` table."""

    store: SQLStore

    @reconnecting
    def _load_secret(self) -> str:
        with self.store.db.write("read the erasure secret") as conn:
            return self.secret_in(conn)

    def secret_in(self, conn: SAConnection) -> str:
        """The store's erasure secret, made if absent, on ``conn`` (the store's setup calls this
        in its transaction, so no put ever opens a second one to read it)."""
        conn.execute(
            self.store.insert_stmt(meta_table)
            .values(key=SECRET_KEY, value=new_secret())
            .on_conflict_do_nothing(index_elements=["key"])
        )
        return str(
            conn.execute(
                sa.select(meta_table.c.value).where(meta_table.c.key == SECRET_KEY)
            ).scalar_one()
        )

    @reconnecting
    def _get(self, thread_id: str, digest: str) -> Tombstone | None:
        with self.store.db.one("read a tombstone") as conn:
            return self.find(conn, digest)

    @staticmethod
    def find(conn: SAConnection, digest: str) -> Tombstone | None:
        """The tombstone under ``digest``, read on ``conn``."""
        row = conn.execute(sa.select(tombstones).where(tombstones.c.ekey == digest)).first()
        return None if row is None else _stone(row)

    @reconnecting
    def _bury(self, thread_id: str, stone: Tombstone) -> Tombstone:
        with self.store.db.write("tombstone a thread") as conn:
            return self.bury_in(conn, stone)

    def bury_in(self, conn: SAConnection, stone: Tombstone) -> Tombstone:
        """Store ``stone`` on ``conn`` (inside the caller's transaction) unless one is stored."""
        conn.execute(
            self.store.insert_stmt(tombstones)
            .values(
                ekey=stone.hash,
                erased_at=micros(stone.erased_at),
                erased_by=stone.erased_by,
                receipt=stone.receipt,
            )
            .on_conflict_do_nothing(index_elements=["ekey"])
        )
        found = self.find(conn, stone.hash)
        assert found is not None
        return found

    @reconnecting
    def _lift(self, thread_id: str, digest: str) -> bool:
        with self.store.db.write("reopen a thread") as conn:
            return bool(
                conn.execute(tombstones.delete().where(tombstones.c.ekey == digest)).rowcount
            )

    @reconnecting
    def _record_receipt(self, thread_id: str, digest: str, receipt: str) -> None:
        with self.store.db.write("record an erasure receipt") as conn:
            conn.execute(
                tombstones.update().where(tombstones.c.ekey == digest).values(receipt=receipt)
            )

    @reconnecting
    def _put_request(self, request: EraseRequest) -> EraseRequest:
        r = erase_requests.c
        with self.store.db.write("queue an erase request") as conn:
            conn.execute(
                self.store.insert_stmt(erase_requests)
                .values(
                    ekey=request.tombstone,
                    project_id=request.project_id,
                    thread_id=request.thread_id,
                    requested_at=micros(request.requested_at),
                    attempts=request.attempts,
                    last_error=request.last_error,
                )
                .on_conflict_do_nothing(index_elements=["ekey", "project_id"])
            )
            row = conn.execute(
                sa.select(erase_requests).where(
                    r.ekey == request.tombstone, r.project_id == request.project_id
                )
            ).one()
        return _request(row)

    @reconnecting
    def _requests(self) -> list[EraseRequest]:
        with self.store.db.one("list erase requests") as conn:
            return [_request(row) for row in conn.execute(sa.select(erase_requests))]

    @reconnecting
    def _update_request(self, request: EraseRequest) -> None:
        r = erase_requests.c
        with self.store.db.write("record an erase attempt") as conn:
            conn.execute(
                erase_requests.update()
                .where(r.ekey == request.tombstone, r.project_id == request.project_id)
                .values(attempts=request.attempts, last_error=request.last_error)
            )

    @reconnecting
    def _drop_request(self, digest: str, project_id: str) -> None:
        r = erase_requests.c
        with self.store.db.write("drop an erase request") as conn:
            conn.execute(
                erase_requests.delete().where(r.ekey == digest, r.project_id == project_id)
            )

    @reconnecting
    def _count(self) -> int:
        with self.store.db.one("count tombstones") as conn:
            return int(
                conn.execute(sa.select(sa.func.count()).select_from(tombstones)).scalar_one()
            )

    @reconnecting
    def _all(self) -> list[Tombstone]:
        with self.store.db.one("list tombstones") as conn:
            return [_stone(row) for row in conn.execute(sa.select(tombstones))]

    def refuse_any(self, conn: SAConnection, thread_ids: list[str], action: str) -> None:
        """Inside a write transaction: refuse if any of the threads is tombstoned."""
        digests = {self.hash_of(t): t for t in thread_ids}
        found = conn.execute(
            sa.select(tombstones).where(tombstones.c.ekey.in_(list(digests)))
        ).first()
        if found is not None:
            raise self.refusal(digests[found.ekey], action, _stone(found))


def _stone(row: sa.Row[tuple[str, int, str, str]]) -> Tombstone:
    erased_at = time_of(row.erased_at)
    assert erased_at is not None
    return Tombstone(
        hash=row.ekey, erased_at=erased_at, erased_by=row.erased_by, receipt=row.receipt
    )


def _request(row: Any) -> EraseRequest:
    requested_at = time_of(row.requested_at)
    assert requested_at is not None
    return EraseRequest(
        thread_id=row.thread_id,
        tombstone=row.ekey,
        project_id=row.project_id,
        requested_at=requested_at,
        attempts=row.attempts,
        last_error=row.last_error,
    )
