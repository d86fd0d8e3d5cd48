"""The plane's storage: API keys, entitlements, agents and replicated checkpoints (SQLAlchemy Core).

SQLite by default, Postgres for real use; every process is stateless over the one database, so
planes scale out behind a load balancer. Every query names the tenant (domain and project of
the key) in its key hashes and its ``WHERE`` clause, so one tenant can never read another's
rows. Long ids are indexed through a SHA-256 hash (a 10 KB execution id works).

Checkpoints are insert-only and keyed as the stores key them: by tenant, execution, namespace
(the extension object's, ``""`` without one) and checkpoint id, so two threads may both hold
``step-1``. A re-sent row is not stored again (the first write wins). A plane that must keep
checkpoint ids unique per tenant (``unique_ids``, compatibility mode) refuses an id another
execution already holds, naming both; it never drops one silently. "Latest" is the last row by
the client's ``created_at`` (a row without a readable one counts at its arrival), then arrival
order. The schema evolves through :mod:`durability.plane.migrations`.
"""

from __future__ import annotations

import hashlib
import secrets
import threading
import uuid
from collections.abc import Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql as pg_dialect
from sqlalchemy.dialects import sqlite as sqlite_dialect
from sqlalchemy.engine import Connection as SAConnection

from durability._util import chunks, redact_url
from durability.clock import from_micros, system_clock, to_micros
from durability.errors import ConfigError
from durability.plane import erasure
from durability.plane.migrations import migrate
from durability.plane.schema import (
    ROW_FIELDS,
    agents,
    api_keys,
    checkpoint_key,
    checkpoints,
    domains,
    execution_key,
    id_key,
    key_hash,
)
from durability.replication.wire import ids_checksum


def hash_key(api_key: str) -> str:
    """How an API key is stored: its SHA-256 (a key is 256 random bits, so a fast hash is enough)."""
    return hashlib.sha256(api_key.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True, slots=True)
class Tenant:
    """Who a key belongs to: a domain and a project, and whether the domain is entitled."""

    domain_id: str
    project_id: str
    entitled: bool
    key_id: str
    #: Whether the key may erase executions (``create_key(…, can_erase=True)``).
    can_erase: bool = False

    @property
    def key(self) -> str:
        """The hash every row of this tenant carries."""
        return key_hash(self.domain_id, self.project_id)


@dataclass(frozen=True, slots=True)
class NewKey:
    """A key just made: ``api_key`` is shown once and never stored."""

    api_key: str
    key_id: str
    domain_id: str
    project_id: str


@dataclass(frozen=True, slots=True)
class Row:
    """One validated item, ready to insert; ``namespace`` is the extension object's."""

    checkpoint_id: str
    execution_id: str
    namespace: str
    values: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Conflict:
    """An item a plane keeping checkpoint ids unique refused: another execution holds its id."""

    checkpoint_id: str
    execution_id: str
    namespace: str
    holder: str

    @property
    def reason(self) -> str:
        return (
            f"its checkpoint_id is already stored for execution {self.holder[:80]!r}; this "
            "plane keeps checkpoint ids unique per project"
        )


def _now() -> int:
    return to_micros(system_clock())


def order_micros(created_at: Any, fallback: int | None) -> int | None:
    """The ordering time of an item: its ``created_at`` when readable (no offset: UTC), else ``fallback``."""
    if isinstance(created_at, str) and created_at:
        try:
            parsed = datetime.fromisoformat(created_at)
        except ValueError:
            return fallback
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=UTC)
        return to_micros(parsed)
    return fallback


