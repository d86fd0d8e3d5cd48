"""The SQL store: one SQLAlchemy Core implementation for SQLite and Postgres.

* SQLite (``sqlite:///path.db``, the embedded default): WAL journal, a busy timeout, and
  ``BEGIN IMMEDIATE`` for every multi-statement write so concurrent writers (threads or
  processes) queue instead of failing half-way. ``synchronous=NORMAL`` by default: a committed
  checkpoint survives the process being killed; on power loss the last commits may roll back
  (pass ``synchronous="FULL"`` to fsync every commit).
* Postgres (``postgresql+psycopg://…``, ``?schema=name`` optional, created if missing): a
  bounded pool whose checkout pre-pings (see :func:`_pre_ping`), sessions named
  ``durability``; an idempotent operation that meets a dropped connection runs once more.

Connections run in autocommit: a single statement (a put, a read, a claim) is one round trip,
and the hot ones run on a DBAPI cursor with prebuilt SQL (:class:`_HotStatements`). Both keep
state as TEXT (Postgres JSONB cannot hold ``\\u0000``), index long ids through a 128-bit hash
(a Postgres btree entry is capped near 2.7 KB, and a 10 KB id must work), take exclusive claims
with ``DELETE … RETURNING``, and evolve through the ordered, recorded, additive
:data:`MIGRATIONS` list. Driver errors are mapped to :mod:`durability.errors` in
:meth:`SQLStore._translate`, the one boundary.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
import re
import select
import sqlite3
import threading
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc
from sqlalchemy.dialects import postgresql as pg_dialect
from sqlalchemy.dialects import sqlite as sqlite_dialect
from sqlalchemy.engine import Connection as SAConnection
from sqlalchemy.engine import Engine

from durability import codec
from durability.clock import from_micros, to_micros
from durability.errors import (
    CheckpointConflict,
    ConfigError,
    DurabilityError,
    LeaseHeld,
    LeaseLost,
    ParkRefused,
    StoreError,
    StoreUnavailable,
)
from durability.model import Deleted, Lease, OutboxEntry, Park, ThreadRecord
from durability.settings import Retention
from durability.stores.base import (
    CHUNK,
    OUTBOX_COLUMNS,
    THREAD_COLUMNS,
    Capabilities,
    CheckpointKey,
    Columns,
    Connection,
    EncodedCheckpoint,
    EncodedWrite,
    OutboxSummary,
    RowKey,
    Store,
    SweepColumns,
    ThreadPage,
    cap_bytes,
    chunks,
    columns_of,
    conflict_message,
    lease_held_message,
    lease_lost_message,
    park_exists_message,
    redact_url,
)

#: SQLite page cache of a sweep's delete transaction, in KiB (the connection's own is restored).
SWEEP_CACHE_KIB = 65536

#: Postgres ``work_mem`` of an analysis read's transaction (its sorts and hashes stay in memory).
ANALYSIS_WORK_MEM = "64MB"

_Primitive = TypeVar("_Primitive", bound=Callable[..., Any])

# ---------------------------------------------------------------------------- schema

metadata = sa.MetaData()
_BIGINT = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
_KEY = sa.String(32)

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

_OUTBOX_COLUMNS = ("synced", "sync_error", "attempts", "last_error", "synced_at")


def _checkpoint_table(md: sa.MetaData, *, outbox: bool) -> sa.Table:
    """The checkpoints table; ``outbox=False`` is its shape before migration 2."""
    columns: list[sa.Column[Any]] = [
        sa.Column("seq", _BIGINT, primary_key=True, autoincrement=True),
        sa.Column("tkey", _KEY, nullable=False),
        sa.Column("ckey", _KEY, nullable=False),
        sa.Column("thread_id", sa.Text, nullable=False),
        sa.Column("namespace", sa.Text, nullable=False),
        sa.Column("checkpoint_id", sa.Text, nullable=False),
        sa.Column("run_id", sa.Text, nullable=False),
        sa.Column("parent_checkpoint_id", sa.Text),
        sa.Column("runner", sa.Text, nullable=False),
        sa.Column("agent_id", sa.Text),
        sa.Column("agent_path", sa.Text),
        sa.Column("node_id", sa.Text, nullable=False),
        sa.Column("step", sa.BigInteger, nullable=False),
        sa.Column("step_type", sa.Text),
        sa.Column("status", sa.Text, nullable=False),
        sa.Column("iteration", sa.BigInteger, nullable=False),
        sa.Column("interrupt_reason", sa.Text),
        sa.Column("created_at", sa.BigInteger, nullable=False),
        sa.Column("project_id", sa.Text, nullable=False),
        sa.Column("state", sa.Text, nullable=False),
        sa.Column("node_input", sa.Text, nullable=False),
        sa.Column("node_output", sa.Text, nullable=False),
        sa.Column("iteration_counters", sa.Text, nullable=False),
        sa.Column("interrupt_context", sa.Text, nullable=False),
        sa.Column("metadata", sa.Text, nullable=False),
        sa.Column("size_bytes", sa.BigInteger, nullable=False),
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


checkpoints = _checkpoint_table(metadata, outbox=True)

writes = sa.Table(
    "durability_writes",
    metadata,
    sa.Column("id", _BIGINT, primary_key=True, autoincrement=True),
    sa.Column("wkey", _KEY, nullable=False, unique=True),
    sa.Column("tkey", _KEY, nullable=False),
    sa.Column("ckey", _KEY, nullable=False),
    sa.Column("thread_id", sa.Text, nullable=False),
    sa.Column("namespace", sa.Text, nullable=False),
    sa.Column("checkpoint_id", sa.Text, nullable=False),
    sa.Column("task_id", sa.Text, nullable=False),
    sa.Column("idx", sa.Integer, nullable=False),
    sa.Column("channel", sa.Text, nullable=False),
    sa.Column("value", sa.Text, nullable=False),
    sa.Column("task_path", sa.Text, nullable=False),
)

threads = sa.Table(
    "durability_threads",
    metadata,
    sa.Column("tkey", _KEY, primary_key=True),
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
    sa.Column("tkey", _KEY, primary_key=True),
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

_not_synced = sa.not_(checkpoints.c.synced)
#: ``_not_synced`` as driver SQL, by "is SQLite" (the outbox index's predicate, as rendered).
_NOT_SYNCED_SQL = {True: "synced = 0", False: "NOT synced"}
_quarantined = checkpoints.c.sync_error.isnot(None)
_OUTBOX_INDEXES = (
    sa.Index(
        "ix_durability_outbox",
        checkpoints.c.seq,
        sqlite_where=_not_synced,
        postgresql_where=_not_synced,
    ),
    sa.Index(
        "ix_durability_outbox_project",
        checkpoints.c.project_id,
        checkpoints.c.seq,
        sqlite_where=_not_synced,
        postgresql_where=_not_synced,
    ),
    sa.Index(
        "ix_durability_quarantine",
        checkpoints.c.seq,
        sqlite_where=_quarantined,
        postgresql_where=_quarantined,
    ),
)
sa.Index("ix_durability_threads_due", threads.c.due_at)


def _create(conn: SAConnection, table: sa.Table) -> None:
    """CREATE … IF NOT EXISTS the table and its indexes (no catalog look-ups first)."""
    conn.execute(sa.schema.CreateTable(table, if_not_exists=True))
    for index in table.indexes:
        conn.execute(sa.schema.CreateIndex(index, if_not_exists=True))


def _migration_base(conn: SAConnection) -> None:
    """Version 1: the checkpoint, write, ledger, park and meta tables (no outbox yet).

    The writes table is created with its indexes of today (version 7 moved them; its columns
    never changed), so on a new store version 7 finds nothing to do.
    """
    for table in (meta_table, writes, threads, parks):
        _create(conn, table)
    _create(conn, _checkpoint_table(sa.MetaData(), outbox=False))


def _migration_outbox(conn: SAConnection) -> None:
    """Version 2: the outbox columns; rows written before it count as already synced.

    Like seed 000's v13 upgrade: connecting an existing store does not back-push history,
    only checkpoints written afterwards replicate.
    """
    # Postgres adds a column only if it is missing by itself; SQLite is asked which it has.
    existing = (
        set()
        if conn.dialect.name == "postgresql"
        else {row[1] for row in conn.exec_driver_sql("PRAGMA table_info(durability_checkpoints)")}
    )
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
    _create(conn, connections)
    for index in _OUTBOX_INDEXES:
        conn.execute(sa.schema.CreateIndex(index, if_not_exists=True))


def _add_column(conn: SAConnection, table: sa.Table, name: str, ddl: str) -> None:
    quote = conn.dialect.identifier_preparer.quote
    schema = _schema_of(conn)
    target = f"{quote(schema)}.{quote(table.name)}" if schema else quote(table.name)
    guard = "IF NOT EXISTS " if conn.dialect.name == "postgresql" else ""
    conn.exec_driver_sql(f"ALTER TABLE {target} ADD COLUMN {guard}{name} {ddl}")


def _schema_of(conn: SAConnection) -> str | None:
    translate = conn.get_execution_options().get("schema_translate_map") or {}
    schema: str | None = translate.get(None)
    return schema


def _migration_one_outbox_index(conn: SAConnection) -> None:
    """Version 3: drop the outbox index by ``seq`` alone; the one by ``(project_id, seq)`` stays.

    The drain always asks for one project's rows, and every pending row costs each index a
    page write on its put (a third of a SQLite put's time went to index pages). A fetch
    across projects reads the remaining partial index, which holds only pending rows.
    """
    schema = _schema_of(conn)
    quote = conn.dialect.identifier_preparer.quote
    name = f"{quote(schema)}.ix_durability_outbox" if schema else "ix_durability_outbox"
    conn.exec_driver_sql(f"DROP INDEX IF EXISTS {name}")


_SWEEP_INDEX = sa.Index(
    "ix_durability_checkpoints_thread_totals",
    checkpoints.c.tkey,
    checkpoints.c.seq,
    checkpoints.c.created_at,
    checkpoints.c.size_bytes,
)


def _migration_sweep_index(conn: SAConnection) -> None:
    """Version 4: the thread index carries ``created_at`` and ``size_bytes`` too, replacing ``(tkey, seq)``.

    The sweep's per-thread totals (one ``GROUP BY tkey``: count, bytes, newest write) then read
    the index alone instead of every row's page, which took a 100,000-thread SQLite store from
    2.2 s to under 0.5 s; its ``(tkey, seq)`` prefix still serves every thread read, so a put
    maintains no extra index.
    """
    conn.execute(sa.schema.CreateIndex(_SWEEP_INDEX, if_not_exists=True))
    schema = _schema_of(conn)
    quote = conn.dialect.identifier_preparer.quote
    old = "ix_durability_checkpoints_thread"
    conn.exec_driver_sql(f"DROP INDEX IF EXISTS {quote(schema) + '.' + old if schema else old}")


_BY_ID_INDEX = sa.Index(
    "ix_durability_checkpoints_by_id",
    checkpoints.c.tkey,
    checkpoints.c.namespace,
    checkpoints.c.checkpoint_id,
)


def _migration_by_id_index(conn: SAConnection) -> None:
    """Version 5 (SQLite): a thread's checkpoints ordered by id, for LangGraph's "latest".

    LangGraph's latest is the greatest ``checkpoint_id`` in a thread and namespace; without
    this index every read of it sorted all of the thread's rows, payload pages included, so it
    grew with the thread (a LangGraph ``get_tuple``: ~290 µs → ~90 µs on a 20-checkpoint
    thread, and no longer linear in its length). A put maintains one more index (~10 %).
    Postgres keeps the sort: its btree entries are capped near 2.7 KB and a 10 KB id must
    still be stored, and its by-id reads already meet their target.
    """
    if conn.dialect.name == "sqlite":
        conn.execute(sa.schema.CreateIndex(_BY_ID_INDEX, if_not_exists=True))


def _migration_connection_closed(conn: SAConnection) -> None:
    """Version 6: a connection record outlives its disconnect, marked by ``disconnected_at``.

    A store that was connected keeps replicating after a clean disconnect, so the sweep and
    ``durability threads delete`` keep the rows the plane lacks until the next connect (seed
    000: an un-acked checkpoint is never dropped for being old).
    """
    existing = (
        set()
        if conn.dialect.name == "postgresql"
        else {row[1] for row in conn.exec_driver_sql("PRAGMA table_info(durability_connections)")}
    )
    if "disconnected_at" not in existing:
        _add_column(conn, connections, "disconnected_at", "BIGINT")


def _migration_drain_heartbeat(conn: SAConnection) -> None:
    """Version 8: a connection record carries its drain's heartbeat and last acknowledged batch,
    so ``durability outbox status`` tells a live drain from a record a gone process left open."""
    existing = (
        set()
        if conn.dialect.name == "postgresql"
        else {row[1] for row in conn.exec_driver_sql("PRAGMA table_info(durability_connections)")}
    )
    for name in ("seen_at", "acked_at"):
        if name not in existing:
            _add_column(conn, connections, name, "BIGINT")


_KEY_INDEXES = (
    sa.Index("ix_durability_checkpoints_key", checkpoints.c.tkey, checkpoints.c.ckey, unique=True),
    sa.Index("ix_durability_writes_key", writes.c.tkey, writes.c.ckey),
)


def _migration_thread_first_keys(conn: SAConnection) -> None:
    """Version 7: the checkpoint hash is indexed after its thread's hash, ``(tkey, ckey)``.

    ``ckey`` alone is a hash, so a thread's checkpoints sat on unrelated leaves of a B-tree as
    large as the table's row count: deleting a thread dirtied one leaf per row, and a 1,000-thread
    sweep transaction rewrote most of that index. Thread first, a thread's entries share a leaf
    (they are deleted together), and the writes' ``(tkey, ckey)`` replaces both their ``ckey`` and
    ``tkey`` indexes. The unique index is built before the old one goes, so uniqueness never
    lapses; every read by ``ckey`` also names its ``tkey``.
    """
    for index in _KEY_INDEXES:
        conn.execute(sa.schema.CreateIndex(index, if_not_exists=True))
    schema = _schema_of(conn)
    quote = conn.dialect.identifier_preparer.quote
    for old in (
        "ix_durability_checkpoints_ckey",
        "ix_durability_writes_ckey",
        "ix_durability_writes_thread",
    ):
        conn.exec_driver_sql(f"DROP INDEX IF EXISTS {quote(schema) + '.' + old if schema else old}")


#: The ordered, additive migrations; the index + 1 is the version recorded in the store.
MIGRATIONS: Sequence[tuple[str, Callable[[SAConnection], None]]] = (
    ("base tables", _migration_base),
    ("outbox columns", _migration_outbox),
    ("one outbox index", _migration_one_outbox_index),
    ("thread totals index", _migration_sweep_index),
    ("checkpoints by id index", _migration_by_id_index),
    ("connection records kept at disconnect", _migration_connection_closed),
    ("thread-first key indexes", _migration_thread_first_keys),
    ("drain heartbeats", _migration_drain_heartbeat),
)

_SCHEMA_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")


def _hash(*parts: str) -> str:
    digest = hashlib.sha256("\x00".join(parts).encode("utf-8", "surrogatepass"))
    return digest.hexdigest()[:32]


def thread_key(thread_id: str) -> str:
    """The indexed 128-bit hash of a thread id (``_hash(thread_id)``, without the join: a sweep
    hashes every id three times)."""
    return hashlib.sha256(thread_id.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def checkpoint_key(thread_id: str, namespace: str, checkpoint_id: str) -> str:
    """The indexed hash that makes a checkpoint id unique within its thread and namespace."""
    return _hash(thread_id, namespace, checkpoint_id)


def _micros(value: datetime | None) -> int | None:
    return None if value is None else to_micros(value)


def _time(value: int | None) -> datetime | None:
    return None if value is None else from_micros(value)


def _duration(value: timedelta | None) -> int | None:
    return None if value is None else value // timedelta(microseconds=1)


def _delta(value: int | None) -> timedelta | None:
    return None if value is None else timedelta(microseconds=value)


# ---------------------------------------------------------------------------- the store


def _dropped(exc: StoreUnavailable) -> bool:
    """Whether the server dropped the connection the operation used (then a retry is sound)."""
    cause = exc.__cause__
    return isinstance(cause, sa_exc.DBAPIError) and bool(cause.connection_invalidated)


def _reconnecting(method: _Primitive) -> _Primitive:
    """Run an idempotent primitive once more, on a fresh connection, if the server dropped its own.

    Reads and idempotent writes only: a claim or a park is never sent twice.
    """

    @functools.wraps(method)
    def again(self: SQLStore, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except StoreUnavailable as exc:
            if not _dropped(exc):
                raise
            return method(self, *args, **kwargs)

    return again  # type: ignore[return-value]


@dataclasses.dataclass(frozen=True, slots=True)
class _Options:
    schema: str | None = None
    synchronous: str = "NORMAL"
    busy_timeout_ms: int = 30_000
    pool_size: int = 5
    max_overflow: int = 10
    wal_autocheckpoint: int = 10_000


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
        sa_url = sa.make_url(_driver_url(url))
        schema = schema or sa_url.query.get("schema")  # type: ignore[assignment]
        sa_url = sa_url.difference_update_query(["schema"])
        self.provider = "sqlite" if sa_url.get_backend_name() == "sqlite" else "postgres"
        if self.provider == "sqlite" and schema:
            raise ConfigError(
                f"cannot open {redact_url(url)}: a SQLite store has no schemas; drop schema={schema!r}"
            )
        if schema is not None and not _SCHEMA_NAME.fullmatch(schema):
            raise ConfigError(
                f"cannot open {redact_url(url)}: schema {schema!r} is not a plain SQL identifier "
                "(letters, digits and _, not starting with a digit, at most 63 characters)"
            )
        if synchronous.upper() not in ("NORMAL", "FULL", "EXTRA", "OFF"):
            raise ConfigError(
                f"cannot open {redact_url(url)}: synchronous={synchronous!r} is not NORMAL, FULL, EXTRA or OFF"
            )
        if single_worker and self.provider != "sqlite":
            raise ConfigError(
                f"cannot open {redact_url(url)} with single_worker=True: that option is for SQLite; "
                "a Postgres store already holds parks for any worker"
            )
        self.options = _Options(
            schema,
            synchronous.upper(),
            busy_timeout_ms,
            pool_size,
            max_overflow,
            wal_autocheckpoint,
        )
        shared = self.provider == "postgres"
        self.capabilities = Capabilities(
            shared=shared, sweeps_waiting=True, replicates=True, can_park=shared or single_worker
        )
        # The DBAPI connection runs in autocommit: a single statement (a put, a read, a claim)
        # is one round trip, and a multi-statement operation opens its transaction itself,
        # through the "begin" listener (BEGIN IMMEDIATE on SQLite, so writers queue).
        if engine is None:
            self._engine = self._build_engine(sa_url)
        else:
            self._engine = engine.execution_options(isolation_level="AUTOCOMMIT")
        if schema:
            self._engine = self._engine.execution_options(schema_translate_map={None: schema})
        sa.event.listen(self._engine, "begin", _on_begin)
        # SQLite's hot paths use a connection per thread (see _execute); Postgres's use the pool.
        self._local: threading.local | None = (
            threading.local() if self.provider == "sqlite" and engine is None else None
        )
        self._sqlite_path = sa_url.database or ""
        self._locals: dict[int, tuple[threading.Thread, sqlite3.Connection]] = {}
        self._locals_lock = threading.Lock()
        self._pid = os.getpid()
        self._sql = _HotStatements(self._engine.dialect, schema)

    def _build_engine(self, sa_url: sa.URL) -> Engine:
        with self._errors("open the store"):
            if self.provider == "sqlite":
                database = sa_url.database or ""
                if database in ("", ":memory:"):
                    raise ConfigError(
                        f"cannot open {redact_url(self.url)}: give a file path (sqlite:///path.db); "
                        "for an in-process store use memory://"
                    )
                engine = sa.create_engine(
                    sa_url, pool_size=4, max_overflow=16, isolation_level="AUTOCOMMIT"
                )
                sa.event.listen(engine, "connect", self._on_sqlite_connect)
                return engine
            # Name the sessions (pg_stat_activity shows who holds them) unless the URL does.
            connect_args = (
                {} if "application_name" in sa_url.query else {"application_name": "durability"}
            )
            engine = sa.create_engine(
                sa_url,
                pool_size=self.options.pool_size,
                max_overflow=self.options.max_overflow,
                pool_recycle=1800,
                isolation_level="AUTOCOMMIT",
                connect_args=connect_args,
            )
            sa.event.listen(engine, "checkout", _pre_ping)
            sa.event.listen(engine, "checkin", _mark_idle)
            return engine

    def _on_sqlite_connect(self, dbapi_conn: Any, _record: Any) -> None:
        cursor = dbapi_conn.cursor()
        cursor.execute(f"PRAGMA busy_timeout = {int(self.options.busy_timeout_ms)}")
        cursor.execute(f"PRAGMA wal_autocheckpoint = {int(self.options.wal_autocheckpoint)}")
        _enable_wal(cursor, self.options.busy_timeout_ms / 1000)
        cursor.execute(f"PRAGMA synchronous = {self.options.synchronous}")
        cursor.close()

    def close(self) -> None:
        self._engine.dispose()
        with self._locals_lock:
            for _thread, conn in self._locals.values():
                conn.close()
            self._locals.clear()

    # ------------------------------------------------------------------ plumbing

    @contextmanager
    def _errors(self, action: str) -> Iterator[None]:
        """Driver errors raised inside become :mod:`durability.errors` (see :meth:`_translate`)."""
        try:
            yield
        except StoreError:
            raise
        except sa_exc.SQLAlchemyError as exc:
            raise self._translate(action, exc) from exc

    def _translate(self, action: str, exc: sa_exc.SQLAlchemyError) -> DurabilityError:
        """The one mapping of driver errors to :mod:`durability.errors`."""
        where = redact_url(self.url)
        if isinstance(exc, sa_exc.IntegrityError):
            return StoreError(
                f"cannot {action} in {where}: the database refused it ({_driver_message(exc)}); "
                f"{_CHECK_THE_SCHEMA}"
            )
        if _SCHEMA_CHANGED.search(_driver_message(exc)):  # SQLite says so as an OperationalError
            return StoreError(
                f"cannot {action} in {where}: {_driver_message(exc)}; {_CHECK_THE_SCHEMA}"
            )
        if isinstance(
            exc,
            sa_exc.OperationalError
            | sa_exc.InterfaceError
            | sa_exc.DisconnectionError
            | sa_exc.TimeoutError,
        ):
            return StoreUnavailable(
                f"cannot {action}: the database {where} is unavailable ({_driver_message(exc)}); "
                "check that it is running and reachable, then retry"
            )
        if isinstance(exc, sa_exc.NoSuchModuleError):
            return ConfigError(
                f"cannot {action} at {where}: {_driver_message(exc)}; use sqlite:///path.db or "
                "postgresql+psycopg://user@host/db (psycopg 3 is installed with durability)"
            )
        return StoreError(
            f"cannot {action} in {where}: {_driver_message(exc)}; {_CHECK_THE_SCHEMA}"
        )

    def _driver_error(self, exc: Exception, fairy: Any) -> sa_exc.SQLAlchemyError:
        """A raw driver error as SQLAlchemy's, invalidating the pooled connection if it is gone."""
        dialect = self._engine.dialect
        gone = dialect.is_disconnect(exc, fairy.dbapi_connection if fairy else None, None)  # type: ignore[arg-type]
        if gone and fairy is not None:
            fairy.invalidate(exc)
        return sa_exc.DBAPIError.instance(
            None,
            None,
            exc,
            dialect.loaded_dbapi.Error,
            connection_invalidated=gone,
            dialect=dialect,
        )

    def _execute(self, action: str, sql: str, params: Sequence[Any]) -> list[Any]:
        """Run one statement in autocommit on a DBAPI connection; return its rows.

        The hot paths (put, latest, get, history, writes) come here and skip SQLAlchemy's
        statement and result layers. On SQLite each thread keeps a connection of its own; on
        Postgres a pooled one is checked out (and pre-pinged) per call.
        """
        dbapi_error = self._engine.dialect.loaded_dbapi.Error
        if self._local is not None:
            conn = self._local_connection()
            try:
                return list(conn.execute(sql, params).fetchall())
            except dbapi_error as exc:
                wrapped = self._driver_error(exc, None)
                raise self._translate(action, wrapped) from wrapped
        try:
            fairy = self._engine.raw_connection()
        except sa_exc.SQLAlchemyError as exc:
            raise self._translate(action, exc) from exc
        try:
            cursor = fairy.cursor()
            cursor.execute(sql, params)
            rows = list(cursor.fetchall())
            cursor.close()
            return rows
        except dbapi_error as exc:
            wrapped = self._driver_error(exc, fairy)
            raise self._translate(action, wrapped) from wrapped
        finally:
            fairy.close()

    def _local_connection(self) -> sqlite3.Connection:
        """This thread's own SQLite connection (opened on first use, closed with the store)."""
        if self._pid != os.getpid():  # a forked child must not use its parent's connections
            self._local, self._locals, self._pid = threading.local(), {}, os.getpid()
        local = self._local
        assert local is not None
        conn: sqlite3.Connection | None = getattr(local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(self._sqlite_path, isolation_level=None, check_same_thread=False)
            self._on_sqlite_connect(conn, None)
            with self._locals_lock:
                for key, (thread, old) in list(self._locals.items()):
                    if not thread.is_alive():  # a finished thread's connection
                        old.close()
                        del self._locals[key]
                self._locals[id(conn)] = (threading.current_thread(), conn)
            local.conn = conn
        return conn

    @contextmanager
    def _write(self, action: str) -> Iterator[SAConnection]:
        """A write transaction (``BEGIN IMMEDIATE`` on SQLite, so concurrent writers queue)."""
        with self._errors(action), self._engine.connect() as conn:
            begin = "BEGIN IMMEDIATE" if self.provider == "sqlite" else "BEGIN"
            with conn.execution_options(durability_begin=begin).begin():
                yield conn

    @contextmanager
    def _read(self, action: str) -> Iterator[SAConnection]:
        """A read transaction: several statements that see one snapshot (SQLite WAL)."""
        with (
            self._errors(action),
            self._engine.connect() as conn,
            conn.execution_options(durability_begin="BEGIN").begin(),
        ):
            yield conn

    @contextmanager
    def _one(self, action: str) -> Iterator[SAConnection]:
        """One statement, committed on its own (autocommit): a single round trip."""
        with self._errors(action), self._engine.connect() as conn:
            yield conn

    def _rows(self, action: str, sql: str, params: Sequence[Any]) -> list[EncodedCheckpoint]:
        return [_encoded(r) for r in self._execute(action, sql, params)]

    @property
    def _insert_stmt(self) -> Any:
        return sqlite_dialect.insert if self.provider == "sqlite" else pg_dialect.insert

    # ------------------------------------------------------------------ setup

    def _setup(self) -> None:
        with self._write("set up the store") as conn:
            if self.provider == "postgres":
                # Serialise concurrent setups of the same schema.
                conn.execute(
                    sa.text("SELECT pg_advisory_xact_lock(:k)"),
                    {"k": _advisory_key(self.options.schema)},
                )
                if self.options.schema:
                    conn.exec_driver_sql(f'CREATE SCHEMA IF NOT EXISTS "{self.options.schema}"')
            _create(conn, migrations_table)
            applied = set(conn.execute(sa.select(migrations_table.c.version)).scalars())
            for version, (name, migrate) in enumerate(MIGRATIONS, start=1):
                if version not in applied:
                    migrate(conn)
                    conn.execute(
                        migrations_table.insert().values(
                            version=version, name=name, applied_at=to_micros(self.clock())
                        )
                    )

    def applied_migrations(self) -> list[int]:
        """The migration versions recorded in the store."""
        with self._one("read the migrations") as conn:
            return sorted(conn.execute(sa.select(migrations_table.c.version)).scalars())

    @_reconnecting
    def _read_generation(self) -> int | None:
        with self._one("read the format generation") as conn:
            value = conn.execute(
                sa.select(meta_table.c.value).where(meta_table.c.key == "format_generation")
            ).scalar()
        return None if value is None else int(value)

    @_reconnecting
    def _write_generation(self, generation: int) -> None:
        with self._one("record the format generation") as conn:
            conn.execute(
                self._insert_stmt(meta_table)
                .values(key="format_generation", value=str(generation))
                .on_conflict_do_update(index_elements=["key"], set_={"value": str(generation)})
            )

    @_reconnecting
    def _has_any_checkpoint(self) -> bool:
        with self._one("look for checkpoints") as conn:
            return conn.execute(sa.select(checkpoints.c.seq).limit(1)).first() is not None

    def _wipe(self) -> None:
        with self._write("reset the store") as conn:
            for table in (checkpoints, writes, threads, parks, connections, meta_table):
                conn.execute(table.delete())

    # ------------------------------------------------------------------ checkpoints

    def _insert(self, rows: list[EncodedCheckpoint], *, synced: bool) -> list[int]:
        try:
            return self._insert_once(rows, synced, retry=False)
        except StoreUnavailable as exc:
            if not _dropped(exc):
                raise
            # The server dropped the connection: send it again on a fresh one. If the first
            # attempt committed before the drop, the retry finds these very rows and returns them.
            return self._insert_once(rows, synced, retry=True)

    def _insert_once(
        self, rows: list[EncodedCheckpoint], synced: bool, *, retry: bool
    ) -> list[int]:
        if len(rows) == 1 and not retry:  # the hot path: one INSERT … RETURNING, autocommitted
            params = self._sql.insert_params(rows[0], synced)
            try:
                return [int(self._execute("put a checkpoint", self._sql.insert, params)[0][0])]
            except StoreError as exc:
                if isinstance(exc.__cause__, sa_exc.IntegrityError):
                    first = rows[0]
                    raise CheckpointConflict(
                        conflict_message(first.thread_id, first.namespace, first.checkpoint_id)
                    ) from exc.__cause__
                raise
        if len(rows) == 1:
            with self._one("put a checkpoint") as conn:
                return self._insert_rows(conn, rows, synced, retry=retry)
        with self._write("put checkpoints") as conn:
            return self._insert_rows(conn, rows, synced, retry=retry)

    def _insert_rows(
        self,
        conn: SAConnection,
        rows: list[EncodedCheckpoint],
        synced: bool,
        *,
        retry: bool = False,
    ) -> list[int]:
        if retry:
            stored = [self._stored_copy(conn, r) for r in rows]
            if all(s is not None for s in stored):
                return [s for s in stored if s is not None]
        try:
            if len(rows) == 1:
                params = self._sql.insert_params(rows[0], synced)
                return [int(conn.exec_driver_sql(self._sql.insert, params).scalar_one())]
            values = [_row_values(r, synced) for r in rows]
            return [int(s) for s in conn.execute(_INSERT_MANY, values).scalars()]
        except sa_exc.IntegrityError as exc:
            # The unique hash of (thread, namespace, id): stores never overwrite a checkpoint.
            first = rows[0]
            message = conflict_message(first.thread_id, first.namespace, first.checkpoint_id)
            if len(rows) > 1:
                message = (
                    f"one of {len(rows)} checkpoints was refused, nothing was written: " + message
                )
            raise CheckpointConflict(message) from exc

    def _stored_copy(self, conn: SAConnection, row: EncodedCheckpoint) -> int | None:
        """The seq of a stored row identical to ``row`` (a write that landed), else ``None``."""
        found = conn.exec_driver_sql(
            self._sql.get, _get_params(row.thread_id, row.namespace, row.checkpoint_id)
        ).first()
        if found is None:
            return None
        stored = _encoded(found)
        seq, stored.seq = stored.seq, row.seq
        return seq if stored == row else None

    @_reconnecting
    def _latest(self, thread_id: str, namespace: str) -> EncodedCheckpoint | None:
        params = (thread_key(thread_id), thread_id, namespace)
        found = self._rows("read the latest checkpoint", self._sql.latest(namespace=True), params)
        return found[0] if found else None

    @_reconnecting
    def _latest_any(self, thread_id: str) -> EncodedCheckpoint | None:
        params = (thread_key(thread_id), thread_id)
        found = self._rows("read the latest checkpoint", self._sql.latest(namespace=False), params)
        return found[0] if found else None

    @_reconnecting
    def _get(self, thread_id: str, namespace: str, checkpoint_id: str) -> EncodedCheckpoint | None:
        found = self._rows(
            "read a checkpoint", self._sql.get, _get_params(thread_id, namespace, checkpoint_id)
        )
        return found[0] if found else None

    @_reconnecting
    def _history(
        self, thread_id: str, namespace: str | None, after_seq: int | None, limit: int | None
    ) -> list[EncodedCheckpoint]:
        params: list[Any] = [thread_key(thread_id), thread_id]
        for value in (namespace, after_seq, limit):
            if value is not None:
                params.append(value)
        sql = self._sql.thread_rows(
            namespace=namespace is not None,
            after=after_seq is not None,
            limit=limit is not None,
            by_id=False,
        )
        return self._rows("read a thread's history", sql, params)

    @_reconnecting
    def _insert_writes(self, rows: list[EncodedWrite]) -> None:
        regular = [_write_values(w) for w in rows if w.idx >= 0]
        special = [_write_values(w) for w in rows if w.idx < 0]
        with self._write("store pending writes") as conn:
            if regular:
                conn.execute(
                    self._insert_stmt(writes).on_conflict_do_nothing(index_elements=["wkey"]),
                    regular,
                )
            if special:
                stmt = self._insert_stmt(writes)
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

    @_reconnecting
    def _writes(self, thread_id: str, namespace: str, checkpoint_id: str) -> list[EncodedWrite]:
        found = self._execute(
            "read pending writes",
            self._sql.writes,
            _get_params(thread_id, namespace, checkpoint_id),
        )
        return [EncodedWrite(*r) for r in found]

    @_reconnecting
    def _newest_first(
        self, thread_id: str, namespace: str | None, before: str | None, limit: int | None
    ) -> list[EncodedCheckpoint]:
        params: list[Any] = [thread_key(thread_id), thread_id]
        for value in (namespace, before, limit):
            if value is not None:
                params.append(value)
        sql = self._sql.thread_rows(
            namespace=namespace is not None,
            before=before is not None,
            limit=limit is not None,
            by_id=True,
        )
        return self._rows("list a thread's checkpoints", sql, params)

    @_reconnecting
    def _writes_of(
        self, thread_id: str, keys: list[CheckpointKey]
    ) -> dict[CheckpointKey, list[EncodedWrite]]:
        found: dict[CheckpointKey, list[EncodedWrite]] = {}
        wanted = set(keys)
        tkey = thread_key(thread_id)
        for chunk in chunks([checkpoint_key(thread_id, ns, cid) for ns, cid in keys]):
            # Padded with its last key to one of a few sizes, so a handful of statements serve
            # every call (a repeated value in an IN list matches nothing twice).
            size = _padded_size(len(chunk))
            params = (tkey, thread_id, *chunk, *[chunk[-1]] * (size - len(chunk)))
            for r in self._execute("read pending writes", self._sql.writes_of(size), params):
                write = EncodedWrite(*r)
                key = (write.namespace, write.checkpoint_id)
                if key in wanted:  # the keys are hashes: the ids decide
                    found.setdefault(key, []).append(write)
        return found

    @_reconnecting
    def _set_status(
        self,
        thread_id: str,
        namespace: str,
        checkpoint_id: str,
        status: str,
        interrupt_reason: str | None,
        interrupt_context: str,
    ) -> bool:
        where = (
            *_thread(thread_id),
            checkpoints.c.ckey == checkpoint_key(thread_id, namespace, checkpoint_id),
            checkpoints.c.namespace == namespace,
            checkpoints.c.checkpoint_id == checkpoint_id,
        )
        with self._write("change a checkpoint's status") as conn:
            row = conn.execute(
                sa.select(checkpoints.c.interrupt_context, checkpoints.c.size_bytes).where(*where)
            ).first()
            if row is None:
                return False
            size = row.size_bytes + _utf8_len(interrupt_context) - _utf8_len(row.interrupt_context)
            conn.execute(
                checkpoints.update()
                .where(*where)
                .values(
                    status=status,
                    interrupt_reason=interrupt_reason,
                    interrupt_context=interrupt_context,
                    size_bytes=size,
                )
            )
        return True

    @_reconnecting
    def _delete_checkpoints(self, thread_id: str, keys: list[CheckpointKey]) -> Deleted:
        removed = removed_writes = 0
        with self._write("delete checkpoints") as conn:
            for chunk in chunks([checkpoint_key(thread_id, ns, cid) for ns, cid in keys]):
                removed += conn.execute(
                    checkpoints.delete().where(*_thread(thread_id), checkpoints.c.ckey.in_(chunk))
                ).rowcount
                removed_writes += conn.execute(
                    writes.delete().where(*_thread(thread_id, writes), writes.c.ckey.in_(chunk))
                ).rowcount
        return Deleted(checkpoints=removed, writes=removed_writes)

    @_reconnecting
    def _checkpoints_of_runs(self, run_ids: list[str]) -> list[tuple[str, str, str]]:
        c = checkpoints.c
        found: list[tuple[str, str, str]] = []
        with self._read("find the checkpoints of runs") as conn:
            for chunk in chunks(run_ids):
                query = (
                    sa.select(c.thread_id, c.namespace, c.checkpoint_id)
                    .where(c.run_id.in_(chunk))
                    .order_by(c.seq)
                )
                found += [(r.thread_id, r.namespace, r.checkpoint_id) for r in conn.execute(query)]
        return found

    # ------------------------------------------------------------------ threads

    @_reconnecting
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
        with self._read("list threads") as conn:
            keys = sorted(
                set(conn.execute(from_checkpoints).scalars())
                | set(conn.execute(from_ledger).scalars())
            )[:limit]
            records = self._records(conn, keys)
        next_cursor = keys[-1] if len(keys) == limit else None
        return ThreadPage(records, next_cursor)

    def _records(self, conn: SAConnection, keys: list[str]) -> list[ThreadRecord]:
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

    @_reconnecting
    def _thread_record(self, thread_id: str) -> ThreadRecord | None:
        with self._read("look up a thread") as conn:
            for record in self._records(conn, [thread_key(thread_id)]):
                if record.thread_id == thread_id:
                    return record
        return None

    @_reconnecting
    def _finished_due(self, now: datetime) -> list[ThreadRecord]:
        due = threads.c.due_at
        with self._read("list finished threads") as conn:
            keys = list(
                conn.execute(
                    sa.select(threads.c.tkey).where(due.isnot(None), due <= to_micros(now))
                ).scalars()
            )
            return [
                r for r in self._records(conn, keys) if r.due_at is not None and r.due_at <= now
            ]

    def _delete_thread(self, thread_id: str) -> Deleted:
        with self._write("delete a thread") as conn:
            return self._delete_in(conn, thread_id)

    def _delete_in(self, conn: SAConnection, thread_id: str) -> Deleted:
        removed = conn.execute(checkpoints.delete().where(*_thread(thread_id))).rowcount
        removed_writes = conn.execute(
            writes.delete().where(
                writes.c.tkey == thread_key(thread_id), writes.c.thread_id == thread_id
            )
        ).rowcount
        conn.execute(
            parks.delete().where(
                parks.c.tkey == thread_key(thread_id), parks.c.thread_id == thread_id
            )
        )
        conn.execute(
            threads.delete().where(
                threads.c.tkey == thread_key(thread_id), threads.c.thread_id == thread_id
            )
        )
        return Deleted(checkpoints=removed, writes=removed_writes)

    # ------------------------------------------------------------------ ledger

    def _upsert_ledger(self, conn: SAConnection, thread_id: str, **values: Any) -> None:
        stmt = self._insert_stmt(threads).values(
            tkey=thread_key(thread_id), thread_id=thread_id, **values
        )
        conn.execute(stmt.on_conflict_do_update(index_elements=["tkey"], set_=values))

    @_reconnecting
    def _ledger_start(
        self, thread_id: str, run_id: str, owner: str, retention: Retention, now: datetime
    ) -> None:
        with self._one("record a run start") as conn:
            self._upsert_ledger(
                conn,
                thread_id,
                owner=owner,
                run_id=run_id,
                started_at=to_micros(now),
                declared_waiting=_duration(retention.waiting),
                declared_finished=_duration(retention.finished),
            )

    @_reconnecting
    def _ledger_mark(self, thread_id: str, finished_at: datetime, due: datetime) -> None:
        with self._one("mark a thread finished") as conn:
            self._upsert_ledger(
                conn, thread_id, finished_at=to_micros(finished_at), due_at=to_micros(due)
            )

    @_reconnecting
    def _ledger_unmark(self, thread_id: str) -> None:
        with self._one("unmark a finished thread") as conn:
            conn.execute(
                threads.update()
                .where(threads.c.tkey == thread_key(thread_id), threads.c.thread_id == thread_id)
                .values(finished_at=None, due_at=None)
            )

    @_reconnecting
    def _lease_acquire(
        self, thread_id: str, holder: str, run_id: str, now: datetime, expires_at: datetime
    ) -> Lease:
        values = {
            "lease_holder": holder,
            "lease_run_id": run_id,
            "lease_acquired_at": to_micros(now),
            "lease_expires_at": to_micros(expires_at),
        }
        stmt = self._insert_stmt(threads).values(
            tkey=thread_key(thread_id), thread_id=thread_id, **values
        )
        free = sa.or_(
            threads.c.lease_holder.is_(None),
            threads.c.lease_holder == holder,
            threads.c.lease_expires_at <= to_micros(now),
        )
        stmt = stmt.on_conflict_do_update(
            index_elements=["tkey"], set_=values, where=free
        ).returning(threads.c.lease_holder)
        with self._write("take a lease") as conn:
            taken = conn.execute(stmt).first()
            if taken is None:
                current = conn.execute(
                    sa.select(threads).where(threads.c.tkey == thread_key(thread_id))
                ).first()
                assert current is not None
                raise LeaseHeld(lease_held_message(thread_id, _lease(current)))  # type: ignore[arg-type]
        return Lease(
            thread_id=thread_id,
            holder=holder,
            run_id=run_id,
            acquired_at=now,
            expires_at=expires_at,
        )

    @_reconnecting
    def _lease_renew(
        self, thread_id: str, holder: str, now: datetime, expires_at: datetime
    ) -> Lease:
        with self._write("renew a lease") as conn:
            row = conn.execute(
                threads.update()
                .where(
                    threads.c.tkey == thread_key(thread_id),
                    threads.c.thread_id == thread_id,
                    threads.c.lease_holder == holder,
                )
                .values(lease_expires_at=to_micros(expires_at))
                .returning(*threads.c)
            ).first()
            if row is None:
                current = conn.execute(
                    sa.select(threads).where(threads.c.tkey == thread_key(thread_id))
                ).first()
                raise LeaseLost(
                    lease_lost_message(
                        thread_id, holder, _lease(current) if current is not None else None
                    )
                )
        lease = _lease(row)
        assert lease is not None
        return lease

    @_reconnecting
    def _lease_release(self, thread_id: str, holder: str) -> None:
        with self._one("release a lease") as conn:
            conn.execute(
                threads.update()
                .where(
                    threads.c.tkey == thread_key(thread_id),
                    threads.c.thread_id == thread_id,
                    threads.c.lease_holder == holder,
                )
                .values(
                    lease_holder=None,
                    lease_run_id=None,
                    lease_acquired_at=None,
                    lease_expires_at=None,
                )
            )

    # ------------------------------------------------------------------ parks

    def _insert_park(self, row: EncodedCheckpoint, park: Park, *, synced: bool) -> int:
        with self._write("park a run") as conn:
            exists = conn.execute(
                sa.select(parks.c.tkey).where(
                    parks.c.tkey == thread_key(park.thread_id), parks.c.thread_id == park.thread_id
                )
            ).first()
            if exists is not None:
                raise ParkRefused(park_exists_message(park.thread_id))
            seq = self._insert_rows(conn, [row], synced)[0]
            try:
                conn.execute(parks.insert().values(_park_values(park)))
            except sa_exc.IntegrityError as exc:  # a concurrent park won the race
                raise ParkRefused(park_exists_message(park.thread_id)) from exc
            return seq

    def _claim_park(self, thread_id: str) -> Park | None:
        stmt = (
            parks.delete()
            .where(parks.c.tkey == thread_key(thread_id), parks.c.thread_id == thread_id)
            .returning(*parks.c)
        )
        with self._one("claim a park") as conn:
            row = conn.execute(stmt).first()
        return None if row is None else _park(row)

    @_reconnecting
    def _get_park(self, thread_id: str) -> Park | None:
        with self._one("read a park") as conn:
            row = conn.execute(
                sa.select(parks).where(
                    parks.c.tkey == thread_key(thread_id), parks.c.thread_id == thread_id
                )
            ).first()
        return None if row is None else _park(row)

    @_reconnecting
    def _parks(self) -> list[Park]:
        with self._one("list parks") as conn:
            return [_park(r) for r in conn.execute(sa.select(parks).order_by(parks.c.deadline))]

    # ------------------------------------------------------------------ outbox

    @_reconnecting
    def _fetch_unsynced(
        self, limit: int, max_bytes: int | None, project_id: str | None, exclude: Collection[RowKey]
    ) -> list[EncodedCheckpoint]:
        # Driver SQL: compiling the statement and mapping rows through the ORM-level layer
        # cost more than the query for a batch of 2 KB rows. The predicate is the outbox
        # index's own, as each dialect renders it, so SQLite matches the partial index; the
        # excluded seqs are filtered on that index, so their rows are never read. A pooled
        # connection, not the thread's own (`_execute`): the drain thread may still be reading
        # when another thread closes the store, and closing a SQLite connection that is in use
        # crashes the process, whereas a checked-out pooled one is only closed when returned.
        sql = self._sql
        where = _NOT_SYNCED_SQL[self.provider == "sqlite"]
        params: list[Any] = []
        if project_id is not None:
            where += f" AND project_id = {sql.mark}"
            params.append(project_id)
        if exclude:
            where += f" AND seq NOT IN ({', '.join([sql.mark] * len(exclude))})"
            params.extend(seq for _, seq in exclude)
        params.append(limit)
        query = f"SELECT {sql.columns} FROM {sql.table} WHERE {where} ORDER BY seq LIMIT {sql.mark}"  # noqa: S608
        with self._one("read the outbox") as conn:
            rows = [_encoded(r) for r in conn.exec_driver_sql(query, tuple(params))]
        return cap_bytes(rows, max_bytes)

    @_reconnecting
    def _mark_synced(self, keys: list[RowKey], now: datetime) -> None:
        with self._write("mark rows synced") as conn:
            for chunk in chunks([seq for _, seq in keys]):
                conn.execute(
                    checkpoints.update()
                    .where(checkpoints.c.seq.in_(chunk))
                    .values(synced=True, sync_error=None, synced_at=to_micros(now))
                )

    @_reconnecting
    def _mark_sent(self, keys: list[RowKey], now: datetime) -> None:
        # One UPDATE instead of record_attempt's and mark_synced's: SQLite rewrites a whole
        # 2 KB row to change a flag, so the drain's second UPDATE cost as much as its first.
        # Driver SQL: SQLAlchemy's expansion of a 500-value IN list was a tenth of the drain.
        mark, table = self._sql.mark, self._sql.table
        with self._write("mark rows synced") as conn:
            for chunk in chunks([seq for _, seq in keys]):
                conn.exec_driver_sql(
                    f"UPDATE {table} SET synced = {mark}, sync_error = NULL, synced_at = {mark}, "  # noqa: S608
                    f"attempts = attempts + 1, last_error = NULL "
                    f"WHERE seq IN ({', '.join([mark] * len(chunk))})",
                    (True, to_micros(now), *chunk),
                )

    @_reconnecting
    def _mark_quarantined(self, reasons: dict[RowKey, str], now: datetime) -> None:
        if not reasons:
            return
        stmt = (
            checkpoints.update()
            .where(checkpoints.c.seq == sa.bindparam("row_seq"))
            .values(synced=True, sync_error=sa.bindparam("reason"), synced_at=to_micros(now))
        )
        with self._write("quarantine rows") as conn:
            conn.execute(
                stmt, [{"row_seq": seq, "reason": reason} for (_, seq), reason in reasons.items()]
            )

    def _record_attempt(self, keys: list[RowKey], error: str | None) -> None:
        with self._write("record a send attempt") as conn:
            for chunk in chunks([seq for _, seq in keys]):
                conn.execute(
                    checkpoints.update()
                    .where(checkpoints.c.seq.in_(chunk))
                    .values(attempts=checkpoints.c.attempts + 1, last_error=error)
                )

    @_reconnecting
    def _release(self, keys: list[RowKey] | None) -> int:
        quarantined = _quarantined
        with self._write("release quarantined rows") as conn:
            if keys is None:
                return int(
                    conn.execute(
                        checkpoints.update()
                        .where(quarantined)
                        .values(synced=False, sync_error=None, synced_at=None)
                    ).rowcount
                )
            total = 0
            for chunk in chunks([seq for _, seq in keys]):
                total += conn.execute(
                    checkpoints.update()
                    .where(quarantined, checkpoints.c.seq.in_(chunk))
                    .values(synced=False, sync_error=None, synced_at=None)
                ).rowcount
            return total

    @_reconnecting
    def _outbox(
        self,
        state: str | None,
        project_id: str | None,
        thread_id: str | None,
        after_seq: int | None,
        limit: int | None,
    ) -> list[OutboxEntry]:
        c = checkpoints.c
        query = sa.select(
            c.thread_id,
            c.checkpoint_id,
            c.namespace,
            c.seq,
            c.project_id,
            c.created_at,
            c.size_bytes,
            c.synced,
            c.sync_error,
            c.attempts,
            c.last_error,
            c.synced_at,
            c.step_type,
        ).order_by(c.seq)
        if state == "pending":
            query = query.where(sa.not_(c.synced))
        elif state == "synced":
            query = query.where(c.synced, c.sync_error.is_(None))
        elif state == "quarantined":
            query = query.where(c.sync_error.isnot(None))
        if project_id is not None:
            query = query.where(c.project_id == project_id)
        if thread_id is not None:
            query = query.where(*_thread(thread_id))
        if after_seq is not None:
            query = query.where(c.seq > after_seq)
        if limit is not None:
            query = query.limit(limit)
        with self._one("read the outbox") as conn:
            return [
                OutboxEntry(
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
                    synced_at=_time(r.synced_at),
                    step_type=r.step_type,
                )
                for r in conn.execute(query)
            ]

    @_reconnecting
    def _record_connection(self, connection: Connection) -> None:
        values = {
            "target": connection.target,
            "connected_at": to_micros(connection.connected_at),
            "disconnected_at": _micros(connection.disconnected_at),
            "seen_at": _micros(connection.seen_at),
            "acked_at": _micros(connection.acked_at),
        }
        with self._one("record a connection") as conn:
            conn.execute(
                self._insert_stmt(connections)
                .values(project_id=connection.project_id, **values)
                .on_conflict_do_update(index_elements=["project_id"], set_=values)
            )

    @_reconnecting
    def _forget_connection(self, project_id: str) -> None:
        with self._one("forget a connection") as conn:
            conn.execute(connections.delete().where(connections.c.project_id == project_id))

    @_reconnecting
    def _connections(self) -> list[Connection]:
        with self._one("read connections") as conn:
            return [
                Connection(
                    r.project_id,
                    r.target,
                    from_micros(r.connected_at),
                    _time(r.disconnected_at),
                    _time(r.seen_at),
                    _time(r.acked_at),
                )
                for r in conn.execute(sa.select(connections).order_by(connections.c.project_id))
            ]

    @_reconnecting
    def _record_heartbeat(
        self, project_id: str, seen_at: datetime, acked_at: datetime | None
    ) -> None:
        c = connections.c
        acked = c.acked_at if acked_at is None else to_micros(acked_at)
        with self._one("record a drain heartbeat") as conn:
            conn.execute(
                connections.update()
                .where(c.project_id == project_id)
                .values(seen_at=to_micros(seen_at), acked_at=acked)
            )

    @_reconnecting
    def _outbox_summary(self) -> list[OutboxSummary]:
        # Driver SQL with the partial indexes' own predicates, so neither read touches a
        # synced row (metrics scrape this).
        sql = self._sql
        pending = (
            f"SELECT project_id, COUNT(*), SUM(size_bytes), MIN(created_at) FROM {sql.table} "  # noqa: S608
            f"WHERE {_NOT_SYNCED_SQL[self.provider == 'sqlite']} GROUP BY project_id"
        )
        quarantined = (
            f"SELECT project_id, COUNT(*) FROM {sql.table} WHERE sync_error IS NOT NULL "  # noqa: S608
            "GROUP BY project_id"
        )
        totals: dict[str, dict[str, Any]] = {}
        with self._one("summarise the outbox") as conn:
            for project, rows, size, oldest in conn.exec_driver_sql(pending):
                totals.setdefault(project, {}).update(
                    pending=int(rows), pending_bytes=int(size or 0), oldest_pending_at=_time(oldest)
                )
            for project, rows in conn.exec_driver_sql(quarantined):
                totals.setdefault(project, {})["quarantined"] = int(rows)
        return [OutboxSummary(p, **t) for p, t in sorted(totals.items())]

    # ---- analysis reads

    def _table_name(self, table: sa.Table) -> str:
        quote = self._engine.dialect.identifier_preparer.quote
        schema = self.options.schema
        return f"{quote(schema)}.{quote(table.name)}" if schema else quote(table.name)

    def _stream(
        self, action: str, sql: str, params: Sequence[Any], chunk_size: int
    ) -> Iterator[list[Any]]:
        """Run one SELECT and yield its rows in chunks, never holding the whole result.

        SQLite reads on this thread's own connection with ``fetchmany``; Postgres through a
        server-side cursor (``stream_results``) inside a read transaction.
        """
        if self._local is not None:
            dbapi_error = self._engine.dialect.loaded_dbapi.Error
            try:
                cursor = self._local_connection().execute(sql, tuple(params))
                while rows := cursor.fetchmany(chunk_size):
                    yield rows
            except dbapi_error as exc:
                wrapped = self._driver_error(exc, None)
                raise self._translate(action, wrapped) from wrapped
            return
        with self._read(action) as conn:
            # Room to sort and hash a large store in memory, for this transaction only.
            conn.exec_driver_sql(f"SET LOCAL work_mem = '{ANALYSIS_WORK_MEM}'")
            result = conn.execution_options(yield_per=chunk_size).exec_driver_sql(
                sql, tuple(params)
            )
            while batch := result.fetchmany(chunk_size):
                # Plain tuples: numpy probes each SQLAlchemy Row for array interfaces.
                yield [tuple(row) for row in batch]

    def _checkpoint_columns(
        self, thread_id: str | None, columns: tuple[str, ...], chunk_size: int
    ) -> Iterator[Columns]:
        names = ", ".join(columns)  # validated names of CHECKPOINT_COLUMNS
        sql = f"SELECT {names} FROM {self._sql.table}"  # noqa: S608 - quoted identifiers only
        params: list[Any] = []
        if thread_id is not None:
            sql += f" WHERE tkey = {self._sql.mark} AND thread_id = {self._sql.mark}"
            params = [thread_key(thread_id), thread_id]
        for rows in self._stream("read checkpoint columns", sql, params, chunk_size):
            yield columns_of(columns, rows)

    def _thread_columns(self, chunk_size: int) -> Iterator[Columns]:
        # THREAD_COLUMNS from "owner" on are the ledger's columns, under the same names.
        ledger = THREAD_COLUMNS[THREAD_COLUMNS.index("owner") :]
        ledger_cols = ", ".join("l." + name for name in ledger)
        sql = f"""
WITH t AS ({self._thread_totals()})
SELECT t.thread_id, t.n, t.size, t.first_at, t.newest_at, t.max_gap, t.status, t.run_id,
       {ledger_cols}
FROM t LEFT JOIN {self._table_name(threads)} l ON l.tkey = t.tkey AND l.thread_id = t.thread_id
UNION ALL
SELECT l.thread_id, 0, 0, NULL, NULL, NULL, NULL, NULL, {ledger_cols}
FROM {self._table_name(threads)} l LEFT JOIN t ON t.tkey = l.tkey AND t.thread_id = l.thread_id
WHERE t.tkey IS NULL
"""  # noqa: S608 - quoted identifiers only, no values
        for rows in self._stream("read thread columns", sql, [], chunk_size):
            yield columns_of(THREAD_COLUMNS, rows)

    def _thread_totals(self) -> str:
        """Per thread: count, bytes, first and newest time, longest gap, the newest row's status.

        One pass of ``LAG`` over each thread's rows in write order gives the gaps, grouped by
        the thread key (the 128-bit hash standing for the id, as the sweep's totals): every
        column it reads is in the ``(tkey, seq, created_at, size_bytes)`` index, so the pass
        walks that index in order, with no table read and no sort. The id, status and run come
        from the newest row, by primary key. Measured on 100,000 threads: SQLite 1.8 → 1.2 s,
        Postgres 1.45 → 0.7 s against a window over the table grouped by (key, id).
        """
        cps = self._sql.table
        # SQLite would rather scan the table and sort; the covering index is the faster walk.
        index = f" INDEXED BY {_SWEEP_INDEX.name}" if self.provider == "sqlite" else ""
        return f"""
  SELECT g.tkey, c.thread_id, g.n, g.size, g.first_at, g.newest_at, g.max_gap,
         c.status, c.run_id
  FROM (
    SELECT tkey, count(*) AS n, CAST(sum(size_bytes) AS BIGINT) AS size,
           min(created_at) AS first_at, max(created_at) AS newest_at, max(gap) AS max_gap,
           max(seq) AS newest_seq
    FROM (
      SELECT tkey, seq, created_at, size_bytes,
             created_at - LAG(created_at) OVER (PARTITION BY tkey ORDER BY seq) AS gap
      FROM {cps}{index}
    ) AS w
    GROUP BY tkey
  ) AS g JOIN {cps} c ON c.seq = g.newest_seq"""  # noqa: S608

    def _outbox_columns(self, chunk_size: int) -> Iterator[Columns]:
        sql = f"SELECT {', '.join(OUTBOX_COLUMNS)} FROM {self._sql.table}"  # noqa: S608
        for rows in self._stream("read outbox columns", sql, [], chunk_size):
            yield columns_of(OUTBOX_COLUMNS, rows)

    # ---- sweep

    #: The ThreadRecord fields a thread without a ledger row leaves empty.
    _SWEEP_LEDGER_FIELDS = (
        "owner",
        "run_id",
        "started_at",
        "declared_waiting",
        "declared_finished",
        "finished_at",
        "due_at",
        "lease",
    )

    def _sweep_records(self) -> list[ThreadRecord]:
        ledger, totals, names = self._sweep_rows()
        records = [self._sweep_record(row, totals.get(key)) for key, row in ledger.items()]
        records += [
            self._sweep_record(None, row, names[row[4]])
            for key, row in totals.items()
            if key not in ledger
        ]
        return records

    def _sweep_columns(self) -> SweepColumns:
        # The same rows as _sweep_records, turned into columns in C; a row's ThreadRecord is
        # built only when the plan asks for it (building all 100,000 was half a plan).
        ledger, totals, names = self._sweep_rows()
        pairs: list[tuple[Sequence[Any] | None, Sequence[Any] | None]] = [
            (row, totals.get(key)) for key, row in ledger.items()
        ]
        pairs += [(None, row) for key, row in totals.items() if key not in ledger]
        no_ledger: Sequence[Any] = (None,) * len(threads.c)
        no_totals: Sequence[Any] = (None, 0, 0, None, None)
        values = []
        ids = []
        for lg, t in pairs:
            (_k, n, size, newest_at, newest_seq), row = t or no_totals, lg or no_ledger
            values.append((n, size, newest_at, row[4], row[7], row[8], row[5], row[6], row[12]))
            ids.append(row[1] if lg is not None else names[newest_seq])

        def record(i: int) -> ThreadRecord:
            lg, t = pairs[i]
            return self._sweep_record(lg, t, "" if lg is not None else ids[i])

        return SweepColumns.of(ids, values, record)

    @_reconnecting
    def _sweep_rows(
        self,
    ) -> tuple[dict[Any, Sequence[Any]], dict[Any, Sequence[Any]], dict[int, str]]:
        """The raw ledger rows and totals rows by thread key, and the names of unledgered threads.

        Two statements in one snapshot, on the DBAPI cursor (SQLAlchemy's row layer cost more
        than the queries): per-thread totals from one GROUP BY over the thread index (by
        thread key, the 128-bit hash standing for the id), and the whole ledger. A thread
        with checkpoints but no ledger row takes its id from its newest row.
        """
        table = self._sweep_table
        totals_sql = (
            "SELECT tkey, count(*), sum(size_bytes), max(created_at), max(seq) "  # noqa: S608
            f"FROM {table(checkpoints)} GROUP BY tkey"
        )
        ledger_columns = ", ".join(c.name for c in threads.c)
        action = "read the threads for the sweep"
        with self._read(action) as conn, self._sweep_cursor(action, conn) as cursor:
            cursor.execute(totals_sql)
            totals = {row[0]: row for row in cursor.fetchall()}
            cursor.execute(f"SELECT {ledger_columns} FROM {table(threads)}")  # noqa: S608
            ledger = {row[0]: row for row in cursor.fetchall()}
            unnamed = [row[4] for key, row in totals.items() if key not in ledger]
            names = self._sweep_names(cursor, unnamed)
        return ledger, totals, names

    @contextmanager
    def _sweep_cursor(self, action: str, conn: SAConnection) -> Iterator[Any]:
        """The DBAPI cursor of ``conn``'s transaction; driver errors mapped like every other's."""
        fairy = conn.connection
        cursor = fairy.cursor()
        try:
            yield cursor
        except self._engine.dialect.loaded_dbapi.Error as exc:
            wrapped = self._driver_error(exc, fairy)
            raise self._translate(action, wrapped) from wrapped
        finally:
            cursor.close()

    def _sweep_table(self, table: sa.Table) -> str:
        quote = self._engine.dialect.identifier_preparer.quote
        schema = self.options.schema
        return f"{quote(schema)}.{quote(table.name)}" if schema else quote(table.name)

    def _sweep_names(self, cursor: Any, seqs: list[int]) -> dict[int, str]:
        """The thread id of each of these checkpoint rows (by ``seq``).

        Postgres takes every seq in one text parameter, split server-side (``= ANY``): 500
        placeholders per statement cost psycopg more than the lookups, and dumping a list of
        100,000 ints as an array parameter cost ~0.2 s more than joining them.
        """
        names: dict[int, str] = {}
        mark = self._sql.mark
        if self.provider == "postgres" and seqs:
            cursor.execute(
                f"SELECT seq, thread_id FROM {self._sweep_table(checkpoints)} "  # noqa: S608
                "WHERE seq = ANY(string_to_array(%s, ',')::bigint[])",
                [",".join(map(str, seqs))],
            )
            names.update(cursor.fetchall())
            return names
        for chunk in chunks(seqs):
            cursor.execute(
                f"SELECT seq, thread_id FROM {self._sweep_table(checkpoints)} "  # noqa: S608
                f"WHERE seq IN ({', '.join([mark] * len(chunk))})",
                chunk,
            )
            names.update(cursor.fetchall())
        return names

    @staticmethod
    def _sweep_record(
        ledger: Sequence[Any] | None, totals: Sequence[Any] | None, name: str = ""
    ) -> ThreadRecord:
        """A :class:`ThreadRecord` from a raw ledger row (``threads`` columns in order) and totals row.

        Built without ``ThreadRecord.__post_init__``: it converts each time to UTC, and these
        come from :func:`from_micros`, aware UTC already; the conversion was most of the time a
        100,000-thread plan spent building records.
        """
        n, size, newest_at, newest_seq = totals[1:5] if totals is not None else (0, 0, None, None)
        record = object.__new__(ThreadRecord)
        put = object.__setattr__
        put(record, "checkpoints", int(n))
        put(record, "size_bytes", int(size or 0))
        put(record, "newest_at", None if newest_at is None else from_micros(newest_at))
        put(record, "newest_seq", newest_seq)
        if ledger is None:
            for field in SQLStore._SWEEP_LEDGER_FIELDS:
                put(record, field, None)
            put(record, "thread_id", name)
            return record
        (_k, thread_id, owner, run_id, started, waiting, finished, finished_at, due, holder) = (
            ledger[:10]
        )
        put(record, "thread_id", thread_id)
        put(record, "owner", owner)
        put(record, "run_id", run_id)
        put(record, "started_at", None if started is None else from_micros(started))
        put(record, "declared_waiting", _delta(waiting))
        put(record, "declared_finished", _delta(finished))
        put(record, "finished_at", None if finished_at is None else from_micros(finished_at))
        put(record, "due_at", None if due is None else from_micros(due))
        put(record, "lease", None if holder is None else SQLStore._sweep_lease(ledger))
        return record

    @staticmethod
    def _sweep_lease(ledger: Sequence[Any]) -> Lease:
        thread_id, (holder, run_id, acquired, expires) = ledger[1], ledger[9:13]
        return Lease(
            thread_id=thread_id,
            holder=holder,
            run_id=run_id or "",
            acquired_at=_time(acquired),
            expires_at=from_micros(expires),
        )

    def delete_order(self, thread_ids: Sequence[str]) -> list[str]:
        # By thread key: the indexes a delete rewrites lead with it, so a batch of neighbouring
        # keys rewrites a run of adjacent leaves, where ids in any other order land on a random
        # leaf each (1,000 threads of a 100,000-thread store: about 80 leaves per index instead
        # of about 1,000).
        return sorted(thread_ids, key=thread_key)

    @_reconnecting  # a dropped connection rolls the transaction back: sending it again is sound
    def _delete_threads(self, thread_ids: list[str]) -> dict[str, Deleted]:
        # Set-based, in one transaction, on the transaction's cursor with plain driver SQL and
        # every value bound (compiling SQLAlchemy's expanding IN lists cost a sixth of a sweep).
        # What went is counted by thread key (a SQLite writer waits on BEGIN IMMEDIATE meanwhile).
        keys = [thread_key(t) for t in thread_ids]
        by_key = dict(zip(keys, thread_ids, strict=True))
        counts = {t: [0, 0] for t in thread_ids}
        with (
            self._write("delete threads") as conn,
            self._sweep_cursor("delete threads", conn) as cursor,
        ):
            for tkey, slot, n in self._sweep_deletes(cursor, keys, thread_ids):
                counts[by_key[tkey]][slot] += n
        return {t: Deleted(checkpoints=n, writes=w) for t, (n, w) in counts.items()}

    def _sweep_deletes(
        self, cursor: Any, keys: list[str], thread_ids: list[str]
    ) -> Iterator[tuple[str, int, int]]:
        """Delete the threads from the four tables; ``(tkey, slot, rows)`` for what went, slot 0
        counting checkpoints and 1 pending writes."""
        if self.provider == "postgres":
            # One statement for the four tables, grouped server-side (a row per thread).
            cursor.execute(self._sql.sweep_delete, [",".join(keys), thread_ids])
            yield from cursor.fetchall()
            return
        # A batch dirties a few thousand pages; in SQLite's default 2 MB cache they spill to the
        # WAL mid-transaction and are read back, so the transaction gets 64 MB, given back after.
        (cache,) = cursor.execute("PRAGMA cache_size").fetchone()
        cursor.execute(f"PRAGMA cache_size = -{SWEEP_CACHE_KIB}")
        try:
            for where, params in self._sweepchunks(keys, thread_ids):
                for table, slot in ((checkpoints, 0), (writes, 1), (parks, None), (threads, None)):
                    sql = f"DELETE FROM {self._sweep_table(table)} WHERE {where}"  # noqa: S608
                    if slot is None:
                        cursor.execute(sql, params)
                    else:
                        cursor.execute(sql + " RETURNING tkey", params)
                        yield from ((tkey, slot, 1) for (tkey,) in cursor.fetchall())
        finally:
            cursor.execute(f"PRAGMA cache_size = {int(cache)}")

    @staticmethod
    def _sweepchunks(keys: list[str], thread_ids: list[str]) -> Iterator[tuple[str, list[Any]]]:
        """SQLite: a WHERE clause on ``tkey`` and ``thread_id`` and its parameters per 500 ids."""
        for chunk, ids in zip(chunks(keys), chunks(thread_ids), strict=True):
            marks = ", ".join(["?"] * len(chunk))
            yield f"tkey IN ({marks}) AND thread_id IN ({marks})", [*chunk, *ids]

    @_reconnecting
    def _still_holding(self, thread_ids: list[str]) -> set[str]:
        # One read instead of a second round of four DELETEs that would find nothing: on a
        # 20,000-thread Postgres sweep it took 7,700 threads/s to 13,100 (benchmarks/RESULTS.md).
        keys = [thread_key(t) for t in thread_ids]
        by_key = dict(zip(keys, thread_ids, strict=True))
        found: set[str] = set()
        action = "check threads are empty"
        with self._read(action) as conn, self._sweep_cursor(action, conn) as cursor:
            if self.provider == "postgres":
                cursor.execute(self._sql.sweep_holding, [",".join(keys), thread_ids])
                found.update(by_key[tkey] for (tkey,) in cursor.fetchall())
                return found
            for where, params in self._sweepchunks(keys, thread_ids):
                cursor.execute(
                    f"SELECT tkey FROM {self._sweep_table(checkpoints)} WHERE {where} "  # noqa: S608
                    f"UNION SELECT tkey FROM {self._sweep_table(writes)} WHERE {where}",
                    params + params,
                )
                found.update(by_key[tkey] for (tkey,) in cursor.fetchall())
        return found

    @_reconnecting
    def _unreplicated(self) -> dict[str, int]:
        c = checkpoints.c
        counts: dict[str, int] = {}
        with self._read("read the outbox") as conn:
            # Two queries, each answered from its partial index (pending rows, quarantined rows).
            for where in (_not_synced, _quarantined):
                query = sa.select(c.thread_id, sa.func.count()).where(where).group_by(c.thread_id)
                for thread_id, n in conn.execute(query):
                    counts[thread_id] = counts.get(thread_id, 0) + int(n)
        return counts


# ---------------------------------------------------------------------------- row mapping

_ROW_COLUMNS = [
    checkpoints.c[name]
    for name in (
        "thread_id",
        "namespace",
        "checkpoint_id",
        "run_id",
        "parent_checkpoint_id",
        "runner",
        "agent_id",
        "agent_path",
        "node_id",
        "step",
        "step_type",
        "status",
        "iteration",
        "interrupt_reason",
        "created_at",
        "project_id",
        "state",
        "node_input",
        "node_output",
        "iteration_counters",
        "interrupt_context",
        "metadata",
        "size_bytes",
        "seq",
    )
]


_WRITE_COLUMNS = [
    writes.c[name]
    for name in (
        "thread_id",
        "namespace",
        "checkpoint_id",
        "task_id",
        "idx",
        "channel",
        "value",
        "task_path",
    )
]


def _utf8_len(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def _thread(thread_id: str, table: sa.Table = checkpoints) -> tuple[sa.ColumnElement[bool], ...]:
    return (table.c.tkey == thread_key(thread_id), table.c.thread_id == thread_id)


def _get_params(thread_id: str, namespace: str, checkpoint_id: str) -> tuple[str, ...]:
    """The parameters of ``_HotStatements.get`` and ``.writes``: the two hashes, then the ids."""
    key = checkpoint_key(thread_id, namespace, checkpoint_id)
    return (thread_key(thread_id), key, thread_id, namespace, checkpoint_id)


_INSERT_MANY = checkpoints.insert().returning(checkpoints.c.seq, sort_by_parameter_order=True)
_ENCODED_FIELDS = [f.name for f in dataclasses.fields(EncodedCheckpoint) if f.name != "seq"]


class _HotStatements:
    """The put and read statements as plain driver SQL, built once per store.

    The hot paths run on a DBAPI cursor (:meth:`SQLStore._raw`) and skip SQLAlchemy's
    statement and result layers, which cost more than the query on a 2 KB checkpoint (see
    ``benchmarks/RESULTS.md``): parameters go to the driver as one tuple in its own placeholder
    style, and the table names are qualified with the schema here. Identifiers are quoted by
    the dialect and every value is a bound parameter.
    """

    _INSERTED = (*_ENCODED_FIELDS, "tkey", "ckey", "synced", "attempts")

    def __init__(self, dialect: sa.Dialect, schema: str | None) -> None:
        quote = dialect.identifier_preparer.quote

        def table(t: sa.Table) -> str:
            return f"{quote(schema)}.{quote(t.name)}" if schema else quote(t.name)

        self.mark = mark = "?" if dialect.paramstyle == "qmark" else "%s"
        self.table = table(checkpoints)
        # Postgres compares text in the database's collation; "C" is code point order, which
        # is what LangGraph's string comparison of checkpoint ids means.
        self.by_id = (
            'checkpoint_id COLLATE "C"' if dialect.name == "postgresql" else "checkpoint_id"
        )
        #: ``(tkey, namespace, checkpoint_id)`` is indexed (migration 5, SQLite only).
        self.id_indexed = dialect.name == "sqlite"
        names = ", ".join(quote(c) for c in self._INSERTED)
        marks = ", ".join([mark] * len(self._INSERTED))
        self.insert = f"INSERT INTO {self.table} ({names}) VALUES ({marks}) RETURNING seq"  # noqa: S608
        self.columns = ", ".join(quote(c.name) for c in _ROW_COLUMNS)
        self.get = (
            f"SELECT {self.columns} FROM {self.table} WHERE tkey = {mark} AND ckey = {mark} "  # noqa: S608
            f"AND thread_id = {mark} AND namespace = {mark} AND checkpoint_id = {mark}"
        )
        self.write_columns = ", ".join(quote(c.name) for c in _WRITE_COLUMNS)
        self.writes_table = table(writes)
        self.writes = (
            f"SELECT {self.write_columns} FROM {self.writes_table} WHERE tkey = {mark} AND ckey = {mark} "  # noqa: S608
            f"AND thread_id = {mark} AND namespace = {mark} AND checkpoint_id = {mark} ORDER BY id"
        )
        self._cache: dict[tuple[Any, ...], str] = {}
        # The sweep's statements on Postgres, over a batch of (tkey, thread_id) pairs sent once:
        # the keys as one comma-joined text (hex never holds a comma), the ids as a binary array
        # (psycopg dumps a text array with a regex match per element, and placeholder lists of
        # 1,000 cost it more to parse than the deletes). Each deletes or reads by the pair.
        ids = (
            "WITH ids AS (SELECT * FROM unnest(string_to_array(%s, ','), %b::text[]) "
            "AS ids (tkey, thread_id))"
        )
        by_pair = "USING ids WHERE t.tkey = ids.tkey AND t.thread_id = ids.thread_id"
        deletes = ", ".join(
            f"{name} AS (DELETE FROM {table(t)} AS t {by_pair} RETURNING t.tkey)"  # noqa: S608
            for name, t in (("c", checkpoints), ("w", writes), ("p", parks), ("l", threads))
        )
        #: Every table in one statement, counted per thread server-side.
        self.sweep_delete = (
            f"{ids}, {deletes} SELECT tkey, 0, count(*) FROM c GROUP BY tkey "  # noqa: S608
            "UNION ALL SELECT tkey, 1, count(*) FROM w GROUP BY tkey"
        )
        #: The threads among them still holding a checkpoint or a pending write.
        self.sweep_holding = (
            f"{ids} SELECT t.tkey FROM {table(checkpoints)} AS t, ids "  # noqa: S608
            "WHERE t.tkey = ids.tkey AND t.thread_id = ids.thread_id "
            f"UNION SELECT t.tkey FROM {table(writes)} AS t, ids "
            "WHERE t.tkey = ids.tkey AND t.thread_id = ids.thread_id"
        )

    def thread_rows(
        self,
        *,
        namespace: bool,
        after: bool = False,
        before: bool = False,
        limit: bool,
        by_id: bool,
    ) -> str:
        """A thread's rows (in one namespace, after a seq, before an id), by seq or by id, newest first by id."""
        key = (namespace, after, before, limit, by_id)
        sql = self._cache.get(key)
        if sql is None:
            mark = self.mark
            where = f"tkey = {mark} AND thread_id = {mark}"
            if namespace:
                where += f" AND namespace = {mark}"
            if after:
                where += f" AND seq > {mark}"
            if before:
                where += f" AND {self.by_id} < {mark}"
            order = f"{self.by_id} DESC" if by_id else "seq"
            if limit and by_id and not (namespace and self.id_indexed):
                # Pick the rows by id first, so the sort never carries the payload columns (with
                # a namespace on SQLite, migration 5's index gives the order and nothing sorts).
                where = f"seq IN (SELECT seq FROM {self.table} WHERE {where} ORDER BY {order} LIMIT {mark})"  # noqa: S608
                sql = f"SELECT {self.columns} FROM {self.table} WHERE {where} ORDER BY {order}"  # noqa: S608
            else:
                sql = f"SELECT {self.columns} FROM {self.table} WHERE {where} ORDER BY {order}"  # noqa: S608
                if limit:
                    sql += f" LIMIT {mark}"
            self._cache[key] = sql
        return sql

    def writes_of(self, count: int) -> str:
        """A thread's pending writes under ``count`` checkpoint keys, in write order."""
        key = ("writes_of", count)
        sql = self._cache.get(key)
        if sql is None:
            marks = ", ".join([self.mark] * count)
            sql = self._cache[key] = (
                f"SELECT {self.write_columns} FROM {self.writes_table} "  # noqa: S608
                f"WHERE tkey = {self.mark} AND thread_id = {self.mark} AND ckey IN ({marks}) "
                "ORDER BY id"
            )
        return sql

    def latest(self, *, namespace: bool) -> str:
        """The thread's (or namespace's) row with the highest seq."""
        key = ("latest", namespace)
        sql = self._cache.get(key)
        if sql is None:
            where = f"tkey = {self.mark} AND thread_id = {self.mark}"
            if namespace:
                where += f" AND namespace = {self.mark}"
            sql = self._cache[key] = (
                f"SELECT {self.columns} FROM {self.table} WHERE {where} ORDER BY seq DESC LIMIT 1"  # noqa: S608
            )
        return sql

    @staticmethod
    def insert_params(row: EncodedCheckpoint, synced: bool) -> tuple[Any, ...]:
        values = [getattr(row, name) for name in _ENCODED_FIELDS]
        values[_CREATED_AT] = to_micros(row.created_at)
        return (
            *values,
            thread_key(row.thread_id),
            checkpoint_key(row.thread_id, row.namespace, row.checkpoint_id),
            synced,
            0,
        )


_CREATED_AT = _ENCODED_FIELDS.index("created_at")


def _row_values(row: EncodedCheckpoint, synced: bool) -> dict[str, Any]:
    values = {name: getattr(row, name) for name in _ENCODED_FIELDS}
    values["created_at"] = to_micros(row.created_at)
    values["tkey"] = thread_key(row.thread_id)
    values["ckey"] = checkpoint_key(row.thread_id, row.namespace, row.checkpoint_id)
    values["synced"] = synced
    values["attempts"] = 0
    return values


def _encoded(row: Sequence[Any]) -> EncodedCheckpoint:
    encoded = EncodedCheckpoint(*row)
    encoded.created_at = from_micros(row[_CREATED_AT])
    return encoded


def _write_values(w: EncodedWrite) -> dict[str, Any]:
    return {
        "wkey": _hash(w.thread_id, w.namespace, w.checkpoint_id, w.task_id, str(w.idx)),
        "tkey": thread_key(w.thread_id),
        "ckey": checkpoint_key(w.thread_id, w.namespace, w.checkpoint_id),
        "thread_id": w.thread_id,
        "namespace": w.namespace,
        "checkpoint_id": w.checkpoint_id,
        "task_id": w.task_id,
        "idx": w.idx,
        "channel": w.channel,
        "value": w.value,
        "task_path": w.task_path,
    }


def _lease(row: Any) -> Lease | None:
    if row.lease_holder is None:
        return None
    return Lease(
        thread_id=row.thread_id,
        holder=row.lease_holder,
        run_id=row.lease_run_id or "",
        acquired_at=_time(row.lease_acquired_at),
        expires_at=from_micros(row.lease_expires_at),
    )


def _record(thread_id: str, totals: Any, ledger: Any) -> ThreadRecord:
    return ThreadRecord(
        thread_id=thread_id,
        owner=ledger.owner if ledger is not None else None,
        run_id=ledger.run_id if ledger is not None else None,
        started_at=_time(ledger.started_at) if ledger is not None else None,
        declared_waiting=_delta(ledger.declared_waiting) if ledger is not None else None,
        declared_finished=_delta(ledger.declared_finished) if ledger is not None else None,
        finished_at=_time(ledger.finished_at) if ledger is not None else None,
        due_at=_time(ledger.due_at) if ledger is not None else None,
        lease=_lease(ledger) if ledger is not None else None,
        checkpoints=int(totals.n) if totals is not None else 0,
        size_bytes=int(totals.size or 0) if totals is not None else 0,
        newest_at=_time(totals.newest_at) if totals is not None else None,
        newest_seq=int(totals.newest_seq) if totals is not None else None,
    )


def _park_values(park: Park) -> dict[str, Any]:
    return {
        "tkey": thread_key(park.thread_id),
        "thread_id": park.thread_id,
        "run_id": park.run_id,
        "checkpoint_id": park.checkpoint_id,
        "node_id": park.node_id,
        "runner": park.runner,
        "reason": park.reason,
        "context": codec.dumps(park.context, path="park.context"),
        "deadline": to_micros(park.deadline),
        "created_at": _micros(park.created_at),
        "deadline_source": park.deadline_source,
    }


def _park(row: Any) -> Park:
    return Park(
        thread_id=row.thread_id,
        run_id=row.run_id,
        checkpoint_id=row.checkpoint_id,
        node_id=row.node_id,
        runner=row.runner,
        reason=row.reason,
        context=codec.loads(row.context, path="park.context"),
        deadline=from_micros(row.deadline),
        created_at=_time(row.created_at),
        deadline_source=row.deadline_source,
    )


def _padded_size(n: int) -> int:
    """``n`` rounded up to a power of two, at most one chunk (``chunks``'s size)."""
    return min(1 << (n - 1).bit_length(), CHUNK)


#: A pooled Postgres connection idle longer than this is pinged with a round trip on checkout.
PING_AFTER_IDLE_S = 10.0


_SCHEMA_CHANGED = re.compile(r"no such (table|column)|has no column named")
_CHECK_THE_SCHEMA = (
    "check that the database user may read and write the store's tables and that nothing else "
    "changed them (`durability store reset URL` recreates them, deleting every checkpoint)"
)


def _enable_wal(cursor: sqlite3.Cursor, timeout: float) -> None:
    """Put the database in WAL mode, waiting out a concurrent opener for up to ``timeout`` s.

    WAL is a property of the file, so only the first opener changes it. That change needs an
    exclusive lock and SQLite answers ``database is locked`` at once, without its busy
    handler, when another process is opening the same new file: retry until one of us wins.
    """
    deadline = time.monotonic() + timeout
    pause = 0.005
    while True:
        try:
            if cursor.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
                cursor.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() >= deadline:
                raise
            time.sleep(pause)
            pause = min(pause * 2, 0.1)


def _pre_ping(dbapi_conn: Any, record: Any, _proxy: Any) -> None:
    """Check a pooled Postgres connection before it is used; a dead one is replaced.

    A connection idle for a while gets a real ping (a round trip: it catches links that a
    firewall dropped silently). One used moments ago gets a local check instead: a server
    that ended the session (restart, ``pg_terminate_backend``) has closed the socket, so an
    idle connection with anything to read is dead. This keeps the pessimistic guarantee of
    SQLAlchemy's ``pool_pre_ping`` without a round trip on every put and read.
    """
    idle_since = record.info.get("durability_idle_since")
    try:
        if idle_since is None or time.monotonic() - idle_since > PING_AFTER_IDLE_S:
            dbapi_conn.execute("SELECT 1")
        elif select.select([dbapi_conn.pgconn.socket], [], [], 0)[0]:
            raise sa_exc.DisconnectionError("the server closed the connection")
    except sa_exc.DisconnectionError:
        raise
    except Exception as exc:  # any failure to talk to it: let the pool connect afresh
        raise sa_exc.DisconnectionError(str(exc)) from exc


def _mark_idle(_dbapi_conn: Any, record: Any) -> None:
    record.info["durability_idle_since"] = time.monotonic()


def _on_begin(conn: SAConnection) -> None:
    # The DBAPI connection is in autocommit; a transaction is opened here, only when asked.
    begin = conn.get_execution_options().get("durability_begin")
    if begin:
        conn.exec_driver_sql(begin)


def _driver_url(url: str) -> str:
    """Map the URL spellings users write to the driver this store uses (psycopg 3)."""
    for prefix in ("postgresql://", "postgres://", "postgresql+psycopg2://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    return url


def _advisory_key(schema: str | None) -> int:
    return int(_hash("durability-setup", schema or "")[:15], 16)


def _driver_message(exc: sa_exc.DBAPIError | sa_exc.SQLAlchemyError) -> str:
    original = getattr(exc, "orig", None)
    text = str(original) if original is not None else str(exc)
    return text.strip().splitlines()[0][:300] if text.strip() else type(exc).__name__
