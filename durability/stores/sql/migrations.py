"""The SQL store's schema history: an ordered list of additive migrations, recorded in the store.

:func:`migrate` applies the versions a store has not recorded yet, in order, in one
transaction (on Postgres under an advisory lock, so concurrent setups of one schema queue).
A new store runs them all; version 1 already creates today's write indexes, so later versions
find nothing to do there.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.engine import Connection as SAConnection

from durability.stores.sql.rebuild import REBUILD_VERSION, refuse_at_open, swap
from durability.stores.sql.schema import (
    BY_ID_INDEX,
    ID_INDEX_CHARS,
    KEY_INDEXES,
    OUTBOX_MARK_KEY,
    SWEEP_INDEX,
    checkpoint_table,
    checkpoints,
    connections,
    erase_requests,
    meta_table,
    migrations_table,
    outbox_history,
    outbox_table,
    parks,
    sweep_lock_table,
    synced_table,
    threads,
    tombstones,
    writes,
)

#: The checkpoints table as versions 2 to 9 left it, its outbox state in columns of its own.
_WITH_OUTBOX = checkpoint_table(sa.MetaData(), outbox=True)
_NOT_SYNCED = sa.not_(_WITH_OUTBOX.c.synced)
_QUARANTINED = _WITH_OUTBOX.c.sync_error.isnot(None)
#: Versions 2 and 3's partial indexes of pending and quarantined rows (dropped by version 10).
_OUTBOX_INDEXES = (
    sa.Index(
        "ix_durability_outbox",
        _WITH_OUTBOX.c.seq,
        sqlite_where=_NOT_SYNCED,
        postgresql_where=_NOT_SYNCED,
    ),
    sa.Index(
        "ix_durability_outbox_project",
        _WITH_OUTBOX.c.project_id,
        _WITH_OUTBOX.c.seq,
        sqlite_where=_NOT_SYNCED,
        postgresql_where=_NOT_SYNCED,
    ),
    sa.Index(
        "ix_durability_quarantine",
        _WITH_OUTBOX.c.seq,
        sqlite_where=_QUARANTINED,
        postgresql_where=_QUARANTINED,
    ),
)


def create(conn: SAConnection, table: sa.Table) -> None:
    """CREATE … IF NOT EXISTS the table and its indexes (no catalog look-ups first)."""
    conn.execute(sa.schema.CreateTable(table, if_not_exists=True))
    for index in table.indexes:
        conn.execute(sa.schema.CreateIndex(index, if_not_exists=True))


def _base(conn: SAConnection) -> None:
    """Version 1: the checkpoint, write, ledger, park and meta tables (no outbox yet).

    The writes table is created with its indexes of today (version 7 moved them; its columns
    never changed), so on a new store version 7 finds nothing to do.
    """
    for table in (meta_table, writes, threads, parks):
        create(conn, table)
    create(conn, checkpoint_table(sa.MetaData(), outbox=False))


def _outbox(conn: SAConnection) -> None:
    """Version 2: the outbox columns; rows written before it count as already synced.

    Connecting an existing store does not back-push history: only checkpoints written
    afterwards replicate.
    """
    existing = _columns_of(conn, "durability_checkpoints")
    for name, ddl in (
        ("synced", "BOOLEAN NOT NULL DEFAULT TRUE"),
        ("sync_error", "TEXT"),
        ("attempts", "INTEGER NOT NULL DEFAULT 0"),
        ("last_error", "TEXT"),
        ("synced_at", "BIGINT"),
    ):
        if name not in existing:
            _add_column(conn, checkpoints, name, ddl)
    # New rows are inserted with synced = false explicitly; the TRUE default marks old rows.
    create(conn, connections)
    for index in _OUTBOX_INDEXES:
        conn.execute(sa.schema.CreateIndex(index, if_not_exists=True))


def _one_outbox_index(conn: SAConnection) -> None:
    """Version 3: drop the outbox index by ``seq`` alone; the one by ``(project_id, seq)`` stays.

    The drain always asks for one project's rows, and every pending row costs each index a
    page write on its put (a third of a SQLite put's time went to index pages). A fetch
    across projects reads the remaining partial index, which holds only pending rows.
    """
    _drop_indexes(conn, "ix_durability_outbox")


def _sweep_index(conn: SAConnection) -> None:
    """Version 4: the thread index carries ``created_at`` and ``size_bytes`` too, replacing ``(tkey, seq)``.

    The sweep's per-thread totals (one ``GROUP BY tkey``: count, bytes, newest write) then read
    the index alone instead of every row's page, which took a 100,000-thread SQLite store from
    2.2 s to under 0.5 s; its ``(tkey, seq)`` prefix still serves every thread read, so a put
    maintains no extra index.
    """
    conn.execute(sa.schema.CreateIndex(SWEEP_INDEX, if_not_exists=True))
    _drop_indexes(conn, "ix_durability_checkpoints_thread")


def _by_id_index(conn: SAConnection) -> None:
    """Version 5 (SQLite): a thread's checkpoints ordered by id, for LangGraph's "latest".

    LangGraph's latest is the greatest ``checkpoint_id`` in a thread and namespace; without
    this index every read of it sorted all of the thread's rows, payload pages included, so it
    grew with the thread. A put maintains one more index (~10 %). Postgres keeps the sort: its
    btree entries are capped near 2.7 KB and a 10 KB id must still be stored.
    """
    if conn.dialect.name == "sqlite":
        conn.execute(sa.schema.CreateIndex(BY_ID_INDEX, if_not_exists=True))


def _connection_closed(conn: SAConnection) -> None:
    """Version 6: a connection record outlives its disconnect, marked by ``disconnected_at``.

    A store that was connected keeps replicating after a clean disconnect, so the sweep and
    ``durability threads delete`` keep the rows the plane lacks until the next connect (an
    un-acked checkpoint is never dropped for being old).
    """
    if "disconnected_at" not in _columns_of(conn, "durability_connections"):
        _add_column(conn, connections, "disconnected_at", "BIGINT")


def _thread_first_keys(conn: SAConnection) -> None:
    """Version 7: the checkpoint hash is indexed after its thread's hash, ``(tkey, ckey)``.

    ``ckey`` alone is a hash, so a thread's checkpoints sat on unrelated leaves of a B-tree as
    large as the table's row count: deleting a thread dirtied one leaf per row. Thread first,
    a thread's entries share a leaf (they are deleted together), and the writes' ``(tkey,
    ckey)`` replaces both their ``ckey`` and ``tkey`` indexes. The unique index is built before
    the old one goes, so uniqueness never lapses; every read by ``ckey`` also names its ``tkey``.
    """
    for index in KEY_INDEXES:
        conn.execute(sa.schema.CreateIndex(index, if_not_exists=True))
    _drop_indexes(
        conn,
        "ix_durability_checkpoints_ckey",
        "ix_durability_writes_ckey",
        "ix_durability_writes_thread",
    )


def _drain_heartbeat(conn: SAConnection) -> None:
    """Version 8: a connection record carries its drain's heartbeat and last acknowledged batch,
    so ``durability outbox status`` tells a live drain from a record a gone process left open."""
    existing = _columns_of(conn, "durability_connections")
    for name in ("seen_at", "acked_at"):
        if name not in existing:
            _add_column(conn, connections, name, "BIGINT")


def _sweep_lock(conn: SAConnection) -> None:
    """Version 9: the sweep lock's table, so two sweeps of one store never run at once."""
    create(conn, sweep_lock_table)


def _tombstones(conn: SAConnection) -> None:
    """Version 10: erased threads' tombstones, which every put checks (see ``Store.erase``)."""
    create(conn, tombstones)


def _outbox_tables(conn: SAConnection) -> None:
    """Version 11: the outbox state moves to narrow tables of its own, kept by triggers.

    A pending or quarantined row is a row of ``durability_outbox`` (inserted with its
    checkpoint by a trigger); an acknowledgement moves it to ``durability_synced`` (when, after
    how many attempts); deleting a checkpoint deletes both (a trigger, so every delete path of
    every version keeps them in step). The drain then writes a few narrow rows per batch instead
    of rewriting every 2 KB checkpoint to flip its flags. The state of existing rows is copied
    (pending and quarantined through their partial indexes); the old columns stay unused on
    SQLite until the table is rebuilt, and are dropped on Postgres (a catalog change there).
    """
    create(conn, outbox_table)
    create(conn, synced_table)
    table = _qualified(conn, checkpoints.name)
    unsent = "synced = 0" if conn.dialect.name == "sqlite" else "NOT synced"
    copy = (
        f"INSERT INTO {_qualified(conn, outbox_table.name)} "  # noqa: S608
        "(seq, project_id, attempts, last_error, sync_error, synced_at) "
        "SELECT seq, project_id, attempts, last_error, sync_error, synced_at FROM {table} "
    )
    conn.exec_driver_sql(copy.format(table=table) + f"WHERE {unsent}")
    conn.exec_driver_sql(
        copy.format(table=table) + f"WHERE sync_error IS NOT NULL AND NOT ({unsent})"
    )
    conn.exec_driver_sql(
        f"INSERT INTO {_qualified(conn, synced_table.name)} (seq, synced_at, attempts, last_error) "  # noqa: S608
        f"SELECT seq, synced_at, attempts, last_error FROM {table} WHERE synced "
        "AND sync_error IS NULL AND (synced_at IS NOT NULL OR attempts > 0)"
    )
    _drop_indexes(conn, *(index.name for index in _OUTBOX_INDEXES if index.name))
    if conn.dialect.name == "postgresql":
        for name in ("synced", "sync_error", "attempts", "last_error", "synced_at"):
            conn.exec_driver_sql(f"ALTER TABLE {table} DROP COLUMN IF EXISTS {name}")
    for statement in outbox_triggers(conn):
        conn.exec_driver_sql(statement)


def outbox_triggers(conn: SAConnection) -> list[str]:
    """The statements (re)creating the triggers that keep the outbox tables in step with the
    checkpoints table: a put inserts its outbox row, a delete removes both records."""
    table, box, done = (_qualified(conn, t.name) for t in (checkpoints, outbox_table, synced_table))
    if conn.dialect.name == "sqlite":
        return [
            "DROP TRIGGER IF EXISTS durability_outbox_put",
            "DROP TRIGGER IF EXISTS durability_outbox_delete",
            f"CREATE TRIGGER durability_outbox_put AFTER INSERT ON {table} BEGIN "  # noqa: S608
            f"INSERT INTO {box} (seq, project_id) VALUES (new.seq, new.project_id); END",
            f"CREATE TRIGGER durability_outbox_delete AFTER DELETE ON {table} BEGIN "  # noqa: S608
            f"DELETE FROM {box} WHERE seq = old.seq; DELETE FROM {done} WHERE seq = old.seq; END",
        ]
    # Postgres: statement triggers over the transition tables, one set-based statement each.
    put, delete = (_qualified(conn, f"durability_outbox_{name}") for name in ("put", "delete"))
    return [
        f"CREATE OR REPLACE FUNCTION {put}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "  # noqa: S608
        f"INSERT INTO {box} (seq, project_id) SELECT seq, project_id FROM added; "
        "RETURN NULL; END $$",
        f"CREATE OR REPLACE FUNCTION {delete}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "  # noqa: S608
        f"DELETE FROM {box} AS o USING gone WHERE o.seq = gone.seq; "
        f"DELETE FROM {done} AS s USING gone WHERE s.seq = gone.seq; "
        "RETURN NULL; END $$",
        f"DROP TRIGGER IF EXISTS durability_outbox_put ON {table}",
        f"DROP TRIGGER IF EXISTS durability_outbox_delete ON {table}",
        f"CREATE TRIGGER durability_outbox_put AFTER INSERT ON {table} "
        f"REFERENCING NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION {put}()",
        f"CREATE TRIGGER durability_outbox_delete AFTER DELETE ON {table} "
        f"REFERENCING OLD TABLE AS gone FOR EACH STATEMENT EXECUTE FUNCTION {delete}()",
    ]


def _outbox_history(conn: SAConnection) -> None:
    """Version 12: a released row is pending again from its release (``pending_since``, in the
    outbox and, after the ack, in the synced record), and the span it was pending before its
    quarantine is kept in a table of its own, so a release never changes the backlog of days
    past (decision 0071)."""
    for table in (outbox_table, synced_table):
        if "pending_since" not in _columns_of(conn, table.name):
            _add_column(conn, table, "pending_since", "BIGINT")
    create(conn, outbox_history)


def _thread_id_index(conn: SAConnection) -> None:
    """Version 13: the ledger's thread ids indexed in code point order (Postgres: the "C"
    collation), so the thread picker searches a prefix as a range and pages through it,
    never listing every id. The ledger is written per run, not per checkpoint: a put pays
    nothing for it."""
    # A Postgres btree entry holds at most ~2.7 KB and an id may be 10 KB: index its first
    # ID_INDEX_CHARS characters (at most 800 bytes), which orders ids as their whole does.
    column = (
        f'(left(thread_id, {ID_INDEX_CHARS}) COLLATE "C")'
        if conn.dialect.name == "postgresql"
        else "thread_id"
    )
    conn.exec_driver_sql(
        "CREATE INDEX IF NOT EXISTS ix_durability_threads_id "
        f"ON {_qualified(conn, threads.name)} ({column})"
    )


def _erase_requests(conn: SAConnection) -> None:
    """Version 14: erasures waiting for the plane, sent by the drain like unsent rows."""
    create(conn, erase_requests)


def _rebuilt_table(conn: SAConnection) -> None:
    """Version 15 (SQLite): the checkpoints table rebuilt (see :mod:`.rebuild`): no
    AUTOINCREMENT counter, one unique index for ids, order and prefix search, no unused
    columns. Postgres keeps its layout (a sequence never hands a value out twice, and its
    btree cannot hold a 10 KB id)."""
    if conn.dialect.name == "sqlite":
        swap(conn, outbox_triggers(conn))


def _outbox_queued_in_batches(conn: SAConnection) -> None:
    """Version 16 (SQLite): a put no longer adds its outbox row (the insert trigger goes);
    rows above the ``outbox_through`` mark are queued in one statement before the outbox is
    read (see :mod:`.outbox_queue`, decision 0150). Every row stored so far already has its
    outbox row or synced record, so the mark starts at the newest seq. Postgres keeps its
    trigger."""
    if conn.dialect.name != "sqlite":
        return
    conn.exec_driver_sql("DROP TRIGGER IF EXISTS durability_outbox_put")
    table, meta = (_qualified(conn, t.name) for t in (checkpoints, meta_table))
    conn.exec_driver_sql(
        f"INSERT INTO {meta} (key, value) "  # noqa: S608
        f"SELECT ?, CAST(coalesce(max(seq), 0) AS TEXT) FROM {table} WHERE true "
        "ON CONFLICT (key) DO NOTHING",
        (OUTBOX_MARK_KEY,),
    )


#: The ordered, additive migrations; the index + 1 is the version recorded in the store.
MIGRATIONS: Sequence[tuple[str, Callable[[SAConnection], None]]] = (
    ("base tables", _base),
    ("outbox columns", _outbox),
    ("one outbox index", _one_outbox_index),
    ("thread totals index", _sweep_index),
    ("checkpoints by id index", _by_id_index),
    ("connection records kept at disconnect", _connection_closed),
    ("thread-first key indexes", _thread_first_keys),
    ("drain heartbeats", _drain_heartbeat),
    ("sweep lock", _sweep_lock),
    ("tombstones", _tombstones),
    ("outbox tables", _outbox_tables),
    ("outbox history", _outbox_history),
    ("thread id index", _thread_id_index),
    ("erase requests", _erase_requests),
    ("checkpoints table rebuilt", _rebuilt_table),
    ("outbox queued in batches", _outbox_queued_in_batches),
)


def migrate(
    conn: SAConnection,
    applied_at: int,
    *,
    url: str = "",
    until: int | None = None,
    rewrite_large: bool = False,
) -> None:
    """Apply, in order, every migration the store has not recorded (inside ``conn``'s
    transaction), up to version ``until`` when given.

    A migration that rewrites a large table is refused (:class:`StoreNeedsMigration`) unless
    ``rewrite_large``: ``durability store migrate`` runs it, in batches.
    """
    create(conn, migrations_table)
    applied = set(conn.execute(sa.select(migrations_table.c.version)).scalars())
    for version, (name, step) in enumerate(MIGRATIONS, start=1):
        if until is not None and version > until:
            return
        if version in applied:
            continue
        if version == REBUILD_VERSION and conn.dialect.name == "sqlite" and not rewrite_large:
            refuse_at_open(conn, url)
        step(conn)
        conn.execute(
            migrations_table.insert().values(version=version, name=name, applied_at=applied_at)
        )


@dataclass(frozen=True)
class MigrationPlan:
    """What ``durability store migrate`` would do: the pending versions (version, name, whether
    it rewrites the checkpoints table) and the rows a rewrite copies."""

    steps: list[tuple[int, str, bool]]
    rows: int


def pending(conn: SAConnection) -> list[tuple[int, str, bool]]:
    """The migrations the store has not recorded: version, name, whether it rewrites a table."""
    create(conn, migrations_table)
    applied = set(conn.execute(sa.select(migrations_table.c.version)).scalars())
    sqlite = conn.dialect.name == "sqlite"
    return [
        (version, name, sqlite and version == REBUILD_VERSION)
        for version, (name, _step) in enumerate(MIGRATIONS, start=1)
        if version not in applied
    ]


def _columns_of(conn: SAConnection, table: str) -> set[str]:
    # Postgres adds a column only if it is missing by itself; SQLite is asked which it has.
    if conn.dialect.name == "postgresql":
        return set()
    return {row[1] for row in conn.exec_driver_sql(f"PRAGMA table_info({table})")}


def _add_column(conn: SAConnection, table: sa.Table, name: str, ddl: str) -> None:
    guard = "IF NOT EXISTS " if conn.dialect.name == "postgresql" else ""
    conn.exec_driver_sql(
        f"ALTER TABLE {_qualified(conn, table.name)} ADD COLUMN {guard}{name} {ddl}"
    )


def _drop_indexes(conn: SAConnection, *names: str) -> None:
    for name in names:
        conn.exec_driver_sql(f"DROP INDEX IF EXISTS {_qualified(conn, name)}")


def _qualified(conn: SAConnection, name: str) -> str:
    quote = conn.dialect.identifier_preparer.quote
    schema = (conn.get_execution_options().get("schema_translate_map") or {}).get(None)
    return f"{quote(schema)}.{quote(name)}" if schema else quote(name)