class PlaneStorage:
    """The plane's database. ``url``: a SQLAlchemy URL (``sqlite:///plane.db``, ``postgresql+psycopg://…``)."""

    def __init__(self, url: str) -> None:
        self.url = url
        for prefix in ("postgresql://", "postgres://"):
            if url.startswith(prefix):
                url = "postgresql+psycopg://" + url[len(prefix) :]
        try:
            sa_url = sa.make_url(url)
        except sa.exc.ArgumentError as exc:
            raise ConfigError(
                f"cannot open the plane database {redact_url(self.url)!r}: not a database URL; "
                "use sqlite:///plane.db or postgresql+psycopg://user@host/db"
            ) from exc
        self.sqlite = sa_url.get_backend_name() == "sqlite"
        if self.sqlite:
            self.engine = sa.create_engine(sa_url, pool_size=8, max_overflow=16)
            sa.event.listen(self.engine, "connect", _sqlite_pragmas)
        else:
            self.engine = sa.create_engine(sa_url, pool_size=8, max_overflow=8, pool_pre_ping=True)
        migrate(self.engine)
        #: Held by this process's writers of checkpoints on SQLite (one writer at a time there).
        self._write_lock: AbstractContextManager[Any] = (
            threading.Lock() if self.sqlite else nullcontext()
        )
        self._mark = "?" if self.engine.dialect.paramstyle == "qmark" else "%s"
        quote = self.engine.dialect.identifier_preparer.quote
        columns = ("tenant", "ckey", "ekey", "idkey", *ROW_FIELDS, "order_at", "received_at")
        self._insert_checkpoints = (
            f"INSERT INTO plane_checkpoints ({', '.join(quote(c) for c in columns)}) "  # noqa: S608
            f"VALUES ({', '.join([self._mark] * len(columns))}) ON CONFLICT (ckey) DO NOTHING"
        )

    def __repr__(self) -> str:
        return f"<PlaneStorage {redact_url(self.url)}>"

    def close(self) -> None:
        self.engine.dispose()

    @contextmanager
    def _tx(self) -> Iterator[SAConnection]:
        with self.engine.begin() as conn:
            yield conn

    @property
    def _insert(self) -> Any:
        return sqlite_dialect.insert if self.sqlite else pg_dialect.insert

    # ------------------------------------------------------------------ keys and domains

    def create_key(
        self,
        domain_id: str,
        project_id: str,
        *,
        entitled: bool | None = None,
        can_erase: bool = False,
    ) -> NewKey:
        """Make an API key for (domain, project); ``entitled`` also sets the domain's entitlement.

        ``can_erase`` lets the key call the erase route (the plane deletes nothing otherwise).
        """
        for what, value in (("domain", domain_id), ("project", project_id)):
            if (
                not isinstance(value, str)
                or not value.strip()
                or len(value) > 255
                or "\x00" in value
            ):
                raise ConfigError(
                    f"cannot create a key: the {what} {str(value)[:80]!r} must be a non-empty name "
                    "of at most 255 characters without NUL"
                )
        api_key = "dpk_" + secrets.token_urlsafe(32)
        key_id = secrets.token_hex(6)
        with self._tx() as conn:
            conn.execute(
                api_keys.insert().values(
                    key_hash=hash_key(api_key),
                    key_id=key_id,
                    domain_id=domain_id,
                    project_id=project_id,
                    created_at=_now(),
                    can_erase=can_erase,
                )
            )
            self._set_domain(conn, domain_id, entitled)
        return NewKey(api_key, key_id, domain_id, project_id)

    def set_entitlement(self, domain_id: str, entitled: bool) -> None:
        """Grant or revoke the domain's ``connected_state_plane`` entitlement."""
        with self._tx() as conn:
            self._set_domain(conn, domain_id, entitled)

    def _set_domain(self, conn: SAConnection, domain_id: str, entitled: bool | None) -> None:
        values = {"connected_state_plane": bool(entitled), "updated_at": _now()}
        stmt = self._insert(domains).values(domain_id=domain_id, **values)
        if entitled is None:
            conn.execute(stmt.on_conflict_do_nothing(index_elements=["domain_id"]))
        else:
            conn.execute(stmt.on_conflict_do_update(index_elements=["domain_id"], set_=values))

    def authenticate(self, api_key: str) -> Tenant | None:
        """The tenant of an unrevoked key, or ``None`` (the key is looked up by its hash)."""
        if not api_key:
            return None
        query = (
            sa.select(
                api_keys.c.domain_id,
                api_keys.c.project_id,
                api_keys.c.key_id,
                api_keys.c.can_erase,
                domains.c.connected_state_plane,
            )
            .select_from(api_keys.outerjoin(domains, domains.c.domain_id == api_keys.c.domain_id))
            .where(api_keys.c.key_hash == hash_key(api_key), api_keys.c.revoked_at.is_(None))
        )
        with self.engine.connect() as conn:
            row = conn.execute(query).first()
        if row is None:
            return None
        return Tenant(
            row.domain_id,
            row.project_id,
            bool(row.connected_state_plane),
            row.key_id,
            bool(row.can_erase),
        )

    def entitled_domains(self) -> list[tuple[str, bool]]:
        with self.engine.connect() as conn:
            return [
                (r.domain_id, bool(r.connected_state_plane))
                for r in conn.execute(sa.select(domains).order_by(domains.c.domain_id))
            ]

    # ------------------------------------------------------------------ agents

    def upsert_agent(self, tenant: Tenant, name: str, definition: dict[str, Any]) -> dict[str, Any]:
        """Register (or update, by name within the tenant) an agent; returns its plane record."""
        akey = key_hash(tenant.key, name)
        with self._write_lock, self._tx() as conn:
            current = conn.execute(
                sa.select(agents).where(agents.c.akey == akey, agents.c.tenant == tenant.key)
            ).first()
            agent_id = current.agent_id if current is not None else str(uuid.uuid4())
            version = (current.version + 1) if current is not None else 1
            values = {
                "definition": orjson.dumps(definition).decode(),
                "version": version,
                "updated_at": _now(),
            }
            stmt = self._insert(agents).values(
                akey=akey, tenant=tenant.key, name=name, agent_id=agent_id, **values
            )
            conn.execute(stmt.on_conflict_do_update(index_elements=["akey"], set_=values))
        return {"id": agent_id, "agent_id": agent_id, "name": name, "version": version}

    # ------------------------------------------------------------------ checkpoints

    def insert(
        self, tenant: Tenant, rows: Sequence[Row], *, unique_ids: bool = False
    ) -> tuple[int, list[Conflict]]:
        """Insert new rows; returns how many were stored and the items refused as conflicts.

        A row already stored (same execution, namespace and checkpoint id), in this batch or
        before, is a re-send: not stored again, not a conflict, whatever changed in it (an
        ``agent_id`` resolved since, say). With ``unique_ids`` a checkpoint id another execution
        (or namespace) holds is refused, in the batch or across batches.

        One driver-SQL ``INSERT … ON CONFLICT (ckey) DO NOTHING`` with parameter tuples (for a
        batch of 500 rows SQLAlchemy's per-parameter processing cost more than SQLite's own
        insert); what it stored is its row count, so a re-send needs no look-up first. On
        SQLite, writers of this process take turns on a lock (not the busy handler's sleeps).
        """
        if not rows:
            return 0, []
        tenant_key = tenant.key
        by_key: dict[str, Row] = {}
        for row in rows:
            key = checkpoint_key(tenant_key, row.execution_id, row.namespace, row.checkpoint_id)
            by_key.setdefault(key, row)
        conflicts: list[Conflict] = []
        with self._write_lock, self._tx() as conn:
            fresh = by_key
            if unique_ids:
                stored = self._existing(conn, "ckey", "ckey", list(by_key))
                fresh = {k: r for k, r in by_key.items() if k not in stored}
                fresh = self._unique_ids(conn, tenant_key, fresh, conflicts)
            if not fresh:
                return 0, conflicts
            inserted = conn.exec_driver_sql(
                self._insert_checkpoints, self._values(tenant_key, fresh)
            ).rowcount
            # An erase that committed while this insert waited for its lock: its rows go.
            late = erasure.erased_among(
                conn, self, tenant, {r.execution_id for r in fresh.values()}
            )
            if late:
                erasure.drop_erased(conn, tenant, late)
        return inserted, conflicts

    def _values(self, tenant_key: str, fresh: dict[str, Row]) -> list[tuple[Any, ...]]:
        """The insert's parameter tuples (an execution's key hashed once per batch)."""
        received = _now()
        execution_keys: dict[str, str] = {}
        values = []
        for ckey, row in fresh.items():
            ekey = execution_keys.get(row.execution_id)
            if ekey is None:
                ekey = execution_keys[row.execution_id] = execution_key(
                    tenant_key, row.execution_id
                )
            order_at = row.values["order_at"]
            values.append(
                (
                    tenant_key,
                    ckey,
                    ekey,
                    id_key(tenant_key, row.checkpoint_id),
                    *[row.values[name] for name in ROW_FIELDS],
                    received if order_at is None else order_at,
                    received,
                )
            )
        return values

    def erased(self, tenant: Tenant, execution_ids: Iterable[str]) -> set[str]:
        """The execution ids among these that the tenant erased."""
        with self.engine.connect() as conn:
            return erasure.erased_among(conn, self, tenant, execution_ids)

    def erase(self, tenant: Tenant, execution_id: str) -> erasure.PlaneErasure:
        """Tombstone the execution, then delete its rows (see :mod:`durability.plane.erasure`)."""
        return erasure.erase(self, tenant, execution_id)

    def _existing(
        self, conn: SAConnection, column: str, value: str, keys: list[str]
    ) -> dict[str, Any]:
        """``{column: value}`` of the stored rows whose ``column`` is one of ``keys``."""
        found: dict[str, Any] = {}
        for chunk in chunks(keys):
            marks = ", ".join([self._mark] * len(chunk))
            query = f"SELECT {column}, {value} FROM plane_checkpoints WHERE {column} IN ({marks})"  # noqa: S608
            found.update((r[0], r[1]) for r in conn.exec_driver_sql(query, tuple(chunk)))
        return found

    def _unique_ids(
        self,
        conn: SAConnection,
        tenant_key: str,
        fresh: dict[str, Row],
        conflicts: list[Conflict],
    ) -> dict[str, Row]:
        """The fresh rows whose checkpoint id no other execution holds (stored or earlier in
        the batch); the others are listed in ``conflicts``."""
        ids = {id_key(tenant_key, row.checkpoint_id) for row in fresh.values()}
        holders: dict[str, str] = self._existing(conn, "idkey", "execution_id", list(ids))
        kept = {}
        for ckey, row in fresh.items():
            ikey = id_key(tenant_key, row.checkpoint_id)
            holder = holders.get(ikey)
            if holder is None:
                holders[ikey] = row.execution_id
                kept[ckey] = row
            else:
                conflicts.append(
                    Conflict(row.checkpoint_id, row.execution_id, row.namespace, holder)
                )
        return kept

    def _run_query(self, tenant: Tenant, execution_id: str) -> sa.Select[Any]:
        return sa.select(checkpoints).where(
            checkpoints.c.tenant == tenant.key,
            checkpoints.c.ekey == execution_key(tenant.key, execution_id),
            checkpoints.c.execution_id == execution_id,
        )

    def latest(self, tenant: Tenant, execution_id: str) -> dict[str, Any] | None:
        """The execution's latest item, or ``None``."""
        query = (
            self._run_query(tenant, execution_id)
            .order_by(checkpoints.c.order_at.desc(), checkpoints.c.id.desc())
            .limit(1)
        )
        with self.engine.connect() as conn:
            row = conn.execute(query).first()
        return None if row is None else item_of(row)

    def history(
        self, tenant: Tenant, execution_id: str, *, limit: int, cursor: str | None
    ) -> tuple[list[dict[str, Any]], str | None]:
        """One page of the execution's items, oldest first, and the cursor of the next page."""
        query = self._run_query(tenant, execution_id)
        after = _parse_cursor(cursor)
        if after is not None:
            at, ident = after
            query = query.where(
                sa.or_(
                    checkpoints.c.order_at > at,
                    sa.and_(checkpoints.c.order_at == at, checkpoints.c.id > ident),
                )
            )
        query = query.order_by(checkpoints.c.order_at, checkpoints.c.id).limit(limit + 1)
        with self.engine.connect() as conn:
            rows = list(conn.execute(query))
        more = len(rows) > limit
        rows = rows[:limit]
        next_cursor = f"{rows[-1].order_at}.{rows[-1].id}" if more and rows else None
        return [item_of(r) for r in rows], next_cursor

    def runs(
        self, tenant: Tenant, *, limit: int, cursor: str | None
    ) -> tuple[list[dict[str, Any]], str | None]:
        """One page of run health: per execution its latest row, its checkpoint count and its health."""
        c = checkpoints.c
        where = [c.tenant == tenant.key]
        if cursor:
            where.append(c.ekey > cursor)
        ranked = (
            sa.select(
                c.ekey,
                c.execution_id,
                c.resource_type,
                c.agent_id,
                c.chain_id,
                c.node_id,
                c.step_index,
                c.step_type,
                c.status,
                c.created_at,
                c.received_at,
                sa.func.row_number()
                .over(partition_by=c.ekey, order_by=(c.order_at.desc(), c.id.desc()))
                .label("rn"),
                sa.func.count().over(partition_by=c.ekey).label("checkpoints"),
            )
            .where(*where)
            .subquery()
        )
        query = sa.select(ranked).where(ranked.c.rn == 1).order_by(ranked.c.ekey).limit(limit + 1)
        with self.engine.connect() as conn:
            rows = list(conn.execute(query))
        more = len(rows) > limit
        rows = rows[:limit]
        items = [
            {
                "execution_id": r.execution_id,
                "health": health(r.step_type, r.status),
                "status": r.status,
                "node_id": r.node_id,
                "step_index": r.step_index,
                "step_type": r.step_type,
                "checkpoints": int(r.checkpoints),
                "resource_type": r.resource_type,
                "agent_id": r.agent_id,
                "chain_id": r.chain_id,
                "last_created_at": r.created_at,
                "last_received_at": from_micros(r.received_at).isoformat(),
            }
            for r in rows
        ]
        return items, (rows[-1].ekey if more and rows else None)

    def digest(
        self, tenant: Tenant, execution_ids: Sequence[str], *, with_ids: bool = False
    ) -> list[dict[str, Any]]:
        """Per execution: how many rows the tenant holds and the checksum of their checkpoint
        ids (:func:`~durability.replication.wire.ids_checksum`); with ``with_ids``, the ids too.
        States are never read."""
        c = checkpoints.c
        held: dict[str, list[str]] = {e: [] for e in execution_ids}
        keys = {execution_key(tenant.key, e): e for e in held}
        with self.engine.connect() as conn:
            for chunk in chunks(list(keys)):
                query = sa.select(c.ekey, c.execution_id, c.checkpoint_id).where(
                    c.tenant == tenant.key, c.ekey.in_(chunk)
                )
                for ekey, execution_id, checkpoint_id in conn.execute(query):
                    if keys.get(ekey) == execution_id:
                        held[execution_id].append(checkpoint_id)
        return [
            {
                "execution_id": e,
                "count": len(ids),
                "checksum": ids_checksum(ids),
                **({"checkpoint_ids": sorted(ids)} if with_ids else {}),
            }
            for e, ids in held.items()
        ]

    def count(self, tenant: Tenant | None = None) -> int:
        """How many checkpoints the plane holds (for one tenant)."""
        query = sa.select(sa.func.count()).select_from(checkpoints)
        if tenant is not None:
            query = query.where(checkpoints.c.tenant == tenant.key)
        with self.engine.connect() as conn:
            return int(conn.execute(query).scalar_one())


