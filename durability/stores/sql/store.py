"""The SQL store: one SQLAlchemy Core implementation of the store contract for SQLite and Postgres.

The core contract lives here; the ledger, parks, outbox and scans are in their own modules of
this package, all over one :class:`~durability.stores.sql.engine.Database`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson
import sqlalchemy as sa
from sqlalchemy import exc as sa_exc
from sqlalchemy.dialects import postgresql as pg_dialect
from sqlalchemy.dialects import sqlite as sqlite_dialect
from sqlalchemy.engine import Connection as SAConnection
from sqlalchemy.engine import Engine

from durability._util import chunks
from durability.clock import to_micros
from durability.errors import CheckpointConflict, StoreError, StoreUnavailable
from durability.model import Deleted, ThreadRecord, Tombstone
from durability.stores import rows
from durability.stores.base import Capabilities, Store, ThreadPage, conflict_message
from durability.stores.rows import (
    LATEST,
    CheckpointKey,
    EncodedCheckpoint,
    EncodedWrite,
    SaverRow,
    Select,
    utf8_len,
)
from durability.stores.sealing import Reseal
from durability.stores.sql.bulk import PostgresBulk
from durability.stores.sql.engine import (
    Database,
    Options,
    check_options,
    driver_url,
    dropped,
    reconnecting,
)
from durability.stores.sql.ledger import SQLLedger, SQLParks, lease_of
from durability.stores.sql.migrations import MigrationPlan, migrate, pending
from durability.stores.sql.outbox import SQLOutbox
from durability.stores.sql.outbox_queue import queue_new_rows, raise_mark
from durability.stores.sql.rebuild import REBUILD_VERSION, Progress, rebuild_in_batches, rows_left
from durability.stores.sql.scans import SQLScans
from durability.stores.sql.schema import (
    OUTBOX_MARK_KEY,
    SECRET_KEY,
    SEQ_FLOOR_KEY,
    checkpoint_key,
    checkpoints,
    connections,
    delta,
    erase_requests,
    hash_of,
    meta_table,
    migrations_table,
    outbox_history,
    outbox_table,
    parks,
    synced_table,
    thread_key,
    threads,
    time_of,
    tombstones,
    where_thread,
    writes,
)
from durability.stores.sql.statements import (
    Statements,
    encoded,
    padded_size,
    row_values,
    write_values,
)
from durability.stores.sql.tombstones import SQLTombstones

_INSERT_MANY = checkpoints.insert().returning(checkpoints.c.seq, sort_by_parameter_order=True)


class SQLStore(Store):
    """Checkpoints in SQLite or Postgres through SQLAlchemy Core.

    Options: ``single_worker`` (SQLite only: allow parks, promising that the worker that
    resumes runs on this host), ``schema`` (Postgres), ``synchronous`` (SQLite: ``NORMAL`` or
    ``FULL``), ``busy_timeout_ms`` and ``wal_autocheckpoint`` (SQLite; WAL pages between
    checkpoints, default 10,000), ``pool_size`` / ``max_overflow`` (Postgres), ``engine`` (an
    existing SQLAlchemy engine to use instead of building one).
    """

    def __init__(
        self,
        url: str,
        *,
        single_worker: bool = False,
        schema: str | None = None,
        synchronous: str = "NORMAL",
        busy_timeout_ms: int = 30_000,
        pool_size: int = 5,
        max_overflow: int = 10,
        wal_autocheckpoint: int = 10_000,
        engine: Engine | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(url=url, **kwargs)
        sa_url = sa.make_url(driver_url(url))
        schema = schema or sa_url.query.get("schema")  # type: ignore[assignment]
        sa_url = sa_url.difference_update_query(["schema"])
        options = Options(
            schema,
            synchronous.upper(),
            busy_timeout_ms,
            pool_size,
            max_overflow,
            wal_autocheckpoint,
        )
        provider = "sqlite" if sa_url.get_backend_name() == "sqlite" else "postgres"
        check_options(url, provider, options, single_worker)
        self.provider = provider
        self.options = options
        shared = provider == "postgres"
        self.capabilities = Capabilities(
            shared=shared, sweeps_waiting=True, can_park=shared or single_worker
        )
        self.db = Database(url, sa_url, options, engine)
        self.sql = Statements(self.db.engine.dialect, schema)
        self.ledger = SQLLedger(self)
        self.parks = SQLParks(self)
        self.outbox = SQLOutbox(self)
        self.scans = SQLScans(self)
        self.tombstones: SQLTombstones = SQLTombstones(self)
        if provider == "postgres":
            self.bulk = PostgresBulk(self)

    def close(self) -> None:
        self.db.close()

    @property
    def insert_stmt(self) -> Any:
        """The dialect's ``INSERT`` with ``ON CONFLICT`` support."""
        return sqlite_dialect.insert if self.db.sqlite else pg_dialect.insert

    # ------------------------------------------------------------------ setup

    def _setup(self) -> None:
        with self.db.write("set up the store") as conn:
            self._migrate_in(conn)
            self.tombstones.remember(self.tombstones.secret_in(conn))

    def _migrate_in(self, conn: SAConnection, **how: Any) -> None:
        """Create the schema if missing and apply what is pending (``how``: see ``migrate``)."""
        if self.provider == "postgres":
            # Serialise concurrent setups of the same schema.
            conn.execute(
                sa.text("SELECT pg_advisory_xact_lock(:k)"),
                {"k": int(hash_of("durability-setup", self.options.schema or "")[:15], 16)},
            )
            if self.options.schema:
                conn.exec_driver_sql(f'CREATE SCHEMA IF NOT EXISTS "{self.options.schema}"')
        migrate(conn, to_micros(self.clock()), url=self.url, **how)

    def migration_plan(self) -> MigrationPlan:
        """The migrations the store has not recorded, and how many rows a rewrite would copy."""
        with self.db.write("plan the migrations") as conn:
            steps = pending(conn) if self._has_schema(conn) else []
            rewrites = any(rewrite for _v, _n, rewrite in steps)
            rows = rows_left(conn) if rewrites else 0
        return MigrationPlan(steps, rows)

    def _has_schema(self, conn: SAConnection) -> bool:
        return sa.inspect(conn).has_table(checkpoints.name, schema=self.options.schema)

    def upgrade(self, progress: Progress | None = None) -> None:
        """Apply every pending migration, a table rewrite included: its rows are copied in
        batches, one transaction each (``progress`` is called after each), so a killed
        upgrade resumes where it stopped; then one transaction swaps the tables."""
        with self.db.write("migrate the store") as conn:
            self._migrate_in(conn, until=REBUILD_VERSION - 1)
        if self.db.sqlite and REBUILD_VERSION not in self.applied_migrations():
            rebuild_in_batches(self.db, progress)
        with self.db.write("migrate the store") as conn:
            self._migrate_in(conn, rewrite_large=True)

    def applied_migrations(self) -> list[int]:
        """The migration versions recorded in the store."""
        with self.db.one("read the migrations") as conn:
            return sorted(conn.execute(sa.select(migrations_table.c.version)).scalars())

    @reconnecting
    def _read_generation(self) -> int | None:
        with self.db.one("read the format generation") as conn:
            value = conn.execute(
                sa.select(meta_table.c.value).where(meta_table.c.key == "format_generation")
            ).scalar()
        return None if value is None else int(value)

    @reconnecting
    def _write_generation(self, generation: int) -> None:
        with self.db.one("record the format generation") as conn:
            conn.execute(
                self.insert_stmt(meta_table)
                .values(key="format_generation", value=str(generation))
                .on_conflict_do_update(index_elements=["key"], set_={"value": str(generation)})
            )

    @reconnecting
    def _has_any_checkpoint(self) -> bool:
        with self.db.one("look for checkpoints") as conn:
            return conn.execute(sa.select(checkpoints.c.seq).limit(1)).first() is not None

    def _wipe(self) -> None:
        with self.db.write("reset the store") as conn:
            for table in (
                outbox_table,
                synced_table,
                checkpoints,
                writes,
                threads,
                parks,
                connections,
                tombstones,
                erase_requests,
                outbox_history,
            ):
                conn.execute(table.delete())
            # The erasure secret stays (other handles hold it already), the seq floor and the
            # outbox mark (every new seq is above both).
            kept = (SECRET_KEY, SEQ_FLOOR_KEY, OUTBOX_MARK_KEY)
            conn.execute(meta_table.delete().where(meta_table.c.key.notin_(kept)))

    # ------------------------------------------------------------------ checkpoints

    def _insert(self, rows: list[EncodedCheckpoint], *, synced: bool) -> list[int]:
        try:
            return self._insert_once(rows, synced, retry=False)
        except StoreUnavailable as exc:
            if not dropped(exc):
                raise
            # The server dropped the connection: send it again on a fresh one. If the first
            # attempt committed before the drop, the retry finds these very rows and returns them.
            return self._insert_once(rows, synced, retry=True)

    def _insert_once(
        self, rows: list[EncodedCheckpoint], synced: bool, *, retry: bool
    ) -> list[int]:
        if len(rows) == 1 and not (retry or synced):
            # The hot path: one INSERT … RETURNING, autocommitted (the row is pending: see
            # outbox_queue.py for how it reaches the outbox).
            first = rows[0]
            params = self.sql.insert_params(first, self.tombstones.hash_of(first.thread_id))
            try:
                found = self.db.execute("put a checkpoint", self.sql.insert, params)
            except StoreError as exc:
                if isinstance(exc.__cause__, sa_exc.IntegrityError):
                    first = rows[0]
                    raise CheckpointConflict(
                        conflict_message(first.thread_id, first.namespace, first.checkpoint_id)
                    ) from exc.__cause__
                raise
            if not found:
                raise self.tombstones.refusal(first.thread_id, "put a checkpoint")
            return [int(found[0][0])]
        with self.db.write("put checkpoints") as conn:
            return self.insert_rows(conn, rows, synced, retry=retry)

    def insert_rows(
        self,
        conn: SAConnection,
        rows: list[EncodedCheckpoint],
        synced: bool,
        *,
        retry: bool = False,
    ) -> list[int]:
        """Insert ``rows`` on ``conn`` (inside the caller's transaction) and return their seqs.

        Every row is pending unless ``synced`` (the plane has them): on Postgres the outbox
        trigger queues every row and synced ones leave it again in the same transaction; on
        SQLite the rows before them are queued and the outbox mark moves past them
        (:mod:`.outbox_queue`).
        """
        if retry:
            found = [self._stored_copy(conn, r) for r in rows]
            if all(s is not None for s in found):
                return [s for s in found if s is not None]
        if synced:
            queue_new_rows(self, conn)
        try:
            if len(rows) == 1 or self.db.sqlite:
                # SQLite: one statement per row, each taking its seq above the floor.
                seqs = [self._insert_one(conn, row) for row in rows]
            else:
                values = [row_values(r) for r in rows]
                seqs = [int(s) for s in conn.execute(_INSERT_MANY, values).scalars()]
                # Checked after the insert, in its transaction: the insert holds the table lock
                # an erase takes, so a tombstone this misses had committed before it (and is seen).
                self.tombstones.refuse_any(conn, [r.thread_id for r in rows], "put checkpoints")
        except sa_exc.IntegrityError as exc:
            # The unique hash of (thread, namespace, id): stores never overwrite a checkpoint.
            first = rows[0]
            message = conflict_message(first.thread_id, first.namespace, first.checkpoint_id)
            if len(rows) > 1:
                message = (
                    f"one of {len(rows)} checkpoints was refused, nothing was written: " + message
                )
            raise CheckpointConflict(message) from exc
        if synced and self.db.sqlite:
            raise_mark(self, conn)
        elif synced:
            for chunk in chunks(seqs):
                conn.execute(outbox_table.delete().where(outbox_table.c.seq.in_(chunk)))
        return seqs

    def _insert_one(self, conn: SAConnection, row: EncodedCheckpoint) -> int:
        params = self.sql.insert_params(row, self.tombstones.hash_of(row.thread_id))
        seq = conn.exec_driver_sql(self.sql.insert, params).scalar()
        if seq is None:
            raise self.tombstones.refusal(row.thread_id, "put a checkpoint")
        return int(seq)

    def _stored_copy(self, conn: SAConnection, row: EncodedCheckpoint) -> int | None:
        """The seq of a stored row identical to ``row`` (a write that landed), else ``None``."""
        found = conn.exec_driver_sql(
            self.sql.get, self.sql.get_params(row.thread_id, row.namespace, row.checkpoint_id)
        ).first()
        if found is None:
            return None
        stored = encoded(found)
        seq, stored.seq = stored.seq, row.seq
        return seq if stored == row else None

    @reconnecting
    def _select(self, query: Select) -> list[EncodedCheckpoint]:
        sql, params = self.sql.select(query)
        return [encoded(r) for r in self.db.execute(query.action, sql, params)]

    @reconnecting
    def _latest_row(self, thread_id: str, namespace: str) -> EncodedCheckpoint | None:
        params = self.sql.latest_params(thread_id, namespace)
        found = self.db.execute(LATEST, self.sql.latest, params)
        return encoded(found[0]) if found else None

    @reconnecting
    def _select_with_writes(self, query: Select) -> tuple[SaverRow, list[EncodedWrite]] | None:
        sql, params = self.sql.select_with_writes(query)
        found = self.db.execute(query.action, sql, params)
        if not found:
            return None
        *columns, items = found[0]
        row = SaverRow(*columns)
        if items is None or items == "[]":
            return row, []
        ids = (row.thread_id, row.namespace, row.checkpoint_id)
        # Each item is [id, task_id, idx, channel, value, task_path]; the id gives write order.
        return row, [EncodedWrite(*ids, *w[1:]) for w in sorted(orjson.loads(items))]

    @reconnecting
    def _insert_writes(self, rows: list[EncodedWrite]) -> None:
        action = "store pending writes"
        with self.db.write(action) as conn:
            self.write_rows(conn, rows, action)

    def write_rows(self, conn: SAConnection, rows: list[EncodedWrite], action: str) -> None:
        """Store pending writes on ``conn`` (inside the caller's transaction), LangGraph's rules."""
        regular = [write_values(w) for w in rows if w.idx >= 0]
        special = [write_values(w) for w in rows if w.idx < 0]
        if regular:
            conn.execute(
                self.insert_stmt(writes).on_conflict_do_nothing(index_elements=["wkey"]),
                regular,
            )
        if special:
            stmt = self.insert_stmt(writes)
            conn.execute(
                stmt.on_conflict_do_update(
                    index_elements=["wkey"],
                    set_={
                        "channel": stmt.excluded.channel,
                        "value": stmt.excluded.value,
                        "task_path": stmt.excluded.task_path,
                    },
                ),
                special,
            )
        self.tombstones.refuse_any(conn, [w.thread_id for w in rows], action)

    @reconnecting
    def _select_writes(
        self, thread_id: str, keys: list[CheckpointKey]
    ) -> dict[CheckpointKey, list[EncodedWrite]]:
        found: dict[CheckpointKey, list[EncodedWrite]] = {}
        wanted = set(keys)
        tkey = thread_key(thread_id)
        for chunk in chunks([checkpoint_key(thread_id, ns, cid) for ns, cid in keys]):
            # Padded with its last key to one of a few sizes, so a handful of statements serve
            # every call (a repeated value in an IN list matches nothing twice).
            size = padded_size(len(chunk))
            params = (tkey, thread_id, *chunk, *[chunk[-1]] * (size - len(chunk)))
            for r in self.db.execute("read pending writes", self.sql.writes_of(size), params):
                write = EncodedWrite(*r)
                key = (write.namespace, write.checkpoint_id)
                if key in wanted:  # the keys are hashes: the ids decide
                    found.setdefault(key, []).append(write)
        return found

    @reconnecting
    def _reseal(self, changes: Sequence[Reseal]) -> None:
        m = self.sql.mark  # a driver-level statement: SQLAlchemy's compile cost more than the row
        statement = (
            f"UPDATE {self.sql.table} SET state = {m}, size_bytes = size_bytes + {m} "  # noqa: S608
            f"WHERE tkey = {m} AND ckey = {m} AND thread_id = {m} AND state = {m}"
        )
        params = [
            (
                c.new,
                c.delta,
                thread_key(c.thread_id),
                checkpoint_key(c.thread_id, c.namespace, c.checkpoint_id),
                c.thread_id,
                c.old,
            )
            for c in changes
        ]
        with self.db.write("re-encrypt checkpoints") as conn:
            conn.exec_driver_sql(statement, params)

    def _set_status(self, address: rows.CheckpointAddress, change: rows.StatusChange) -> bool:
        thread_id, namespace, checkpoint_id = address
        where = (
            *where_thread(thread_id),
            checkpoints.c.ckey == checkpoint_key(thread_id, namespace, checkpoint_id),
            checkpoints.c.namespace == namespace,
            checkpoints.c.checkpoint_id == checkpoint_id,
        )
        with self.db.write("change a checkpoint's status") as conn:
            row = conn.execute(
                sa.select(checkpoints.c.interrupt_context, checkpoints.c.size_bytes).where(*where)
            ).first()
            if row is None:
                return False
            size = row.size_bytes + utf8_len(change.interrupt_context)
            size -= utf8_len(row.interrupt_context)
            conn.execute(
                checkpoints.update()
                .where(*where)
                .values(
                    status=change.status,
                    interrupt_reason=change.interrupt_reason,
                    interrupt_context=change.interrupt_context,
                    size_bytes=size,
                )
            )
        return True

    # ------------------------------------------------------------------ threads

    @reconnecting
    def _thread_page(self, cursor: str | None, limit: int) -> ThreadPage:
        after = cursor or ""
        from_checkpoints = (
            sa.select(checkpoints.c.tkey)
            .where(checkpoints.c.tkey > after)
            .group_by(checkpoints.c.tkey)
            .order_by(checkpoints.c.tkey)
            .limit(limit)
        )
        from_ledger = (
            sa.select(threads.c.tkey)
            .where(threads.c.tkey > after)
            .order_by(threads.c.tkey)
            .limit(limit)
        )
        with self.db.read("list threads") as conn:
            keys = sorted(
                set(conn.execute(from_checkpoints).scalars())
                | set(conn.execute(from_ledger).scalars())
            )[:limit]
            records = self.records(conn, keys)
        next_cursor = keys[-1] if len(keys) == limit else None
        return ThreadPage(records, next_cursor)

    def records(self, conn: SAConnection, keys: list[str]) -> list[ThreadRecord]:
        """The thread records under these thread keys (totals and ledger), by key then id."""
        if not keys:
            return []
        totals = {
            (r.tkey, r.thread_id): r
            for r in conn.execute(
                sa.select(
                    checkpoints.c.tkey,
                    checkpoints.c.thread_id,
                    sa.func.count().label("n"),
                    sa.func.sum(checkpoints.c.size_bytes).label("size"),
                    sa.func.max(checkpoints.c.created_at).label("newest_at"),
                    sa.func.max(checkpoints.c.seq).label("newest_seq"),
                )
                .where(checkpoints.c.tkey.in_(keys))
                .group_by(checkpoints.c.tkey, checkpoints.c.thread_id)
            )
        }
        ledger = {
            (r.tkey, r.thread_id): r
            for r in conn.execute(sa.select(threads).where(threads.c.tkey.in_(keys)))
        }
        return [
            _record(thread_id, totals.get((k, thread_id)), ledger.get((k, thread_id)))
            for k, thread_id in sorted(set(totals) | set(ledger))
        ]

    @reconnecting
    def _thread_record(self, thread_id: str) -> ThreadRecord | None:
        with self.db.read("look up a thread") as conn:
            for record in self.records(conn, [thread_key(thread_id)]):
                if record.thread_id == thread_id:
                    return record
        return None

    @reconnecting
    def _delete(self, thread_id: str, keys: list[CheckpointKey] | None) -> Deleted:
        with self.db.write("delete checkpoints" if keys else "delete a thread") as conn:
            if keys is None:
                return self.delete_thread_in(conn, thread_id)
            removed = removed_writes = 0
            for chunk in chunks([checkpoint_key(thread_id, ns, cid) for ns, cid in keys]):
                removed += conn.execute(
                    checkpoints.delete().where(
                        *where_thread(thread_id), checkpoints.c.ckey.in_(chunk)
                    )
                ).rowcount
                removed_writes += conn.execute(
                    writes.delete().where(
                        *where_thread(thread_id, writes), writes.c.ckey.in_(chunk)
                    )
                ).rowcount
        return Deleted(checkpoints=removed, writes=removed_writes)

    @reconnecting
    def _erase(self, thread_id: str, stone: Tombstone) -> tuple[Tombstone, Deleted]:
        with self.db.write("erase a thread") as conn:
            if self.provider == "postgres":
                # Puts in flight finish first (and are erased here); a put that starts later
                # waits for this commit, then its statement sees the tombstone. SQLite's
                # writers queue on the database lock already.
                conn.exec_driver_sql(
                    f"LOCK TABLE {self.sql.table}, {self.sql.writes_table} "
                    "IN SHARE ROW EXCLUSIVE MODE"
                )
            stored = self.tombstones.bury_in(conn, stone)
            return stored, self.delete_thread_in(conn, thread_id)

    @staticmethod
    def delete_thread_in(conn: SAConnection, thread_id: str) -> Deleted:
        """Delete the whole thread from every table, inside the caller's transaction."""
        counts = [
            conn.execute(table.delete().where(*where_thread(thread_id, table))).rowcount
            for table in (checkpoints, writes, parks, threads)
        ]
        return Deleted(checkpoints=counts[0], writes=counts[1])


def _record(thread_id: str, totals: Any, ledger: Any) -> ThreadRecord:
    has = ledger is not None
    return ThreadRecord(
        thread_id=thread_id,
        owner=ledger.owner if has else None,
        run_id=ledger.run_id if has else None,
        started_at=time_of(ledger.started_at) if has else None,
        declared_waiting=delta(ledger.declared_waiting) if has else None,
        declared_finished=delta(ledger.declared_finished) if has else None,
        finished_at=time_of(ledger.finished_at) if has else None,
        due_at=time_of(ledger.due_at) if has else None,
        lease=lease_of(ledger) if has else None,
        checkpoints=int(totals.n) if totals is not None else 0,
        size_bytes=int(totals.size or 0) if totals is not None else 0,
        newest_at=time_of(totals.newest_at) if totals is not None else None,
        newest_seq=int(totals.newest_seq) if totals is not None else None,
    )
