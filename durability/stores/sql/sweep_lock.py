"""The SQL store's sweep lock: a ``durability_sweep_lock`` row (SQLite: the lock itself, with an
expiry the holder refreshes; Postgres: the holder's description, the lock being a session-level
advisory lock the server releases when the session ends)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from durability.stores.sql.engine import reconnecting
from durability.stores.sql.schema import sweep_lock_table, thread_key
from durability.stores.sweep_lock import LOCK_TTL, Holder, SweepLock

if TYPE_CHECKING:
    from durability.stores.sql.store import SQLStore


class SQLSweepLock(SweepLock):
    """A ``durability_sweep_lock`` row in the store (SQLite: the lock itself, with an expiry;
    Postgres: the holder's description, the lock being a session advisory lock)."""

    store: SQLStore

    def __init__(self, store: SQLStore) -> None:
        super().__init__(store)
        self.engine: Any = store.db.engine
        self.postgres = store.provider == "postgres"
        self._session: Any = None
        self._key = 0

    def _table(self) -> Any:
        return sweep_lock_table

    @reconnecting  # a dropped session took its advisory lock with it: taking again is sound
    def _take(self) -> Holder | None:
        table = self._table()
        with self.store.db.errors("take the sweep lock"):
            if self.postgres:
                return self._take_advisory(table)
            return self._claim(table)

    def _take_advisory(self, table: Any) -> Holder | None:
        name = f"durability-sweep-lock:{self.store.options.schema or ''}"
        key = int(thread_key(name)[:15], 16)  # one lock per schema of the database
        session = self.engine.connect()
        try:
            if not session.exec_driver_sql("SELECT pg_try_advisory_lock(%s)", (key,)).scalar():
                session.close()
                return self._current(table) or Holder("an unknown host", 0, time.time(), "")
            self._write(table, session)
        except BaseException:
            # Discarded, not pooled: its server session ends and takes the lock with it.
            session.invalidate()
            session.close()
            raise
        self._session, self._key = session, key
        return None

    def _claim(self, table: Any) -> Holder | None:
        with self.store.db.write("take the sweep lock") as conn:
            row = conn.execute(table.select().where(table.c.name == "sweep")).first()
            current = None if row is None else Holder.from_json(row.holder)
            if (
                row is not None
                and current is not None
                and row.expires_at > time.time()
                and not current.gone()
            ):
                return current
            self._write(table, conn)
        return None

    def _write(self, table: Any, conn: Any) -> None:
        values = {"holder": self.holder.to_json().decode(), "expires_at": time.time() + LOCK_TTL}
        if conn is None:
            with self.engine.connect() as own:
                self._write(table, own)
            return
        conn.execute(table.delete().where(table.c.name == "sweep"))
        conn.execute(table.insert().values(name="sweep", **values))

    def _current(self, table: Any) -> Holder | None:
        with self.engine.connect() as conn:
            row = conn.execute(table.select().where(table.c.name == "sweep")).first()
        return None if row is None else Holder.from_json(row.holder)

    def _refresh(self) -> None:
        if self.postgres:
            return  # the session holds the advisory lock for as long as it lives
        table = self._table()
        with self.store.db.errors("refresh the sweep lock"), self.engine.connect() as conn:
            conn.execute(
                table.update()
                .where(table.c.name == "sweep", table.c.holder == self.holder.to_json().decode())
                .values(expires_at=time.time() + LOCK_TTL)
            )

    def release(self) -> None:
        table = self._table()
        mine = self.holder.to_json().decode()
        with self.engine.connect() as conn:
            conn.execute(table.delete().where(table.c.name == "sweep", table.c.holder == mine))
        if self._session is not None:
            session, self._session = self._session, None
            try:
                session.exec_driver_sql("SELECT pg_advisory_unlock(%s)", (self._key,))
            finally:
                session.close()
