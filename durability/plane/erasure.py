"""The plane's erasure: tombstones of erased executions, under a per-tenant secret.

The plane is a passive replica that never deletes on its own: :func:`erase` runs only for a key
created with the erase permission. It records the tombstone first (the HMAC-SHA-256 of the
execution id under the tenant's secret, the time, the key's id; never the id), then deletes the
execution's rows, in one transaction that on Postgres holds the checkpoint table's ``SHARE ROW
EXCLUSIVE`` lock, so an ingest in flight commits first (and is erased) and a later one sees the
tombstone. Ingest answers items of a tombstoned execution with a per-item rejection
(:func:`erased_among`, checked after its insert in the same transaction); reads serve nothing.
"""

from __future__ import annotations

import hmac
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

import sqlalchemy as sa
from sqlalchemy.engine import Connection as SAConnection

from durability.clock import from_micros, system_clock, to_micros
from durability.plane.schema import checkpoints, execution_key, tenant_secrets, tombstones

if TYPE_CHECKING:
    from durability.plane.storage import PlaneStorage, Tenant

#: The reason a rejection gives for an item of an erased execution.
ERASED_REASON = "its execution was erased on this plane; rows of an erased execution are refused"


@dataclass(frozen=True, slots=True)
class PlaneErasure:
    """What one erase call did: the tombstone's hash and time, rows removed, whether it was new."""

    tombstone: str
    erased_at: datetime
    removed: int
    already_erased: bool


def _secret(
    conn: SAConnection, storage: PlaneStorage, tenant_key: str, *, create: bool
) -> bytes | None:
    """The tenant's erasure secret; made on first use when ``create`` (race-safe), else ``None``
    for a tenant that never erased."""
    if create:
        conn.execute(
            storage._insert(tenant_secrets)
            .values(tenant=tenant_key, secret=secrets.token_hex(32))
            .on_conflict_do_nothing(index_elements=["tenant"])
        )
    found = conn.execute(
        sa.select(tenant_secrets.c.secret).where(tenant_secrets.c.tenant == tenant_key)
    ).scalar()
    return None if found is None else bytes.fromhex(found)


def _hash(secret: bytes, execution_id: str) -> str:
    return hmac.digest(secret, execution_id.encode("utf-8", "surrogatepass"), "sha256").hex()


def erase(storage: PlaneStorage, tenant: Tenant, execution_id: str) -> PlaneErasure:
    """Tombstone the execution, then delete its rows (idempotent: a second call removes none)."""
    with storage._write_lock, storage._tx() as conn:
        if not storage.sqlite:
            conn.exec_driver_sql("LOCK TABLE plane_checkpoints IN SHARE ROW EXCLUSIVE MODE")
        secret = _secret(conn, storage, tenant.key, create=True)
        assert secret is not None
        digest = _hash(secret, execution_id)
        now = to_micros(system_clock())
        inserted = conn.execute(
            storage._insert(tombstones)
            .values(
                ekey=digest, tenant=tenant.key, erased_at=now, erased_by=tenant.key_id, removed=0
            )
            .on_conflict_do_nothing(index_elements=["ekey"])
            .returning(tombstones.c.ekey)
        ).first()
        removed = conn.execute(
            checkpoints.delete().where(
                checkpoints.c.tenant == tenant.key,
                checkpoints.c.ekey == execution_key(tenant.key, execution_id),
                checkpoints.c.execution_id == execution_id,
            )
        ).rowcount
        if removed:
            conn.execute(
                tombstones.update()
                .where(tombstones.c.ekey == digest)
                .values(removed=tombstones.c.removed + removed)
            )
        at = conn.execute(
            sa.select(tombstones.c.erased_at).where(tombstones.c.ekey == digest)
        ).scalar_one()
    return PlaneErasure(digest, from_micros(at), removed, already_erased=inserted is None)


def erased_among(
    conn: SAConnection, storage: PlaneStorage, tenant: Tenant, execution_ids: Iterable[str]
) -> set[str]:
    """The execution ids among these that the tenant erased (read on ``conn``)."""
    wanted = set(execution_ids)
    secret = _secret(conn, storage, tenant.key, create=False) if wanted else None
    if secret is None:
        return set()
    by_hash = {_hash(secret, e): e for e in wanted}
    found = conn.execute(
        sa.select(tombstones.c.ekey).where(tombstones.c.ekey.in_(list(by_hash)))
    ).scalars()
    return {by_hash[h] for h in found}


def drop_erased(conn: SAConnection, tenant: Tenant, execution_ids: Iterable[str]) -> None:
    """Delete rows of these (erased) executions that an ingest racing the erase just wrote."""
    keys = [execution_key(tenant.key, e) for e in execution_ids]
    conn.execute(
        checkpoints.delete().where(checkpoints.c.tenant == tenant.key, checkpoints.c.ekey.in_(keys))
    )
