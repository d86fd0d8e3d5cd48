"""The SQL store's database plumbing: engines, connections, transactions and the error boundary.

* SQLite (``sqlite:///path.db``, the embedded default): WAL journal, a busy timeout, and
  ``BEGIN IMMEDIATE`` for every multi-statement write so concurrent writers (threads or
  processes) queue instead of failing half-way. ``synchronous=NORMAL`` by default: a committed
  checkpoint survives the process being killed; on power loss the last commits may roll back
  (pass ``synchronous="FULL"`` to fsync every commit).
* Postgres (``postgresql+psycopg://…``, ``?schema=name`` optional, created if missing): a
  bounded pool whose checkout pre-pings (see :func:`_pre_ping`), sessions named
  ``durability``; an idempotent operation that meets a dropped connection runs once more
  (:func:`reconnecting`).

Connections run in autocommit: a single statement (a put, a read, a claim) is one round trip,
and a multi-statement operation opens its transaction itself. Driver errors become
:mod:`durability.errors` in :meth:`Database.translate`, the one boundary.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import re
import select
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import Connection as SAConnection
from sqlalchemy.engine import Engine

from durability._util import redact_url
from durability.errors import ConfigError, DurabilityError, StoreError, StoreUnavailable

#: Postgres ``work_mem`` of an analysis read's transaction (its sorts and hashes stay in memory).
ANALYSIS_WORK_MEM = "64MB"

#: A pooled Postgres connection idle longer than this is pinged with a round trip on checkout.
PING_AFTER_IDLE_S = 10.0

_SCHEMA_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")
_SCHEMA_CHANGED = re.compile(r"no such (table|column)|has no column named")
CHECK_THE_SCHEMA = (
    "check that the database user may read and write the store's tables and that nothing else "
    "changed them (`durability store reset URL` recreates them, deleting every checkpoint)"
)

_Primitive = TypeVar("_Primitive", bound=Callable[..., Any])


@dataclasses.dataclass(frozen=True, slots=True)
class Options:
    """How a SQL store talks to its database (see :class:`~durability.stores.sql.SQLStore`)."""

    schema: str | None = None
    synchronous: str = "NORMAL"
    busy_timeout_ms: int = 30_000
    pool_size: int = 5
    max_overflow: int = 10
    wal_autocheckpoint: int = 10_000


def dropped(exc: StoreUnavailable) -> bool:
    """Whether the server dropped the connection the operation used (then a retry is sound)."""
    cause = exc.__cause__
    return isinstance(cause, sa_exc.DBAPIError) and bool(cause.connection_invalidated)


def reconnecting(method: _Primitive) -> _Primitive:
    """Run an idempotent primitive once more, on a fresh connection, if the server dropped its own.

    Reads and idempotent writes only: a claim or a park is never sent twice.
    """

    @functools.wraps(method)
    def again(*args: Any, **kwargs: Any) -> Any:
        try:
            return method(*args, **kwargs)
        except StoreUnavailable as exc:
            if not dropped(exc):
                raise
            return method(*args, **kwargs)

    return again  # type: ignore[return-value]


class Database:
    """One SQL store's engine, its per-thread SQLite connections and its error boundary."""

    def __init__(self, url: str, sa_url: sa.URL, options: Options, engine: Engine | None) -> None:
        self.url = url
        self.options = options
        self.provider = "sqlite" if sa_url.get_backend_name() == "sqlite" else "postgres"
        self.sqlite = self.provider == "sqlite"
        if engine is None:
            self.engine = self._build_engine(sa_url)
        else:
            self.engine = engine.execution_options(isolation_level="AUTOCOMMIT")
        if options.schema:
            self.engine = self.engine.execution_options(schema_translate_map={None: options.schema})
        sa.event.listen(self.engine, "begin", _on_begin)
        # SQLite's hot paths use a connection per thread (see execute); Postgres's use the pool.
        self._local: threading.local | None = (
            threading.local() if self.sqlite and engine is None else None
        )
        self.path = sa_url.database or ""
        self._locals: dict[int, tuple[threading.Thread, sqlite3.Connection]] = {}
        self._locals_lock = threading.Lock()
        self._pid = os.getpid()
        self.mark = "?" if self.engine.dialect.paramstyle == "qmark" else "%s"

    def _build_engine(self, sa_url: sa.URL) -> Engine:
        with self.errors("open the store"):
            if self.sqlite:
                if (sa_url.database or "") in ("", ":memory:"):
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
        enable_wal(cursor, self.options.busy_timeout_ms / 1000)
        cursor.execute(f"PRAGMA synchronous = {self.options.synchronous}")
        cursor.close()

    def close(self) -> None:
        """Close the pool and every thread's SQLite connection."""
        self.engine.dispose()
        with self._locals_lock:
            for _thread, conn in self._locals.values():
                conn.close()
            self._locals.clear()

    def table(self, name: str) -> str:
        """A table's name, quoted and qualified with the schema, for driver SQL."""
        quote = self.engine.dialect.identifier_preparer.quote
        schema = self.options.schema
        return f"{quote(schema)}.{quote(name)}" if schema else quote(name)

    # ------------------------------------------------------------------ errors

    @contextmanager
    def errors(self, action: str) -> Iterator[None]:
        """Driver errors raised inside become :mod:`durability.errors` (see :meth:`translate`)."""
        try:
            yield
        except StoreError:
            raise
        except sa_exc.SQLAlchemyError as exc:
            raise self.translate(action, exc) from exc

    def translate(self, action: str, exc: sa_exc.SQLAlchemyError) -> DurabilityError:
        """The one mapping of driver errors to :mod:`durability.errors`."""
        where = redact_url(self.url)
        message = _driver_message(exc)
        if isinstance(exc, sa_exc.IntegrityError):
            return StoreError(
                f"cannot {action} in {where}: the database refused it ({message}); {CHECK_THE_SCHEMA}"
            )
        if isinstance(exc, sa_exc.DataError):  # a value, not the schema: the store is unchanged
            return StoreError(
                f"cannot {action} in {where}: the database cannot hold a value it was given "
                f"({message}); change that value (its text cannot hold NUL characters, its "
                "integers 64 bits)"
            )
        if _SCHEMA_CHANGED.search(message):  # SQLite says so as an OperationalError
            return StoreError(f"cannot {action} in {where}: {message}; {CHECK_THE_SCHEMA}")
        if isinstance(
            exc,
            sa_exc.OperationalError
            | sa_exc.InterfaceError
            | sa_exc.DisconnectionError
            | sa_exc.TimeoutError,
        ):
            return StoreUnavailable(
                f"cannot {action}: the database {where} is unavailable ({message}); "
                "check that it is running and reachable, then retry"
            )
        if isinstance(exc, sa_exc.NoSuchModuleError):
            return ConfigError(
                f"cannot {action} at {where}: {message}; use sqlite:///path.db or "
                "postgresql+psycopg://user@host/db (install durability-toolkit[postgres] for psycopg)"
            )
        return StoreError(f"cannot {action} in {where}: {message}; {CHECK_THE_SCHEMA}")

    def driver_error(self, exc: Exception, fairy: Any) -> sa_exc.SQLAlchemyError:
        """A raw driver error as SQLAlchemy's, invalidating the pooled connection if it is gone."""
        dialect = self.engine.dialect
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

    # ------------------------------------------------------------------ statements

    def execute(self, action: str, sql: str, params: Sequence[Any]) -> list[Any]:
        """Run one statement in autocommit on a DBAPI connection; return its rows.

        The hot paths (put, latest, get, history, writes) come here and skip SQLAlchemy's
        statement and result layers. On SQLite each thread keeps a connection of its own; on
        Postgres a pooled one is checked out (and pre-pinged) per call.
        """
        if self._local is not None:
            conn = self._local_connection()
            try:
                return conn.execute(sql, params).fetchall()
            except sqlite3.Error as exc:
                wrapped = self.driver_error(exc, None)
                raise self.translate(action, wrapped) from wrapped
        try:
            fairy = self.engine.raw_connection()
        except sa_exc.SQLAlchemyError as exc:
            raise self.translate(action, exc) from exc
        try:
            cursor = fairy.cursor()
            cursor.execute(sql, params)
            rows = list(cursor.fetchall())
            cursor.close()
            return rows
        except self.engine.dialect.loaded_dbapi.Error as exc:
            wrapped = self.driver_error(exc, fairy)
            raise self.translate(action, wrapped) from wrapped
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
            conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
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
    def write(self, action: str) -> Iterator[SAConnection]:
        """A write transaction (``BEGIN IMMEDIATE`` on SQLite, so concurrent writers queue)."""
        with self.errors(action), self.engine.connect() as conn:
            begin = "BEGIN IMMEDIATE" if self.sqlite else "BEGIN"
            with conn.execution_options(durability_begin=begin).begin():
                yield conn

    @contextmanager
    def read(self, action: str) -> Iterator[SAConnection]:
        """A read transaction: several statements that see one snapshot (SQLite WAL)."""
        with (
            self.errors(action),
            self.engine.connect() as conn,
            conn.execution_options(durability_begin="BEGIN").begin(),
        ):
            yield conn

    @contextmanager
    def one(self, action: str) -> Iterator[SAConnection]:
        """One statement, committed on its own (autocommit): a single round trip."""
        with self.errors(action), self.engine.connect() as conn:
            yield conn

    @contextmanager
    def cursor(self, action: str, conn: SAConnection, **options: Any) -> Iterator[Any]:
        """The DBAPI cursor of ``conn``'s transaction (``options`` go to the driver's
        ``cursor()``); driver errors mapped like every other's."""
        fairy = conn.connection
        cursor = fairy.cursor(**options)
        try:
            yield cursor
        except self.engine.dialect.loaded_dbapi.Error as exc:
            wrapped = self.driver_error(exc, fairy)
            raise self.translate(action, wrapped) from wrapped
        finally:
            cursor.close()

    def stream(
        self, action: str, sql: str, params: Sequence[Any], chunk_size: int, *, whole: bool = True
    ) -> Iterator[list[Any]]:
        """Run one SELECT and yield its rows in chunks, never holding the whole result.

        SQLite reads on this thread's own connection with ``fetchmany``; Postgres through the
        driver's server-side (named) cursor inside a read transaction. ``whole=False`` (a
        read of one thread's rows): Postgres reads them on a plain cursor, with none of a
        whole-store read's settings — each is a round trip, and a sample reads many threads.
        """
        if self._local is not None:
            try:
                cursor = self._local_connection().execute(sql, tuple(params))
                while rows := cursor.fetchmany(chunk_size):
                    yield rows
            except sqlite3.Error as exc:
                wrapped = self.driver_error(exc, None)
                raise self.translate(action, wrapped) from wrapped
            return
        with self.read(action) as conn:
            options: dict[str, Any] = {}
            if whole:
                # Room to sort and hash a large store in memory, for this transaction only; no
                # JIT (compiling a scan of 10,000,000 rows took 1-2 s of CPU, the scan gained
                # less); the driver's own server-side cursor, its rows plain tuples (SQLAlchemy's
                # Row layer cost more than the statement on 1,000,000 rows, and numpy probes
                # each Row) in binary (the driver parses no text: a fifth of such a read).
                conn.exec_driver_sql(f"SET LOCAL work_mem = '{ANALYSIS_WORK_MEM}'")
                conn.exec_driver_sql("SET LOCAL jit = off")
                options = {"name": "durability_stream", "binary": True}
            with self.cursor(action, conn, **options) as cursor:
                cursor.execute(sql, tuple(params))
                while rows := cursor.fetchmany(chunk_size):
                    yield list(rows)


