"""The SQL store's outbox: the ``durability_outbox`` and ``durability_synced`` tables, and
connection records.

A pending or quarantined checkpoint has a narrow row in ``durability_outbox`` (Postgres: a
trigger adds it with the checkpoint; SQLite: rows put since the last read are queued in one
statement before the outbox is read or changed, see :mod:`.outbox_queue`); an acknowledgement
moves it to ``durability_synced``. The drain reads the outbox in ``seq`` order joined to the
checkpoints by primary key, and never rewrites a checkpoint row.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from durability._util import chunks
from durability.clock import from_micros, to_micros
from durability.model import OutboxEntry
from durability.stores.outbox import (
    ConnectionRecord,
    EntryQuery,
    Outbox,
    OutboxSummary,
    PendingSpan,
    RowKey,
)
from durability.stores.rows import EncodedCheckpoint
from durability.stores.sql.engine import reconnecting
from durability.stores.sql.outbox_queue import catch_up, queue_new_rows, through
from durability.stores.sql.schema import (
    checkpoints,
    connections,
    micros,
    outbox_history,
    outbox_table,
    synced_table,
    thread_key,
    time_of,
)
from durability.stores.sql.statements import encoded

if TYPE_CHECKING:
    from durability.stores.sql.store import SQLStore

#: An entry's columns over ``checkpoints c LEFT JOIN outbox o LEFT JOIN synced s`` (by seq);
#: ``{through}`` is the outbox mark (:func:`entry_sql` fills it in): a row above it has no
#: outbox row yet and is pending.
ENTRY_SQL = {
    "thread_id": "c.thread_id",
    "checkpoint_id": "c.checkpoint_id",
    "namespace": "c.namespace",
    "seq": "c.seq",
    "project_id": "c.project_id",
    "created_at": "c.created_at",
    "size_bytes": "c.size_bytes",
    "synced": "((o.seq IS NULL AND c.seq <= {through}) OR o.sync_error IS NOT NULL)",
    "sync_error": "o.sync_error",
    "attempts": "COALESCE(o.attempts, s.attempts, 0)",
    "last_error": "CASE WHEN o.seq IS NULL THEN s.last_error ELSE o.last_error END",
    "synced_at": "COALESCE(o.synced_at, s.synced_at)",
    "step_type": "c.step_type",
    "pending_since": "CASE WHEN o.seq IS NULL THEN s.pending_since ELSE o.pending_since END",
}
_ENTRY_COLUMNS = tuple(ENTRY_SQL)
#: Which rows of the join each state is.
_STATE_SQL = {
    "pending": "o.seq IS NOT NULL AND o.sync_error IS NULL",
    "synced": "o.seq IS NULL AND c.seq <= {through}",
    "quarantined": "o.sync_error IS NOT NULL",
}


def entry_sql(store: SQLStore) -> dict[str, str]:
    """:data:`ENTRY_SQL` with the store's outbox mark filled in."""
    mark = through(store)
    return {name: sql.replace("{through}", mark) for name, sql in ENTRY_SQL.items()}


def outbox_first(store: SQLStore) -> str:
    """``o JOIN c``'s join: on SQLite ``CROSS JOIN``, which keeps the outbox ``o`` (the few
    rows the plane lacks) the outer loop, each checkpoint read by primary key. SQLite keeps no
    statistics here and would rather walk an index of every checkpoint, probing the outbox for
    each: seconds at a million rows, and the whole index read from disk at ten million."""
    return "CROSS JOIN" if store.db.sqlite else "JOIN"


def entry_join(store: SQLStore, *, unsent: bool = False) -> str:
    """``FROM`` the checkpoints, each with its outbox row and synced record (if any);
    ``unsent``: only the rows of the outbox, read from it (:func:`outbox_first`)."""
    table, outbox, synced = tables_of(store)
    first = (
        f"{outbox} o {outbox_first(store)} {table} c"
        if unsent
        else f"{table} c LEFT JOIN {outbox} o"
    )
    return f"FROM {first} ON o.seq = c.seq LEFT JOIN {synced} s ON s.seq = c.seq"


