"""Retention on a LangGraph store, in place: the schema check, the sidecar ledger and the
sweep's reads and deletes.

A LangGraph store opened with ``?writable=true`` (or ``writable=True``) can be swept like a
durability store. LangGraph's tables are only ever *deleted from*, never altered:

* **The schema check.** Before the first delete the store's LangGraph schema is compared with
  the ones this version knows: on Postgres the ``checkpoint_migrations`` level
  (:data:`KNOWN_POSTGRES_MIGRATIONS`), on SQLite the columns of ``checkpoints`` and
  ``writes``. Another schema is refused with
  :class:`~durability.errors.CheckpointStoreFormatError`, nothing deleted.
* **The sidecar ledger.** LangGraph keeps no finished marks or declared retention. durability
  keeps them in a store of its own beside LangGraph's (SQLite: the file ``<path>.durability``;
  Postgres: the schema ``<schema>_durability``, or ``?ledger=URL``), written through the usual
  ``record_run_start`` / ``mark_finished`` API. A read-only store reads the sidecar when it
  exists and never creates it.
* **The newest checkpoint's time** is read from its id: LangGraph's checkpoint ids are UUIDv6,
  holding their creation time to 100 ns, so one grouped read gives every thread's newest time
  (an id of another kind falls back to the checkpoint's own ``ts``).
* **Deletes** remove a thread's checkpoints, blobs (those no checkpoint references too) and
  writes in one transaction, many threads per transaction, the transaction cut short enough
  that SQLite's write lock is held at most :data:`MAX_LOCK_SECONDS` at a time, with a pause
  after each, so graphs writing to the same file do not reach their busy timeout.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from durability._util import redact_url
from durability.errors import CheckpointStoreFormatError, StoreError
from durability.model import Deleted, ThreadRecord
from durability.stores.foreign.langgraph_sidecar import with_ledger
from durability.stores.scans import Scans, SweepColumns, micros, span
from durability.stores.sweep_lock import SweepLock

if TYPE_CHECKING:
    from durability.stores.base import Store
    from durability.stores.foreign.langgraph import LangGraphStore

#: ``checkpoint_migrations`` levels of langgraph-checkpoint-postgres this version deletes from
#: (its ``MIGRATIONS`` list, 0 to 9: the four tables, then the thread indexes and ``task_path``).
KNOWN_POSTGRES_MIGRATIONS = range(10)

#: The SqliteSaver tables' columns this version deletes from (``task_path`` came later).
KNOWN_SQLITE_COLUMNS = {
    "checkpoints": (
        {
            "thread_id",
            "checkpoint_ns",
            "checkpoint_id",
            "parent_checkpoint_id",
            "type",
            "checkpoint",
            "metadata",
        },
    ),
    "writes": (
        {"thread_id", "checkpoint_ns", "checkpoint_id", "task_id", "idx", "channel", "type"}
        | {"value"},
        {"thread_id", "checkpoint_ns", "checkpoint_id", "task_id", "idx", "channel", "type"}
        | {"value", "task_path"},
    ),
}

#: The longest a delete transaction may hold SQLite's write lock.
MAX_LOCK_SECONDS = 0.5

#: What a delete transaction aims at, leaving room under :data:`MAX_LOCK_SECONDS`.
_TARGET_SECONDS = 0.2

_UUID_EPOCH_100NS = 0x01B21DD213814000


def id_micros(checkpoint_id: str) -> int | None:
    """The creation time a UUIDv6 checkpoint id holds (LangGraph's ids), in microseconds since
    the epoch, else ``None``. Read from the hex digits directly (``uuid.UUID`` cost several
    times more over 100,000 threads)."""
    if len(checkpoint_id) != 36 or checkpoint_id[14] != "6" or checkpoint_id[8] != "-":
        return None
    try:
        high = int(checkpoint_id[:8] + checkpoint_id[9:13], 16)
        low = int(checkpoint_id[15:18], 16)
    except ValueError:
        return None
    return (((high << 12) | low) - _UUID_EPOCH_100NS) // 10


def id_time(checkpoint_id: str) -> datetime | None:
    """:func:`id_micros` as an aware datetime."""
    found = id_micros(checkpoint_id)
    return None if found is None else _EPOCH + timedelta(microseconds=found)


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


# ---------------------------------------------------------------------------- schema check


def check_schema(store: LangGraphStore, action: str) -> None:
    """Refuse ``action`` on a LangGraph schema this version does not know (nothing changed).

    Checked once per store object once it passes (a sweep asks before every batch)."""
    if getattr(store, "_schema_known", False):
        return
    _check_schema(store, action)
    store._schema_known = True


def _check_schema(store: LangGraphStore, action: str) -> None:
    if store.dialect == "sqlite":
        found = _sqlite_columns(store)
        for table, shapes in KNOWN_SQLITE_COLUMNS.items():
            if found.get(table) not in shapes:
                raise _unknown(
                    store,
                    action,
                    f"its {table} table has the columns {sorted(found.get(table) or ())}",
                )
        return
    with store.read("read the LangGraph schema version") as conn:
        store.require_tables(conn, "checkpoint_migrations")
        level = conn.exec_driver_sql(
            f"SELECT max(v) FROM {store.table('checkpoint_migrations')}"  # noqa: S608
        ).scalar()
    if level not in KNOWN_POSTGRES_MIGRATIONS:
        raise _unknown(store, action, f"its checkpoint_migrations level is {level!r}")


def _sqlite_columns(store: LangGraphStore) -> dict[str, set[str]]:
    with store.read("read the LangGraph schema") as conn:
        return {
            table: {r[1] for r in conn.exec_driver_sql(f'PRAGMA table_info("{table}")')}
            for table in KNOWN_SQLITE_COLUMNS
        }


def _unknown(store: LangGraphStore, action: str, what: str) -> CheckpointStoreFormatError:
    known = (
        f"levels {KNOWN_POSTGRES_MIGRATIONS.start}-{KNOWN_POSTGRES_MIGRATIONS.stop - 1}"
        if store.dialect == "postgres"
        else "the SqliteSaver tables of langgraph-checkpoint-sqlite 2 and 3"
    )
    return CheckpointStoreFormatError(
        f"cannot {action}: the LangGraph store {redact_url(store.url)} has a schema this version "
        f"of durability does not know ({what}; it knows {known}); nothing was deleted — "
        "upgrade durability, or read the store without writable=true"
    )


# ---------------------------------------------------------------------------- scans


class LangGraphScans(Scans):
    """The sweep's reads and deletes on a LangGraph store (generic analysis reads)."""

    store: LangGraphStore

    def sweep_lock(self) -> SweepLock:
        """The sidecar's sweep lock, once the store is writable and its schema known."""
        side = self._writable("sweep")
        return side.scans.sweep_lock()

    def sweep_notes(self, columns: SweepColumns) -> list[str]:
        """Say so when no thread is marked finished: only the waiting horizon applies then."""
        import numpy as np

        if len(columns) and not np.isnat(columns.columns["finished_at"]).all():
            return []
        return [
            "this LangGraph store has no finished marks in its sidecar ledger "
            f"({redact_url(self.store.sidecar_url)}): only the waiting horizon applies; mark "
            "threads with `durability threads mark URL THREAD…` or store.mark_finished()"
        ]

    def delete_order(self, thread_ids: Sequence[str]) -> list[str]:
        return sorted(thread_ids)

    def _writable(self, action: str) -> Store:
        store = self.store
        if not store.writable:
            raise store.refuse(action)
        store.ready()
        check_schema(store, action)
        side = store.sidecar(create=True)
        assert side is not None
        return side

    # ------------------------------------------------------------------ sweep columns

    #: The threads the sidecar held a ledger record for when the last plan read it.
    _ledger_ids: set[str] | None = None

    def _sweep_columns(self) -> SweepColumns:
        totals = self._totals()
        side = self.store.sidecar(create=False)
        ledger: dict[str, ThreadRecord] = (
            {r.thread_id: r for r in side.sweep_records()} if side is not None else {}
        )
        self._ledger_ids = set(ledger)
        ids = list(totals) + [t for t in ledger if t not in totals]
        values: list[tuple[int | None, ...]] = []
        for t in ids:
            total, r = totals.get(t), ledger.get(t)
            count, size, newest = (0, 0, None) if total is None else total
            newest_us = None
            if total is not None:
                newest_us = id_micros(newest) if newest else None
                if newest_us is None:
                    newest_us = micros(self._newest(t, newest))
            if r is None:
                values.append((count, size, newest_us, None, None, None, None, None, None))
                continue
            values.append(
                (
                    count,
                    size,
                    newest_us,
                    micros(r.started_at),
                    micros(r.finished_at),
                    micros(r.due_at),
                    span(r.declared_waiting),
                    span(r.declared_finished),
                    None if r.lease is None else micros(r.lease.expires_at),
                )
            )

        def record(i: int) -> ThreadRecord:
            return self._record(ids[i], totals.get(ids[i]), ledger.get(ids[i]))

        return SweepColumns.of(ids, values, record)

    def _newest(self, thread_id: str, newest_id: str | None) -> datetime | None:
        """The newest checkpoint's time: from its UUIDv6 id, else its own ``ts``."""
        found = id_time(newest_id) if newest_id else None
        if found is None:
            latest = self.store.latest(thread_id)
            found = latest.created_at if latest is not None else None
        return found

    def _record(
        self, thread_id: str, total: tuple[int, int, str] | None, ledger: ThreadRecord | None
    ) -> ThreadRecord:
        if total is None:
            return ledger or ThreadRecord(thread_id=thread_id)
        count, size, newest_id = total
        record = ThreadRecord(
            thread_id=thread_id,
            checkpoints=count,
            size_bytes=size,
            newest_at=self._newest(thread_id, newest_id),
        )
        return with_ledger(record, ledger)

    def _totals(self) -> dict[str, tuple[int, int, str]]:
        """Per thread: checkpoints, stored bytes (blobs included) and the newest checkpoint id."""
        store = self.store
        if store.dialect == "sqlite":
            sql = (
                "SELECT thread_id, count(*), sum(coalesce(length(checkpoint), 0) + "
                "coalesce(length(CAST(metadata AS BLOB)), 0)), max(checkpoint_id) "
                "FROM checkpoints GROUP BY thread_id"
            )
            blobs_sql = None
        else:
            sql = (
                "SELECT thread_id, count(*), sum(pg_column_size(checkpoint) + "  # noqa: S608
                'pg_column_size(metadata)), max(checkpoint_id COLLATE "C") '
                f"FROM {store.table('checkpoints')} GROUP BY thread_id"
            )
            blobs_sql = (
                "SELECT thread_id, coalesce(sum(octet_length(blob)), 0) "  # noqa: S608
                f"FROM {store.table('checkpoint_blobs')} GROUP BY thread_id"
            )
        with store.read("read the threads for the sweep") as conn:
            rows = conn.exec_driver_sql(sql).all()
            blobs: dict[str, int] = dict(conn.exec_driver_sql(blobs_sql).all()) if blobs_sql else {}
        return {
            t: (int(n), int(size or 0) + int(blobs.get(t, 0)), newest)
            for t, n, size, newest in rows
        }

    # ------------------------------------------------------------------ deletes

    def _delete_threads(self, thread_ids: list[str]) -> dict[str, Deleted]:
        side = self._writable("delete threads")
        found: dict[str, Deleted] = {}
        for chunk in self._chunks(thread_ids):
            found.update(chunk)
        for t in thread_ids:
            found.setdefault(t, Deleted())
        # Their ledger records (the sidecar holds no rows): those the last plan read, or all
        # when no plan was read. A record made after the plan stays, holding no checkpoint,
        # and the next sweep deletes it.
        known = self._ledger_ids
        records = thread_ids if known is None else [t for t in thread_ids if t in known]
        if records:
            side.delete_threads(records)
        return found

    def _chunks(self, thread_ids: list[str]) -> Iterator[dict[str, Deleted]]:
        """Delete in transactions: on SQLite sized to last about :data:`_TARGET_SECONDS` each,
        on Postgres one per store call (the sweep's batch).

        SQLite's write lock is the whole file's, so its chunk adapts (halved after a
        transaction over the target, doubled after one well under it) and after each the
        deleter pauses (as long as the transaction, at most 0.1 s: a waiting writer's busy
        handler retries that often) so a live writer gets the lock. Postgres locks the rows
        only: a writer of another thread never waits, and cutting a batch into many
        transactions made the sweep several times slower than one statement per table.
        """
        if self.store.dialect != "sqlite":
            yield self._delete_postgres(thread_ids)
            return
        size, at = min(100, len(thread_ids)), 0
        delete = self._delete_sqlite
        while at < len(thread_ids):
            chunk = thread_ids[at : at + size]
            started = time.perf_counter()
            yield delete(chunk)
            held = time.perf_counter() - started
            at += len(chunk)
            if held > _TARGET_SECONDS and size > 1:
                size //= 2
            elif held < _TARGET_SECONDS / 4:
                size *= 2
            if at < len(thread_ids):
                time.sleep(min(0.1, held))

    def _delete_sqlite(self, chunk: list[str]) -> dict[str, Deleted]:
        ids = json.dumps(chunk)
        with self.store.writer("delete threads") as conn:
            cps = Counter(
                r[0]
                for r in conn.execute(
                    "DELETE FROM checkpoints WHERE thread_id IN (SELECT value FROM json_each(?)) "
                    "RETURNING thread_id",
                    (ids,),
                )
            )
            ws = Counter(
                r[0]
                for r in conn.execute(
                    "DELETE FROM writes WHERE thread_id IN (SELECT value FROM json_each(?)) "
                    "RETURNING thread_id",
                    (ids,),
                )
            )
        return {t: Deleted(cps.get(t, 0), ws.get(t, 0)) for t in chunk}

    def _delete_postgres(self, chunk: list[str]) -> dict[str, Deleted]:
        c, b, w = (
            self.store.table(t) for t in ("checkpoints", "checkpoint_blobs", "checkpoint_writes")
        )
        # One statement: the three deletes as CTEs, counted per thread server-side (no row
        # travels back); the ids sent once, as a binary array (psycopg dumps a text array
        # with a regex match per element, which cost as much as a delete).
        by_ids = "WHERE thread_id = ANY(%(t)b::text[]) RETURNING thread_id"
        sql = (
            f"WITH c AS (DELETE FROM {c} {by_ids}), w AS (DELETE FROM {w} {by_ids}), "  # noqa: S608
            f"b AS (DELETE FROM {b} {by_ids}) "
            "SELECT thread_id, 0, count(*) FROM c GROUP BY 1 "
            "UNION ALL SELECT thread_id, 1, count(*) FROM w GROUP BY 1 "
            "UNION ALL SELECT NULL, 2, count(*) FROM b"
        )
        counts: tuple[dict[str, int], dict[str, int]] = ({}, {})
        with self.store.writer("delete threads") as conn:
            cursor = conn.connection.cursor()
            for thread_id, table, n in cursor.execute(sql, {"t": chunk}).fetchall():
                if table < 2:
                    counts[table][thread_id] = n
        return {t: Deleted(counts[0].get(t, 0), counts[1].get(t, 0)) for t in chunk}

    def _still_holding(self, thread_ids: list[str]) -> set[str]:
        store = self.store
        tables: tuple[str, ...]
        if store.dialect == "sqlite":
            tables = ("checkpoints", "writes")
            sql = " UNION ".join(
                f"SELECT thread_id FROM {t} WHERE thread_id IN (SELECT value FROM json_each(:ids))"  # noqa: S608
                for t in tables
            )
            params: dict[str, Any] = {"ids": json.dumps(thread_ids)}
        else:
            tables = ("checkpoints", "checkpoint_blobs", "checkpoint_writes")
            sql = " UNION ".join(
                f"SELECT thread_id FROM {store.table(t)} WHERE thread_id = ANY(%(ids)b::text[])"  # noqa: S608
                for t in tables
            )
            with store.read("check threads are empty") as conn:
                cursor = conn.connection.cursor()
                return {r[0] for r in cursor.execute(sql, {"ids": thread_ids}).fetchall()}
        import sqlalchemy as sa

        with store.read("check threads are empty") as conn:
            return set(conn.execute(sa.text(sql), params).scalars())


# ---------------------------------------------------------------------------- writer


class SQLiteWriter:
    """One SQLite connection for deletes, used a transaction at a time (``BEGIN IMMEDIATE``)."""

    def __init__(self, path: str, timeout: float) -> None:
        self._path, self._timeout = path, timeout
        self._conn: sqlite3.Connection | None = None
        self._lock = threading.Lock()

    @contextmanager
    def transaction(self, wrap: Callable[[BaseException], StoreError]) -> Iterator[Any]:
        with self._lock:
            if self._conn is None:
                self._conn = sqlite3.connect(
                    self._path,
                    timeout=self._timeout,
                    isolation_level=None,
                    check_same_thread=False,
                )
            conn = self._conn
            try:
                conn.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                raise wrap(exc) from exc
            try:
                yield conn
            except sqlite3.Error as exc:
                conn.execute("ROLLBACK")
                raise wrap(exc) from exc
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None


# ---------------------------------------------------------------------------- some checkpoints


def delete_checkpoints(
    store: LangGraphStore, keys: Sequence[tuple[str, str, str]]
) -> dict[str, Deleted]:
    """Delete these ``(thread, namespace, checkpoint_id)`` checkpoints with their writes, and
    (Postgres) every blob of their threads no remaining checkpoint references, in one
    transaction; what each thread lost."""
    check_schema(store, "delete checkpoints")
    triples = json.dumps([list(k) for k in keys])
    threads = sorted({k[0] for k in keys})
    found: dict[str, list[int]] = {t: [0, 0] for t in threads}
    if store.dialect == "sqlite":
        doomed = "SELECT value ->> 0, value ->> 1, value ->> 2 FROM json_each(?)"
        with store.writer("delete checkpoints") as conn:
            for at, table in ((1, "writes"), (0, "checkpoints")):
                for (thread_id,) in conn.execute(
                    f"DELETE FROM {table} WHERE (thread_id, checkpoint_ns, checkpoint_id) "  # noqa: S608
                    f"IN ({doomed}) RETURNING thread_id",
                    (triples,),
                ):
                    found[thread_id][at] += 1
        return {t: Deleted(*n) for t, n in found.items()}
    c, b, wt = (store.table(t) for t in ("checkpoints", "checkpoint_blobs", "checkpoint_writes"))
    doomed = "SELECT e ->> 0, e ->> 1, e ->> 2 FROM jsonb_array_elements(CAST(%(k)s AS jsonb)) AS e"
    with store.writer("delete checkpoints") as conn:
        cursor = conn.connection.cursor()
        for at, table in ((1, wt), (0, c)):
            cursor.execute(
                f"WITH d AS (DELETE FROM {table} WHERE (thread_id, checkpoint_ns, checkpoint_id) "  # noqa: S608
                f"IN ({doomed}) RETURNING thread_id) SELECT thread_id, count(*) FROM d GROUP BY 1",
                {"k": triples},
            )
            for thread_id, n in cursor.fetchall():
                found[thread_id][at] += int(n)
        cursor.execute(
            f"DELETE FROM {b} AS bl WHERE bl.thread_id = ANY(%(t)s) AND NOT EXISTS ("  # noqa: S608
            f"SELECT 1 FROM {c} AS cp WHERE cp.thread_id = bl.thread_id "
            "AND cp.checkpoint_ns = bl.checkpoint_ns "
            "AND cp.checkpoint -> 'channel_versions' ->> bl.channel = bl.version)",
            {"t": threads},
        )
    return {t: Deleted(*n) for t, n in found.items()}


def thin_points(
    store: LangGraphStore, chosen: set[str] | None
) -> Iterator[tuple[str, list[tuple[str, str, datetime | None, int, str, bool]]]]:
    """Per thread, its checkpoints in write order for thinning: namespace, id, time (from the
    id), stored bytes, ``keep-previous`` when its parent holds pending sends it reads (a
    ``__pregel_tasks`` write, and on Postgres a checkpoint older than format 4, as
    LangGraph's prune checks; SQLite keeps msgpack, so there any such parent is kept), and
    whether it marks delta channels."""
    store.ready()
    if store.dialect == "sqlite":
        sql = (
            "SELECT thread_id, checkpoint_ns, checkpoint_id, coalesce(length(checkpoint), 0) + "
            "coalesce(length(metadata), 0), EXISTS (SELECT 1 FROM writes AS w WHERE "
            "w.thread_id = c.thread_id AND w.checkpoint_ns = c.checkpoint_ns AND "
            "w.checkpoint_id = c.parent_checkpoint_id AND w.channel = '__pregel_tasks'), "
            "json_extract(CAST(metadata AS TEXT), '$.counters_since_delta_snapshot') IS NOT NULL "
            "FROM checkpoints AS c ORDER BY thread_id, rowid"
        )
    else:
        sql = (
            "SELECT thread_id, checkpoint_ns, checkpoint_id, pg_column_size(checkpoint) + "  # noqa: S608
            "pg_column_size(metadata), coalesce((checkpoint ->> 'v')::int, 4) < 4 AND EXISTS ("
            f"SELECT 1 FROM {store.table('checkpoint_writes')} AS w WHERE w.thread_id = c.thread_id "
            "AND w.checkpoint_ns = c.checkpoint_ns AND w.checkpoint_id = c.parent_checkpoint_id "
            "AND w.channel = '__pregel_tasks'), metadata ? 'counters_since_delta_snapshot' "
            f"FROM {store.table('checkpoints')} AS c "
            'ORDER BY thread_id, checkpoint_id COLLATE "C"'
        )
    with store.read("read checkpoints to thin") as conn:
        rows = conn.exec_driver_sql(sql).all()
    current: str | None = None
    points: list[tuple[str, str, datetime | None, int, str, bool]] = []
    for thread_id, ns, cid, size, old, delta in rows:
        if chosen is not None and thread_id not in chosen:
            continue
        if thread_id != current:
            if current is not None:
                yield current, points
            current, points = thread_id, []
        why = "keep-previous" if old else ""
        points.append((ns, cid, id_time(cid), int(size or 0), why, bool(delta)))
    if current is not None:
        yield current, points
