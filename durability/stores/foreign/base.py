"""The base of the read-only foreign stores: stores other tools wrote, read in place.

A foreign store (``fastaiagent+sqlite:///local.db``, ``langgraph+postgresql://…``) keeps the
:class:`~durability.stores.Store` contract's reads — ``latest``, ``get``, ``history``,
``threads``, ``thread``, ``writes`` and, where the source keeps them, parks and outbox state —
mapped onto the durability model, so every frame, plot and notebook works on it unchanged.
Every write refuses with :class:`~durability.errors.ReadOnlyStoreError`, before anything is
sent to the database; so does every capability the source lacks (it keeps no ledger).

* SQLite files are opened with a ``mode=ro`` URI (and ``PRAGMA query_only``): WAL content is
  read, nothing is written, the file stays byte-identical, and the SDK that owns it keeps
  running beside the notebook (WAL readers never block its writer).
* Postgres is read in one read-only transaction per call (``SET TRANSACTION READ ONLY``).
* The format-generation check is skipped: these stores are not in durability's format and
  are never written, so there is no generation to record or compare. Each reader checks the
  source's own schema instead (the tables and columns it reads) and refuses clearly when
  they are missing.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import Connection as SAConnection

from durability._util import redact_url
from durability.errors import (
    ConfigError,
    ReadOnlyStoreError,
    StoreError,
    StoreUnavailable,
)
from durability.model import Checkpoint, Park, PendingWrite
from durability.stores.base import Store
from durability.stores.outbox import ConnectionRecord, Outbox, RowKey
from durability.stores.parks import Parks
from durability.stores.readonly import ReadOnlyWrites
from durability.stores.rows import EncodedCheckpoint, Select

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")


@dataclass(frozen=True, slots=True)
class Row:
    """A foreign checkpoint, already mapped onto the model."""

    checkpoint: Checkpoint

    @property
    def thread_id(self) -> str:
        return self.checkpoint.thread_id

    @property
    def namespace(self) -> str:
        return self.checkpoint.namespace

    @property
    def checkpoint_id(self) -> str:
        return self.checkpoint.checkpoint_id

    def decode(self) -> Checkpoint:
        return self.checkpoint


@dataclass(frozen=True, slots=True)
class WrittenRow:
    """A foreign pending write, already mapped onto the model."""

    write: PendingWrite

    def decode(self) -> PendingWrite:
        return self.write


class ForeignStore(ReadOnlyWrites, Store):
    """A store another tool wrote, read in place and never written.

    Subclasses set ``source`` (``fastaiagent``, ``langgraph``) and implement the reads.
    """

    source: str = ""

    def __init__(self, url: str, *, schema: str | None = None, **kwargs: Any) -> None:
        super().__init__(url=url, **kwargs)
        scheme, _, rest = url.partition("://")
        backend = scheme.split("+", 1)[1] if "+" in scheme else ""
        self.provider = f"{self.source}-{'sqlite' if backend == 'sqlite' else 'postgres'}"
        sa_url = sa.make_url(
            ("sqlite" if backend == "sqlite" else "postgresql+psycopg") + "://" + rest
        )
        query_schema = sa_url.query.get("schema")
        self.schema: str | None = schema or (
            query_schema if isinstance(query_schema, str) else None
        )
        self.url_options = {
            k: v
            for k, v in sa_url.query.items()
            if k in self.url_option_names and isinstance(v, str)
        }
        sa_url = sa_url.difference_update_query(["schema", *self.url_option_names])
        if backend == "sqlite":
            if self.schema:
                raise ConfigError(
                    f"cannot open {redact_url(url)}: a SQLite file has no schemas; drop schema="
                )
            self.path = Path(sa_url.database or "")
            self.engine = _sqlite_read_only(self.path, url)
        elif backend in ("postgresql", "postgres", "postgresql+psycopg"):
            self.schema = self.schema or self.default_schema
            if self.schema is not None and not _IDENTIFIER.fullmatch(self.schema):
                raise ConfigError(
                    f"cannot open {redact_url(url)}: schema {self.schema!r} is not a plain SQL "
                    "identifier (letters, digits and _, not starting with a digit)"
                )
            self.engine = sa.create_engine(sa_url, pool_pre_ping=True, pool_size=2)
        else:
            raise ConfigError(
                f"cannot open {redact_url(url)}: use {self.source}+sqlite:///path or "
                f"{self.source}+postgresql://user@host/db"
            )
        self.dialect = "sqlite" if backend == "sqlite" else "postgres"

    #: The Postgres schema read when the URL names none (``None``: the search path).
    default_schema: str | None = None

    #: Query parameters of the URL the subclass reads (``url_options``), not sent to the driver.
    url_option_names: tuple[str, ...] = ()

    def close(self) -> None:
        self.engine.dispose()

    def table(self, name: str) -> str:
        """The quoted, schema-qualified name of a source table (identifiers are validated)."""
        return f'"{self.schema}"."{name}"' if self.schema else f'"{name}"'

    @contextmanager
    def read(self, action: str) -> Iterator[SAConnection]:
        """One read-only transaction; driver errors become :mod:`durability.errors`."""
        try:
            with self.engine.connect() as conn, conn.begin():
                if self.dialect == "postgres":
                    conn.exec_driver_sql("SET TRANSACTION READ ONLY")
                yield conn
        except StoreError:
            raise
        except (sa_exc.OperationalError, sa_exc.InterfaceError) as exc:
            raise StoreUnavailable(
                f"cannot {action}: the {self.source} store {redact_url(self.url)} cannot be "
                f"read ({_first_line(exc)}); check the path or server"
            ) from exc
        except sa_exc.DBAPIError as exc:
            raise StoreError(
                f"cannot {action} in the {self.source} store {redact_url(self.url)}: "
                f"{_first_line(exc)}"
            ) from exc

    def require_tables(self, conn: SAConnection, *names: str) -> None:
        """Refuse a database that lacks the source's tables (not a store of this kind)."""
        if self.dialect == "sqlite":
            found = set(
                conn.exec_driver_sql(
                    "SELECT name FROM sqlite_master WHERE type = 'table'"
                ).scalars()
            )
        else:
            found = set(
                conn.execute(
                    sa.text(
                        "SELECT table_name FROM information_schema.tables WHERE table_schema = "
                        "coalesce(:schema, current_schema())"
                    ),
                    {"schema": self.schema},
                ).scalars()
            )
        missing = [n for n in names if n not in found]
        if missing:
            where = f" schema {self.schema!r}" if self.schema else ""
            raise StoreError(
                f"cannot read {redact_url(self.url)} as a {self.source} store: {where or 'it'} "
                f"has no {', '.join(missing)} table; point the URL at a store {self.source} wrote"
            )

    # ------------------------------------------------------------------ lifecycle

    def ready(self) -> None:
        """Check the source's schema once; no format generation is read or recorded (see module)."""
        if self._ready:
            return
        with self._ready_lock:
            if not self._ready:
                self._setup()
                self._ready = True

    def _read_generation(self) -> int | None:
        return None  # a foreign store records none; ready() never asks

    # ------------------------------------------------------------------ reads

    def select_clause(
        self, query: Select, *, thread: str, namespace: str | None
    ) -> tuple[str, dict[str, Any], str] | None:
        """``query`` as a WHERE clause, its parameters and an ORDER BY over the source's columns.

        ``thread`` and ``namespace`` name the source's columns (``namespace=None``: the source
        has none, so only the root namespace holds rows; ``None`` is returned for another).
        """
        if namespace is None and query.namespace:
            return None
        by_id = 'checkpoint_id COLLATE "C"' if self.dialect == "postgres" else "checkpoint_id"
        where = [f"{thread} = :t"]
        params: dict[str, Any] = {"t": query.thread_id}
        for clause, name, value in (
            (f"{namespace} = :ns", "ns", query.namespace if namespace else None),
            ("checkpoint_id = :c", "c", query.checkpoint_id),
            ("seq > :after", "after", query.after_seq),
            (f"{by_id} < :before", "before", query.before_id),
        ):
            if value is not None:
                where.append(clause)
                params[name] = value
        order = {"seq": "seq", "seq_desc": "seq DESC", "id_desc": f"{by_id} DESC"}[query.order]
        return " AND ".join(where), params, order

    # ------------------------------------------------------------------ writes refuse

    def refuse(self, action: str) -> ReadOnlyStoreError:
        """The refusal of a write: this store is opened read-only."""
        return ReadOnlyStoreError(
            f"cannot {action}: the {self.source} store {redact_url(self.url)} is opened "
            "read-only (durability reads foreign stores in place and never writes to them); "
            f"copy the threads into a durability store to change them"
        )