def tables_of(store: SQLStore) -> tuple[str, str, str]:
    """The checkpoints, outbox and synced tables' qualified names, for driver SQL."""
    db = store.db
    return (store.sql.table, db.table(outbox_table.name), db.table(synced_table.name))


class SQLOutbox(Outbox):
    """Pending, synced and quarantined rows of a SQL store, and its connection records."""

    store: SQLStore

    @reconnecting
    def _fetch(
        self, limit: int, project_id: str | None, exclude: Collection[RowKey]
    ) -> list[EncodedCheckpoint]:
        # The outbox in seq order, each row's checkpoint by primary key; excluded seqs are
        # filtered on the outbox, so their checkpoints are never read. A pooled connection, not
        # the thread's own (`execute`): the drain thread may still be reading when another
        # thread closes the store, and closing a SQLite connection in use crashes the process,
        # whereas a checked-out pooled one is only closed when returned.
        sql, db = self.store.sql, self.store.db
        catch_up(self.store)
        table, box, _ = tables_of(self.store)
        where = "o.sync_error IS NULL"
        params: list[Any] = []
        if project_id is not None:
            where += f" AND o.project_id = {sql.mark}"
            params.append(project_id)
        if exclude:
            where += f" AND o.seq NOT IN ({', '.join([sql.mark] * len(exclude))})"
            params.extend(seq for _, seq in exclude)
        params.append(limit)
        query = (
            f"SELECT {sql.qualified_columns} FROM {box} o {outbox_first(self.store)} {table} c "  # noqa: S608
            "ON c.seq = o.seq "
            f"WHERE {where} ORDER BY o.seq LIMIT {sql.mark}"
        )
        with db.one("read the outbox") as conn:
            return [encoded(r) for r in conn.exec_driver_sql(query, tuple(params))]

    def _acknowledge(self, keys: list[RowKey], now: datetime, *, attempt: bool) -> None:
        """Move these rows from the outbox to their synced records (``attempt``: count one more
        attempt, and clear the last error, as a send that went through does)."""
        _, box, done = tables_of(self.store)
        mark = self.store.sql.mark
        attempts, error = ("attempts + 1", "NULL") if attempt else ("attempts", "last_error")
        with self.store.db.write("mark rows synced") as conn:
            queue_new_rows(self.store, conn)
            for chunk in chunks([seq for _, seq in keys]):
                marks = ", ".join([mark] * len(chunk))
                conn.exec_driver_sql(
                    f"INSERT INTO {done} (seq, synced_at, attempts, last_error, pending_since) "  # noqa: S608
                    f"SELECT seq, {mark}, {attempts}, {error}, pending_since FROM {box} "
                    f"WHERE seq IN ({marks}) "
                    "ON CONFLICT (seq) DO UPDATE SET synced_at = excluded.synced_at, "
                    "attempts = excluded.attempts, last_error = excluded.last_error, "
                    "pending_since = excluded.pending_since",
                    (to_micros(now), *chunk),
                )
                conn.exec_driver_sql(
                    f"DELETE FROM {box} WHERE seq IN ({marks})",  # noqa: S608
                    tuple(chunk),
                )

    @reconnecting
    def _mark_synced(self, keys: list[RowKey], now: datetime) -> None:
        self._acknowledge(keys, now, attempt=False)

    @reconnecting
    def _mark_sent(self, keys: list[RowKey], now: datetime) -> None:
        # One transaction for record_attempt's and mark_synced's writes: a few narrow rows.
        self._acknowledge(keys, now, attempt=True)

    @reconnecting
    def _mark_quarantined(self, reasons: dict[RowKey, str], now: datetime) -> None:
        if not reasons:
            return
        o = outbox_table.c
        stmt = (
            outbox_table.update()
            .where(o.seq == sa.bindparam("row_seq"))
            .values(sync_error=sa.bindparam("reason"), synced_at=to_micros(now))
        )
        with self.store.db.write("quarantine rows") as conn:
            queue_new_rows(self.store, conn)
            conn.execute(
                stmt, [{"row_seq": seq, "reason": reason} for (_, seq), reason in reasons.items()]
            )

    def _record_attempt(self, keys: list[RowKey], error: str | None) -> None:
        o = outbox_table.c
        with self.store.db.write("record a send attempt") as conn:
            queue_new_rows(self.store, conn)
            for chunk in chunks([seq for _, seq in keys]):
                conn.execute(
                    outbox_table.update()
                    .where(o.seq.in_(chunk))
                    .values(attempts=o.attempts + 1, last_error=error)
                )

    @reconnecting
    def _release(self, keys: list[RowKey] | None, now: datetime) -> int:
        # One transaction: the spans the rows were pending are kept, then the rows reopened.
        o = outbox_table.c
        at = to_micros(now)
        reopen = outbox_table.update().values(sync_error=None, synced_at=None, pending_since=at)
        with self.store.db.write("release quarantined rows") as conn:
            if keys is None:
                conn.execute(_keep_spans(at, o.sync_error.isnot(None)))
                return int(conn.execute(reopen.where(o.sync_error.isnot(None))).rowcount)
            total = 0
            for chunk in chunks([seq for _, seq in keys]):
                chosen = sa.and_(o.sync_error.isnot(None), o.seq.in_(chunk))
                conn.execute(_keep_spans(at, chosen))
                total += conn.execute(reopen.where(chosen)).rowcount
            return total

    @reconnecting
    def _history(self) -> list[PendingSpan]:
        h = outbox_history.c
        with self.store.db.one("read the outbox history") as conn:
            rows = conn.execute(sa.select(outbox_history).order_by(h.released_at, h.id)).all()
        return [
            PendingSpan(
                project_id=r.project_id,
                created_at=from_micros(r.created_at),
                pending_from=from_micros(r.pending_from),
                pending_until=from_micros(r.pending_until),
                size_bytes=r.size_bytes,
                released_at=from_micros(r.released_at),
            )
            for r in rows
        ]

    @reconnecting
    def _entries(self, query: EntryQuery) -> list[OutboxEntry]:
        mark = self.store.sql.mark
        where: list[str] = []
        params: list[Any] = []
        if query.state is not None:
            where.append(_STATE_SQL[query.state].replace("{through}", through(self.store)))
        if query.project_id is not None:
            where.append(f"c.project_id = {mark}")
            params.append(query.project_id)
        if query.thread_id is not None:
            where.append(f"c.tkey = {mark} AND c.thread_id = {mark}")
            params += [thread_key(query.thread_id), query.thread_id]
        if query.after_seq is not None:
            where.append(f"c.seq > {mark}")
            params.append(query.after_seq)
        unsent = query.state in ("pending", "quarantined")
        catch_up(self.store)
        columns = ", ".join(entry_sql(self.store).values())
        sql = f"SELECT {columns} {entry_join(self.store, unsent=unsent)}"
        if where:
            sql += " WHERE " + " AND ".join(where)
        # The outer table's key: rows come in its order, and a limit stops the walk early.
        sql += f" ORDER BY {'o' if unsent else 'c'}.seq"
        if query.limit is not None:
            sql += f" LIMIT {mark}"
            params.append(query.limit)
        with self.store.db.one("read the outbox") as conn:
            return [_entry(r) for r in conn.exec_driver_sql(sql, tuple(params))]

    @reconnecting
    def _unreplicated(self) -> dict[str, int]:
        catch_up(self.store)
        table, box, _ = tables_of(self.store)
        query = (
            f"SELECT c.thread_id, COUNT(*) FROM {box} o {outbox_first(self.store)} {table} c "  # noqa: S608
            "ON c.seq = o.seq "
            "GROUP BY c.thread_id"
        )
        with self.store.db.one("read the outbox") as conn:
            return {thread_id: int(n) for thread_id, n in conn.exec_driver_sql(query)}

    @reconnecting
    def _record_connection(self, connection: ConnectionRecord) -> None:
        values = {
            "target": connection.target,
            "connected_at": to_micros(connection.connected_at),
            "disconnected_at": micros(connection.disconnected_at),
            "seen_at": micros(connection.seen_at),
            "acked_at": micros(connection.acked_at),
        }
        with self.store.db.one("record a connection") as conn:
            conn.execute(
                self.store.insert_stmt(connections)
                .values(project_id=connection.project_id, **values)
                .on_conflict_do_update(index_elements=["project_id"], set_=values)
            )

    @reconnecting
    def _forget_connection(self, project_id: str) -> None:
        with self.store.db.one("forget a connection") as conn:
            conn.execute(connections.delete().where(connections.c.project_id == project_id))

    @reconnecting
    def _connections(self) -> list[ConnectionRecord]:
        with self.store.db.one("read connections") as conn:
            return [
                ConnectionRecord(
                    r.project_id,
                    r.target,
                    from_micros(r.connected_at),
                    time_of(r.disconnected_at),
                    time_of(r.seen_at),
                    time_of(r.acked_at),
                )
                for r in conn.execute(sa.select(connections).order_by(connections.c.project_id))
            ]

    @reconnecting
    def _record_heartbeat(
        self, project_id: str, seen_at: datetime, acked_at: datetime | None
    ) -> None:
        c = connections.c
        acked = c.acked_at if acked_at is None else to_micros(acked_at)
        with self.store.db.one("record a drain heartbeat") as conn:
            conn.execute(
                connections.update()
                .where(c.project_id == project_id)
                .values(seen_at=to_micros(seen_at), acked_at=acked)
            )

    @reconnecting
    def _summary(self) -> list[OutboxSummary]:
        # The outbox's rows alone (metrics scrape this): never a synced row.
        catch_up(self.store)
        table, box, _ = tables_of(self.store)
        query = (
            "SELECT o.project_id, o.sync_error IS NULL, COUNT(*), SUM(c.size_bytes), "  # noqa: S608
            f"MIN(c.created_at) FROM {box} o {outbox_first(self.store)} {table} c ON c.seq = o.seq "
            "GROUP BY o.project_id, o.sync_error IS NULL"
        )
        totals: dict[str, dict[str, Any]] = {}
        with self.store.db.one("summarise the outbox") as conn:
            for project, pending, rows, size, oldest in conn.exec_driver_sql(query):
                if pending:
                    totals.setdefault(project, {}).update(
                        pending=int(rows),
                        pending_bytes=int(size or 0),
                        oldest_pending_at=time_of(oldest),
                    )
                else:
                    totals.setdefault(project, {})["quarantined"] = int(rows)
        return [OutboxSummary(p, **t) for p, t in sorted(totals.items())]


def _keep_spans(released_at: int, where: Any) -> Any:
    """``INSERT … SELECT``: the span each outbox row ``where`` chooses was pending, into the
    history (anonymous: the project, times and size, no id)."""
    o, c = outbox_table.c, checkpoints.c
    span = (
        sa.select(
            c.project_id,
            c.created_at,
            sa.func.coalesce(o.pending_since, c.created_at),
            sa.func.coalesce(o.synced_at, c.created_at),
            c.size_bytes,
            sa.literal(released_at, sa.BigInteger),
        )
        .select_from(outbox_table.join(checkpoints, c.seq == o.seq))
        .where(where)
    )
    names = [
        "project_id",
        "created_at",
        "pending_from",
        "pending_until",
        "size_bytes",
        "released_at",
    ]
    return outbox_history.insert().from_select(names, span)


def _entry(r: Any) -> OutboxEntry:
    e = dict(zip(_ENTRY_COLUMNS, r, strict=True))
    e["created_at"] = from_micros(e["created_at"])
    e["synced_at"] = time_of(e["synced_at"])
    e["pending_since"] = time_of(e["pending_since"])
    e["synced"] = bool(e["synced"])
    return OutboxEntry(**e)
