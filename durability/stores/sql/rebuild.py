"""Migration 15 (SQLite): the checkpoints table rebuilt with fewer B-trees to write per put.

The rebuilt table keeps ``seq`` as its rowid but drops ``AUTOINCREMENT`` (whose counter page
was written by every put): a seq is still never reused, because every insert takes
``max(newest seq, floor) + 1`` and a trigger raises the floor (``seq_floor`` in the meta
table) whenever a row is deleted. One unique index ``(thread_id, namespace, checkpoint_id)``
replaces both the hashed ``(tkey, ckey)`` unique index and the ``(tkey, namespace,
checkpoint_id)`` order index (SQLite has no cap on an index entry, so a 10 KB id still fits):
it keeps ids unique, gives LangGraph's order and serves a search of thread ids by prefix. The
``(tkey, seq, created_at, size_bytes)`` index of thread order and totals stays. The outbox
columns that version 11 stopped using are gone.

A rebuild rewrites every row, so a table of more than :data:`REBUILD_AT_OPEN_ROWS` rows is
rebuilt only by ``durability store migrate URL``: the rows are copied in batches, each its own
transaction (a killed migration resumes where it stopped), then one transaction swaps the
tables. A store that needs it refuses to open until then (:class:`StoreNeedsMigration`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import sqlalchemy as sa
from sqlalchemy.engine import Connection as SAConnection

from durability._util import redact_url
from durability.errors import StoreNeedsMigration
from durability.stores.rows import STORED_FIELDS
from durability.stores.sql.schema import KEY, SEQ_FLOOR_KEY, stored_column

if TYPE_CHECKING:
    from durability.stores.sql.engine import Database

#: The schema version of the rebuild.
REBUILD_VERSION = 15
#: A table of at most this many rows is rebuilt when the store opens (about a second).
REBUILD_AT_OPEN_ROWS = 10_000
#: Rows copied per transaction by ``durability store migrate``.
BATCH_ROWS = 5_000
NEXT = "durability_checkpoints_next"
TABLE = "durability_checkpoints"
_COLUMNS = ", ".join(("seq", "tkey", "ckey", *STORED_FIELDS))

#: Called with (rows copied, rows to copy) after each batch.
Progress = Callable[[int, int], None]

INDEXES = (
    f"CREATE INDEX ix_durability_checkpoints_thread_totals ON {TABLE} "
    "(tkey, seq, created_at, size_bytes)",
    f"CREATE UNIQUE INDEX ix_durability_checkpoints_ids ON {TABLE} "
    "(thread_id, namespace, checkpoint_id)",
)

#: Deleting a row raises the floor a new seq starts above (so none is ever reused).
FLOOR_TRIGGER = (
    f"CREATE TRIGGER IF NOT EXISTS durability_seq_floor AFTER DELETE ON {TABLE} BEGIN "  # noqa: S608
    f"UPDATE durability_meta SET value = CAST(old.seq AS TEXT) WHERE key = '{SEQ_FLOOR_KEY}' "
    "AND CAST(value AS INTEGER) < old.seq; END"
)


def next_table() -> sa.Table:
    """The rebuilt table, under its temporary name."""
    return sa.Table(
        NEXT,
        sa.MetaData(),
        sa.Column("seq", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("tkey", KEY, nullable=False),
        sa.Column("ckey", KEY, nullable=False),
        *(stored_column(name) for name in STORED_FIELDS),
    )


def rows_left(conn: SAConnection, limit: int | None = None) -> int:
    """How many rows are still to copy (counting at most ``limit + 1`` when given)."""
    after = _copied_through(conn)
    cap = "" if limit is None else f" LIMIT {int(limit) + 1}"
    query = f"SELECT count(*) FROM (SELECT 1 FROM {TABLE} WHERE seq > ?{cap})"  # noqa: S608
    return int(conn.exec_driver_sql(query, (after,)).scalar_one())


def _copied_through(conn: SAConnection, *, create: bool = False) -> int:
    """The newest seq copied so far (0 before the first batch, which ``create`` prepares for)."""
    exists = conn.exec_driver_sql(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (NEXT,)
    ).first()
    if exists is None:
        if create:
            conn.execute(sa.schema.CreateTable(next_table()))
        return 0
    return int(conn.exec_driver_sql(f"SELECT coalesce(max(seq), 0) FROM {NEXT}").scalar_one())  # noqa: S608


def copy_batch(conn: SAConnection, size: int | None = None) -> int:
    """Copy the next ``size`` (default :data:`BATCH_ROWS`) rows in seq order; how many were
    copied."""
    after = _copied_through(conn, create=True)
    return int(
        conn.exec_driver_sql(
            f"INSERT INTO {NEXT} ({_COLUMNS}) SELECT {_COLUMNS} FROM {TABLE} "  # noqa: S608
            f"WHERE seq > ? ORDER BY seq LIMIT {int(size or BATCH_ROWS)}",
            (after,),
        ).rowcount
    )


def swap(conn: SAConnection, triggers: list[str]) -> None:
    """Copy the rest, drop what was deleted meanwhile, and put the new table in the old's place.

    The floor starts at the old AUTOINCREMENT counter, so no seq ever handed out comes back.
    """
    while copy_batch(conn):
        pass
    conn.exec_driver_sql(f"DELETE FROM {NEXT} WHERE seq NOT IN (SELECT seq FROM {TABLE})")  # noqa: S608
    floor = conn.exec_driver_sql(
        "SELECT max(coalesce((SELECT seq FROM sqlite_sequence WHERE name = ?), 0), "  # noqa: S608
        f"coalesce((SELECT max(seq) FROM {TABLE}), 0))",
        (TABLE,),
    ).scalar_one()
    conn.exec_driver_sql(
        "INSERT INTO durability_meta (key, value) VALUES (?, ?) "
        "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        (SEQ_FLOOR_KEY, str(floor)),
    )
    conn.exec_driver_sql(f"DROP TABLE {TABLE}")  # its indexes and triggers go with it
    conn.exec_driver_sql(f"ALTER TABLE {NEXT} RENAME TO {TABLE}")
    for statement in (*INDEXES, *triggers, FLOOR_TRIGGER):
        conn.exec_driver_sql(statement)


def refuse_at_open(conn: SAConnection, url: str) -> None:
    """Raise :class:`StoreNeedsMigration` when the table is too large to rebuild at open."""
    left = rows_left(conn, REBUILD_AT_OPEN_ROWS)
    if left > REBUILD_AT_OPEN_ROWS:
        raise StoreNeedsMigration(
            f"cannot open {redact_url(url)}: its checkpoints table (more than "
            f"{REBUILD_AT_OPEN_ROWS:,} rows) needs schema version {REBUILD_VERSION}, a rebuild "
            "that rewrites every row; run `durability store migrate URL` (it shows its plan, "
            "reports progress and resumes if stopped), then open it again"
        )


def rebuild_in_batches(db: Database, progress: Progress | None) -> None:
    """Copy the rows in batches, one transaction each (what ``durability store migrate`` runs
    before the migration itself swaps the tables)."""
    with db.write("plan the rebuild") as conn:
        total = rows_left(conn)
    done = 0
    while True:
        with db.write("copy checkpoints into the rebuilt table") as conn:
            copied = copy_batch(conn)
        if not copied:
            return
        done += copied
        if progress is not None:
            progress(done, total)