class ForeignParks(Parks):
    """The parks a foreign store records, read-only."""

    store: ForeignStore

    def park(
        self,
        checkpoint: Checkpoint,
        *,
        deadline: datetime | None,
        reason: str = "",
        context: Any = None,
        deadline_source: str = "declared",
        synced: bool = False,
    ) -> tuple[Checkpoint, Park]:
        """Refused: read-only (before the park rules, which would refuse for another reason)."""
        raise self.store.refuse("park a run")

    def _insert(self, row: EncodedCheckpoint, park: Park, *, synced: bool) -> int:
        raise self.store.refuse("park a run")

    def _claim(self, thread_id: str) -> Park | None:
        raise self.store.refuse("claim a park")


class ForeignOutbox(Outbox):
    """The replication state a foreign store records (its own SDK drains it), read-only."""

    store: ForeignStore

    def _fetch(
        self, limit: int, project_id: str | None, exclude: Collection[RowKey]
    ) -> list[EncodedCheckpoint]:
        raise self.store.refuse("drain the outbox (its own SDK drains it)")

    def _mark_synced(self, keys: list[RowKey], now: datetime) -> None:
        raise self.store.refuse("mark rows synced")

    def _mark_quarantined(self, reasons: dict[RowKey, str], now: datetime) -> None:
        raise self.store.refuse("quarantine rows")

    def _record_attempt(self, keys: list[RowKey], error: str | None) -> None:
        raise self.store.refuse("record a send attempt")

    def _release(self, keys: list[RowKey] | None, now: datetime) -> int:
        raise self.store.refuse("release quarantined rows")

    def _record_connection(self, connection: ConnectionRecord) -> None:
        raise self.store.refuse("record a connection")

    def _forget_connection(self, project_id: str) -> None:
        raise self.store.refuse("forget a connection")

    def _connections(self) -> list[ConnectionRecord]:
        return []


def _sqlite_read_only(path: Path, url: str) -> sa.Engine:
    if not path.is_file():
        raise ConfigError(
            f"cannot open {redact_url(url)}: {str(path)!r} is not a file; give the path of an "
            "existing database (a foreign store is only read, never created)"
        )
    uri = path.resolve().as_uri() + "?mode=ro"

    def connect() -> sqlite3.Connection:
        conn = sqlite3.connect(uri, uri=True, check_same_thread=False, timeout=5.0)
        conn.execute("PRAGMA query_only = 1")
        return conn

    return sa.create_engine("sqlite://", creator=connect, poolclass=sa.pool.QueuePool, pool_size=2)


def _first_line(exc: BaseException) -> str:
    text = str(getattr(exc, "orig", None) or exc).strip()
    return text.splitlines()[0][:300] if text else type(exc).__name__


def parse_time(value: Any) -> datetime | None:
    """An aware UTC datetime from an ISO text or a datetime (naive means UTC), else ``None``."""
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            return None
    if not isinstance(value, datetime):
        return None
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