def health(step_type: str | None, status: str) -> str:
    """A run's health from its latest row: ``completed`` only with a run end, else ``last step done``."""
    if step_type == "run_end":
        return "failed" if status == "failed" else "completed"
    if status in ("interrupted", "failed"):
        return status
    return "last step done"


def item_of(row: Any) -> dict[str, Any]:
    """A stored row as the wire item it came from (plus ``received_at``)."""
    return {
        "checkpoint_id": row.checkpoint_id,
        "execution_id": row.execution_id,
        "resource_type": row.resource_type,
        "agent_id": row.agent_id,
        "chain_id": row.chain_id,
        "node_id": row.node_id,
        "step_index": row.step_index,
        "step_type": row.step_type,
        "status": row.status,
        "parent_checkpoint_id": row.parent_checkpoint_id,
        "state_snapshot": orjson.loads(row.state_snapshot),
        "metadata": orjson.loads(row.metadata),
        "created_at": row.created_at,
        "sequence": row.sequence,
        "received_at": from_micros(row.received_at).isoformat(),
    }


def _parse_cursor(cursor: str | None) -> tuple[int, int] | None:
    if not cursor:
        return None
    at, _, ident = cursor.partition(".")
    try:
        return int(at), int(ident)
    except ValueError:
        raise ConfigError(
            f"cursor {cursor[:80]!r} is not one this plane issued; start from the first page"
        ) from None


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    cursor = dbapi_conn.cursor()
    cursor.execute("PRAGMA busy_timeout = 30000")
    cursor.execute("PRAGMA journal_mode = WAL")
    cursor.execute("PRAGMA synchronous = NORMAL")
    # 64 MiB of page cache per connection (the default is 2 MB): every ingest inserts into
    # the checkpoint-key index at random places, so a plane holding more than a few
    # thousand rows otherwise reads index pages back from disk on every batch.
    cursor.execute("PRAGMA cache_size = -65536")
    # Checkpoint the WAL every ~40 MB rather than every 4 MB (three 500-row batches): fewer,
    # larger copies into the database file, as the stores do.
    cursor.execute("PRAGMA wal_autocheckpoint = 10000")
    cursor.close()
