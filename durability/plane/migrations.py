"""The plane database's versioned migrations, recorded in ``plane_migrations``.

:func:`migrate` runs every migration the database has not recorded, in order, in one
transaction that holds the database's write lock (Postgres: an advisory lock; SQLite:
``BEGIN IMMEDIATE``), so planes starting together over one database migrate it once. A database
made before migrations were recorded (generation 1 of the plane) has its tables but no
``plane_migrations``: the first migration finds its tables there and the second rekeys its rows.

1. ``base tables``: every table and index of today's shape that is missing.
2. ``rows keyed per execution``: a row is keyed by (tenant, execution, namespace, checkpoint id),
   as the stores key it, no longer by (tenant, checkpoint id), under which a second thread's
   ``step-1`` was dropped; ``idkey`` keeps the id alone for a plane that keeps ids unique.
3. ``erasure``: keys may carry the erase permission (``can_erase``, false for existing keys);
   the tenants' erasure secrets and the tombstones of erased executions.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import orjson
import sqlalchemy as sa
from sqlalchemy.engine import Connection as SAConnection

from durability.clock import system_clock, to_micros
from durability.plane.schema import (
    IDKEY_INDEX,
    checkpoint_key,
    checkpoints,
    id_key,
    metadata,
    migrations,
    namespace_of,
    tenant_secrets,
    tombstones,
)

#: Rows rekeyed per statement batch.
REKEY_BATCH = 2000
#: The advisory lock a Postgres plane takes while it migrates ("plane" in ASCII).
_PG_LOCK = 0x706C616E65


def _base_tables(conn: SAConnection) -> None:
    """Version 1: every table and index of today's shape that is missing."""
    metadata.create_all(conn)


def _execution_keys(conn: SAConnection) -> None:
    """Version 2: add ``idkey`` where missing, then rekey every row by its execution and namespace."""
    columns = {c["name"] for c in sa.inspect(conn).get_columns("plane_checkpoints")}
    if "idkey" not in columns:
        conn.exec_driver_sql("ALTER TABLE plane_checkpoints ADD COLUMN idkey VARCHAR(64)")
    IDKEY_INDEX.create(conn, checkfirst=True)
    c = checkpoints.c
    update = (
        checkpoints.update()
        .where(c.id == sa.bindparam("row_id"))
        .values(ckey=sa.bindparam("new_ckey"), idkey=sa.bindparam("new_idkey"))
    )
    after = -1
    while True:
        rows = conn.execute(
            sa.select(c.id, c.tenant, c.execution_id, c.checkpoint_id, c.metadata)
            .where(c.id > after)
            .order_by(c.id)
            .limit(REKEY_BATCH)
        ).all()
        if not rows:
            return
        conn.execute(update, [_rekeyed(r) for r in rows])
        after = rows[-1].id


def _rekeyed(row: Any) -> dict[str, Any]:
    try:
        namespace = namespace_of(orjson.loads(row.metadata))
    except orjson.JSONDecodeError:  # the plane stored it as JSON; never fail a migration on it
        namespace = ""
    return {
        "row_id": row.id,
        "new_ckey": checkpoint_key(row.tenant, row.execution_id, namespace, row.checkpoint_id),
        "new_idkey": id_key(row.tenant, row.checkpoint_id),
    }


def _erasure(conn: SAConnection) -> None:
    """Version 3: the erase permission on keys, tenant secrets and tombstones."""
    columns = {c["name"] for c in sa.inspect(conn).get_columns("plane_api_keys")}
    if "can_erase" not in columns:
        default = "0" if conn.dialect.name == "sqlite" else "FALSE"
        conn.exec_driver_sql(
            f"ALTER TABLE plane_api_keys ADD COLUMN can_erase BOOLEAN NOT NULL DEFAULT {default}"
        )
    tenant_secrets.create(conn, checkfirst=True)
    tombstones.create(conn, checkfirst=True)


#: The ordered migrations; the index + 1 is the version recorded in ``plane_migrations``.
MIGRATIONS: Sequence[tuple[str, Callable[[SAConnection], None]]] = (
    ("base tables", _base_tables),
    ("rows keyed per execution", _execution_keys),
    ("erasure", _erasure),
)


def migrate(engine: sa.Engine) -> list[int]:
    """Apply the migrations ``engine``'s database has not recorded; returns their versions."""
    with _locked(engine) as conn:
        migrations.create(conn, checkfirst=True)
        applied = set(conn.execute(sa.select(migrations.c.version)).scalars())
        done = []
        for version, (name, step) in enumerate(MIGRATIONS, start=1):
            if version in applied:
                continue
            step(conn)
            conn.execute(
                migrations.insert().values(
                    version=version, name=name, applied_at=to_micros(system_clock())
                )
            )
            done.append(version)
        return done


def applied_migrations(engine: sa.Engine) -> list[int]:
    """The migration versions recorded in the plane database."""
    with engine.connect() as conn:
        return sorted(conn.execute(sa.select(migrations.c.version)).scalars())


@contextmanager
def _locked(engine: sa.Engine) -> Iterator[SAConnection]:
    """One transaction holding the database's write lock from its first statement."""
    if engine.dialect.name != "sqlite":
        with engine.begin() as conn:
            conn.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": _PG_LOCK})
            yield conn
        return
    # pysqlite opens a transaction only before DML, so a migration's DDL would run outside
    # it: drive the transaction by hand, IMMEDIATE so a second plane waits for the first.
    with engine.connect() as raw:
        conn = raw.execution_options(isolation_level="AUTOCOMMIT")
        conn.exec_driver_sql("BEGIN IMMEDIATE")
        try:
            yield conn
        except BaseException:
            conn.exec_driver_sql("ROLLBACK")
            raise
        conn.exec_driver_sql("COMMIT")


__all__ = ["MIGRATIONS", "applied_migrations", "migrate"]