def check_options(url: str, provider: str, options: Options, single_worker: bool) -> None:
    """Refuse options the provider cannot use, naming the option."""
    where = redact_url(url)
    if provider == "sqlite" and options.schema:
        raise ConfigError(
            f"cannot open {where}: a SQLite store has no schemas; drop schema={options.schema!r}"
        )
    if options.schema is not None and not _SCHEMA_NAME.fullmatch(options.schema):
        raise ConfigError(
            f"cannot open {where}: schema {options.schema!r} is not a plain SQL identifier "
            "(letters, digits and _, not starting with a digit, at most 63 characters)"
        )
    if options.synchronous not in ("NORMAL", "FULL", "EXTRA", "OFF"):
        raise ConfigError(
            f"cannot open {where}: synchronous={options.synchronous!r} is not NORMAL, FULL, EXTRA or OFF"
        )
    if single_worker and provider != "sqlite":
        raise ConfigError(
            f"cannot open {where} with single_worker=True: that option is for SQLite; "
            "a Postgres store already holds parks for any worker"
        )


def enable_wal(cursor: sqlite3.Cursor, timeout: float) -> None:
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


def driver_url(url: str) -> str:
    """Map the URL spellings users write to the driver this store uses (psycopg 3)."""
    for prefix in ("postgresql://", "postgres://", "postgresql+psycopg2://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    return url


def _driver_message(exc: sa_exc.DBAPIError | sa_exc.SQLAlchemyError) -> str:
    original = getattr(exc, "orig", None)
    text = str(original) if original is not None else str(exc)
    return text.strip().splitlines()[0][:300] if text.strip() else type(exc).__name__
