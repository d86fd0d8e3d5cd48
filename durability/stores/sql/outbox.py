"""The SQL store's outbox: the replication columns of the checkpoints table, and connection records.

A pending row is ``synced = false``; the drain's fetch reads a partial index that holds only
those rows, by project and ``seq``.
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
from durability.stores.sql.schema import (
    NOT_SYNCED_SQL,
    checkpoints,
    connections,
    micros,
    not_synced,
    outbox_history,
    quarantined,
    time_of,
    where_thread,
)
from durability.stores.sql.statements import encoded

if TYPE_CHECKING:
    from durability.stores.sql.store import SQLStore

_ENTRY_COLUMNS = (
    "thread_id",
    "checkpoint_id",
    "namespace",
    "seq",
    "project_id",
    "created_at",
    "size_bytes",
    "synced",
    "sync_error",
    "attempts",
    "last_error",
    "synced_at",
    "step_type",
    "pending_since",
)


class SQLOutbox(Outbox):
    """Pending, synced and quarantined rows of a SQL store, and its connection records."""

    store: SQLStore

    @reconnecting
    def _fetch(
        self, limit: int, project_id: str | None, exclude: Collection[RowKey]
    ) -> list[EncodedCheckpoint]:
        # Driver SQL: compiling the statement and mapping rows through the ORM-level layer
        # cost more than the query for a batch of 2 KB rows. The predicate is the outbox
        # index's own, as each dialect renders it, so SQLite matches the partial index; the
        # excluded seqs are filtered on that index, so their rows are never read. A pooled
        # connection, not the thread's own (`execute`): the drain thread may still be reading
        # when another thread closes the store, and closing a SQLite connection that is in use
        # crashes the process, whereas a checked-out pooled one is only closed when returned.
        sql, db = self.store.sql, self.store.db
        where = NOT_SYNCED_SQL[db.sqlite]
        params: list[Any] = []
        if project_id is not None:
            where += f" AND project_id = {sql.mark}"
            params.append(project_id)
        if exclude:
            where += f" AND seq NOT IN ({', '.join([sql.mark] * len(exclude))})"
            params.extend(seq for _, seq in exclude)
        params.append(limit)
        query = f"SELECT {sql.columns} FROM {sql.table} WHERE {where} ORDER BY seq LIMIT {sql.mark}"  # noqa: S608
        with db.one("read the outbox") as conn:
            return [encoded(r) for r in conn.exec_driver_sql(query, tuple(params))]

    @reconnecting
    def _mark_synced(self, keys: list[RowKey], now: datetime) -> None:
        with self.store.db.write("mark rows synced") as conn:
            for chunk in chunks([seq for _, seq in keys]):
                conn.execute(
                    checkpoints.update()
                    .where(checkpoints.c.seq.in_(chunk))
                    .values(synced=True, sync_error=None, synced_at=to_micros(now))
                )

    @reconnecting
    def _mark_sent(self, keys: list[RowKey], now: datetime) -> None:
        # One UPDATE instead of record_attempt's and mark_synced's: SQLite rewrites a whole
        # 2 KB row to change a flag, so the drain's second UPDATE cost as much as its first.
        # Driver SQL: SQLAlchemy's expansion of a 500-value IN list was a tenth of the drain.
        mark, table = self.store.sql.mark, self.store.sql.table
        with self.store.db.write("mark rows synced") as conn:
            for chunk in chunks([seq for _, seq in keys]):
                conn.exec_driver_sql(
                    f"UPDATE {table} SET synced = {mark}, sync_error = NULL, synced_at = {mark}, "  # noqa: S608
                    f"attempts = attempts + 1, last_error = NULL "
                    f"WHERE seq IN ({', '.join([mark] * len(chunk))})",
                    (True, to_micros(now), *chunk),
                )

    @reconnecting
    def _mark_quarantined(self, reasons: dict[RowKey, str], now: datetime) -> None:
        if not reasons:
            return
        stmt = (
            checkpoints.update()
            .where(checkpoints.c.seq == sa.bindparam("row_seq"))
            .values(synced=True, sync_error=sa.bindparam("reason"), synced_at=to_micros(now))
        )
        with self.store.db.write("quarantine rows") as conn:
            conn.execute(
                stmt, [{"row_seq": seq, "reason": reason} for (_, seq), reason in reasons.items()]
            )

    def _record_attempt(self, keys: list[RowKey], error: str | None) -> None:
        with self.store.db.write("record a send attempt") as conn:
            for chunk in chunks([seq for _, seq in keys]):
                conn.execute(
                    checkpoints.update()
                    .where(checkpoints.c.seq.in_(chunk))
                    .values(attempts=checkpoints.c.attempts + 1, last_error=error)
                )

    @reconnecting
    def _release(self, keys: list[RowKey] | None, now: datetime) -> int:
        # One transaction: the spans the rows were pending are kept, then the rows reopened.
        at = to_micros(now)
        reopen = checkpoints.update().values(
            synced=False, sync_error=None, synced_at=None, pending_since=at
        )
        with self.store.db.write("release quarantined rows") as conn:
            if keys is None:
                conn.execute(_keep_spans(at, quarantined))
                return int(conn.execute(reopen.where(quarantined)).rowcount)
            total = 0
            for chunk in chunks([seq for _, seq in keys]):
                chosen = sa.and_(quarantined, checkpoints.c.seq.in_(chunk))
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
        c = checkpoints.c
        select = sa.select(*(c[name] for name in _ENTRY_COLUMNS)).order_by(c.seq)
        state_clause = {
            "pending": (not_synced,),
            "synced": (c.synced, c.sync_error.is_(None)),
            "quarantined": (quarantined,),
        }
        if query.state is not None:
            select = select.where(*state_clause[query.state])
        if query.project_id is not None:
            select = select.where(c.project_id == query.project_id)
        if query.thread_id is not None:
            select = select.where(*where_thread(query.thread_id))
        if query.after_seq is not None:
            select = select.where(c.seq > query.after_seq)
        if query.limit is not None:
            select = select.limit(query.limit)
        with self.store.db.one("read the outbox") as conn:
            return [_entry(r) for r in conn.execute(select)]

    @reconnecting
    def _unreplicated(self) -> dict[str, int]:
        c = checkpoints.c
        counts: dict[str, int] = {}
        with self.store.db.read("read the outbox") as conn:
            # Two queries, each answered from its partial index (pending rows, quarantined rows).
            for where in (not_synced, quarantined):
                query = sa.select(c.thread_id, sa.func.count()).where(where).group_by(c.thread_id)
                for thread_id, n in conn.execute(query):
                    counts[thread_id] = counts.get(thread_id, 0) + int(n)
        return counts

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
        # Driver SQL with the partial indexes' own predicates, so neither read touches a
        # synced row (metrics scrape this).
        table, db = self.store.sql.table, self.store.db
        pending = (
            f"SELECT project_id, COUNT(*), SUM(size_bytes), MIN(created_at) FROM {table} "  # noqa: S608
            f"WHERE {NOT_SYNCED_SQL[db.sqlite]} GROUP BY project_id"
        )
        quarantined = (
            f"SELECT project_id, COUNT(*) FROM {table} WHERE sync_error IS NOT NULL "  # noqa: S608
            "GROUP BY project_id"
        )
        totals: dict[str, dict[str, Any]] = {}
        with db.one("summarise the outbox") as conn:
            for project, rows, size, oldest in conn.exec_driver_sql(pending):
                totals.setdefault(project, {}).update(
                    pending=int(rows),
                    pending_bytes=int(size or 0),
                    oldest_pending_at=time_of(oldest),
                )
            for project, rows in conn.exec_driver_sql(quarantined):
                totals.setdefault(project, {})["quarantined"] = int(rows)
        return [OutboxSummary(p, **t) for p, t in sorted(totals.items())]


def _keep_spans(released_at: int, where: Any) -> Any:
    """``INSERT … SELECT``: the span each row ``where`` chooses was pending, into the history."""
    c = checkpoints.c
    span = sa.select(
        c.project_id,
        c.created_at,
        sa.func.coalesce(c.pending_since, c.created_at),
        sa.func.coalesce(c.synced_at, c.created_at),
        c.size_bytes,
        sa.literal(released_at, sa.BigInteger),
    ).where(where)
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
    return OutboxEntry(
        thread_id=r.thread_id,
        checkpoint_id=r.checkpoint_id,
        namespace=r.namespace,
        seq=r.seq,
        project_id=r.project_id,
        created_at=from_micros(r.created_at),
        size_bytes=r.size_bytes,
        synced=bool(r.synced),
        sync_error=r.sync_error,
        attempts=r.attempts,
        last_error=r.last_error,
        synced_at=time_of(r.synced_at),
        step_type=r.step_type,
        pending_since=time_of(r.pending_since),
    )
