"""The plane's tables and the keys its rows are found by (SQLAlchemy Core).

Every key is a SHA-256 of the tenant's hash and the ids it names, so long ids index in a fixed
64 characters and one tenant's keys never meet another's. :mod:`durability.plane.migrations`
brings an existing database to this shape.
"""

from __future__ import annotations

import hashlib

import sqlalchemy as sa

from durability.replication.wire import EXTENSION_KEY

_BIGINT = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
_HASH = sa.String(64)

metadata = sa.MetaData()

domains = sa.Table(
    "plane_domains",
    metadata,
    sa.Column("domain_id", sa.String(255), primary_key=True),
    sa.Column("connected_state_plane", sa.Boolean(create_constraint=False), nullable=False),
    sa.Column("updated_at", sa.BigInteger, nullable=False),
)

api_keys = sa.Table(
    "plane_api_keys",
    metadata,
    sa.Column("key_hash", _HASH, primary_key=True),
    sa.Column("key_id", sa.String(32), nullable=False, unique=True),
    sa.Column("domain_id", sa.String(255), nullable=False),
    sa.Column("project_id", sa.Text, nullable=False),
    sa.Column("created_at", sa.BigInteger, nullable=False),
    sa.Column("revoked_at", sa.BigInteger),
    # Whether the key may call the erase route (migration 3 adds it, false for older keys).
    sa.Column(
        "can_erase", sa.Boolean(create_constraint=False), nullable=False, server_default=sa.false()
    ),
)

#: Each tenant's erasure secret, made on its first erasure (the key of its tombstones' hashes).
tenant_secrets = sa.Table(
    "plane_tenant_secrets",
    metadata,
    sa.Column("tenant", _HASH, primary_key=True),
    sa.Column("secret", sa.String(64), nullable=False),
)

#: Erased executions: the HMAC of the execution id under the tenant's secret, when, which key.
tombstones = sa.Table(
    "plane_tombstones",
    metadata,
    sa.Column("ekey", _HASH, primary_key=True),
    sa.Column("tenant", _HASH, nullable=False),
    sa.Column("erased_at", sa.BigInteger, nullable=False),
    sa.Column("erased_by", sa.String(32), nullable=False),
    sa.Column("removed", sa.BigInteger, nullable=False),
)

agents = sa.Table(
    "plane_agents",
    metadata,
    sa.Column("akey", _HASH, primary_key=True),
    sa.Column("tenant", _HASH, nullable=False),
    sa.Column("name", sa.Text, nullable=False),
    sa.Column("agent_id", sa.String(36), nullable=False),
    sa.Column("definition", sa.Text, nullable=False),
    sa.Column("version", sa.Integer, nullable=False),
    sa.Column("updated_at", sa.BigInteger, nullable=False),
)

checkpoints = sa.Table(
    "plane_checkpoints",
    metadata,
    sa.Column("id", _BIGINT, primary_key=True, autoincrement=True),
    sa.Column("tenant", _HASH, nullable=False),
    sa.Column("ckey", _HASH, nullable=False, unique=True),
    sa.Column("ekey", _HASH, nullable=False),
    # The checkpoint id alone within the tenant (what a plane keeping ids unique looks up);
    # nullable only because migration 2 adds it to tables that already hold rows.
    sa.Column("idkey", _HASH),
    sa.Column("checkpoint_id", sa.Text, nullable=False),
    sa.Column("execution_id", sa.Text, nullable=False),
    sa.Column("resource_type", sa.String(16), nullable=False),
    sa.Column("agent_id", sa.Text),
    sa.Column("chain_id", sa.Text),
    sa.Column("node_id", sa.Text, nullable=False),
    sa.Column("step_index", sa.BigInteger),
    sa.Column("step_type", sa.Text),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("parent_checkpoint_id", sa.Text),
    sa.Column("state_snapshot", sa.Text, nullable=False),
    sa.Column("metadata", sa.Text, nullable=False),
    sa.Column("created_at", sa.Text),
    sa.Column("order_at", sa.BigInteger, nullable=False),
    sa.Column("sequence", sa.BigInteger),
    sa.Column("received_at", sa.BigInteger, nullable=False),
    sqlite_autoincrement=True,
)
sa.Index(
    "ix_plane_checkpoints_run",
    checkpoints.c.tenant,
    checkpoints.c.ekey,
    checkpoints.c.order_at,
    checkpoints.c.id,
)
IDKEY_INDEX = sa.Index("ix_plane_checkpoints_idkey", checkpoints.c.idkey)


#: The item fields of a :class:`Row`'s values stored as they are: every column but the row id,
#: the key hashes and the two times the plane adds.
ROW_FIELDS = tuple(
    c.name
    for c in checkpoints.c
    if c.name not in ("id", "tenant", "ckey", "ekey", "idkey", "order_at", "received_at")
)


def key_hash(*parts: str) -> str:
    return hashlib.sha256("\x00".join(parts).encode("utf-8", "surrogatepass")).hexdigest()


def checkpoint_key(tenant_key: str, execution_id: str, namespace: str, checkpoint_id: str) -> str:
    """What identifies a stored row: its tenant, execution, namespace and checkpoint id."""
    return key_hash(tenant_key, execution_id, namespace, checkpoint_id)


def id_key(tenant_key: str, checkpoint_id: str) -> str:
    """The checkpoint id alone within the tenant (a plane keeping ids unique looks this up)."""
    return key_hash(tenant_key, checkpoint_id)


def execution_key(tenant_key: str, execution_id: str) -> str:
    """What groups an execution's rows."""
    return key_hash(tenant_key, execution_id)


def namespace_of(metadata: object) -> str:
    """The namespace an item's extension object names (``""`` without one: a foreign client)."""
    extension = metadata.get(EXTENSION_KEY) if isinstance(metadata, dict) else None
    namespace = extension.get("namespace") if isinstance(extension, dict) else None
    return namespace if isinstance(namespace, str) else ""


migrations = sa.Table(
    "plane_migrations",
    metadata,
    sa.Column("version", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("name", sa.Text, nullable=False),
    sa.Column("applied_at", sa.BigInteger, nullable=False),
)
