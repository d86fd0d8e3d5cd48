"""The SQL store's tables and indexes (SQLAlchemy Core), and the hashes that index long ids.

State is kept as TEXT (Postgres JSONB cannot hold ``\\u0000``). Ids of any length are indexed
through a 128-bit hash of them (a Postgres btree entry is capped near 2.7 KB, and a 10 KB id
must work); every read by hash also compares the ids themselves. The checkpoint columns are
:data:`~durability.stores.rows.STORED_FIELDS`, in order.
"""

from __future__ import annotations

import hashlib
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa

from durability.clock import from_micros, to_micros
from durability.stores.rows import INTEGER_FIELDS, NULLABLE_FIELDS, STORED_FIELDS, WRITE_FIELDS

metadata = sa.MetaData()
BIGINT = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
KEY = sa.String(32)

meta_table = sa.Table(
    "durability_meta",
    metadata,
    sa.Column("key", sa.String(64), primary_key=True),
    sa.Column("value", sa.Text, nullable=False),
)

migrations_table = sa.Table(
    "durability_migrations",
    metadata,
    sa.Column("version", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("name", sa.Text, nullable=False),
    sa.Column("applied_at", sa.BigInteger, nullable=False),
)


def stored_column(name: str) -> sa.Column[Any]:
    """The column of one of :data:`STORED_FIELDS`."""
    kind = sa.BigInteger if name in INTEGER_FIELDS or name == "created_at" else sa.Text
    return sa.Column(name, kind, nullable=name in NULLABLE_FIELDS)


def checkpoint_table(md: sa.MetaData, *, outbox: bool) -> sa.Table:
    """The checkpoints table; ``outbox=True`` is its shape from migration 2 to 9 (the outbox state
    in its own columns, moved to :data:`outbox_table` and :data:`synced_table` by migration 11)."""
    columns: list[sa.Column[Any]] = [
        sa.Column("seq", BIGINT, primary_key=True, autoincrement=True),
        sa.Column("tkey", KEY, nullable=False),
        sa.Column("ckey", KEY, nullable=False),
        *(stored_column(name) for name in STORED_FIELDS),
    ]
    if outbox:
        columns += [
            sa.Column("synced", sa.Boolean(create_constraint=False), nullable=False),
            sa.Column("sync_error", sa.Text),
            sa.Column("attempts", sa.Integer, nullable=False),
            sa.Column("last_error", sa.Text),
            sa.Column("synced_at", sa.BigInteger),
        ]
    # sqlite_autoincrement: never reuse a seq, even after the newest rows are deleted.
    table: sa.Table = sa.Table("durability_checkpoints", md, *columns, sqlite_autoincrement=True)
    sa.Index("ix_durability_checkpoints_thread", table.c.tkey, table.c.seq)
    sa.Index("ix_durability_checkpoints_ckey", table.c.ckey, unique=True)
    return table


checkpoints = checkpoint_table(metadata, outbox=False)

#: The rows the plane does not have: pending, or quarantined (``sync_error`` set, with the time
#: of the refusal in ``synced_at``). A put inserts one (Postgres: a trigger on the checkpoints
#: table; SQLite: queued in batches before the outbox is read, see ``outbox_queue.py``), an
#: acknowledgement moves it to :data:`synced_table`, and deleting the checkpoint deletes it: narrow
#: rows, so the drain never rewrites a 2 KB checkpoint to flip a flag.
outbox_table = sa.Table(
    "durability_outbox",
    metadata,
    sa.Column("seq", BIGINT, primary_key=True, autoincrement=False),
    sa.Column("project_id", sa.Text, nullable=False),
    sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
    sa.Column("last_error", sa.Text),
    sa.Column("sync_error", sa.Text),
    sa.Column("synced_at", sa.BigInteger),
    sa.Column("pending_since", sa.BigInteger),
)

#: The record an acknowledgement leaves: when the plane took the row, after how many attempts
#: and the last error met on the way. A checkpoint with neither an outbox row nor a synced
#: record was written as synced (or before the store replicated).
synced_table = sa.Table(
    "durability_synced",
    metadata,
    sa.Column("seq", BIGINT, primary_key=True, autoincrement=False),
    sa.Column("synced_at", sa.BigInteger),
    sa.Column("attempts", sa.Integer, nullable=False),
    sa.Column("last_error", sa.Text),
    sa.Column("pending_since", sa.BigInteger),
)

#: What released rows spent pending before their quarantine (migration 12): anonymous spans.
outbox_history = sa.Table(
    "durability_outbox_history",
    metadata,
    sa.Column("id", BIGINT, primary_key=True, autoincrement=True),
    sa.Column("project_id", sa.Text, nullable=False),
    sa.Column("created_at", sa.BigInteger, nullable=False),
    sa.Column("pending_from", sa.BigInteger, nullable=False),
    sa.Column("pending_until", sa.BigInteger, nullable=False),
    sa.Column("size_bytes", sa.BigInteger, nullable=False),
    sa.Column("released_at", sa.BigInteger, nullable=False),
)

writes = sa.Table(
    "durability_writes",
    metadata,
    sa.Column("id", BIGINT, primary_key=True, autoincrement=True),
    sa.Column("wkey", KEY, nullable=False, unique=True),
    sa.Column("tkey", KEY, nullable=False),
    sa.Column("ckey", KEY, nullable=False),
    *(
        sa.Column(name, sa.Integer if name == "idx" else sa.Text, nullable=False)
        for name in WRITE_FIELDS
    ),
)


#: How many leading characters of a thread id the Postgres search index holds (migration 13):
#: a btree entry is capped near 2.7 KB, an id may be 10 KB; 200 characters are at most 800 bytes.
ID_INDEX_CHARS = 200

threads = sa.Table(
    "durability_threads",
    metadata,
    sa.Column("tkey", KEY, primary_key=True),
    sa.Column("thread_id", sa.Text, nullable=False),
    sa.Column("owner", sa.Text),
    sa.Column("run_id", sa.Text),
    sa.Column("started_at", sa.BigInteger),
    sa.Column("declared_waiting", sa.BigInteger),
    sa.Column("declared_finished", sa.BigInteger),
    sa.Column("finished_at", sa.BigInteger),
    sa.Column("due_at", sa.BigInteger),
    sa.Column("lease_holder", sa.Text),
    sa.Column("lease_run_id", sa.Text),
    sa.Column("lease_acquired_at", sa.BigInteger),
    sa.Column("lease_expires_at", sa.BigInteger),
)

parks = sa.Table(
    "durability_parks",
    metadata,
    sa.Column("tkey", KEY, primary_key=True),
    sa.Column("thread_id", sa.Text, nullable=False),
    sa.Column("run_id", sa.Text, nullable=False),
    sa.Column("checkpoint_id", sa.Text, nullable=False),
    sa.Column("node_id", sa.Text, nullable=False),
    sa.Column("runner", sa.Text, nullable=False),
    sa.Column("reason", sa.Text, nullable=False),
    sa.Column("context", sa.Text, nullable=False),
    sa.Column("deadline", sa.BigInteger, nullable=False),
    sa.Column("created_at", sa.BigInteger),
    sa.Column("deadline_source", sa.Text, nullable=False),
)

connections = sa.Table(
    "durability_connections",
    metadata,
    sa.Column("project_id", sa.String(512), primary_key=True),
    sa.Column("target", sa.Text, nullable=False),
    sa.Column("connected_at", sa.BigInteger, nullable=False),
    sa.Column("disconnected_at", sa.BigInteger),
    sa.Column("seen_at", sa.BigInteger),
    sa.Column("acked_at", sa.BigInteger),
)

#: One sweep per store: the holder of the sweep (SQLite: the lock itself, with an expiry).
sweep_lock_table = sa.Table(
    "durability_sweep_lock",
    metadata,
    sa.Column("name", sa.String(32), primary_key=True),
    sa.Column("holder", sa.Text, nullable=False),
    sa.Column("expires_at", sa.Float, nullable=False),
)

#: Erased threads, by the keyed hash of their id (no thread id: see ``stores/tombstones.py``).
tombstones = sa.Table(
    "durability_tombstones",
    metadata,
    sa.Column("ekey", KEY, primary_key=True),
    sa.Column("erased_at", sa.BigInteger, nullable=False),
    sa.Column("erased_by", sa.Text, nullable=False),
    sa.Column("receipt", sa.Text, nullable=False),
)

#: Erasures the plane has not confirmed yet (the thread id stays until it answers).
erase_requests = sa.Table(
    "durability_erase_requests",
    metadata,
    sa.Column("ekey", KEY, primary_key=True),
    sa.Column("project_id", sa.String(512), primary_key=True),
    sa.Column("thread_id", sa.Text, nullable=False),
    sa.Column("requested_at", sa.BigInteger, nullable=False),
    sa.Column("attempts", sa.Integer, nullable=False),
    sa.Column("last_error", sa.Text),
)

#: The meta key of the store's erasure secret (kept through a reset: see ``SQLStore._wipe``).
SECRET_KEY = "erasure_secret"  # noqa: S105 - the name of a meta row, not a secret
#: The meta key of the SQLite store's seq floor: a new seq is above it (see ``rebuild.py``).
SEQ_FLOOR_KEY = "seq_floor"
#: The meta key of the SQLite store's outbox mark: rows above it have no outbox row yet (see
#: ``outbox_queue.py``).
OUTBOX_MARK_KEY = "outbox_through"

sa.Index("ix_durability_threads_due", threads.c.due_at)

#: The per-thread totals index: its ``(tkey, seq)`` prefix serves every thread read.
SWEEP_INDEX = sa.Index(
    "ix_durability_checkpoints_thread_totals",
    checkpoints.c.tkey,
    checkpoints.c.seq,
    checkpoints.c.created_at,
    checkpoints.c.size_bytes,
)

#: A thread's checkpoints by id, for LangGraph's "latest" (SQLite only).
BY_ID_INDEX = sa.Index(
    "ix_durability_checkpoints_by_id",
    checkpoints.c.tkey,
    checkpoints.c.namespace,
    checkpoints.c.checkpoint_id,
)

#: The checkpoint and write hashes, indexed after their thread's hash.
KEY_INDEXES = (
    sa.Index("ix_durability_checkpoints_key", checkpoints.c.tkey, checkpoints.c.ckey, unique=True),
    sa.Index("ix_durability_writes_key", writes.c.tkey, writes.c.ckey),
)

#: The tables a whole thread lives in, in the order a delete clears them.
THREAD_TABLES = (checkpoints, writes, parks, threads)


def hash_of(*parts: str) -> str:
    """A 128-bit hex hash of the joined parts (the index key of a long id)."""
    digest = hashlib.sha256("\x00".join(parts).encode("utf-8", "surrogatepass"))
    return digest.hexdigest()[:32]


def thread_key(thread_id: str) -> str:
    """The indexed 128-bit hash of a thread id (``hash_of(thread_id)``, without the join: a sweep
    hashes every id three times)."""
    return hashlib.sha256(thread_id.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def checkpoint_key(thread_id: str, namespace: str, checkpoint_id: str) -> str:
    """The indexed hash that makes a checkpoint id unique within its thread and namespace."""
    return hash_of(thread_id, namespace, checkpoint_id)


def postgres_checkpoint_key(thread_id: Any, namespace: Any, checkpoint_id: Any) -> Any:
    """:func:`checkpoint_key` computed by Postgres from three column expressions (the same
    SHA-256 of the UTF-8 parts joined by NUL, its first 32 hex digits), so a query can probe
    the ``(tkey, ckey)`` index for a checkpoint it names by id, such as a row's parent."""
    nul = sa.literal(b"\x00", sa.LargeBinary)
    joined = sa.func.convert_to(thread_id, "UTF8").op("||")(nul)
    joined = joined.op("||")(sa.func.convert_to(namespace, "UTF8")).op("||")(nul)
    joined = joined.op("||")(sa.func.convert_to(checkpoint_id, "UTF8"))
    return sa.func.substr(sa.func.encode(sa.func.sha256(joined), "hex"), 1, 32)


def write_key(thread_id: str, namespace: str, checkpoint_id: str, task_id: str, idx: int) -> str:
    """The indexed hash that makes a pending write unique (first write wins)."""
    return hash_of(thread_id, namespace, checkpoint_id, task_id, str(idx))


def where_thread(
    thread_id: str, table: sa.Table = checkpoints
) -> tuple[sa.ColumnElement[bool], ...]:
    """The clause selecting one thread's rows of ``table``: its key and its id."""
    return (table.c.tkey == thread_key(thread_id), table.c.thread_id == thread_id)


def micros(value: datetime | None) -> int | None:
    """A time as stored: microseconds since the epoch."""
    return None if value is None else to_micros(value)


def time_of(value: int | None) -> datetime | None:
    """A stored time back as an aware UTC datetime."""
    return None if value is None else from_micros(value)


def duration(value: timedelta | None) -> int | None:
    """A duration as stored: microseconds."""
    return None if value is None else value // timedelta(microseconds=1)


def delta(value: int | None) -> timedelta | None:
    """A stored duration back as a timedelta."""
    return None if value is None else timedelta(microseconds=value)
