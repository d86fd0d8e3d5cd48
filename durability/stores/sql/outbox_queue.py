"""SQLite's outbox rows are queued in batches, not by the put (migration 16, decision 0150).

Until version 16 an insert trigger added a ``durability_outbox`` row with every checkpoint:
one more B-tree page written (and a WAL frame of 4 KB committed) per put, the largest share of
the put's statement (benchmarks/RESULTS.md, "Hot paths (issue 15)"). Now the put writes only
its checkpoint, and the rows above the *queued-through mark* (``outbox_through`` in the meta
table) are the pending rows not yet given their outbox row. Before the outbox is read or
changed, :func:`queue_new_rows` adds those rows' outbox rows with one ``INSERT … SELECT`` and
raises the mark, in one transaction: the drain writes a few pages per batch instead of a page
per put, and every per-row record (attempts, last error, quarantine reason, synced time,
pending history) is kept as before, in the same tables.

The mark is exact because a SQLite seq is taken inside the write transaction that commits it
(``max(newest seq, floor) + 1``, writers one at a time): a row committed later always has a
higher seq, so no row is ever left below the mark without its outbox row. A read that runs
beside a put can still meet a row above the mark; :func:`through` lets its SQL count such a
row as pending. A put of rows the plane already has (``synced=True``) queues the rows before
it, then raises the mark past its own.

Postgres keeps its statement trigger (a sequence hands out values out of commit order, so a
mark could pass a row still uncommitted): there the mark is a constant above every seq.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqlalchemy.engine import Connection as SAConnection

from durability.stores.sql.schema import OUTBOX_MARK_KEY, meta_table, outbox_table

if TYPE_CHECKING:
    from durability.stores.sql.store import SQLStore

#: Rows queued per transaction when a read catches up (a few hundred milliseconds at most).
QUEUE_BATCH = 20_000
#: Postgres's mark: every row has its outbox row from its own insert (the trigger).
_ABOVE_EVERY_SEQ = "9223372036854775807"


def through(store: SQLStore) -> str:
    """SQL for the mark, read in the statement's own snapshot: a row of the checkpoints table
    with a higher seq is pending (it has no outbox row yet)."""
    if not store.db.sqlite:
        return _ABOVE_EVERY_SEQ
    return _mark_sql(store.db.table(meta_table.name))


def _mark_sql(meta: str) -> str:
    # Version 16 writes the mark; 0 before it (every row then had its outbox row anyway).
    return (
        f"COALESCE((SELECT CAST(value AS INTEGER) FROM {meta} "  # noqa: S608
        f"WHERE key = '{OUTBOX_MARK_KEY}'), 0)"
    )


def queue_new_rows(store: SQLStore, conn: SAConnection, limit: int | None = None) -> int:
    """Inside ``conn``'s write transaction (SQLite): give the rows above the mark (the first
    ``limit`` of them, when given) their outbox rows and raise the mark past them; how many
    were queued. Nothing is written when no row is above the mark."""
    if not store.db.sqlite:
        return 0
    table, box = store.sql.table, store.db.table(outbox_table.name)
    meta, mark = store.db.table(meta_table.name), through(store)
    newest = conn.exec_driver_sql(
        f"SELECT max(seq) FROM (SELECT seq FROM {table} WHERE seq > {mark} "  # noqa: S608
        "ORDER BY seq LIMIT ?)",
        (-1 if limit is None else limit,),
    ).scalar()
    if newest is None:
        return 0
    added = conn.exec_driver_sql(
        f"INSERT INTO {box} (seq, project_id) SELECT seq, project_id FROM {table} "  # noqa: S608
        f"WHERE seq > {mark} AND seq <= ? ORDER BY seq ON CONFLICT (seq) DO NOTHING",
        (newest,),
    ).rowcount
    _set_mark(conn, meta, newest)
    return int(added)


def _set_mark(conn: SAConnection, meta: str, seq: int) -> None:
    conn.exec_driver_sql(
        f"INSERT INTO {meta} (key, value) VALUES ('{OUTBOX_MARK_KEY}', ?) "  # noqa: S608
        "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        (str(seq),),
    )


def raise_mark(store: SQLStore, conn: SAConnection) -> None:
    """Inside ``conn``'s write transaction (SQLite): the mark moves up to the newest seq (rows
    below it are queued or, just put as synced, need no outbox row)."""
    newest = conn.exec_driver_sql(f"SELECT max(seq) FROM {store.sql.table}").scalar()  # noqa: S608
    if newest is not None:
        _set_mark(conn, store.db.table(meta_table.name), newest)


def catch_up(store: SQLStore) -> None:
    """Queue the rows put since the outbox was last read (SQLite), before a read of it: one
    look at the newest seq, and a short write transaction only when some row is above the mark."""
    if not store.db.sqlite:
        return
    # A pooled connection, not the thread's own (``Database.execute``): the drain thread calls
    # this, and closing a SQLite connection another thread is using crashes the process.
    look = f"SELECT 1 WHERE (SELECT max(seq) FROM {store.sql.table}) > {through(store)}"  # noqa: S608
    with store.db.one("look for rows to queue") as conn:
        behind = conn.exec_driver_sql(look).first() is not None
    while behind:
        # Batches of their own: a first read after a million unread puts holds the write lock
        # for one batch at a time, not for the whole backlog.
        with store.db.write("queue new rows in the outbox") as conn:
            behind = queue_new_rows(store, conn, QUEUE_BATCH) == QUEUE_BATCH


__all__ = ["catch_up", "queue_new_rows", "raise_mark", "through"]
